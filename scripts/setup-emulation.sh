#!/bin/bash
# Emulation of linux/arm64 for the multi-platform tests (tests/pool_platforms.rs), idempotent:
# Debian's qemu-user-static registered through binfmt_misc WITH the F (fix-binary) flag, so the
# kernel holds the interpreter open and it runs inside containers and BuildKit's sandboxes, which
# do not see the host's /usr/libexec; and an arm64 busybox for the test image, extracted from
# Debian's busybox-static:arm64 into a cache directory (never committed).
# Fails loudly when the kernel refuses (no binfmt_misc, no right to mount or register).
set -euo pipefail

cache="${MESHTOP_EMULATION_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/meshtop-tests}"
sudo_cmd=""
[ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"

if ! dpkg -s qemu-user-static >/dev/null 2>&1; then
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq qemu-user-static >/dev/null
fi

binfmt=/proc/sys/fs/binfmt_misc
if [ ! -e "$binfmt/register" ]; then
  if ! $sudo_cmd mount -t binfmt_misc binfmt_misc "$binfmt"; then
    echo "setup-emulation.sh: cannot mount binfmt_misc at $binfmt (the kernel or this container refuses): arm64 cannot be emulated here" >&2
    exit 1
  fi
fi

# Debian's own line (magic, mask, interpreter), with the F flag whatever it says.
handler="$binfmt/qemu-aarch64"
if [ -e "$handler" ] && ! grep -q '^flags:.*F' "$handler"; then
  # Registered without F (by hand, or an older qemu): it would not work in a container.
  echo -1 | $sudo_cmd tee "$handler" >/dev/null
fi
if [ ! -e "$handler" ]; then
  conf=/usr/lib/binfmt.d/qemu-aarch64.conf
  line=$(cat "$conf")
  flags=${line##*:}
  case "$flags" in *F*) ;; *) line="${line}F" ;; esac
  if ! printf '%s' "$line" | $sudo_cmd tee "$binfmt/register" >/dev/null; then
    echo "setup-emulation.sh: the kernel refused to register qemu-aarch64 in $binfmt/register (line: $line)" >&2
    exit 1
  fi
fi
if ! grep -q '^enabled' "$handler" || ! grep -q '^flags:.*F' "$handler"; then
  echo "setup-emulation.sh: qemu-aarch64 is registered but not enabled with the F flag:" >&2
  cat "$handler" >&2
  exit 1
fi

busybox="$cache/busybox-arm64"
if [ ! -x "$busybox" ]; then
  mkdir -p "$cache"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo_cmd dpkg --add-architecture arm64
    $sudo_cmd apt-get update -qq
  fi
  (cd "$work" && apt-get download -qq busybox-static:arm64 >/dev/null 2>&1) || {
    $sudo_cmd apt-get update -qq
    (cd "$work" && apt-get download -qq busybox-static:arm64)
  }
  dpkg-deb -x "$work"/busybox-static_*_arm64.deb "$work/root"
  cp "$work/root/bin/busybox" "$busybox.part"
  mv "$busybox.part" "$busybox"
fi
# The emulated busybox must run here, or every arm64 test would fail further away from the cause.
if [ "$("$busybox" uname -m)" != aarch64 ]; then
  echo "setup-emulation.sh: $busybox does not run as aarch64 under qemu" >&2
  exit 1
fi
echo "setup-emulation.sh: linux/arm64 emulated (qemu-aarch64, flags $(sed -n 's/^flags: //p' "$handler")); arm64 busybox at $busybox"
