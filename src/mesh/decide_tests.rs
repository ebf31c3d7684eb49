#![allow(clippy::unwrap_used, clippy::expect_used)]
//! One row per rule of "Which record vouches", and per combination that matters.

use std::collections::HashMap;

use super::*;
use crate::mesh::model::{MODULE_LABEL, RecordEntry};

const REF: &str = "demo/api:9a8b7c6d5e4f-amd64";
const OLD: &str = "demo/api:000000000000-amd64";

fn record(entries: &[(&str, &str, &str)]) -> Record {
    entries
        .iter()
        .map(|(module, reference, digest)| {
            (
                (*module).to_string(),
                RecordEntry {
                    reference: (*reference).into(),
                    digest: (*digest).into(),
                },
            )
        })
        .collect()
}

fn image(tag: &str, labelled: bool) -> HostImage {
    let mut labels = HashMap::new();
    if labelled {
        labels.insert(MODULE_LABEL.to_string(), "api".to_string());
    }
    HostImage {
        id: "sha256:hostimage0001".into(),
        tags: vec![tag.into()],
        labels,
    }
}

fn known(forced: bool, multi: bool) -> Question {
    Question {
        module: "api".into(),
        reference: RefState::Known(REF.into()),
        forced,
        multi_platform: multi,
    }
}

struct Row {
    name: &'static str,
    question: Question,
    record: Record,
    host: HostAnswer,
    decision: Decision,
    needs_host: bool,
    reason_has: &'static str,
    artifact: Option<&'static str>,
}

#[test]
fn every_rule_of_which_record_vouches() {
    let rows = vec![
        Row {
            name: "1. force wins over a record that names the ref",
            question: known(true, false),
            record: record(&[("api", REF, "sha256:rec")]),
            host: HostAnswer::Holds(vec![image(REF, true)]),
            decision: Decision::Forced,
            needs_host: false,
            reason_has: "forced",
            artifact: None,
        },
        Row {
            name: "2. record names the exact ref: skip build and delivery, host never needed",
            question: known(false, false),
            record: record(&[("api", REF, "sha256:rec")]),
            host: HostAnswer::NotAsked,
            decision: Decision::Record,
            needs_host: false,
            reason_has: "the docker record names this ref",
            artifact: Some("sha256:rec"),
        },
        Row {
            name: "2. a record hit is never audited against the disk (host failed)",
            question: known(false, false),
            record: record(&[("api", REF, "sha256:rec")]),
            host: HostAnswer::Failed("socket gone".into()),
            decision: Decision::Record,
            needs_host: false,
            reason_has: "names this ref",
            artifact: Some("sha256:rec"),
        },
        Row {
            name: "2→3. record names another ref, host holds a labelled image with the tag",
            question: known(false, false),
            record: record(&[("api", OLD, "sha256:old")]),
            host: HostAnswer::Holds(vec![image(REF, true)]),
            decision: Decision::Host,
            needs_host: true,
            reason_has: "host holds hostimage000",
            artifact: Some("sha256:hostimage0001"),
        },
        Row {
            name: "3. record has no entry, host holds it",
            question: known(false, false),
            record: Record::new(),
            host: HostAnswer::Holds(vec![image(REF, true)]),
            decision: Decision::Host,
            needs_host: true,
            reason_has: "has no entry",
            artifact: Some("sha256:hostimage0001"),
        },
        Row {
            name: "3. an unlabelled image wearing the right name never answers",
            question: known(false, false),
            record: Record::new(),
            host: HostAnswer::Holds(vec![image(REF, false)]),
            decision: Decision::Build,
            needs_host: true,
            reason_has: "no meshtop-labelled image",
            artifact: None,
        },
        Row {
            name: "3. a labelled image under another tag does not answer",
            question: known(false, false),
            record: Record::new(),
            host: HostAnswer::Holds(vec![image(OLD, true)]),
            decision: Decision::Build,
            needs_host: true,
            reason_has: "no meshtop-labelled image",
            artifact: None,
        },
        Row {
            name: "3. a multi-platform ref: the host cannot answer, even when it holds the tag",
            question: known(false, true),
            record: Record::new(),
            host: HostAnswer::Holds(vec![image(REF, true)]),
            decision: Decision::Build,
            needs_host: false,
            reason_has: "multi-platform",
            artifact: None,
        },
        Row {
            name: "3. a multi-platform ref the record names is still a record skip",
            question: known(false, true),
            record: record(&[("api", REF, "sha256:rec")]),
            host: HostAnswer::NotAsked,
            decision: Decision::Record,
            needs_host: false,
            reason_has: "names this ref",
            artifact: Some("sha256:rec"),
        },
        Row {
            name: "3. a failed listing reads as holds nothing, error kept",
            question: known(false, false),
            record: Record::new(),
            host: HostAnswer::Failed("connection refused".into()),
            decision: Decision::Build,
            needs_host: true,
            reason_has: "could not answer (connection refused)",
            artifact: None,
        },
        Row {
            name: "4. nothing vouches: build",
            question: known(false, false),
            record: record(&[("api", OLD, "sha256:old")]),
            host: HostAnswer::Holds(vec![]),
            decision: Decision::Build,
            needs_host: true,
            reason_has: "names demo/api:000000000000-amd64",
            artifact: None,
        },
        Row {
            name: "5. base without artifact: refused, naming the base, even when forced",
            question: Question {
                module: "api".into(),
                reference: RefState::BaseMissing {
                    base: "base".into(),
                },
                forced: true,
                multi_platform: false,
            },
            record: Record::new(),
            host: HostAnswer::Holds(vec![image(REF, true)]),
            decision: Decision::Refused,
            needs_host: false,
            reason_has: "base base has no artifact",
            artifact: None,
        },
        Row {
            name: "pending: base built first in this converge, ref not known yet",
            question: Question {
                module: "api".into(),
                reference: RefState::Pending {
                    base: "base".into(),
                },
                forced: false,
                multi_platform: false,
            },
            record: record(&[("api", REF, "sha256:rec")]),
            host: HostAnswer::NotAsked,
            decision: Decision::Build,
            needs_host: false,
            reason_has: "pending: base base",
            artifact: None,
        },
        Row {
            name: "pending and forced",
            question: Question {
                module: "api".into(),
                reference: RefState::Pending {
                    base: "base".into(),
                },
                forced: true,
                multi_platform: false,
            },
            record: Record::new(),
            host: HostAnswer::NotAsked,
            decision: Decision::Forced,
            needs_host: false,
            reason_has: "pending on the build of base base",
            artifact: None,
        },
    ];
    for row in rows {
        let verdict = decide(&row.question, &row.record, &row.host, "the docker record");
        assert_eq!(
            verdict.decision, row.decision,
            "{}: {}",
            row.name, verdict.reason
        );
        assert!(
            verdict.reason.contains(row.reason_has),
            "{}: reason {:?} lacks {:?}",
            row.name,
            verdict.reason,
            row.reason_has
        );
        assert_eq!(verdict.artifact.as_deref(), row.artifact, "{}", row.name);
        assert_eq!(
            needs_host(&row.question, &row.record),
            row.needs_host,
            "{}",
            row.name
        );
    }
}

#[test]
fn decisions_say_what_a_converge_does() {
    assert!(Decision::Build.builds() && Decision::Forced.builds());
    assert!(!Decision::Record.builds() && !Decision::Host.builds() && !Decision::Refused.builds());
    assert!(
        Decision::Host.delivers() && !Decision::Record.delivers() && !Decision::Refused.delivers()
    );
    assert_eq!(short_id("sha256:3f9c2a1b7d4e99aa"), "3f9c2a1b7d4e");
    assert_eq!(short_id("abc"), "abc");
    // A digest from a cluster annotation is not checked to be hex: cut by characters, never panic.
    assert_eq!(short_id("sha256:éééééééééééééé"), "éééééééééééé");
}
