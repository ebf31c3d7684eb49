#!/usr/bin/env bash
# Issue 3's converge benchmarks, on the real Docker daemon. Prints figures and ratios.
#
# a) A generated mesh of MODULES modules (TIERS tiers of FROM-scratch images with one tiny file
#    each, policy "record", platforms set in [mesh], no machines). After one converge builds all:
#    - record case: `meshtop converge` when the target's record answers every module;
#    - host case:   the same with the record removed (a fresh state database): the host answers.
#    Proves the record case makes ZERO daemon calls twice: with DOCKER_HOST=unix:///nonexistent.sock
#    (it must succeed) and through a counting proxy (examples/daemon_proxy.rs).
#    Timed twice: in-process (examples/converge_in_process.rs: the engine from mesh file to
#    summary, as the dashboard's converge key runs it) and as whole `meshtop converge` processes
#    (hyperfine when installed). Target: record case < 10% of the host case.
# b) The host listing: one bollard call (Daemon::labelled_images, examples/host_listing.rs) vs
#    `docker image ls --filter label=jr2.dev/module -q --no-trunc | xargs docker image inspect`
#    over IMAGES distinct labelled images (made with `docker import`, removed afterwards).
#    Target: >= 5x.
# Each figure is a median of RUNS runs. PARTS=a or PARTS=b runs one part. PROFILE=release by default (what users
# install; the first build of its dependencies takes a few minutes).
set -euo pipefail

MODULES=${MODULES:-50}
TIERS=${TIERS:-5}
IMAGES=${IMAGES:-200}
RUNS=${RUNS:-21}
PROFILE=${PROFILE:-release}
PARTS=${PARTS:-ab} # which parts to run: a, b or ab
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-/work/target}

cd "$(dirname "$0")/.."
cargo build --quiet --profile "$PROFILE" --bin meshtop --example daemon_proxy --example host_listing \
  --example converge_in_process
out="$CARGO_TARGET_DIR/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")"
meshtop="$out/meshtop"

work=$(mktemp -d)
name="bench-$$"
cleanup() {
  local ids
  # A base cannot go while its dependents are there: remove what can go, tier by tier.
  for _ in $(seq 0 "$TIERS"); do
    ids=$(docker image ls -q --no-trunc --filter "label=jr2.dev/mesh=$name" | sort -u)
    [ -z "$ids" ] && break
    docker image rm -f $ids > /dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

now_ns() { local t=${EPOCHREALTIME/./}; echo "${t}000"; } # microseconds → nanoseconds, no fork
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ms() { awk -v ns="$1" 'BEGIN {printf "%.1f", ns / 1e6}'; }

# ---- a) the generated mesh ------------------------------------------------------------------
if [[ $PARTS == *a* ]]; then
per_tier=$(( MODULES / TIERS ))
mesh="$work/mesh"
mkdir -p "$mesh"
{
  printf '[mesh]\nname = "%s"\nplatforms = ["linux/amd64"]\n\n[target]\nkind = "docker"\n' "$name"
  for t in $(seq 0 $(( TIERS - 1 ))); do
    for i in $(seq 0 $(( per_tier - 1 ))); do
      m="t$t-m$i"
      mkdir -p "$mesh/$m"
      echo "module $m" > "$mesh/$m/file.txt"
      if [ "$t" = 0 ]; then
        printf 'FROM scratch\nCOPY file.txt /%s.txt\n' "$m" > "$mesh/$m/Dockerfile"
        printf '\n[[module]]\nname = "%s"\ncontext = "%s"\npolicy = "record"\n' "$m" "$m"
      else
        printf 'ARG BASE\nFROM ${BASE}\nCOPY file.txt /%s.txt\n' "$m" > "$mesh/$m/Dockerfile"
        printf '\n[[module]]\nname = "%s"\ncontext = "%s"\nbase = "t%s-m%s"\npolicy = "record"\n' \
          "$m" "$m" $(( t - 1 )) "$i"
      fi
    done
  done
} > "$mesh/mesh.toml"

converge() { "$meshtop" --mesh "$mesh/mesh.toml" --state "$1" converge "${@:2}"; }

echo "a) $MODULES-module mesh ($TIERS tiers) in $mesh; first converge builds all…" >&2
t0=$(now_ns)
converge "$work/state.db" > /dev/null 2> "$work/first.log" || { cat "$work/first.log" >&2; exit 1; }
echo "   built in $(ms $(( $(now_ns) - t0 ))) ms" >&2

# zero daemon calls: an unreachable daemon must not matter, and a counting proxy must see nothing
DOCKER_HOST=unix:///nonexistent.sock converge "$work/state.db" --json > "$work/record.json" 2> /dev/null \
  || { echo "FAIL: the record case needed the daemon (DOCKER_HOST=unix:///nonexistent.sock)" >&2; exit 1; }
decided=$(grep -c '"decision": "record"' "$work/record.json")
[ "$decided" = "$MODULES" ] || { echo "FAIL: only $decided of $MODULES modules decided record" >&2; exit 1; }
calls_record=$("$out/examples/daemon_proxy" "$meshtop" --mesh "$mesh/mesh.toml" --state "$work/state.db" converge 2>&1 >/dev/null | sed -n 's/^daemon calls: //p')
calls_host=$("$out/examples/daemon_proxy" "$meshtop" --mesh "$mesh/mesh.toml" --state "$work/counted-fresh.db" converge 2>&1 >/dev/null | sed -n 's/^daemon calls: //p')

# In-process (the engine as the dashboard's converge key runs it: mesh file to summary, no
# process start), then whole processes (`meshtop converge` from a shell). Interleaved, so that
# drifting load on the shared machine hits both cases alike.
inproc="$out/examples/converge_in_process"
engine_record=(); engine_host=()
for _ in 1 2 3; do
  engine_record+=($("$inproc" "$mesh/mesh.toml" "$work/state.db" "$RUNS" | sed -n 's/^median_ms //p'))
  engine_host+=($("$inproc" "$mesh/mesh.toml" "$work/engine-fresh" "$RUNS" fresh | sed -n 's/^median_ms //p'))
done
engine_record_ms=$(printf '%s\n' "${engine_record[@]}" | median)
engine_host_ms=$(printf '%s\n' "${engine_host[@]}" | median)

# Processes are timed with hyperfine (-N: spawned directly, no shell) when it is installed
# (`apt-get install hyperfine`); else with bash's $EPOCHREALTIME, whose fork of bash itself adds
# about half a millisecond to every figure.
record_times=(); host_times=(); version_times=()
if command -v hyperfine > /dev/null; then
  timer="hyperfine"
  for r in 1 2 3; do
    hyperfine -N --style none --warmup 3 --runs "$RUNS" --export-json "$work/h.json" \
      "$meshtop --mesh $mesh/mesh.toml --state $work/state.db converge" "$meshtop --version" > /dev/null 2>&1
    record_times+=($(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"]; print(int(r[0]["median"]*1e9), int(r[1]["median"]*1e9))' "$work/h.json"))
    version_times+=("${record_times[-1]}"); unset 'record_times[-1]'
    hyperfine -N --style none --warmup 1 --runs "$RUNS" --export-json "$work/h.json" \
      --prepare "rm -f $work/fresh.db $work/fresh.db-wal $work/fresh.db-shm" \
      "$meshtop --mesh $mesh/mesh.toml --state $work/fresh.db converge" > /dev/null 2>&1
    host_times+=($(python3 -c 'import json,sys; print(int(json.load(open(sys.argv[1]))["results"][0]["median"]*1e9))' "$work/h.json"))
  done
else
  timer="bash \$EPOCHREALTIME (install hyperfine for figures without bash's fork)"
  for r in $(seq "$RUNS"); do
    t0=$EPOCHREALTIME; converge "$work/state.db" > /dev/null 2>&1; t1=$EPOCHREALTIME
    record_times+=($(( (${t1/./} - ${t0/./}) * 1000 )))
    t0=$EPOCHREALTIME; converge "$work/fresh-$r.db" > /dev/null 2>&1; t1=$EPOCHREALTIME
    host_times+=($(( (${t1/./} - ${t0/./}) * 1000 )))
    t0=$EPOCHREALTIME; "$meshtop" --version > /dev/null; t1=$EPOCHREALTIME
    version_times+=($(( (${t1/./} - ${t0/./}) * 1000 )))
  done
fi
record_ns=$(printf '%s\n' "${record_times[@]}" | median)
host_ns=$(printf '%s\n' "${host_times[@]}" | median)
version_ns=$(printf '%s\n' "${version_times[@]}" | median)
grep -q '"decision": "host"' <(converge "$work/fresh-check.db" --json 2>/dev/null) \
  || { echo "FAIL: a fresh state database did not decide host" >&2; exit 1; }

labelled_now=$(docker image ls -q --no-trunc --filter label=jr2.dev/module | sort -u | wc -l)
echo "a) converge, $MODULES modules ($PROFILE profile), $labelled_now labelled images on the daemon (the host case lists them all)"
echo "   daemon calls: record case $calls_record; host case $calls_host"
echo "   in-process (the engine, as the dashboard runs it), median of 3 × $RUNS:"
echo "     record answers every module: $engine_record_ms ms"
echo "     host answers (fresh state):  $engine_host_ms ms"
awk -v r="$engine_record_ms" -v h="$engine_host_ms" 'BEGIN {
  p = 100 * r / h; printf "     record/host = %.1f%%  (target < 10%%) %s\n", p, (p < 10 ? "MET" : "MISSED") }'
echo "   whole process (meshtop converge), timed by $timer:"
echo "     record answers every module: $(ms "$record_ns") ms"
echo "     host answers (fresh state):  $(ms "$host_ns") ms"
echo "     starting the binary alone (meshtop --version): $(ms "$version_ns") ms"
awk -v r="$record_ns" -v h="$host_ns" 'BEGIN {
  p = 100 * r / h; printf "     record/host = %.1f%%  (target < 10%%) %s\n", p, (p < 10 ? "MET" : "MISSED") }'

fi

# ---- b) the host listing over IMAGES labelled images -----------------------------------------
if [[ $PARTS == *b* ]]; then
echo "b) making $IMAGES labelled images…" >&2
for i in $(seq 1 "$IMAGES"); do
  d="$work/img"
  mkdir -p "$d"
  echo "image $i" > "$d/file.txt"
  tar -C "$d" -cf "$work/img.tar" file.txt
  docker import -c "LABEL jr2.dev/module=listing-$i" -c "LABEL jr2.dev/mesh=$name" \
    "$work/img.tar" "$name/listing-$i:bench" > /dev/null
done
labelled=$(docker image ls -q --no-trunc --filter label=jr2.dev/module | sort -u | wc -l)

# Interleaved rounds (the daemon is shared and its load drifts): the docker CLI pipeline, then
# meshtop's call (median of 3 calls after connecting), then meshtop as a whole process.
cli_times=(); call_times=(); proc_times=()
for _ in $(seq "$RUNS"); do
  t0=$(now_ns)
  docker image ls --filter label=jr2.dev/module -q --no-trunc | xargs docker image inspect > /dev/null || true
  cli_times+=($(( $(now_ns) - t0 )))
  "$out/examples/host_listing" 3 > "$work/listing.txt"
  call_times+=($(sed -n 's/^median_ms //p' "$work/listing.txt" | awk '{printf "%d", $1 * 1e6}'))
  t0=$(now_ns); "$out/examples/host_listing" 1 > /dev/null; proc_times+=($(( $(now_ns) - t0 )))
done
cli_ns=$(printf '%s\n' "${cli_times[@]}" | median)
call_ns=$(printf '%s\n' "${call_times[@]}" | median)
proc_ns=$(printf '%s\n' "${proc_times[@]}" | median)
listed=$(sed -n 's/^images //p' "$work/listing.txt")

echo "b) host listing, $labelled labelled images on the daemon (meshtop listed $listed), median of $RUNS:"
echo "   docker image ls | xargs docker image inspect: $(ms "$cli_ns") ms"
echo "   meshtop, one bollard call:                    $(ms "$call_ns") ms  (whole process incl. connect: $(ms "$proc_ns") ms)"
awk -v c="$cli_ns" -v m="$call_ns" -v p="$proc_ns" 'BEGIN {
  r = c / m; q = c / p
  printf "   ratio (call) = %.1fx  (target >= 5x) %s;  ratio (whole process) = %.1fx\n", r, (r >= 5 ? "MET" : "MISSED"), q }'
fi
