//! The cluster backend with the real `kube` client against the API test server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::kube_api::KubeApi;
use common::kube_objects::{pod, workload};
use meshtop::backends::cluster::{ClusterError, RECORD_ANNOTATION, WorkloadKind};
use meshtop::mesh::model::{Record, RecordEntry};
use serde_json::json;

const NS: &str = "mesh-demo";

fn entry(reference: &str, digest: &str) -> RecordEntry {
    RecordEntry {
        reference: reference.into(),
        digest: digest.into(),
    }
}

fn record(entries: &[(&str, RecordEntry)]) -> Record {
    entries
        .iter()
        .map(|(m, e)| (m.to_string(), e.clone()))
        .collect()
}

#[tokio::test]
async fn record_of_an_absent_namespace_or_annotation_is_empty_and_silent() {
    let api = KubeApi::start().await;
    let read = api.cluster(NS).read_record().await.unwrap();
    assert!(read.record.is_empty());
    assert_eq!(read.warning, None);
    assert_eq!(read.resource_version, None);

    api.put_namespace(NS, &[]);
    let read = api.cluster(NS).read_record().await.unwrap();
    assert!(read.record.is_empty());
    assert_eq!(read.warning, None);
    assert!(read.resource_version.is_some());
}

#[tokio::test]
async fn record_reads_a_valid_annotation() {
    let api = KubeApi::start().await;
    let text = r#"{"api":{"ref":"demo/api:aaa-amd64","digest":"sha256:01"},"base":{"ref":"demo/base:bbb-amd64","digest":"sha256:02"}}"#;
    api.put_namespace(NS, &[(RECORD_ANNOTATION, text)]);
    let read = api.cluster(NS).read_record().await.unwrap();
    assert_eq!(read.warning, None);
    assert_eq!(
        read.record,
        record(&[
            ("api", entry("demo/api:aaa-amd64", "sha256:01")),
            ("base", entry("demo/base:bbb-amd64", "sha256:02"))
        ])
    );
}

#[tokio::test]
async fn malformed_or_wrong_shaped_record_is_empty_with_a_warning_naming_the_namespace() {
    for text in [
        "{not json",
        r#"["api"]"#,
        r#"{"api":{"ref":"demo/api:x"}}"#,
        r#"{"api":"demo/api:x"}"#,
    ] {
        let api = KubeApi::start().await;
        api.put_namespace(NS, &[(RECORD_ANNOTATION, text)]);
        let read = api.cluster(NS).read_record().await.unwrap();
        assert!(read.record.is_empty(), "{text}");
        let warning = read
            .warning
            .unwrap_or_else(|| panic!("no warning for {text}"));
        assert!(
            warning.contains(NS) && warning.contains(RECORD_ANNOTATION),
            "{warning}"
        );
    }
}

#[tokio::test]
async fn stamp_merges_into_the_current_record_and_bumps_the_resource_version() {
    let api = KubeApi::start().await;
    api.put_namespace(
        NS,
        &[(
            RECORD_ANNOTATION,
            r#"{"base":{"ref":"demo/base:b","digest":"sha256:0b"}}"#,
        )],
    );
    let before = api.get("namespaces", "", NS).unwrap()["metadata"]["resourceVersion"].clone();
    let cluster = api.cluster(NS);
    let merged = cluster
        .stamp_record(&record(&[("api", entry("demo/api:a", "sha256:0a"))]))
        .await
        .unwrap();
    assert_eq!(merged.len(), 2);
    let read = cluster.read_record().await.unwrap();
    assert_eq!(read.record, merged);
    assert_ne!(read.resource_version.map(|v| json!(v)), Some(before));
}

#[tokio::test]
async fn stamp_on_a_missing_namespace_says_to_create_it() {
    let api = KubeApi::start().await;
    let err = api
        .cluster(NS)
        .stamp_record(&record(&[("api", entry("a", "sha256:0a"))]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ClusterError::NamespaceMissing { .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("kubectl create namespace mesh-demo"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_racing_stamps_both_land_their_entries() {
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    // Both stamps read the same resourceVersion, so one of the writes must conflict.
    api.sync_next_namespace_reads(2);
    let (a, b) = (api.cluster(NS), api.cluster(NS));
    let first = tokio::spawn(async move {
        a.stamp_record(&record(&[("api", entry("demo/api:a", "sha256:0a"))]))
            .await
    });
    let second = tokio::spawn(async move {
        b.stamp_record(&record(&[("web", entry("demo/web:w", "sha256:0c"))]))
            .await
    });
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    assert!(api.responses_with(409) >= 1, "the race never conflicted");
    let read = api.cluster(NS).read_record().await.unwrap();
    assert_eq!(
        read.record,
        record(&[
            ("api", entry("demo/api:a", "sha256:0a")),
            ("web", entry("demo/web:w", "sha256:0c"))
        ])
    );
}

#[tokio::test]
async fn machines_of_500_workloads_take_a_bounded_number_of_calls() {
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let kinds = ["deployments", "statefulsets", "daemonsets"];
    for i in 0..500 {
        let resource = kinds[i % 3];
        let name = format!("w{i}");
        let image = format!("reg:5000/demo/m{}:t{i}", i % 7);
        let sidecar = ("proxy", "envoy:1");
        api.put(
            resource,
            NS,
            workload(
                resource,
                &name,
                &format!("m{}", i % 7),
                &[sidecar, ("app", &image)],
                2,
            ),
        );
        api.put(
            "pods",
            NS,
            pod(
                &format!("{name}-0"),
                &name,
                "app",
                &image,
                &format!("docker-pullable://reg:5000/demo/m@sha256:{i:064x}"),
            ),
        );
    }
    // Neither unlabelled workloads nor unrelated pods are machines.
    let mut stray = workload("deployments", "stray", "x", &[("app", "x:1")], 1);
    stray["metadata"]["labels"] = json!({"team": "other"});
    api.put("deployments", NS, stray);
    api.reset_counts();

    let cluster = api.cluster(NS);
    let started = std::time::Instant::now();
    let record = cluster.read_record().await.unwrap();
    let machines = cluster.machines().await.unwrap();
    let elapsed = started.elapsed();
    assert!(record.record.is_empty());
    assert_eq!(machines.len(), 500);
    let calls = api.total_requests();
    eprintln!("record + 500 machines: {calls} API calls in {elapsed:?}");
    assert!(calls <= 5, "{calls} calls");
    assert_eq!(api.requests(&format!("/api/v1/namespaces/{NS}/pods")), 1);

    let w7 = machines.iter().find(|w| w.name == "w7").unwrap();
    assert_eq!(w7.kind, WorkloadKind::StatefulSet);
    assert_eq!(w7.module, "m0");
    assert_eq!(
        w7.container, "app",
        "the container whose repository is the module's, not the first"
    );
    assert_eq!(w7.image, "reg:5000/demo/m0:t7");
    assert_eq!(w7.running_digests, vec![format!("sha256:{:064x}", 7)]);
    assert_eq!(
        (w7.replicas, w7.ready, w7.generation, w7.observed_generation),
        (2, 2, 1, 1)
    );
}

#[tokio::test]
async fn the_container_annotation_wins_and_the_first_container_is_the_fallback() {
    let api = KubeApi::start().await;
    let mut named = workload(
        "deployments",
        "named",
        "api",
        &[("a", "demo/api:1"), ("b", "other:1")],
        1,
    );
    named["metadata"]["annotations"] = json!({"jr2.dev/container": "b"});
    api.put("deployments", NS, named);
    api.put(
        "deployments",
        NS,
        workload(
            "deployments",
            "plain",
            "web",
            &[("first", "x:1"), ("second", "y:1")],
            1,
        ),
    );
    let machines = api.cluster(NS).machines().await.unwrap();
    let container = |n: &str| {
        machines
            .iter()
            .find(|w| w.name == n)
            .unwrap()
            .container
            .clone()
    };
    assert_eq!(container("named"), "b");
    assert_eq!(container("plain"), "first");
}

fn image_of(api: &KubeApi, resource: &str, name: &str, index: usize) -> String {
    api.get(resource, NS, name).unwrap()["spec"]["template"]["spec"]["containers"][index]["image"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn send_patches_the_image_and_stamps_the_artifact() {
    let api = KubeApi::start().await;
    api.put(
        "daemonsets",
        NS,
        workload(
            "daemonsets",
            "agent",
            "agent",
            &[("side", "s:1"), ("agent", "demo/agent:old")],
            3,
        ),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster
        .send(&w, "demo/agent:new", Some("sha256:abc"))
        .await
        .unwrap();
    assert_eq!(image_of(&api, "daemonsets", "agent", 1), "demo/agent:new");
    assert_eq!(image_of(&api, "daemonsets", "agent", 0), "s:1");
    let object = api.get("daemonsets", NS, "agent").unwrap();
    assert_eq!(
        object["spec"]["template"]["metadata"]["annotations"]["jr2.dev/artifact"],
        "sha256:abc"
    );
    assert_eq!(object["metadata"]["generation"], 2);
}

#[tokio::test]
async fn send_whose_guard_fails_reports_the_conflict_and_overwrites_nothing() {
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:old")], 1),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    // Someone else changes the image between our read and our send.
    let mut changed = api.get("deployments", NS, "api").unwrap();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("demo/api:theirs");
    api.put("deployments", NS, changed);

    let err = cluster.send(&w, "demo/api:ours", None).await.unwrap_err();
    match &err {
        ClusterError::Conflict {
            workload, running, ..
        } => {
            assert!(workload.contains("api"));
            assert_eq!(running, "demo/api:theirs");
        }
        other => panic!("expected a conflict, got {other}"),
    }
    assert!(err.to_string().contains("demo/api:theirs"), "{err}");
    assert_eq!(api.responses_with(422), 1);
    assert_eq!(image_of(&api, "deployments", "api", 0), "demo/api:theirs");
}

#[tokio::test]
async fn follow_rollout_waits_until_done() {
    let api = KubeApi::start().await;
    api.put(
        "statefulsets",
        NS,
        workload("statefulsets", "db", "db", &[("db", "demo/db:1")], 2),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/db:2", None).await.unwrap();
    api.complete_rollout_after_reads("statefulsets", NS, "db", 3);
    let done = cluster
        .follow_rollout(&w, Duration::from_secs(30), Duration::from_millis(1))
        .await
        .unwrap();
    assert_eq!(done.polls, 3);
    assert_eq!(done.replicas, 2);
}

#[tokio::test]
async fn follow_rollout_stuck_on_image_pull_back_off_names_it_with_events() {
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 1),
    );
    api.put(
        "pods",
        NS,
        pod("api-7c9-x1", "api", "api", "demo/api:1", "sha256:01"),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    api.set_pods_waiting(
        "deployments",
        NS,
        "api",
        "ImagePullBackOff",
        "Back-off pulling image \"demo/api:2\"",
    );
    api.add_event(
        NS,
        "api-7c9-x1",
        "Failed",
        "Failed to pull image \"demo/api:2\": not found",
    );

    let err = cluster
        .follow_rollout(&w, Duration::from_secs(30), Duration::from_millis(1))
        .await
        .unwrap_err();
    match &err {
        ClusterError::RolloutFailed {
            reason,
            events,
            log_tail,
            ..
        } => {
            assert!(
                reason.contains("ImagePullBackOff") && reason.contains("api-7c9-x1"),
                "{reason}"
            );
            assert_eq!(
                events,
                &vec!["Failed: Failed to pull image \"demo/api:2\": not found".to_string()]
            );
            assert_eq!(log_tail, &None);
        }
        other => panic!("expected a roll-out failure, got {other}"),
    }
    assert!(err.to_string().contains("ImagePullBackOff"), "{err}");
}

#[tokio::test]
async fn follow_rollout_of_a_crash_loop_carries_the_log_tail() {
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 1),
    );
    api.put(
        "pods",
        NS,
        pod("api-1", "api", "api", "demo/api:1", "sha256:01"),
    );
    api.set_pods_waiting(
        "deployments",
        NS,
        "api",
        "CrashLoopBackOff",
        "back-off restarting",
    );
    api.set_pod_log(NS, "api-1", "panic: no config\n");
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    let err = cluster
        .follow_rollout(&w, Duration::from_secs(30), Duration::from_millis(1))
        .await
        .unwrap_err();
    let ClusterError::RolloutFailed {
        reason, log_tail, ..
    } = &err
    else {
        panic!("{err}")
    };
    assert!(reason.starts_with("CrashLoopBackOff"), "{reason}");
    assert_eq!(log_tail.as_deref(), Some("panic: no config\n"));
}

#[tokio::test]
async fn follow_rollout_fails_on_the_progress_deadline() {
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 1),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();

    // Our own deadline: the workload never progresses.
    let err = cluster
        .follow_rollout(&w, Duration::ZERO, Duration::from_millis(1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not done within 0s"), "{err}");

    // The cluster's deadline: Progressing=False, ProgressDeadlineExceeded.
    let mut object = api.get("deployments", NS, "api").unwrap();
    object["status"]["conditions"] = json!([{"type": "Progressing", "status": "False",
        "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"api-2\" has timed out progressing."}]);
    api.put("deployments", NS, object);
    let err = cluster
        .follow_rollout(&w, Duration::from_secs(30), Duration::from_millis(1))
        .await
        .unwrap_err();
    let ClusterError::RolloutFailed { reason, .. } = &err else {
        panic!("{err}")
    };
    assert!(
        reason.starts_with("ProgressDeadlineExceeded") && reason.contains("timed out"),
        "{reason}"
    );
}
