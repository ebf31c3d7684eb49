#![allow(clippy::unwrap_used, clippy::expect_used)]
//! One row per rule of "Which record vouches", and per combination that matters.

use std::collections::HashMap;

use super::*;
use crate::model::{MODULE_LABEL, RecordEntry};

const REF: &str = "demo/api:9a8b7c6d5e4f-amd64";
/// The full input digest `REF`'s 12 hex characters abbreviate.
const INPUTS: &str = "9a8b7c6d5e4f00112233445566778899aabbccddeeff00112233445566778899";
const OLD: &str = "demo/api:000000000000-amd64";

fn record(entries: &[(&str, &str, &str)]) -> Record {
    entries
        .iter()
        .map(|(module, reference, digest)| {
            (
                (*module).to_string(),
                RecordEntry::new((*reference).into(), (*digest).into()),
            )
        })
        .collect()
}

fn image(tag: &str, labelled: bool) -> HostImage {
    let mut labels = HashMap::new();
    if labelled {
        labels.insert(MODULE_LABEL.to_string(), "api".to_string());
        labels.insert(INPUTS_LABEL.to_string(), INPUTS.to_string());
    }
    HostImage {
        id: "sha256:hostimage0001".into(),
        tags: vec![tag.into()],
        labels,
        vouched_as: None,
    }
}

fn known(forced: bool, multi: bool) -> Question {
    Question {
        module: "api".into(),
        reference: RefState::Known(REF.into()),
        forced,
        multi_platform: multi,
        inputs: Some(INPUTS.into()),
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
            reason_has: "the target's record names this ref",
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
                inputs: None,
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
                inputs: None,
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
                inputs: None,
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
        let verdict = decide(&row.question, &row.record, &row.host, "the target's record");
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

fn registry_image(labels: &[(&str, &str)]) -> RegistryAnswer {
    signed_registry_image(labels, SignatureVerdict::Unverified)
}

fn signed_registry_image(labels: &[(&str, &str)], signature: SignatureVerdict) -> RegistryAnswer {
    RegistryAnswer::Holds {
        signature,
        registry: "reg.example:5000".into(),
        image: RegistryImage {
            manifest: "sha256:manifest0001".into(),
            artifact: "sha256:config0001".into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect(),
        },
    }
}

/// Rule 4: force → record → host → registry → build; the registry answers only with both labels.
#[test]
fn the_registry_is_the_third_voucher() {
    let nothing = Record::new();
    let empty_host = HostAnswer::Holds(vec![]);
    let both = registry_image(&[(MODULE_LABEL, "api"), (INPUTS_LABEL, INPUTS)]);
    let verdict =
        |question: &Question, record: &Record, host: &HostAnswer, reg: &RegistryAnswer| {
            decide_with_registry(question, record, host, reg, "the target's record")
        };

    // Both labels, the host holds nothing: the registry answers, its artifact the config digest,
    // its reason naming the registry and the manifest digest.
    let v = verdict(&known(false, false), &nothing, &empty_host, &both);
    assert_eq!(v.decision, Decision::Registry, "{}", v.reason);
    assert_eq!(v.artifact.as_deref(), Some("sha256:config0001"));
    assert!(
        v.reason
            .contains("registry reg.example:5000 holds manifest sha256:manifest0001")
    );
    assert!(!Decision::Registry.builds() && Decision::Registry.delivers());
    assert_eq!(Decision::parse("registry"), Some(Decision::Registry));

    // It comes after force, the record and the host; it is asked only when they leave a build.
    let forced = verdict(&known(true, false), &nothing, &empty_host, &both);
    assert_eq!(forced.decision, Decision::Forced);
    let recorded = record(&[("api", REF, "sha256:rec")]);
    assert_eq!(
        verdict(
            &known(false, false),
            &recorded,
            &HostAnswer::NotAsked,
            &both
        )
        .decision,
        Decision::Record
    );
    let host = HostAnswer::Holds(vec![image(REF, true)]);
    assert_eq!(
        verdict(&known(false, false), &nothing, &host, &both).decision,
        Decision::Host
    );
    assert!(!needs_registry(&known(true, false), &nothing, &empty_host));
    assert!(!needs_registry(
        &known(false, false),
        &recorded,
        &HostAnswer::NotAsked
    ));
    assert!(!needs_registry(&known(false, false), &nothing, &host));
    assert!(needs_registry(&known(false, false), &nothing, &empty_host));
    // A failed host listing, or a multi-platform ref the host never holds: the registry is asked.
    let failed_host = HostAnswer::Failed("down".into());
    assert!(needs_registry(&known(false, false), &nothing, &failed_host));
    assert!(needs_registry(&known(false, true), &nothing, &empty_host));
    let multi = verdict(&known(false, true), &nothing, &empty_host, &both);
    assert_eq!(multi.decision, Decision::Registry, "{}", multi.reason);

    // Never for a pending ref.
    let pending = Question {
        reference: RefState::Pending {
            base: "base".into(),
        },
        ..known(false, false)
    };
    assert!(!needs_registry(&pending, &nothing, &empty_host));
    assert_eq!(
        verdict(&pending, &nothing, &empty_host, &both).decision,
        Decision::Build
    );

    // An image wearing the tag without both labels, or with other inputs, or for another module,
    // never answers; the reason says why.
    for (labels, says) in [
        (vec![], "without meshtop's labels"),
        (
            vec![(MODULE_LABEL, "api")],
            "without the label jr2.dev/inputs",
        ),
        (
            vec![(MODULE_LABEL, "api"), (INPUTS_LABEL, "9a8b7c6d5e4fffff")],
            "built from other inputs",
        ),
        (
            vec![(MODULE_LABEL, "web"), (INPUTS_LABEL, INPUTS)],
            "labelled for module web",
        ),
        (vec![(INPUTS_LABEL, INPUTS)], "without meshtop's labels"),
    ] {
        let v = verdict(
            &known(false, false),
            &nothing,
            &empty_host,
            &registry_image(&labels),
        );
        assert_eq!(v.decision, Decision::Build, "{labels:?}");
        assert!(v.reason.contains(says), "{labels:?}: {}", v.reason);
        assert!(v.reason.contains("it does not answer"), "{}", v.reason);
        assert_eq!(v.artifact, None);
    }

    // Absent and failed read as holding nothing, the failure named.
    let absent = RegistryAnswer::Absent {
        registry: "reg.example:5000".into(),
    };
    let v = verdict(&known(false, false), &nothing, &empty_host, &absent);
    assert_eq!(v.decision, Decision::Build);
    assert!(v.reason.contains("holds no manifest under this ref"));
    let down = RegistryAnswer::Failed {
        registry: "reg.example:5000".into(),
        error: "connection refused".into(),
    };
    let v = verdict(&known(false, false), &nothing, &empty_host, &down);
    assert_eq!(v.decision, Decision::Build);
    assert!(
        v.reason
            .contains("registry reg.example:5000 could not answer (connection refused)"),
        "{}",
        v.reason
    );
}

/// With trust set, a labelled manifest vouches only with a trusted signature of its digest; each
/// refusal builds and says what the registry held and why it was refused.
#[test]
fn the_registry_vouches_only_for_what_a_trusted_key_signed() {
    let nothing = Record::new();
    let empty_host = HostAnswer::Holds(vec![]);
    let labels = [(MODULE_LABEL, "api"), (INPUTS_LABEL, INPUTS)];
    let decide = |signature| {
        decide_with_registry(
            &known(false, false),
            &nothing,
            &empty_host,
            &signed_registry_image(&labels, signature),
            "the target's record",
        )
    };
    let trusted = decide(SignatureVerdict::Trusted {
        key: "keys/ci.pub".into(),
    });
    assert_eq!(trusted.decision, Decision::Registry);
    assert!(
        trusted.reason.contains("signed by keys/ci.pub"),
        "{}",
        trusted.reason
    );
    let unverified = decide(SignatureVerdict::Unverified);
    assert_eq!(unverified.decision, Decision::Registry);
    assert!(
        unverified.reason.contains("unverified"),
        "{}",
        unverified.reason
    );
    for (signature, words) in [
        (SignatureVerdict::Unsigned, "✗ unsigned"),
        (SignatureVerdict::UntrustedKey, "✗ untrusted key"),
        (
            SignatureVerdict::OtherDigest {
                names: "sha256:genuine00001".into(),
            },
            "✗ signature names another digest",
        ),
    ] {
        let v = decide(signature);
        assert_eq!(v.decision, Decision::Build, "{}", v.reason);
        assert_eq!(v.artifact, None);
        assert!(
            v.reason.contains("holds manifest manifest0001") && v.reason.contains(words),
            "{}",
            v.reason
        );
    }
}

#[test]
fn with_trust_the_host_answers_only_for_what_this_machine_built_or_verified() {
    let question = known(false, false);
    let holds = |vouched_as: Option<&[&str]>| {
        let mut found = image(REF, true);
        found.vouched_as = vouched_as.map(|refs| refs.iter().map(|r| r.to_string()).collect());
        HostAnswer::Holds(vec![found])
    };
    let empty = Record::new();
    // Without trust (unchecked) and when vouched for as this very ref, the labelled image answers.
    for vouched_as in [None, Some(&[REF][..])] {
        let verdict = decide(&question, &empty, &holds(vouched_as), "the record");
        assert_eq!(
            verdict.decision,
            Decision::Host,
            "{vouched_as:?}: {verdict:?}"
        );
    }
    // Anyone who can reach the daemon could have labelled it, and a build of this machine under
    // another ref vouches for it as that ref only: it builds, and says why.
    for vouched_as in [&[][..], &[OLD][..]] {
        let refused = holds(Some(vouched_as));
        let verdict = decide(&question, &empty, &refused, "the record");
        assert_eq!(verdict.decision, Decision::Build, "{verdict:?}");
        assert!(
            verdict.reason.contains("✗ host image") && verdict.reason.contains("not built here"),
            "{}",
            verdict.reason
        );
        assert_eq!(verdict.artifact, None);
        // …and the registry is asked next.
        assert!(needs_registry(&question, &empty, &refused));
    }
    // Marking follows the (ref, id) pairs this machine vouches for.
    let mut images = vec![image(REF, true)];
    mark_origins(&mut images, &std::collections::BTreeSet::new());
    assert_eq!(images[0].origin_for(REF), HostOrigin::Unknown);
    let id = images[0].id.clone();
    mark_origins(
        &mut images,
        &std::collections::BTreeSet::from([(OLD.to_string(), id.clone())]),
    );
    assert_eq!(images[0].origin_for(REF), HostOrigin::Unknown);
    assert_eq!(images[0].origin_for(OLD), HostOrigin::Vouched);
    mark_origins(
        &mut images,
        &std::collections::BTreeSet::from([(REF.to_string(), id)]),
    );
    assert_eq!(images[0].origin_for(REF), HostOrigin::Vouched);
}

#[test]
fn the_host_answers_only_for_its_own_module_and_inputs() {
    // Issue 51, case 2: another module's image (or this module's from other inputs) tagged with
    // the ref answers for nothing, by the labels rule the registry voucher uses.
    let question = known(false, false);
    let empty = Record::new();
    let with = |labels: &[(&str, &str)]| {
        let mut found = image(REF, false);
        found.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        HostAnswer::Holds(vec![found])
    };
    for (labels, says) in [
        (
            vec![(MODULE_LABEL, "tools"), (INPUTS_LABEL, INPUTS)],
            "labelled for module tools",
        ),
        (
            vec![(MODULE_LABEL, "api"), (INPUTS_LABEL, "9a8b7c6d5e4fffff")],
            "built from other inputs",
        ),
        (vec![(MODULE_LABEL, "api")], "without the label"),
    ] {
        let host = with(&labels);
        let verdict = decide(&question, &empty, &host, "the record");
        assert_eq!(verdict.decision, Decision::Build, "{labels:?}: {verdict:?}");
        assert!(
            verdict.reason.contains("✗ host image") && verdict.reason.contains(says),
            "{labels:?}: {}",
            verdict.reason
        );
        assert_eq!(verdict.artifact, None);
        assert!(needs_registry(&question, &empty, &host));
    }
    // Unknown inputs never match.
    let unknown = Question {
        inputs: None,
        ..known(false, false)
    };
    let host = with(&[(MODULE_LABEL, "api"), (INPUTS_LABEL, INPUTS)]);
    assert_eq!(
        decide(&unknown, &empty, &host, "the record").decision,
        Decision::Build
    );
}
