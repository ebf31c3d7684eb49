#!/usr/bin/env bash
# Peak resident memory of `meshtop converge` whose build context holds one large file (issue 10:
# the context streams to the daemon, so the peak stays under 128 MB for a 1 GB context; before,
# the whole tar was held in memory: 2.1 GB). Needs the Docker daemon and GNU time (/usr/bin/time).
#
#   bash scripts/bench-context-memory.sh            # 1024 MB, the release binary (built if missing)
#   SIZE_MB=256 MESHTOP=target/debug/meshtop bash scripts/bench-context-memory.sh
set -euo pipefail
cd "$(dirname "$0")/.."
size_mb=${SIZE_MB:-1024}
bin=${MESHTOP:-target/release/meshtop}
if [[ ! -x $bin ]]; then
    cargo build --release --quiet
fi
[[ -x /usr/bin/time ]] || { echo "needs GNU time: apt-get install time" >&2; exit 2; }
dir=$(mktemp -d)
name="bench-mem-$$"
cleanup() {
    docker images -q --filter "label=jr2.dev/mesh=$name" | xargs -r docker rmi -f >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/big"
printf '[mesh]\nname = "%s"\n\n[target]\nkind = "docker"\n\n[[module]]\nname = "big"\ncontext = "big"\npolicy = "record"\n' \
    "$name" >"$dir/mesh.toml"
# The daemon receives the whole context either way; the image itself stays small.
printf 'FROM scratch\nCOPY Dockerfile /\n' >"$dir/big/Dockerfile"
head -c "${size_mb}M" /dev/urandom >"$dir/big/blob"
/usr/bin/time -f '%M' -o "$dir/peak" "$bin" --mesh "$dir/mesh.toml" --state "$dir/state.db" \
    converge >/dev/null 2>"$dir/log" || { cat "$dir/log" >&2; exit 1; }
peak_kb=$(tail -1 "$dir/peak")
echo "context ${size_mb} MB: peak resident memory $((peak_kb / 1024)) MB ($peak_kb kB) — $bin"
