#!/usr/bin/env bash
# Start a second Docker daemon beside the machine's own, for the builder-pool tests: its own socket,
# data-root, exec-root, pid file, config file and bridge, so that it shares nothing with the first but
# the kernel (and the registry on 127.0.0.1:5000, which both push to).
#
# Idempotent: a second daemon that already answers is checked and kept. What an earlier run left (a
# pid file of a dead daemon, a socket nobody serves, a half-started daemon) is cleared first.
# Fails loudly (its log tail, exit 1) rather than let a test find no daemon.
#
# Never `--bridge=none`: dockerd then deletes the default bridge, which is the first daemon's docker0
# too, and every build with a RUN step on the first daemon breaks. This daemon gets a bridge of its
# own, made here, and touches no iptables rule.
set -euo pipefail

DIR="${MESHTOP_SECOND_DAEMON_DIR:-/run/meshtop-test-dockerd2}"
DATA="${MESHTOP_SECOND_DAEMON_DATA:-/var/lib/meshtop-test-dockerd2}"
SOCKET="$DIR/docker.sock"
HOST="unix://$SOCKET"
PIDFILE="$DIR/dockerd.pid"
LOG="$DIR/dockerd.log"
CONFIG="$DIR/daemon.json"
BRIDGE=mtdaemon2
# A private /24 no default Docker pool hands out (172.17-31/16, 192.168/16 are the defaults).
BRIDGE_ADDR=10.213.77.1/24
WAIT_SECONDS="${MESHTOP_SECOND_DAEMON_WAIT:-90}"

sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"

say() { echo "start-second-daemon: $*"; }
fail() {
    echo "start-second-daemon: error: $*" >&2
    if [ -f "$LOG" ]; then
        echo "--- the last lines of $LOG:" >&2
        tail -n 40 "$LOG" >&2 || true
    fi
    exit 1
}

answers() {
    timeout 10 docker -H "$HOST" version --format '{{.Server.Version}}' >/dev/null 2>&1
}

# What a bare machine lacks: `ip` (iproute2) to make the bridge; dockerd comes with the first daemon.
if ! command -v ip >/dev/null 2>&1; then
    say "installing iproute2"
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq iproute2 >/dev/null
fi
command -v dockerd >/dev/null 2>&1 || fail "dockerd is not on PATH (install Docker's engine: docker.io)"
timeout 30 docker info >/dev/null 2>&1 || fail "the first Docker daemon does not answer (docker info failed): start it first"

first_had_docker0=false
ip link show docker0 >/dev/null 2>&1 && first_had_docker0=true

# The same storage driver as the first daemon: whatever works on this machine for it (overlay2, or
# fuse-overlayfs inside a container) works for a data-root beside it.
DRIVER="$(timeout 30 docker info --format '{{.Driver}}' 2>/dev/null || true)"

$sudo_cmd mkdir -p "$DIR" "$DATA"

running_pid() {
    local pid
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/cmdline" 2>/dev/null; then
        echo "$pid"
    fi
}

wait_until_it_answers() {
    local waited=0
    while ! answers; do
        if [ -z "$(running_pid)" ]; then
            fail "the second daemon exited while starting"
        fi
        waited=$((waited + 1))
        if [ "$waited" -ge "$WAIT_SECONDS" ]; then
            fail "the second daemon did not answer at $HOST within ${WAIT_SECONDS}s"
        fi
        sleep 1
    done
}

make_bridge() {
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        $sudo_cmd ip link add "$BRIDGE" type bridge
    fi
    if ! ip -4 addr show dev "$BRIDGE" | grep -q "${BRIDGE_ADDR%/*}/"; then
        $sudo_cmd ip addr add "$BRIDGE_ADDR" dev "$BRIDGE"
    fi
    $sudo_cmd ip link set "$BRIDGE" up
}

start() {
    # Its own config file, empty: it must read nothing of the first daemon's /etc/docker/daemon.json
    # (whose data-root would clash with the flag below).
    echo '{}' | $sudo_cmd tee "$CONFIG" >/dev/null
    # A socket nobody serves, left by a daemon killed hard: dockerd would refuse to listen on it.
    $sudo_cmd rm -f "$SOCKET" "$PIDFILE"
    local driver_flag=()
    [ -n "$DRIVER" ] && driver_flag=(--storage-driver "$DRIVER")
    say "starting dockerd on $HOST (data-root $DATA, bridge $BRIDGE, storage driver ${DRIVER:-default})"
    # setsid: the daemon outlives this script and the test run that started it.
    $sudo_cmd setsid dockerd \
        --config-file "$CONFIG" \
        -H "$HOST" \
        --data-root "$DATA" \
        --exec-root "$DIR/exec" \
        --pidfile "$PIDFILE" \
        --bridge "$BRIDGE" \
        --iptables=false \
        --ip-masq=false \
        "${driver_flag[@]}" \
        >>"$LOG" 2>&1 </dev/null &
    # The pid file is written by dockerd itself once it runs; wait for it or for the daemon to answer.
    local waited=0
    while [ -z "$(running_pid)" ] && ! answers; do
        waited=$((waited + 1))
        [ "$waited" -ge "$WAIT_SECONDS" ] && fail "dockerd wrote no pid file in ${WAIT_SECONDS}s"
        sleep 1
    done
    wait_until_it_answers
}

make_bridge
if answers; then
    say "the second daemon already answers at $HOST"
elif [ -n "$(running_pid)" ]; then
    # Still starting (a busy machine), or hung: give it the same wait, then start it anew.
    say "a second daemon runs (pid $(running_pid)) but does not answer yet: waiting"
    waited=0
    while ! answers && [ -n "$(running_pid)" ] && [ "$waited" -lt "$WAIT_SECONDS" ]; do
        waited=$((waited + 1))
        sleep 1
    done
    if ! answers; then
        pid="$(running_pid)"
        if [ -n "$pid" ]; then
            say "it never answered: stopping pid $pid and starting again"
            $sudo_cmd kill "$pid" 2>/dev/null || true
            for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
            $sudo_cmd kill -9 "$pid" 2>/dev/null || true
        fi
        start
    fi
else
    start
fi

# The first daemon must be as it was: its docker0 there, and a RUN step still builds on it.
if $first_had_docker0 && ! ip link show docker0 >/dev/null 2>&1; then
    fail "the first daemon's docker0 is gone after starting the second daemon"
fi
BUSYBOX=/bin/busybox
[ -x "$BUSYBOX" ] || fail "$BUSYBOX is missing: install Debian's package busybox-static"
CHECK="$(mktemp -d)"
trap 'rm -rf "$CHECK"' EXIT
cp "$BUSYBOX" "$CHECK/busybox"
printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "touch", "/ran"]\n' >"$CHECK/Dockerfile"
RUN_ID="$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
TAG="meshtop-second-daemon-check:$RUN_ID"
for daemon in "first unix:///var/run/docker.sock" "second $HOST"; do
    name="${daemon%% *}"
    host="${daemon#* }"
    [ "$name" = first ] && host="${DOCKER_HOST:-unix:///var/run/docker.sock}"
    if ! out="$(DOCKER_BUILDKIT=0 timeout 300 docker -H "$host" build -q -t "$TAG" "$CHECK" 2>&1)"; then
        fail "a build with a RUN step fails on the $name daemon ($host): $out"
    fi
    if [ "$name" = second ]; then
        # The tests hand artifacts over through the registry on loopback (plain HTTP by default there).
        if curl -s -o /dev/null --max-time 5 http://127.0.0.1:5000/v2/; then
            pushed="127.0.0.1:5000/$TAG"
            timeout 60 docker -H "$host" tag "$TAG" "$pushed" >/dev/null
            if ! out="$(timeout 120 docker -H "$host" push "$pushed" 2>&1)"; then
                fail "the second daemon cannot push to the registry on 127.0.0.1:5000: $out"
            fi
            timeout 60 docker -H "$host" rmi "$pushed" >/dev/null 2>&1 || true
        else
            say "the registry on 127.0.0.1:5000 does not answer (bash scripts/start-registry.sh): push not checked"
        fi
    fi
    timeout 60 docker -H "$host" rmi "$TAG" >/dev/null 2>&1 || true
done
say "the second daemon answers at $HOST (pid $(running_pid)); docker0 intact, a RUN step builds on both daemons"
echo "$HOST"
