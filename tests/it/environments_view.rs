//! The environments view end to end (issue 24): the real binary in tmux on a mesh with two docker
//! targets (staging, and prod promoted from staging; each with its own machines) and the real
//! daemon. The grid shows staging's artifacts and prod's cells marked as differing; `p` on prod's
//! web cell asks (Cancel first), and going ahead moves the cell to staging's artifact, its machine
//! created on it; `t` shows prod in the main view, the header naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::tmux::Tmux;
use common::{ExampleMesh, said};
use meshtop::mesh::text::short_id;
use serde_json::Value;

/// The grid's row of `module`, as the view draws it (its first word is the module's name).
fn grid_row<'a>(screen: &'a str, module: &str) -> &'a str {
    screen
        .lines()
        .find(|l| l.split_whitespace().next() == Some(module))
        .unwrap_or("")
}

fn cell<'a>(grid: &'a Value, module: &str, target: &str) -> &'a Value {
    common::grid_cell(grid, module, target)
}

#[test]
fn the_environments_view_shows_the_grid_marks_a_differing_cell_and_promotes_into_it() {
    let mesh = ExampleMesh::two_docker_targets("envv");
    let long = Duration::from_secs(180);
    let converged = mesh.meshtop(&["converge", "--target", "staging"]);
    assert!(converged.status.success(), "{}", said(&converged));
    let grid = mesh.json(&["status", "--all-targets", "--json"]);
    let web = cell(&grid, "web", "staging")["artifact"]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let web_short = short_id(&web).to_string();
    assert_eq!(cell(&grid, "web", "prod")["differs"], true, "{grid}");

    let tmux = Tmux::start(&mesh);
    tmux.wait_for("the modules table", Duration::from_secs(30), |s| {
        s.contains("modules · 5 of 5")
    });
    let screen = tmux.screen();
    assert!(
        screen.contains("target staging · docker"),
        "the header names the target shown:\n{screen}"
    );

    // e: the grid, modules down, targets across; prod's cells differ from staging's.
    tmux.keys(&["e"]);
    let screen = tmux.wait_quietly("the environments grid", long, |s| {
        s.contains("prod ← staging") && grid_row(s, "web").contains(&web_short)
    });
    let row = grid_row(&screen, "web");
    assert!(row.contains("≠ –"), "prod's web cell is marked:\n{screen}");
    assert!(screen.contains("≠ differs from the target"), "{screen}");

    // Down to web (base, tools, web), right to prod: the cell is selected; p asks, Cancel first.
    tmux.keys(&["Down", "Down", "Right"]);
    let screen = tmux.wait_quietly("prod's web cell selected", Duration::from_secs(10), |s| {
        grid_row(s, "web").contains("[≠ –]")
    });
    assert!(!grid_row(&screen, "base").contains('['), "{screen}");
    tmux.keys(&["p"]);
    let screen = tmux.wait_quietly("the promote confirmation", Duration::from_secs(10), |s| {
        s.contains("Promote web from staging to prod?") && s.contains("[ Cancel ]")
    });
    assert!(
        screen.contains(&web_short),
        "the confirm names the artifact:\n{screen}"
    );
    assert!(
        screen.contains(&format!("container {}-prod-web-1", mesh.name)),
        "the confirm names the machine that moves:\n{screen}"
    );

    // Go ahead: the cell moves to staging's artifact, its machine created on it, no mark.
    tmux.keys(&["Right", "Enter"]);
    tmux.keys(&["e"]);
    let screen = tmux.wait_quietly("prod's web cell moved", long, |s| {
        let row = grid_row(s, "web");
        row.matches(&web_short).count() == 2 && row.contains("1/1") && !row.contains('≠')
    });
    assert!(
        grid_row(&screen, "api").contains("≠ –"),
        "api was not promoted:\n{screen}"
    );
    let grid = mesh.json(&["status", "--all-targets", "--json"]);
    assert_eq!(
        cell(&grid, "web", "prod")["artifact"]["digest"],
        web.as_str()
    );
    assert_eq!(cell(&grid, "web", "prod")["differs"], false, "{grid}");
    let label = std::process::Command::new("docker")
        .args([
            "inspect",
            "-f",
            "{{ index .Config.Labels \"jr2.dev/target\" }} {{ .Image }}",
            &format!("{}-prod-web-1", mesh.name),
        ])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&label.stdout).trim(),
        format!("prod {web}"),
        "prod's machine runs staging's artifact, marked as prod's"
    );

    // t in the view: the main view shows prod, and the header says so.
    tmux.keys(&["t"]);
    let screen = tmux.wait_quietly("the main view on prod", Duration::from_secs(30), |s| {
        s.contains("target prod · docker") && s.contains("modules · 5 of 5")
    });
    assert!(!screen.contains("environments of mesh"), "{screen}");
    tmux.keys(&["q"]);
}
