#!/usr/bin/env bash
# Issue 41's figures at 10,000 modules (a generated mesh: tiny contexts, 100 bases; scripts/gen-mesh.sh):
# - `plan`: wall time and peak memory, against `git status --porcelain` on the same tree (reference);
#   targets ≤ 0.5 s and ≤ 100 MB;
# - the dashboard: time until it shows the mesh, idle CPU over IDLE_SECONDS (target < 0.5 % of a core),
#   and one key at a time through tmux (target < 50 ms a key): `j` (one row down), `G` (top to the
#   last row), the last character of a filter (`/` and the others typed and on screen first), Escape
#   (the filter cleared): each timed from its `tmux send-keys` until a capture shows what only that
#   key's frame shows, medians of PRESSES presses (default 7). tmux's own costs are printed beside
#   them (a capture of an unchanged screen, a tmux round trip) to be subtracted by the reader; the
#   same keys without tmux or a terminal: `cargo bench --bench keys` (update + draw, TestBackend);
# - the Kubernetes record: read and stamp costs (objects, bytes, ms) on the API test server
#   (benches/record_scale.rs), the plain form's largest record beside the sharded one at 10,000;
# - `PARTS=polls`: the dashboard's polls on Kubernetes (requests and bytes a poll, counted by the API
#   test server; benches/record_scale/dashboard_polls.rs), and `PARTS=docker`: a second converge on
#   Docker, its daemon requests counted at the socket by a proxy in front of /var/run/docker.sock —
#   both at each of SIZES (default "1000 3000": each finishes in well under ten minutes on two cores),
#   so that the growth between two sizes says what 10,000 would cost. Counts do not depend on the
#   build: BENCH_PROFILE=dev (the test build) gives the same requests and bytes sooner. Docker's first
#   converge is a stamp of the record; RECORD_SCALE_DOCKER_FIRST=converge builds every module for
#   real instead (about 0.3 s a module on two cores).
# Medians of RUNS runs (default 5). Prints the load average beside each figure: other work on the
# machine slows every figure.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
RUNS=${RUNS:-5}
MODULES=${MODULES:-10000}
IDLE_SECONDS=${IDLE_SECONDS:-30}
# PARTS (default plan, dashboard and record) picks what is measured: `PARTS=dashboard` for the
# dashboard alone; `polls` and `docker` are measured only when named.
PARTS=${PARTS:-plan dashboard record}
part() { [[ " $PARTS " == *" $1 "* ]]; }
work=$(mktemp -d)
session="meshtop-scale-$$"
trap 'tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$work"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
now() { echo "${EPOCHREALTIME/./}"; } # µs
if part plan || part dashboard; then
  if [ -n "${BIN:-}" ]; then
    bin=$BIN
  else
    cargo build --quiet --release --bin meshtop
    bin="$CARGO_TARGET_DIR/release/meshtop"
  fi
  MODULES=$MODULES bash scripts/gen-mesh.sh "$work/mesh"
  mesh="$work/mesh/mesh.toml"
fi

# The planner's own work: the host holds nothing (the benches below reach the daemon themselves).
if part plan || part dashboard; then export DOCKER_HOST=unix:///nonexistent/docker.sock; fi

if part plan; then
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

fi

if part dashboard; then
# The dashboard in tmux: open, idle, keys. Its plan polls (at open, then every minute) read the
# plan's cache warm, as after the plan part.
part plan || "$bin" --mesh "$mesh" --state "$work/state.db" plan >/dev/null 2>&1 || true
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
# Keys, one at a time: each press starts from a screen that has settled, and is timed from
# `tmux send-keys` until the screen shows what only that key's frame shows (so a figure is one key's
# answer, never several). Medians of PRESSES presses.
PRESSES=${PRESSES:-7}
time_key() { # time_key KEY TEXT: µs from sending KEY until the screen shows TEXT
  local t; t=$(now); tmux send-keys -t "$session" "$1"
  until screen | grep -qF -- "$2"; do
    [ $(($(now) - t)) -lt 10000000 ] || { echo "timeout: $2" >&2; break; }
  done
  echo $(($(now) - t))
}
settle() { wait_for "$1" >/dev/null; } # the screen shows TEXT before the next timed key
# What tmux itself costs per look: one capture (capture-pane + grep) of a screen that does not
# change, and one tmux round trip (a client started, the server asked), as send-keys pays it. A
# key's figure includes its send-keys and ends at the end of the first capture that sees the new
# screen: at most about one capture after the frame, on average half of one.
: >"$work/capture"; : >"$work/roundtrip"
for _ in $(seq 20); do
  t=$(now); screen | grep -qF -- "b000"; echo $(($(now) - t)) >>"$work/capture"
  t=$(now); tmux display-message -p -t "$session" '' >/dev/null; echo $(($(now) - t)) >>"$work/roundtrip"
done
capture=$(median <"$work/capture"); roundtrip=$(median <"$work/roundtrip")
: >"$work/j"; : >"$work/G"; : >"$work/last"; : >"$work/esc"
for _ in $(seq "$PRESSES"); do
  # j: from the top row (b000) one down; the history pane's title names the selected module.
  tmux send-keys -t "$session" g; settle "builds · b000"
  time_key j "builds · b001" >>"$work/j"
  # G: from the top to the last row (m09999).
  tmux send-keys -t "$session" g; settle "builds · b000"
  time_key G "builds · m$(printf %05d $((MODULES - 1)))" >>"$work/G"
  # The filter: `/` and all but its last character typed (10 rows match m0777), then the last one
  # alone (1 row: m07777), then Escape (every row back).
  tmux send-keys -t "$session" g; settle "builds · b000"
  tmux send-keys -t "$session" / m 0 7 7 7; settle "modules · 10 of $MODULES"
  time_key 7 "modules · 1 of $MODULES" >>"$work/last"
  time_key Escape "modules · $MODULES of $MODULES" >>"$work/esc"
done
j=$(median <"$work/j"); G=$(median <"$work/G"); last=$(median <"$work/last"); esc=$(median <"$work/esc")
tmux send-keys -t "$session" q
awk -v o="$opened" -v i="$idle" -v r="$rss_kb" -v s="$IDLE_SECONDS" -v l="$(load)" 'BEGIN {
  printf "dashboard: open %.2f s (target 2 s), idle %.2f%% of a core over %d s (target 0.5%%), %.0f MB peak (load %s)\n", o / 1e6, i, s, r / 1024, l }'
awk -v j="$j" -v g="$G" -v f="$last" -v e="$esc" -v c="$capture" -v t="$roundtrip" -v n="$PRESSES" -v l="$(load)" 'BEGIN {
  printf "keys through tmux, one key each, medians of %d: j %.1f ms, G %.1f ms, last filter character %.1f ms, Escape %.1f ms (target 50 ms a key; load %s)\n", n, j / 1000, g / 1000, f / 1000, e / 1000, l
  printf "  tmux itself, in each figure: a capture %.1f ms (the figure ends up to one capture after the frame), a round trip %.1f ms (send-keys)\n", c / 1000, t / 1000 }'
echo "keys without tmux (update + draw + the pollers' asks, TestBackend 160x50): cargo bench --bench keys"

fi

bench_parts=""
for p in record polls docker; do part "$p" && bench_parts="$bench_parts $p"; done
if [ -n "$bench_parts" ]; then
# The Kubernetes record's read and stamp costs; the dashboard's polls; Docker's second converge.
RECORD_SCALE_PARTS="$bench_parts" RECORD_SCALE_SIZES="${SIZES:-1000 3000}" \
  cargo bench --quiet --profile "${BENCH_PROFILE:-bench}" --bench record_scale 2>/dev/null
fi
echo "load: $(load)"
