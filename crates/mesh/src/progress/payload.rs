//! What a step says as data, beside its text: the payloads every view of an operation folds.

use serde::{Deserialize, Serialize};

use super::builder_output::builder_step;
use super::step::Step;
use crate::decide::Decision;
use crate::model::RecordEntry;

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
    /// A roll-out followed on a machine (stored under the word its first kind gave it).
    Rollout {
        #[serde(rename = "workload")]
        machine: String,
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
    /// Loaded straight into the target's cluster, no registry between (`kind load`): stored under
    /// the word its first kind gave it, which rows already written keep.
    #[serde(rename = "kind_loaded")]
    Loaded { cluster: String },
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

    /// It ended on `error`, as a whole, and its text says so: the error made words here, where an
    /// operation's last word is written.
    pub fn failed(error: &dyn std::fmt::Display) -> LastWord {
        let said = error.to_string();
        LastWord::failed_on(said.clone(), said)
    }

    /// It ended on `error`, as a whole; its text says what was left undone first
    /// (`send: nothing sent: …`).
    pub fn failed_saying(undone: &str, error: &dyn std::fmt::Display) -> LastWord {
        let said = error.to_string();
        let text = format!("{undone}: {said}");
        LastWord::failed_on(said, text)
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
                by: DeliveredBy::Loaded {
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
                machine: "deployment/api".into(),
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
    fn rows_stored_before_the_delivery_words_were_kind_free_read_the_same() {
        // As schema 12 wrote them: the stored words stay whatever the variants are called.
        let loaded = r#"{"step":"delivered","reference":"demo/api:1","by":{"how":"kind_loaded","cluster":"kind"}}"#;
        let rollout = r#"{"step":"rollout","workload":"deployment/api"}"#;
        for stored in [loaded, rollout] {
            let payload: Payload = serde_json::from_str(stored).unwrap();
            assert_eq!(serde_json::to_string(&payload).unwrap(), stored);
        }
    }
}
