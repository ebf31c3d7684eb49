#!/usr/bin/env bash
# Start a Docker daemon that serves TCP with TLS only (`--tlsverify`), for the remote-BuildKit tests:
# a shared build host as a team runs one. Its own socket directory, data-root, exec-root, pid file,
# config file and bridge, like scripts/start-second-daemon.sh (whose rules it follows); listening on
# tcp://127.0.0.1:<port> with a test CA made here by openssl.
#
#   bash scripts/start-tls-daemon.sh [tls|fault]
#
# Two instances: `tls` (port 23760) the build host the TLS tests share; `fault` (port 23761) the one
# the fault test SIGKILLs mid-step and starts again, so that no other test loses its daemon.
#
# Certificates, in $DIR/certs (made once, kept while they verify):
#   ca.pem ca-key.pem                      the test CA
#   server-cert.pem server-key.pem         the daemon's (SAN IP:127.0.0.1, DNS:localhost)
#   client/{ca,cert,key}.pem               a tls_dir that works (as DOCKER_CERT_PATH)
#   wrong-ca/{ca,cert,key}.pem             the client's, but ca.pem another CA: the daemon does not verify
#   refused/{ca,cert,key}.pem              the right CA, but a client cert another CA signed: refused
#
# Idempotent: a daemon that already answers is kept. Fails loudly (its log tail, exit 1).
# Never `--bridge=none`: dockerd then deletes the default bridge, the first daemon's docker0 too.
set -euo pipefail

INSTANCE="${1:-tls}"
case "$INSTANCE" in
    tls) PORT=23760 BRIDGE=mtdaemontls BRIDGE_ADDR=10.213.78.1/24 ;;
    fault) PORT=23761 BRIDGE=mtdaemonflt BRIDGE_ADDR=10.213.79.1/24 ;;
    *) echo "start-tls-daemon: error: instance $INSTANCE is neither tls nor fault" >&2; exit 2 ;;
esac
DIR="/run/meshtop-test-dockerd-$INSTANCE"
DATA="/var/lib/meshtop-test-dockerd-$INSTANCE"
CERTS="$DIR/certs"
PIDFILE="$DIR/dockerd.pid"
LOG="$DIR/dockerd.log"
CONFIG="$DIR/daemon.json"
HOST="tcp://127.0.0.1:$PORT"
WAIT_SECONDS="${MESHTOP_TLS_DAEMON_WAIT:-90}"

sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"

say() { echo "start-tls-daemon ($INSTANCE): $*"; }
fail() {
    echo "start-tls-daemon ($INSTANCE): error: $*" >&2
    [ -f "$LOG" ] && { echo "--- the last lines of $LOG:" >&2; tail -n 40 "$LOG" >&2 || true; }
    exit 1
}

command -v openssl >/dev/null 2>&1 || fail "openssl is not on PATH (apt-get install openssl)"
command -v dockerd >/dev/null 2>&1 || fail "dockerd is not on PATH (install Docker's engine: docker.io)"
command -v ip >/dev/null 2>&1 || fail "ip (iproute2) is not on PATH"

answers() {
    timeout 10 docker -H "$HOST" --tlsverify --tlscacert "$CERTS/client/ca.pem" \
        --tlscert "$CERTS/client/cert.pem" --tlskey "$CERTS/client/key.pem" \
        version --format '{{.Server.Version}}' >/dev/null 2>&1
}

running_pid() {
    local pid
    pid="$(cat "$PIDFILE" 2>/dev/null || true)"
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/cmdline" 2>/dev/null; then
        echo "$pid"
    fi
}

# A CA and a certificate it signs: sign <dir> <name> <subject> <ext file or ''> <ca dir>
ca() {
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=$2" \
        -keyout "$1/ca-key.pem" -out "$1/ca.pem" 2>/dev/null
}
sign() {
    local dir="$1" name="$2" subject="$3" ext="$4" cadir="$5"
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$subject" \
        -keyout "$dir/$name-key.pem" -out "$dir/$name.csr" 2>/dev/null
    openssl x509 -req -in "$dir/$name.csr" -CA "$cadir/ca.pem" -CAkey "$cadir/ca-key.pem" \
        -CAcreateserial -days 30 -out "$dir/$name-cert.pem" -extfile "$ext" 2>/dev/null
    rm -f "$dir/$name.csr"
}

make_certs() {
    if [ -f "$CERTS/client/key.pem" ] && openssl verify -CAfile "$CERTS/ca.pem" "$CERTS/server-cert.pem" >/dev/null 2>&1 \
        && openssl x509 -checkend 86400 -noout -in "$CERTS/server-cert.pem" >/dev/null 2>&1; then
        return
    fi
    say "making a test CA and certificates in $CERTS"
    $sudo_cmd rm -rf "$CERTS"
    $sudo_cmd mkdir -p "$CERTS/client" "$CERTS/wrong-ca" "$CERTS/refused" "$CERTS/other"
    local tmp
    tmp="$(mktemp -d)"
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$tmp/server.ext"
    printf 'extendedKeyUsage=clientAuth\n' >"$tmp/client.ext"
    ca "$CERTS" "meshtop test CA ($INSTANCE)"
    ca "$CERTS/other" "another CA nobody trusts"
    sign "$CERTS" server 127.0.0.1 "$tmp/server.ext" "$CERTS"
    sign "$CERTS/client" client meshtop-client "$tmp/client.ext" "$CERTS"
    sign "$CERTS/refused" client meshtop-stranger "$tmp/client.ext" "$CERTS/other"
    rm -rf "$tmp"
    cp "$CERTS/ca.pem" "$CERTS/client/ca.pem"
    mv "$CERTS/client/client-cert.pem" "$CERTS/client/cert.pem"
    mv "$CERTS/client/client-key.pem" "$CERTS/client/key.pem"
    cp "$CERTS/other/ca.pem" "$CERTS/wrong-ca/ca.pem"
    cp "$CERTS/client/cert.pem" "$CERTS/client/key.pem" "$CERTS/wrong-ca/"
    cp "$CERTS/ca.pem" "$CERTS/refused/ca.pem"
    mv "$CERTS/refused/client-cert.pem" "$CERTS/refused/cert.pem"
    mv "$CERTS/refused/client-key.pem" "$CERTS/refused/key.pem"
    chmod -R a+rX "$CERTS"
}

make_bridge() {
    ip link show "$BRIDGE" >/dev/null 2>&1 || $sudo_cmd ip link add "$BRIDGE" type bridge
    ip -4 addr show dev "$BRIDGE" | grep -q "${BRIDGE_ADDR%/*}/" || $sudo_cmd ip addr add "$BRIDGE_ADDR" dev "$BRIDGE"
    $sudo_cmd ip link set "$BRIDGE" up
}

# The containerd a killed dockerd leaves behind: still running, or a zombie nobody reaped (seen:
# `[containerd] <defunct>` half a second after the kill). A new dockerd that finds its pid file
# naming either waits for it to answer on a socket that is gone, and gives up with "timeout waiting
# for containerd to start". A live one is ended, and the pid file removed, before dockerd starts.
clear_containerd() {
    local pidfile="$DIR/exec/containerd/containerd.pid" pid
    pid="$($sudo_cmd cat "$pidfile" 2>/dev/null || true)"
    if [ -n "$pid" ] && $sudo_cmd grep -qs "$DIR/exec/containerd" "/proc/$pid/cmdline"; then
        say "the containerd (pid $pid) of the dockerd before still runs: ending it"
        $sudo_cmd kill -9 "$pid" 2>/dev/null || true
        for _ in $(seq 1 30); do $sudo_cmd kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        $sudo_cmd kill -0 "$pid" 2>/dev/null && fail "the containerd (pid $pid) of the dockerd before did not end"
    fi
    $sudo_cmd rm -f "$pidfile"
}

start() {
    clear_containerd
    echo '{}' | $sudo_cmd tee "$CONFIG" >/dev/null
    $sudo_cmd rm -f "$PIDFILE"
    local driver driver_flag=()
    driver="$(timeout 30 docker info --format '{{.Driver}}' 2>/dev/null || true)"
    [ -n "$driver" ] && driver_flag=(--storage-driver "$driver")
    say "starting dockerd on $HOST with TLS (data-root $DATA, bridge $BRIDGE)"
    $sudo_cmd setsid dockerd \
        --config-file "$CONFIG" \
        -H "$HOST" \
        --tlsverify \
        --tlscacert "$CERTS/ca.pem" \
        --tlscert "$CERTS/server-cert.pem" \
        --tlskey "$CERTS/server-key.pem" \
        --data-root "$DATA" \
        --exec-root "$DIR/exec" \
        --pidfile "$PIDFILE" \
        --bridge "$BRIDGE" \
        --iptables=false \
        --ip-masq=false \
        "${driver_flag[@]}" \
        >>"$LOG" 2>&1 </dev/null &
    local waited=0
    while ! answers; do
        waited=$((waited + 1))
        [ "$waited" -ge "$WAIT_SECONDS" ] && fail "dockerd did not answer at $HOST within ${WAIT_SECONDS}s"
        sleep 1
    done
}

first_had_docker0=false
ip link show docker0 >/dev/null 2>&1 && first_had_docker0=true
$sudo_cmd mkdir -p "$DIR" "$DATA"
make_certs
make_bridge
if answers; then
    say "already answers at $HOST"
else
    pid="$(running_pid)"
    if [ -n "$pid" ]; then
        say "pid $pid runs but does not answer: stopping it"
        $sudo_cmd kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        $sudo_cmd kill -9 "$pid" 2>/dev/null || true
    fi
    start
fi
if $first_had_docker0 && ! ip link show docker0 >/dev/null 2>&1; then
    fail "the first daemon's docker0 is gone after starting this daemon"
fi
say "answers at $HOST (pid $(running_pid)); tls_dir $CERTS/client"
echo "$HOST"
