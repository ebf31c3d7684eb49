//! Watching (issue 11): a save shows on the dashboard with no key pressed, long before the timed
//! plan poll (a minute) would show it; `meshtop watch` converges once after a quiet period, and a
//! burst of saves converges once. Real binary, real daemon, tmux.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{ExampleMesh, said};

fn tmux(args: &[&str]) -> String {
    let out = Command::new("tmux")
        .args(args)
        .output()
        .expect("this test needs tmux (apt-get install tmux; scripts/test.sh installs it)");
    assert!(out.status.success(), "tmux {args:?}: {}", said(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

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
    let session = format!("meshtop-watch-{}", std::process::id());
    let command = format!(
        "{} --mesh {} --state {}",
        env!("CARGO_BIN_EXE_meshtop"),
        mesh.mesh_file().display(),
        mesh.state().display()
    );
    tmux(&[
        "new-session",
        "-d",
        "-s",
        &session,
        "-x",
        "160",
        "-y",
        "40",
        &command,
    ]);
    struct Kill(String);
    impl Drop for Kill {
        fn drop(&mut self) {
            let _ = Command::new("tmux")
                .args(["kill-session", "-t", &self.0])
                .status();
        }
    }
    let _kill = Kill(session.clone());
    let repository = format!("{}/base:", mesh.name);
    let wait = |what: &str, limit: Duration, ready: &dyn Fn(&str) -> bool| -> String {
        let start = Instant::now();
        loop {
            let screen = tmux(&["capture-pane", "-p", "-t", &session]);
            if ready(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < limit,
                "no {what} after {limit:?}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let screen = wait("plan on screen", Duration::from_secs(60), &|s| {
        ref_on_screen(s, &repository).is_some()
    });
    let before = ref_on_screen(&screen, &repository).unwrap();
    // No key is pressed from here on: only the watcher can make the plan run again this soon
    // (the timed plan poll comes once a minute).
    std::fs::write(mesh.root().join("base/saved.txt"), "a save\n").unwrap();
    let screen = wait("new ref for base", Duration::from_secs(20), &|s| {
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

    // A burst of saves, closer together than the quiet period: one converge.
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
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        converges(&out),
        1,
        "{}",
        std::fs::read_to_string(&out).unwrap()
    );
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(
        text.contains(" succeeded"),
        "{text}\n{}",
        std::fs::read_to_string(&err).unwrap()
    );

    // A file in another module's context is not watched: nothing runs.
    std::fs::write(mesh.root().join("api/other.txt"), "x").unwrap();
    // One more save: one more converge.
    std::fs::write(&page, "<p>last</p>\n").unwrap();
    wait_until(
        "a second converge",
        Duration::from_secs(180),
        || converges(&out) >= 2,
        &err,
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(converges(&out), 2);
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "the watch keeps running"
    );
}
