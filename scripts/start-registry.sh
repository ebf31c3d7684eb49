#!/bin/sh
# Start Debian's docker-registry on 127.0.0.1:5000 with its storage under /tmp, for the tests, and a second
# one serving TLS on port 5443.
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

if [ ! -x "$BIN" ]; then
    echo "error: $BIN is missing: install Debian's package docker-registry (apt-get install docker-registry)" >&2
    exit 1
fi

if answers; then
    echo "registry already answers at $URL"
else

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
fi

# A second registry serving TLS with a certificate of our own CA, on 127.0.0.1:5443, named by a host
# name that is not "localhost" or a loopback literal (so meshtop treats it as a secure registry and
# verifies it against certs.d's CA) while every byte stays on loopback: /etc/hosts maps the name to
# 127.0.0.1. Its CA, certificate and the host:port tests use are under $TLS.
TLS="${MESHTOP_REGISTRY_TLS_DIR:-/tmp/meshtop-registry-tls}"
TLS_PORT=5443
tls_answers() {
    code=$(curl -sk -o /dev/null -w '%{http_code}' --max-time 2 "https://127.0.0.1:$TLS_PORT/v2/" 2>/dev/null || true)
    [ "$code" = 200 ] || [ "$code" = 401 ]
}
NAME=registry.meshtop.test
if ! grep -qE "^127\.0\.0\.1[[:space:]].*\b$NAME\b" /etc/hosts; then
    sudo_cmd=""
    [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
    echo "127.0.0.1 $NAME" | $sudo_cmd tee -a /etc/hosts >/dev/null
fi
if tls_answers && [ "$(cat "$TLS/host" 2>/dev/null)" = "$NAME:$TLS_PORT" ]; then
    echo "TLS registry already answers at https://$(cat "$TLS/host")/v2/"
    exit 0
fi
# One set up another way (an earlier version of this script) is stopped and set up again.
if [ -f "$TLS/registry.pid" ]; then
    kill "$(cat "$TLS/registry.pid")" 2>/dev/null || true
    sleep 0.5
fi
if ! command -v openssl >/dev/null 2>&1; then
    echo "error: openssl is missing: install Debian's package openssl" >&2
    exit 1
fi
mkdir -p "$TLS/storage"
(
    cd "$TLS"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
        -subj "/CN=meshtop test CA" -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout registry.key -out registry.csr \
        -subj "/CN=meshtop test registry" 2>/dev/null
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:%s\n' "$NAME" >registry.ext
    openssl x509 -req -in registry.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out registry.crt \
        -days 3650 -extfile registry.ext 2>/dev/null
)
echo "$NAME:$TLS_PORT" >"$TLS/host"
cat > "$TLS/config.yml" <<CONFIG
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $TLS/storage
http:
  addr: 127.0.0.1:$TLS_PORT
  tls:
    certificate: $TLS/registry.crt
    key: $TLS/registry.key
CONFIG
nohup "$BIN" serve "$TLS/config.yml" >"$TLS/registry.log" 2>&1 &
echo $! >"$TLS/registry.pid"
i=0
while ! tls_answers; do
    i=$((i + 1))
    if [ "$i" -ge 100 ]; then
        echo "error: the TLS registry did not answer at https://127.0.0.1:$TLS_PORT/v2/ within 10s; see $TLS/registry.log:" >&2
        tail -n 20 "$TLS/registry.log" >&2 || true
        exit 1
    fi
    sleep 0.1
done
echo "TLS registry answers at https://$NAME:$TLS_PORT/v2/ (pid $(cat "$TLS/registry.pid"), CA $TLS/ca.crt)"
