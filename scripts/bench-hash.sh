#!/usr/bin/env bash
# Hashing throughput: meshtop's inputs walk+hash vs `sha256sum` over the same files, in the same run.
# Generates a context of FILES files totalling MB megabytes (default 2,000 files, 200 MB) in a temp dir,
# warms the page cache, times each side RUNS times (best of) and prints the throughput ratio.
# Target: meshtop >= 0.8x sha256sum.
set -euo pipefail

FILES=${FILES:-2000}
MB=${MB:-200}
RUNS=${RUNS:-3}
PROFILE=${PROFILE:-dev} # dev deps are prebuilt; sha2 is opt-level 3 in every profile
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}

cd "$(dirname "$0")/.."
cargo build --quiet --profile "$PROFILE" --example hash_context
dir_of_profile=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")
bin="$CARGO_TARGET_DIR/$dir_of_profile/examples/hash_context"

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
size=$(( MB * 1024 * 1024 / FILES ))
echo "generating $FILES files of $size bytes ($MB MB) in $ctx" >&2
printf 'FROM scratch\nCOPY . /\n' > "$ctx/Dockerfile"
head -c $(( MB * 1024 * 1024 )) /dev/urandom > "$ctx/blob"
for i in $(seq 0 $(( FILES - 1 ))); do
  d="$ctx/d$(( i % 20 ))"
  mkdir -p "$d"
  dd if="$ctx/blob" of="$d/f$i.bin" bs="$size" skip="$i" count=1 status=none
done
rm "$ctx/blob"
find "$ctx" -type f -print0 | sort -z > "$ctx.list"
trap 'rm -rf "$ctx" "$ctx.list"' EXIT
xargs -0 cat < "$ctx.list" > /dev/null # warm the page cache

now() { date +%s.%N; }
best_sum=999999
best_mesh=999999
for _ in $(seq "$RUNS"); do
  t0=$(now); xargs -0 sha256sum < "$ctx.list" > /dev/null; t1=$(now)
  s=$(echo "$t1 - $t0" | bc -l)
  best_sum=$(echo "if ($s < $best_sum) $s else $best_sum" | bc -l)
  t0=$(now); "$bin" "$ctx" > "$ctx.out"; t1=$(now)
  s=$(echo "$t1 - $t0" | bc -l)
  best_mesh=$(echo "if ($s < $best_mesh) $s else $best_mesh" | bc -l)
done
files=$(awk '/^files/ {print $2}' "$ctx.out")
rm -f "$ctx.out"
ratio=$(echo "$best_sum / $best_mesh" | bc -l)
printf 'context:   %s files, %s MB\n' "$files" "$MB"
printf 'sha256sum: %.3f s  (%.0f MB/s)\n' "$best_sum" "$(echo "$MB / $best_sum" | bc -l)"
printf 'meshtop:   %.3f s  (%.0f MB/s)\n' "$best_mesh" "$(echo "$MB / $best_mesh" | bc -l)"
printf 'ratio:     %.2fx sha256sum (target >= 0.8x)\n' "$ratio"
if [ "$(echo "$ratio >= 0.8" | bc -l)" != 1 ]; then
  echo "below target" >&2
  exit 1
fi
