//! The live converge against the real daemon (issue 14): on a terminal `meshtop converge` draws one
//! live line per running build (its step and time) and keeps the finished lines; piped it prints
//! plain lines; the dashboard shows each module's state while a converge from another terminal
//! runs; `q` while a converge started on the dashboard runs asks, then cancels it: its build is
//! marked cancelled and the mesh is free at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::tmux::{Tmux, row};
use common::{ExampleMesh, builds, said, wait_exit};
use meshtop::mesh::builds::BuildStatus;

/// api's build sleeps in its second-to-last step long enough to be watched.
fn slow_api(mesh: &ExampleMesh, seconds: u32) {
    let file = mesh.root().join("api/Dockerfile");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        format!(
            "{text}{}RUN echo api done\n",
            common::fresh_run(&format!("sleep {seconds}"))
        ),
    )
    .unwrap();
}

/// The example mesh converged once, then api's build slowed to `seconds`, and the dashboard open
/// on it, its table showing that api would build.
fn dashboard_on_slow_api(tag: &str, seconds: u32) -> (ExampleMesh, Tmux) {
    let mesh = ExampleMesh::new(tag);
    let first = mesh.meshtop(&["converge"]);
    assert!(first.status.success(), "{}", said(&first));
    slow_api(&mesh, seconds);
    let tmux = Tmux::start(&mesh);
    tmux.wait_for("the modules table", Duration::from_secs(30), |s| {
        s.contains("modules · 5 of 5") && row(s, "api").contains("build")
    });
    (mesh, tmux)
}

fn command(mesh: &ExampleMesh, args: &str) -> String {
    format!(
        "{} --mesh {} --state {} {args}",
        env!("CARGO_BIN_EXE_meshtop"),
        mesh.mesh_file().display(),
        mesh.state().display(),
    )
}

#[test]
fn on_a_terminal_each_running_build_is_one_live_line() {
    let mesh = ExampleMesh::new("livecli");
    // Everything but api from the record first: the live converge then builds api alone.
    let first = mesh.meshtop(&["converge"]);
    assert!(first.status.success(), "{}", said(&first));
    slow_api(&mesh, 8);
    let tmux = Tmux::shell();
    tmux.keys(&[&command(&mesh, "converge; echo exit=$?"), "Enter"]);
    let screen = tmux.wait_quietly("api's live line", Duration::from_secs(60), |s| {
        s.lines()
            .any(|l| l.contains("api") && l.contains("RUN sleep 8") && l.contains("step "))
    });
    let live = screen
        .lines()
        .find(|l| l.contains("RUN sleep 8"))
        .unwrap()
        .to_string();
    // `⠂ api   3s step 9/10 RUN sleep 8`: module, elapsed, step n/m and the instruction.
    assert!(live.contains(" api "), "{live}");
    assert!(
        live.split_whitespace()
            .any(|w| w.ends_with('s') && w[..w.len() - 1].chars().all(|c| c.is_ascii_digit())),
        "an elapsed time: {live}"
    );
    assert!(
        !screen.contains("queued"),
        "queued steps are not lines: {screen}"
    );
    // The command line echoes `echo exit=$?` too: the answer is a line of its own.
    // Its exit code, not the echoed `exit=$?` of the command line (which a long path wraps onto a
    // line of its own).
    let exited = |l: &str| {
        l.strip_prefix("exit=")
            .is_some_and(|code| !code.is_empty() && code.chars().all(|c| c.is_ascii_digit()))
    };
    let screen = tmux.wait_quietly("the converge's end", Duration::from_secs(90), |s| {
        s.lines().any(exited)
    });
    assert!(screen.lines().any(|l| l == "exit=0"), "{screen}");
    assert!(
        screen.contains("built api:"),
        "the finished line stays:\n{screen}"
    );
    assert!(
        !screen
            .lines()
            .any(|l| l.contains("RUN sleep 8") && l.contains("step ")),
        "the live line is gone once the build ended:\n{screen}"
    );

    // Piped: plain lines, no spinner, no queued steps.
    std::fs::write(mesh.root().join("api/app.sh"), "#!/bin/sh\necho changed\n").unwrap();
    let piped = mesh.meshtop(&["converge"]);
    assert!(piped.status.success(), "{}", said(&piped));
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(stderr.contains("build api: "), "{stderr}");
    assert!(!stderr.contains("queued"), "{stderr}");
    assert!(
        !stderr.contains('⠂') && !stderr.contains('\u{1b}'),
        "{stderr}"
    );
}

#[test]
fn the_dashboard_follows_a_converge_from_another_terminal_module_by_module() {
    let (mesh, tmux) = dashboard_on_slow_api("livedash", 10);
    let log = mesh.root().join("converge.log");
    let mut child = mesh.spawn_converge(&log, &[]);
    let screen = tmux.wait_quietly("api building on its row", Duration::from_secs(60), |s| {
        row(s, "api").contains("building")
    });
    assert!(row(&screen, "base").contains("skip·record"), "{screen}");
    assert!(
        screen.contains("NOW"),
        "the column says what it shows:\n{screen}"
    );
    assert!(screen.contains("#2 converge of 5 module(s)"), "{screen}");
    assert!(screen.contains("tier 3 of 3"), "{screen}");
    // `building 7/10 3s`: the builder's step n/m on the row (read from the state database).
    let screen = tmux.wait_quietly("api's Dockerfile step", Duration::from_secs(30), |s| {
        row(s, "api")
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| {
                w[0] == "building"
                    && w[1]
                        .split_once('/')
                        .is_some_and(|(n, m)| n.parse::<u32>().is_ok() && m.parse::<u32>().is_ok())
            })
    });
    // Builder output belongs to the converge pane, never to the line under the header.
    let notice_line = screen.lines().nth(2).unwrap_or("");
    assert!(!notice_line.contains("Running in"), "{screen}");
    let status = wait_exit(&mut child, Duration::from_secs(90), "the build's sleep");
    assert!(
        status.success(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );
    // Its end: the notice says it, the table shows a plan made after it.
    let screen = tmux.wait_quietly(
        "the plan after the converge",
        Duration::from_secs(30),
        |s| s.contains("#2 converge succeeded") && row(s, "api").contains("skip·record"),
    );
    assert!(screen.contains("DECISION"), "{screen}");
}

#[test]
fn quitting_while_a_converge_started_here_runs_asks_and_cancels_it() {
    let (mesh, tmux) = dashboard_on_slow_api("livequit", 120);
    tmux.keys(&["C"]);
    tmux.wait_quietly("the converge confirm", Duration::from_secs(10), |s| {
        s.contains("Converge mesh")
    });
    tmux.keys(&["Right", "Enter"]);
    tmux.wait_quietly("api building", Duration::from_secs(60), |s| {
        row(s, "api").contains("building")
    });
    tmux.keys(&["q"]);
    let screen = tmux.wait_quietly("the quit question", Duration::from_secs(10), |s| {
        s.contains("Quit while")
    });
    assert!(screen.contains("marked cancelled"), "{screen}");
    // Cancel is selected: Enter keeps the dashboard and the converge.
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_quietly("the quit question answered", Duration::from_secs(10), |s| {
        !s.contains("Quit while")
    });
    assert!(row(&screen, "api").contains("building"), "{screen}");
    tmux.keys(&["q"]);
    tmux.wait_quietly("the quit question", Duration::from_secs(10), |s| {
        s.contains("Quit while")
    });
    tmux.keys(&["Right", "Enter"]);
    // The dashboard has left the terminal: its screen is gone.
    tmux.wait_quietly("the dashboard to quit", Duration::from_secs(20), |s| {
        !s.contains("modules · 5 of 5") && !s.contains("Quit while")
    });
    let api = builds(&mesh)
        .into_iter()
        .find(|b| b.module.as_deref() == Some("api"))
        .expect("api's build row");
    assert_eq!(api.status, BuildStatus::Cancelled, "{api:?}");
    // The mesh is free at once: no "being converged by" on the next converge.
    let next = mesh.meshtop(&["plan"]);
    assert!(next.status.success(), "{}", said(&next));
    let busy = mesh.meshtop(&["converge", "base"]);
    assert!(busy.status.success(), "{}", said(&busy));
}

/// A converge killed mid-build never says its last word: the dashboard says it stopped (its process
/// is gone) and shows the plan again, never a `building` that is not so.
#[test]
fn a_killed_converge_reads_stopped_process_gone_not_building() {
    let (mesh, tmux) = dashboard_on_slow_api("livekill", 120);
    let log = mesh.root().join("converge.log");
    let mut child = mesh.spawn_converge(&log, &[]);
    tmux.wait_quietly("api building on its row", Duration::from_secs(60), |s| {
        row(s, "api").contains("building")
    });
    child.kill().unwrap();
    child.wait().unwrap(); // reaped: its pid no longer exists
    let screen = tmux.wait_quietly("the stopped converge", Duration::from_secs(30), |s| {
        s.contains("#2 stopped (process gone)")
    });
    assert!(!row(&screen, "api").contains("building"), "{screen}");
    assert!(screen.contains("DECISION"), "the plan is back:\n{screen}");
}
