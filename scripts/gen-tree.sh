#!/usr/bin/env bash
# Generate a mesh of MODULES modules (default 40) holding FILES files in all (default 12,000) of
# about SIZE bytes each (default 8 KiB), in a fresh git repository: `gen-tree.sh DIR`.
# Used by bench-plan.sh and bench-dashboard.sh (issue 11's figures).
set -euo pipefail
dir=${1:?usage: gen-tree.sh DIR}
MODULES=${MODULES:-40}
FILES=${FILES:-12000}
SIZE=${SIZE:-8192}
per=$((FILES / MODULES))
mkdir -p "$dir"
{
  echo '[mesh]'
  echo 'name = "bench"'
  echo
  echo '[target]'
  echo 'kind = "docker"'
} >"$dir/mesh.toml"
python3 - "$dir" "$MODULES" "$per" "$SIZE" <<'PY'
import os, sys, random
root, modules, per, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(11)
with open(os.path.join(root, "mesh.toml"), "a") as mesh:
    for m in range(modules):
        name = f"m{m:02d}"
        ctx = os.path.join(root, name)
        for f in range(per):
            sub = os.path.join(ctx, "src", f"d{f % 16:02d}")
            os.makedirs(sub, exist_ok=True)
            with open(os.path.join(sub, f"f{f:05d}.txt"), "wb") as out:
                out.write(rng.randbytes(size))
        with open(os.path.join(ctx, "Dockerfile"), "w") as out:
            out.write("FROM scratch\nCOPY . /\n")
        mesh.write(f'\n[[module]]\nname = "{name}"\ncontext = "{name}"\npolicy = "record"\n')
PY
git -C "$dir" init -q
git -C "$dir" add -A
git -C "$dir" -c user.email=bench@example -c user.name=bench commit -qm tree
echo "generated $dir: $MODULES modules, $((per * MODULES)) files of $SIZE bytes" >&2
