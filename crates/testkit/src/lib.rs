//! meshtop's test kit: the stand-ins for the outside systems the tests meet, and the waits and
//! names every test uses. Each stand-in behaves as the real system does over time, from its source
//! (cited in each file), never as meshtop's client assumes; where it and the real system disagree,
//! the stand-in is the bug.
//!
//! - `kube_api` (with `kube_objects`, `kube_rules`, `kube_controllers`): the Kubernetes API test
//!   server (what it models, what it does not and the sources it follows: `tests/README.md`);
//! - `registry_proxy`: the real registry behind a login, or open with a hook on deletes;
//! - `daemon_proxy`: a counting, closable proxy in front of the Docker daemon;
//! - `sshd`, `ssh_agent`: a real OpenSSH server on loopback and a real agent holding a key;
//! - the waits (`wait_until`, `wait_for` and their async forms: a condition with a deadline, never a
//!   fixed sleep) and the names (`run_id`, `test_name`: what a test leaves anywhere is named with a
//!   random run id and noted, so the next run of the test command sweeps what a killed test left).
//!
//! A dev-dependency of the package's one integration-test binary (`tests/it`); it depends on the
//! backends only for the record's annotation names and the TLS provider, never on the engine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod daemon_proxy;
pub mod kube_api;
pub mod kube_controllers;
pub mod kube_objects;
pub mod kube_rules;
pub mod registry_proxy;
pub mod ssh_agent;
pub mod sshd;

use std::process::Output;
use std::time::{Duration, Instant};

/// What a command said, its standard output then its standard error (for a failure's message).
pub fn said(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A random id, fresh on every call (never the pid, which repeats across runs and machines):
/// every name a test leaves on the daemon, the registry or tmux carries one, so two runs, or a run
/// beside the example mesh's own `demo` machines, never meet.
pub fn run_id() -> String {
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
pub fn test_name(tag: &str) -> String {
    let name = format!("t{tag}-{}", run_id());
    note_name(&name);
    name
}

/// Where each test process notes the names it gives (one file per name, holding the process's
/// pid and start time): what scripts/sweep-tests.sh reads.
pub const NAMES_DIR: &str = "/tmp/meshtop-test-names";

/// Note `name` as this process's (see [`test_name`]); written whole (a rename), so the sweep
/// never reads half a note.
pub fn note_name(name: &str) {
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
pub fn wait_until(what: &str, within: Duration, mut ready: impl FnMut() -> bool) {
    wait_for(what, within, || {
        if ready() { Ok(()) } else { Err(String::new()) }
    });
}

/// Wait until `look` answers `Ok`, looking every 20 ms; after `within`, panics saying that `what`
/// never happened and what `look` saw last (its `Err`).
pub fn wait_for<T>(what: &str, within: Duration, mut look: impl FnMut() -> Result<T, String>) -> T {
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
pub async fn wait_until_async<F: std::future::Future<Output = bool>>(
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
pub async fn wait_for_async<T, F: std::future::Future<Output = Result<T, String>>>(
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
