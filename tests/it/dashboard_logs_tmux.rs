//! The logs view in tmux against the real daemon (issue 30): `l` on a module shows its two
//! machines' lines, named, and the view moves while they print; scrolling up stops following (the
//! lines on screen stay while new ones come); `G` follows again; `esc` closes the view.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;
use std::time::Duration;

use common::tmux::{Tmux, row};
use common::{ExampleMesh, run_id, said};

/// The newest `tick N` of `machine` on the screen.
fn newest_tick(screen: &str, machine: &str) -> Option<u64> {
    screen
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix(machine))
        .filter_map(|rest| rest.trim_start().strip_prefix("| tick "))
        .filter_map(|n| n.trim().parse().ok())
        .max()
}

/// The last line of the view (the row above the footer).
fn bottom_line(screen: &str) -> String {
    let lines: Vec<&str> = screen.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(2)].trim().to_string()
}

/// `line A of B (…follows)` in the title: B, the lines held.
fn held(screen: &str) -> Option<u64> {
    let title = regex::Regex::new(r"line \d+ of (\d+) \(").unwrap();
    title.captures(screen)?[1].parse().ok()
}

#[test]
fn l_follows_a_modules_machines_scrolling_up_stops_and_esc_closes() {
    let mesh = ExampleMesh::new("ltmux");
    let summary = mesh.json(&["converge", "--json", "base"]);
    assert_eq!(summary["stamped"], true, "{summary}");
    let image = Command::new("docker")
        .args(["images", "-q", "--no-trunc"])
        .args(["--filter", &format!("label=jr2.dev/mesh={}", mesh.name)])
        .args(["--filter", "label=jr2.dev/module=base"])
        .output()
        .unwrap();
    let image = String::from_utf8_lossy(&image.stdout)
        .lines()
        .next()
        .expect("base's image")
        .to_string();
    let id = run_id();
    let names = [
        format!("{}-a-{id}", mesh.name),
        format!("{}-b-{id}", mesh.name),
    ];
    for name in &names {
        let out = Command::new("docker")
            .args(["run", "-d", "--name", name])
            .args(["--label", "jr2.dev/module=base"])
            .args(["--label", &format!("jr2.dev/mesh={}", mesh.name)])
            .args(["--label", &format!("jr2.dev/machine={name}")])
            .arg(&image)
            .args([
                "sh",
                "-c",
                "i=0; while true; do i=$((i+1)); echo \"tick $i\"; sleep 0.3; done",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", said(&out));
    }

    let tmux = Tmux::start(&mesh);
    tmux.wait_for("base's two machines", Duration::from_secs(60), |s| {
        row(s, "base").contains("2/2")
    });
    tmux.keys(&["l"]);
    let first = tmux.wait_quietly("both machines' lines", Duration::from_secs(30), |s| {
        s.contains("logs · module base · 2 machines · following")
            && names.iter().all(|n| newest_tick(s, n).is_some())
    });
    // The view moves while they print: a newer tick of each comes to the bottom.
    let then = newest_tick(&first, &names[0]).unwrap();
    tmux.wait_quietly("newer lines", Duration::from_secs(30), |s| {
        newest_tick(s, &names[0]).is_some_and(|n| n > then + 2)
    });

    // Up stops following: the title says where the view is, and the lines on screen stay while
    // the machines go on printing (the count of lines held grows under them).
    // One key: with three, the screen could be read after the first and the others still
    // moving the view (the pause is seen at once; seen failing under load: `line 14 of 16` then
    // `line 13 of 21`).
    tmux.keys(&["Up"]);
    let paused = tmux.wait_quietly("the view stopped", Duration::from_secs(10), |s| {
        s.contains("follows)") && !s.contains("· following")
    });
    let kept = bottom_line(&paused);
    let held_then = held(&paused).expect(&paused);
    let later = tmux.wait_quietly("more lines held", Duration::from_secs(30), |s| {
        held(s).is_some_and(|n| n > held_then + 4)
    });
    assert_eq!(bottom_line(&later), kept, "{paused}\n---\n{later}");

    // G follows again.
    tmux.keys(&["G"]);
    tmux.wait_quietly("following again", Duration::from_secs(10), |s| {
        s.contains("· following")
    });

    tmux.keys(&["Escape"]);
    let closed = tmux.wait_quietly("the view closed", Duration::from_secs(10), |s| {
        !s.contains("logs · module") && s.contains("modules ·")
    });
    assert!(row(&closed, "base").contains("2/2"), "{closed}");
    tmux.keys(&["q"]);
}
