#!/usr/bin/env bash
# Issues 21 and 29's figures: what a clean machine pays for the example mesh (assets/example) that CI
# published, signed, to the real registry on 127.0.0.1:5000 (scripts/start-registry.sh):
#   - trusted: `meshtop converge` on a clean machine (the mesh's containers and images removed, a
#             fresh state file) whose mesh file trusts CI's key (`trust = ["keys/ci.pub"]`): the
#             registry vouches for each module after its signature verifies (the `.sig` manifest and
#             its payload read per ref) and its signed provenance names the ref's inputs (the `.att`
#             manifest, issue 40), every module is pulled, zero builds;
#   - reuse:  the same converge without `trust` (nothing verified): what verifying costs;
#   - pull:   `docker pull` of the same images by digest, one after another (the physical limit);
#   - build:  `meshtop converge` on a clean machine with the registry unreachable, so it builds. A
#             clean machine has no BuildKit cache either: before each build run the daemon's build
#             cache is pruned (`docker builder prune -af`, the whole daemon's; PRUNE=0 keeps it, and
#             the figure is then a warm-cache lower bound).
# Each figure is a median of RUNS runs. PROFILE=release by default; BUILD=0 leaves the build out.
# The machines (containers) a converge creates are part of its time; `docker pull` creates none, so
# the trusted converge is also timed with the mesh's [[machine]] tables left out (the same pulls and
# signature reads, nothing else): that one is the figure to set beside `docker pull` (issue 29: at
# most 1.3x).
# CI's key is made here with openssl (ECDSA P-256, PKCS#8), and CI signs with `--sign-key`.
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
sed -i "s/^name = \"demo\"$/name = \"$name\"\nregistry = \"$REGISTRY\"\ntrust = [\"keys\/ci.pub\"]/; s/name = \"demo-/name = \"$name-/" "$file"
grep -q '^trust = \["keys/ci.pub"\]$' "$file" || { echo "error: could not add trust to $file" >&2; exit 1; }
mkdir -p "$work/mesh/keys"
openssl ecparam -name prime256v1 -genkey -noout 2> /dev/null |
  openssl pkcs8 -topk8 -nocrypt -out "$work/ci.key"
chmod 600 "$work/ci.key"
openssl ec -in "$work/ci.key" -pubout -out "$work/mesh/keys/ci.pub" 2> /dev/null

now_ns() { local t=${EPOCHREALTIME/./}; echo "${t}000"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { awk -v ns="$1" 'BEGIN {printf "%.0f", ns / 1e6}'; }

echo "CI: converge --publish --sign-key of the example mesh ($name) to $REGISTRY"
"$meshtop" --mesh "$file" --state "$work/ci.db" converge --publish --sign-key "$work/ci.key" > /dev/null 2>&1
refs=$("$meshtop" --mesh "$file" --state "$work/ci.db" builds --json --limit 100 |
  python3 -c 'import json,sys
d = json.load(sys.stdin)
for b in (d if isinstance(d, list) else d.get("builds", [])):
    if b.get("published_digest"):
        print(b["published_ref"].rsplit(":", 1)[0] + "@" + b["published_digest"])')
[ "$(echo "$refs" | wc -l)" -ge 5 ] || { echo "error: CI published $(echo "$refs" | wc -l) images, not 5" >&2; exit 1; }
# Issue 40: each carries its SLSA provenance under `sha256-<hex>.att`, which the trusted converge
# reads too (one more manifest per ref): the trusted figure below includes it.
for ref in $refs; do
  repo=${ref%@*}; repo=${repo#*/}; digest=${ref#*@}
  curl -sf -o /dev/null -H 'Accept: application/vnd.oci.image.manifest.v1+json' \
    "http://$REGISTRY/v2/$repo/manifests/${digest/:/-}.att" ||
    { echo "error: $ref carries no provenance (.att)" >&2; exit 1; }
done

# The same mesh without its declared machines (everything from the first [[machine]] on), and
# without trust.
sed '/^\[\[machine\]\]/,$d' "$file" > "$work/mesh/nomachines.toml"
sed '/^trust = /d' "$file" > "$work/mesh/untrusted.toml"

# Converge mesh file $1 on a clean machine (state $2), timed into the array named $3; every module
# must come from the registry, and with trust each signed by keys/ci.pub.
timed_clean_converge() {
  local mesh=$1 db=$2 t0
  clean; rm -f "$work"/clean*.db*
  t0=$(now_ns)
  "$meshtop" --mesh "$mesh" --state "$db" converge --json > "$work/converge.json" 2> "$work/converge.err" ||
    { echo "error: the clean machine's converge of $mesh failed:" >&2; cat "$work/converge.err" >&2; exit 1; }
  eval "$3+=($(( $(now_ns) - t0 )))"
  python3 -c 'import json,sys; m=json.load(open(sys.argv[1]))["modules"]; sys.exit(0 if all(x["decision"]=="registry" for x in m) else 1)' "$work/converge.json" ||
    { echo "error: the clean machine did not reuse every module ($mesh)" >&2; exit 1; }
}
# The plan of a clean machine with trust says every module is signed by CI's key.
clean
"$meshtop" --mesh "$file" --state "$work/clean-plan.db" plan --json |
  python3 -c 'import json,sys
m = json.load(sys.stdin)["modules"]
bad = [x["name"] for x in m if x["decision"] != "registry" or "signed by keys/ci.pub" not in x["reason"]]
sys.exit("error: not vouched by a signature of keys/ci.pub: %s" % bad if bad else 0)'

trusted=(); reuse=(); bare=(); pull=(); build=()
for i in $(seq 1 "$RUNS"); do
  timed_clean_converge "$file" "$work/clean.db" trusted
  timed_clean_converge "$work/mesh/untrusted.toml" "$work/clean-untrusted.db" reuse
  timed_clean_converge "$work/mesh/nomachines.toml" "$work/clean-bare.db" bare

  clean
  t0=$(now_ns)
  for r in $refs; do docker pull -q "$r" > /dev/null; done
  pull+=($(( $(now_ns) - t0 )))

  [ "${BUILD:-1}" = 1 ] || continue
  clean; rm -f "$work"/clean*.db*
  # The registry unreachable: a loopback port nothing listens on (the refs name that host: the
  # same inputs, another name).
  sed "s/^registry = .*/registry = \"127.0.0.1:9\"/" "$file" > "$work/mesh/unreachable.toml"
  [ "${PRUNE:-1}" = 0 ] || docker builder prune -af > /dev/null
  t0=$(now_ns)
  "$meshtop" --mesh "$work/mesh/unreachable.toml" --state "$work/clean-build.db" converge --json > "$work/build.json" 2> /dev/null
  build+=($(( $(now_ns) - t0 )))
done

med() { local name="$1[@]"; local values=("${!name}"); [ ${#values[@]} -gt 0 ] && printf '%s\n' "${values[@]}" | median || echo 0; }
t=$(med trusted); r=$(med reuse); n=$(med bare); p=$(med pull); b=$(med build)
echo "clean machine, example mesh (5 modules, 3 machines), CI-signed, median of $RUNS:"
echo "  meshtop converge with trust (verify, pull, zero builds):   $(ms "$t") ms"
echo "  the same without trust (nothing verified):                 $(ms "$r") ms"
echo "  with trust, without the 3 machines (verify + pulls alone): $(ms "$n") ms"
echo "  docker pull of the same 5 images by digest:               $(ms "$p") ms"
[ "$b" = 0 ] || echo "  meshtop converge that builds them (registry unreachable): $(ms "$b") ms"
awk -v t="$t" -v r="$r" -v n="$n" -v p="$p" 'BEGIN {
  printf "  trusted, pulls alone / docker pull = %.2f   (issue 29: at most 1.30)\n", n / p
  printf "  trusted converge / docker pull = %.2f   trusted / untrusted converge = %.2f\n", t / p, t / r }'
[ "$b" = 0 ] || awk -v t="$t" -v b="$b" 'BEGIN {printf "  trusted reuse / build = %.2f\n", t / b}'
