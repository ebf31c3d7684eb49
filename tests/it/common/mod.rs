//! The one tree of test helpers, shared by every integration test (`mod common;`):
//! - `example`: a private copy of the example mesh, the real binary, waiting for builds and exits;
//! - `dashboard`: a fixed dashboard state fed through `update` (also used by `benches/draw.rs`);
//! - `history`: a temporary state database and build rows;
//! - `mesh_file`: mesh files written into a temporary repository;
//! - `daemon_proxy`: a counting, closable proxy in front of the Docker daemon;
//! - `kube_api`, `kube_objects`, `kube_rules`, `kube_controllers`: the Kubernetes API test server (what it
//!   models, what it does not and the sources it follows: `tests/README.md`);
//! - `kube_mesh`: the example mesh on the Kubernetes target, the binary run against it;
//! - `kube_rbac`: the README's RBAC (its Role and ClusterRole, parsed) as the test server's bindings;
//! - `local_registry`: the real registry on 127.0.0.1:5000 and the docker CLI;
//! - `registry_proxy`: the real registry behind a login, or open with a hook on deletes;
//! - `second_daemon`: the builder pool's second Docker daemon and the clean-up of a mesh there;
//! - `provenance`: attestations read and written from the DSSE, in-toto and SLSA specs (p256, curl);
//! - `signing`: cosign's signatures made and checked with openssl and curl, the mesh with `trust`;
//! - `sshd`: a real OpenSSH server on loopback, for builders reached over `ssh://`;
//! - `team`: the example mesh on the API test server for several state files (people, CI);
//! - `tmux`: the real binary in a tmux session, its screen read back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub(crate) mod daemon_proxy;
pub(crate) mod dashboard;
pub(crate) mod example;
pub(crate) mod history;
pub(crate) mod httpd;
pub(crate) mod kube_api;
pub(crate) mod kube_controllers;
pub(crate) mod kube_mesh;
pub(crate) mod kube_objects;
pub(crate) mod kube_rbac;
pub(crate) mod kube_rules;
pub(crate) mod local_registry;
pub(crate) mod mesh_file;
pub(crate) mod provenance;
pub(crate) mod registry_proxy;
pub(crate) mod second_daemon;
pub(crate) mod seen_screen;
pub(crate) mod signing;
pub(crate) mod source_tree;
pub(crate) mod ssh_agent;
pub(crate) mod sshd;
pub(crate) mod team;
pub(crate) mod tmux;

pub(crate) use example::*;

use std::time::{Duration, Instant};

/// A random id, fresh on every call (never the pid, which repeats across runs and machines):
/// every name a test leaves on the daemon, the registry or tmux carries one, so two runs, or a run
/// beside the example mesh's own `demo` machines, never meet.
pub(crate) fn run_id() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 5];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut random| random.read_exact(&mut bytes))
        .expect("the tests read their run ids from /dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The name a test gives what it leaves on the daemon, the registry or tmux: `t<tag>-<run id>`,
/// noted in [`NAMES_DIR`] with this process, so that the next run of the test command removes
/// what a killed test left (scripts/sweep-tests.sh) — exactly the names noted by test processes
/// no longer running, never anything else (the example mesh's `demo` machines, the user's own).
pub(crate) fn test_name(tag: &str) -> String {
    let name = format!("t{tag}-{}", run_id());
    note_name(&name);
    name
}

/// Where each test process notes the names it gives (one file per name, holding the process's
/// pid and start time): what scripts/sweep-tests.sh reads.
pub(crate) const NAMES_DIR: &str = "/tmp/meshtop-test-names";

/// Note `name` as this process's (see [`test_name`]); written whole (a rename), so the sweep
/// never reads half a note.
pub(crate) fn note_name(name: &str) {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::path::Path::new(NAMES_DIR);
    if !dir.exists() {
        std::fs::create_dir_all(dir)
            .expect("the tests note their names in /tmp/meshtop-test-names");
        // Shared by whoever runs tests here (the re-runs as nobody too), as /tmp is.
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777));
    }
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    // The fields after the command's name (which may hold spaces): the start time is the 22nd
    // field of the line, the 20th after the name.
    let started = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.split_whitespace().nth(19))
        .expect("a start time in /proc/self/stat");
    let note = dir.join(format!(".{name}.new"));
    std::fs::write(&note, format!("{} {started}\n", std::process::id()))
        .and_then(|()| std::fs::rename(&note, dir.join(name)))
        .unwrap_or_else(|e| panic!("cannot note the test's name {name} in {NAMES_DIR}: {e}"));
}

/// Wait until `ready` holds, looking every 20 ms; after `within`, panics saying that `what` never
/// happened. Every wait of the tests is one of these (or [`wait_for`], [`wait_until_async`]): a
/// condition with a deadline, never a fixed sleep hoping the thing happened meanwhile.
pub(crate) fn wait_until(what: &str, within: Duration, mut ready: impl FnMut() -> bool) {
    wait_for(what, within, || {
        if ready() { Ok(()) } else { Err(String::new()) }
    });
}

/// Wait until `look` answers `Ok`, looking every 20 ms; after `within`, panics saying that `what`
/// never happened and what `look` saw last (its `Err`).
pub(crate) fn wait_for<T>(
    what: &str,
    within: Duration,
    mut look: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match look() {
            Ok(found) => return found,
            Err(seen) if Instant::now() >= deadline => {
                panic!(
                    "{what} never happened within {within:?}{}",
                    last_seen(&seen)
                )
            }
            Err(_) => std::thread::sleep(LOOK_EVERY),
        }
    }
}

/// [`wait_until`] for async conditions, on the test's runtime.
pub(crate) async fn wait_until_async<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut ready: impl FnMut() -> F,
) {
    wait_for_async(what, within, || {
        let ready = ready();
        async move {
            if ready.await {
                Ok(())
            } else {
                Err(String::new())
            }
        }
    })
    .await
}

/// [`wait_for`] for async looks, on the test's runtime.
pub(crate) async fn wait_for_async<T, F: std::future::Future<Output = Result<T, String>>>(
    what: &str,
    within: Duration,
    mut look: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        match look().await {
            Ok(found) => return found,
            Err(seen) if Instant::now() >= deadline => {
                panic!(
                    "{what} never happened within {within:?}{}",
                    last_seen(&seen)
                )
            }
            Err(_) => tokio::time::sleep(LOOK_EVERY).await,
        }
    }
}

/// How often a wait looks again: a poll interval, not a guess at how long something takes.
const LOOK_EVERY: Duration = Duration::from_millis(20);

fn last_seen(seen: &str) -> String {
    if seen.is_empty() {
        String::new()
    } else {
        format!("; last seen: {seen}")
    }
}

/// A Dockerfile `RUN` line that really runs: BuildKit keeps a finished step in its cache by its
/// command, across tests and runs on one daemon, so a step a test waits on (a slow build to watch,
/// stop or take over) carries a word no earlier run had, as a shell comment.
pub(crate) fn fresh_run(command: &str) -> String {
    format!("RUN {command} # fresh {}\n", run_id())
}

/// A Dockerfile `RUN` line that runs `first`, then holds its step until the test lets it go with
/// [`let_go`] (at most 120 s): a step that ends when something else happened, not after a guessed
/// number of seconds. Answers the line and the name the held step's process carries (only its
/// inner shell's `$0` says it, so the step's script never matches, and no cache holds the step;
/// its `; true` keeps a shell from exec-ing the sleep in its place, which would drop the name).
pub(crate) fn held_run(first: &str) -> (String, String) {
    let id = run_id();
    (
        format!("RUN {first} && w=held; sh -c 'sleep 120; true' \"$w-{id}\" || true\n"),
        format!("held-{id}"),
    )
}

/// Let a step of [`held_run`] go on (its inner shell killed, the step ends well); panics when it
/// is not running.
pub(crate) fn let_go(held: &str) {
    let processes = processes_saying(held);
    assert!(!processes.is_empty(), "the held step {held} is not running");
    for process in &processes {
        let pid = process.split(':').next().unwrap();
        let killed = std::process::Command::new("kill")
            .args(["-9", pid])
            .status()
            .unwrap();
        // A process listed a moment ago may have ended since (its shell went with the other one
        // killed first): gone is let go. One still there that could not be killed is the failure.
        let still_there = std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|line| String::from_utf8_lossy(&line).contains(held));
        assert!(
            killed.success() || !still_there,
            "kill -9 {process}: the held step cannot be let go"
        );
    }
}

/// Processes of this machine whose command line holds `word` (BuildKit's step processes run in
/// their own PID namespace, but the host's /proc lists them).
pub(crate) fn processes_saying(word: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(line) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let line = String::from_utf8_lossy(&line).replace('\0', " ");
        if line.contains(word) {
            found.push(format!("{}: {line}", entry.file_name().to_string_lossy()));
        }
    }
    found
}
