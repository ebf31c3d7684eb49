//! The real binary in tmux against the real daemon (issue 4's end-to-end check): it opens, shows
//! three tiers, converges from the keyboard, shows a moved base, ignores a cancelled force rebuild,
//! sends a held machine, and quits leaving a usable shell.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{ExampleMesh, said};

struct Tmux {
    session: String,
}

impl Tmux {
    fn start(mesh: &ExampleMesh) -> Tmux {
        let ok = Command::new("tmux")
            .arg("-V")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(
            ok,
            "this test needs tmux (apt-get install tmux; scripts/test.sh installs it)"
        );
        let session = format!("meshtop-e2e-{}", std::process::id());
        let status = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                &session,
                "-x",
                "120",
                "-y",
                "40",
                "bash --norc --noprofile",
            ])
            .env("PS1", "prompt$ ")
            .status()
            .unwrap();
        assert!(status.success());
        let tmux = Tmux { session };
        let command = format!(
            "{} --mesh {} --state {}",
            env!("CARGO_BIN_EXE_meshtop"),
            mesh.mesh_file().display(),
            mesh.state().display()
        );
        tmux.keys(&[&command, "Enter"]);
        tmux
    }

    fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["send-keys", "-t", &self.session])
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.session])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wait until `ready` holds for the screen, pressing `r` (poll now) every few seconds.
    fn wait_for(&self, what: &str, timeout: Duration, ready: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        let mut last_poll = Instant::now();
        loop {
            let screen = self.screen();
            if ready(&screen) {
                return screen;
            }
            assert!(
                start.elapsed() < timeout,
                "timed out waiting for {what}; the screen:\n{screen}"
            );
            if last_poll.elapsed() > Duration::from_secs(3) {
                self.keys(&["r"]);
                last_poll = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.session])
            .status();
    }
}

/// The line of the modules table that shows `module`: `T MODULE …` or `  MODULE …`.
fn row<'a>(screen: &'a str, module: &str) -> &'a str {
    screen
        .lines()
        .find(|line| {
            let words: Vec<&str> = line.split_whitespace().take(2).collect();
            match words.as_slice() {
                [tier, name] if tier.chars().all(|c| c.is_ascii_digit()) => *name == module,
                [name, _] => *name == module,
                _ => false,
            }
        })
        .unwrap_or("")
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
    std::thread::sleep(Duration::from_secs(2));
    let builds_after = mesh
        .json(&["builds", "--json", "--limit", "100"])
        .as_array()
        .unwrap()
        .len();
    assert_eq!(builds_before, builds_after, "f + Esc built nothing");

    // s + confirm moves a held machine to current: a forced rebuild of api (policy record) holds it.
    let forced = mesh.meshtop(&["converge", "--force", "api"]);
    assert!(forced.status.success(), "{}", said(&forced));
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
