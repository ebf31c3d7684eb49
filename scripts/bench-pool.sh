#!/usr/bin/env bash
# Issue 32's pool figure, on the machine's two real Docker daemons (the machine's own and the one
# scripts/start-second-daemon.sh runs) and the loopback registry: MODULES modules (BASES bases in
# tier 0, the rest on top of one base each, in tier 1) converged with `--force` (every module
# builds, the cache off) on
#   one:  one builder, the local daemon, max_builds 2;
#   two:  two builders, the local daemon and the second one, max_builds 1 each;
#   one+publish: the one-builder mesh with `--publish`: every artifact pushed, as the pool's
#         hand-over pushes each (printed so that the spreading cost reads apart from the push cost).
# `--jobs 2` in all three: the same two builds at a time on the machine's two cores, so the ratio is
# the overhead of spreading (the hand-over pushes, the target's pulls of what the second daemon built,
# the second daemon's own work) when both builders share the machine. Target: two/one <= 1.1
# (issue 38).
# Also prints how evenly the two-builder runs spread the builds (per builder, and the max/min ratio).
# Also prints meshtop's own time (issue 38), from the build records: per build, its row's span less
# its daemon's time (`daemon_ms`: the build call, session to last answer) — the row's start, the
# base's naming, the record; and per converge, the share of the two build slots' time (--jobs 2 ×
# wall) that no daemon was building (planning, hashing, scheduling, hand-over
# bookkeeping, the target's pulls and the record, plus whatever waits on the tiers). Aim: < 10 %.
# RUNS runs each, interleaved (median). PROFILE=release by default; MESHTOP_BIN runs another
# meshtop binary (e.g. one built from main, to compare on the same load).
set -euo pipefail

MODULES=${MODULES:-300}
BASES=${BASES:-20}
RUNS=${RUNS:-3}
PROFILE=${PROFILE:-release}
REGISTRY=${REGISTRY:-127.0.0.1:5000}
LOCAL_SOCKET=${LOCAL_SOCKET:-/var/run/docker.sock}
SECOND_SOCKET=${SECOND_SOCKET:-/run/meshtop-test-dockerd2/docker.sock}

cd "$(dirname "$0")/.."
root=$PWD
cargo build --quiet --profile "$PROFILE" --bin meshtop
out="${CARGO_TARGET_DIR:-$root/target}/$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")"
meshtop="${MESHTOP_BIN:-$out/meshtop}"

docker -H "unix://$SECOND_SOCKET" version >/dev/null 2>&1 ||
  { echo "bench-pool: no second daemon at $SECOND_SOCKET: run scripts/start-second-daemon.sh" >&2; exit 1; }
curl -fsS "http://$REGISTRY/v2/" >/dev/null ||
  { echo "bench-pool: no registry at $REGISTRY: run scripts/start-registry.sh" >&2; exit 1; }

run_id=$(head -c 4 /dev/urandom | od -An -tx1 | tr -d ' \n')
name="bp-$run_id"
work=$(mktemp -d)
cleanup() {
  for socket in "$LOCAL_SOCKET" "$SECOND_SOCKET"; do
    # Dependents first: a base cannot go while an image on top of it is there.
    for _ in 1 2; do
      docker -H "unix://$socket" image ls -q --filter "label=jr2.dev/mesh=$name" |
        sort -u | xargs -r docker -H "unix://$socket" image rm -f >/dev/null 2>&1 || true
    done
    docker -H "unix://$socket" image ls --format '{{.Repository}}:{{.Tag}}' |
      grep "/$name/" | xargs -r docker -H "unix://$socket" image rm -f >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT

# The modules: a base is FROM scratch with one file; a dependent adds one file to its base.
python3 - "$work" "$name" "$REGISTRY" "$MODULES" "$BASES" <<'PY'
import os, sys
work, name, registry, modules, bases = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
lines = ["[mesh]", f'name = "{name}"', f'registry = "{registry}"', "", "[target]", 'kind = "docker"', ""]
for i in range(modules):
    module = f"b{i:02d}" if i < bases else f"m{i:03d}"
    ctx = os.path.join(work, module)
    os.makedirs(ctx)
    with open(os.path.join(ctx, "file.txt"), "w") as f:
        f.write(f"{module}\n" * 64)
    with open(os.path.join(ctx, "Dockerfile"), "w") as f:
        if i < bases:
            f.write("FROM scratch\nCOPY file.txt /base.txt\n")
        else:
            f.write("ARG BASE\nFROM ${BASE}\nCOPY file.txt /module.txt\n")
    lines += ["[[module]]", f'name = "{module}"', f'context = "{module}"', 'policy = "record"']
    if i >= bases:
        lines.append(f'base = "b{(i - bases) % bases:02d}"')
    lines.append("")
text = "\n".join(lines)
with open(os.path.join(work, "one.toml"), "w") as f:
    f.write(text + '\n[[builder]]\nname = "a"\nendpoint = "unix:///var/run/docker.sock"\nmax_builds = 2\n')
with open(os.path.join(work, "two.toml"), "w") as f:
    f.write(text + '\n[[builder]]\nname = "a"\nendpoint = "unix:///var/run/docker.sock"\nmax_builds = 1\n'
            '\n[[builder]]\nname = "b"\nendpoint = "unix:///run/meshtop-test-dockerd2/docker.sock"\nmax_builds = 1\n')
PY

converge() { # converge CASE: prints the seconds the converge took
  local case=$1 file extra=()
  file="$work/${case%%+*}.toml"
  [ "$case" = "one+publish" ] && extra=(--publish)
  local start end
  start=$(date +%s.%N)
  DOCKER_HOST="unix://$LOCAL_SOCKET" "$meshtop" --mesh "$file" --state "$work/$case.db" \
    converge --force --jobs 2 "${extra[@]}" >"$work/$case.log" 2>&1 ||
    { echo "bench-pool: the $case converge failed:" >&2; tail -n 30 "$work/$case.log" >&2; exit 1; }
  end=$(date +%s.%N)
  python3 -c "print(f'{$end - $start:.2f}')"
}

# A first converge of each case warms what is not the figure (the registry's repositories, the
# second daemon's first contact); then RUNS timed runs, interleaved.
echo "bench-pool: $MODULES modules ($BASES bases), --force --jobs 2, $RUNS runs each, $PROFILE build, run $run_id"
for case in one two one+publish; do converge "$case" >/dev/null; done
declare -A times
for run in $(seq 1 "$RUNS"); do
  for case in one two one+publish; do
    t=$(converge "$case")
    times[$case]="${times[$case]:-} $t"
    echo "  run $run $case: ${t} s"
    "$meshtop" --mesh "$work/${case%%+*}.toml" --state "$work/$case.db" builds --json --limit 100000 \
      >"$work/$case-$run.json"
    python3 - "$work/$case-$run.json" "$t" "$case" "$run" <<'PY' >>"$work/own.txt"
import json, sys
rows = json.load(open(sys.argv[1]))
rows = rows if isinstance(rows, list) else rows.get("builds", [])
wall, case, run = float(sys.argv[2]), sys.argv[3], sys.argv[4]
# This run's rows: the newest operation's.
ops = [r.get("operation_id") for r in rows if r.get("operation_id")]
newest = max(ops, key=lambda op: max(r["started_ms"] for r in rows if r.get("operation_id") == op))
mine = [r for r in rows if r.get("operation_id") == newest and r.get("status") == "succeeded"]
daemon = sum(r.get("daemon_ms") or 0 for r in mine)
push = sum(r.get("push_ms") or 0 for r in mine)
own_in_rows = sum(max(r["ended_ms"] - r["started_ms"] - (r.get("daemon_ms") or 0), 0) for r in mine)
slots = 2 * wall * 1000
n = max(len(mine), 1)
# Pushes run beside the builds (a hand-over after its build gave the slot back, a publish in the
# delivery), so the slots' idle share is what no daemon's build filled.
print(f"{case} {run} {len(mine)} {own_in_rows / n:.1f} {daemon / n:.1f} {push / n:.1f} {(slots - daemon) / n:.1f} {100 * (slots - daemon) / slots:.1f}")
# Each builder's idle time over the converge (its rows' spans against the wall time): the gaps a
# builder slot sat empty (before the first build, between tiers, after the last).
busy = {}
for r in mine:
    busy[r.get("builder") or "?"] = busy.get(r.get("builder") or "?", 0) + r["ended_ms"] - r["started_ms"]
print("  " + case + " run " + run + ": " + "; ".join(
    f"builder {b}: {len([r for r in mine if (r.get('builder') or '?') == b])} builds, busy {ms / 1000:.1f} s of {wall:.1f} s"
    for b, ms in sorted(busy.items())), file=sys.stderr)
PY
  done
done
echo "meshtop's own time per module (ms; medians over runs), from the build records:"
python3 - "$work/own.txt" <<'PY'
import statistics, sys
per = {}
for line in open(sys.argv[1]):
    case, run, n, own_rows, daemon, push, own_all, share = line.split()
    per.setdefault(case, []).append((int(n), float(own_rows), float(daemon), float(push), float(own_all), float(share)))
for case, runs in per.items():
    med = lambda i: statistics.median(r[i] for r in runs)
    print(f"  {case:12s}: {med(0):.0f} builds; in the build row {med(1):6.1f} ms own vs {med(2):6.1f} ms its daemon's, push {med(3):6.1f} ms;"
          f" per module over the converge {med(4):6.1f} ms no daemon's build filled = {med(5):.1f} % of the slots (aim < 10 %)")
PY

# How the two-builder runs spread the builds, from `meshtop builds --json`.
"$meshtop" --mesh "$work/two.toml" --state "$work/two.db" builds --json --limit 100000 >"$work/builds.json"

python3 - "$work/builds.json" "${times[one]}" "${times[two]}" "${times[one+publish]}" <<'PY'
import json, statistics, sys
builds = json.load(open(sys.argv[1]))
rows = builds if isinstance(builds, list) else builds.get("builds", [])
one, two, pub = ([float(x) for x in arg.split()] for arg in sys.argv[2:5])
m1, m2, mp = statistics.median(one), statistics.median(two), statistics.median(pub)
print(f"median one builder            : {m1:7.2f} s")
print(f"median two builders           : {m2:7.2f} s")
print(f"median one builder, --publish : {mp:7.2f} s")
print(f"two / one          = {m2 / m1:.2f}x (target <= 1.1x)")
print(f"two / one+publish  = {m2 / mp:.2f}x (the spreading alone, both pushing every artifact)")
per = {}
for row in rows:
    if row.get("status") == "succeeded":
        per[row.get("builder") or "?"] = per.get(row.get("builder") or "?", 0) + 1
total = sum(per.values())
print("builds per builder (all two-builder runs): " + ", ".join(f"{b} {n} ({100 * n / max(total, 1):.0f} %)" for b, n in sorted(per.items())))
if len(per) >= 2:
    print(f"spread max/min = {max(per.values()) / max(min(per.values()), 1):.2f}")
PY
