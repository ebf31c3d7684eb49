//! The notice follows the newest operation of the mesh, from any process: its start, then its end
//! by its short id (`#42 converge failed`); a followed operation that fails or ran long rings the bell.

use crate::mesh::progress::{EventRow, Step, operation_label};

use super::msg::Effect;
use super::state::{AppState, Notice};

/// The notice follows the newest operation of the mesh, from any process: its start, then its end.
/// A notice about an earlier operation (a converge that succeeded here) never stays as if current.
pub fn follow_operation(state: &mut AppState, event: &EventRow, live: bool) -> Vec<Effect> {
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
    let text = format!("{label} {}", event.text);
    let error = !finished_well(&event.text);
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
pub const LONG_OPERATION_MS: i64 = 30_000;

/// Whether an operation's last word says it went well: `converge succeeded`, or a send that moved
/// every machine (`send: 2/2 machine(s) moved`).
fn finished_well(text: &str) -> bool {
    if text.ends_with("succeeded") {
        return true;
    }
    text.strip_prefix("send: ")
        .and_then(|rest| rest.strip_suffix(" machine(s) moved"))
        .and_then(|counts| counts.split_once('/'))
        .is_some_and(|(moved, all)| moved == all)
}
