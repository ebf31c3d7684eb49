#!/usr/bin/env bash
# Issue 39's bench: what recording an operation's timeline costs a converge. Prints ratios.
#
# A generated mesh of MODULES modules over TIERS tiers (FROM-scratch images with one tiny file each,
# policy "record", no machines), on the real Docker daemon. The same `meshtop converge` is run with
# the timeline recorded (the default) and without (MESHTOP_TIMELINE=off), interleaved run by run so
# that the shared machine's drifting load hits both alike:
#   a) the record answers every module: the cheapest converge (a few ms), where a fixed cost of
#      recording shows most;
#   b) `--force`: every module built again, its steps folded as they stream.
# Each figure is a median of RUNS (a) or FORCE_RUNS (b) runs. Target: with/without <= 1.02.
# PROFILE=release by default (what users install); PROFILE=dev uses the debug build; MESHTOP_BIN=path
# runs a binary already built.
set -euo pipefail

MODULES=${MODULES:-50}
TIERS=${TIERS:-5}
RUNS=${RUNS:-31}
FORCE_RUNS=${FORCE_RUNS:-5}
PROFILE=${PROFILE:-release}
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$(pwd)/target}

cd "$(dirname "$0")/.."
if [ -n "${MESHTOP_BIN:-}" ]; then
  meshtop=$MESHTOP_BIN # a binary already built (its profile is what PROFILE says)
else
  cargo build --quiet --profile "$PROFILE" --bin meshtop
  out="$CARGO_TARGET_DIR/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")"
  meshtop="$out/meshtop"
fi

work=$(mktemp -d)
name="bench-timeline-$$-$RANDOM"
cleanup() {
  local ids
  for _ in $(seq 0 "$TIERS"); do
    ids=$(docker image ls -q --no-trunc --filter "label=jr2.dev/mesh=$name" | sort -u)
    [ -z "$ids" ] && break
    docker image rm -f $ids > /dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
us_now() { echo "${EPOCHREALTIME/./}"; }

per_tier=$(( MODULES / TIERS ))
mesh="$work/mesh"
mkdir -p "$mesh"
{
  printf '[mesh]\nname = "%s"\n\n[target]\nkind = "docker"\n' "$name"
  for t in $(seq 0 $(( TIERS - 1 ))); do
    for i in $(seq 0 $(( per_tier - 1 ))); do
      m="t$t-m$i"
      mkdir -p "$mesh/$m"
      echo "module $m" > "$mesh/$m/file.txt"
      if [ "$t" = 0 ]; then
        printf 'FROM scratch\nCOPY file.txt /%s.txt\n' "$m" > "$mesh/$m/Dockerfile"
        printf '\n[[module]]\nname = "%s"\ncontext = "%s"\npolicy = "record"\n' "$m" "$m"
      else
        printf 'ARG BASE\nFROM ${BASE}\nCOPY file.txt /%s.txt\n' "$m" > "$mesh/$m/Dockerfile"
        printf '\n[[module]]\nname = "%s"\ncontext = "%s"\nbase = "t%s-m%s"\npolicy = "record"\n' \
          "$m" "$m" $(( t - 1 )) "$i"
      fi
    done
  done
} > "$mesh/mesh.toml"

converge() { "$meshtop" --mesh "$mesh/mesh.toml" --state "$work/state.db" converge "$@" > /dev/null 2>&1; }

echo "building the $MODULES-module mesh once…" >&2
converge || { echo "FAIL: the first converge failed" >&2; exit 1; }

# One run of each, in turn; prints "<with µs> <without µs>".
pair() {
  local t0 t1 t2
  t0=$(us_now); converge "$@"; t1=$(us_now)
  MESHTOP_TIMELINE=off converge "$@"; t2=$(us_now)
  echo "$(( t1 - t0 )) $(( t2 - t1 ))"
}

measure() { # runs, args… → "with_us without_us"
  local runs=$1; shift
  local with=() without=()
  for _ in $(seq "$runs"); do
    read -r a b < <(pair "$@")
    with+=("$a"); without+=("$b")
  done
  echo "$(printf '%s\n' "${with[@]}" | median) $(printf '%s\n' "${without[@]}" | median)"
}

read -r rec_with rec_without < <(measure "$RUNS")
echo "forced converges ($FORCE_RUNS pairs)…" >&2
read -r force_with force_without < <(measure "$FORCE_RUNS" --force)

# The recording is kept: the last forced converge with it left a timeline of every module.
kept=$("$meshtop" --mesh "$mesh/mesh.toml" --state "$work/state.db" trace --format json \
  | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["timeline"]["modules"]))')

report() { # label with without
  awk -v l="$1" -v w="$2" -v o="$3" 'BEGIN {
    r = w / o; printf "  %-34s with %8.1f ms  without %8.1f ms  ratio %.3f× (target ≤ 1.02×) %s\n",
      l, w / 1000, o / 1000, r, (r <= 1.02 ? "MET" : "MISSED") }'
}
echo "timeline recording overhead, $MODULES modules, $PROFILE profile (medians; the newest operation's timeline holds $kept modules):"
report "a) record answers every module ($RUNS)" "$rec_with" "$rec_without"
report "b) --force, every module built ($FORCE_RUNS)" "$force_with" "$force_without"
