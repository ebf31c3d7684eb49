//! Pinned modules and the record's history (DESIGN.md: "pinned"): pure types and the pin rule.
//!
//! A rollback pins a module: later converges keep the pinned artifact, and say so as the module's
//! decision, until the module's address moves to one that is neither the rolled-back-from nor the
//! rolled-back-to address (a fix arrived), an unpin, or `converge --force`.

use serde::Serialize;

use super::decide::{Decision, Question, RefState, Verdict};
use super::model::RecordEntry;
use super::text::short_id;

/// A module rolled back by hand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pin {
    pub module: String,
    /// What the record named before the rollback.
    pub from_ref: String,
    pub from_digest: String,
    /// What the rollback stamped: the pinned artifact.
    pub to_ref: String,
    pub to_digest: String,
    /// The rollback's operation (full id) and its short id in the mesh (`#142`).
    pub operation_id: String,
    pub short: i64,
    pub host: String,
    pub at_ms: i64,
}

impl Pin {
    /// The pinned artifact, as the record holds it.
    pub fn entry(&self) -> RecordEntry {
        RecordEntry {
            reference: self.to_ref.clone(),
            digest: self.to_digest.clone(),
        }
    }

    /// `pinned: rolled back from demo/api:…@3f9c2a1b7d4e by host-a at 2026-11-30 21:00:00 (#12)`;
    /// `at` is the rollback's time as people read it.
    pub fn reason(&self, at: &str) -> String {
        format!(
            "pinned: rolled back from {}@{} by {} at {at} (#{})",
            self.from_ref,
            short_id(&self.from_digest),
            self.host,
            self.short
        )
    }

    /// Whether `reference` is one of the two addresses the pin holds against.
    pub fn holds_against(&self, reference: &str) -> bool {
        reference == self.from_ref || reference == self.to_ref
    }
}

/// What the pin says about one module's question, before the record and the host are asked:
/// `Some(verdict)` keeps the pinned artifact; `None` lets the skip decision run as it would
/// without a pin (forced, a third address, or a ref not known yet).
pub fn pinned_verdict(question: &Question, pin: Option<&Pin>, at: &str) -> Option<Verdict> {
    let pin = pin?;
    if question.forced {
        return None;
    }
    match &question.reference {
        RefState::Known(reference) if pin.holds_against(reference) => Some(Verdict {
            decision: Decision::Pinned,
            reason: pin.reason(at),
            artifact: Some(pin.to_digest.clone()),
        }),
        _ => None,
    }
}

/// Why a pin ends in this converge (None: it holds, or there is none).
pub fn pin_ends(question: &Question, pin: Option<&Pin>) -> Option<String> {
    let pin = pin?;
    if question.forced {
        return Some(format!("pin of {} ended: forced", pin.module));
    }
    match &question.reference {
        RefState::Known(reference) if !pin.holds_against(reference) => Some(format!(
            "pin of {} ended: its address moved to {reference}, neither the rolled-back-from nor the rolled-back-to one",
            pin.module
        )),
        _ => None,
    }
}

/// One stamp of a module's entry in the record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Stamp {
    pub module: String,
    pub from_ref: Option<String>,
    pub from_digest: Option<String>,
    pub to_ref: String,
    pub to_digest: String,
    /// The operation that stamped (a converge, a rollback): full id, kind and short id.
    pub operation_id: String,
    pub kind: String,
    pub short: Option<i64>,
    pub host: String,
    pub pid: u32,
    pub at_ms: i64,
}

/// Where a rollback goes back to by default, read from the module's stamps (newest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RollbackTarget {
    /// The newest stamp that named the current artifact came from this one.
    To(RecordEntry),
    /// That stamp named nothing before: the module's first artifact.
    NothingBefore,
    /// No stamp named the current artifact (stamped before the record's history was kept, or elsewhere).
    Unknown,
}

/// The one rule for "which artifact does a rollback go back to": the newest stamp that named
/// `current` (ref and digest), its "from".
pub fn rollback_target(stamps: &[Stamp], current: &RecordEntry) -> RollbackTarget {
    let last = stamps
        .iter()
        .find(|s| s.to_digest == current.digest && s.to_ref == current.reference);
    match last {
        Some(stamp) => match (&stamp.from_ref, &stamp.from_digest) {
            (Some(reference), Some(digest)) => RollbackTarget::To(RecordEntry {
                reference: reference.clone(),
                digest: digest.clone(),
            }),
            _ => RollbackTarget::NothingBefore,
        },
        None => RollbackTarget::Unknown,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn pin() -> Pin {
        Pin {
            module: "api".into(),
            from_ref: "demo/api:bad000000000-amd64".into(),
            from_digest: "sha256:bad".into(),
            to_ref: "demo/api:good00000000-amd64".into(),
            to_digest: "sha256:good".into(),
            operation_id: "op".into(),
            short: 7,
            host: "host-a".into(),
            at_ms: 0,
        }
    }

    fn question(reference: &str, forced: bool) -> Question {
        Question {
            module: "api".into(),
            reference: RefState::Known(reference.into()),
            forced,
            multi_platform: false,
            inputs: None,
        }
    }

    #[test]
    fn the_pin_holds_for_both_addresses_and_ends_on_a_third_or_force() {
        let pin = pin();
        for reference in [&pin.from_ref, &pin.to_ref] {
            let verdict = pinned_verdict(&question(reference, false), Some(&pin), "T").unwrap();
            assert_eq!(verdict.decision, Decision::Pinned);
            assert_eq!(verdict.artifact.as_deref(), Some("sha256:good"));
            assert_eq!(
                verdict.reason,
                "pinned: rolled back from demo/api:bad000000000-amd64@bad by host-a at T (#7)"
            );
            assert_eq!(pin_ends(&question(reference, false), Some(&pin)), None);
        }
        let third = question("demo/api:fix000000000-amd64", false);
        assert_eq!(pinned_verdict(&third, Some(&pin), "T"), None);
        assert!(pin_ends(&third, Some(&pin)).unwrap().contains("moved to"));
        let forced = question(&pin.from_ref, true);
        assert_eq!(pinned_verdict(&forced, Some(&pin), "T"), None);
        assert!(pin_ends(&forced, Some(&pin)).unwrap().contains("forced"));
        let pending = Question {
            reference: RefState::Pending {
                base: "base".into(),
            },
            ..question("x", false)
        };
        assert_eq!(pinned_verdict(&pending, Some(&pin), "T"), None);
        assert_eq!(pin_ends(&pending, Some(&pin)), None);
        assert_eq!(pinned_verdict(&third, None, "T"), None);
    }

    fn stamp(from: Option<(&str, &str)>, to: (&str, &str)) -> Stamp {
        Stamp {
            module: "api".into(),
            from_ref: from.map(|f| f.0.into()),
            from_digest: from.map(|f| f.1.into()),
            to_ref: to.0.into(),
            to_digest: to.1.into(),
            operation_id: "op".into(),
            kind: "converge".into(),
            short: Some(1),
            host: "host-a".into(),
            pid: 1,
            at_ms: 0,
        }
    }

    #[test]
    fn a_rollback_goes_back_to_the_from_of_the_newest_stamp_naming_the_current_artifact() {
        let current = RecordEntry {
            reference: "r2".into(),
            digest: "d2".into(),
        };
        let stamps = vec![
            stamp(Some(("r1", "d1")), ("r2", "d2")),
            stamp(Some(("r0", "d0")), ("r2", "d2")),
            stamp(None, ("r1", "d1")),
        ];
        let to = RollbackTarget::To(RecordEntry {
            reference: "r1".into(),
            digest: "d1".into(),
        });
        assert_eq!(rollback_target(&stamps, &current), to);
        assert_eq!(
            rollback_target(&stamps[2..], &current),
            RollbackTarget::Unknown
        );
        let first = RecordEntry {
            reference: "r1".into(),
            digest: "d1".into(),
        };
        assert_eq!(
            rollback_target(&stamps, &first),
            RollbackTarget::NothingBefore
        );
    }
}
