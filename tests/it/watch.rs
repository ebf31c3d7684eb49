//! Watching (issue 11): a save shows on the dashboard with no key pressed, long before the timed
//! plan poll (a minute) would show it; `meshtop watch` converges once after a quiet period, and a
//! burst of saves converges once. Real binary, real daemon, tmux.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::tmux::Tmux;
use common::{ExampleMesh, read_in_image, said};
use meshtop::backends::state::StateDb;

/// The REF cell of `module`'s row: the first word that names the mesh's repository of it.
fn ref_on_screen(screen: &str, repository: &str) -> Option<String> {
    screen
        .split_whitespace()
        .find(|word| word.starts_with(repository))
        .map(str::to_string)
}

#[test]
fn a_save_changes_the_modules_row_with_no_key_pressed() {
    let mesh = ExampleMesh::new("watchdash");
    let tmux = Tmux::start(&mesh);
    tmux.resize(160, 40);
    let repository = format!("{}/base:", mesh.name);
    let wait = |what: &str, limit: Duration, ready: &dyn Fn(&str) -> bool| -> String {
        tmux.wait_quietly(what, limit, ready)
    };
    let screen = wait("plan on screen", Duration::from_secs(60), &|s| {
        ref_on_screen(s, &repository).is_some()
    });
    let before = ref_on_screen(&screen, &repository).unwrap();
    // No key is pressed from here on: only the watcher can make the plan run again this soon
    // (the timed plan poll comes once a minute).
    std::fs::write(mesh.root().join("base/saved.txt"), "a save\n").unwrap();
    let screen = wait("new ref for base", Duration::from_secs(40), &|s| {
        ref_on_screen(s, &repository).is_some_and(|r| r != before)
    });
    assert!(
        screen.contains("inputs changed: base"),
        "the notice says what changed:\n{screen}"
    );
}

/// Lines of `path` (the watch's stdout) that end a converge.
fn converges(path: &std::path::Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| {
            l.starts_with("converge ") && (l.contains(" succeeded") || l.contains(" failed"))
        })
        .count()
}

fn wait_until(what: &str, limit: Duration, ready: impl Fn() -> bool, log: &std::path::Path) {
    let start = Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < limit,
            "no {what} after {limit:?}; the watch said:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn the_watch_loop_converges_once_per_quiet_period() {
    let mesh = ExampleMesh::new("watchcli");
    let first = mesh.meshtop(&["converge"]);
    assert!(first.status.success(), "{}", said(&first));
    let out = mesh.dir.path().join("watch.out");
    let err = mesh.dir.path().join("watch.err");
    let mut child = Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .args(["watch", "--quiet-ms", "400", "web"])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let watching = || {
        std::fs::read_to_string(&err)
            .unwrap_or_default()
            .contains("watching 1 context")
    };
    wait_until("start", Duration::from_secs(30), watching, &err);
    // The plan is printed first, before any change.
    wait_until(
        "first plan",
        Duration::from_secs(30),
        || {
            std::fs::read_to_string(&out)
                .unwrap_or_default()
                .contains("web")
        },
        &out,
    );
    if let Some(status) = child.try_wait().unwrap() {
        panic!("watch ended: {status}");
    }
    let mut child = Stop(child);

    // A burst of saves, closer together than the quiet period: one converge, of the last save.
    let page = mesh.root().join("web/www/index.html");
    for i in 0..5 {
        std::fs::write(&page, format!("<p>save {i}</p>\n")).unwrap();
        std::thread::sleep(Duration::from_millis(60));
    }
    wait_until(
        "a converge",
        Duration::from_secs(180),
        || converges(&out) >= 1,
        &err,
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains(" succeeded"),
        "{text}\n{}",
        std::fs::read_to_string(&err).unwrap()
    );
    // A burst split in two would have converged an earlier save first.
    assert_eq!(recorded_page(&mesh), "<p>save 4</p>", "{text}");

    // A file in another module's context is not watched: nothing runs for it.
    std::fs::write(mesh.root().join("api/other.txt"), "x").unwrap();
    // One more save: one more converge.
    std::fs::write(&page, "<p>last</p>\n").unwrap();
    wait_until(
        "the converge of the last save",
        Duration::from_secs(180),
        || converges(&out) >= 2 && recorded_page(&mesh) == "<p>last</p>",
        &err,
    );
    // The watch works one burst after another: every converge before the last save's is printed
    // before it, so these counts are final, with no sleep standing for "nothing else ran".
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(converges(&out), 2, "{text}");
    let bursts: Vec<String> = std::fs::read_to_string(&err)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("meshtop: inputs changed:"))
        .map(str::to_string)
        .collect();
    assert_eq!(
        bursts, ["meshtop: inputs changed: web"; 2],
        "one burst per quiet period, api's file never seen"
    );
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "the watch keeps running"
    );
}

/// What web's recorded artifact serves (its index page, read from the image); empty before any.
fn recorded_page(mesh: &ExampleMesh) -> String {
    let record = StateDb::open(&mesh.state())
        .and_then(|db| db.record(&mesh.name, "default"))
        .unwrap_or_default();
    record
        .get("web")
        .map(|web| read_in_image(&web.digest, "/www/index.html"))
        .unwrap_or_default()
}
