#!/usr/bin/env bash
# The README's test command: installs and starts what the tests need, then runs every test.
# Tests that need Docker or the registry fail loudly when they are missing; nothing is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

# mount: the full-disk test mounts a small tmpfs; util-linux: setpriv (read-only state as another user);
# openssh-client: a real ssh agent for `ssh = true`; openssh-server: a builder reached over ssh://; gcc and libc6-dev: its static in-build client;
# iproute2: the second daemon's own bridge (scripts/start-second-daemon.sh); docker-compose: a send keeps a compose stack's
# service whole (tests/it/send_compose.rs).
packages=(busybox-static docker-registry tmux curl openssl procps mount util-linux openssh-client openssh-server gcc libc6-dev iproute2 docker-compose
  qemu-user-static) # qemu-user-static: linux/arm64 builds and runs under emulation (scripts/setup-emulation.sh)
missing=()
for package in "${packages[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
# kubectl is the oracle of the Kubernetes tests: the machine's own, else Debian's kubernetes-client.
command -v kubectl >/dev/null 2>&1 || missing+=(kubernetes-client)
if [ ${#missing[@]} -gt 0 ]; then
  echo "test.sh: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! docker info >/dev/null 2>&1; then
  echo "test.sh: the Docker daemon does not answer (docker info failed): start it, e.g. 'sudo systemctl start docker'" >&2
  exit 1
fi

# What killed tests left (containers, images, tmux servers, registry repositories named by a test
# no longer running) goes first; the example mesh's `demo` machines and the user's own stay.
bash scripts/sweep-tests.sh

# The example mesh's base carries Debian's static busybox (see the README).
cp -f /bin/busybox assets/example/base/busybox

bash scripts/start-registry.sh
# The builder-pool tests build on two daemons: the machine's own and this one (its own socket).
bash scripts/start-second-daemon.sh
# Remote BuildKit (tests/remote_buildkit.rs): a dockerd serving TCP with TLS only (openssl's test CA),
# and one more the fault test SIGKILLs mid-step and starts again.
bash scripts/start-tls-daemon.sh tls
bash scripts/start-tls-daemon.sh fault
# The multi-platform tests build linux/arm64 through the pool under emulation: qemu-user-static
# (Debian's) registered through binfmt_misc with the F flag, and an arm64 busybox in a cache dir.
bash scripts/setup-emulation.sh

# The build of every test binary needs a few GB (a CI machine once ran out of disk linking them):
# say what is free where the target directory is, so that a full disk reads as that.
target_dir="${CARGO_TARGET_DIR:-$PWD/target}"
mkdir -p "$target_dir"
free_kb=$(df -Pk "$target_dir" | awk 'NR == 2 { print $4 }')
echo "test.sh: $((free_kb / 1024)) MB free for $target_dir (the suite's build needs about 1.3 GB, the tests a few hundred MB more)"
if [ "${free_kb:-0}" -lt $((3 * 1024 * 1024)) ]; then
  echo "test.sh: warning: less than 3 GB free: the build may fail with 'No space left on device'" >&2
fi

# nextest runs every test in a process of its own, four at a time, and ends one that hangs
# (.config/nextest.toml: named after 60 s, ended after 5 minutes): without it a hang would run to
# CI's limit, so a machine without it builds it once from crates.io.
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "test.sh: installing cargo-nextest (cargo install cargo-nextest --locked): once per machine"
  cargo install cargo-nextest --locked --quiet
fi
# --workspace: every crate's own tests (the domain's, the engine's…) and the one integration binary.
cargo nextest run --workspace --locked "$@"
