#!/usr/bin/env bash
# gc figures (issue 12): a private copy of the example mesh converged N times with --force (every
# converge builds every module anew), then `meshtop gc --keep KEEP --grace 0s --yes` (no grace: every build is minutes old). Prints the mesh's images
# and bytes before and after: the image count, the sum of the images' sizes (shared layers counted in
# each image, as `docker images` shows them), the daemon's own total for all its images
# (`docker system df`), and what gc reported freed. Needs the Docker daemon and /bin/busybox.
set -euo pipefail

N=${N:-20}
KEEP=${KEEP:-3}
PROFILE=${PROFILE:-dev}

cd "$(dirname "$0")/.."
cargo build --quiet --profile "$PROFILE" --bin meshtop
target=${CARGO_TARGET_DIR:-target}
meshtop="$target/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")/meshtop"

work=$(mktemp -d)
name="gcfig-$$"
cleanup() {
  local ids
  ids=$(docker ps -aq --filter "label=jr2.dev/mesh=$name")
  [ -z "$ids" ] || docker rm -f $ids >/dev/null
  ids=$(docker images -q --filter "label=jr2.dev/mesh=$name" | sort -u)
  [ -z "$ids" ] || docker rmi -f $ids >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

cp -r assets/example "$work/mesh"
cp /bin/busybox "$work/mesh/base/"
sed -i "s/name = \"demo\"/name = \"$name\"/; s/name = \"demo-/name = \"$name-/" "$work/mesh/mesh.toml"
mt() { "$meshtop" --mesh "$work/mesh/mesh.toml" --state "$work/state.db" "$@"; }

figures() {
  local ids count bytes
  ids=$(docker images -q --no-trunc --filter "label=jr2.dev/mesh=$name" | sort -u)
  count=$(printf '%s\n' "$ids" | grep -c . || true)
  if [ "$count" -gt 0 ]; then
    bytes=$(docker image inspect --format '{{.Size}}' $ids | paste -sd+ | bc)
  else
    bytes=0
  fi
  printf '%-7s images %4d   bytes (sum of image sizes) %12d   daemon images total: %s\n' \
    "$1" "$count" "$bytes" "$(docker system df --format '{{if eq .Type "Images"}}{{.Size}}{{end}}' | grep .)"
}

mt converge >/dev/null 2>&1
for _ in $(seq 2 "$N"); do
  mt converge --force >/dev/null 2>&1
done
echo "mesh $name: $N converges (the first, then $((N - 1)) forced), gc --keep $KEEP --grace 0s"
figures before
status=0
mt gc --keep "$KEEP" --grace 0s --yes --json >"$work/gc.json" 2>"$work/gc.err" || status=$?
figures after
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); t=[c for c in r["candidates"] if c["outcome"] in ("removed","untagged")]; f=[c for c in r["candidates"] if (c["outcome"] or "").startswith("failed")]; print("gc reported: %d bytes freed, %d of %d candidate(s) taken, %d failed" % (r["bytes_freed"], len(t), len(r["candidates"]), len(f))); [print("  failed:", c["name"], c["outcome"]) for c in f]' "$work/gc.json" || true
if [ "$status" -ne 0 ]; then
  echo "gc exited $status:" >&2
  tail -n 20 "$work/gc.err" >&2
  exit "$status"
fi
