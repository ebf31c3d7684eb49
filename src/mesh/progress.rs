//! Progress of an operation (converge, send), step by step: what the engine emits, what the state
//! database keeps, and what the dashboard and the command line show.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::decide::Decision;
use super::model::RecordEntry;
use super::operation::OperationKind;

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
    const ALL: [Step; 20] = [
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

/// What a step says as data, beside its text. The text is for people; everything that judges an
/// operation (its live state, the notice and its bell, the stats) folds these and never reads the
/// text, so a sentence can be reworded without the screen lying. Stored as JSON in the events'
/// `payload` column, named by its step (`{"step":"decided","decision":"build",…}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "lowercase")]
pub enum Payload {
    /// The operation began, walking `modules` modules (none named yet: 0).
    Started {
        modules: u32,
    },
    /// A module it will walk, and its tier's place.
    Queued {
        place: TierPlace,
    },
    Warning,
    Refused,
    /// A tier begins: its number in the mesh and its modules.
    Tier {
        tier: u32,
        modules: Vec<String>,
    },
    Decided {
        decision: Decision,
        /// None while its base has no artifact yet (a refusal).
        reference: Option<String>,
        reason: String,
    },
    Build {
        reference: String,
        build: String,
        /// The pool's builder it runs on (none: the local daemon of a mesh without builders).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        builder: Option<String>,
    },
    /// A line of the builder's; its place in the Dockerfile when it says one.
    Output {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        builder_step: Option<(u32, u32)>,
    },
    Built {
        reference: String,
        digest: String,
    },
    Failed {
        error: String,
    },
    Delivered {
        reference: String,
        by: DeliveredBy,
    },
    Stamped {
        stamp: Stamp,
    },
    Created {
        machine: String,
        reference: String,
    },
    /// A machine is being moved from the artifact `from` to `to_reference@to_digest`.
    Send {
        machine: String,
        from: String,
        to_reference: String,
        to_digest: String,
    },
    /// A roll-out followed on a workload.
    Rollout {
        workload: String,
    },
    /// Machines that answered a send: one machine (`machine`, 0 or 1 of 1 moved), or the sum of
    /// an operation's sends (no machine).
    Sent {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        machine: Option<String>,
        moved: u32,
        total: u32,
    },
    /// The operation's last word.
    Finished {
        outcome: Outcome,
        /// The error it ended on, when one error ended it as a whole.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// A builder of the pool as the converge's check found it: its cap, and why it is left out.
    Builder {
        builder: String,
        endpoint: String,
        max_builds: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        out: Option<String>,
    },
    /// A module's build is put back after `from` failed it with a transport fault (`error`): it
    /// goes once to another builder.
    Requeued {
        from: String,
        error: String,
    },
    /// gc's word on one candidate, and steps of kinds no other payload names.
    Other,
}

impl Payload {
    /// The step this payload is the data of.
    pub fn step(&self) -> Step {
        match self {
            Payload::Started { .. } => Step::Started,
            Payload::Queued { .. } => Step::Queued,
            Payload::Warning => Step::Warning,
            Payload::Refused => Step::Refused,
            Payload::Tier { .. } => Step::Tier,
            Payload::Decided { .. } => Step::Decided,
            Payload::Build { .. } => Step::Build,
            Payload::Output { .. } => Step::Output,
            Payload::Built { .. } => Step::Built,
            Payload::Failed { .. } => Step::Failed,
            Payload::Delivered { .. } => Step::Delivered,
            Payload::Stamped { .. } => Step::Stamped,
            Payload::Created { .. } => Step::Created,
            Payload::Send { .. } => Step::Send,
            Payload::Rollout { .. } => Step::Rollout,
            Payload::Sent { .. } => Step::Sent,
            Payload::Finished { .. } => Step::Finished,
            Payload::Builder { .. } => Step::Builder,
            Payload::Requeued { .. } => Step::Requeued,
            Payload::Other => Step::Other,
        }
    }

    /// The builder's line as a step's data: its place in the Dockerfile, read where the builder
    /// said it.
    pub fn output(line: &str) -> Payload {
        Payload::Output {
            builder_step: builder_step(line),
        }
    }

    /// One machine's answer to a send.
    pub fn sent(machine: &str, moved: bool) -> Payload {
        Payload::Sent {
            machine: Some(machine.to_string()),
            moved: u32::from(moved),
            total: 1,
        }
    }
}

/// How an artifact reached the target (or the registry) in a [`Payload::Delivered`] step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum DeliveredBy {
    /// The host daemon is the target: it is there already.
    OnHost,
    /// Published to the mesh's registry (`--publish`), as `digest`.
    Published { registry: String, digest: String },
    /// Pushed to the target's registry, as `digest`.
    Pushed { digest: String },
    /// Pulled from the registry by its manifest digest.
    Pulled { manifest: String, digest: String },
    /// `kind load` into a kind cluster.
    KindLoaded { cluster: String },
    /// A multi-platform artifact the registry holds as `manifest`: nothing to move.
    InRegistry { manifest: String },
    /// The pushed manifest `digest` signed (cosign) beside any other signer's, before the push's own step.
    Signed { digest: String },
}

/// What a [`Payload::Stamped`] step did to the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "what", rename_all = "snake_case")]
pub enum Stamp {
    /// The record names `modules` new artifacts.
    Stamped { modules: u32 },
    /// It already named every artifact.
    Unchanged,
    /// Nothing stamped: these modules did not succeed.
    Nothing { missed: Vec<String> },
    /// One module's entry moved (a rollback, a promote): from what it named, if anything.
    Module {
        from: Option<RecordEntry>,
        to: RecordEntry,
    },
}

/// How an operation ended, as its last step says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// It did all it was asked (a send: every machine moved).
    Succeeded,
    /// Something failed, or it ended on an error.
    Failed,
    /// Asked to stop (Ctrl-C, `q`): running builds were marked cancelled.
    Cancelled,
}

impl Outcome {
    /// Succeeded when `ok`, else failed.
    pub fn of(ok: bool) -> Outcome {
        if ok {
            Outcome::Succeeded
        } else {
            Outcome::Failed
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// An operation's last step: how it ended (the data) and what it says (the text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastWord {
    pub outcome: Outcome,
    pub error: Option<String>,
    pub text: String,
}

impl LastWord {
    /// It ended as `ok` says, on no error of the whole.
    pub fn judged(ok: bool, text: impl Into<String>) -> LastWord {
        LastWord {
            outcome: Outcome::of(ok),
            error: None,
            text: text.into(),
        }
    }

    /// It ended on `error`, as a whole.
    pub fn failed_on(error: impl Into<String>, text: impl Into<String>) -> LastWord {
        LastWord {
            outcome: Outcome::Failed,
            error: Some(error.into()),
            text: text.into(),
        }
    }

    pub fn payload(&self) -> Payload {
        Payload::Finished {
            outcome: self.outcome,
            error: self.error.clone(),
        }
    }
}

/// A tier's place in one operation: the `index`-th (from 1) of the `total` tiers it walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TierPlace {
    pub index: u32,
    pub total: u32,
}

impl TierPlace {
    /// How a [`Step::Queued`] step says it: `tier 2 of 3`.
    pub fn text(self) -> String {
        format!("tier {} of {}", self.index, self.total)
    }
}

/// The builder's place in the Dockerfile: the classic builder's `Step 3/5 : RUN …`, or BuildKit's
/// `#7 [2/4] RUN …` (`[stage 2/4]` in a multi-stage build). The builder's words, read once where
/// the line arrives; the step's payload carries the answer.
pub fn builder_step(line: &str) -> Option<(u32, u32)> {
    let fraction = |text: &str| -> Option<(u32, u32)> {
        let (n, m) = text.split_once('/')?;
        let (n, m) = (n.trim().parse().ok()?, m.trim().parse().ok()?);
        (n >= 1 && n <= m).then_some((n, m))
    };
    if let Some(rest) = line.trim_start().strip_prefix("Step ") {
        return fraction(rest.split(" :").next()?);
    }
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let inside = &line[open + 1..close];
    fraction(inside.rsplit(' ').next()?)
}

/// One step as it happens: its data, and its text for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub step: Step,
    pub module: Option<String>,
    pub text: String,
    pub payload: Payload,
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
        (Step::Builder, _) => "builder ",
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
    pub kind: OperationKind,
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

    fn line(step: Step, module: Option<&str>, text: &str) -> String {
        Progress {
            step,
            module: module.map(str::to_string),
            text: text.into(),
            payload: Payload::Other,
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
        assert_eq!(
            line(
                Step::Builder,
                None,
                "builder one (unix:///d.sock) ready: engine 20.10"
            ),
            "  builder one (unix:///d.sock) ready: engine 20.10"
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
    fn builder_steps_classic_and_buildkit() {
        assert_eq!(builder_step("Step 3/5 : RUN make"), Some((3, 5)));
        assert_eq!(builder_step("#7 [2/4] RUN make"), Some((2, 4)));
        assert_eq!(builder_step("#9 [build 3/6] COPY . ."), Some((3, 6)));
        assert_eq!(builder_step(" ---> Running in 997ef2f20ecc"), None);
        assert_eq!(builder_step("[0/0]"), None);
        assert_eq!(builder_step("Step x/5 : RUN"), None);
    }

    #[test]
    fn every_payload_names_its_step_and_reads_back_as_stored() {
        let payloads = [
            Payload::Started { modules: 2 },
            Payload::Queued {
                place: TierPlace { index: 1, total: 2 },
            },
            Payload::Warning,
            Payload::Refused,
            Payload::Tier {
                tier: 0,
                modules: vec!["base".into()],
            },
            Payload::Decided {
                decision: Decision::Registry,
                reference: Some("demo/api:1".into()),
                reason: "the registry holds it".into(),
            },
            Payload::Build {
                reference: "demo/api:1".into(),
                build: "01a".into(),
                builder: Some("farm-1".into()),
            },
            Payload::output("#7 [2/4] RUN make"),
            Payload::output("plain words"),
            Payload::Built {
                reference: "demo/api:1".into(),
                digest: "sha256:ab".into(),
            },
            Payload::Failed {
                error: "exit 3".into(),
            },
            Payload::Delivered {
                reference: "demo/api:1".into(),
                by: DeliveredBy::KindLoaded {
                    cluster: "kind".into(),
                },
            },
            Payload::Stamped {
                stamp: Stamp::Module {
                    from: None,
                    to: RecordEntry::new("demo/api:1".into(), "sha256:ab".into()),
                },
            },
            Payload::Created {
                machine: "api-1".into(),
                reference: "demo/api:1".into(),
            },
            Payload::Send {
                machine: "api-1".into(),
                from: "sha256:aa".into(),
                to_reference: "demo/api:1".into(),
                to_digest: "sha256:ab".into(),
            },
            Payload::Rollout {
                workload: "deployment/api".into(),
            },
            Payload::sent("api-1", false),
            LastWord::failed_on("lock lost", "send: lock lost").payload(),
            Payload::Builder {
                builder: "farm-1".into(),
                endpoint: "tcp://farm:2376".into(),
                max_builds: 2,
                out: Some("cannot reach it".into()),
            },
            Payload::Requeued {
                from: "farm-1".into(),
                error: "EOF".into(),
            },
            Payload::Other,
        ];
        let mut steps: Vec<Step> = payloads.iter().map(Payload::step).collect();
        steps.dedup();
        // Every step has its payload, in the steps' order.
        assert_eq!(steps, Step::ALL.to_vec());
        for payload in payloads {
            let stored = serde_json::to_string(&payload).unwrap();
            assert!(
                stored.starts_with(&format!("{{\"step\":\"{}\"", payload.step())),
                "{stored}"
            );
            assert_eq!(serde_json::from_str::<Payload>(&stored).unwrap(), payload);
        }
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

    #[test]
    fn every_step_reads_back_by_its_name_and_unknown_names_read_as_other() {
        for step in Step::ALL {
            assert_eq!(Step::parse(step.as_str()), step);
        }
        assert_eq!(Step::parse("teleported"), Step::Other);
    }
}
