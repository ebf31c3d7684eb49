#!/usr/bin/env bash
# The logs view's memory with long lines (issue 39): two machines each print RATE lines a second
# of LINE_BYTES bytes (default 200 lines/s of 16 KiB, a busybox sh loop in a FROM-scratch image);
# the real dashboard, in tmux, opens `l` on them and follows both for WINDOW seconds (long enough
# for each machine to print more than the view holds). Reported: the dashboard's peak resident
# memory (VmHWM of /proc/<pid>/status). BEFORE=path also runs that binary (e.g. main's build) on the
# same machines in the same run, for a before/after.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
PROFILE=${PROFILE:-dev}
RATE=${RATE:-200}
LINE_BYTES=${LINE_BYTES:-16384}
WINDOW=${WINDOW:-40}

if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --quiet --profile "$PROFILE" --bin meshtop
  bin="$CARGO_TARGET_DIR/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")/meshtop"
fi

# A random run id in every name this leaves on the daemon and tmux (never the pid).
id=$(od -An -N5 -tx1 /dev/urandom | tr -d ' \n')
name="blogm-$id"
server="meshtop-bench-$id"
work=$(mktemp -d)
cleanup() {
  tmux -L "$server" kill-server 2>/dev/null || true
  containers=$(docker ps -aq --filter "label=jr2.dev/mesh=$name")
  [ -z "$containers" ] || docker rm -f $containers >/dev/null 2>&1 || true
  images=$(docker images -q --filter "label=jr2.dev/mesh=$name" | sort -u)
  [ -z "$images" ] || docker rmi -f $images >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

cp -a assets/example "$work/mesh"
cp -f /bin/busybox "$work/mesh/base/busybox"
sed -i "s/name = \"demo\"/name = \"$name\"/; s/name = \"demo-/name = \"$name-/" "$work/mesh/mesh.toml"
state="$work/state.db"
"$bin" --mesh "$work/mesh/mesh.toml" --state "$state" converge base >/dev/null 2>&1
image=$(docker images -q --no-trunc --filter "label=jr2.dev/mesh=$name" --filter label=jr2.dev/module=base | head -n1)
[ -n "$image" ] || { echo "base was not built" >&2; exit 1; }

# RATE lines a second of LINE_BYTES bytes, in bursts of a tenth of that every 0.1 s.
burst=$((RATE / 10))
script="line=\$(head -c $LINE_BYTES /dev/zero | tr '\\0' x); n=0
while true; do i=0; while [ \$i -lt $burst ]; do echo \"\$n \$line\"; n=\$((n + 1)); i=\$((i + 1)); done; sleep 0.1; done"
for m in a b; do
  docker run -d --name "$name-$m" --label jr2.dev/module=base --label "jr2.dev/mesh=$name" \
    --label "jr2.dev/machine=$name-$m" "$image" sh -c "$script" >/dev/null
done

screen() { tmux -L "$server" capture-pane -p -t bench; }
wait_for() { # pattern, seconds
  for _ in $(seq 1 $(($2 * 10))); do
    screen | grep -q -- "$1" && return 0
    sleep 0.1
  done
  echo "never saw $1:" >&2; screen >&2; exit 1
}
# How many lines both machines printed so far: each line starts with its number (the daemon splits a
# line longer than 16 KiB in two: the number is on its first part).
printed_by() { docker logs --tail 4 "$1" 2>&1 | grep -o '^[0-9]*' | sort -n | tail -n1; }
lines() { echo $(( $(printed_by "$name-a") + $(printed_by "$name-b") )); }

# The peak resident memory of `$1` following both machines for WINDOW seconds.
peak() {
  tmux -L "$server" new-session -d -s bench -x 120 -y 40 \
    "DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock} $1 --mesh $work/mesh/mesh.toml --state $state"
  wait_for "2/2" 60
  local pid
  pid=$(pgrep -f -n -- "--state $state" || true)
  [ -n "$pid" ] || { echo "the dashboard did not start" >&2; exit 1; }
  local rest
  rest=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  tmux -L "$server" send-keys -t bench l
  wait_for "logs · module base · 2 machines · following" 60
  local start
  start=$(lines)
  sleep "$WINDOW"
  local printed=$(( ($(lines) - start) / WINDOW ))
  local hwm
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  tmux -L "$server" kill-session -t bench
  printf '%s: peak resident %d MB following (%d MB before opening l); machines printed %d lines/s of %d bytes together\n' \
    "$2" $((hwm / 1024)) $((rest / 1024)) "$printed" "$LINE_BYTES"
}

[ -z "${BEFORE:-}" ] || peak "$BEFORE" before
peak "$bin" after
echo "window ${WINDOW}s; $PROFILE build; load $(cut -d' ' -f1-3 /proc/loadavg)"
