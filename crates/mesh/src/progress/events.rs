//! Stored steps and how a follower reads each of them once.

use serde::{Deserialize, Serialize};

use super::payload::Payload;
use super::step::Step;
use crate::operation::OperationKind;

/// A stored progress step. `id` only grows: follow with `events_after(last id)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventRow {
    pub id: i64,
    pub at_ms: i64,
    pub mesh: String,
    pub operation_id: String,
    /// The operation's short id within the mesh (`#142`), when it has one.
    #[serde(default)]
    pub operation: Option<i64>,
    /// What the operation is (`converge`, `force`, `send`, `rollback`, `gc`), when it is known.
    #[serde(default)]
    pub operation_kind: Option<OperationKind>,
    pub step: Step,
    pub module: Option<String>,
    pub text: String,
    /// The step's data; None for a row written before payloads were kept (schema 10 and older)
    /// or one a newer meshtop wrote in a shape this one cannot read.
    #[serde(default)]
    pub payload: Option<Payload>,
}

impl EventRow {
    /// The bytes the row takes where it is held: itself and the text it owns (a payload's own
    /// strings are short: names and references; an error is counted by its text).
    pub fn held_bytes(&self) -> usize {
        std::mem::size_of::<EventRow>()
            + self.mesh.capacity()
            + self.operation_id.capacity()
            + self.module.as_ref().map_or(0, String::capacity)
            + self.text.capacity()
    }
}

/// Of a poll's events, those a follower that has read up to `last_id` has not seen yet. A poll
/// asked for again before the previous answer was taken in (a converge started on the dashboard asks
/// at each step) reads some events twice; every view of an operation folds its events through this,
/// so each is shown and counted once.
pub fn unseen(events: Vec<EventRow>, last_id: i64) -> impl Iterator<Item = EventRow> {
    let mut newest = last_id;
    events.into_iter().filter(move |event| {
        let new = event.id > newest;
        newest = newest.max(event.id);
        new
    })
}
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn row(id: i64) -> EventRow {
        EventRow {
            id,
            at_ms: id,
            mesh: "demo".into(),
            operation_id: "op".into(),
            operation: Some(1),
            operation_kind: None,
            step: Step::Decided,
            module: None,
            text: format!("event {id}"),
            payload: None,
        }
    }

    #[test]
    fn an_event_read_twice_is_seen_once() {
        // Two polls that overlapped: the second read 3 and 4 again.
        let events = vec![row(3), row(4), row(3), row(4), row(5)];
        let ids: Vec<i64> = unseen(events, 2).map(|e| e.id).collect();
        assert_eq!(ids, vec![3, 4, 5]);
        let ids: Vec<i64> = unseen(vec![row(4), row(5), row(6)], 5)
            .map(|e| e.id)
            .collect();
        assert_eq!(ids, vec![6]);
    }
}
