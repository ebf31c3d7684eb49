#!/usr/bin/env bash
# Issue 52's figures: a steady `meshtop plan` of N modules each FROM its own locked upstream image,
# against the same N modules FROM scratch (today's plan: no upstream at all), medians of RUNS
# alternating runs; and `meshtop outdated` over the N locked upstreams against the local registry
# (127.0.0.1:5000, scripts/start-registry.sh), and `meshtop plan --refresh`, in seconds. BIN_BEFORE=path also times that binary
# (a build from before the lock, which reads no Dockerfile on the plan path) on the FROM-scratch
# mesh: today's plan as it was. N defaults to 100. The daemon is not asked (DOCKER_HOST points nowhere): the
# figures are the planner's and the registry's.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
N=${N:-100}
RUNS=${RUNS:-11}
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --quiet --release --bin meshtop
  bin="$CARGO_TARGET_DIR/release/meshtop"
fi
work=$(mktemp -d)
run="bench$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
trap 'rm -rf "$work"' EXIT
registry=127.0.0.1:5000

# One tiny upstream image, pushed under N repositories (the layers are mounted, not sent again).
mkdir -p "$work/up"
printf 'FROM scratch\nCOPY v /v\n' >"$work/up/Dockerfile"
echo 1 >"$work/up/v"
docker build -q -t "$registry/$run/u0:1" "$work/up" >/dev/null
for i in $(seq 0 $((N - 1))); do
  docker tag "$registry/$run/u0:1" "$registry/$run/u$i:1"
  docker push -q "$registry/$run/u$i:1" >/dev/null
done

# Two meshes of N modules: one FROM its upstream, one FROM scratch.
for kind in locked scratch; do
  dir="$work/$kind"
  mkdir -p "$dir"
  printf '[mesh]\nname = "%s"\n\n[target]\nkind = "docker"\n' "$run-$kind" >"$dir/mesh.toml"
  for i in $(seq 0 $((N - 1))); do
    mkdir -p "$dir/m$i"
    if [ "$kind" = locked ]; then from="$registry/$run/u$i:1"; else from=scratch; fi
    printf 'FROM %s\nCOPY f /f\n' "$from" >"$dir/m$i/Dockerfile"
    echo "$i" >"$dir/m$i/f"
    printf '\n[[module]]\nname = "m%s"\ncontext = "m%s"\n' "$i" "$i" >>"$dir/mesh.toml"
  done
done

# The first plan of the locked mesh resolves and writes every entry (the daemon is asked for the
# platform only when it answers; here it does not).
export DOCKER_HOST=unix:///nonexistent/docker.sock
start=${EPOCHREALTIME/./}
"$bin" --mesh "$work/locked/mesh.toml" --state "$work/locked.db" plan >/dev/null
first_ms=$(((${EPOCHREALTIME/./} - start) / 1000))
entries=$(grep -c '^\[\[upstream\]\]' "$work/locked/mesh.lock")
"$bin" --mesh "$work/scratch/mesh.toml" --state "$work/scratch.db" plan >/dev/null

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
: >"$work/locked.ms"
: >"$work/scratch.ms"
: >"$work/before.ms"
if [ -n "${BIN_BEFORE:-}" ]; then
  "$BIN_BEFORE" --mesh "$work/scratch/mesh.toml" --state "$work/before.db" plan >/dev/null
fi
for _ in $(seq "$RUNS"); do
  for kind in locked scratch; do
    start=${EPOCHREALTIME/./}
    "$bin" --mesh "$work/$kind/mesh.toml" --state "$work/$kind.db" plan >/dev/null
    echo $(((${EPOCHREALTIME/./} - start) / 1000)) >>"$work/$kind.ms"
  done
  if [ -n "${BIN_BEFORE:-}" ]; then
    start=${EPOCHREALTIME/./}
    "$BIN_BEFORE" --mesh "$work/scratch/mesh.toml" --state "$work/before.db" plan >/dev/null
    echo $(((${EPOCHREALTIME/./} - start) / 1000)) >>"$work/before.ms"
  fi
done
locked=$(median <"$work/locked.ms")
scratch=$(median <"$work/scratch.ms")

# outdated: every locked upstream asked of the registry (eight at once).
start=${EPOCHREALTIME/./}
"$bin" --mesh "$work/locked/mesh.toml" --state "$work/locked.db" outdated >/dev/null || true
outdated_ms=$(((${EPOCHREALTIME/./} - start) / 1000))
# plan --refresh: the same questions, kept in the state database, then the plan.
start=${EPOCHREALTIME/./}
"$bin" --mesh "$work/locked/mesh.toml" --state "$work/locked.db" plan --refresh >/dev/null
refresh_ms=$(((${EPOCHREALTIME/./} - start) / 1000))

echo "upstreams: N=$N, $entries locked by the first plan in $first_ms ms"
echo "steady plan, median of $RUNS: $locked ms with $N locked upstreams, $scratch ms FROM scratch: $(python3 -c "print(f'{$locked / max($scratch, 1):.2f}')")x"
if [ -n "${BIN_BEFORE:-}" ]; then
  before=$(median <"$work/before.ms")
  echo "the FROM-scratch mesh with BIN_BEFORE: $before ms: $N locked upstreams now cost $(python3 -c "print(f'{$locked / max($before, 1):.2f}')")x that"
fi
echo "outdated over $N upstreams: $outdated_ms ms ($N manifest HEADs, eight at once)"
echo "plan --refresh over $N upstreams: $refresh_ms ms (the same $N HEADs, kept for status, then the plan)"
echo "load: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 0 $((N - 1))); do docker rmi "$registry/$run/u$i:1" >/dev/null 2>&1 || true; done
