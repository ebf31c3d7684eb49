//! The record's history and pins in the state database: stamps on the Docker record (in the
//! stamping transaction) and on the Kubernetes annotation (the API test server), short ids, pins.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Mutex;

use common::kube_api::KubeApi;
use meshtop::backends::state::{Holder, StateDb};
use meshtop::converge::targets;
use meshtop::mesh::model::{Record, RecordEntry, Target};
use meshtop::mesh::operation::OperationKind;
use meshtop::mesh::pin::{Pin, PinChange};

fn one(module: &str, reference: &str, digest: &str) -> Record {
    Record::from([(
        module.to_string(),
        RecordEntry::new(reference.into(), digest.into()),
    )])
}

/// Make `op` the holder of `mesh` (a stamp is made only while its operation holds the mesh).
fn hold(db: &StateDb, mesh: &str, op: &str) {
    if let Some(holder) = db.mesh_holder(mesh, "default").unwrap() {
        db.unlock_mesh(mesh, "default", &holder.operation_id)
            .unwrap();
    }
    db.lock_mesh(mesh, "default", &meshtop::backends::state::Holder::here(op))
        .unwrap()
        .unwrap();
}

fn mesh(name: &str, target: Target) -> meshtop::mesh::model::Mesh {
    meshtop::mesh::model::Mesh {
        name: name.into(),
        file: "/nonexistent/mesh.toml".into(),
        root: "/nonexistent".into(),
        registry: None,
        publish: false,
        multi_platform: Default::default(),
        signing: Default::default(),
        targets: meshtop::mesh::model::single_target(target),
        environments: Vec::new(),
        modules: Vec::new(),
        machines: Vec::new(),
        rollout_deadline: None,
        builders: Vec::new(),
    }
}

#[test]
fn docker_stamps_are_noted_from_to_with_operation_short_ids() {
    let dir = tempfile::tempdir().unwrap();
    let db = StateDb::open(&dir.path().join("state.db")).unwrap();
    hold(&db, "demo", "op-a");
    db.stamp_record(
        "demo",
        "default",
        "op-a",
        &one("api", "demo/api:1", "sha256:1"),
    )
    .unwrap();
    // An unchanged entry is no new stamp.
    hold(&db, "demo", "op-b");
    db.stamp_record(
        "demo",
        "default",
        "op-b",
        &one("api", "demo/api:1", "sha256:1"),
    )
    .unwrap();
    hold(&db, "demo", "op-c");
    db.stamp_record_as(
        "demo",
        "default",
        meshtop::mesh::pin::StampBy::new("op-c", OperationKind::Rollback),
        &one("api", "demo/api:0", "sha256:0"),
        &PinChange::default(),
    )
    .unwrap();
    hold(&db, "other", "op-d");
    db.stamp_record(
        "other",
        "default",
        "op-d",
        &one("api", "other/api:9", "sha256:9"),
    )
    .unwrap();
    let stamps = db.stamps("demo", "default", "api", 10).unwrap();
    assert_eq!(stamps.len(), 2, "{stamps:?}");
    assert_eq!(stamps[0].by.kind, OperationKind::Rollback);
    assert_eq!(stamps[0].from_digest.as_deref(), Some("sha256:1"));
    assert_eq!(stamps[0].to_digest, "sha256:0");
    assert_eq!(stamps[1].from_digest, None);
    assert_eq!(stamps[1].by.pid, std::process::id());
    // Short ids count the operations of a mesh (op-b too); asking again gives the same one.
    assert_eq!(stamps[1].by.short, Some(1));
    assert_eq!(stamps[0].by.short, Some(3));
    assert_eq!(
        db.operation_short("demo", "default", "op-c", OperationKind::Rollback)
            .unwrap(),
        3
    );
    assert_eq!(
        db.operation_short("other", "default", "op-d", OperationKind::Converge)
            .unwrap(),
        1
    );
}

#[test]
fn pins_are_kept_per_mesh_and_module_until_unpinned() {
    let dir = tempfile::tempdir().unwrap();
    let db = StateDb::open(&dir.path().join("state.db")).unwrap();
    let pin = Pin {
        module: "api".into(),
        from_ref: "demo/api:bad".into(),
        from_digest: "sha256:bad".into(),
        to_ref: "demo/api:good".into(),
        to_digest: "sha256:good".into(),
        operation_id: "op-r".into(),
        short: 0,
        host: "host-a".into(),
        at_ms: 5,
        from_inputs: Some("own-bad".into()),
        to_inputs: None,
    };
    let short = db
        .operation_short("demo", "default", "op-r", OperationKind::Rollback)
        .unwrap();
    db.pin("demo", "default", &pin).unwrap();
    let pins = db.pins("demo", "default").unwrap();
    assert_eq!(pins["api"], Pin { short, ..pin });
    assert!(db.pins("other", "default").unwrap().is_empty());
    assert!(db.unpin("demo", "default", "api").unwrap());
    assert!(!db.unpin("demo", "default", "api").unwrap());
    assert!(db.pins("demo", "default").unwrap().is_empty());
}

#[tokio::test]
async fn a_kubernetes_stamp_is_noted_in_the_state_database() {
    let api = KubeApi::start().await;
    api.put_namespace("ns-h", &[]);
    let target = targets::kubernetes(api.cluster("ns-h"), None);
    let dir = tempfile::tempdir().unwrap();
    let db = Mutex::new(StateDb::open(&dir.path().join("state.db")).unwrap());
    let mesh = mesh(
        "kh",
        Target::Kubernetes {
            namespace: "ns-h".into(),
            context: None,
        },
    );
    // The mesh held as an operation holds it on Kubernetes: the state file's lock and the Lease.
    target
        .hold(&db, "kh", &Holder::here("op-1"), "converge", false)
        .await
        .unwrap();
    target
        .stamp(
            &mesh,
            &db,
            meshtop::mesh::pin::StampBy::new("op-1", OperationKind::Converge),
            &one("web", "kh/web:1", "sha256:1"),
            &PinChange::default(),
        )
        .await
        .unwrap();
    target.release("kh", "op-1").await;
    db.lock()
        .unwrap()
        .unlock_mesh("kh", "default", "op-1")
        .unwrap();
    target
        .hold(&db, "kh", &Holder::here("op-2"), "rollback", false)
        .await
        .unwrap();
    target
        .stamp(
            &mesh,
            &db,
            meshtop::mesh::pin::StampBy::new("op-2", OperationKind::Rollback),
            &one("web", "kh/web:0", "sha256:0"),
            &PinChange::default(),
        )
        .await
        .unwrap();
    let stamps = db
        .lock()
        .unwrap()
        .stamps("kh", "default", "web", 10)
        .unwrap();
    assert_eq!(stamps.len(), 2, "{stamps:?}");
    assert_eq!(stamps[0].by.kind, OperationKind::Rollback);
    assert_eq!(stamps[0].from_ref.as_deref(), Some("kh/web:1"));
    assert_eq!(stamps[0].to_ref, "kh/web:0");
    assert_eq!(stamps[1].from_ref, None);
    // The docker record of the state database was not touched: the annotation is the record.
    assert!(
        db.lock()
            .unwrap()
            .record("kh", "default")
            .unwrap()
            .is_empty()
    );
}

/// Issue 19, item 4: Alice pins on Kubernetes; Bob, with a state file of his own, reads the pin
/// and the record's history from the namespace, and his unpin ends it for Alice too.
#[tokio::test]
async fn pins_and_the_history_live_on_the_namespace_for_every_state_file() {
    let api = KubeApi::start().await;
    api.put_namespace("ns-t", &[]);
    let mesh = mesh(
        "kt",
        Target::Kubernetes {
            namespace: "ns-t".into(),
            context: None,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let alice_db = Mutex::new(StateDb::open(&dir.path().join("alice.db")).unwrap());
    let bob_db = std::sync::Arc::new(Mutex::new(
        StateDb::open(&dir.path().join("bob.db")).unwrap(),
    ));
    let alice = targets::kubernetes(api.cluster("ns-t"), None);
    let bob = targets::kubernetes(api.cluster("ns-t"), None);
    alice
        .hold(&alice_db, "kt", &Holder::here("op-a"), "rollback", false)
        .await
        .unwrap();
    let pin = Pin {
        module: "web".into(),
        from_ref: "kt/web:bad".into(),
        from_digest: "sha256:bad".into(),
        to_ref: "kt/web:good".into(),
        to_digest: "sha256:good".into(),
        operation_id: "op-a".into(),
        short: 1,
        host: "alice-laptop".into(),
        at_ms: 7,
        from_inputs: Some("own-bad".into()),
        to_inputs: None,
    };
    let change = PinChange {
        set: vec![pin.clone()],
        end: Vec::new(),
    };
    alice
        .stamp(
            &mesh,
            &alice_db,
            meshtop::mesh::pin::StampBy::new("op-a", OperationKind::Rollback),
            &one("web", "kt/web:good", "sha256:good"),
            &change,
        )
        .await
        .unwrap();
    alice.release("kt", "op-a").await;
    alice_db
        .lock()
        .unwrap()
        .unlock_mesh("kt", "default", "op-a")
        .unwrap();

    // On the namespace, beside the record: the pin and the stamp.
    let on_cluster = api.cluster("ns-t").read_record().await.unwrap();
    assert_eq!(on_cluster.pins["web"].host, "alice-laptop");
    assert_eq!(
        on_cluster.history["web"][0].by.kind,
        OperationKind::Rollback
    );
    assert_eq!(on_cluster.history["web"][0].to_digest, "sha256:good");

    // Bob's state file knows nothing until he reads the target; then it holds a copy.
    assert!(
        bob_db
            .lock()
            .unwrap()
            .pins("kt", "default")
            .unwrap()
            .is_empty()
    );
    let read = bob.read_record(&mesh, &bob_db).await.unwrap();
    let kept = read
        .kept
        .expect("Kubernetes keeps pins and history on the namespace");
    assert_eq!(kept.pins["web"], pin);
    let copied = bob_db.lock().unwrap().pins("kt", "default").unwrap();
    assert_eq!(copied["web"].from_inputs.as_deref(), Some("own-bad"));
    assert_eq!(copied["web"].host, "alice-laptop");
    let stamps = bob_db
        .lock()
        .unwrap()
        .stamps("kt", "default", "web", 10)
        .unwrap();
    assert_eq!(stamps.len(), 1, "{stamps:?}");
    assert_eq!(stamps[0].by.kind, OperationKind::Rollback);
    assert_eq!(stamps[0].by.operation_id, "op-a");

    // Bob unpins: the pin leaves the namespace, and Alice's next read drops her copy.
    let was = meshtop::converge::rollback::unpin(&mesh, "web", bob.as_ref(), &bob_db)
        .await
        .unwrap();
    assert!(was);
    assert!(
        api.cluster("ns-t")
            .read_record()
            .await
            .unwrap()
            .pins
            .is_empty()
    );
    assert!(
        alice_db
            .lock()
            .unwrap()
            .pins("kt", "default")
            .unwrap()
            .contains_key("web")
    );
    alice.read_record(&mesh, &alice_db).await.unwrap();
    assert!(
        alice_db
            .lock()
            .unwrap()
            .pins("kt", "default")
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_pinned_module_needs_no_delivery_so_a_target_without_one_does_not_refuse_it() {
    use meshtop::converge::preflight;
    use meshtop::mesh::decide::Decision;
    use meshtop::mesh::plan::PlannedModule;
    let api = KubeApi::start().await;
    // Context "test-context" without a registry: nothing can deliver.
    let target = targets::kubernetes(api.cluster("ns-p"), None);
    let planned = |decision| PlannedModule {
        name: "web".into(),
        tier: 0,
        base: None,
        policy: meshtop::mesh::model::Policy::Rollout,
        reference: Some("kh/web:1".into()),
        decision,
        reason: "pinned: rolled back from …".into(),
        base_artifact: None,
        contexts: Default::default(),
        builds_on: Default::default(),
        artifact: Some("sha256:0".into()),
        registry_held: None,
        why: "unchanged".into(),
        changes: Vec::new(),
        multi_platform: false,
        platforms: Vec::new(),
        inputs: None,
        image_ref: None,
    };
    let mesh = mesh(
        "kp",
        Target::Kubernetes {
            namespace: "ns-p".into(),
            context: None,
        },
    );
    for (decision, refused) in [
        (Decision::Pinned, false),
        (Decision::Record, false),
        (Decision::Host, true),
    ] {
        let plan = std::collections::BTreeMap::from([("web".to_string(), planned(decision))]);
        let refusals = preflight::refusals(&plan, &mesh, target.as_ref());
        assert_eq!(!refusals.is_empty(), refused, "{decision}: {refusals:?}");
    }
}
