#!/usr/bin/env bash
# Issue 21's figures: what a clean machine pays for the example mesh (assets/example) that CI
# published to the real registry on 127.0.0.1:5000 (scripts/start-registry.sh), three ways:
#   - reuse:  `meshtop converge` on a clean machine (the mesh's containers and images removed, a
#             fresh state file): the registry vouches, every module is pulled, zero builds;
#   - pull:   `docker pull` of the same images by digest, one after another (the physical limit);
#   - build:  `meshtop converge` on a clean machine with the registry unreachable, so it builds. A
#             clean machine has no BuildKit cache either: before each build run the daemon's build
#             cache is pruned (`docker builder prune -af`, the whole daemon's; PRUNE=0 keeps it, and
#             the figure is then a warm-cache lower bound).
# Each figure is a median of RUNS runs. PROFILE=release by default.
# The machines (containers) a converge creates are part of its time; `docker pull` creates none, so
# the reuse is also timed with the mesh's [[machine]] tables left out (the same pulls, nothing else).
set -euo pipefail

RUNS=${RUNS:-5}
PROFILE=${PROFILE:-release}
REGISTRY=${REGISTRY:-127.0.0.1:5000}

cd "$(dirname "$0")/.."
cargo build --quiet --profile "$PROFILE" --bin meshtop
# The checkout's own target directory unless CARGO_TARGET_DIR names another.
out="${CARGO_TARGET_DIR:-$PWD/target}/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")"
meshtop="$out/meshtop"
[ -x /bin/busybox ] || { echo "error: /bin/busybox is missing: apt-get install busybox-static" >&2; exit 1; }
curl -sf "http://$REGISTRY/v2/" > /dev/null || { echo "error: no registry at $REGISTRY: bash scripts/start-registry.sh" >&2; exit 1; }

work=$(mktemp -d)
name="benchreg-$$"
clean() {
  local ids
  ids=$(docker ps -aq --filter "label=jr2.dev/mesh=$name")
  [ -z "$ids" ] || docker rm -f $ids > /dev/null
  for _ in 1 2 3 4; do # dependents before their bases
    ids=$(docker image ls -q --no-trunc --filter "label=jr2.dev/mesh=$name" | sort -u)
    [ -z "$ids" ] && break
    docker image rm -f $ids > /dev/null 2>&1 || true
  done
}
trap 'clean; rm -rf "$work"' EXIT

cp -r assets/example "$work/mesh"
cp /bin/busybox "$work/mesh/base/"
file="$work/mesh/mesh.toml"
sed -i "s/^name = \"demo\"$/name = \"$name\"\nregistry = \"$REGISTRY\"/; s/name = \"demo-/name = \"$name-/" "$file"

now_ns() { local t=${EPOCHREALTIME/./}; echo "${t}000"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { awk -v ns="$1" 'BEGIN {printf "%.0f", ns / 1e6}'; }

echo "CI: converge --publish of the example mesh ($name) to $REGISTRY"
"$meshtop" --mesh "$file" --state "$work/ci.db" converge --publish > /dev/null 2>&1
refs=$("$meshtop" --mesh "$file" --state "$work/ci.db" builds --json --limit 100 |
  python3 -c 'import json,sys
d = json.load(sys.stdin)
for b in (d if isinstance(d, list) else d.get("builds", [])):
    if b.get("published_digest"):
        print(b["published_ref"].rsplit(":", 1)[0] + "@" + b["published_digest"])')
[ "$(echo "$refs" | wc -l)" -ge 5 ] || { echo "error: CI published $(echo "$refs" | wc -l) images, not 5" >&2; exit 1; }

# The same mesh without its declared machines (everything from the first [[machine]] on).
sed '/^\[\[machine\]\]/,$d' "$file" > "$work/mesh/nomachines.toml"

reuse=(); bare=(); pull=(); build=()
for i in $(seq 1 "$RUNS"); do
  clean; rm -f "$work"/clean*.db*
  t0=$(now_ns)
  "$meshtop" --mesh "$file" --state "$work/clean.db" converge --json > "$work/reuse.json" 2> /dev/null
  reuse+=($(( $(now_ns) - t0 )))
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["modules"]; sys.exit(0 if all(x["decision"]=="registry" for x in m) else 1)' "$work/reuse.json" ||
    { echo "error: the clean machine did not reuse every module" >&2; exit 1; }

  clean; rm -f "$work"/clean*.db*
  t0=$(now_ns)
  "$meshtop" --mesh "$work/mesh/nomachines.toml" --state "$work/clean-bare.db" converge --json > /dev/null 2>&1
  bare+=($(( $(now_ns) - t0 )))

  clean
  t0=$(now_ns)
  for r in $refs; do docker pull -q "$r" > /dev/null; done
  pull+=($(( $(now_ns) - t0 )))

  clean; rm -f "$work"/clean*.db*
  # The registry unreachable: a loopback port nothing listens on (the refs name that host: the
  # same inputs, another name).
  sed "s/^registry = .*/registry = \"127.0.0.1:9\"/" "$file" > "$work/mesh/unreachable.toml"
  [ "${PRUNE:-1}" = 0 ] || docker builder prune -af > /dev/null
  t0=$(now_ns)
  "$meshtop" --mesh "$work/mesh/unreachable.toml" --state "$work/clean-build.db" converge --json > "$work/build.json" 2> /dev/null
  build+=($(( $(now_ns) - t0 )))
done

r=$(printf '%s\n' "${reuse[@]}" | median); n=$(printf '%s\n' "${bare[@]}" | median); p=$(printf '%s\n' "${pull[@]}" | median); b=$(printf '%s\n' "${build[@]}" | median)
echo "clean machine, example mesh (5 modules, 3 machines), median of $RUNS:"
echo "  meshtop converge, registry vouches (pull, zero builds): $(ms "$r") ms"
echo "  the same without the 3 machines (the pulls alone):       $(ms "$n") ms"
echo "  docker pull of the same 5 images by digest:             $(ms "$p") ms"
echo "  meshtop converge that builds them (registry unreachable): $(ms "$b") ms"
awk -v r="$r" -v n="$n" -v p="$p" -v b="$b" 'BEGIN {printf "  reuse/pull = %.2f   pulls alone/pull = %.2f   reuse/build = %.2f\n", r / p, n / p, r / b}'
