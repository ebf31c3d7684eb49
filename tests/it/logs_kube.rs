//! `meshtop logs` on the Kubernetes target (issue 30), the real binary and the real `kube` client
//! against the API test server's `pods/{name}/log` (`crates/testkit/src/kube_logs.rs`): the current run's
//! lines, the run before a crash (`--previous`), the module's container in a two-container pod (the
//! one a send patches), a pod in back-off's events before its lines, a follow that goes on after a
//! restart, and RBAC without `pods/log` naming the permission. The server's own answers (its 400s)
//! are checked with the `kube` client and `kubectl` as the real apiserver gives them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::kube_api::KubeApi;
use common::kube_mesh::KubeMesh;
use common::kube_objects::workload;
use common::said;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

const POD: &str = "base-1-pod";

fn stdout(output: &std::process::Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The example mesh on the test server with base's one-replica Deployment (container `app`).
async fn mesh(tag: &str) -> (KubeApi, KubeMesh) {
    let api = KubeApi::start().await;
    let k = KubeMesh::new(tag, &api, false, "test-ctx", "");
    k.deploy(&api, "base", "demo/base:1", "sha256:0101");
    (api, k)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_run_is_read_with_its_tail_and_times() {
    let (api, k) = mesh("lkcur").await;
    api.container_prints(&k.namespace, POD, "app", "one\ntwo\n\x1b[31mthree\x1b[0m\n");
    let all = k.run(&["logs", "base"]).await;
    assert!(all.status.success(), "{}", said(&all));
    assert_eq!(stdout(&all), "one\ntwo\nthree\n", "escapes stripped");

    let tail = k.run(&["logs", "base", "--tail", "2"]).await;
    assert_eq!(stdout(&tail), "two\nthree\n", "{}", said(&tail));

    // Times as the kubelet wrote them (RFC3339Nano of the test's clock).
    let timed = k
        .run(&["logs", "base", "--tail", "1", "--timestamps"])
        .await;
    let line = stdout(&timed);
    let (time, text) = line.trim_end().split_once(' ').expect(&line);
    assert_eq!(text, "three", "{line}");
    assert!(
        chrono::DateTime::parse_from_rfc3339(time).is_ok() && time.starts_with("2026-"),
        "{line}"
    );

    // The oracle: kubectl reads the same log from the same server.
    let (ok, kubectl) = api
        .kubectl(&["-n", &k.namespace, "logs", POD, "--tail=2"])
        .await;
    assert!(ok, "{kubectl}");
    assert_eq!(kubectl, "two\n\x1b[31mthree\x1b[0m\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_keeps_the_previous_run_and_a_pod_in_back_off_says_its_events_first() {
    let (api, k) = mesh("lkprev").await;
    let ns = k.namespace.clone();
    // Before any crash there is no previous run: the server's 400, said by meshtop.
    let pods: Api<Pod> = Api::namespaced(api.client(), &ns);
    let none = pods
        .logs(
            POD,
            &LogParams {
                previous: true,
                ..LogParams::default()
            },
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(
        none.contains(&format!(
            "previous terminated container \"app\" in pod \"{POD}\" not found"
        )),
        "{none}"
    );
    api.container_prints(&ns, POD, "app", "starting\n");
    let no_previous = k.run(&["logs", "base", "--previous"]).await;
    assert!(no_previous.status.success(), "{}", said(&no_previous));
    assert!(
        stdout(&no_previous).contains("previous terminated container \"app\""),
        "{}",
        said(&no_previous)
    );

    api.container_prints(&ns, POD, "app", "panic: no config\n");
    api.container_crashes(&ns, POD, "app", 2, "Error");
    // In back-off: the pod's events come first, then the lines of the run that crashed.
    let backing_off = k.run(&["logs", "base"]).await;
    assert!(backing_off.status.success(), "{}", said(&backing_off));
    let text = stdout(&backing_off);
    let lines: Vec<&str> = text.lines().collect();
    let event = lines
        .iter()
        .position(|l| {
            l.starts_with("event: ")
                && l.contains("BackOff: Back-off restarting failed container app")
        })
        .expect(&text);
    let last_words = lines
        .iter()
        .position(|l| *l == "panic: no config")
        .expect(&text);
    assert!(event < last_words, "{text}");
    assert_eq!(lines[last_words - 1], "starting", "{text}");

    api.container_restarts(&ns, POD, "app");
    api.container_prints(&ns, POD, "app", "second run\n");
    let current = k.run(&["logs", "base"]).await;
    assert!(
        stdout(&current).ends_with("──\nsecond run\n"),
        "the previous run's end and this run's start, then its lines: {}",
        said(&current)
    );
    let previous = k.run(&["logs", "base", "--previous"]).await;
    assert!(
        stdout(&previous)
            .starts_with("starting\npanic: no config\n── exited with code 2 (Error) at "),
        "{}",
        said(&previous)
    );
    let (ok, kubectl) = api.kubectl(&["-n", &ns, "logs", POD, "--previous"]).await;
    assert!(ok, "{kubectl}");
    assert_eq!(kubectl, "starting\npanic: no config\n");
    let pod = api.get("pods", &ns, POD).unwrap();
    assert_eq!(pod["status"]["containerStatuses"][0]["restartCount"], 1);
}

/// The pod's container status, as the test server's kubelet reports it.
fn container_status(api: &KubeApi, ns: &str) -> serde_json::Value {
    api.get("pods", ns, POD).unwrap()["status"]["containerStatuses"][0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_pod_says_where_its_previous_run_ended_with_its_exit_code_and_reason() {
    let (api, k) = mesh("lkends").await;
    let ns = k.namespace.clone();
    api.container_prints(&ns, POD, "app", "starting\nallocating\n");
    api.container_crashes(&ns, POD, "app", 137, "OOMKilled");
    let status = container_status(&api, &ns);
    let finished = status["lastState"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap()
        .to_string();
    let ended = format!("── exited with code 137 (OOMKilled) at {finished} ──");

    // In back-off the log read is the run that ended: its end comes after its lines.
    let backing_off = k.run(&["logs", "base"]).await;
    assert!(backing_off.status.success(), "{}", said(&backing_off));
    let text = stdout(&backing_off);
    let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with("event: ")).collect();
    assert_eq!(lines, ["starting", "allocating", ended.as_str()], "{text}");

    // Running again: where the previous run ended, then the new run with its restart count.
    api.container_restarts(&ns, POD, "app");
    api.container_prints(&ns, POD, "app", "second run\n");
    let status = container_status(&api, &ns);
    let started = status["state"]["running"]["startedAt"].as_str().unwrap();
    let current = k.run(&["logs", "base"]).await;
    assert!(current.status.success(), "{}", said(&current));
    assert_eq!(
        stdout(&current),
        format!("{ended}\n── run started {started} (restart count 1) ──\nsecond run\n"),
        "{}",
        said(&current)
    );
    // The run before, as `--previous` reads it, ends with its end.
    let previous = k.run(&["logs", "base", "--previous"]).await;
    assert_eq!(
        stdout(&previous),
        format!("starting\nallocating\n{ended}\n"),
        "{}",
        said(&previous)
    );
    // Scripts read the same end from `--json`.
    let json = k.run(&["logs", "base", "--json"]).await;
    assert!(json.status.success(), "{}", said(&json));
    let exited: Vec<serde_json::Value> = stdout(&json)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["kind"] == "exited")
        .collect();
    assert_eq!(exited.len(), 1, "{}", said(&json));
    assert_eq!(exited[0]["code"], 137);
    assert_eq!(exited[0]["reason"], "OOMKilled");
    assert_eq!(exited[0]["at"], finished.as_str());

    // The oracle: kubectl describe reads the same Last State from the same server.
    let (ok, describe) = api.kubectl(&["-n", &ns, "describe", "pod", POD]).await;
    assert!(ok, "{describe}");
    for words in [
        "Last State:     Terminated",
        "Reason:       OOMKilled",
        "Exit Code:    137",
        "Restart Count:  1",
    ] {
        assert!(describe.contains(words), "{words:?} in {describe}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_container_pod_is_read_at_the_container_a_send_patches() {
    let api = KubeApi::start().await;
    let k = KubeMesh::new("lktwo", &api, false, "test-ctx", "");
    let ns = k.namespace.clone();
    let containers = [("proxy", "envoy/proxy:1.30"), ("app", "demo/base:1")];
    api.put(
        "deployments",
        &ns,
        workload("deployments", "base-1", "base", &containers, 1),
    );
    let statuses: Vec<_> = containers
        .iter()
        .map(|(name, image)| json!({"name": name, "image": image, "imageID": format!("docker-pullable://{image}@sha256:{}", "0".repeat(64)),
            "ready": true, "restartCount": 0, "state": {"running": {}}}))
        .collect();
    api.put(
        "pods",
        &ns,
        json!({"metadata": {"name": POD, "labels": {"app": "base-1"}},
            "spec": {"containers": containers.iter().map(|(n, i)| json!({"name": n, "image": i})).collect::<Vec<_>>()},
            "status": {"phase": "Running", "containerStatuses": statuses}}),
    );
    api.container_prints(&ns, POD, "proxy", "proxy says\n");
    api.container_prints(&ns, POD, "app", "app says\n");

    // The server asks which container, as the apiserver does.
    let pods: Api<Pod> = Api::namespaced(api.client(), &ns);
    let unnamed = pods
        .logs(POD, &LogParams::default())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        unnamed.contains(&format!(
            "a container name must be specified for pod {POD}, choose one of: [proxy app]"
        )),
        "{unnamed}"
    );
    let out = k.run(&["logs", "base"]).await;
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(stdout(&out), "app says\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_streams_new_lines_and_goes_on_after_a_restart() {
    let (api, k) = mesh("lkfollow").await;
    let ns = k.namespace.clone();
    api.container_prints(&ns, POD, "app", "before\n");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env("KUBECONFIG", &k.kubeconfig)
        .arg("--mesh")
        .arg(k.mesh.mesh_file())
        .arg("--state")
        .arg(k.mesh.state())
        .args(["logs", "base", "--follow"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let mut until = async |wanted: &str, seen: &mut Vec<String>| {
        let wait = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                let done = line == wanted;
                seen.push(line);
                if done {
                    return;
                }
            }
            panic!("the follow ended before {wanted:?}: {seen:?}");
        });
        wait.await
            .unwrap_or_else(|_| panic!("the follow never showed {wanted:?}: {seen:?}"));
    };
    until("before", &mut seen).await;
    api.container_prints(&ns, POD, "app", "after it started\n");
    until("after it started", &mut seen).await;
    // A crash ends the server's stream; the restart is a new container the follow picks up.
    api.container_crashes(&ns, POD, "app", 1, "Error");
    let finished = container_status(&api, &ns)["lastState"]["terminated"]["finishedAt"]
        .as_str()
        .unwrap()
        .to_string();
    api.container_restarts(&ns, POD, "app");
    api.container_prints(&ns, POD, "app", "in the new run\n");
    until("in the new run", &mut seen).await;
    assert_eq!(
        seen.iter().filter(|l| l.as_str() == "before").count(),
        1,
        "nothing said twice: {seen:?}"
    );
    // Where the run followed ended, once, before the new run's lines.
    let ended = format!("── exited with code 1 (Error) at {finished} ──");
    let at: Vec<usize> = (0..seen.len()).filter(|i| seen[*i] == ended).collect();
    assert_eq!(at.len(), 1, "{ended:?} once in {seen:?}");
    let after_it = seen.iter().position(|l| l == "after it started").unwrap();
    assert!(after_it < at[0] && at[0] < seen.len() - 1, "{seen:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_pods_log_the_permission_is_named() {
    let (api, k) = mesh("lkrbac").await;
    api.container_prints(&k.namespace, POD, "app", "secret\n");
    api.identity(
        "viewer",
        &[
            ("get", "namespaces"),
            ("list", "deployments"),
            ("list", "statefulsets"),
            ("list", "daemonsets"),
            ("list", "pods"),
            ("list", "events"),
        ],
    );
    let out = k.run(&["logs", "base"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "cannot get pods/log in namespace {:?}",
            k.namespace
        )),
        "{err}"
    );
    assert!(!stdout(&out).contains("secret"), "{}", said(&out));
}
