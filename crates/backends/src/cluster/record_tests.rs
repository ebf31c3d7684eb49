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

/// A stamp as a converge writes it: a registry host's refs, an operation's uuid.
fn real_stamp(module: &str, n: usize) -> Stamp {
    let reference = |tag: &str| format!("registry.example.com:5000/team/{module}:{tag}-amd64");
    Stamp {
        module: module.into(),
        from_ref: Some(reference(&format!("{:012x}", n + 1_000))),
        from_digest: Some(format!("sha256:{:064x}", n + 1_000)),
        to_ref: reference(&format!("{n:012x}")),
        to_digest: format!("sha256:{n:064x}"),
        by: Stamper {
            operation_id: format!("0193a4f2-7c1e-7d3a-9b2f-{n:012x}"),
            kind: crate::mesh::operation::OperationKind::Converge,
            short: Some(n as i64),
            host: "ci-runner-07".into(),
            pid: 41_234,
            at_ms: 1_764_000_000_000 + n as i64,
            from_target: None,
        },
    }
}

#[test]
fn the_room_left_counts_the_index_history_list_too() {
    // 2,000 modules with ten stamps each, in shards, read as what decides reads them: the entries
    // and the index, the history's shards left unread. Before, the estimate saw no history (the
    // read left it apart), took a stamp as the least one can be, and counted every ref as a record
    // shard's, none naming its first module: it promised more modules than the index can name
    // (50,736 against about 45,000).
    let n = 2_000;
    let record: Record = (0..n)
        .map(|i| {
            let module = format!("module-{i:05}");
            let entry = RecordEntry::new(
                format!("registry.example.com:5000/team/{module}:{i:012x}-amd64"),
                format!("sha256:{i:064x}"),
            );
            (module, entry)
        })
        .collect();
    let history: StampsByModule = record
        .keys()
        .map(|module| {
            let stamps = (0..HISTORY_KEPT)
                .rev()
                .map(|s| real_stamp(module, s))
                .collect();
            (module.clone(), stamps)
        })
        .collect();
    let shards = split(&record, &BTreeMap::new(), &StampsByModule::new()).unwrap();
    let kept = crate::cluster::record_shards::split_history(&history).unwrap();
    let index = RecordIndex {
        format: INDEX_FORMAT,
        shards: shards.iter().map(|s| s.shard.clone()).collect(),
        history: kept.iter().map(|s| s.shard.clone()).collect(),
    };
    let text = serde_json::to_string(&index).unwrap();
    let ours = INDEX_ANNOTATION.len() + text.len();
    let read = RecordRead {
        record,
        resource_version: Some("1".into()),
        history_apart: true,
        ours_bytes: ours,
        form: RecordForm::Shards {
            shards: index.len(),
            bytes: 0,
        },
        index,
        ..RecordRead::default()
    };
    // What the index truly has room for: it grows by what it holds per module now.
    let per_module = text.len() as f64 / n as f64;
    let truth = (ANNOTATIONS_LIMIT_BYTES - ours) as f64 / per_module;
    let estimate = modules_left(&read) as f64;
    assert!(
        estimate <= truth * 1.05 && estimate >= truth * 0.7,
        "the estimate says {estimate} more modules; the index has room for about {truth:.0} \
         ({per_module:.1} bytes a module: {} record refs, {} history refs)",
        read.index.shards.len(),
        read.index.history.len()
    );
}

#[test]
fn no_room_for_one_more_shard_is_no_room() {
    // 100 bytes of the namespace's annotations left: the index cannot take a shard (and the plain
    // record of three modules does not fit): nothing more, in any form.
    let record: Record = (0..3).map(|n| (format!("m{n}"), entry(n))).collect();
    let read = RecordRead {
        record,
        others_bytes: ANNOTATIONS_LIMIT_BYTES - 100,
        ..RecordRead::default()
    };
    assert_eq!(modules_left(&read), 0);
}
