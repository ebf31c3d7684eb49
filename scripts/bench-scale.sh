#!/usr/bin/env bash
# Issue 41's figures at 10,000 modules (a generated mesh: tiny contexts, 100 bases; scripts/gen-mesh.sh):
# - `plan`: wall time and peak memory, against `git status --porcelain` on the same tree (reference);
#   targets ≤ 0.5 s and ≤ 100 MB;
# - the dashboard: time until it shows the mesh, idle CPU over IDLE_SECONDS (target < 0.5 % of a core),
#   and the time from a key to the screen that answers it for `j` (scroll), `/` + a filter, `G`
#   (target < 50 ms a key; measured through tmux, whose capture adds a few ms);
# - the Kubernetes record: read and stamp costs (objects, bytes, ms) on the API test server
#   (benches/record_scale.rs), the plain form's largest record beside the sharded one at 10,000.
# Medians of RUNS runs (default 5). Prints the load average beside each figure: other work on the
# machine slows every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
RUNS=${RUNS:-5}
MODULES=${MODULES:-10000}
IDLE_SECONDS=${IDLE_SECONDS:-30}
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --quiet --release --bin meshtop
  bin="$CARGO_TARGET_DIR/release/meshtop"
fi
work=$(mktemp -d)
session="meshtop-scale-$$"
trap 'tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$work"' EXIT
MODULES=$MODULES bash scripts/gen-mesh.sh "$work/mesh"
mesh="$work/mesh/mesh.toml"
export DOCKER_HOST=unix:///nonexistent/docker.sock # the planner's own work: the host holds nothing
load() { cut -d' ' -f1-3 /proc/loadavg; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
now() { echo "${EPOCHREALTIME/./}"; } # µs

# plan: the first run hashes every file; then steady (the cache warm).
"$bin" --mesh "$mesh" --state "$work/state.db" plan >/dev/null 2>&1 || true
sleep 2
"$bin" --mesh "$mesh" --state "$work/state.db" plan >/dev/null 2>&1 || true
: >"$work/plan"; : >"$work/rss"; : >"$work/git"
for _ in $(seq "$RUNS"); do
  /usr/bin/time -f '%e %M' -o "$work/t" "$bin" --mesh "$mesh" --state "$work/state.db" plan >/dev/null 2>&1 || true
  read -r secs kb <"$work/t"
  echo "$secs" >>"$work/plan"; echo "$kb" >>"$work/rss"
  t=$(now); git -C "$work/mesh" status --porcelain >/dev/null; echo $(($(now) - t)) >>"$work/git"
done
plan=$(median <"$work/plan"); rss=$(median <"$work/rss"); git=$(median <"$work/git")
awk -v p="$plan" -v r="$rss" -v g="$git" -v m="$MODULES" -v l="$(load)" 'BEGIN {
  printf "plan, %d modules: %.2f s, %.0f MB peak (targets 0.5 s, 100 MB); git status %.0f ms -> %.1fx git status (load %s)\n",
    m, p, r / 1024, g / 1000, p * 1e6 / g, l }'

# The dashboard in tmux: open, idle, keys.
screen() { tmux capture-pane -p -t "$session"; }
wait_for() { # wait_for TEXT: µs until the screen shows TEXT (10 s at most)
  local t0; t0=$(now)
  until screen | grep -q -- "$1"; do
    [ $(($(now) - t0)) -lt 10000000 ] || { echo "timeout waiting for $1" >&2; return 1; }
  done
  echo $(($(now) - t0))
}
t0=$(now)
tmux new-session -d -s "$session" -x 160 -y 50 "$bin --mesh $mesh --state $work/state.db"
wait_for "b000" >/dev/null
opened=$(($(now) - t0))
pid=$(pgrep -f -n -- "--state $work/state.db" || true)
sleep 5
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
start=$(cpu "$pid"); sleep "$IDLE_SECONDS"; end=$(cpu "$pid")
idle=$(echo "scale=3; ($end - $start) * 100 / $ticks / $IDLE_SECONDS" | bc -l)
rss_kb=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
key() { # key KEYS... -- TEXT: µs from the keys to TEXT on screen
  local keys=() ; while [ "$1" != "--" ]; do keys+=("$1"); shift; done; shift
  local t; t=$(now); tmux send-keys -t "$session" "${keys[@]}"
  until screen | grep -q -- "$1"; do [ $(($(now) - t)) -lt 10000000 ] || { echo "timeout: $1" >&2; break; }; done
  echo $(($(now) - t))
}
g=$(key G -- "m09999")
filter=$(key / m0777 -- "m07779")
tmux send-keys -t "$session" Escape; sleep 1
tmux send-keys -t "$session" g; sleep 1
: >"$work/j"
for _ in $(seq 10); do
  before=$(screen | md5sum)
  t=$(now); tmux send-keys -t "$session" j
  until [ "$(screen | md5sum)" != "$before" ]; do [ $(($(now) - t)) -lt 5000000 ] || break; done
  echo $(($(now) - t)) >>"$work/j"
done
j=$(median <"$work/j")
tmux send-keys -t "$session" q
awk -v o="$opened" -v i="$idle" -v r="$rss_kb" -v g="$g" -v f="$filter" -v j="$j" -v s="$IDLE_SECONDS" -v l="$(load)" 'BEGIN {
  printf "dashboard: open %.2f s (target 2 s), idle %.2f%% of a core over %d s (target 0.5%%), %.0f MB peak (load %s)\n", o / 1e6, i, s, r / 1024, l
  printf "keys: j %.0f ms, / filter %.0f ms, G %.0f ms (target 50 ms; through tmux)\n", j / 1000, f / 1000, g / 1000 }'

# The Kubernetes record's read and stamp costs.
cargo bench --quiet --bench record_scale 2>/dev/null
echo "load: $(load)"
