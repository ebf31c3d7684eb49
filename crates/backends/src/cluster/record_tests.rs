//! The record, pins and history kept under the API server's limit on an object's annotations.
#![allow(clippy::unwrap_used)]

use super::*;
use crate::mesh::pin::{Stamp, Stamper};

fn stamp(module: &str, n: usize) -> Stamp {
    Stamp {
        module: module.into(),
        from_ref: Some(format!("demo/{module}:{n:04}-old")),
        from_digest: Some(format!("sha256:{}", "a".repeat(64))),
        to_ref: format!("demo/{module}:{n:04}"),
        to_digest: format!("sha256:{}", "b".repeat(64)),
        by: Stamper {
            operation_id: format!("op-{n}"),
            kind: crate::mesh::operation::OperationKind::Converge,
            short: Some(n as i64),
            host: "host".into(),
            pid: 7,
            at_ms: n as i64,
            from_target: None,
        },
    }
}

/// `n` stamps of `module`, newest (highest number) first, as `add_stamps` keeps them.
fn stamps(module: &str, n: usize) -> Vec<Stamp> {
    (0..n).rev().map(|i| stamp(module, i)).collect()
}

fn size(history: &StampsByModule) -> usize {
    serde_json::to_string(history).unwrap().len()
}

#[test]
fn trim_history_drops_the_oldest_stamps_of_the_longest_module_until_it_fits() {
    let mut history = StampsByModule::new();
    history.insert("api".into(), stamps("api", 10));
    history.insert("web".into(), stamps("web", 3));
    let budget = size(&history) - 1;
    trim_history(&mut history, budget);
    assert!(size(&history) <= budget);
    // One stamp went, api's oldest (number 0); web (the shorter) kept all three.
    assert_eq!(history["api"].len(), 9);
    assert_eq!(history["api"].last().unwrap().by.short, Some(1));
    assert_eq!(history["api"][0].by.short, Some(9), "the newest stays");
    assert_eq!(history["web"].len(), 3);
}

#[test]
fn trim_history_leaves_a_history_within_its_budget_alone_and_empties_one_with_none() {
    let mut history = StampsByModule::new();
    history.insert("api".into(), stamps("api", 4));
    let whole = history.clone();
    trim_history(&mut history, size(&whole));
    assert_eq!(history, whole);
    trim_history(&mut history, 2);
    assert!(history.is_empty(), "{history:?}");
}

fn entry(n: usize) -> RecordEntry {
    RecordEntry::new(
        format!("127.0.0.1:5000/demo/m{n}:{}", "0".repeat(24)),
        format!("sha256:{}", "c".repeat(64)),
    )
}

fn read_with(history: StampsByModule, others_bytes: usize) -> RecordRead {
    RecordRead {
        history,
        others_bytes,
        resource_version: Some("1".into()),
        ..RecordRead::default()
    }
}

fn stamper() -> Stamper {
    Stamper {
        operation_id: "op".into(),
        kind: crate::mesh::operation::OperationKind::Converge,
        short: Some(1),
        host: "h".into(),
        pid: 1,
        at_ms: 1,
        from_target: None,
    }
}

/// The bytes the three annotations and the others take after a write.
fn total(after: &TeamAfter, others: usize) -> usize {
    others
        + RECORD_ANNOTATION.len()
        + serde_json::to_string(&after.record).unwrap().len()
        + PINS_ANNOTATION.len()
        + serde_json::to_string(&after.stamped.pins).unwrap().len()
        + HISTORY_ANNOTATION.len()
        + size(&after.stamped.history)
}

#[test]
fn the_history_gets_what_the_limit_leaves_after_the_record_pins_and_other_annotations() {
    // Other tools annotate the namespace with 200 KiB: the history must give way, not the write.
    let others = 200 * 1024;
    let mut history = StampsByModule::new();
    for m in 0..40 {
        history.insert(format!("m{m}"), stamps(&format!("m{m}"), HISTORY_KEPT));
    }
    assert!(size(&history) > ANNOTATIONS_LIMIT_BYTES - others);
    let record: Record = (0..40).map(|n| (format!("m{n}"), entry(n))).collect();
    let by = stamper();
    let write = TeamWrite {
        entries: &record,
        pins: &PinChange::default(),
        by: &by,
    };
    let after = team_after(read_with(history, others), &write, true)
        .unwrap()
        .unwrap();
    assert!(total(&after, others) <= ANNOTATIONS_LIMIT_BYTES);
    assert!(
        !after.stamped.history.is_empty(),
        "the history keeps what fits"
    );
    // Without the others the same write keeps every module's newest stamp.
    let mut history = StampsByModule::new();
    for m in 0..40 {
        history.insert(format!("m{m}"), stamps(&format!("m{m}"), HISTORY_KEPT));
    }
    let roomy = team_after(read_with(history, 0), &write, true)
        .unwrap()
        .unwrap();
    assert!(total(&roomy, 0) <= ANNOTATIONS_LIMIT_BYTES);
    assert!(size(&roomy.stamped.history) > size(&after.stamped.history));
}

#[test]
fn a_record_past_the_annotations_goes_to_shards_whole() {
    // Before shards this write was refused (`Err(bytes)` over the limit): now it splits.
    let record: Record = (0..3000)
        .map(|n| (format!("module-{n}"), entry(n)))
        .collect();
    let by = stamper();
    let write = TeamWrite {
        entries: &record,
        pins: &PinChange::default(),
        by: &by,
    };
    let after = team_after(read_with(StampsByModule::new(), 0), &write, true)
        .unwrap()
        .unwrap();
    assert!(after.sharded);
    let parts = after
        .shards
        .iter()
        .map(|s| serde_json::from_str(&s.text).unwrap())
        .collect();
    let whole = crate::cluster::record_shards::join(parts);
    assert_eq!(whole.images, record);
    // The history goes to shards of its own (`Cluster::history_after`), every stamp kept.
    assert!(whole.history.is_empty());
    assert_eq!(after.stamped.history.len(), 3000, "every stamp kept");
}

#[test]
fn a_record_back_in_the_annotations_asks_for_the_history_its_shards_keep() {
    // The read left the history's shards unread: going back to the plain form with what it read
    // would drop every stamp. None: read the history whole, then again.
    let record: Record = (0..2).map(|n| (format!("m{n}"), entry(n))).collect();
    let by = stamper();
    let write = TeamWrite {
        entries: &record,
        pins: &PinChange::default(),
        by: &by,
    };
    let mut read = read_with(StampsByModule::new(), 0);
    read.history_apart = true;
    assert!(team_after(read, &write, true).unwrap().is_none());
    let read = read_with(StampsByModule::new(), 0);
    assert!(team_after(read, &write, true).unwrap().is_some());
}
