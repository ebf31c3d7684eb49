#!/usr/bin/env bash
# The dashboard at rest: CPU over 30 s of idling, and resident memory with a 100,000-row history.
# Runs the real binary in tmux on a copy of the example mesh, with a generated state database.
# Targets (issue 4): idle CPU < 1% of a core over 30 s; resident memory < 60 MB with 100,000 rows.
# TREE=1: on a generated tree of 12,000 files in 40 modules instead (scripts/gen-tree.sh), idling
# 60 s after the first plan (issue 11's target: < 0.5% of a core).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
PROFILE=${PROFILE:-dev}
ROWS=${ROWS:-100000}
TREE=${TREE:-0}
IDLE_SECONDS=${IDLE_SECONDS:-$([ "$TREE" = 1 ] && echo 60 || echo 30)}
TARGET_PCT=$([ "$TREE" = 1 ] && echo 0.5 || echo 1)

# BIN=path: run that binary instead (e.g. a build of an earlier commit, for a before/after).
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --quiet --profile "$PROFILE" --bin meshtop
  bin="$CARGO_TARGET_DIR/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")/meshtop"
fi

work=$(mktemp -d)
session="meshtop-bench-$$"
trap 'tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$work"' EXIT
if [ "$TREE" = 1 ]; then
  bash scripts/gen-tree.sh "$work/mesh"
else
  cp -a assets/example "$work/mesh"
  cp -f /bin/busybox "$work/mesh/base/busybox"
fi
state="$work/state.db"

# The schema comes from meshtop itself; the rows from SQLite's own generator (fast, no Rust needed).
"$bin" --mesh "$work/mesh/mesh.toml" --state "$state" builds >/dev/null
sqlite3 "$state" <<SQL
PRAGMA journal_mode = WAL;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $ROWS - 1)
INSERT INTO builds (id, mesh, module, repository, git_commit, dirty, base_module, base_digest, ref, digest,
                    platforms, status, forced, why, host, started_ms, ended_ms, error, log_tail,
                    published_ref, published_digest, operation_id)
SELECT printf('bench-%08d', i), 'demo', (CASE i % 5 WHEN 0 THEN 'base' WHEN 1 THEN 'tools' WHEN 2 THEN 'web'
         WHEN 3 THEN 'api' ELSE 'worker' END), 'demo/x', printf('%040x', i), 0, NULL, NULL,
       printf('demo/x:%012x-amd64', i), printf('sha256:%064x', i), 'linux/amd64',
       (CASE WHEN i % 50 = 0 THEN 'failed' ELSE 'succeeded' END), 0, 'files changed', 'bench-host',
       1700000000000 + i * 1000, 1700000000000 + i * 1000 + 500,
       (CASE WHEN i % 50 = 0 THEN 'step 3/5 COPY failed: file not found' ELSE NULL END),
       (CASE WHEN i % 50 = 0 THEN 'Step 3/5 : COPY app /app' ELSE NULL END), NULL, NULL, NULL
FROM n;
SQL
echo "history: $(sqlite3 "$state" 'SELECT count(*) FROM builds') rows" >&2

tmux new-session -d -s "$session" -x 120 -y 40 \
  "DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock} $bin --mesh $work/mesh/mesh.toml --state $state"
sleep "$([ "$TREE" = 1 ] && echo 15 || echo 3)" # let it draw and answer its first polls (the first plan hashes every file)
pid=$(pgrep -f -n -- "--state $state" || true)
if [ -z "$pid" ]; then
  echo "the dashboard did not start:" >&2
  tmux capture-pane -p -t "$session" >&2 || true
  exit 1
fi
ticks=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
start=$(cpu "$pid")
sleep "$IDLE_SECONDS"
end=$(cpu "$pid")
rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
hwm_kb=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
tmux send-keys -t "$session" q
idle_pct=$(echo "scale=3; ($end - $start) * 100 / $ticks / $IDLE_SECONDS" | bc -l)
printf 'idle CPU over %ss: %.2f%% of a core (target < %s%%; load %s)\n' "$IDLE_SECONDS" "$idle_pct" "$TARGET_PCT" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf 'resident memory: %d MB now, %d MB peak, with %s history rows (target < 60 MB)\n' \
  $((rss_kb / 1024)) $((hwm_kb / 1024)) "$ROWS"
ok=1
[ "$(echo "$idle_pct < $TARGET_PCT" | bc -l)" = 1 ] || ok=0
[ $((hwm_kb / 1024)) -lt 60 ] || ok=0
[ "$ok" = 1 ] || { echo "below target" >&2; exit 1; }
