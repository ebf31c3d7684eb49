//! Quitting while an action started here runs: ask first. Going ahead cancels it (a converge stops
//! its builds and marks them cancelled; nothing is stamped) and quits once it has stopped, or after
//! [`QUIT_GRACE_MS`] at the latest, so that a stuck action never holds the terminal.

use super::keys::Mode;
use super::msg::Effect;
use super::state::{AppState, Confirm, ConfirmThen, Running};

/// The longest wait for a cancelled action to stop before quitting anyway.
pub const QUIT_GRACE_MS: i64 = 10_000;

/// `q` or Ctrl-C: quit now when nothing started here runs, else ask.
pub(crate) fn asked(state: &mut AppState) -> Vec<Effect> {
    let asking = matches!(
        &state.confirm,
        Some(Confirm {
            then: ConfirmThen::CancelAndQuit,
            ..
        })
    );
    // Ctrl-C again while asked (or while already cancelling): go ahead.
    if asking {
        state.confirm = None;
        state.mode = Mode::Normal;
        return cancel_and_quit(state);
    }
    let Some(running) = state.running.clone() else {
        return vec![Effect::Quit];
    };
    if state.quit_after_ms.is_some() {
        return vec![Effect::Quit];
    }
    let label = running.label();
    let mut lines = vec![format!("{label} was started here and is still running.")];
    if let Some(live) = state.operation.live.as_ref().filter(|l| l.is_running()) {
        let building: Vec<&str> = live
            .modules
            .iter()
            .filter(|(_, m)| matches!(m.run, crate::mesh::live::ModuleRun::Building { .. }))
            .map(|(name, _)| name.as_str())
            .collect();
        if !building.is_empty() {
            lines.push(format!("building now: {}", building.join(", ")));
        }
    }
    if let Running::Converge(_) = running {
        lines.push("Quitting cancels it: its running builds are marked cancelled and".into());
        lines.push("nothing is stamped; what it already delivered stays delivered.".into());
    } else {
        lines.push(format!(
            "Quitting waits for it to end (at most {} s); what it has not done stays undone.",
            QUIT_GRACE_MS / 1000
        ));
    }
    state.confirm = Some(Confirm {
        title: format!("Quit while {label} runs?"),
        lines,
        verb: "Quit".into(),
        then: ConfirmThen::CancelAndQuit,
        go: false,
    });
    state.mode = Mode::Confirm;
    state.dirty = true;
    Vec::new()
}

/// Cancel what runs and quit when it has stopped (see [`overdue`] for the latest).
pub(crate) fn cancel_and_quit(state: &mut AppState) -> Vec<Effect> {
    let Some(running) = state.running.clone() else {
        return vec![Effect::Quit];
    };
    state.quit_after_ms = Some(state.now_ms + QUIT_GRACE_MS);
    state.notify(
        format!(
            "cancelling {}; quitting when it has stopped",
            running.label()
        ),
        false,
    );
    vec![Effect::CancelAction]
}

/// Whether a cancelled action took longer than [`QUIT_GRACE_MS`] to stop: quit anyway.
pub(crate) fn overdue(state: &AppState) -> bool {
    state
        .quit_after_ms
        .is_some_and(|deadline| state.now_ms >= deadline)
}
