#!/usr/bin/env bash
# Issue 53's figures: a send of 4 machines against Debian's `docker-compose up -d` of the same four
# services moved to the same new image, in the same script, and the ratio. Two cases: containers
# that stop promptly (a shell that exits on SIGTERM, 10 s grace unused), and containers that wait
# out a 10 s grace (busybox httpd as PID 1 ignores SIGTERM). The four services are one compose
# project, declared in the mesh file as the module's compose machines; each has a 1 s healthcheck.
# meshtop moves them side by side up to its default cap (3 of 4: one keeps serving), each counted
# sent once healthy; compose recreates all four at once and waits for none. Medians of RUNS (default
# 3) alternating runs, in seconds. The meshtop timed is a DEBUG build (BIN=path to time another):
# release builds are not made on this shared machine.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
RUNS=${RUNS:-3}
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --quiet --bin meshtop
  bin="$CARGO_TARGET_DIR/debug/meshtop"
fi
work=$(mktemp -d)
run="bsend$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
cleanup() {
  for case in prompt grace; do
    [ -f "$work/$case/compose.yml" ] &&
      docker-compose -p "$run$case" -f "$work/$case/compose.yml" down -t 0 >/dev/null 2>&1 || true
  done
  docker ps -aq --filter "label=jr2.dev/mesh=$run" | xargs -r docker rm -f >/dev/null 2>&1 || true
  docker images -q --filter "reference=$run/*" | sort -u | xargs -r docker rmi -f >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The module: busybox httpd FROM scratch (Debian's busybox-static), its version in www/.
mkdir -p "$work/mesh/web/www"
cp /bin/busybox "$work/mesh/web/busybox"
printf '[mesh]\nname = "%s"\n\n[[module]]\nname = "web"\ncontext = "web"\npolicy = "record"\n' \
  "$run" >"$work/mesh/mesh.toml"
build() { # $1: version, $2: CMD line; prints the ref the converge recorded
  echo "$1" >"$work/mesh/web/www/version.txt"
  printf 'FROM scratch\nCOPY busybox /bin/busybox\nRUN ["/bin/busybox", "--install", "-s", "/bin"]\nENV PATH=/bin\nCOPY www/ /www/\nCMD %s\n' \
    "$2" >"$work/mesh/web/Dockerfile"
  "$bin" --mesh "$work/mesh/mesh.toml" --state "$work/state.db" converge --json 2>/dev/null |
    jq -r '.modules[0].ref'
}
now() { date +%s.%N; }
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# $1: case name, $2: CMD line of both artifacts, $3: stop_grace_period.
bench_case() {
  local case=$1 cmd=$2 grace=$3 dir="$work/$1" project="$run$1"
  mkdir -p "$dir"
  local v1 v2
  v1=$(build "$case-v1" "$cmd")
  v2=$(build "$case-v2" "$cmd")
  {
    printf 'version: "2.4"\nservices:\n'
    for i in 1 2 3 4; do
      printf '  w%s:\n    image: ${IMAGE}\n    labels:\n      jr2.dev/module: web\n      jr2.dev/mesh: %s\n' "$i" "$run"
      printf '    stop_grace_period: %s\n    healthcheck:\n      test: ["CMD-SHELL", "cat /www/version.txt"]\n      interval: 1s\n      timeout: 1s\n      retries: 3\n' "$grace"
    done
  } >"$dir/compose.yml"
  cp "$work/mesh/mesh.toml" "$dir/mesh.toml.base"
  for i in 1 2 3 4; do
    printf '\n[[machine]]\nname = "%s-w%s"\nmodule = "web"\ncompose = { project = "%s", service = "w%s" }\n' \
      "$case" "$i" "$project" "$i" >>"$work/mesh/mesh.toml"
  done
  compose() { IMAGE=$1 docker-compose -p "$project" -f "$dir/compose.yml" "${@:2}" >/dev/null 2>&1; }
  healthy() { # wait until the four are healthy
    until [ "$(docker ps --filter "label=com.docker.compose.project=$project" --filter health=healthy -q | wc -l)" = 4 ]; do
      sleep 0.2
    done
  }
  local meshtop_times=() compose_times=()
  for _ in $(seq "$RUNS"); do
    # meshtop: the four on v1, the record on v2 (the last converge), `send` moves them.
    compose "$v1" up -d --force-recreate
    healthy
    local t0 t1
    t0=$(now)
    "$bin" --mesh "$work/mesh/mesh.toml" --state "$work/state.db" send web --yes >/dev/null 2>&1 ||
      { echo "meshtop send failed" >&2; exit 1; }
    t1=$(now)
    meshtop_times+=("$(echo "$t1 - $t0" | bc)")
    # docker-compose: the four on v1, then `up -d` on v2.
    compose "$v1" up -d --force-recreate
    healthy
    t0=$(now)
    compose "$v2" up -d
    t1=$(now)
    compose_times+=("$(echo "$t1 - $t0" | bc)")
  done
  compose "$v2" down -t 0
  cp "$dir/mesh.toml.base" "$work/mesh/mesh.toml"
  local m c
  m=$(printf '%s\n' "${meshtop_times[@]}" | median)
  c=$(printf '%s\n' "${compose_times[@]}" | median)
  printf '%-32s meshtop send %6.2f s   docker-compose up -d %6.2f s   ratio %.2f\n' \
    "4 machines, $case ($grace grace):" "$m" "$c" "$(echo "$m / $c" | bc -l)"
}

echo "meshtop: DEBUG build ($bin); docker-compose: $(docker-compose version --short 2>/dev/null || echo '?'); medians of $RUNS runs"
bench_case prompt '["sh", "-c", "trap \"exit 0\" TERM; httpd -f -p 8080 -h /www & wait"]' 10s
bench_case grace '["httpd", "-f", "-p", "8080", "-h", "/www"]' 10s
