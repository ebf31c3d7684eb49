//! The real binary in tmux: start the dashboard on an example mesh, send keys, read the screen.
//! Every session runs on a tmux server of its own (`tmux -L meshtop-test-<run id>`, with `TMUX`
//! unset), never the user's: a test run from inside someone's tmux puts no window there, and two
//! runs never share a server. Dropping a [`Tmux`] ends its server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::{Duration, Instant};

use super::ExampleMesh;

pub(crate) struct Tmux {
    pub(crate) session: String,
    /// The server's socket name (`-L`).
    pub(crate) server: String,
    /// `XDG_STATE_HOME` of everything run in it: a dashboard's log goes here, not into the
    /// user's `~/.local/state/meshtop/` (where the user's own dashboard logs).
    state_home: tempfile::TempDir,
}

impl Tmux {
    pub(crate) fn start(mesh: &ExampleMesh) -> Tmux {
        Tmux::start_with(mesh, &[])
    }

    /// The dashboard on the mesh with extra flags, in a 120×40 tmux session.
    pub(crate) fn start_with(mesh: &ExampleMesh, flags: &[&str]) -> Tmux {
        Tmux::start_on(mesh, &mesh.state(), flags)
    }

    /// [`Tmux::start_with`] on another state database (another machine, a clean one).
    pub(crate) fn start_on(mesh: &ExampleMesh, state: &std::path::Path, flags: &[&str]) -> Tmux {
        let tmux = Tmux::shell();
        let command = format!(
            "{} --mesh {} --state {} {}",
            env!("CARGO_BIN_EXE_meshtop"),
            mesh.mesh_file().display(),
            state.display(),
            flags.join(" ")
        );
        tmux.keys(&[&command, "Enter"]);
        tmux
    }

    /// A shell (prompt `prompt$ `) in a 120×40 tmux session: a terminal for a command.
    pub(crate) fn shell() -> Tmux {
        let ok = Command::new("tmux")
            .arg("-V")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(
            ok,
            "this test needs tmux (apt-get install tmux; scripts/test.sh installs it)"
        );
        let id = super::run_id();
        // Noted: a server a killed test left is ended by the next run's sweep.
        super::note_name(&format!("meshtop-test-{id}"));
        let tmux = Tmux {
            session: format!("meshtop-e2e-{id}"),
            server: format!("meshtop-test-{id}"),
            state_home: tempfile::tempdir().unwrap(),
        };
        let status = tmux
            .command()
            .args([
                "new-session",
                "-d",
                "-s",
                &tmux.session,
                "-x",
                "120",
                "-y",
                "40",
                "bash --norc --noprofile",
            ])
            .env("PS1", "prompt$ ")
            .env("XDG_STATE_HOME", tmux.state_home.path())
            .status()
            .unwrap();
        assert!(status.success());
        tmux
    }

    /// A tmux command on this session's own server: `TMUX` unset, so a test run from inside
    /// someone's tmux never talks to that server.
    pub(crate) fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.env_remove("TMUX").args(["-L", &self.server]);
        command
    }

    /// The pid of the process in the session's pane (its shell, or the command it was made with).
    pub(crate) fn pane_pid(&self) -> String {
        let out = self
            .command()
            .args(["display", "-p", "-t", &self.session, "#{pane_pid}"])
            .output()
            .unwrap();
        assert!(out.status.success(), "tmux display: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    pub(crate) fn keys(&self, keys: &[&str]) {
        let status = self
            .command()
            .args(["send-keys", "-t", &self.session])
            .args(keys)
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub(crate) fn screen(&self) -> String {
        let out = self
            .command()
            .args(["capture-pane", "-p", "-t", &self.session])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Wait until `ready` holds for the screen, pressing nothing.
    pub(crate) fn wait_quietly(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&str) -> bool,
    ) -> String {
        self.wait(what, timeout, ready, false)
    }

    /// Wait until `ready` holds for the screen, pressing `r` (poll now) every few seconds.
    pub(crate) fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&str) -> bool,
    ) -> String {
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
    /// Ends the session's own server (and the dashboard in it) and removes its socket, passing or
    /// failing.
    fn drop(&mut self) {
        let socket = self
            .command()
            .args(["display", "-p", "#{socket_path}"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let _ = self.command().arg("kill-server").status();
        // tmux leaves its socket file behind when its server is killed.
        if !socket.is_empty() {
            let _ = std::fs::remove_file(socket);
        }
    }
}

/// The line of the modules table that shows `module`: `T MODULE …` or `  MODULE …`.
pub(crate) fn row<'a>(screen: &'a str, module: &str) -> &'a str {
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
    pub(crate) fn resize(&self, width: u16, height: u16) {
        let status = self
            .command()
            .args(["resize-window", "-t", &self.session, "-x"])
            .arg(width.to_string())
            .arg("-y")
            .arg(height.to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }
}
