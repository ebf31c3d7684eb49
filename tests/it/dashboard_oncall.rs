//! The on-call path in tmux against the real daemon (issue 14): a build broken and converged from
//! the command line while the dashboard is open; the error's last words and BuildKit's verdict on
//! the step (the instruction and `exit code: 3`) are on screen within three key presses, with no escape text; the
//! notice names the failed operation by its short id. Then SIGTERM restores the terminal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::tmux::{Tmux, row};
use common::{ExampleMesh, said};

/// The screen without any whitespace: wrapped lines read as one.
fn compact(screen: &str) -> String {
    screen.chars().filter(|c| !c.is_whitespace()).collect()
}

#[test]
fn a_failure_from_the_command_line_is_read_in_one_key_press() {
    let mesh = ExampleMesh::new("call");
    // The step prints in colour; octal escapes keep `[91m` out of the command text itself.
    let file = mesh.root().join("base/Dockerfile");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        format!(
            "{text}RUN printf '\\033\\133\\071\\061mcoloured complaint\\033\\1330m\\n' >&2; echo 'cannot find app.bin, giving up' >&2; exit 3\n"
        ),
    )
    .unwrap();
    let tmux = Tmux::start(&mesh);
    tmux.wait_for("the modules table", Duration::from_secs(30), |s| {
        s.contains("modules · 5 of 5") && row(s, "base").contains("build")
    });

    let failed = mesh.meshtop(&["converge", "base"]);
    assert!(!failed.status.success(), "{}", said(&failed));
    // The notice names the operation by its short id and says how it ended: exactly this text
    // (the pane's rule `── converge #1 ──` also holds `#1`, so nothing less proves the notice).
    let screen = tmux.wait_for(
        "base's failure on its row and the notice `#1 converge failed`",
        Duration::from_secs(60),
        |s| row(s, "base").contains("✗") && s.contains("#1 converge failed"),
    );
    assert!(!screen.contains("succeeded"), "{screen}");

    // One key: base is the first row, Enter opens its detail at its end.
    tmux.keys(&["Enter"]);
    let screen = tmux.wait_for("the failure in the detail", Duration::from_secs(10), |s| {
        compact(s).contains("exitcode:3")
    });
    let flat = compact(&screen);
    assert!(
        flat.contains("[3/3]RUNprintf"),
        "the failed step names its instruction:\n{screen}"
    );
    assert!(
        flat.contains("cannotfindapp.bin,givingup"),
        "the step's last words:\n{screen}"
    );
    assert!(flat.contains("colouredcomplaint"), "{screen}");
    for escape in ["[91m", "[0m", "\u{1b}"] {
        assert!(
            !screen.contains(escape),
            "escape text {escape:?}:\n{screen}"
        );
    }

    // SIGTERM closes the dashboard like q: the shell answers on a normal screen.
    let shell = tmux.pane_pid();
    let child = Command::new("pgrep").args(["-P", &shell]).output().unwrap();
    let pid = String::from_utf8_lossy(&child.stdout)
        .split_whitespace()
        .next()
        .map(str::to_string)
        .unwrap_or_else(|| panic!("the dashboard's process was not found under shell {shell}"));
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        !s.contains("modules ·") && !s.contains("detail ·")
    });
    tmux.keys(&["echo alive-$((6*7))", "Enter"]);
    tmux.wait_for("the shell to answer", Duration::from_secs(10), |s| {
        s.contains("alive-42")
    });
}
