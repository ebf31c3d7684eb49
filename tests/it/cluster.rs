//! The cluster backend with the real `kube` client against the API test server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::kube_api::KubeApi;
use common::kube_controllers::Fate;
use common::kube_objects::{pod, workload};
use meshtop::backends::cluster::{
    ClusterError, FollowRules, Needed, RECORD_ANNOTATION, WorkloadKind,
};
use meshtop::mesh::model::{Record, RecordEntry};
use meshtop::mesh::operation::OperationKind;
use serde_json::json;

const NS: &str = "mesh-demo";

fn entry(reference: &str, digest: &str) -> RecordEntry {
    RecordEntry::new(reference.into(), digest.into())
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
async fn the_container_annotation_wins_and_no_container_is_guessed() {
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
    // Neither image is module web's: no container is the module's (never the first by default).
    assert_eq!(container("plain"), "");
    let plain = machines.iter().find(|w| w.name == "plain").unwrap();
    let why = plain.unknown_container.as_deref().unwrap();
    assert!(
        why.contains("first (x:1), second (y:1)") && why.contains("jr2.dev/container"),
        "{why}"
    );
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

/// Rules for tests: read every millisecond; a transient reason fails once seen on three polls, a
/// back-off once seen for 200 ms (or at three restarts).
fn rules() -> FollowRules {
    FollowRules {
        deadline: Some(Duration::from_secs(300)),
        poll: Duration::from_millis(1),
        transient_grace: Duration::ZERO,
        restarts: 3,
        backoff: Duration::from_millis(200),
    }
}

/// Follow a roll-out, keeping every message kubectl would have printed.
async fn follow(
    cluster: &meshtop::backends::cluster::Cluster,
    w: &meshtop::backends::cluster::Workload,
    rules: FollowRules,
) -> (
    Result<meshtop::backends::cluster::RolloutDone, ClusterError>,
    Vec<String>,
) {
    let said = std::sync::Mutex::new(Vec::new());
    let on = |m: &str| said.lock().unwrap().push(m.to_string());
    let result = cluster.follow_rollout(w, rules, &on).await;
    (result, said.into_inner().unwrap())
}

/// The oracle: the machine's own `kubectl rollout status` against the same server. (done?, what it said)
async fn kubectl_rollout(api: &KubeApi, object: &str) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kubeconfig");
    std::fs::write(&config, api.kubeconfig("oracle")).unwrap();
    let output = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&config)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .args(["rollout", "status", object, "-n", NS, "--timeout=3s"])
        .output()
        .await
        .expect("kubectl runs: install it (Debian's kubernetes-client), scripts/test.sh does");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), said)
}

/// kubectl reaches meshtop's verdict: done with this message, or not done (and, if given, saying this).
async fn oracle_agrees(api: &KubeApi, object: &str, verdict: Result<&str, &str>) {
    let (done, said) = kubectl_rollout(api, object).await;
    match verdict {
        Ok(message) => assert!(done && said.contains(message), "kubectl: {said}"),
        Err(reason) => assert!(!done && said.contains(reason), "kubectl: {said}"),
    }
}

fn pods_of(api: &KubeApi, app: &str) -> Vec<serde_json::Value> {
    api.all("pods", NS)
        .into_iter()
        .filter(|p| p["metadata"]["labels"]["app"] == app)
        .collect()
}

#[tokio::test]
async fn a_statefulset_rolls_out_as_kubectl_says() {
    let api = KubeApi::start().await;
    api.put(
        "statefulsets",
        NS,
        workload("statefulsets", "db", "db", &[("db", "demo/db:1")], 2),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/db:2", None).await.unwrap();
    let (done, said) = follow(&cluster, &w, rules()).await;
    let done = done.unwrap();
    assert_eq!(
        said[0],
        "Waiting for statefulset spec update to be observed..."
    );
    assert!(
        said.iter()
            .any(|m| m == "Waiting for 1 pods to be ready..."),
        "{said:?}"
    );
    assert_eq!(
        done.message,
        "partitioned roll out complete: 2 new pods have been updated..."
    );
    let (kubectl_done, said) = kubectl_rollout(&api, "statefulset/db").await;
    assert!(kubectl_done && said.contains(&done.message), "{said}");
    assert_eq!(done.replicas, 2);
    // Every pod runs the new template, under the same names.
    let pods = pods_of(&api, "db");
    let names: Vec<&str> = pods
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["db-0", "db-1"]);
    assert!(
        pods.iter()
            .all(|p| p["spec"]["containers"][0]["image"] == "demo/db:2")
    );
}

#[tokio::test]
async fn a_fix_sent_to_a_crash_looping_deployment_rolls_out() {
    // Item 1: the old pods crash-loop; the new ones run. Only the new revision's pods are judged.
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 2),
    );
    api.put(
        "pods",
        NS,
        pod("api-old-1", "api", "api", "demo/api:1", "sha256:01"),
    );
    api.put(
        "pods",
        NS,
        pod("api-old-2", "api", "api", "demo/api:1", "sha256:01"),
    );
    api.set_pods_waiting(
        "deployments",
        NS,
        "api",
        "CrashLoopBackOff",
        "back-off 5m0s restarting failed container",
    );
    api.set_pod_log(NS, "api-old-1", "panic: no config\n");
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    let (done, said) = follow(&cluster, &w, rules()).await;
    let done = done.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.message, "deployment \"api\" successfully rolled out");
    oracle_agrees(&api, "deployment/api", Ok(&done.message)).await;
    assert!(
        said.iter()
            .any(|m| m.contains("old replicas are pending termination")),
        "{said:?}"
    );
    assert!(
        pods_of(&api, "api")
            .iter()
            .all(|p| p["spec"]["containers"][0]["image"] == "demo/api:2")
    );
}

#[tokio::test]
async fn new_pods_stuck_on_image_pull_back_off_fail_naming_the_new_pod_with_its_evidence() {
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
    api.pods_of_image("demo/api:2", Fate::PullFails("manifest unknown".into()));
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    let (result, _) = follow(&cluster, &w, rules()).await;
    let err = result.unwrap_err();
    let ClusterError::RolloutFailed {
        reason,
        waiting,
        events,
        ..
    } = &err
    else {
        panic!("expected a roll-out failure, got {err}")
    };
    assert!(
        reason.starts_with("ImagePullBackOff in pod api-"),
        "{reason}"
    );
    assert!(
        !reason.contains("api-7c9-x1"),
        "the old pod is not the new revision: {reason}"
    );
    assert!(
        reason.contains("the node cannot pull demo/api:2"),
        "{reason}"
    );
    assert_eq!(
        waiting.as_deref(),
        Some("ImagePullBackOff: Back-off pulling image \"demo/api:2\"")
    );
    assert!(
        events
            .iter()
            .any(|e| e == "Failed: Failed to pull image \"demo/api:2\": manifest unknown"),
        "{events:?}"
    );
    // The raw evidence is in the message beside the named diagnosis.
    let text = err.to_string();
    assert!(
        text.contains("waiting: ImagePullBackOff") && text.contains("events: "),
        "{text}"
    );
    // The old pod still runs: a Deployment keeps it until the new one is available.
    assert!(api.get("pods", NS, "api-7c9-x1").unwrap()["metadata"]["deletionTimestamp"].is_null());
    oracle_agrees(&api, "deployment/api", Err("")).await;
}

#[tokio::test]
async fn err_image_pull_once_is_transient_and_persisting_it_fails() {
    let api = KubeApi::start().await;
    for (name, image) in [("once", "demo/once:2"), ("stuck", "demo/stuck:2")] {
        api.put(
            "deployments",
            NS,
            workload(
                "deployments",
                name,
                name,
                &[(name, &image.replace(":2", ":1"))],
                1,
            ),
        );
    }
    api.pods_of_image("demo/once:2", Fate::PullFailsOnce("i/o timeout".into()));
    api.pods_of_image("demo/stuck:2", Fate::PullKeepsFailing("i/o timeout".into()));
    let cluster = api.cluster(NS);
    let machines = cluster.machines().await.unwrap();
    let once = machines.iter().find(|w| w.name == "once").unwrap();
    cluster.send(once, "demo/once:2", None).await.unwrap();
    let (done, _) = follow(&cluster, once, rules()).await;
    assert_eq!(
        done.unwrap().message,
        "deployment \"once\" successfully rolled out"
    );

    let stuck = machines.iter().find(|w| w.name == "stuck").unwrap();
    cluster.send(stuck, "demo/stuck:2", None).await.unwrap();
    let (result, _) = follow(&cluster, stuck, rules()).await;
    let err = result.unwrap_err();
    assert!(
        err.to_string().contains("ErrImagePull in pod stuck-"),
        "{err}"
    );
    assert!(err.to_string().contains("i/o timeout"), "{err}");
    oracle_agrees(&api, "deployment/once", Ok("successfully rolled out")).await;
    oracle_agrees(&api, "deployment/stuck", Err("")).await;
}

#[tokio::test]
async fn a_crash_loop_of_the_new_pods_carries_the_log_tail_and_names_a_platform_mismatch() {
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 1),
    );
    api.pods_of_image(
        "demo/api:2",
        Fate::Crashes("exec /app: exec format error\n".into()),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    let (result, _) = follow(&cluster, &w, rules()).await;
    let err = result.unwrap_err();
    let ClusterError::RolloutFailed {
        reason,
        log_tail,
        waiting,
        ..
    } = &err
    else {
        panic!("{err}")
    };
    assert!(
        reason.starts_with("CrashLoopBackOff in pod api-"),
        "{reason}"
    );
    assert!(reason.contains("platform mismatch"), "{reason}");
    assert_eq!(log_tail.as_deref(), Some("exec /app: exec format error\n"));
    assert!(
        waiting
            .as_deref()
            .unwrap()
            .starts_with("CrashLoopBackOff: back-off"),
        "{waiting:?}"
    );
    oracle_agrees(&api, "deployment/api", Err("")).await;
}

#[tokio::test]
async fn every_terminal_reason_of_kubectl_and_the_kubelet_fails_a_roll_out() {
    for reason in [
        "CreateContainerConfigError",
        "CreateContainerError",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RunContainerError",
    ] {
        let api = KubeApi::start().await;
        api.put(
            "deployments",
            NS,
            workload("deployments", "api", "api", &[("api", "demo/api:1")], 1),
        );
        api.pods_of_image(
            "demo/api:2",
            Fate::Waits(reason.into(), format!("{reason} happened")),
        );
        let cluster = api.cluster(NS);
        let w = cluster.machines().await.unwrap().pop().unwrap();
        cluster.send(&w, "demo/api:2", None).await.unwrap();
        let (result, _) = follow(&cluster, &w, rules()).await;
        let err = result.unwrap_err();
        assert!(
            err.to_string().contains(&format!("{reason} in pod api-")),
            "{err}"
        );
        assert!(
            err.to_string().contains(&format!("{reason} happened")),
            "{err}"
        );
        oracle_agrees(&api, "deployment/api", Err("")).await;
    }
}

#[tokio::test]
async fn a_stale_progress_deadline_does_not_fail_a_new_roll_out() {
    // Item 2: the condition is left from the previous roll-out; kubectl ignores it until the controller
    // observed the new generation (which resets it).
    let api = KubeApi::start().await;
    let mut object = workload("deployments", "api", "api", &[("api", "demo/api:1")], 1);
    object["status"]["conditions"] = json!([{"type": "Progressing", "status": "False",
        "reason": "ProgressDeadlineExceeded", "message": "ReplicaSet \"api-1\" has timed out progressing."}]);
    api.put("deployments", NS, object);
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    let (done, said) = follow(&cluster, &w, rules()).await;
    assert_eq!(
        done.unwrap().message,
        "deployment \"api\" successfully rolled out"
    );
    assert_eq!(
        said[0],
        "Waiting for deployment spec update to be observed..."
    );
    oracle_agrees(&api, "deployment/api", Ok("successfully rolled out")).await;
}

#[tokio::test]
async fn a_roll_out_past_its_progress_deadline_fails_as_kubectl_says() {
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 1),
    );
    // The new pod never gets ready and never says why.
    api.pods_of_image(
        "demo/api:2",
        Fate::Waits("ContainerCreating".into(), String::new()),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    api.pass_progress_deadline("deployments", NS, "api");
    let (result, _) = follow(&cluster, &w, rules()).await;
    let err = result.unwrap_err();
    let ClusterError::RolloutFailed { reason, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(reason, "deployment \"api\" exceeded its progress deadline");
    oracle_agrees(
        &api,
        "deployment/api",
        Err("deployment \"api\" exceeded its progress deadline"),
    )
    .await;

    // Our own deadline (no progress within it) says kubectl's last message.
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 1),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    let zero = FollowRules {
        deadline: Some(Duration::ZERO),
        ..rules()
    };
    let (result, _) = follow(&cluster, &w, zero).await;
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("no progress within 0s: Waiting for deployment spec update to be observed..."),
        "{err}"
    );
}

#[tokio::test]
async fn a_partitioned_statefulset_is_done_when_the_pods_from_the_partition_up_are_updated() {
    // Item 4.
    let api = KubeApi::start().await;
    let mut object = workload("statefulsets", "db", "db", &[("db", "demo/db:1")], 3);
    object["spec"]["updateStrategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 2}});
    api.put("statefulsets", NS, object);
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/db:2", None).await.unwrap();
    let (done, _) = follow(&cluster, &w, rules()).await;
    assert_eq!(
        done.unwrap().message,
        "partitioned roll out complete: 1 new pods have been updated..."
    );
    oracle_agrees(
        &api,
        "statefulset/db",
        Ok("partitioned roll out complete: 1 new pods have been updated..."),
    )
    .await;
    let image = |n: &str| api.get("pods", NS, n).unwrap()["spec"]["containers"][0]["image"].clone();
    assert_eq!(
        (image("db-0"), image("db-1"), image("db-2")),
        (json!("demo/db:1"), json!("demo/db:1"), json!("demo/db:2"))
    );
}

#[tokio::test]
async fn on_delete_strategies_say_at_once_that_pods_change_only_when_deleted() {
    // Item 4.
    let api = KubeApi::start().await;
    let mut db = workload("statefulsets", "db", "db", &[("db", "demo/db:1")], 2);
    db["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    api.put("statefulsets", NS, db);
    let mut agent = workload(
        "daemonsets",
        "agent",
        "agent",
        &[("agent", "demo/agent:1")],
        2,
    );
    agent["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
    api.put("daemonsets", NS, agent);
    let cluster = api.cluster(NS);
    for w in cluster.machines().await.unwrap() {
        cluster
            .send(&w, &w.image.replace(":1", ":2"), None)
            .await
            .unwrap();
        let (result, said) = follow(&cluster, &w, rules()).await;
        let err = result.unwrap_err();
        assert!(matches!(err, ClusterError::OnDelete { .. }), "{err}");
        assert!(
            err.to_string()
                .contains("change only when they are deleted"),
            "{err}"
        );
        assert_eq!(said.len(), 1, "judged at once: {said:?}");
        let object = format!("{}/{}", w.kind.as_str().to_lowercase(), w.name);
        oracle_agrees(
            &api,
            &object,
            Err("rollout status is only available for RollingUpdate strategy type"),
        )
        .await;
    }
}

#[tokio::test]
async fn a_daemonset_rolls_out_node_by_node() {
    let api = KubeApi::start().await;
    api.put(
        "daemonsets",
        NS,
        workload(
            "daemonsets",
            "agent",
            "agent",
            &[("agent", "demo/agent:1")],
            3,
        ),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster
        .send(&w, "demo/agent:2", Some("sha256:abc"))
        .await
        .unwrap();
    let (done, said) = follow(&cluster, &w, rules()).await;
    assert_eq!(
        done.unwrap().message,
        "daemon set \"agent\" successfully rolled out"
    );
    oracle_agrees(
        &api,
        "daemonset/agent",
        Ok("daemon set \"agent\" successfully rolled out"),
    )
    .await;
    assert!(
        said.iter()
            .any(|m| m.contains("out of 3 new pods have been updated")),
        "{said:?}"
    );
}

#[tokio::test]
async fn the_artifact_annotation_is_added_as_one_key_beside_the_others() {
    // Item 10: other annotations on the pod template stay.
    let api = KubeApi::start().await;
    let mut object = workload("deployments", "api", "api", &[("api", "demo/api:1")], 1);
    object["spec"]["template"]["metadata"]["annotations"] = json!({"team": "payments"});
    api.put("deployments", NS, object);
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster
        .send(&w, "demo/api:2", Some("sha256:abc"))
        .await
        .unwrap();
    let annotations =
        api.get("deployments", NS, "api").unwrap()["spec"]["template"]["metadata"]["annotations"]
            .clone();
    assert_eq!(
        annotations,
        json!({"team": "payments", "jr2.dev/artifact": "sha256:abc",
            "jr2.dev/artifact-image": "demo/api:2"})
    );
}

#[tokio::test]
async fn events_are_matched_by_kind_and_name_and_ordered_by_time_or_event_time() {
    // Item 10: a Deployment and a Pod may share a name; events.k8s.io-era events carry only eventTime.
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 1),
    );
    let event = |name: &str, kind: &str, reason: &str, times: serde_json::Value| {
        let mut e = json!({"metadata": {"name": name},
            "involvedObject": {"kind": kind, "name": "api", "namespace": NS},
            "reason": reason, "message": reason, "type": "Warning"});
        for (k, v) in times.as_object().unwrap() {
            e[k] = v.clone();
        }
        e
    };
    api.put_event(
        NS,
        event(
            "e1",
            "Deployment",
            "Second",
            json!({"eventTime": "2026-01-01T00:00:02.000000Z"}),
        ),
    );
    api.put_event(
        NS,
        event(
            "e2",
            "Deployment",
            "First",
            json!({"lastTimestamp": "2026-01-01T00:00:01Z"}),
        ),
    );
    api.put_event(
        NS,
        event(
            "e3",
            "Pod",
            "NotMine",
            json!({"lastTimestamp": "2026-01-01T00:00:03Z"}),
        ),
    );
    api.put_event(
        NS,
        event(
            "e4",
            "Deployment",
            "Third",
            json!({"lastTimestamp": "2026-01-01T00:00:04Z"}),
        ),
    );
    api.pods_of_image(
        "demo/api:2",
        Fate::Waits("ContainerCreating".into(), String::new()),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    api.pass_progress_deadline("deployments", NS, "api");
    let (result, _) = follow(&cluster, &w, rules()).await;
    let ClusterError::RolloutFailed { events, .. } = result.unwrap_err() else {
        panic!()
    };
    assert_eq!(events, ["First: First", "Second: Second", "Third: Third"]);
}

#[tokio::test]
async fn a_missing_verb_is_refused_naming_verb_resource_and_namespace() {
    // Item 7: the built-in edit role cannot patch the namespace object.
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    api.identity(
        "alice",
        &[
            ("get", "namespaces"),
            ("list", "deployments"),
            ("patch", "deployments"),
        ],
    );
    let cluster = api.cluster(NS);
    let err = cluster
        .check_access(&[
            Needed::on_namespace("patch", NS),
            Needed::namespaced("patch", "apps", "deployments"),
            Needed::namespaced("patch", "apps", "statefulsets"),
        ])
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ClusterError::Forbidden { .. }), "{text}");
    assert!(
        text.contains("cannot patch namespaces \"mesh-demo\""),
        "{text}"
    );
    assert!(
        text.contains("cannot patch statefulsets (API group apps) in namespace \"mesh-demo\""),
        "{text}"
    );
    assert!(!text.contains("cannot patch deployments"), "{text}");
    assert!(text.contains("RBAC"), "{text}");
    assert_eq!(
        api.requests("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"),
        3
    );

    // The write itself is 403 with the apiserver's message, never a Debug dump of the Status.
    let err = cluster
        .stamp_record(&record(&[("api", entry("demo/api:a", "sha256:0a"))]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("namespaces \"mesh-demo\" is forbidden: User \"alice\" cannot patch resource \"namespaces\" in API group \"\" in the namespace \"mesh-demo\" (Forbidden, HTTP 403)"),
        "{err}"
    );
    assert!(
        !err.contains("Status {") && !err.contains("ErrorResponse"),
        "{err}"
    );
}

#[tokio::test]
async fn lists_follow_continue_and_start_over_when_it_expired() {
    // Item 10: 1200 pods come in chunks of 500; an expired continue token (410) restarts the list.
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "big", "big", &[("app", "demo/big:1")], 1200),
    );
    for i in 0..1200 {
        api.put(
            "pods",
            NS,
            pod(
                &format!("big-{i:04}"),
                "big",
                "app",
                "demo/big:1",
                &format!("sha256:{:064x}", i % 3),
            ),
        );
    }
    let cluster = api.cluster(NS);
    api.reset_counts();
    let machines = cluster.machines().await.unwrap();
    assert_eq!(machines[0].running_digests.len(), 3);
    assert_eq!(api.requests(&format!("/api/v1/namespaces/{NS}/pods")), 3);

    api.reset_counts();
    api.expire_next_continue();
    let machines = cluster.machines().await.unwrap();
    assert_eq!(machines[0].running_digests.len(), 3);
    assert_eq!(api.responses_with(410), 1);
    assert_eq!(api.requests(&format!("/api/v1/namespaces/{NS}/pods")), 5);
}

#[tokio::test]
async fn a_request_that_gets_no_answer_times_out() {
    // Item 5: a server that accepts and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let _hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let cluster = meshtop::backends::cluster::Cluster::from_client(client, "hung", NS)
        .with_request_timeout(Duration::from_millis(200));
    let err = cluster.read_record().await.unwrap_err();
    assert!(matches!(err, ClusterError::Timeout { .. }), "{err}");
    assert!(err.to_string().contains("got no answer"), "{err}");
}

#[tokio::test]
async fn a_kind_loaded_workload_runs_the_artifact_written_on_its_pods_revision() {
    // Item 8: containerd reports the digest it computed at import, never Docker's image id; the pods of
    // the revision meshtop sent carry the artifact it wrote on their template.
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload(
            "deployments",
            "web",
            "web",
            &[("app", "demo/web:aaaaaaaaaaaa-amd64")],
            2,
        ),
    );
    let cluster = api.cluster(NS).with_loaded_images(true);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    let artifact = format!("sha256:{}", "ab".repeat(32));
    cluster
        .send(&w, "demo/web:bbbbbbbbbbbb-amd64", Some(&artifact))
        .await
        .unwrap();
    let (done, _) = follow(&cluster, &w, rules()).await;
    done.unwrap();
    let pods = pods_of(&api, "web");
    assert!(pods.iter().all(|p| {
        p["status"]["containerStatuses"][0]["imageID"]
            .as_str()
            .unwrap()
            .contains("@sha256:")
            && !p["status"]["containerStatuses"][0]["imageID"]
                .as_str()
                .unwrap()
                .contains(&"ab".repeat(32))
    }));
    let machines = cluster.machines().await.unwrap();
    assert_eq!(machines[0].running_digests, vec![artifact.clone()]);
    oracle_agrees(&api, "deployment/web", Ok("successfully rolled out")).await;
    // Where images do not arrive by `kind load`, the annotation says nothing: the imageID does.
    let pulled = api.cluster(NS).machines().await.unwrap();
    assert!(
        !pulled[0].running_digests.contains(&artifact),
        "{:?}",
        pulled[0].running_digests
    );

    // Someone sets another image by hand (the annotation stays on the template): not believed any more.
    let mut object = api.get("deployments", NS, "web").unwrap();
    object["spec"]["template"]["spec"]["containers"][0]["image"] = json!("other/thing:1");
    object["metadata"]["generation"] = json!(3);
    api.put("deployments", NS, object);
    api.settle("deployments", NS, "web");
    let machines = cluster.machines().await.unwrap();
    assert!(
        !machines[0].running_digests.contains(&artifact),
        "{:?}",
        machines[0].running_digests
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_is_the_oracle_of_the_test_server() {
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 2),
    );
    let (done, said) = kubectl_rollout(&api, "deployment/api").await;
    assert!(done, "{said}");
    assert!(
        said.contains("deployment \"api\" successfully rolled out"),
        "{said}"
    );
}

#[tokio::test]
async fn the_deadline_follows_the_workloads_progress_deadline_seconds() {
    // Item 5: no deadline given: the Deployment's own progressDeadlineSeconds (here 0) is it.
    let api = KubeApi::start().await;
    let mut object = workload("deployments", "api", "api", &[("api", "demo/api:1")], 1);
    object["spec"]["progressDeadlineSeconds"] = json!(0);
    api.put("deployments", NS, object);
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    let workload_deadline = FollowRules {
        deadline: None,
        ..rules()
    };
    let (result, _) = follow(&cluster, &w, workload_deadline).await;
    let err = result.unwrap_err().to_string();
    assert!(err.contains("no progress within 0s"), "{err}");
    assert_eq!(
        meshtop::backends::cluster::DEFAULT_PROGRESS_DEADLINE,
        Duration::from_secs(600)
    );
}

#[tokio::test]
async fn a_role_that_cannot_list_replica_sets_still_gets_kubectls_verdict() {
    // The diagnosis is best effort: the README's older Role had no replicasets.
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 1),
    );
    api.identity(
        "old-role",
        &[
            ("get", "deployments"),
            ("list", "deployments"),
            ("list", "statefulsets"),
            ("list", "daemonsets"),
            ("patch", "deployments"),
            ("list", "pods"),
        ],
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    let (done, _) = follow(&cluster, &w, rules()).await;
    assert_eq!(
        done.unwrap().message,
        "deployment \"api\" successfully rolled out"
    );
    assert!(api.responses_with(403) >= 1);
}

// ---- the test server as strict as an apiserver, its controllers as the real ones (issue 31) ----

/// A Deployment of `replicas` pods rolling with this surge and unavailability, running `image`.
fn rolling_deployment(
    name: &str,
    image: &str,
    replicas: i32,
    surge: i32,
    unavailable: i32,
) -> serde_json::Value {
    let mut d = workload("deployments", name, name, &[("app", image)], replicas);
    d["spec"]["strategy"] = json!({"type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}});
    d
}

/// A test server holding `deployment` in NS, and `image` sent to it (nothing stepped yet).
async fn sent_to(
    deployment: serde_json::Value,
    image: &str,
) -> (
    KubeApi,
    meshtop::backends::cluster::Cluster,
    meshtop::backends::cluster::Workload,
) {
    let api = KubeApi::start().await;
    api.put("deployments", NS, deployment);
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, image, None).await.unwrap();
    (api, cluster, w)
}

#[tokio::test]
async fn a_send_is_followed_through_a_surge_of_one_and_no_unavailability() {
    // rolling.go: never more than replicas + maxSurge pods asked for, never fewer than replicas −
    // maxUnavailable available; one new pod at a time. (The old test server made all new pods at once
    // and said "0 out of 3" then "3 old replicas are pending termination": never "1 out of 3".)
    let (api, cluster, w) = sent_to(
        rolling_deployment("api", "demo/api:1", 3, 1, 0),
        "demo/api:2",
    )
    .await;
    let (done, said) = follow(&cluster, &w, rules()).await;
    assert_eq!(
        done.unwrap().message,
        "deployment \"api\" successfully rolled out"
    );
    for wanted in [
        "Waiting for deployment \"api\" rollout to finish: 1 out of 3 new replicas have been updated...",
        "Waiting for deployment \"api\" rollout to finish: 2 out of 3 new replicas have been updated...",
    ] {
        assert!(
            said.iter().any(|m| m == wanted),
            "{wanted:?} never said: {said:?}"
        );
    }
    let trace = api.trace(NS, "api");
    assert!(trace.len() >= 6, "{trace:?}");
    for (asked, available, _) in &trace {
        assert!(
            *asked <= 4,
            "more than replicas + maxSurge asked for: {trace:?}"
        );
        assert!(
            *available >= 3,
            "fewer than replicas − maxUnavailable available: {trace:?}"
        );
    }
    assert!(
        trace.iter().any(|(asked, ..)| *asked == 4),
        "the surge was never used: {trace:?}"
    );
    let d = api.get("deployments", NS, "api").unwrap();
    let status = &d["status"];
    let available = common::kube_controllers::condition(status, "Available");
    let progressing = common::kube_controllers::condition(status, "Progressing");
    assert_eq!(
        (&available["status"], &available["reason"]),
        (&json!("True"), &json!("MinimumReplicasAvailable")),
        "{d}"
    );
    assert_eq!(
        (&progressing["status"], &progressing["reason"]),
        (&json!("True"), &json!("NewReplicaSetAvailable")),
        "{d}"
    );
    assert!(
        progressing["message"]
            .as_str()
            .unwrap()
            .ends_with("has successfully progressed."),
        "{d}"
    );
    oracle_agrees(&api, "deployment/api", Ok("successfully rolled out")).await;
    let pods = pods_of(&api, "api");
    assert_eq!(pods.len(), 3, "{pods:?}");
    assert!(
        pods.iter()
            .all(|p| p["spec"]["containers"][0]["image"] == "demo/api:2")
    );
}

#[tokio::test]
async fn a_pod_is_available_only_after_min_ready_seconds() {
    // podutil.IsPodAvailable: Ready for minReadySeconds. (The old server counted every ready pod as
    // available at once: "0 of 1 updated replicas are available" never showed.)
    let mut d = rolling_deployment("api", "demo/api:1", 1, 0, 1);
    d["spec"]["minReadySeconds"] = json!(5);
    let (api, cluster, w) = sent_to(d, "demo/api:2").await;
    let (done, said) = follow(&cluster, &w, rules()).await;
    done.unwrap();
    assert!(
        said.iter().any(|m| m
            == "Waiting for deployment \"api\" rollout to finish: 0 of 1 updated replicas are available..."),
        "{said:?}"
    );
    // Ready for less than 5 s of the test's clock (one second a step): not available yet.
    let trace = api.trace(NS, "api");
    let waiting = trace
        .iter()
        .filter(|(asked, available, updated)| (*asked, *available, *updated) == (1, 0, 1))
        .count();
    assert!(waiting >= 4, "{trace:?}");
}

#[tokio::test]
async fn pods_that_lag_the_template_are_read_by_what_they_run() {
    // The new pods are never scheduled; with maxUnavailable 0 the old ones keep running v1 while the
    // template names v2. meshtop reads what the pods run (their imageIDs), not what the template says.
    let api = KubeApi::start().await;
    let v1 = format!("demo/api@sha256:{}", "11".repeat(32));
    let v2 = format!("demo/api@sha256:{}", "22".repeat(32));
    api.put("deployments", NS, rolling_deployment("api", &v1, 2, 1, 0));
    api.pods_of_image(
        &v2,
        Fate::Unschedulable("0/1 nodes are available: 1 Insufficient cpu.".into()),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, &v2, None).await.unwrap();
    api.settle("deployments", NS, "api");
    let machines = cluster.machines().await.unwrap();
    assert_eq!(machines[0].image, v2, "the template names v2");
    assert_eq!(
        machines[0].running_digests,
        vec![format!("sha256:{}", "11".repeat(32))],
        "the pods run v1"
    );
    // One surge pod Pending, the two old ones running (the old server made two new pods at once).
    let pods = pods_of(&api, "api");
    assert_eq!(pods.len(), 3, "{pods:?}");
    let pending: Vec<_> = pods
        .iter()
        .filter(|p| p["status"]["phase"] == "Pending")
        .collect();
    assert_eq!(pending.len(), 1, "{pods:?}");
    assert_eq!(
        pending[0]["status"]["conditions"][0]["reason"],
        "Unschedulable"
    );
    let d = api.get("deployments", NS, "api").unwrap();
    let available = common::kube_controllers::condition(&d["status"], "Available");
    assert_eq!(
        available["status"], "True",
        "two old pods keep it available: {d}"
    );
    oracle_agrees(
        &api,
        "deployment/api",
        Err("1 out of 2 new replicas have been updated"),
    )
    .await;
}

#[tokio::test]
async fn both_image_id_forms_are_read_as_the_digest_the_pod_runs() {
    // cri-dockerd says `docker-pullable://repo@sha256:<manifest>`; containerd `repo@sha256:<manifest>`,
    // or for an image it loaded rather than pulled the bare image id `sha256:<config>`.
    let manifest = format!("sha256:{}", "33".repeat(32));
    let image_id = format!("sha256:{}", "44".repeat(32));
    for (runtime, loaded, expected) in [
        (
            common::kube_controllers::Runtime::Docker,
            false,
            manifest.clone(),
        ),
        (
            common::kube_controllers::Runtime::Containerd,
            false,
            manifest.clone(),
        ),
        (
            common::kube_controllers::Runtime::Containerd,
            true,
            image_id.clone(),
        ),
    ] {
        let api = KubeApi::start().await;
        api.runtime(runtime);
        let image = format!("demo/api@{manifest}");
        if loaded {
            api.image_loaded("demo/api:2", &image_id);
        }
        api.put(
            "deployments",
            NS,
            rolling_deployment("api", "demo/api:1", 1, 1, 0),
        );
        let cluster = api.cluster(NS);
        let w = cluster.machines().await.unwrap().pop().unwrap();
        let sent = if loaded { "demo/api:2" } else { image.as_str() };
        cluster.send(&w, sent, None).await.unwrap();
        follow(&cluster, &w, rules()).await.0.unwrap();
        let reported = pods_of(&api, "api")[0]["status"]["containerStatuses"][0]["imageID"]
            .as_str()
            .unwrap()
            .to_string();
        match (runtime, loaded) {
            (common::kube_controllers::Runtime::Docker, _) => {
                assert_eq!(reported, format!("docker-pullable://{image}"))
            }
            (_, false) => assert_eq!(reported, image),
            (_, true) => assert_eq!(reported, image_id),
        }
        let machines = cluster.machines().await.unwrap();
        assert_eq!(machines[0].running_digests, vec![expected], "{reported}");
    }
}

#[tokio::test]
async fn a_roll_out_moves_on_while_nobody_reads_it() {
    // A cluster's controllers do not wait for a client: with the clock on, a roll-out finishes while
    // meshtop looks away, and its first look after reads it done and running v2, having seen no state
    // in between. (The old server stepped a workload only when a client read it: nobody reading, the
    // roll-out never moved, and a follow saw every state one read at a time.)
    let (api, cluster, w) = sent_to(
        rolling_deployment("api", "demo/api:1", 3, 1, 0),
        "demo/api:2",
    )
    .await;
    api.start_clock(Duration::from_millis(5));
    // The server's own state, read in the test (not a client's request, which would step it too).
    let sent = api.total_requests();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let d = api.get("deployments", NS, "api").unwrap();
        let count = |field: &str| d["status"][field].as_i64().unwrap_or(0);
        let observed = count("observedGeneration") >= d["metadata"]["generation"].as_i64().unwrap();
        if observed
            && (
                count("replicas"),
                count("updatedReplicas"),
                count("availableReplicas"),
            ) == (3, 3, 3)
        {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the roll-out never moved while nobody read it: {}",
            d["status"]
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(api.total_requests(), sent, "no client read it meanwhile");
    let (done, said) = follow(&cluster, &w, rules()).await;
    assert_eq!(
        done.unwrap().message,
        "deployment \"api\" successfully rolled out"
    );
    assert!(
        !said
            .iter()
            .any(|m| m.contains("out of") || m.contains("are available")),
        "the first look saw it done: {said:?}"
    );
    let v2 = {
        use sha2::Digest;
        format!(
            "sha256:{}",
            hex::encode(sha2::Sha256::digest(b"demo/api:2"))
        )
    };
    let machines = cluster.machines().await.unwrap();
    assert_eq!(machines[0].running_digests, vec![v2]);
}

/// The README's minimal RBAC, parsed from README.md: its Role bound in the mesh's namespace, its
/// ClusterRole on the namespace object (bound cluster-wide, or by a RoleBinding in the namespace itself).
fn readme_bindings(namespace: &str, cluster_wide: bool) -> Vec<common::kube_rules::Binding> {
    use common::kube_rbac::{ClusterRoleBound, ReadmeRbac};
    let bound = if cluster_wide {
        ClusterRoleBound::ClusterWide
    } else {
        ClusterRoleBound::InNamespace
    };
    ReadmeRbac::read().bindings(namespace, bound)
}

fn converge_needs() -> Vec<Needed> {
    vec![
        Needed::on_namespace("get", NS),
        Needed::on_namespace("patch", NS),
        Needed::namespaced("patch", "apps", "deployments"),
        Needed::namespaced("list", "", "pods"),
        Needed::namespaced("create", "coordination.k8s.io", "leases"),
        Needed::namespaced("update", "coordination.k8s.io", "leases"),
    ]
}

#[tokio::test]
async fn the_readmes_rbac_lets_meshtop_ask_and_write_however_the_namespace_role_is_bound() {
    // requestinfo.go: `GET /api/v1/namespaces/<ns>` is authorized in namespace <ns>, so a RoleBinding
    // there counts. meshtop's review used to name no namespace: refused what the write is allowed.
    for cluster_wide in [true, false] {
        let api = KubeApi::start().await;
        api.put_namespace(NS, &[]);
        api.identity_bound("alice", readme_bindings(NS, cluster_wide));
        let cluster = api.cluster(NS);
        cluster
            .check_access(&converge_needs())
            .await
            .unwrap_or_else(|e| panic!("cluster-wide {cluster_wide}: {e}"));
        cluster
            .stamp_record(&record(&[("api", entry("demo/api:a", "sha256:0a"))]))
            .await
            .unwrap_or_else(|e| panic!("cluster-wide {cluster_wide}: {e}"));
        assert_eq!(api.responses_with(403), 0);
    }
}

#[tokio::test]
async fn access_is_matched_by_group_namespace_and_name_as_rbac_matches_it() {
    // rbac.go RuleAllows: verb, API group, resource/subresource and resourceNames all match; a
    // RoleBinding counts in its namespace only. (The old server matched (verb, resource) alone.)
    use common::kube_rules::{Binding, Rule};
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    api.put_namespace("elsewhere", &[]);
    api.identity_bound(
        "bob",
        vec![
            // Leases named in the core group: no lease is granted.
            Binding::Namespace(
                NS.into(),
                vec![Rule::new(&["get", "create", "update"], &[""], &["leases"])],
            ),
            // Another namespace object.
            Binding::Cluster(vec![
                Rule::new(&["get", "patch"], &[""], &["namespaces"]).named(&["elsewhere"]),
            ]),
            // Pods, but not their log; in another namespace only.
            Binding::Namespace(
                "elsewhere".into(),
                vec![Rule::new(&["list", "get"], &[""], &["pods"])],
            ),
        ],
    );
    let cluster = api.cluster(NS);
    let err = cluster
        .check_access(&[
            Needed::namespaced("create", "coordination.k8s.io", "leases"),
            Needed::on_namespace("patch", NS),
            Needed::namespaced("list", "", "pods"),
        ])
        .await
        .unwrap_err()
        .to_string();
    for refused in [
        "cannot create leases (API group coordination.k8s.io) in namespace \"mesh-demo\"",
        "cannot patch namespaces \"mesh-demo\"",
        "cannot list pods in namespace \"mesh-demo\"",
    ] {
        assert!(err.contains(refused), "{refused}: {err}");
    }
    // The requests themselves: 403 with the apiserver's words; the granted ones go through.
    let client = api.client();
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client.clone(), NS);
    let denied = leases
        .get_opt("meshtop-demo")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        denied.contains("leases.coordination.k8s.io \"meshtop-demo\" is forbidden: User \"bob\" cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"mesh-demo\""),
        "{denied}"
    );
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), "elsewhere");
    pods.list(&Default::default()).await.unwrap();
    let log = pods
        .logs("web-0", &Default::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        log.contains(
            "cannot get resource \"pods/log\" in API group \"\" in the namespace \"elsewhere\""
        ),
        "{log}"
    );
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
    namespaces.get("elsewhere").await.unwrap();
    let other = namespaces.get(NS).await.unwrap_err().to_string();
    assert!(
        other.contains(
            "cannot get resource \"namespaces\" in API group \"\" in the namespace \"mesh-demo\""
        ),
        "{other}"
    );
}

#[tokio::test]
async fn annotations_past_256_kib_are_refused_with_the_apiservers_422() {
    // objectmeta.go ValidateAnnotationsSize (the old server stored any size).
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(api.client());
    let big = "x".repeat(256 * 1024);
    let patch = json!({"metadata": {"annotations": {"a": big}}});
    let err = namespaces
        .patch(NS, &Default::default(), &kube::api::Patch::Merge(&patch))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        (status.code, status.reason.as_str()),
        (422, "Invalid"),
        "{err}"
    );
    assert_eq!(
        status.message,
        format!(
            "Namespace \"{NS}\" is invalid: metadata.annotations: Too long: must have at most 262144 bytes"
        )
    );
    // Exactly at the limit (key and value bytes): stored.
    let at = json!({"metadata": {"annotations": {"a": "x".repeat(256 * 1024 - 1)}}});
    namespaces
        .patch(NS, &Default::default(), &kube::api::Patch::Merge(&at))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_record_that_cannot_fit_under_the_limit_is_refused_before_any_write() {
    // Another tool keeps all but 150 bytes of the limit on the namespace: the record cannot fit, not
    // even as an index of shards (~185 bytes); meshtop says so, and neither the namespace is patched
    // (no 422 from the server, the annotations as they were) nor a shard written.
    let api = KubeApi::start().await;
    let other = "y".repeat(262_144 - "other.example/blob".len() - 150);
    api.put_namespace(NS, &[("other.example/blob", other.as_str())]);
    let cluster = api.cluster(NS);
    let entries: Vec<(String, RecordEntry)> = (0..40)
        .map(|n| {
            (
                format!("module-{n}"),
                entry(
                    &format!("demo/module-{n}:{}", "0".repeat(40)),
                    &format!("sha256:{}", "d".repeat(64)),
                ),
            )
        })
        .collect();
    let big: Record = entries.into_iter().collect();
    api.reset_counts();
    let err = cluster.stamp_record(&big).await.unwrap_err();
    assert!(matches!(err, ClusterError::RecordTooLarge { .. }), "{err}");
    let text = err.to_string();
    assert!(
        text.contains("262144 bytes") && text.contains(NS) && text.contains("nothing was written"),
        "{text}"
    );
    assert_eq!(
        api.responses_with(422),
        0,
        "meshtop wrote and the server refused"
    );
    assert!(api.all("configmaps", NS).is_empty(), "a shard was written");
    let ns = api.get("namespaces", "", NS).unwrap();
    assert!(
        ns["metadata"]["annotations"][RECORD_ANNOTATION].is_null(),
        "{}",
        ns["metadata"]["annotations"].as_object().unwrap().len()
    );
    // A small record still fits beside the blob.
    cluster
        .stamp_record(&record(&[("api", entry("demo/api:a", "sha256:0a"))]))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_history_that_outgrows_the_limit_gives_way_and_every_stamp_lands() {
    // Another tool keeps 200 KiB on the namespace; forty modules stamped round after round fill the
    // history past what the limit leaves. meshtop trims the oldest stamps first: every stamp lands,
    // the server refuses none, the newest stamps stay. (The old server stored any size: a history
    // that never gave way passed there, and is refused 422 by an apiserver.)
    use meshtop::backends::cluster::{HISTORY_ANNOTATION, TeamWrite};
    use meshtop::mesh::pin::{PinChange, Stamper, StampsByModule};
    let api = KubeApi::start().await;
    let other = "y".repeat(200 * 1024);
    api.put_namespace(NS, &[("other.example/blob", other.as_str())]);
    let cluster = api.cluster(NS);
    for round in 0..12i64 {
        let entries: Record = (0..40)
            .map(|n| {
                let reference = format!("demo/module-{n}:{round:040}");
                (
                    format!("module-{n}"),
                    entry(&reference, &format!("sha256:{round:064}")),
                )
            })
            .collect();
        let by = Stamper {
            operation_id: format!("op-{round}"),
            kind: OperationKind::Converge,
            short: Some(round),
            host: "host-a".into(),
            pid: 1,
            at_ms: round * 1000,
            from_target: None,
        };
        let write = TeamWrite {
            entries: &entries,
            pins: &PinChange::default(),
            by: &by,
        };
        cluster
            .stamp_team(&write, true)
            .await
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
    }
    assert_eq!(api.responses_with(422), 0, "the server refused a stamp");
    let ns = api.get("namespaces", "", NS).unwrap();
    let annotations = ns["metadata"]["annotations"].as_object().unwrap();
    let total: usize = annotations
        .iter()
        .map(|(k, v)| k.len() + v.as_str().unwrap().len())
        .sum();
    assert!(total <= 262_144, "{total} bytes of annotations");
    let history: StampsByModule =
        serde_json::from_str(annotations[HISTORY_ANNOTATION].as_str().unwrap()).unwrap();
    let kept: usize = history.values().map(Vec::len).sum();
    assert!(
        kept > 0 && kept < 40 * 10,
        "the history gave way, not all of it: {kept}"
    );
    assert!(
        history
            .values()
            .all(|stamps| stamps[0].by.operation_id == "op-11"),
        "the newest stamp of every module stays"
    );
}

#[tokio::test]
async fn unsupported_field_selectors_are_answered_400_as_the_apiserver_does() {
    // pkg/apis/core/v1/conversion.go (pods, events), runtime.DefaultMetaV1FieldSelectorConversion (the rest).
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    let client = api.client();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), NS);
    let err = pods
        .list(&kube::api::ListParams::default().fields("status.hostIP=10.0.0.1"))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        (status.code, status.message.as_str()),
        (400, "field label not supported: status.hostIP")
    );
    pods.list(&kube::api::ListParams::default().fields("status.phase!=Running,spec.nodeName=n1"))
        .await
        .unwrap();
    let events: kube::Api<k8s_openapi::api::core::v1::Event> =
        kube::Api::namespaced(client.clone(), NS);
    events
        .list(
            &kube::api::ListParams::default()
                .fields("involvedObject.kind=Pod,involvedObject.name=web-0"),
        )
        .await
        .unwrap();
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client, NS);
    let err = deployments
        .list(&kube::api::ListParams::default().fields("status.replicas=1"))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        (status.code, status.message.as_str()),
        (
            400,
            "\"status.replicas\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        )
    );
}
