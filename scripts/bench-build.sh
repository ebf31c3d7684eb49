#!/usr/bin/env bash
# Issue 22's build benchmarks, on the real Docker daemon: meshtop's builds against the builder's own
# time, side by side in one run. Prints medians (ms) and ratios.
#
# 1) The dev loop: a small module (FILES files, busybox, one RUN) whose one file changed:
#    `meshtop converge` vs a build of the same Dockerfile and context without meshtop's labels.
#    meshtop serves the context through the build's session (issue 56: BuildKit asks for the one
#    file that changed); `MESHTOP_CONTEXT=tar` (the whole context as a tar, as before) is timed
#    beside it, run for run. Target (issue 56): <= 0.8x.
# 2) `meshtop converge --force` of TEN such modules vs TEN builds with the cache off, one after
#    another. Target: <= 1.5x.
# The reference builder is the daemon's BuildKit: `DOCKER_BUILDKIT=1 docker build` where the docker
# CLI can (it needs buildx), else the same `/build?version=2` call through the daemon's API with curl
# (the context tarred by `tar`, as the CLI would send it). The legacy builder
# (`DOCKER_BUILDKIT=0 docker build`) is printed beside it for scale. The script says which it used.
# RUNS runs each (median); PROFILE=release by default (PROFILE=dev uses the debug binary).
# meshtop builds a tier's modules JOBS at a time (default: its own, one per core) where the
# reference builds one after another; JOBS=1 compares one build at a time with one build at a time.
set -euo pipefail

FILES=${FILES:-50}
PARTS=${PARTS:-12} # 1: the dev loop, 2: ten modules with the cache off
TEN=${TEN:-10}
RUNS=${RUNS:-7}
PROFILE=${PROFILE:-release}
SOCKET=${DOCKER_SOCKET:-/var/run/docker.sock}

cd "$(dirname "$0")/.."
cargo build --quiet --profile "$PROFILE" --bin meshtop
# The checkout's own target directory unless CARGO_TARGET_DIR names another.
out="${CARGO_TARGET_DIR:-$PWD/target}/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")"
meshtop="$out/meshtop"
[ -x /bin/busybox ] || { echo "bench-build: needs Debian's busybox-static (/bin/busybox)" >&2; exit 1; }

work=$(mktemp -d)
name="benchb-$$"
ref="benchb-ref-$$"
cleanup() {
  docker image ls -q --no-trunc --filter "label=jr2.dev/mesh=$name" | sort -u | xargs -r docker image rm -f > /dev/null 2>&1 || true
  docker image ls -q --no-trunc "$ref" | sort -u | xargs -r docker image rm -f > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

now_ns() { local t=${EPOCHREALTIME/./}; echo "${t}000"; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { awk -v ns="$1" 'BEGIN {printf "%.0f", ns / 1e6}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a / b}'; }

api=$(docker version --format '{{.Server.APIVersion}}')
if DOCKER_BUILDKIT=1 docker build --help > /dev/null 2>&1 && docker buildx version > /dev/null 2>&1; then
  reference="DOCKER_BUILDKIT=1 docker build (the daemon's BuildKit through the docker CLI)"
  ref_build() { # dir tag no-cache
    DOCKER_BUILDKIT=1 docker build -q $([ "$3" = 1 ] && echo --no-cache) -t "$2" "$1" > /dev/null
  }
else
  reference="the daemon's BuildKit through its API (curl POST /v$api/build?version=2; no buildx CLI here)"
  ref_build() { # dir tag no-cache
    local answer
    answer=$(tar -C "$1" -cf - . | curl -sS --unix-socket "$SOCKET" -X POST \
      -H 'Content-Type: application/x-tar' --data-binary @- \
      "http://docker/v$api/build?version=2&t=$2&nocache=$([ "$3" = 1 ] && echo true || echo false)")
    case "$answer" in *'"errorDetail"'*) echo "reference build failed: $answer" >&2; exit 1 ;; esac
  }
fi
legacy_build() { # dir tag no-cache (the CLI's deprecation notice is shown only with a failure)
  local said
  said=$(DOCKER_BUILDKIT=0 docker build -q $([ "$3" = 1 ] && echo --no-cache) -t "$2" "$1" 2>&1 > /dev/null) \
    || { echo "legacy build failed: $said" >&2; exit 1; }
}

# One small module: busybox, FILES files under src/, one RUN over them.
module() { # dir
  mkdir -p "$1/src"
  cp /bin/busybox "$1/busybox"
  for i in $(seq 1 "$FILES"); do echo "file $i" > "$1/src/f$i.txt"; done
  printf 'FROM scratch\nCOPY busybox /bin/busybox\nCOPY src /src\nRUN ["/bin/busybox", "sh", "-c", "/bin/busybox ls /src | /bin/busybox wc -l > /count"]\n' > "$1/Dockerfile"
}

mesh="$work/mesh"
mkdir -p "$mesh"
{
  printf '[mesh]\nname = "%s"\n\n[target]\nkind = "docker"\n' "$name"
  for m in $(seq 1 "$TEN"); do
    printf '\n[[module]]\nname = "m%s"\ncontext = "m%s"\npolicy = "record"\n' "$m" "$m"
  done
} > "$mesh/mesh.toml"
for m in $(seq 1 "$TEN"); do module "$mesh/m$m"; done
state="$work/state.db"
converge() { "$meshtop" --mesh "$mesh/mesh.toml" --state "$state" converge "$@" > /dev/null 2>&1; }
converge # the first build: every module, its cache warm
ref_build "$mesh/m1" "$ref:warm" 0
legacy_build "$mesh/m1" "$ref:warm-legacy" 0

# ---- 1) one file changed in one module ---------------------------------------------------------
echo "bench-build: meshtop $PROFILE; reference: $reference"
if [[ $PARTS == *1* ]]; then
times_m=(); times_t=(); times_r=(); times_l=()
for i in $(seq 1 "$RUNS"); do
  echo "change $i" > "$mesh/m1/src/f1.txt"
  t0=$(now_ns); converge; t1=$(now_ns); times_m+=($(( t1 - t0 )))
  echo "tar change $i" > "$mesh/m1/src/f1.txt"
  t0=$(now_ns); MESHTOP_CONTEXT=tar converge; t1=$(now_ns); times_t+=($(( t1 - t0 )))
  echo "ref change $i" > "$mesh/m1/src/f1.txt"
  t0=$(now_ns); ref_build "$mesh/m1" "$ref:one" 0; t1=$(now_ns); times_r+=($(( t1 - t0 )))
  echo "legacy change $i" > "$mesh/m1/src/f1.txt"
  t0=$(now_ns); legacy_build "$mesh/m1" "$ref:one-legacy" 0; t1=$(now_ns); times_l+=($(( t1 - t0 )))
done
m=$(printf '%s\n' "${times_m[@]}" | median)
t=$(printf '%s\n' "${times_t[@]}" | median)
r=$(printf '%s\n' "${times_r[@]}" | median)
l=$(printf '%s\n' "${times_l[@]}" | median)
printf '%-48s %10s %12s %10s %8s\n' "case ($RUNS runs, median)" "meshtop" "BuildKit ref" "ratio" "legacy"
printf '%-48s %8s ms %9s ms %10s %5s ms\n' "one file changed, $FILES-file module (served)" "$(ms "$m")" "$(ms "$r")" "$(ratio "$m" "$r")" "$(ms "$l")"
printf '%-48s %8s ms %9s ms %10s\n' "the same, MESHTOP_CONTEXT=tar (as before)" "$(ms "$t")" "$(ms "$r")" "$(ratio "$t" "$r")"
fi
[[ $PARTS == *2* ]] || exit 0

# ---- 2) ten modules, cache off -----------------------------------------------------------------
times_m=(); times_r=(); times_l=()
for i in $(seq 1 "$RUNS"); do
  t0=$(now_ns); converge --force ${JOBS:+--jobs "$JOBS"}; t1=$(now_ns); times_m+=($(( t1 - t0 )))
  t0=$(now_ns)
  for n in $(seq 1 "$TEN"); do ref_build "$mesh/m$n" "$ref:m$n" 1; done
  t1=$(now_ns); times_r+=($(( t1 - t0 )))
  t0=$(now_ns)
  for n in $(seq 1 "$TEN"); do legacy_build "$mesh/m$n" "$ref:l$n" 1; done
  t1=$(now_ns); times_l+=($(( t1 - t0 )))
done
m=$(printf '%s\n' "${times_m[@]}" | median)
r=$(printf '%s\n' "${times_r[@]}" | median)
l=$(printf '%s\n' "${times_l[@]}" | median)
printf '%-48s %8s ms %9s ms %10s %5s ms\n' "converge --force${JOBS:+ --jobs $JOBS} of $TEN vs $TEN, cache off" "$(ms "$m")" "$(ms "$r")" "$(ratio "$m" "$r")" "$(ms "$l")"
echo "targets: the dev loop <= 0.80x (issue 56), ten modules <= 1.50x"
