//! Issue 20: no verdict kubectl would not give, no container meshtop was not asked to touch. On the API
//! test server, whose controllers and kubelet act over time as Kubernetes does (`crates/testkit/src/kube_controllers.rs`),
//! with the machine's real `kubectl rollout status` beside meshtop's verdict:
//! 1. a new pod that crashes once (CrashLoopBackOff, restartCount 1) is shown, not failed;
//! 2. a paused Deployment is said at once, not waited on until the deadline;
//! 3. a workload whose module container cannot be told is refused, never guessed;
//! 4. an image someone reverted while the roll-out ran is reported.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use common::kube_api::KubeApi;
use common::kube_controllers::Fate;
use common::kube_objects::{pod, workload};
use common::{ExampleMesh, said};
use meshtop::backends::cluster::{FollowRules, RECORD_ANNOTATION};
use serde_json::{Value, json};

const NS: &str = "verdicts";

/// The oracle: the machine's own `kubectl rollout status`, given 3 s. (done?, what it said)
async fn kubectl_rollout(api: &KubeApi, object: &str, namespace: &str) -> (bool, String) {
    api.kubectl(&["rollout", "status", object, "-n", namespace, "--timeout=3s"])
        .await
}

/// Read every millisecond; back-offs by the defaults (three restarts, or the same one for 60 s).
fn rules() -> FollowRules {
    FollowRules {
        deadline: Some(Duration::from_secs(300)),
        poll: Duration::from_millis(1),
        transient_grace: Duration::ZERO,
        ..FollowRules::default()
    }
}

/// The one-replica Deployment `web-1` and its pod, running `image` (the pod reporting `image_id`).
fn web_1_runs(api: &KubeApi, namespace: &str, image: &str, image_id: &str) {
    api.put(
        "deployments",
        namespace,
        workload("deployments", "web-1", "web", &[("app", image)], 1),
    );
    api.put(
        "pods",
        namespace,
        pod("web-1-pod", "web-1", "app", image, image_id),
    );
}

/// What a pod pulled from the older image reports.
fn old_id(old: &str) -> String {
    format!("docker-pullable://{old}@sha256:{}", "09".repeat(32))
}

/// A copy of the example mesh on the Kubernetes target of a `kind-t` context (sends name the ref; no
/// registry), whose record names web's new artifact, and a one-replica Deployment `web-1` running an
/// older one.
struct Kind {
    mesh: ExampleMesh,
    namespace: String,
    kubeconfig: PathBuf,
    reference: String,
    old: String,
}

impl Kind {
    fn new(tag: &str, api: &KubeApi) -> Kind {
        let mesh = ExampleMesh::new(tag);
        let namespace = format!("ns-{}", mesh.name);
        let file = mesh.mesh_file();
        let text = std::fs::read_to_string(&file).unwrap();
        let text = text.split("[[machine]]").next().unwrap().replace(
            "kind = \"docker\"",
            &format!("kind = \"kubernetes\"\nnamespace = \"{namespace}\""),
        );
        std::fs::write(&file, text).unwrap();
        let kubeconfig = mesh.dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, api.kubeconfig("kind-t")).unwrap();
        let reference = format!("{}/web:aaaaaaaaaaaa-amd64", mesh.name);
        let record =
            json!({"web": {"ref": reference, "digest": format!("sha256:{}", "ab".repeat(32))}});
        api.put_namespace(&namespace, &[(RECORD_ANNOTATION, &record.to_string())]);
        let old = format!("{}/web:old", mesh.name);
        web_1_runs(api, &namespace, &old, &old_id(&old));
        Kind {
            mesh,
            namespace,
            kubeconfig,
            reference,
            old,
        }
    }

    /// The real binary; a run that outlives `limit` fails the test (meshtop must not wait for a deadline).
    async fn run(&self, args: &[&str], limit: Duration) -> Output {
        let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_meshtop"))
            .env("KUBECONFIG", &self.kubeconfig)
            .arg("--mesh")
            .arg(self.mesh.mesh_file())
            .arg("--state")
            .arg(self.mesh.state())
            .args(args)
            .kill_on_drop(true)
            .output();
        tokio::time::timeout(limit, run)
            .await
            .unwrap_or_else(|_| panic!("meshtop {args:?} still ran after {limit:?}"))
            .unwrap()
    }

    /// `status --json`: machine name → its entry.
    async fn status(&self) -> Value {
        let output = self
            .run(&["status", "--json"], Duration::from_secs(60))
            .await;
        let rows: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("status --json: {e}: {}", said(&output)));
        let mut by_name = serde_json::Map::new();
        for row in rows.as_array().unwrap() {
            by_name.insert(row["name"].as_str().unwrap().to_string(), row.clone());
        }
        Value::Object(by_name)
    }

    fn deployment(&self, api: &KubeApi, name: &str) -> Value {
        api.get("deployments", &self.namespace, name).unwrap()
    }

    fn image(&self, api: &KubeApi, name: &str, index: usize) -> String {
        self.deployment(api, name)["spec"]["template"]["spec"]["containers"][index]["image"]
            .as_str()
            .unwrap()
            .to_string()
    }
}

// ---- 1. a back-off is shown at once and fails only when it persists ----

#[tokio::test]
async fn new_pods_that_crash_once_are_shown_and_roll_out_as_kubectl_says() {
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 2),
    );
    // The new pods exit 1 once (their database is not up yet), back off 10 s, then run and are Ready.
    api.pods_of_image(
        "demo/api:2",
        Fate::CrashesOnce("connecting to db:5432\nerror: connection refused\nexit 1\n".into()),
    );
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    let said = std::sync::Mutex::new(Vec::new());
    let result = cluster
        .follow_rollout(&w, rules(), &|m| said.lock().unwrap().push(m.to_string()))
        .await;
    let said = said.into_inner().unwrap();
    let done = result.unwrap_or_else(|e| panic!("meshtop failed it: {e}\n{said:#?}"));
    assert_eq!(done.message, "deployment \"api\" successfully rolled out");
    // The back-off was shown as it happened: reason, restart count, the container's last log lines.
    let shown = said
        .iter()
        .find(|m| m.contains("CrashLoopBackOff"))
        .unwrap_or_else(|| panic!("the crash was never shown: {said:#?}"));
    assert!(
        shown.contains("container api: CrashLoopBackOff, 1 restart(s)")
            && shown
                .contains("last log: connecting to db:5432 / error: connection refused / exit 1"),
        "{shown}"
    );
    // The pods did crash: each new one restarted once and is Ready.
    let new_pods: Vec<Value> = api
        .all("pods", NS)
        .into_iter()
        .filter(|p| p["spec"]["containers"][0]["image"] == "demo/api:2")
        .collect();
    assert_eq!(new_pods.len(), 2);
    for p in &new_pods {
        let status = &p["status"]["containerStatuses"][0];
        assert_eq!(
            (status["restartCount"].clone(), status["ready"].clone()),
            (json!(1), json!(true)),
            "{p}"
        );
    }
    let (kubectl_done, kubectl_said) = kubectl_rollout(&api, "deployment/api", NS).await;
    assert!(
        kubectl_done && kubectl_said.contains(&done.message),
        "kubectl: {kubectl_said}"
    );
}

#[tokio::test]
async fn a_crash_loop_that_persists_fails_at_the_third_restart_while_kubectl_still_waits() {
    let api = KubeApi::start().await;
    api.put(
        "deployments",
        NS,
        workload("deployments", "api", "api", &[("api", "demo/api:1")], 1),
    );
    api.pods_of_image("demo/api:2", Fate::Crashes("panic: no config\n".into()));
    let cluster = api.cluster(NS);
    let w = cluster.machines().await.unwrap().pop().unwrap();
    cluster.send(&w, "demo/api:2", None).await.unwrap();
    let said = std::sync::Mutex::new(Vec::new());
    let result = cluster
        .follow_rollout(&w, rules(), &|m| said.lock().unwrap().push(m.to_string()))
        .await;
    let said = said.into_inner().unwrap();
    let err = result
        .expect_err("a crash loop never rolls out")
        .to_string();
    assert!(
        err.contains("CrashLoopBackOff in pod api-") && err.contains("(restarted 3 times)"),
        "{err}"
    );
    assert!(err.contains("log tail: panic: no config"), "{err}");
    // Each restart was shown before the verdict.
    for n in 1..=2 {
        assert!(
            said.iter()
                .any(|m| m.contains(&format!("CrashLoopBackOff, {n} restart(s)"))),
            "{said:#?}"
        );
    }
    // kubectl judges the status counts only: still waiting (it would wait until the progress deadline).
    let (kubectl_done, kubectl_said) = kubectl_rollout(&api, "deployment/api", NS).await;
    assert!(
        !kubectl_done && kubectl_said.contains("Waiting for deployment \"api\" rollout to finish"),
        "kubectl: {kubectl_said}"
    );
}

#[tokio::test]
async fn a_modules_back_off_rules_are_set_in_the_mesh_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mesh.toml");
    std::fs::create_dir(dir.path().join("web")).unwrap();
    std::fs::write(dir.path().join("web/Dockerfile"), "FROM scratch\n").unwrap();
    let with = |keys: &str| {
        format!(
            "[mesh]\nname = \"m\"\n\n[target]\nkind = \"kubernetes\"\nnamespace = \"m\"\n\n\
             [[module]]\nname = \"web\"\ncontext = \"web\"\n{keys}"
        )
    };
    std::fs::write(&file, with("")).unwrap();
    let module = |mesh: &meshtop::mesh::model::Mesh| {
        let web = mesh.module("web").unwrap();
        format!("{:?}", web.backoff)
    };
    let mesh = meshtop::workspace::file::load(&file).unwrap();
    assert!(
        module(&mesh).contains("restarts: 3") && module(&mesh).contains("60s"),
        "{}",
        module(&mesh)
    );
    std::fs::write(
        &file,
        with("rollout_restarts = 5\nrollout_backoff = \"2m\"\n"),
    )
    .unwrap();
    let mesh = meshtop::workspace::file::load(&file).unwrap();
    assert!(
        module(&mesh).contains("restarts: 5") && module(&mesh).contains("120s"),
        "{}",
        module(&mesh)
    );
    for (keys, names) in [
        ("rollout_restarts = 0\n", "rollout_restarts"),
        ("rollout_restarts = \"3\"\n", "rollout_restarts"),
        ("rollout_backoff = \"soon\"\n", "rollout_backoff"),
    ] {
        std::fs::write(&file, with(keys)).unwrap();
        let err = meshtop::workspace::file::load(&file)
            .unwrap_err()
            .to_string();
        assert!(err.contains(names) && err.contains("web"), "{keys}: {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_shows_a_crash_on_its_live_line_and_succeeds_when_it_passes() {
    let api = KubeApi::start().await;
    let k = Kind::new("vc", &api);
    api.pods_of_image(
        &k.reference,
        Fate::CrashesOnce("waiting for the database\n".into()),
    );
    let output = k
        .run(&["send", "web", "--yes"], Duration::from_secs(120))
        .await;
    let text = said(&output);
    assert!(output.status.success(), "{text}");
    assert!(
        text.contains("container app: CrashLoopBackOff, 1 restart(s)")
            && text.contains("last log: waiting for the database"),
        "{text}"
    );
    let (done, kubectl_said) = kubectl_rollout(&api, "deployment/web-1", &k.namespace).await;
    assert!(
        done && kubectl_said.contains("successfully rolled out"),
        "kubectl: {kubectl_said}"
    );
}

// ---- 2. a paused Deployment ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_deployment_is_patched_and_said_at_once_not_waited_on() {
    let api = KubeApi::start().await;
    let k = Kind::new("vp", &api);
    // Someone ran `kubectl rollout pause deployment/web-1`.
    let mut paused = k.deployment(&api, "web-1");
    paused["spec"]["paused"] = json!(true);
    api.put("deployments", &k.namespace, paused);
    api.settle("deployments", &k.namespace, "web-1");
    let status = k.status().await;
    assert_eq!(status["web-1"]["state"], "paused", "{status}");

    let started = Instant::now();
    let output = k
        .run(&["send", "web", "--yes", "--json"], Duration::from_secs(60))
        .await;
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    // The list the person confirms (stderr, before anything is patched) says it too.
    let listed = String::from_utf8_lossy(&output.stderr);
    let before = listed.split("started send").next().unwrap_or_default();
    assert!(
        before.contains(&format!(
            "paused: its image is patched, but nothing rolls out until it is resumed (kubectl rollout resume deployment/web-1 -n {})",
            k.namespace
        )),
        "{listed}"
    );
    let outcomes: Value = serde_json::from_slice(&output.stdout).unwrap();
    let message = outcomes[0]["message"].as_str().unwrap();
    assert!(
        message.contains("is paused")
            && message.contains(&format!(
                "kubectl rollout resume deployment/web-1 -n {}",
                k.namespace
            )),
        "{message}"
    );
    // Patched as `kubectl set image` would; the controller made no ReplicaSet for it.
    assert_eq!(k.image(&api, "web-1", 0), k.reference);
    api.settle("deployments", &k.namespace, "web-1");
    assert_eq!(api.all("replicasets", &k.namespace).len(), 1);
    let deployment = k.deployment(&api, "web-1");
    let progressing = common::kube_controllers::condition(&deployment["status"], "Progressing");
    assert_eq!(
        (&progressing["status"], &progressing["reason"]),
        (&json!("Unknown"), &json!("DeploymentPaused")),
        "{deployment}"
    );
    // kubectl would wait for ever: the status counts never move.
    let (done, kubectl_said) = kubectl_rollout(&api, "deployment/web-1", &k.namespace).await;
    assert!(
        !done
            && kubectl_said.contains(
                "Waiting for deployment \"web-1\" rollout to finish: 0 out of 1 new replicas have been updated"
            ),
        "kubectl: {kubectl_said}"
    );
    // The machine did not move, and reads so.
    let output = k.run(&["status"], Duration::from_secs(60)).await;
    let text = said(&output);
    assert!(text.contains("held (paused)"), "{text}");
}

// ---- 3. which container is the module's ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_whose_module_container_cannot_be_told_is_refused_before_any_write() {
    let api = KubeApi::start().await;
    let k = Kind::new("vu", &api);
    // Labelled for web, two containers and an init container, none of whose images is web's.
    let mut two = workload(
        "deployments",
        "web-2",
        "web",
        &[
            ("proxy", "registry.example/envoyproxy/envoy:v1.29"),
            ("server", "registry.example/myorg/server:1"),
        ],
        1,
    );
    two["spec"]["template"]["spec"]["initContainers"] =
        json!([{"name": "migrate", "image": "registry.example/myorg/migrate:1"}]);
    api.put("deployments", &k.namespace, two);
    let status = k.status().await;
    assert_eq!(status["web-2"]["state"], "unknown_container", "{status}");
    assert_eq!(status["web-1"]["state"], "behind", "{status}");
    let output = k.run(&["status"], Duration::from_secs(60)).await;
    assert!(
        said(&output).contains("unknown container"),
        "{}",
        said(&output)
    );
    // With web-1 current, the machine meshtop cannot judge is what `--exit-code` counts.
    let artifact = format!("sha256:{}", "ab".repeat(32));
    web_1_runs(
        &api,
        &k.namespace,
        &k.reference,
        &format!("docker-pullable://{}@{artifact}", k.reference),
    );
    assert_eq!(k.status().await["web-1"]["state"], "current");
    let output = k
        .run(&["status", "--exit-code"], Duration::from_secs(60))
        .await;
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    assert!(
        said(&output).contains("1 unknown container"),
        "{}",
        said(&output)
    );
    web_1_runs(&api, &k.namespace, &k.old, &old_id(&k.old));

    let output = k
        .run(&["send", "web", "--yes", "--json"], Duration::from_secs(60))
        .await;
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    let text = said(&output);
    for named in [
        "proxy (registry.example/envoyproxy/envoy:v1.29)",
        "server (registry.example/myorg/server:1)",
        "init container migrate (registry.example/myorg/migrate:1)",
        &format!(
            "kubectl annotate deployment/web-2 -n {} jr2.dev/container=<container>",
            k.namespace
        ),
    ] {
        assert!(text.contains(named), "{named}: {text}");
    }
    // Nothing was written: neither the workload it cannot judge, nor the other machine of the send.
    assert_eq!(
        k.image(&api, "web-2", 0),
        "registry.example/envoyproxy/envoy:v1.29"
    );
    assert_eq!(k.image(&api, "web-2", 1), "registry.example/myorg/server:1");
    assert_eq!(k.deployment(&api, "web-2")["metadata"]["generation"], 1);
    assert_eq!(k.image(&api, "web-1", 0), k.old);

    // Once the annotation names the module's container, the send goes there and only there.
    let mut named = k.deployment(&api, "web-2");
    named["metadata"]["annotations"] = json!({"jr2.dev/container": "server"});
    api.put("deployments", &k.namespace, named);
    let status = k.status().await;
    assert_eq!(status["web-2"]["state"], "behind", "{status}");
}

// ---- 4. an image changed while the roll-out ran ----

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_reverted_while_the_roll_out_ran_is_reported_and_judged_by_what_runs() {
    let api = KubeApi::start().await;
    let k = Kind::new("vr", &api);
    // Two controller steps after meshtop's image landed, someone sets the old one back.
    api.someone_sets_image(
        "deployments",
        &k.namespace,
        "web-1",
        "app",
        (&k.reference, &k.old),
        2,
    );
    let output = k
        .run(
            &["send", "web", "--yes", "--json"],
            Duration::from_secs(120),
        )
        .await;
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    let outcomes: Value = serde_json::from_slice(&output.stdout).unwrap();
    let message = outcomes[0]["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "someone changed the image to {} while the roll-out ran",
            k.old
        )),
        "{message}"
    );
    // kubectl (without --revision) calls it done: it judges whatever the template names now.
    let (done, kubectl_said) = kubectl_rollout(&api, "deployment/web-1", &k.namespace).await;
    assert!(
        done && kubectl_said.contains("successfully rolled out"),
        "kubectl: {kubectl_said}"
    );
    // meshtop judges the machine by what runs: the old artifact, behind.
    let status = k.status().await;
    assert_eq!(status["web-1"]["state"], "behind", "{status}");
}

#[test]
fn the_dashboards_send_confirm_says_a_machine_is_paused_before_it_is_confirmed() {
    use common::dashboard::{demo_machines, demo_record, demo_state_on, machine, polled};
    use meshtop::app::msg::{Msg, SourceData, SourceId};
    use meshtop::app::update::update;
    use meshtop::mesh::behind::MachineState;
    use meshtop::mesh::model::Target;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    let mut state = demo_state_on(
        Target::Kubernetes {
            namespace: "demo".into(),
            context: None,
        },
        false,
    );
    let mut machines: Vec<_> = demo_machines()
        .into_iter()
        .filter(|m| m.module != "worker")
        .collect();
    // The row as the Kubernetes target lists a paused workload: what to know before a send is its
    // own word (a_paused_deployment_is_patched_and_said_at_once_not_waited_on reads it from the
    // target); the confirm says it for that machine.
    let mut paused = machine("worker-1", "worker", 'd', MachineState::Paused);
    paused.kind = "Deployment".into();
    paused.display_name = "deployment/worker-1".into();
    paused.before_send = Some(
        "paused: its image is patched, but nothing rolls out until it is resumed (kubectl rollout resume deployment/worker-1 -n demo)".into(),
    );
    machines.push(paused);
    update(
        &mut state,
        polled(
            SourceId::Machines,
            0,
            SourceData::MachinesAgainst(demo_record(), machines),
        ),
    );
    let key = |state: &mut _, c: char| {
        let modifiers = if c.is_ascii_uppercase() {
            KeyModifiers::SHIFT
        } else {
            KeyModifiers::NONE
        };
        update(state, Msg::Key(KeyEvent::new(KeyCode::Char(c), modifiers)));
    };
    key(&mut state, 'G'); // worker
    key(&mut state, 's');
    let confirm = state.confirm.clone().expect("s asks first");
    assert!(
        confirm.lines.iter().any(|l| l.contains(
            "paused: its image is patched, but nothing rolls out until it is resumed (kubectl rollout resume deployment/worker-1 -n demo)"
        )),
        "{:?}",
        confirm.lines
    );
}
