//! meshtop's own files are never inputs: a context holding the state database (`context = "."`,
//! the state beside mesh.toml) is refused before any build, naming the file and the fix; with the
//! fix the converge goes through (issue 10, item 4). Real daemon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;

use common::mesh_file::meshtop_in;
use common::{example::require_docker, said};

#[test]
fn a_context_holding_the_state_database_is_refused_before_any_build() {
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let name = common::test_name("own");
    let _guard = common::DaemonGuard(name.clone());
    std::fs::write(
        dir.path().join("mesh.toml"),
        format!(
            "[mesh]\nname = \"{name}\"\n\n[target]\nkind = \"docker\"\n\n[[module]]\nname = \"app\"\ncontext = \".\"\npolicy = \"record\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        "FROM scratch\nCOPY mesh.toml /\n",
    )
    .unwrap();
    // The state exists (and has its -wal) before the converge, as after any earlier command.
    let builds = meshtop_in(dir.path(), &[], &["builds"]);
    assert!(builds.status.success(), "{}", said(&builds));

    let refused = meshtop_in(dir.path(), &[], &["converge"]);
    let text = said(&refused);
    assert!(!refused.status.success(), "{text}");
    assert!(
        text.contains("state.db") && text.contains(".dockerignore") && text.contains("--state"),
        "names the file and the fix: {text}"
    );
    assert!(!text.contains("plan again"), "{text}");
    let rows = meshtop_in(dir.path(), &[], &["builds", "--json"]);
    assert_eq!(
        String::from_utf8_lossy(&rows.stdout).trim(),
        "[]",
        "nothing was built"
    );

    // The fix the message gives works.
    std::fs::write(dir.path().join(".dockerignore"), "state.db*\n").unwrap();
    let converged = meshtop_in(dir.path(), &[], &["converge"]);
    assert!(converged.status.success(), "{}", said(&converged));
}

/// The same for meshtop's log file (`$XDG_STATE_HOME/meshtop/meshtop.log`, written by the
/// dashboard): a context that would send it is refused before any build, naming the file and the
/// fix; the fix works. The state database lives outside the context here.
#[test]
fn a_context_holding_the_log_file_is_refused_before_any_build() {
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let name = common::test_name("ownlog");
    let _guard = common::DaemonGuard(name.clone());
    std::fs::write(
        dir.path().join("mesh.toml"),
        format!(
            "[mesh]\nname = \"{name}\"\n\n[target]\nkind = \"docker\"\n\n[[module]]\nname = \"app\"\ncontext = \".\"\npolicy = \"record\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        "FROM scratch\nCOPY mesh.toml /\n",
    )
    .unwrap();
    // The log as the dashboard leaves it, inside the context.
    let logs = dir.path().join(".state").join("meshtop");
    std::fs::create_dir_all(&logs).unwrap();
    std::fs::write(logs.join("meshtop.log"), "a dashboard was here\n").unwrap();
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_meshtop"))
            .env("XDG_STATE_HOME", dir.path().join(".state"))
            .arg("--mesh")
            .arg(dir.path().join("mesh.toml"))
            .arg("--state")
            .arg(state.path().join("state.db"))
            .args(args)
            .output()
            .unwrap()
    };

    let refused = run(&["converge"]);
    let text = said(&refused);
    assert!(!refused.status.success(), "{text}");
    assert!(
        text.contains("log file .state/meshtop/meshtop.log")
            && text.contains(".dockerignore")
            && text.contains("XDG_STATE_HOME"),
        "names the file and the fix: {text}"
    );
    let rows = run(&["builds", "--json"]);
    assert_eq!(
        String::from_utf8_lossy(&rows.stdout).trim(),
        "[]",
        "nothing was built"
    );

    std::fs::write(
        dir.path().join(".dockerignore"),
        ".state/meshtop/meshtop.log\n",
    )
    .unwrap();
    let converged = run(&["converge"]);
    assert!(converged.status.success(), "{}", said(&converged));
}
