//! What happened in an operation, one word a step: stored by its name, read back by it.

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
    /// A builder of the pool as the converge's check found it (ready, or left out and why).
    Builder,
    /// A build put back after its builder failed it (a transport fault), to go to another builder.
    Requeued,
    Other,
}

impl Step {
    pub(super) const ALL: [Step; 20] = [
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
        Step::Builder,
        Step::Requeued,
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
            Step::Builder => "builder",
            Step::Requeued => "requeued",
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
#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_step_but_queued_is_a_line() {
        let lines: Vec<Step> = Step::ALL.into_iter().filter(|s| !s.is_line()).collect();
        assert_eq!(lines, vec![Step::Queued]);
    }

    #[test]
    fn every_step_reads_back_by_its_name_and_unknown_names_read_as_other() {
        for step in Step::ALL {
            assert_eq!(Step::parse(step.as_str()), step);
        }
        assert_eq!(Step::parse("teleported"), Step::Other);
    }
}
