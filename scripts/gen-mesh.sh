#!/usr/bin/env bash
# Generate a mesh of MODULES modules (default 10,000) with tiny contexts (a Dockerfile and one small
# file each), BASES of them bases (default 100) that the others build on, in a fresh git repository:
# `gen-mesh.sh DIR`. Used by bench-scale.sh (issue 41's figures). BASES=0: every module `FROM scratch`
# on its own (no base: each ref is known without any build).
set -euo pipefail
dir=${1:?usage: gen-mesh.sh DIR}
MODULES=${MODULES:-10000}
BASES=${BASES:-100}
KIND=${KIND:-docker}
mkdir -p "$dir"
python3 - "$dir" "$MODULES" "$BASES" "$KIND" <<'PY'
import os, sys
root, modules, bases, kind = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
with open(os.path.join(root, "mesh.toml"), "w") as mesh:
    mesh.write(f'[mesh]\nname = "scale"\n\n[target]\nkind = "{kind}"\n')
    for m in range(modules):
        name = f"b{m:03d}" if m < bases else f"m{m:05d}"
        alone = m < bases or bases == 0
        ctx = os.path.join(root, name)
        os.makedirs(ctx, exist_ok=True)
        with open(os.path.join(ctx, "Dockerfile"), "w") as out:
            out.write("FROM scratch\nCOPY app.txt /\n" if alone else "ARG BASE\nFROM ${BASE}\nCOPY app.txt /\n")
        with open(os.path.join(ctx, "app.txt"), "w") as out:
            out.write(f"module {name}\n")
        base = "" if alone else f'base = "b{m % bases:03d}"\n'
        mesh.write(f'\n[[module]]\nname = "{name}"\ncontext = "{name}"\n{base}policy = "record"\n')
PY
git -C "$dir" init -q
git -C "$dir" add -A
git -C "$dir" -c user.email=bench@example -c user.name=bench commit -qm mesh
echo "generated $dir: $MODULES modules ($BASES bases)" >&2
