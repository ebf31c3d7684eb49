//! Pinned modules and the record's history (DESIGN.md: "pinned"): pure types and the pin rule.
//!
//! A rollback pins a module: later converges keep the pinned artifact, and say so as the module's
//! decision, until the module's *own* inputs (its files, Dockerfile, args, platforms: not its base's
//! artifact) differ from both the rolled-back-from and the rolled-back-to ones (a fix arrived), an
//! unpin, or `converge --force`. A base that moved keeps the pin (the plan says "pinned; base
//! moved"). Where the own inputs of either side are not known (built on a machine whose state file
//! kept no manifest of it), the module's address stands in for them, as before.

use serde::{Deserialize, Serialize};

use super::decide::{Decision, Question, RefState, Verdict};
use super::model::{Record, RecordEntry};
use super::operation::OperationKind;
use super::text::short_id;

/// A module rolled back by hand. Lives with the record (on Kubernetes: the namespace's annotation
/// `jr2.dev/pins`, written in the rollback's stamp), so that every teammate's converge keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The own-inputs digest ([`crate::manifest::own_digest`]) of the rolled-back-from and
    /// rolled-back-to artifacts, where the rolling-back machine knew them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_inputs: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_inputs: Option<String>,
}

/// What a stamp writes besides the record's entries, in the same guarded write: pins set (a
/// rollback) and pins ended (a converge past them, an unpin).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinChange {
    pub set: Vec<Pin>,
    pub end: Vec<String>,
}

impl PinChange {
    pub fn is_empty(&self) -> bool {
        self.set.is_empty() && self.end.is_empty()
    }

    /// `pins` as the change leaves them.
    pub fn apply(&self, pins: &mut std::collections::BTreeMap<String, Pin>) {
        for module in &self.end {
            pins.remove(module);
        }
        for pin in &self.set {
            pins.insert(pin.module.clone(), pin.clone());
        }
    }
}

/// What a module's address is now, as the pin rule reads it: the address, and the digest of the
/// module's own inputs when they are known.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now<'a> {
    pub reference: &'a str,
    pub own_inputs: Option<&'a str>,
}

/// Why a pin holds for this converge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holds {
    /// The address is the rolled-back-from or the rolled-back-to one.
    SameAddress,
    /// The address moved, but only because the base's artifact did: the own inputs are one side's.
    BaseMoved,
}

impl Pin {
    /// The pinned artifact, as the record holds it.
    pub fn entry(&self) -> RecordEntry {
        RecordEntry::new(self.to_ref.clone(), self.to_digest.clone())
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

    /// Whether the pin holds against the module's address now, and why (None: a fix arrived).
    pub(crate) fn holds_against(&self, now: Now<'_>) -> Option<Holds> {
        if now.reference == self.from_ref || now.reference == self.to_ref {
            return Some(Holds::SameAddress);
        }
        let own = now.own_inputs?;
        let side = |known: &Option<String>| known.as_deref() == Some(own);
        (side(&self.from_inputs) || side(&self.to_inputs)).then_some(Holds::BaseMoved)
    }
}

/// What ends a pin, as every rollback says it: the pin rule of `Pin::holds_against`.
pub fn ends_when(module: &str) -> String {
    format!(
        "until its own inputs (files, Dockerfile, args, platforms; not its base) differ from both sides' (a fix), `meshtop unpin {module}` or `converge --force {module}`"
    )
}

/// What the pin says about one module's question, before the record and the host are asked:
/// `Some(verdict)` keeps the pinned artifact; `None` lets the skip decision run as it would
/// without a pin (forced, a third address, or a ref not known yet).
/// `own_inputs` is the digest of the module's own inputs now (None: not known).
pub fn pinned_verdict(
    question: &Question,
    pin: Option<&Pin>,
    own_inputs: Option<&str>,
    at: &str,
) -> Option<Verdict> {
    let pin = pin?;
    if question.forced {
        return None;
    }
    let RefState::Known(reference) = &question.reference else {
        return None;
    };
    let now = Now {
        reference,
        own_inputs,
    };
    let reason = match pin.holds_against(now)? {
        Holds::SameAddress => pin.reason(at),
        Holds::BaseMoved => format!(
            "{}; base moved (its own inputs are those it was rolled back between)",
            pin.reason(at)
        ),
    };
    Some(Verdict {
        decision: Decision::Pinned,
        reason,
        artifact: Some(pin.to_digest.clone()),
        registry: None,
    })
}

/// Why a pin ends in this converge (None: it holds, or there is none).
pub fn pin_ends(
    question: &Question,
    pin: Option<&Pin>,
    own_inputs: Option<&str>,
) -> Option<String> {
    let pin = pin?;
    if question.forced {
        return Some(format!("pin of {} ended: forced", pin.module));
    }
    let RefState::Known(reference) = &question.reference else {
        return None;
    };
    let now = Now {
        reference,
        own_inputs,
    };
    match pin.holds_against(now) {
        Some(_) => None,
        None => Some(format!(
            "pin of {} ended: its own inputs moved (address {reference}), neither the rolled-back-from nor the rolled-back-to ones",
            pin.module
        )),
    }
}

/// One stamp of a module's entry in the record: what moved, and who moved it (said flat in
/// JSON, as it always was).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub module: String,
    pub from_ref: Option<String>,
    pub from_digest: Option<String>,
    pub to_ref: String,
    pub to_digest: String,
    #[serde(flatten)]
    pub by: Stamper,
}

/// Who stamps, for the record's history: the operation (full id, kind, short id), host and process, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamper {
    /// The operation that stamped (a converge, a rollback): full id, kind and short id.
    pub operation_id: String,
    pub kind: OperationKind,
    pub short: Option<i64>,
    pub host: String,
    pub pid: u32,
    pub at_ms: i64,
    /// A promote's: the target whose record named the artifact (`staging`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_target: Option<String>,
}

/// How an operation stamps a record: its id, its kind (`converge`, `rollback`, `unpin`,
/// `promote`) and, for a promote, the target the artifacts come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StampBy<'a> {
    pub operation_id: &'a str,
    pub kind: OperationKind,
    pub from_target: Option<&'a str>,
}

impl<'a> StampBy<'a> {
    /// An operation of `kind` that stamps what it made or chose (not a promote).
    pub fn new(operation_id: &'a str, kind: OperationKind) -> StampBy<'a> {
        StampBy {
            operation_id,
            kind,
            from_target: None,
        }
    }
}

/// The stamps of writing `entries` over `before`: one per entry that changes, in module order.
pub fn stamps_between(before: &Record, entries: &Record, by: &Stamper) -> Vec<Stamp> {
    entries
        .iter()
        .filter(|(module, entry)| before.get(*module) != Some(*entry))
        .map(|(module, entry)| {
            let was = before.get(module);
            Stamp {
                module: module.clone(),
                from_ref: was.map(|e| e.reference.clone()),
                from_digest: was.map(|e| e.digest.clone()),
                to_ref: entry.reference.clone(),
                to_digest: entry.digest.clone(),
                by: by.clone(),
            }
        })
        .collect()
}

/// The record's history kept with the record: module → stamps, newest first.
pub type StampsByModule = std::collections::BTreeMap<String, Vec<Stamp>>;

/// What lives with the record where the target keeps it (Kubernetes): its pins and history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeptWithRecord {
    pub pins: std::collections::BTreeMap<String, Pin>,
    pub history: StampsByModule,
}

/// A module's stamps from the target's history and a state file's, once each, newest first.
pub fn merged_stamps(kept: &[Stamp], local: &[Stamp], limit: usize) -> Vec<Stamp> {
    let mut all: Vec<Stamp> = local.to_vec();
    for stamp in kept {
        let known = all
            .iter_mut()
            .find(|s| s.by.operation_id == stamp.by.operation_id && s.to_digest == stamp.to_digest);
        match known {
            // This file's copy knows its own short id; the target's knows the rest as well.
            Some(local) => local.by.short = local.by.short.or(stamp.by.short),
            None => all.push(stamp.clone()),
        }
    }
    all.sort_by_key(|s| std::cmp::Reverse(s.by.at_ms));
    all.truncate(limit);
    all
}

/// Add `stamps` (newer than every kept one) and keep the newest `per_module` of each module.
pub fn add_stamps(history: &mut StampsByModule, stamps: &[Stamp], per_module: usize) {
    for stamp in stamps {
        history
            .entry(stamp.module.clone())
            .or_default()
            .insert(0, stamp.clone());
    }
    for kept in history.values_mut() {
        kept.truncate(per_module);
    }
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
            (Some(reference), Some(digest)) => {
                RollbackTarget::To(RecordEntry::new(reference.clone(), digest.clone()))
            }
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
            from_inputs: Some("own-bad".into()),
            to_inputs: Some("own-good".into()),
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
            let verdict =
                pinned_verdict(&question(reference, false), Some(&pin), None, "T").unwrap();
            assert_eq!(verdict.decision, Decision::Pinned);
            assert_eq!(verdict.artifact.as_deref(), Some("sha256:good"));
            assert_eq!(
                verdict.reason,
                "pinned: rolled back from demo/api:bad000000000-amd64@bad by host-a at T (#7)"
            );
            assert_eq!(
                pin_ends(&question(reference, false), Some(&pin), None),
                None
            );
        }
        let third = question("demo/api:fix000000000-amd64", false);
        assert_eq!(pinned_verdict(&third, Some(&pin), None, "T"), None);
        assert!(
            pin_ends(&third, Some(&pin), None)
                .unwrap()
                .contains("moved")
        );
        // A third address whose own inputs are another's: a fix arrived.
        assert_eq!(
            pinned_verdict(&third, Some(&pin), Some("own-fix"), "T"),
            None
        );
        assert!(pin_ends(&third, Some(&pin), Some("own-fix")).is_some());
        let forced = question(&pin.from_ref, true);
        assert_eq!(
            pinned_verdict(&forced, Some(&pin), Some("own-bad"), "T"),
            None
        );
        assert!(
            pin_ends(&forced, Some(&pin), None)
                .unwrap()
                .contains("forced")
        );
        let pending = Question {
            reference: RefState::Pending {
                base: "base".into(),
            },
            ..question("x", false)
        };
        assert_eq!(pinned_verdict(&pending, Some(&pin), None, "T"), None);
        assert_eq!(pin_ends(&pending, Some(&pin), None), None);
        assert_eq!(pinned_verdict(&third, None, Some("own-bad"), "T"), None);
    }

    #[test]
    fn a_base_that_moved_keeps_the_pin_while_the_own_inputs_are_either_side() {
        let pin = pin();
        // The base moved: a third address, but the module's own inputs are the bad ones again.
        let moved_base = question("demo/api:0therbase000-amd64", false);
        for own in ["own-bad", "own-good"] {
            let verdict = pinned_verdict(&moved_base, Some(&pin), Some(own), "T").unwrap();
            assert_eq!(verdict.decision, Decision::Pinned);
            assert_eq!(verdict.artifact.as_deref(), Some("sha256:good"));
            assert!(verdict.reason.contains("base moved"), "{}", verdict.reason);
            assert_eq!(pin_ends(&moved_base, Some(&pin), Some(own)), None);
        }
        // Own inputs not known on the rolling-back machine: the address decides, as before.
        let unknown = Pin {
            from_inputs: None,
            to_inputs: None,
            ..pin
        };
        assert_eq!(
            pinned_verdict(&moved_base, Some(&unknown), Some("own-bad"), "T"),
            None
        );
    }

    #[test]
    fn stamps_name_only_changed_entries_and_the_history_keeps_the_newest() {
        let entry = |r: &str, d: &str| RecordEntry::new(r.into(), d.into());
        let before = Record::from([
            ("api".to_string(), entry("r1", "d1")),
            ("web".to_string(), entry("w1", "e1")),
        ]);
        let entries = Record::from([
            ("api".to_string(), entry("r2", "d2")),
            ("web".to_string(), entry("w1", "e1")),
            ("db".to_string(), entry("b1", "f1")),
        ]);
        let by = Stamper {
            operation_id: "op".into(),
            kind: OperationKind::Converge,
            short: Some(3),
            host: "h".into(),
            pid: 9,
            at_ms: 5,
            from_target: None,
        };
        let stamps = stamps_between(&before, &entries, &by);
        let named: Vec<_> = stamps
            .iter()
            .map(|s| (s.module.as_str(), s.from_ref.as_deref(), s.to_ref.as_str()))
            .collect();
        assert_eq!(named, [("api", Some("r1"), "r2"), ("db", None, "b1")]);
        let mut history = StampsByModule::new();
        for _ in 0..3 {
            add_stamps(&mut history, &stamps, 2);
        }
        assert_eq!(history["api"].len(), 2);
        let older = Stamp {
            by: Stamper {
                operation_id: "old".into(),
                at_ms: 1,
                ..stamps[0].by.clone()
            },
            ..stamps[0].clone()
        };
        let merged = merged_stamps(&stamps[..1], std::slice::from_ref(&older), 10);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].by.operation_id, "op");
        assert_eq!(
            merged_stamps(
                std::slice::from_ref(&older),
                std::slice::from_ref(&older),
                10
            )
            .len(),
            1
        );
    }

    fn stamp(from: Option<(&str, &str)>, to: (&str, &str)) -> Stamp {
        Stamp {
            module: "api".into(),
            from_ref: from.map(|f| f.0.into()),
            from_digest: from.map(|f| f.1.into()),
            to_ref: to.0.into(),
            to_digest: to.1.into(),
            by: Stamper {
                operation_id: "op".into(),
                kind: OperationKind::Converge,
                short: Some(1),
                host: "host-a".into(),
                pid: 1,
                at_ms: 0,
                from_target: None,
            },
        }
    }

    #[test]
    fn a_stamp_says_who_stamped_flat_as_it_always_did() {
        // The record's history annotation and `history --json` hold these words, one level deep.
        let mut stamp = stamp(None, ("demo/api:1", "sha256:a"));
        stamp.by.from_target = Some("staging".into());
        let json = serde_json::to_value(&stamp).unwrap();
        let mut keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "at_ms",
                "from_digest",
                "from_ref",
                "from_target",
                "host",
                "kind",
                "module",
                "operation_id",
                "pid",
                "short",
                "to_digest",
                "to_ref"
            ]
        );
        assert_eq!(json["kind"], "converge");
        assert_eq!(serde_json::from_value::<Stamp>(json).unwrap(), stamp);
        stamp.by.from_target = None;
        let json = serde_json::to_value(&stamp).unwrap();
        assert!(json.get("from_target").is_none(), "{json}");
        assert_eq!(serde_json::from_value::<Stamp>(json).unwrap(), stamp);
    }

    #[test]
    fn a_rollback_goes_back_to_the_from_of_the_newest_stamp_naming_the_current_artifact() {
        let current = RecordEntry::new("r2".into(), "d2".into());
        let stamps = vec![
            stamp(Some(("r1", "d1")), ("r2", "d2")),
            stamp(Some(("r0", "d0")), ("r2", "d2")),
            stamp(None, ("r1", "d1")),
        ];
        let to = RollbackTarget::To(RecordEntry::new("r1".into(), "d1".into()));
        assert_eq!(rollback_target(&stamps, &current), to);
        assert_eq!(
            rollback_target(&stamps[2..], &current),
            RollbackTarget::Unknown
        );
        let first = RecordEntry::new("r1".into(), "d1".into());
        assert_eq!(
            rollback_target(&stamps, &first),
            RollbackTarget::NothingBefore
        );
    }
}
