#!/bin/sh
# Start Debian's docker-registry on 127.0.0.1:5000 with its storage under /tmp, for the tests.
# Idempotent: does nothing when something already answers /v2/ there. Waits until it answers.
set -eu

ADDR=127.0.0.1:5000
URL="http://$ADDR/v2/"
BASE="${MESHTOP_REGISTRY_DIR:-/tmp/meshtop-registry}"
BIN=/usr/bin/docker-registry

answers() {
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL" 2>/dev/null || true)
    [ "$code" = 200 ] || [ "$code" = 401 ]
}

if answers; then
    echo "registry already answers at $URL"
    exit 0
fi

if [ ! -x "$BIN" ]; then
    echo "error: $BIN is missing: install Debian's package docker-registry (apt-get install docker-registry)" >&2
    exit 1
fi

mkdir -p "$BASE/storage"
cat > "$BASE/config.yml" <<CONFIG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $BASE/storage
  delete:
    enabled: true
http:
  addr: $ADDR
CONFIG

nohup "$BIN" serve "$BASE/config.yml" >"$BASE/registry.log" 2>&1 &
echo $! >"$BASE/registry.pid"

i=0
while ! answers; do
    i=$((i + 1))
    if [ "$i" -ge 100 ]; then
        echo "error: the registry did not answer at $URL within 10s; see $BASE/registry.log:" >&2
        tail -n 20 "$BASE/registry.log" >&2 || true
        exit 1
    fi
    sleep 0.1
done
echo "registry answers at $URL (pid $(cat "$BASE/registry.pid"), storage $BASE/storage)"
