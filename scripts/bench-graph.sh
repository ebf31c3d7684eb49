#!/usr/bin/env bash
# Issue 54's benchmark, on the real Docker daemon: a mesh of MODULES modules in TIERS tiers built from
# nothing by `meshtop converge --jobs JOBS`, against a `docker build` loop over the same contexts in tier
# order (each module after its base, one at a time, as a script would), run in this same script.
# Prints both wall times and their ratio (target: meshtop <= 0.4x the loop).
#
# The mesh: MODULES/TIERS chains, each TIERS long (module i of tier t builds FROM module i of tier t-1),
# every module a tiny FROM-scratch image with one file of its own (tier 0 also carries busybox, for
# the slow steps). UNEVEN=1 makes one module per tier slow (a `sleep SLOW_S` step, a different chain
# on each tier): a tier barrier waits for it at every tier, a graph schedule only along its chain.
#
# The loop uses the docker CLI's builder: the daemon's BuildKit where the CLI has buildx, else the
# legacy builder (this machine's docker CLI has no buildx); the script says which it used.
# MESHTOP_CONTEXT=tar in the environment sends meshtop's contexts as tars (as before issue 56) rather than
# through the session. MESHTOP=/path/to/meshtop times another binary (e.g. the one before this change) instead of building
# this checkout's (PROFILE=release by default). LOOP=0 skips the loop (then no ratio). Each step is one
# run: together they take about 2x the loop's time, so pick sizes that finish within ten minutes.
set -euo pipefail

MODULES=${MODULES:-300}
TIERS=${TIERS:-30}
JOBS=${JOBS:-2}
UNEVEN=${UNEVEN:-0}
SLOW_S=${SLOW_S:-2}
LOOP=${LOOP:-1}
PROFILE=${PROFILE:-release}

cd "$(dirname "$0")/.."
if [ -z "${MESHTOP:-}" ]; then
  cargo build --quiet --profile "$PROFILE" --bin meshtop
  MESHTOP="${CARGO_TARGET_DIR:-$PWD/target}/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")/meshtop"
fi
[ -x /bin/busybox ] || { echo "bench-graph: needs Debian's busybox-static (/bin/busybox)" >&2; exit 1; }
chains=$(( MODULES / TIERS ))
[ "$chains" -ge 1 ] || { echo "bench-graph: MODULES ($MODULES) must be at least TIERS ($TIERS)" >&2; exit 2; }

work=$(mktemp -d)
name="benchgraph-$(od -An -N4 -tx4 /dev/urandom | tr -d ' ')"
cleanup() {
  local ids
  # A base cannot go while its dependents are there: remove what can go, deepest first.
  for _ in $(seq 0 "$TIERS"); do
    ids=$( (docker image ls -q --no-trunc --filter "label=jr2.dev/mesh=$name"; \
      docker image ls -q --no-trunc "$name-loop/*") | sort -u)
    [ -z "$ids" ] && break
    docker image rm -f $ids > /dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# The mesh, and each module's base in tier order for the loop ("module base" lines).
mesh="$work/mesh"
mkdir -p "$mesh"
order="$work/order"
{
  printf '[mesh]\nname = "%s"\n\n[target]\nkind = "docker"\n' "$name"
  for t in $(seq 0 $(( TIERS - 1 ))); do
    for i in $(seq 0 $(( chains - 1 ))); do
      m="t$t-m$i"
      mkdir -p "$mesh/$m"
      echo "module $m of $name" > "$mesh/$m/file.txt" # its own: no cache of an earlier run answers
      slow=""
      [ "$UNEVEN" = 1 ] && [ "$i" = $(( t % chains )) ] && slow="RUN [\"/bin/busybox\", \"sleep\", \"$SLOW_S\"]\n"
      if [ "$t" = 0 ]; then
        cp /bin/busybox "$mesh/$m/busybox"
        printf "FROM scratch\nCOPY busybox /bin/busybox\nCOPY file.txt /%s.txt\n$slow" "$m" > "$mesh/$m/Dockerfile"
        printf '\n[[module]]\nname = "%s"\ncontext = "%s"\npolicy = "record"\n' "$m" "$m"
        echo "$m -" >> "$order"
      else
        printf "ARG BASE\nFROM \${BASE}\nCOPY file.txt /%s.txt\n$slow" "$m" > "$mesh/$m/Dockerfile"
        printf '\n[[module]]\nname = "%s"\ncontext = "%s"\nbase = "t%s-m%s"\npolicy = "record"\n' \
          "$m" "$m" $(( t - 1 )) "$i"
        echo "$m t$(( t - 1 ))-m$i" >> "$order"
      fi
    done
  done
} > "$mesh/mesh.toml"
(cd "$mesh" && git init -q && git add -A && git -c user.email=bench@example -c user.name=bench commit -qm mesh)

secs() { awk -v us="$1" 'BEGIN {printf "%.1f", us / 1e6}'; }
uneven=""
[ "$UNEVEN" = 1 ] && uneven=", one ${SLOW_S}s module per tier"
shape="$MODULES modules, $TIERS tiers, --jobs $JOBS$uneven"
echo "bench-graph: $shape; meshtop $MESHTOP" >&2

t0=${EPOCHREALTIME/./}
"$MESHTOP" --mesh "$mesh/mesh.toml" --state "$work/state.db" converge --jobs "$JOBS" --json \
  > "$work/converge.json" 2> "$work/converge.log" || { tail -20 "$work/converge.log" >&2; exit 1; }
t1=${EPOCHREALTIME/./}
meshtop_us=$(( t1 - t0 ))
python3 - "$work/converge.json" <<'PY' >&2
import json, sys
s = json.load(open(sys.argv[1]))
t = s.get("timeline", {})
built = sum(1 for m in s["modules"] if m["outcome"] == "built")
print(f"  meshtop: {built} built; critical path {' → '.join(t.get('critical_path', [])[:4])}"
      f"{' …' if len(t.get('critical_path', [])) > 4 else ''} {t.get('critical_ms', 0) / 1000:.1f} s"
      f" of {t.get('total_ms', 0) / 1000:.1f} s; builders {t.get('builders')}")
PY
echo "meshtop_s $(secs "$meshtop_us")"
# The daemon's time on each build (from the BuildKit session to its last answer), per module.
"$MESHTOP" --mesh "$mesh/mesh.toml" --state "$work/state.db" builds --json --limit 100000 \
  > "$work/builds.json" 2>> "$work/converge.log"
python3 - "$work/builds.json" <<'PY'
import json, statistics, sys
times = [b["daemon_ms"] for b in json.load(open(sys.argv[1])) if b.get("daemon_ms") is not None]
if times:
    print(f"daemon_ms_per_module median {statistics.median(times):.0f} mean {statistics.mean(times):.0f} (of {len(times)} builds)")
PY

[ "$LOOP" = 1 ] || exit 0
if docker buildx version > /dev/null 2>&1; then
  builder="docker build (BuildKit, through buildx)"; export DOCKER_BUILDKIT=1
else
  builder="docker build (the legacy builder: this docker CLI has no buildx)"; export DOCKER_BUILDKIT=0
fi
echo "  the loop: $builder, one module at a time in tier order" >&2
t0=${EPOCHREALTIME/./}
while read -r module base; do
  args=()
  [ "$base" = - ] || args=(--build-arg "BASE=$name-loop/$base")
  docker build -q "${args[@]}" -t "$name-loop/$module" "$mesh/$module" > /dev/null 2> "$work/loop.log" \
    || { cat "$work/loop.log" >&2; exit 1; }
done < "$order"
t1=${EPOCHREALTIME/./}
loop_us=$(( t1 - t0 ))
echo "loop_s $(secs "$loop_us")"
echo "ratio $(awk -v a="$meshtop_us" -v b="$loop_us" 'BEGIN {printf "%.2f", a / b}') (meshtop / the loop; target <= 0.4)"
