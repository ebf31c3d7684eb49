//! The one tree of test helpers, shared by every integration test (`mod common;`):
//! - `example`: a private copy of the example mesh, the real binary, waiting for builds and exits;
//! - `dashboard`: a fixed dashboard state fed through `update` (also used by `benches/draw.rs`);
//! - `history`: a temporary state database and build rows;
//! - `mesh_file`: mesh files written into a temporary repository;
//! - `httpd`: a module that serves files with busybox httpd, FROM scratch, and the meshtop it runs on;
//! - from the test kit (`crates/testkit`): the stand-ins — `daemon_proxy`, `kube_api` with
//!   `kube_objects`, `kube_rules`, `kube_controllers`, `registry_proxy`, `sshd`, `ssh_agent` —
//!   and the waits and names (`wait_until`, `wait_for`, `run_id`, `test_name`);
//! - `kube_mesh`: the example mesh on the Kubernetes target, the binary run against it;
//! - `kube_rbac`: the README's RBAC (its Role and ClusterRole, parsed) as the test server's bindings;
//! - `local_registry`: the real registry on 127.0.0.1:5000 and the docker CLI;
//! - `second_daemon`: the builder pool's second Docker daemon and the clean-up of a mesh there;
//! - `provenance`: attestations read and written from the DSSE, in-toto and SLSA specs (p256, curl);
//! - `signing`: cosign's signatures made and checked with openssl and curl, the mesh with `trust`;
//! - `team`: the example mesh on the API test server for several state files (people, CI);
//! - `tmux`: the real binary in a tmux session, its screen read back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub(crate) mod dashboard;
pub(crate) mod example;
pub(crate) mod history;
pub(crate) mod httpd;
pub(crate) mod kube_mesh;
pub(crate) mod kube_rbac;
pub(crate) mod local_registry;
pub(crate) mod mesh_file;
pub(crate) mod provenance;
pub(crate) mod second_daemon;
pub(crate) mod seen_screen;
pub(crate) mod signing;
pub(crate) mod source_tree;
pub(crate) mod team;
pub(crate) mod tmux;

pub(crate) use example::*;
// The stand-ins and the waits live in the test kit (crates/testkit), named here as they always were.
pub(crate) use meshtop_testkit::{
    daemon_proxy, kube_api, kube_controllers, kube_objects, kube_rules, note_name, registry_proxy,
    run_id, said, ssh_agent, sshd, test_name, wait_for, wait_until, wait_until_async,
};

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
