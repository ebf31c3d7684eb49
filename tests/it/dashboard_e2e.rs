//! The real binary in tmux against the real daemon (issue 4's end-to-end check): it opens, shows
//! three tiers, converges from the keyboard, shows a moved base, ignores a cancelled force rebuild,
//! sends a held machine, and quits leaving a usable shell.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::ExampleMesh;
use common::tmux::{Tmux, row};
use meshtop::backends::state::StateDb;

/// The mesh's operations (their ids), oldest first, as its events name them.
fn operations(mesh: &ExampleMesh) -> Vec<String> {
    let db = StateDb::open_for_reading(&mesh.state()).unwrap();
    let mut seen: Vec<String> = Vec::new();
    for event in db.events_tail(&mesh.name, 100_000).unwrap() {
        if !seen.contains(&event.operation_id) {
            seen.push(event.operation_id);
        }
    }
    seen
}

#[test]
fn the_dashboard_converges_sends_and_quits_from_the_keyboard() {
    let mesh = ExampleMesh::new("dash");
    let tmux = Tmux::start(&mesh);
    let long = Duration::from_secs(180);

    // It opens on the mesh and shows three tiers.
    let screen = tmux.wait_for("the modules table", Duration::from_secs(30), |s| {
        s.contains("modules · 5 of 5") && s.contains(&format!("{}/base:", mesh.name))
    });
    assert!(
        screen.contains(&format!("meshtop · {}", mesh.name)),
        "{screen}"
    );
    for (tier, module) in [("0", "base"), ("1", "tools"), ("2", "api")] {
        let line = row(&screen, module);
        assert!(
            line.trim_start().starts_with(tier),
            "tier {tier} for {module}: {line:?}\n{screen}"
        );
    }

    // C + confirm converges: every decision turns to record.
    tmux.keys(&["C"]);
    tmux.wait_for("the converge confirmation", Duration::from_secs(10), |s| {
        s.contains("[ Cancel ]")
    });
    tmux.keys(&["Right", "Enter"]);
    tmux.wait_for("every module decided record", long, |s| {
        ["base", "tools", "web", "api", "worker"]
            .iter()
            .all(|m| row(s, m).contains("skip·record"))
    });
    // The record is stamped before the converge creates the declared machines: let it finish.
    tmux.wait_for("the converge to finish", long, |s| !s.contains('⟳'));

    // f + Esc does nothing.
    let builds_before = mesh
        .json(&["builds", "--json", "--limit", "100"])
        .as_array()
        .unwrap()
        .len();
    let operations_before = operations(&mesh);
    assert!(!operations_before.is_empty(), "the converge was recorded");
    tmux.keys(&["f"]);
    tmux.wait_for("the force confirmation", Duration::from_secs(10), |s| {
        s.contains("[ Cancel ]")
    });
    tmux.keys(&["Escape"]);
    let screen = tmux.wait_for("the confirmation to close", Duration::from_secs(10), |s| {
        !s.contains("[ Cancel ]")
    });
    assert!(
        !screen.contains('⟳'),
        "nothing runs after f + Esc:\n{screen}"
    );

    // s + confirm moves a held machine to current: a forced rebuild of api (policy record) holds it.
    // That converge is the fence for f + Esc: it is the very next operation of the mesh (a force
    // started by the dashboard would sit between, or hold the mesh's lock and fail this one), and
    // it built api alone.
    let forced = mesh.json(&["converge", "--force", "api", "--json"]);
    let mut expected = operations_before.clone();
    expected.push(forced["operation_id"].as_str().unwrap().to_string());
    assert_eq!(operations(&mesh), expected, "f + Esc started nothing");
    let builds_after = mesh
        .json(&["builds", "--json", "--limit", "100"])
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        builds_after,
        builds_before + 1,
        "f + Esc built nothing; the forced converge built api"
    );
    tmux.wait_for("api's machine held", long, |s| {
        row(s, "api").contains("held")
    });
    tmux.keys(&["j", "j", "j"]); // base → tools → web → api
    tmux.keys(&["s"]);
    let confirm = tmux.wait_for("the send confirmation", Duration::from_secs(10), |s| {
        s.contains("[ Cancel ]")
    });
    assert!(
        confirm.contains(&format!("{}-api-1", mesh.name)),
        "the send names the machine:\n{confirm}"
    );
    tmux.keys(&["Right", "Enter"]);
    tmux.wait_for("api's machine current", long, |s| {
        row(s, "api").contains("1/1")
    });

    // A changed file in the base: its dependents wait for it, the detail names the file.
    std::fs::write(mesh.root().join("base/motd.txt"), "hello\n").unwrap();
    tmux.keys(&["g"]);
    let screen = tmux.wait_for("the base to be rebuilt", long, |s| {
        row(s, "base").contains("build") && row(s, "tools").contains("pending")
    });
    for dependent in ["tools", "web", "api", "worker"] {
        assert!(
            row(&screen, dependent).contains("pending"),
            "{dependent}:\n{screen}"
        );
    }
    assert!(
        screen.contains("motd.txt"),
        "the detail names the changed file:\n{screen}"
    );

    // q exits and the shell prompt is usable.
    tmux.keys(&["q"]);
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        !s.contains("modules ·")
    });
    tmux.keys(&["echo alive-$((6*7))", "Enter"]);
    tmux.wait_for("the shell to answer", Duration::from_secs(10), |s| {
        s.contains("alive-42")
    });
}
