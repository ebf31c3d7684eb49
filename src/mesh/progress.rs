//! Progress of an operation (converge, send), step by step: what the engine emits, what the state
//! database keeps, and what the dashboard and the command line show.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What happened. Stored by its name ([`Step::as_str`]); a name this meshtop does not know (a newer
/// one wrote it) reads as [`Step::Other`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    Started,
    /// A module this operation will walk, with its tier's place (`tier 1 of 3`): sent once per
    /// module before the first tier, so a follower knows the whole operation from its start.
    Queued,
    Warning,
    Refused,
    Tier,
    Decided,
    Build,
    Output,
    Built,
    Failed,
    Delivered,
    Stamped,
    Created,
    Send,
    Rollout,
    Sent,
    Finished,
    Other,
}

impl Step {
    const ALL: [Step; 18] = [
        Step::Started,
        Step::Queued,
        Step::Warning,
        Step::Refused,
        Step::Tier,
        Step::Decided,
        Step::Build,
        Step::Output,
        Step::Built,
        Step::Failed,
        Step::Delivered,
        Step::Stamped,
        Step::Created,
        Step::Send,
        Step::Rollout,
        Step::Sent,
        Step::Finished,
        Step::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Step::Started => "started",
            Step::Queued => "queued",
            Step::Warning => "warning",
            Step::Refused => "refused",
            Step::Tier => "tier",
            Step::Decided => "decided",
            Step::Build => "build",
            Step::Output => "output",
            Step::Built => "built",
            Step::Failed => "failed",
            Step::Delivered => "delivered",
            Step::Stamped => "stamped",
            Step::Created => "created",
            Step::Send => "send",
            Step::Rollout => "rollout",
            Step::Sent => "sent",
            Step::Finished => "finished",
            Step::Other => "other",
        }
    }

    /// Whether the step is a line to read wherever an operation is shown (the dashboard's pane, the
    /// command line's log). A `queued` step is each module's state for the table, never a line.
    pub fn is_line(self) -> bool {
        self != Step::Queued
    }

    pub fn parse(name: &str) -> Step {
        Step::ALL
            .into_iter()
            .find(|step| step.as_str() == name)
            .unwrap_or(Step::Other)
    }
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One step as it happens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub step: Step,
    pub module: Option<String>,
    pub text: String,
}

impl Progress {
    /// One line as a terminal shows it.
    pub fn line(&self) -> String {
        let (label, text) = said_once(self.step, self.module.as_deref(), &self.text);
        match (&self.module, self.step) {
            (Some(module), Step::Output) => format!("  {module} │ {text}"),
            (Some(module), _) => format!("{label:>9} {module}: {text}"),
            (None, _) => format!("{label:>9} {text}"),
        }
    }
}

/// A step's label and text as shown, each word once: the engine's texts open with their step's
/// verb (`tier 0: base`, `building walk/base:…`, `built … → sha256:…`, `created machine …`), which the
/// label already says; a record line without a module says `stamped`/`unchanged` itself, so its
/// label is left empty, and a module's stamp (`record stamped: api a → b`) says its module once.
/// Stored events keep their whole text (followers parse it).
pub fn said_once<'t>(step: Step, module: Option<&str>, text: &'t str) -> (&'static str, &'t str) {
    let echo = match (step, module) {
        (Step::Tier, _) => "tier ",
        (Step::Build, _) => "building ",
        (Step::Built, _) => "built ",
        (Step::Created, _) => "created ",
        (Step::Stamped, None) => return ("", text),
        (Step::Stamped, Some(module)) => {
            let said = text
                .strip_prefix("record stamped: ")
                .and_then(|rest| rest.strip_prefix(module))
                .and_then(|rest| rest.strip_prefix(' '));
            return (step.as_str(), said.unwrap_or(text));
        }
        _ => return (step.as_str(), text),
    };
    (step.as_str(), text.strip_prefix(echo).unwrap_or(text))
}

/// An operation's short id, unique within its mesh (`#142`), with its full uuid and kind
/// (`converge`, `force`, `send`, `rollback`, `gc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationId {
    pub number: i64,
    pub uuid: String,
    pub kind: String,
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.number)
    }
}

/// How an operation is named on screen: `#142` when it has a short id, else its uuid's first
/// eight characters.
pub fn operation_label(number: Option<i64>, uuid: &str) -> String {
    match number {
        Some(n) => format!("#{n}"),
        None => uuid.chars().take(8).collect(),
    }
}

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
    pub operation_kind: Option<String>,
    pub step: Step,
    pub module: Option<String>,
    pub text: String,
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
mod tests {
    use super::*;

    fn line(step: Step, module: Option<&str>, text: &str) -> String {
        Progress {
            step,
            module: module.map(str::to_string),
            text: text.into(),
        }
        .line()
    }

    #[test]
    fn a_line_says_its_step_once() {
        assert_eq!(line(Step::Tier, None, "tier 0: base"), "     tier 0: base");
        assert_eq!(
            line(Step::Build, Some("web"), "building demo/web:1 (build 01a)"),
            "    build web: demo/web:1 (build 01a)"
        );
        assert_eq!(
            line(Step::Built, Some("web"), "built demo/web:1 → sha256:ab"),
            "    built web: demo/web:1 → sha256:ab"
        );
        assert_eq!(
            line(
                Step::Created,
                Some("web"),
                "created machine web-1 on demo/web:1"
            ),
            "  created web: machine web-1 on demo/web:1"
        );
        assert_eq!(
            line(Step::Stamped, None, "record stamped: 5 module(s)"),
            "          record stamped: 5 module(s)"
        );
        assert_eq!(
            line(Step::Stamped, Some("api"), "record stamped: api a@1 → b@2"),
            "  stamped api: a@1 → b@2"
        );
        // An error that happens to open with the step's word keeps it.
        assert_eq!(
            line(Step::Failed, Some("web"), "failed to connect"),
            "   failed web: failed to connect"
        );
        assert_eq!(
            line(Step::Output, Some("web"), "built x"),
            "  web │ built x"
        );
    }

    #[test]
    fn every_step_but_queued_is_a_line() {
        let lines: Vec<Step> = Step::ALL.into_iter().filter(|s| !s.is_line()).collect();
        assert_eq!(lines, vec![Step::Queued]);
    }

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

    #[test]
    fn every_step_reads_back_by_its_name_and_unknown_names_read_as_other() {
        for step in Step::ALL {
            assert_eq!(Step::parse(step.as_str()), step);
        }
        assert_eq!(Step::parse("teleported"), Step::Other);
    }
}
