#!/usr/bin/env bash
# Remove what killed tests left behind, before a run (scripts/test.sh calls it first).
#
# Every name a test gives what it leaves on the daemon, the registry or tmux is noted in
# /tmp/meshtop-test-names, one file per name holding the noting process's pid and start time
# (crates/testkit/src/lib.rs: test_name, note_name). A name whose process no longer runs belongs to a
# test that ended: passed, failed or killed. For those names only, this removes
#   - containers (every test daemon: the machine's own, the pool's second, the TLS ones) named `<name>-…`, or
#     labelled jr2.dev/mesh=<name> or meshtop-test=<name>, with their anonymous volumes;
#   - images labelled jr2.dev/mesh=<name>, or in a repository with a path segment ending in <name>;
#   - networks and volumes named `<name>…` (meshtop makes none; a test's would be named so);
#   - the tmux server `-L <name>` (the tmux tests' `meshtop-test-<run id>`) and its socket;
#   - the registries' repositories (127.0.0.1:5000's and the TLS one's storage under /tmp) whose
#     name ends in <name> (their blobs go with the registry's own garbage-collect);
# then forgets the note. Nothing else is touched: not the example mesh's `demo` machines the
# README's first command leaves running, not the user's own, not a name of a test still running
# (another run beside this one). A name is random (the run id), so no one else's thing bears it.
set -uo pipefail

NAMES="${MESHTOP_TEST_NAMES:-/tmp/meshtop-test-names}"
[ -d "$NAMES" ] || exit 0

# The start time of process $1 (field 22 of /proc/PID/stat, the 20th after the command's name).
started() {
    local stat
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 1
    stat="${stat##*) }"
    # shellcheck disable=SC2086
    set -- $stat
    echo "${20}"
}

dead=()
for note in "$NAMES"/*; do
    [ -f "$note" ] || continue
    read -r pid start <"$note" || true
    if [ -n "${pid:-}" ] && [ "$(started "$pid")" = "${start:-}" ]; then
        continue # its test still runs
    fi
    dead+=("$(basename "$note")")
done
# Half-written notes of processes long gone (a write is a rename: these are only left by a crash).
find "$NAMES" -maxdepth 1 -name '.*.new' -mmin +60 -delete 2>/dev/null
[ ${#dead[@]} -gt 0 ] || exit 0

is_dead() { # $1: a name (a mesh label, a tmux server)
    local name
    for name in "${dead[@]}"; do [ "$1" = "$name" ] && return 0; done
    return 1
}
# The name is one of the dead, or one of them and a dash (a machine `<mesh>-web-1`).
prefix_dead() {
    local name
    for name in "${dead[@]}"; do
        case "$1" in "$name" | "$name"-*) return 0 ;; esac
    done
    return 1
}
# The word ends in one of the dead (a repository `<mesh>`, `x<mesh>`, `other<mesh>`).
suffix_dead() {
    local name
    for name in "${dead[@]}"; do
        case "$1" in *"$name") return 0 ;; esac
    done
    return 1
}

containers=0 images=0 others=0 servers=0 repos=0
sweep_daemon() { # the docker CLI's flags that reach the daemon (-H …, TLS)
    local id name mesh mark repo segment segments ids=()
    local -a at=("$@")
    docker "${at[@]}" info >/dev/null 2>&1 || return 0
    while IFS=$'\t' read -r id name mesh mark; do
        [ -n "$id" ] || continue
        if prefix_dead "${name#/}" || { [ -n "$mesh" ] && is_dead "$mesh"; } ||
            { [ -n "$mark" ] && is_dead "$mark"; }; then
            ids+=("$id")
        fi
    done < <(docker "${at[@]}" ps -a --format '{{.ID}}	{{.Names}}	{{.Label "jr2.dev/mesh"}}	{{.Label "meshtop-test"}}')
    if [ ${#ids[@]} -gt 0 ]; then
        docker "${at[@]}" rm -f -v "${ids[@]}" >/dev/null 2>&1
        containers=$((containers + ${#ids[@]}))
    fi
    ids=()
    while IFS=$'\t' read -r id repo; do
        [ -n "$id" ] || continue
        IFS=/ read -r -a segments <<<"$repo"
        for segment in "${segments[@]}"; do
            if suffix_dead "$segment"; then
                ids+=("$id")
                break
            fi
        done
    done < <(docker "${at[@]}" images --format '{{.ID}}	{{.Repository}}')
    local labelled
    labelled="$(docker "${at[@]}" images -aq --filter label=jr2.dev/mesh | sort -u)"
    if [ -n "$labelled" ]; then
        # shellcheck disable=SC2086
        while read -r id mesh; do
            is_dead "$mesh" && ids+=("$id")
        done < <(docker "${at[@]}" image inspect --format '{{.Id}} {{index .Config.Labels "jr2.dev/mesh"}}' $labelled 2>/dev/null)
    fi
    if [ ${#ids[@]} -gt 0 ]; then
        # Twice: an image another of the list is built on goes once its child went.
        docker "${at[@]}" rmi -f "${ids[@]}" >/dev/null 2>&1 || docker "${at[@]}" rmi -f "${ids[@]}" >/dev/null 2>&1
        images=$((images + $(printf '%s\n' "${ids[@]}" | sort -u | wc -l)))
    fi
    local kind
    for kind in network volume; do
        while read -r name; do
            [ -n "$name" ] && prefix_dead "$name" && docker "${at[@]}" "$kind" rm "$name" >/dev/null 2>&1 &&
                others=$((others + 1))
        done < <(docker "${at[@]}" "$kind" ls --format '{{.Name}}')
    done
}

sweep_daemon -H "${DOCKER_HOST:-unix:///var/run/docker.sock}"
# The builder pool's second daemon (scripts/start-second-daemon.sh), when it runs.
[ -S /run/meshtop-test-dockerd2/docker.sock ] && sweep_daemon -H unix:///run/meshtop-test-dockerd2/docker.sock
# The remote BuildKit tests' TLS daemons (scripts/start-tls-daemon.sh), when they run.
for daemon in tls:23760 fault:23761; do
    certs="/run/meshtop-test-dockerd-${daemon%%:*}/certs/client"
    [ -f "$certs/key.pem" ] || continue
    sweep_daemon -H "tcp://127.0.0.1:${daemon#*:}" --tlsverify --tlscacert "$certs/ca.pem" \
        --tlscert "$certs/cert.pem" --tlskey "$certs/key.pem"
done

# tmux servers of their own, one per tmux test.
tmux_dir="${TMUX_TMPDIR:-/tmp}/tmux-$(id -u)"
for name in "${dead[@]}"; do
    case "$name" in meshtop-test-*) ;; *) continue ;; esac
    if [ -S "$tmux_dir/$name" ]; then
        tmux -L "$name" kill-server >/dev/null 2>&1
        rm -f "$tmux_dir/$name"
        servers=$((servers + 1))
    fi
done

# The registries' repositories (scripts/start-registry.sh: storage under /tmp).
for storage in "${MESHTOP_REGISTRY_DIR:-/tmp/meshtop-registry}/storage" \
    "${MESHTOP_REGISTRY_TLS_DIR:-/tmp/meshtop-registry-tls}/storage"; do
    repositories="$storage/docker/registry/v2/repositories"
    [ -d "$repositories" ] || continue
    for repository in "$repositories"/*; do
        [ -d "$repository" ] || continue
        if suffix_dead "$(basename "$repository")"; then
            rm -rf "$repository"
            repos=$((repos + 1))
        fi
    done
done

for name in "${dead[@]}"; do rm -f "$NAMES/$name"; done
echo "sweep-tests.sh: ${#dead[@]} name(s) of ended tests; removed what they left: $containers container(s)," \
    "$images image(s), $others network(s)/volume(s), $servers tmux server(s), $repos registry repositories"
