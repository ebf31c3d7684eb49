#!/usr/bin/env bash
# Steady-state `meshtop plan` against `git status --porcelain` on the same tree (after `git add`),
# and cold hashing against `sha256sum` over the same files (issue 11's targets: steady ≤ 1.5× git
# status, cold ≥ 1.5× faster than sha256sum; issue 39's: steady ≤ 1.3× git status in CPU and wall,
# at FILES=12000 and FILES=48000). Medians of RUNS alternating runs (default 11); the steady CPU is
# user+system time of each process (getrusage of the child, in µs).
# The daemon is not asked (DOCKER_HOST points nowhere: a plan then reads the host as holding
# nothing, as it does when the daemon is down), so the figure is the planner's own work.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
RUNS=${RUNS:-11}
# BIN=path: time that binary instead (e.g. a build of an earlier commit, for a before/after).
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --quiet --release --bin meshtop
  bin="$CARGO_TARGET_DIR/release/meshtop"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bash scripts/gen-tree.sh "$work/tree"
tree="$work/tree"
export DOCKER_HOST=unix:///nonexistent/docker.sock

now() { echo "${EPOCHREALTIME/./}"; } # µs
# Run "$@" and append its CPU (user+system, µs) to the file $cpu_to.
# getrusage of the child in µs (GNU time prints 10 ms steps: too coarse for a 40 ms command).
cpu_of() {
  python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(int((r.ru_utime + r.ru_stime) * 1e6))' "$@" >>"$cpu_to"
}
load() { cut -d' ' -f1-3 /proc/loadavg; }
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
plan() { "$bin" --mesh "$tree/mesh.toml" --state "$1" plan >/dev/null 2>&1 || true; }

# Cold: a fresh state database each run (nothing cached), against sha256sum of the same files.
load_cold=$(load)
: >"$work/cold"
: >"$work/sha"
for i in $(seq "$RUNS"); do
  rm -f "$work/cold.db"*
  sync
  t=$(now); plan "$work/cold.db"; echo $(($(now) - t)) >>"$work/cold"
  t=$(now); (cd "$tree" && git ls-files -z | xargs -0 sha256sum >/dev/null); echo $(($(now) - t)) >>"$work/sha"
done

load_cold="$load_cold -> $(load)"
# Steady: the cache warmed (and past its racy window), nothing changed.
plan "$work/steady.db"
sleep 3
plan "$work/steady.db"
load_steady=$(load)
: >"$work/steady"
: >"$work/git"
: >"$work/steady_cpu"
: >"$work/git_cpu"
for i in $(seq "$RUNS"); do
  t=$(now); plan "$work/steady.db"; echo $(($(now) - t)) >>"$work/steady"
  t=$(now); git -C "$tree" status --porcelain >/dev/null; echo $(($(now) - t)) >>"$work/git"
  cpu_to="$work/steady_cpu" cpu_of "$bin" --mesh "$tree/mesh.toml" --state "$work/steady.db" plan
  cpu_to="$work/git_cpu" cpu_of git -C "$tree" status --porcelain
done

load_steady="$load_steady -> $(load)"
cold=$(median <"$work/cold")
sha=$(median <"$work/sha")
steady=$(median <"$work/steady")
git=$(median <"$work/git")
files=$(git -C "$tree" ls-files | wc -l)
echo "tree: $files files in $(grep -c '^\[\[module\]\]' "$tree/mesh.toml") modules; medians of $RUNS alternating runs"
awk -v c="$cold" -v s="$sha" -v l="$load_cold" 'BEGIN {printf "cold:   meshtop plan %.1f ms, sha256sum %.1f ms -> meshtop %.2fx faster (load %s)\n", c/1000, s/1000, s/c, l}'
awk -v p="$steady" -v g="$git" -v l="$load_steady" 'BEGIN {printf "steady: meshtop plan %.1f ms, git status %.1f ms -> %.2fx git status (load %s)\n", p/1000, g/1000, p/g, l}'
steady_cpu=$(median <"$work/steady_cpu")
git_cpu=$(median <"$work/git_cpu")
awk -v p="$steady_cpu" -v g="$git_cpu" -v f="$files" 'BEGIN {printf "steady CPU: meshtop plan %.1f ms, git status %.1f ms -> %.2fx git status (per file %.2f µs vs %.2f µs; target 1.3x)\n", p/1000, g/1000, (g > 0 ? p/g : 0), p/f, g/f}'
