//! The Kubernetes record past one object (issue 41): shards behind an index, on the API test server
//! (which enforces the apiserver's 262144 bytes of annotations, 1 MiB of ConfigMap data, immutable
//! ConfigMaps and resourceVersion conflicts).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::Arc;

use common::kube_api::KubeApi;
use meshtop::backends::cluster::{
    ANNOTATIONS_LIMIT_BYTES, Cluster, ClusterError, HISTORY_ANNOTATION, INDEX_ANNOTATION,
    PINS_ANNOTATION, RECORD_ANNOTATION, RecordForm, RecordIndex, SHARD_KEY, SHARD_LABEL,
    SHARD_WRITTEN_AT, SHARD_WRITTEN_BY, ShardContent, ShardRef, Stamped, TeamWrite, shard_digest,
};
use meshtop::mesh::model::{Record, RecordEntry};
use meshtop::mesh::operation::OperationKind;
use meshtop::mesh::pin::{PinChange, Stamper};
use serde_json::{Value, json};

const NS: &str = "mesh-shards";

/// `n` modules from `from`, each naming an artifact of generation `tag` (a real registry host's length).
pub(crate) fn modules(from: usize, n: usize, tag: &str) -> Record {
    (from..from + n)
        .map(|i| {
            (
                format!("module-{i:05}"),
                RecordEntry::new(
                    format!("registry.example.com:5000/team/module-{i:05}:{tag}"),
                    format!("sha256:{:0>64}", format!("{i}{tag}")),
                ),
            )
        })
        .collect()
}

fn stamper(operation: &str) -> Stamper {
    Stamper {
        operation_id: operation.into(),
        kind: OperationKind::Converge,
        short: Some(1),
        host: "host-a".into(),
        pid: 1,
        at_ms: 1,
        from_target: None,
    }
}

pub(crate) async fn stamp(
    cluster: &Cluster,
    entries: &Record,
    operation: &str,
) -> Result<Stamped, ClusterError> {
    let by = stamper(operation);
    let write = TeamWrite {
        entries,
        pins: &PinChange::default(),
        by: &by,
    };
    cluster.stamp_team(&write, true).await
}

fn annotations(api: &KubeApi) -> serde_json::Map<String, Value> {
    api.get("namespaces", "", NS).unwrap()["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default()
}

fn index(api: &KubeApi) -> RecordIndex {
    serde_json::from_str(annotations(api)[INDEX_ANNOTATION].as_str().unwrap()).unwrap()
}

/// Every shard the index names: the record's and the history's.
fn names_of(index: &RecordIndex) -> Vec<String> {
    index
        .shards
        .iter()
        .chain(&index.history)
        .map(|s| s.name.clone())
        .collect()
}

#[tokio::test]
async fn a_record_of_ten_thousand_modules_stamps_and_reads_back_whole() {
    // Before shards: RecordTooLarge ("does not fit on it … 262144 bytes") at about 1,650 modules.
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[("other.example/note", "kept")]);
    let cluster = api.cluster(NS);
    let whole = modules(0, 10_000, "v1");
    stamp(&cluster, &whole, "op-1").await.unwrap();
    let read = cluster.read_record().await.unwrap();
    assert_eq!(read.record, whole);
    assert_eq!(read.history.len(), 10_000, "every module's stamp kept");
    assert!(
        matches!(read.form, RecordForm::Shards { shards, .. } if shards > 1),
        "{:?}",
        read.form
    );
    // The namespace keeps the index alone (and what other tools put there), well under the limit.
    let annotations = annotations(&api);
    for plain in [RECORD_ANNOTATION, PINS_ANNOTATION, HISTORY_ANNOTATION] {
        assert!(
            !annotations.contains_key(plain),
            "{plain} left beside the index"
        );
    }
    assert_eq!(annotations["other.example/note"], json!("kept"));
    let bytes: usize = annotations
        .iter()
        .map(|(k, v)| k.len() + v.as_str().unwrap().len())
        .sum();
    assert!(
        bytes < ANNOTATIONS_LIMIT_BYTES / 10,
        "{bytes} bytes of annotations"
    );
    // Every shard the index names is there, immutable, labelled, and under the ConfigMap limit.
    let maps = api.all("configmaps", NS);
    assert_eq!(maps.len(), index(&api).len());
    for map in &maps {
        assert_eq!(map["immutable"], json!(true));
        assert_eq!(map["metadata"]["labels"][SHARD_LABEL], json!("true"));
        assert!(map["data"][SHARD_KEY].as_str().unwrap().len() <= 1024 * 1024);
    }
    // A second stamp of one module rewrites only its shard, and reads back whole.
    let one = modules(4_321, 1, "v2");
    let before = index(&api);
    stamp(&cluster, &one, "op-2").await.unwrap();
    let after = index(&api);
    let changed = |before: &[ShardRef], after: &[ShardRef]| {
        after.iter().filter(|s| !before.contains(s)).count()
    };
    let (record, history) = (
        changed(&before.shards, &after.shards),
        changed(&before.history, &after.history),
    );
    assert!(
        record <= 2 && history <= 2,
        "{record} of {} record shards and {history} of {} history shards rewritten for one module",
        after.shards.len(),
        after.history.len()
    );
    let mut expected = whole.clone();
    expected.extend(one);
    assert_eq!(cluster.read_record().await.unwrap().record, expected);
}

#[tokio::test]
async fn two_stamps_racing_on_a_sharded_record_lose_nothing_and_never_mix() {
    // Two state files (two clusters, two operations) stamp disjoint halves at once, both having read
    // the same index: one write wins, the other conflicts (409), re-reads and stamps over it.
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let base = modules(0, 3_000, "base");
    stamp(&api.cluster(NS), &base, "op-base").await.unwrap();
    let a = modules(3_000, 1_000, "a");
    let b = modules(4_000, 1_000, "b");
    api.sync_next_namespace_reads(2);
    let (ca, cb) = (api.cluster(NS), api.cluster(NS));
    let (ra, rb) = tokio::join!(stamp(&ca, &a, "op-a"), stamp(&cb, &b, "op-b"));
    ra.unwrap();
    rb.unwrap();
    assert!(api.responses_with(409) >= 1, "the two stamps never raced");
    let read = api.cluster(NS).read_record().await.unwrap();
    let mut expected = base.clone();
    expected.extend(a.clone());
    expected.extend(b.clone());
    assert_eq!(read.record, expected, "a stamp was lost");
    // Each module's newest stamp is its own operation's: the stamps never mixed.
    for (module, op) in a
        .keys()
        .map(|m| (m, "op-a"))
        .chain(b.keys().map(|m| (m, "op-b")))
    {
        assert_eq!(read.history[module][0].by.operation_id, op, "{module}");
    }
}

#[tokio::test]
async fn the_loser_of_a_race_retries_under_the_readmes_verbs_alone() {
    // The README's RBAC grants ConfigMaps get, list, create and delete, not patch. The loser's retry
    // rewrites the shards it wrote a moment before (most are the same content): it must not ask to
    // renew them (a patch), or it is refused (403) after its module was built and pushed.
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    stamp(&api.cluster(NS), &modules(0, 3_000, "base"), "op-base")
        .await
        .unwrap();
    api.identity(
        "alice",
        &[
            ("get", "namespaces"),
            ("patch", "namespaces"),
            ("get", "configmaps"),
            ("list", "configmaps"),
            ("create", "configmaps"),
            ("delete", "configmaps"),
        ],
    );
    let (a, b) = (modules(3_000, 1_000, "a"), modules(4_000, 1_000, "b"));
    api.sync_next_namespace_reads(2);
    let (ca, cb) = (api.cluster(NS), api.cluster(NS));
    let (ra, rb) = tokio::join!(stamp(&ca, &a, "op-a"), stamp(&cb, &b, "op-b"));
    ra.unwrap();
    rb.unwrap();
    assert!(api.namespace_conflicts() >= 1, "the two stamps never raced");
    let record = api.cluster(NS).read_record().await.unwrap().record;
    assert_eq!(record.len(), 5_000);
}

#[tokio::test]
async fn a_reader_during_stamps_sees_the_old_or_the_new_record_never_a_mix() {
    let api = Arc::new(KubeApi::start().await);
    api.put_namespace(NS, &[]);
    let cluster = api.cluster(NS);
    stamp(&cluster, &modules(0, 3_000, "g0"), "op-0")
        .await
        .unwrap();
    let writer = {
        let api = api.clone();
        tokio::spawn(async move {
            let cluster = api.cluster(NS);
            for generation in 1..=6 {
                let tag = format!("g{generation}");
                stamp(
                    &cluster,
                    &modules(0, 3_000, &tag),
                    &format!("op-{generation}"),
                )
                .await
                .unwrap();
            }
        })
    };
    let reader = api.cluster(NS);
    let mut generations = std::collections::BTreeSet::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer never finished its stamps within 120 s (read {generations:?})"
        );
        let done = writer.is_finished();
        let read = reader.read_record().await.unwrap();
        let tags: std::collections::BTreeSet<&str> = read
            .record
            .values()
            .map(|e| e.reference.rsplit(':').next().unwrap())
            .collect();
        assert_eq!(tags.len(), 1, "a read mixed stamps: {tags:?}");
        assert_eq!(read.record.len(), 3_000);
        generations.extend(tags.into_iter().map(str::to_string));
        if done {
            break;
        }
    }
    writer.await.unwrap();
    assert!(generations.contains("g6"), "{generations:?}");
}

#[tokio::test]
async fn a_shard_that_does_not_match_its_digest_is_refused_naming_it() {
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let cluster = api.cluster(NS);
    stamp(&cluster, &modules(0, 3_000, "v1"), "op-1")
        .await
        .unwrap();
    let shard = index(&api).shards[0].name.clone();
    // The API refuses to change an immutable ConfigMap …
    let (ok, out) = api
        .kubectl(&[
            "-n",
            NS,
            "patch",
            "configmap",
            &shard,
            "--type=merge",
            "-p",
            r#"{"data":{"team.json":"{}"}}"#,
        ])
        .await;
    assert!(
        !ok && out.contains("field is immutable when `immutable` is set"),
        "{out}"
    );
    // … so the tampering is done behind its back (a restore of other bytes under the same name).
    let mut map = api.get("configmaps", NS, &shard).unwrap();
    let text = map["data"][SHARD_KEY]
        .as_str()
        .unwrap()
        .replace("registry.example.com", "evil.example.com");
    map["data"][SHARD_KEY] = json!(text);
    api.put("configmaps", NS, map);
    let err = cluster.read_record().await.unwrap_err();
    let message = err.to_string();
    assert!(matches!(err, ClusterError::RecordShard { .. }), "{message}");
    assert!(
        message.contains(&shard) && message.contains("does not match its digest"),
        "{message}"
    );
    // Nothing is stamped over a record that cannot be read.
    assert!(stamp(&cluster, &modules(0, 1, "v2"), "op-2").await.is_err());
}

#[tokio::test]
async fn gc_removes_shards_no_index_names_and_keeps_the_current_ones() {
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let cluster = api.cluster(NS);
    stamp(&cluster, &modules(0, 3_000, "v1"), "op-1")
        .await
        .unwrap();
    let first = names_of(&index(&api));
    // The first stamp's shards, an hour old (as if written then), and two orphans no index names: a
    // stamp that crashed an hour ago, and a stamp in flight now (its index not written yet).
    let hour_ago = meshtop::timefmt::now_ms() - 3_600_000;
    for name in &first {
        let mut map = api.get("configmaps", NS, name).unwrap();
        map["metadata"]["annotations"][SHARD_WRITTEN_AT] = json!(hour_ago.to_string());
        api.put("configmaps", NS, map);
    }
    let orphan = |name: &str, by: &str, at_ms: i64| {
        json!({"metadata": {"name": name, "labels": {SHARD_LABEL: "true"},
            "annotations": {SHARD_WRITTEN_BY: by, SHARD_WRITTEN_AT: at_ms.to_string()}},
            "immutable": true, "data": {SHARD_KEY: "{\"images\":{}}"}})
    };
    let now = meshtop::timefmt::now_ms();
    api.put(
        "configmaps",
        NS,
        orphan("meshtop-record-stale", "op-gone", now - 3_600_000),
    );
    api.put(
        "configmaps",
        NS,
        orphan("meshtop-record-in-flight", "op-running", now),
    );
    api.put(
        "configmaps",
        NS,
        json!({"metadata": {"name": "someone-elses"}, "data": {"a": "b"}}),
    );
    // Every module changes: every shard of the first stamp is replaced and then unnamed.
    stamp(&cluster, &modules(0, 3_000, "v2"), "op-2")
        .await
        .unwrap();
    let current = names_of(&index(&api));
    assert!(
        !index(&api).history.is_empty(),
        "the history has shards of its own"
    );
    let left: Vec<String> = api
        .all("configmaps", NS)
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    for name in &current {
        assert!(left.contains(name), "gc removed the current shard {name}");
    }
    for name in first.iter().filter(|n| !current.contains(n)) {
        assert!(!left.contains(name), "gc kept the unnamed shard {name}");
    }
    assert!(
        !left.contains(&"meshtop-record-stale".to_string()),
        "{left:?}"
    );
    assert!(
        left.contains(&"meshtop-record-in-flight".to_string()),
        "{left:?}"
    );
    // A ConfigMap that is not meshtop's is never touched: gc lists by label.
    assert!(left.contains(&"someone-elses".to_string()), "{left:?}");
    assert_eq!(
        cluster.read_record().await.unwrap().record,
        modules(0, 3_000, "v2")
    );
    // Every shard the index names an hour old, then a stamp of one module: gc keeps the record's
    // shards and the history's that the new index names, however old.
    for name in &current {
        let mut map = api.get("configmaps", NS, name).unwrap();
        map["metadata"]["annotations"][SHARD_WRITTEN_AT] = json!(hour_ago.to_string());
        api.put("configmaps", NS, map);
    }
    stamp(&cluster, &modules(10, 1, "v3"), "op-3")
        .await
        .unwrap();
    for name in names_of(&index(&api)) {
        assert!(
            api.get("configmaps", NS, &name).is_some(),
            "gc removed the named shard {name}"
        );
    }
    let read = cluster.read_record().await.unwrap();
    assert_eq!(read.history.len(), 3_000);
    assert_eq!(read.history["module-00010"].len(), 3);
}

#[tokio::test]
async fn a_record_that_fits_stays_byte_for_byte_on_the_plain_annotation() {
    // Another tool reads `jr2.dev/images` as it always could: the same bytes, no index, no shard.
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let cluster = api.cluster(NS);
    let small = modules(0, 2, "v1");
    cluster.stamp_record(&small).await.unwrap();
    let annotations = annotations(&api);
    assert_eq!(
        annotations[RECORD_ANNOTATION].as_str().unwrap(),
        format!(
            r#"{{"module-00000":{{"ref":"registry.example.com:5000/team/module-00000:v1","digest":"sha256:{:0>64}"}},"module-00001":{{"ref":"registry.example.com:5000/team/module-00001:v1","digest":"sha256:{:0>64}"}}}}"#,
            "0v1", "1v1"
        )
    );
    assert_eq!(annotations[PINS_ANNOTATION], json!("{}"));
    assert_eq!(annotations[HISTORY_ANNOTATION], json!("{}"));
    assert!(!annotations.contains_key(INDEX_ANNOTATION));
    assert!(api.all("configmaps", NS).is_empty());
    assert_eq!(cluster.read_record().await.unwrap().form, RecordForm::Plain);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stamp_no_form_can_take_is_refused_before_the_first_build() {
    // Another tool leaves 100 bytes of the namespace's annotations: neither the plain record of five
    // modules nor an index of shards fits. Before, the converge built and pushed, then refused to stamp.
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = common::kube_mesh::KubeMesh::new("rsr", &api, true, "test-ctx", "");
    let blob = "y".repeat(262_144 - "other.example/blob".len() - 100);
    api.put_namespace(&k.namespace, &[("other.example/blob", &blob)]);
    let output = k.run(&["converge", "--json"]).await;
    assert_ne!(output.status.code(), Some(0), "{}", common::said(&output));
    let text = common::said(&output);
    assert!(
        text.contains("can take about 0 more module(s)")
            && text.contains("this converge would add 5")
            && text.contains("262144")
            && text.contains("nothing was built or pushed"),
        "{text}"
    );
    let (builds, _) = k.json(&["builds", "--json"]).await;
    assert!(
        builds.as_array().unwrap().is_empty(),
        "something was built: {builds}"
    );
    assert!(api.all("configmaps", &k.namespace).is_empty());
    // status says how close the record is to its limit.
    let status = k.run(&["status"]).await;
    let text = common::said(&status);
    assert!(
        text.contains("record: in the namespace's annotations")
            && text.contains("of 262144 bytes (99%)")
            && text.contains("room for about 0 more module(s)"),
        "{text}"
    );
}

/// `[[module]]` of the example's base context under `name`, stamped only (no machine).
fn solo(name: &str) -> String {
    format!("[[module]]\nname = \"{name}\"\ncontext = \"base\"\npolicy = \"record\"\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_converges_from_two_state_files_racing_on_a_sharded_record_lose_nothing() {
    // Two meshes (two state files, two Leases) share one namespace's record, already in shards. Their
    // two real converges switch the index at once: both having read the same index, one write wins,
    // the other's resourceVersion precondition fails (409); it re-reads and stamps over the winner's.
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let a = common::kube_mesh::KubeMesh::new("rsa", &api, true, "test-ctx", &solo("solo-a"));
    let b = common::kube_mesh::KubeMesh::new("rsb", &api, true, "test-ctx", &solo("solo-b"));
    let ns = a.namespace.clone();
    let file = b.mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replace(
        &format!("namespace = \"{}\"", b.namespace),
        &format!("namespace = \"{ns}\""),
    );
    std::fs::write(&file, text).unwrap();
    let base = modules(0, 3_000, "base");
    stamp(&api.cluster(&ns), &base, "op-base").await.unwrap();
    assert!(matches!(
        api.cluster(&ns).read_record().await.unwrap().form,
        RecordForm::Shards { .. }
    ));
    api.sync_next_namespace_patches(2);
    let (ra, rb) = tokio::join!(
        a.run(&["converge", "--json", "solo-a"]),
        b.run(&["converge", "--json", "solo-b"])
    );
    // The loser retried (and then both landed), or said so and stamped nothing.
    let mut landed = Vec::new();
    let mut gave_up = Vec::new();
    for (k, output, module) in [(&a, &ra, "solo-a"), (&b, &rb, "solo-b")] {
        let text = common::said(output);
        if output.status.success() {
            let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
            landed.push((k.name().to_string(), module, summary));
        } else {
            assert!(text.contains("kept changing under us"), "{text}");
            gave_up.push(module);
        }
    }
    assert!(!landed.is_empty(), "both gave up: {}", common::said(&ra));
    let read = api.cluster(&ns).read_record().await.unwrap();
    assert!(
        matches!(read.form, RecordForm::Shards { .. }),
        "{:?}",
        read.form
    );
    for (module, entry) in &base {
        assert_eq!(
            read.record.get(module),
            Some(entry),
            "{module} lost or changed"
        );
        assert_eq!(
            read.history[module][0].by.operation_id, "op-base",
            "{module}"
        );
    }
    // Each converge's module is there, its entry its own mesh's artifact and its newest stamp its
    // own operation's: nothing lost, nothing mixed.
    for (mesh, module, summary) in &landed {
        let entry = read
            .record
            .get(*module)
            .unwrap_or_else(|| panic!("{module} lost"));
        assert_eq!(
            Some(entry.reference.as_str()),
            summary["modules"][0]["ref"].as_str(),
            "{module}: {summary}"
        );
        assert!(entry.reference.contains(&format!("/{mesh}/")), "{entry:?}");
        assert_eq!(
            read.history[*module][0].by.operation_id,
            summary["operation_id"].as_str().unwrap(),
            "{module}"
        );
    }
    for module in gave_up {
        assert!(
            !read.record.contains_key(module),
            "{module} stamped by a converge that failed"
        );
    }
    assert_eq!(read.record.len(), 3_000 + landed.len());
    // They raced: the loser's switch was refused (409) before it re-read.
    assert!(
        api.namespace_conflicts() >= 1,
        "the two index switches never raced"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stamper_slower_than_the_grace_never_switches_the_index_to_shards_gc_took() {
    // The stamper writes its new shards, then stalls (held by the API test server) longer than the
    // grace; meanwhile gc finds its first shard named by no index and old, and takes it. Before the
    // fix the stamper then switched the index to a shard that was gone (and wrote it again only
    // after): a reader in between was refused, and a stamper that died there left the record broken.
    let api = Arc::new(KubeApi::start().await);
    api.put_namespace(NS, &[]);
    let grace = std::time::Duration::from_millis(300);
    stamp(
        &api.cluster(NS).with_shard_grace(grace),
        &modules(0, 3_000, "v1"),
        "op-1",
    )
    .await
    .unwrap();
    let hold = api.hold_configmap_create_after(1);
    let stamper = {
        let api = api.clone();
        tokio::spawn(async move {
            let cluster = api.cluster(NS).with_shard_grace(grace);
            stamp(&cluster, &modules(0, 3_000, "v2"), "op-2").await
        })
    };
    hold.reached().await;
    let gc = api.cluster(NS).with_shard_grace(grace);
    // The shard's grace passes while the stamper is held: gc takes it then (the clock, not luck).
    let gc = &gc;
    common::wait_until_async(
        "gc taking the held stamper's shard once its grace passed",
        std::time::Duration::from_secs(30),
        || async move { gc.gc_shards(&RecordIndex::default()).await.unwrap() > 0 },
    )
    .await;
    hold.release();
    stamper.await.unwrap().unwrap();
    assert_eq!(
        api.dangling_index_shards(),
        Vec::<String>::new(),
        "the index was switched to shards that were gone"
    );
    let read = api.cluster(NS).read_record().await.unwrap();
    assert_eq!(read.record, modules(0, 3_000, "v2"));
    for shard in index(&api).shards.into_iter().chain(index(&api).history) {
        assert!(
            api.get("configmaps", NS, &shard.name).is_some(),
            "{}",
            shard.name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_never_takes_a_shard_renewed_after_it_listed_it() {
    // gc lists an old shard no index names; before its delete lands, a stamper renews it (its
    // stamp is about to name it). The delete is guarded by the listed resourceVersion: refused.
    let api = Arc::new(KubeApi::start().await);
    api.put_namespace(NS, &[]);
    let name = "meshtop-record-renewed";
    let hour_ago = meshtop::timefmt::now_ms() - 3_600_000;
    let shard = |at_ms: i64| {
        json!({"metadata": {"name": name, "labels": {SHARD_LABEL: "true"},
            "annotations": {SHARD_WRITTEN_BY: "op-old", SHARD_WRITTEN_AT: at_ms.to_string()}},
            "immutable": true, "data": {SHARD_KEY: "{\"images\":{}}"}})
    };
    api.put("configmaps", NS, shard(hour_ago));
    let hold = api.hold_next_configmap_delete();
    let gc = {
        let api = api.clone();
        tokio::spawn(async move { api.cluster(NS).gc_shards(&RecordIndex::default()).await })
    };
    hold.reached().await;
    api.put("configmaps", NS, shard(meshtop::timefmt::now_ms()));
    hold.release();
    assert_eq!(gc.await.unwrap().unwrap(), 0, "gc took a renewed shard");
    assert!(api.get("configmaps", NS, name).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meshtop_gc_lists_and_takes_shards_no_index_names_past_the_grace() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = common::kube_mesh::KubeMesh::new("rsg", &api, true, "test-ctx", &solo("solo"));
    let output = k.run(&["converge", "--json", "solo"]).await;
    assert!(output.status.success(), "{}", common::said(&output));
    let cluster = api.cluster(&k.namespace);
    // Other modules on the registry gc reads (named after `solo`: gc asks the registry about the
    // record's first entry), enough for shards.
    let others: Record = (0..3_000)
        .map(|i| {
            (
                format!("zz-module-{i:05}"),
                RecordEntry::new(
                    format!("127.0.0.1:5000/{}/zz-module-{i:05}:v1", k.name()),
                    format!("sha256:{i:064}"),
                ),
            )
        })
        .collect();
    stamp(&cluster, &others, "op-1").await.unwrap();
    let current = names_of(&index_of(&api, &k.namespace));
    let now = meshtop::timefmt::now_ms();
    let orphan = |name: &str, by: &str, at_ms: i64| {
        json!({"metadata": {"name": name, "labels": {SHARD_LABEL: "true"},
            "annotations": {SHARD_WRITTEN_BY: by, SHARD_WRITTEN_AT: at_ms.to_string()}},
            "immutable": true, "data": {SHARD_KEY: "{\"images\":{}}"}})
    };
    // A stamp that died two hours ago, and one in flight now.
    let stale = "meshtop-record-stale";
    let young = "meshtop-record-young";
    api.put(
        "configmaps",
        &k.namespace,
        orphan(stale, "op-gone", now - 7_200_000),
    );
    api.put("configmaps", &k.namespace, orphan(young, "op-running", now));
    let names = |v: &Value, kind: &str| -> Vec<String> {
        v["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["kind"] == kind)
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (plan, _) = k.json(&["gc", "--dry-run", "--json"]).await;
    assert_eq!(names(&plan, "shard"), vec![stale.to_string()], "{plan}");
    let output = k.run(&["gc", "--dry-run"]).await;
    let text = common::said(&output);
    assert!(
        text.contains(&format!(
            "shard    {stale}: no index of the record names it; written by operation op-gone 2 h ago, past the grace"
        )),
        "{text}"
    );
    assert!(!text.contains(young), "{text}");
    let (swept, _) = k.json(&["gc", "--yes", "--json"]).await;
    let shard = swept["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "shard")
        .unwrap_or_else(|| panic!("{swept}"));
    assert_eq!(shard["outcome"], "deleted", "{swept}");
    let left: Vec<String> = api
        .all("configmaps", &k.namespace)
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(!left.contains(&stale.to_string()), "{left:?}");
    assert!(left.contains(&young.to_string()), "{left:?}");
    for name in &current {
        assert!(left.contains(name), "gc took the current shard {name}");
    }
    let read = cluster.read_record().await.unwrap();
    assert_eq!(read.record.len(), 3_001);
}

pub(crate) fn index_of(api: &KubeApi, ns: &str) -> RecordIndex {
    let namespace = api.get("namespaces", "", ns).unwrap();
    serde_json::from_str(
        namespace["metadata"]["annotations"][INDEX_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn what_decides_reads_the_entries_without_the_historys_shards() {
    // A converge, a plan and status decide by the entries and the pins. Before, every one of them
    // read the whole history with them (ten stamps a module: most of the record's bytes).
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let cluster = api.cluster(NS);
    for round in 0..3 {
        stamp(
            &cluster,
            &modules(0, 3_000, &format!("r{round}")),
            &format!("op-{round}"),
        )
        .await
        .unwrap();
    }
    // Each read on a connection of its own: one that read the shards before asks for none again.
    let whole = api.cluster(NS).read_record().await.unwrap();
    let entries = api.cluster(NS).read_entries().await.unwrap();
    assert_eq!(entries.record, whole.record);
    assert_eq!(entries.record, modules(0, 3_000, "r2"));
    assert_eq!(entries.pins, whole.pins);
    assert_eq!(whole.history.len(), 3_000);
    assert!(whole.history.values().all(|stamps| stamps.len() == 3));
    assert!(!whole.history_apart);
    assert!(entries.history_apart && entries.history.is_empty());
    let index = index(&api);
    assert_eq!(entries.cost.objects, 1 + index.shards.len());
    assert_eq!(whole.cost.objects, 1 + index.len());
    assert!(
        entries.cost.bytes * 3 < whole.cost.bytes,
        "the entries read {} bytes, the whole record {}",
        entries.cost.bytes,
        whole.cost.bytes
    );
    // The connection that stamped, read twice: the index alone the second time.
    cluster.read_entries().await.unwrap();
    let again = cluster.read_entries().await.unwrap();
    assert_eq!(again.cost.objects, 1);
    assert_eq!(again.record, entries.record);
}

#[tokio::test]
async fn a_stamp_reads_and_rewrites_only_the_history_shards_of_the_modules_it_stamps() {
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let cluster = api.cluster(NS);
    for round in 0..2 {
        stamp(
            &cluster,
            &modules(0, 3_000, &format!("r{round}")),
            &format!("op-{round}"),
        )
        .await
        .unwrap();
    }
    let before = index(&api);
    assert!(
        before.history.len() > 2,
        "{} history shards",
        before.history.len()
    );
    api.reset_counts();
    stamp(&cluster, &modules(1_500, 1, "r2"), "op-2")
        .await
        .unwrap();
    let verbs = api.requests_by_verb();
    let got = verbs.get("GET configmaps/…").copied().unwrap_or(0);
    assert!(
        got <= before.shards.len() + 1,
        "the stamp read {got} shards: {} of the record, {} of the history ({verbs:?})",
        before.shards.len(),
        before.history.len()
    );
    // The history of every other module is as it was; the stamped one has one stamp more.
    let read = cluster.read_record().await.unwrap();
    assert_eq!(read.history.len(), 3_000);
    for (module, stamps) in &read.history {
        if module == "module-01500" {
            let ops: Vec<&str> = stamps.iter().map(|s| s.by.operation_id.as_str()).collect();
            assert_eq!(ops, ["op-2", "op-1", "op-0"], "{module}");
        } else {
            assert_eq!(stamps.len(), 2, "{module}");
            assert_eq!(stamps[0].by.operation_id, "op-1", "{module}");
        }
    }
    let after = index(&api);
    let firsts: Vec<&str> = after
        .history
        .iter()
        .map(|s| s.first.as_deref().unwrap())
        .collect();
    assert!(firsts.is_sorted(), "{firsts:?}");
}

/// The index and shards a meshtop from before the history had shards of its own wrote: the
/// history inside the record's shards, the index `{"shards": [...]}`.
fn put_old_form(api: &KubeApi, record: &Record, by: &str) {
    let history: meshtop::mesh::pin::StampsByModule = record
        .iter()
        .map(|(module, entry)| {
            let stamp = meshtop::mesh::pin::Stamp {
                module: module.clone(),
                from_ref: None,
                from_digest: None,
                to_ref: entry.reference.clone(),
                to_digest: entry.digest.clone(),
                by: stamper(by),
            };
            (module.clone(), vec![stamp])
        })
        .collect();
    let modules: Vec<&String> = record.keys().collect();
    let mut refs = Vec::new();
    for part in modules.chunks(1_000) {
        let content = ShardContent {
            images: part
                .iter()
                .map(|m| ((*m).clone(), record[*m].clone()))
                .collect(),
            pins: Default::default(),
            history: part
                .iter()
                .map(|m| ((*m).clone(), history[*m].clone()))
                .collect(),
        };
        let text = serde_json::to_string(&content).unwrap();
        let digest = shard_digest(&text);
        let name = format!("meshtop-record-{}", &digest["sha256:".len()..][..40]);
        api.put(
            "configmaps",
            NS,
            json!({"metadata": {"name": name, "labels": {SHARD_LABEL: "true"},
                "annotations": {SHARD_WRITTEN_BY: by, SHARD_WRITTEN_AT: meshtop::timefmt::now_ms().to_string()}},
                "immutable": true, "data": {SHARD_KEY: text}}),
        );
        refs.push(json!({"name": name, "digest": digest}));
    }
    let index = serde_json::to_string(&json!({ "shards": refs })).unwrap();
    api.put_namespace(NS, &[(INDEX_ANNOTATION, &index)]);
}

#[tokio::test]
async fn an_index_from_before_history_shards_reads_whole_and_its_next_stamp_keeps_every_stamp() {
    let api = KubeApi::start().await;
    let old = modules(0, 3_000, "v1");
    put_old_form(&api, &old, "op-old");
    let cluster = api.cluster(NS);
    // Both reads read it as it always read: its history comes with the record's shards.
    for read in [
        cluster.read_entries().await.unwrap(),
        cluster.read_record().await.unwrap(),
    ] {
        assert_eq!(read.record, old);
        assert!(!read.history_apart);
        assert_eq!(read.history.len(), 3_000);
    }
    // The next stamp moves the history into shards of its own, losing no stamp.
    stamp(&cluster, &modules(7, 1, "v2"), "op-new")
        .await
        .unwrap();
    let index = index(&api);
    assert!(!index.history.is_empty());
    for shard in &index.shards {
        let map = api.get("configmaps", NS, &shard.name).unwrap();
        let content: ShardContent =
            serde_json::from_str(map["data"][SHARD_KEY].as_str().unwrap()).unwrap();
        assert!(
            content.history.is_empty(),
            "{} still holds history",
            shard.name
        );
    }
    let read = cluster.read_record().await.unwrap();
    let mut expected = old.clone();
    expected.extend(modules(7, 1, "v2"));
    assert_eq!(read.record, expected);
    assert_eq!(read.history.len(), 3_000);
    for (module, stamps) in &read.history {
        let ops: Vec<&str> = stamps.iter().map(|s| s.by.operation_id.as_str()).collect();
        let want: &[&str] = if module == "module-00007" {
            &["op-new", "op-old"]
        } else {
            &["op-old"]
        };
        assert_eq!(ops, want, "{module}");
    }
}

#[tokio::test]
async fn a_record_back_in_the_annotations_keeps_the_history_its_shards_held() {
    // Another tool's large annotation leaves too little room: 100 modules go to shards. Once it is
    // removed the next stamp goes back to the plain annotations, with the history the shards held.
    let api = KubeApi::start().await;
    let blob = "z".repeat(250_000);
    api.put_namespace(NS, &[("other.example/blob", &blob)]);
    let cluster = api.cluster(NS);
    for round in 0..2 {
        stamp(
            &cluster,
            &modules(0, 100, &format!("r{round}")),
            &format!("op-{round}"),
        )
        .await
        .unwrap();
    }
    assert!(!index(&api).history.is_empty());
    let mut history = cluster.read_record().await.unwrap().history;
    assert_eq!(history.len(), 100);
    let mut namespace = api.get("namespaces", "", NS).unwrap();
    namespace["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("other.example/blob");
    api.put("namespaces", "", namespace);
    let stamped = stamp(&cluster, &modules(0, 1, "r2"), "op-2").await.unwrap();
    let annotations = annotations(&api);
    assert!(!annotations.contains_key(INDEX_ANNOTATION));
    let read = cluster.read_record().await.unwrap();
    assert_eq!(read.form, RecordForm::Plain);
    meshtop::mesh::pin::add_stamps(&mut history, &stamped.stamps, 10);
    assert_eq!(read.history, history);
    assert_eq!(read.history["module-00000"].len(), 3);
}

/// A newer meshtop's index (a format above this one's, with a key this one does not know) is read
/// for what it understands and never stamped: a stamp would drop what it does not know. An index
/// from before the format was named (format 1: no `format`) reads and is rewritten as this format
/// by its next stamp, nothing lost.
#[tokio::test]
async fn an_index_of_a_newer_format_is_read_never_stamped_and_an_older_one_migrates() {
    use meshtop::backends::cluster::INDEX_FORMAT;
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let cluster = api.cluster(NS);
    let whole = modules(0, 2_000, "v1");
    stamp(&cluster, &whole, "op-1").await.unwrap();
    assert_eq!(index(&api).format, INDEX_FORMAT);
    let set_index = |text: String| {
        let mut namespace = api.get("namespaces", "", NS).unwrap();
        namespace["metadata"]["annotations"][INDEX_ANNOTATION] = json!(text);
        api.put("namespaces", "", namespace);
    };
    let written: Value =
        serde_json::from_str(annotations(&api)[INDEX_ANNOTATION].as_str().unwrap()).unwrap();

    let mut newer = written.clone();
    newer["format"] = json!(99);
    newer["attestations"] = json!(["kept by a newer meshtop"]);
    set_index(newer.to_string());
    let before = annotations(&api);
    let shards_before = api.all("configmaps", NS).len();
    let read = cluster.read_entries().await.unwrap();
    assert_eq!(read.record, whole, "what it understands reads");
    let said = "is format 99, newer than this meshtop's 2";
    assert!(
        read.warning.as_deref().unwrap_or_default().contains(said),
        "{:?}",
        read.warning
    );
    let refused = stamp(&cluster, &modules(0, 1, "v2"), "op-2")
        .await
        .unwrap_err();
    assert!(refused.to_string().contains(said), "{refused}");
    assert_eq!(
        annotations(&api),
        before,
        "the namespace byte-for-byte as it was"
    );
    assert_eq!(
        api.all("configmaps", NS).len(),
        shards_before,
        "no shard written"
    );

    let mut older = written;
    older.as_object_mut().unwrap().remove("format");
    set_index(older.to_string());
    let read = cluster.read_record().await.unwrap();
    assert_eq!((read.record.len(), read.warning), (2_000, None));
    stamp(&cluster, &modules(0, 1, "v2"), "op-3").await.unwrap();
    assert_eq!(
        index(&api).format,
        INDEX_FORMAT,
        "migrated on its next stamp"
    );
    let read = cluster.read_record().await.unwrap();
    assert_eq!(read.history.len(), 2_000, "nothing of the history lost");
    assert_eq!(read.history["module-00000"].len(), 2);
}
