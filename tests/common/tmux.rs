//! The real binary in tmux: start the dashboard on an example mesh, send keys, read the screen.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use super::ExampleMesh;

pub struct Tmux {
    pub session: String,
}

impl Tmux {
    pub fn start(mesh: &ExampleMesh) -> Tmux {
        Tmux::start_with(mesh, &[])
    }

    /// The dashboard on the mesh with extra flags, in a 120×40 tmux session.
    pub fn start_with(mesh: &ExampleMesh, flags: &[&str]) -> Tmux {
        let tmux = Tmux::shell();
        let command = format!(
            "{} --mesh {} --state {} {}",
            env!("CARGO_BIN_EXE_meshtop"),
            mesh.mesh_file().display(),
            mesh.state().display(),
            flags.join(" ")
        );
        tmux.keys(&[&command, "Enter"]);
        tmux
    }

    /// A shell (prompt `prompt$ `) in a 120×40 tmux session: a terminal for a command.
    pub fn shell() -> Tmux {
        let ok = Command::new("tmux")
            .arg("-V")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(
            ok,
            "this test needs tmux (apt-get install tmux; scripts/test.sh installs it)"
        );
        // Several sessions in one test process (a dashboard beside a shell) need their own names.
        static SESSIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SESSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let session = format!("meshtop-e2e-{}-{n}", std::process::id());
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
        Tmux { session }
    }

    pub fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["send-keys", "-t", &self.session])
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.session])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wait until `ready` holds for the screen, pressing nothing.
    pub fn wait_quietly(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&str) -> bool,
    ) -> String {
        self.wait(what, timeout, ready, false)
    }

    /// Wait until `ready` holds for the screen, pressing `r` (poll now) every few seconds.
    pub fn wait_for(&self, what: &str, timeout: Duration, ready: impl Fn(&str) -> bool) -> String {
        self.wait(what, timeout, ready, true)
    }

    fn wait(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&str) -> bool,
        poll_now: bool,
    ) -> String {
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
            if poll_now && last_poll.elapsed() > Duration::from_secs(3) {
                self.keys(&["r"]);
                last_poll = Instant::now();
            }
            std::thread::sleep(Duration::from_millis(200));
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
pub fn row<'a>(screen: &'a str, module: &str) -> &'a str {
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

impl Tmux {
    /// Make the window `width`×`height` (a tall one shows a whole operation in its pane).
    pub fn resize(&self, width: u16, height: u16) {
        let status = Command::new("tmux")
            .args(["resize-window", "-t", &self.session, "-x"])
            .arg(width.to_string())
            .arg("-y")
            .arg(height.to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }
}
