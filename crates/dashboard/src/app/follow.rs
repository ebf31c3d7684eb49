//! The notice follows the newest operation of the mesh, from any process: its start, then its end
//! by its short id (`#42 converge failed`); a followed operation that fails or ran long rings the bell.

use crate::mesh::progress::{EventRow, Outcome, Payload, Step, operation_label};

use super::msg::Effect;
use super::state::{AppState, Notice};

/// The notice follows the newest operation of the mesh, from any process: its start, then its end.
/// A notice about an earlier operation (a converge that succeeded here) never stays as if current.
pub(crate) fn follow_operation(state: &mut AppState, event: &EventRow, live: bool) -> Vec<Effect> {
    let label = operation_label(event.operation, &event.operation_id);
    let started_ms = state
        .operation
        .lines
        .iter()
        .find(|e| e.operation_id == event.operation_id)
        .map_or(event.at_ms, |e| e.at_ms);
    if event.step == Step::Started {
        // The line under the header shows the running operation itself (its tier, what is done):
        // an earlier operation's notice must not stay beside it as if current.
        state.notice = None;
        state.dirty = true;
        return Vec::new();
    }
    // The notice says the operation's last word; whether it is an error is the step's data.
    let text = format!("{label} {}", event.text);
    let error = ended_badly(event);
    // A followed operation (not the one read at start-up) that fails or ran long rings the bell.
    let long = event.at_ms - started_ms > LONG_OPERATION_MS;
    let ring = state.bell && live && event.step == Step::Finished && (error || long);
    let effects = if ring {
        vec![Effect::Bell(text.clone())]
    } else {
        Vec::new()
    };
    state.notice = Some(Notice {
        text,
        error,
        at_ms: event.at_ms,
    });
    state.dirty = true;
    effects
}

/// An operation that ran longer than this rings the bell when it finishes.
pub(crate) const LONG_OPERATION_MS: i64 = 30_000;

/// Whether an operation's last step says it failed or was cancelled: its outcome, never its words
/// (a rollback's last line ends in its pin, a gc's in the bytes it freed). A last step written
/// before outcomes were kept says nothing either way: not an error.
fn ended_badly(event: &EventRow) -> bool {
    matches!(
        event.payload,
        Some(Payload::Finished { outcome, .. }) if outcome != Outcome::Succeeded
    )
}
