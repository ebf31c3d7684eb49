#!/usr/bin/env bash
# The dashboard following two chatty machines (issue 30): its CPU beyond the machines' own.
# Two containers of the example mesh's base each print RATE lines a second; the real dashboard, in
# tmux on a server of its own, opens `l` on base and follows both for WINDOW seconds. Its CPU is the
# utime+stime of its own process (/proc/<pid>/stat) over that window: the machines' cost is in their
# own processes and not counted. Also: how long a key takes to show (Up → `follows)` in the title).
# Target: < 5% of a core.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
PROFILE=${PROFILE:-dev}
RATE=${RATE:-1000}
WINDOW=${WINDOW:-20}
TARGET_PCT=5

if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --quiet --profile "$PROFILE" --bin meshtop
  bin="$CARGO_TARGET_DIR/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")/meshtop"
fi

# A random run id in every name this leaves on the daemon and tmux (never the pid).
id=$(od -An -N5 -tx1 /dev/urandom | tr -d ' \n')
name="blogs-$id"
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

# RATE lines a second, in bursts of a tenth of that every 0.1 s.
burst=$((RATE / 10))
script="n=0; while true; do seq \$n \$((n + $burst - 1)) | sed 's/^/line /'; n=\$((n + $burst)); sleep 0.1; done"
for m in a b; do
  docker run -d --name "$name-$m" --label jr2.dev/module=base --label "jr2.dev/mesh=$name" \
    --label "jr2.dev/machine=$name-$m" "$image" sh -c "$script" >/dev/null
done

tmux -L "$server" new-session -d -s bench -x 120 -y 40 \
  "DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock} $bin --mesh $work/mesh/mesh.toml --state $state"
screen() { tmux -L "$server" capture-pane -p -t bench; }
wait_for() { # pattern, seconds
  for _ in $(seq 1 $(($2 * 10))); do
    screen | grep -q -- "$1" && return 0
    sleep 0.1
  done
  echo "never saw $1:" >&2; screen >&2; exit 1
}
wait_for "2/2" 60
pid=$(pgrep -f -n -- "--state $state" || true)
[ -n "$pid" ] || { echo "the dashboard did not start" >&2; exit 1; }
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# At rest first (the same window), then following.
rest_start=$(cpu "$pid"); sleep "$WINDOW"; rest_end=$(cpu "$pid")
tmux -L "$server" send-keys -t bench l
wait_for "logs · module base · 2 machines · following" 30
sleep 2
lines_start=$(( $(docker logs "$name-a" 2>&1 | wc -l) + $(docker logs "$name-b" 2>&1 | wc -l) ))
start=$(cpu "$pid")
if [ -n "${PERF:-}" ]; then # PERF=file: where the time goes (perf report -i file)
  perf record -q -g -o "$PERF" -p "$pid" -- sleep "$WINDOW" >/dev/null 2>&1
else
  sleep "$WINDOW"
fi
end=$(cpu "$pid")
lines_end=$(( $(docker logs "$name-a" 2>&1 | wc -l) + $(docker logs "$name-b" 2>&1 | wc -l) ))

# A key while they print: Up stops following; how long until the screen says so.
t0=$(date +%s%N)
tmux -L "$server" send-keys -t bench Up
wait_for "follows)" 10
t1=$(date +%s%N)
hwm_kb=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
tmux -L "$server" send-keys -t bench Escape q

rest_pct=$(echo "scale=3; ($rest_end - $rest_start) * 100 / $ticks / $WINDOW" | bc -l)
pct=$(echo "scale=3; ($end - $start) * 100 / $ticks / $WINDOW" | bc -l)
rate=$(( (lines_end - lines_start) / WINDOW ))
printf 'machines printed %d lines/s together (2 × %d asked)\n' "$rate" "$RATE"
printf 'dashboard CPU following them over %ss: %.2f%% of a core (at rest before: %.2f%%; target < %s%%; %s build; load %s)\n' \
  "$WINDOW" "$pct" "$rest_pct" "$TARGET_PCT" "$PROFILE" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'a key while following: on screen after %d ms; peak resident memory %d MB\n' \
  $(( (t1 - t0) / 1000000 )) $((hwm_kb / 1024))
[ "$(echo "$pct < $TARGET_PCT" | bc -l)" = 1 ] || { echo "above target" >&2; exit 1; }
