//! Who can write each door is what the README's RBAC says (issue 36): every Kubernetes command runs
//! end to end under exactly the README's Role and ClusterRole, parsed from README.md
//! (`common/kube_rbac.rs`), on the API test server with RBAC enforced on every request as the
//! apiserver does (`crates/testkit/src/kube_rules.rs`), the real binary, the real registry (127.0.0.1:5000) and
//! the real daemon. The read-only commands run under the README's read-only variant; and every verb
//! of the README, taken out alone, stops the same run (a README that forgot it fails here).
//! Besides its exit, a command passes only if the server refused it nothing: a best-effort read
//! (events, ReplicaSets) refused in silence is a verb the README forgot all the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use common::kube_api::KubeApi;
use common::kube_controllers::Fate;
use common::kube_mesh::{KubeMesh, REGISTRY, old_id};
use common::kube_objects::{pod, workload};
use common::kube_rbac::{ClusterRoleBound, Grant, ReadmeRbac};
use common::kube_rules::Attributes;
use common::said;
use common::tmux::{Tmux, row};
use meshtop::backends::registry::{Published, RegistryClient};
use meshtop::mesh::model::Registry;
use serde_json::Value;

/// Where a run of the commands stopped: the step, why, what was said, what the server refused.
#[derive(Debug)]
struct Stopped {
    step: String,
    why: String,
    said: String,
    refused: Vec<Attributes>,
}

impl std::fmt::Display for Stopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}\nrefused: {:?}\n{}",
            self.step, self.why, self.refused, self.said
        )
    }
}

type Step<T> = Result<T, Stopped>;

/// The example mesh on the Kubernetes target with `trust` (a key made here), its modules' workloads
/// of all three kinds: web a Deployment, worker a StatefulSet, api a DaemonSet (policy record).
struct Scene {
    api: KubeApi,
    k: KubeMesh,
    key: PathBuf,
}

impl Scene {
    async fn new(tag: &str, rbac: &ReadmeRbac, bound: ClusterRoleBound) -> Scene {
        common::local_registry::require_registry().await;
        let api = KubeApi::start().await;
        let k = KubeMesh::new(tag, &api, true, "test-ctx", "");
        let key = trusting(&k);
        let ns = k.namespace.clone();
        for (n, module, kind, pod_name) in [
            (1, "web", "deployments", "web-1-7d9c5-abcde"),
            (2, "worker", "statefulsets", "worker-1-0"),
            (3, "api", "daemonsets", "api-1-xk2p9"),
        ] {
            let name = format!("{module}-1");
            let image = format!("{REGISTRY}/{}/{module}:old", k.name());
            api.put(
                kind,
                &ns,
                workload(kind, &name, module, &[("app", &image)], 1),
            );
            api.put("pods", &ns, pod(pod_name, &name, "app", &image, &old_id(n)));
        }
        // Another tool's annotation leaves the record too little room on the namespace: it lives in
        // shards (ConfigMaps), and a stamp that crashed long ago left one behind for gc.
        let blob = "y".repeat(262_144 - "other.example/blob".len() - 1_000);
        api.put_namespace(&ns, &[("other.example/blob", &blob)]);
        api.put(
            "configmaps",
            &ns,
            serde_json::json!({"metadata": {"name": "meshtop-record-left-by-a-crash",
                "labels": {"jr2.dev/record-shard": "true"}},
                "immutable": true, "data": {"team.json": "{\"images\":{}}"}}),
        );
        api.identity_bound("alice", rbac.bindings(&ns, bound));
        Scene { api, k, key }
    }

    fn ns(&self) -> &str {
        &self.k.namespace
    }

    /// Run meshtop; the step stops unless it exits `code` and the server refused nothing.
    async fn expect(&self, step: &str, args: &[&str], code: i32) -> Step<Output> {
        self.api.reset_counts();
        let started = std::time::Instant::now();
        let out = self.k.run(args).await;
        eprintln!("{step}: {:?}", started.elapsed());
        let refused = self.refused();
        let stopped = |why: String| Stopped {
            step: step.to_string(),
            why,
            said: said(&out),
            refused: refused.clone(),
        };
        if !refused.is_empty() {
            return Err(stopped("the API server refused requests".into()));
        }
        if out.status.code() != Some(code) {
            return Err(stopped(format!("exit {:?}, not {code}", out.status.code())));
        }
        Ok(out)
    }

    async fn ok(&self, step: &str, args: &[&str]) -> Step<Output> {
        self.expect(step, args, 0).await
    }

    async fn json(&self, step: &str, args: &[&str]) -> Step<Value> {
        let out = self.ok(step, args).await?;
        serde_json::from_slice(&out.stdout).map_err(|e| Stopped {
            step: step.into(),
            why: format!("not JSON: {e}"),
            said: said(&out),
            refused: Vec::new(),
        })
    }

    fn refused(&self) -> Vec<Attributes> {
        self.api
            .authorizations()
            .into_iter()
            .filter(|(_, allowed)| !allowed)
            .map(|(a, _)| a)
            .collect()
    }

    /// The container image of a workload's template.
    fn image(&self, kind: &str, module: &str) -> String {
        self.api
            .get(kind, self.ns(), &format!("{module}-1"))
            .unwrap()["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The pods of a module's workload that are not going away, newest last.
    fn live_pods(&self, module: &str) -> Vec<String> {
        let app = format!("{module}-1");
        let mut pods: Vec<(String, String)> = self
            .api
            .all("pods", self.ns())
            .into_iter()
            .filter(|p| {
                p["metadata"]["labels"]["app"] == app.as_str()
                    && p["metadata"]["deletionTimestamp"].is_null()
            })
            .map(|p| {
                (
                    p["metadata"]["creationTimestamp"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    p["metadata"]["name"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        pods.sort();
        pods.into_iter().map(|(_, name)| name).collect()
    }

    fn touch(&self, module: &str, text: &str) {
        std::fs::write(self.k.mesh.root().join(format!("{module}/rbac.txt")), text).unwrap();
    }

    fn record(&self) -> Value {
        self.k.annotation(&self.api)
    }
}

/// `trust = ["keys/ci.pub"]` in the mesh file and a roll-out followed for at most 8 s; the
/// signing key made beside it by openssl (ECDSA P-256, PKCS#8, mode 600).
fn trusting(k: &KubeMesh) -> PathBuf {
    let dir = k.mesh.mesh_file().parent().unwrap().join("keys");
    std::fs::create_dir_all(&dir).unwrap();
    let (sec1, key, public) = (dir.join("ci.sec1"), dir.join("ci.key"), dir.join("ci.pub"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    for args in [
        vec![
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            &s(&sec1),
        ],
        vec![
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            &s(&sec1),
            "-out",
            &s(&key),
        ],
        vec!["ec", "-in", &s(&key), "-pubout", "-out", &s(&public)],
    ] {
        let out = std::process::Command::new("openssl")
            .args(&args)
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", said(&out));
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let file = k.mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let registry_line = format!("registry = \"{REGISTRY}\"\n");
    let namespace_line = format!("namespace = \"{}\"\n", k.namespace);
    assert!(text.contains(&registry_line) && text.contains(&namespace_line));
    let text = text
        .replace(
            &registry_line,
            &format!("{registry_line}trust = [\"keys/ci.pub\"]\n"),
        )
        .replace(
            &namespace_line,
            &format!("{namespace_line}rollout_deadline = \"8s\"\n"),
        );
    std::fs::write(&file, text).unwrap();
    key
}

fn check(step: &str, ok: bool, why: impl FnOnce() -> String) -> Step<()> {
    if ok {
        return Ok(());
    }
    Err(Stopped {
        step: step.into(),
        why: why(),
        said: String::new(),
        refused: Vec::new(),
    })
}

/// Every Kubernetes command a team runs, in the order a day brings them, each checked for what it
/// did. `dashboard`: the first send is the dashboard's `s` key (the real binary in tmux).
async fn every_command(s: &Scene, dashboard: bool) -> Step<()> {
    let key = s.key.to_str().unwrap();
    let sign = ["--sign-key", key];
    let plan = s.json("plan", &["plan", "--json"]).await?;
    check("plan", plan["modules"].as_array().is_some(), || {
        plan.to_string()
    })?;

    // converge: build, push, sign, stamp, roll web (Deployment) and worker (StatefulSet) out.
    let first = s
        .json("converge", &[&["converge", "--json"][..], &sign].concat())
        .await?;
    check("converge", first["stamped"] == true, || first.to_string())?;
    let ns = s.api.get("namespaces", "", s.ns()).unwrap_or_default();
    check(
        "converge",
        ns["metadata"]["annotations"]["jr2.dev/record-index"].is_string(),
        || {
            format!(
                "the record is not in shards: {}",
                ns["metadata"]["annotations"]
            )
        },
    )?;
    let record = s.record();
    for (kind, module) in [("deployments", "web"), ("statefulsets", "worker")] {
        let reference = record[module]["ref"].as_str().unwrap_or_default();
        let image = s.image(kind, module);
        check(
            "converge",
            image.starts_with(&format!("{reference}@sha256:")),
            || format!("{module} runs {image}, not {reference}: {first}"),
        )?;
    }
    let status = s.json("status", &["status", "--json"]).await?;
    let state = |status: &Value, name: &str| -> String {
        status
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == name)
            .map(|m| m["state"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    // The record's form and room, on every machine's row (new fields beside the old).
    let room = &status[0]["record"];
    check(
        "status",
        room["form"] == "shards"
            && room["limit_bytes"] == 262_144
            && room["shards"].as_u64() >= Some(1),
        || format!("status does not say the record is in shards: {status}"),
    )?;
    for (name, expected) in [
        ("web-1", "current"),
        ("worker-1", "current"),
        ("api-1", "held"),
    ] {
        check("status", state(&status, name) == expected, || {
            format!("{name} is not {expected}: {status}")
        })?;
    }
    let builds = s.json("builds", &["builds", "--json"]).await?;
    check("builds", builds.as_array().map(Vec::len) == Some(5), || {
        builds.to_string()
    })?;
    verified(s).await?;

    // The held api (a DaemonSet): moved by the dashboard's `s`, or by `send`.
    let api_ref = record["api"]["ref"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if dashboard {
        dashboard_sends_api(s, &api_ref)?;
    } else {
        s.ok("send", &["send", "api", "--yes", "--json"]).await?;
    }
    let image = s.image("daemonsets", "api");
    check(
        "send",
        image.starts_with(&format!("{api_ref}@sha256:")),
        || format!("api runs {image}, not {api_ref}"),
    )?;

    // A second day: web and api change; web rolls out, api is held until sent. Its first stamp
    // stops between its shards and its index (the API server fails the switch): the converge
    // again finds the record's shard it wrote there, named by no index, and renews it (`patch`
    // on ConfigMaps, what a slow stamper's renewal asks too).
    s.touch("web", "v2\n");
    s.touch("api", "v2\n");
    s.api.fail_next_namespace_patch();
    let converge = [&["converge", "--json"][..], &sign].concat();
    s.expect("converge (its index switch failed)", &converge, 1)
        .await?;
    s.ok("converge", &converge).await?;
    let second = s.record();
    s.ok("send", &["send", "api", "--yes", "--json"]).await?;
    let moved = second["api"]["ref"].as_str().unwrap_or_default();
    let image = s.image("daemonsets", "api");
    check("send", moved != api_ref && image.starts_with(moved), || {
        format!("api runs {image}, not {moved}")
    })?;

    logs(s).await?;

    // rollback web to the first day's artifact (pinned), history says so, unpin ends the pin.
    s.ok("rollback", &["rollback", "web", "--yes", "--json"])
        .await?;
    let first_web = record["web"]["ref"].as_str().unwrap_or_default();
    let image = s.image("deployments", "web");
    check("rollback", image.starts_with(first_web), || {
        format!("web runs {image}, not {first_web}")
    })?;
    let history = s.json("history", &["history", "web", "--json"]).await?;
    check("history", history[0]["kind"] == "rollback", || {
        history.to_string()
    })?;
    s.ok("unpin", &["unpin", "web"]).await?;

    let first_api = record["api"]["digest"].as_str().unwrap_or_default();
    collected(s, first_api).await?;
    failing_rollout(s, &sign).await
}

/// verify: each of the record's five artifacts carries the trusted key's signature. Its exit is not
/// asked here: machines still running the scene's `:old` images (never published, so never signed)
/// make it 1, which is no matter of RBAC; what it read, it was allowed to. (A pod's manifest compared
/// as a manifest: `kube_trust`.)
async fn verified(s: &Scene) -> Step<()> {
    s.api.reset_counts();
    let out = s.k.run(&["verify", "--json"]).await;
    let refused = s.refused();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    let record: Vec<&Value> = report
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["of"] == "record")
        .collect();
    check(
        "verify",
        refused.is_empty() && record.len() == 5 && record.iter().all(|c| c["signed"] == true),
        || format!("refused {refused:?}: {}", said(&out)),
    )
}

/// logs: the lines of web's running pod, then a pod in back-off says its events first.
async fn logs(s: &Scene) -> Step<()> {
    let pod = s.live_pods("web").pop().unwrap_or_default();
    s.api
        .container_prints(s.ns(), &pod, "app", "rbac says hello\n");
    let out = s.ok("logs", &["logs", "web"]).await?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    check("logs", text.contains("rbac says hello"), || text.clone())?;
    s.api.container_crashes(s.ns(), &pod, "app", 2, "Error");
    let out = s.ok("logs", &["logs", "web"]).await?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    check(
        "logs",
        text.contains("event: ") && text.contains("Back-off restarting failed container app"),
        || format!("a pod in back-off says its events: {text}"),
    )?;
    s.api.container_restarts(s.ns(), &pod, "app");
    Ok(())
}

/// gc: a dry run lists what nothing needs (api's first artifact, sent away), then takes it.
async fn collected(s: &Scene, first_api: &str) -> Step<()> {
    check("gc", first_api.starts_with("sha256:"), || first_api.into())?;
    let gc = ["gc", "--keep", "1", "--grace", "0s", "--json"];
    let dry = s
        .json("gc --dry-run", &[&gc[..], &["--dry-run"]].concat())
        .await?;
    let named = |report: &Value, list: &str| -> bool {
        report[list]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["artifact"] == first_api && c["kind"] == "manifest")
    };
    check("gc --dry-run", named(&dry, "candidates"), || {
        format!("{first_api} is a candidate: {dry}")
    })?;
    let done = s.json("gc", &[&gc[..], &["--yes"]].concat()).await?;
    let manifest = done["candidates"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["artifact"] == first_api && c["kind"] == "manifest")
        .and_then(|c| c["name"].as_str())
        .unwrap_or_default();
    let (path, digest) = manifest.split_once('@').unwrap_or_default();
    let client = RegistryClient::new(
        &Registry {
            host: REGISTRY.into(),
            insecure: false,
        },
        None,
    )
    .unwrap();
    let left = client.manifest(path, digest).await.ok();
    check("gc", matches!(left, Some(Published::Absent)), || {
        format!("{manifest} is gone from the registry ({left:?}): {done}")
    })
}

/// A roll-out whose new pods cannot start: converge fails at once with the diagnosis (which pods
/// are the new revision: the Deployment's ReplicaSets), naming the kubelet's terminal reason.
async fn failing_rollout(s: &Scene, sign: &[&str]) -> Step<()> {
    let repo = format!("{REGISTRY}/{}/web:", s.k.name());
    s.api.pods_of_image(
        &repo,
        Fate::Waits(
            "CreateContainerError".into(),
            "failed to create containerd container: no command specified".into(),
        ),
    );
    s.touch("web", "v3\n");
    let out = s
        .expect("converge (failing)", &[&["converge"][..], sign].concat(), 1)
        .await?;
    s.api.clear_fates();
    let text = said(&out);
    check(
        "converge (failing)",
        text.contains("CreateContainerError") && text.contains("no command specified"),
        || format!("the diagnosis names the reason: {text}"),
    )
}

/// The dashboard on the mesh in tmux: api's row, `s`, confirm; its DaemonSet moves to the record's.
fn dashboard_sends_api(s: &Scene, api_ref: &str) -> Step<()> {
    let tmux = Tmux::shell();
    let command = format!(
        "KUBECONFIG={} {} --mesh {} --state {}",
        s.k.kubeconfig.display(),
        env!("CARGO_BIN_EXE_meshtop"),
        s.k.mesh.mesh_file().display(),
        s.k.mesh.state().display()
    );
    s.api.reset_counts();
    tmux.keys(&[&command, "Enter"]);
    let long = Duration::from_secs(60);
    tmux.wait_for("api's machine held", long, |screen| {
        row(screen, "api").contains("held")
    });
    tmux.keys(&["j", "j", "j"]); // base → tools → web → api
    tmux.keys(&["s"]);
    tmux.wait_for("the send confirmation", Duration::from_secs(10), |screen| {
        screen.contains("[ Cancel ]") && screen.contains("api-1")
    });
    tmux.keys(&["Right", "Enter"]);
    let deadline = std::time::Instant::now() + long;
    while !s.image("daemonsets", "api").starts_with(api_ref) {
        assert!(
            std::time::Instant::now() < deadline,
            "the dashboard's send never moved api:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    tmux.wait_for("api's machine current", long, |screen| {
        !row(screen, "api").contains("held")
    });
    tmux.keys(&["q"]);
    tmux.wait_for("the dashboard to quit", Duration::from_secs(10), |screen| {
        !screen.contains("modules ·")
    });
    let refused = s.refused();
    check("the dashboard's send", refused.is_empty(), || {
        format!("refused {refused:?}:\n{}", tmux.screen())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kubernetes_command_runs_under_exactly_the_readmes_rbac() {
    let readme = ReadmeRbac::read();
    let s = Scene::new("rbac", &readme, ClusterRoleBound::ClusterWide).await;
    let started = std::time::Instant::now();
    if let Err(stopped) = every_command(&s, true).await {
        panic!("under the README's RBAC, {stopped}");
    }
    eprintln!("every command: {:?}", started.elapsed());
    // What the commands asked of the API server (its audit log, every verdict) is exactly what
    // the README grants: a verb it lacks was refused above, and one no command used is here.
    let used: std::collections::BTreeSet<Grant> = s
        .api
        .audit()
        .into_iter()
        .filter(|(asked, allowed)| *allowed && !common::kube_rules::allowed_to_everyone(asked))
        .map(|(asked, _)| Grant {
            verb: asked.verb.clone(),
            group: asked.group.clone(),
            resource: if asked.subresource.is_empty() {
                asked.resource.clone()
            } else {
                format!("{}/{}", asked.resource, asked.subresource)
            },
        })
        .collect();
    let documented: std::collections::BTreeSet<Grant> = readme.grants().into_iter().collect();
    let show = |grants: &std::collections::BTreeSet<Grant>| -> Vec<String> {
        grants.iter().map(ToString::to_string).collect()
    };
    assert_eq!(
        show(&used),
        show(&documented),
        "the verbs the commands used (left) against the README's RBAC (right)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_verb_of_the_readme_is_needed_by_some_command() {
    let readme = Arc::new(ReadmeRbac::read());
    let grants = readme.grants();
    assert!(grants.len() >= 10, "{grants:?}");
    let gate = Arc::new(tokio::sync::Semaphore::new(4));
    let mut runs = tokio::task::JoinSet::new();
    for (i, grant) in grants.into_iter().enumerate() {
        let (readme, gate) = (readme.clone(), gate.clone());
        runs.spawn(async move {
            let _turn = gate.acquire().await.unwrap();
            let without = readme.without(&grant);
            let s = Scene::new(&format!("rbm{i}"), &without, ClusterRoleBound::ClusterWide).await;
            let stopped = every_command(&s, false).await.err();
            (grant, stopped)
        });
    }
    let mut unneeded = Vec::new();
    while let Some(done) = runs.join_next().await {
        let (grant, stopped) = done.unwrap();
        match stopped {
            None => unneeded.push(grant.to_string()),
            Some(stopped) => {
                assert!(
                    names(&stopped, &grant),
                    "without {grant} the run stopped for another reason: {stopped}"
                );
                eprintln!("without {grant}: stopped at {}", stopped.step);
            }
        }
    }
    assert!(
        unneeded.is_empty(),
        "every command ran without these (the README grants more than meshtop needs): {unneeded:?}"
    );
}

/// The stop is the missing grant's: the server refused a request for it, or meshtop's access
/// check named it before asking.
fn names(stopped: &Stopped, grant: &Grant) -> bool {
    let refused = stopped.refused.iter().any(|a| {
        let resource = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        a.verb == grant.verb && a.group == grant.group && resource == grant.resource
    });
    refused
        || (stopped.said.contains(&format!("cannot {} ", grant.verb))
            && stopped.said.contains(&grant.resource))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_only_commands_run_under_the_readmes_read_only_variant() {
    let readme = ReadmeRbac::read();
    // The record and machines a converge under the full README left.
    let s = Scene::new("rbro", &readme, ClusterRoleBound::InNamespace).await;
    let key = s.key.to_str().unwrap().to_string();
    s.ok("converge", &["converge", "--sign-key", &key])
        .await
        .unwrap();
    let pod = s.live_pods("web").pop().unwrap();
    s.api.container_prints(s.ns(), &pod, "app", "read only\n");

    let read_only = readme.read_only();
    s.api.identity_bound(
        "viewer",
        read_only.bindings(s.ns(), ClusterRoleBound::InNamespace),
    );
    for args in [
        &["plan", "--json"][..],
        &["status", "--json"],
        &["builds", "--json"],
        &["logs", "web"],
        &["history", "web", "--json"],
    ] {
        s.ok(args[0], args).await.unwrap_or_else(|e| panic!("{e}"));
    }
    verified(&s).await.unwrap_or_else(|e| panic!("{e}"));

    // The dashboard without actions shows the machines and asks for nothing the role lacks.
    let tmux = Tmux::shell();
    s.api.reset_counts();
    tmux.keys(&[
        &format!(
            "KUBECONFIG={} {} --mesh {} --state {} --readonly",
            s.k.kubeconfig.display(),
            env!("CARGO_BIN_EXE_meshtop"),
            s.k.mesh.mesh_file().display(),
            s.k.mesh.state().display()
        ),
        "Enter",
    ]);
    let screen = tmux.wait_for("web's machine current", Duration::from_secs(60), |screen| {
        row(screen, "web").contains("1/1") && row(screen, "api").contains("held")
    });
    // Everything it asked until it quit, every source's polls included.
    tmux.keys(&["q"]);
    tmux.wait_for("the dashboard to quit", Duration::from_secs(10), |screen| {
        !screen.contains("modules ·")
    });
    assert!(
        s.refused().is_empty(),
        "meshtop --readonly was refused {:?}:\n{screen}",
        s.refused()
    );
    assert!(
        s.api.authorizations().len() > 3,
        "the dashboard read the cluster: {:?}",
        s.api.authorizations()
    );

    // kubectl reads the server's 403 as it reads the apiserver's (the oracle of the Status body).
    let (ok, kubectl) = s
        .api
        .kubectl(&[
            "patch",
            "namespace",
            s.ns(),
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"who":"viewer"}}}"#,
        ])
        .await;
    assert!(!ok, "{kubectl}");
    assert!(
        kubectl.contains(&format!(
            "Error from server (Forbidden): namespaces {:?} is forbidden: User \"viewer\" cannot patch resource \"namespaces\" in API group \"\" in the namespace {:?}",
            s.ns(),
            s.ns()
        )),
        "{kubectl}"
    );

    // A converge is refused before any build, naming what the variant lacks.
    let builds = s.json("builds", &["builds", "--json"]).await.unwrap();
    s.touch("web", "read only\n");
    let out = s.k.run(&["converge"]).await;
    let text = said(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    // The mesh's Lease is asked for first: every changing operation holds it before anything else.
    assert!(
        text.contains(&format!(
            "cannot create leases (API group coordination.k8s.io) in namespace {:?}",
            s.ns()
        )),
        "{text}"
    );
    let after = s.json("builds", &["builds", "--json"]).await.unwrap();
    assert_eq!(after, builds, "nothing was built");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promote_runs_under_the_readmes_rbac_on_both_clusters() {
    let readme = ReadmeRbac::read();
    let staging = Scene::new("rbps", &readme, ClusterRoleBound::ClusterWide).await;
    let prod = KubeApi::start().await;
    let prod_ns = format!("{}-prod", staging.ns());
    prod.put_namespace(&prod_ns, &[]);
    prod.put(
        "deployments",
        &prod_ns,
        workload(
            "deployments",
            "web-1",
            "web",
            &[("app", &format!("{REGISTRY}/{}/web:old", staging.k.name()))],
            1,
        ),
    );
    prod.identity_bound(
        "alice",
        readme.bindings(&prod_ns, ClusterRoleBound::ClusterWide),
    );
    two_targets(&staging, &prod, &prod_ns);

    let key = staging.key.to_str().unwrap().to_string();
    staging
        .ok(
            "converge",
            &["converge", "--target", "staging", "--sign-key", &key],
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    prod.reset_counts();
    let out = staging
        .k
        .run(&["promote", "web", "--to", "prod", "--yes", "--json"])
        .await;
    let refused: Vec<_> = prod
        .authorizations()
        .into_iter()
        .filter(|(_, allowed)| !allowed)
        .collect();
    assert!(refused.is_empty(), "{refused:?}\n{}", said(&out));
    assert!(out.status.success(), "{}", said(&out));
    let reference = staging.record()["web"]["ref"].as_str().unwrap().to_string();
    let image = prod.get("deployments", &prod_ns, "web-1").unwrap()["spec"]["template"]["spec"]
        ["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        image.starts_with(&format!("{reference}@sha256:")),
        "{image}"
    );
}

/// The scene's mesh with two targets: staging (its cluster) and prod (another, promoted from staging).
fn two_targets(staging: &Scene, prod: &KubeApi, prod_ns: &str) {
    let file = staging.k.mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let (head, tail) = text.split_once("\n[target]\n").unwrap();
    let modules = &tail[tail.find("\n[[module]]").unwrap()..];
    let text = format!(
        "{head}\n[[target]]\nname = \"staging\"\nkind = \"kubernetes\"\ncontext = \"ctx-staging\"\n\
         namespace = \"{}\"\nrollout_deadline = \"8s\"\n\n\
         [[target]]\nname = \"prod\"\nkind = \"kubernetes\"\ncontext = \"ctx-prod\"\n\
         namespace = \"{prod_ns}\"\npromote_from = \"staging\"\nrollout_deadline = \"8s\"\n{modules}",
        staging.ns()
    );
    std::fs::write(&file, text).unwrap();
    std::fs::write(
        &staging.k.kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: ctx-prod\nclusters:\n\
             - name: staging\n  cluster:\n    server: http://{}\n\
             - name: prod\n  cluster:\n    server: http://{}\n\
             contexts:\n- name: ctx-staging\n  context:\n    cluster: staging\n    user: test\n\
             - name: ctx-prod\n  context:\n    cluster: prod\n    user: test\n\
             users:\n- name: test\n  user: {{}}\n",
            staging.api.addr, prod.addr
        ),
    )
    .unwrap();
}

#[test]
fn the_readmes_yaml_is_read_as_written_and_another_shape_is_refused() {
    let readme = ReadmeRbac::read();
    let grants = readme.grants();
    // Taking one grant out leaves exactly the others (the verb-by-verb test relies on it).
    for grant in &grants {
        let left = readme.without(grant).grants();
        let expected: Vec<Grant> = grants.iter().filter(|g| *g != grant).cloned().collect();
        let mut sorted = left.clone();
        sorted.sort();
        let mut wanted = expected.clone();
        wanted.sort();
        assert_eq!(sorted, wanted, "without {grant}");
    }
    // The read-only variant keeps every read and no write.
    let read_only = readme.read_only().grants();
    for grant in &grants {
        let writes = common::kube_rbac::WRITE_VERBS.contains(&grant.verb.as_str());
        assert_eq!(read_only.contains(grant), !writes, "{grant}");
    }
    // The namespace object is granted by name: the README's `demo` becomes the mesh's namespace.
    let bindings = readme.bindings("ns-x", ClusterRoleBound::ClusterWide);
    assert!(
        format!("{bindings:?}").contains("names: [\"ns-x\"]"),
        "{bindings:?}"
    );
    assert!(!format!("{bindings:?}").contains("demo"), "{bindings:?}");

    // A shape the parser does not know fails loudly instead of granting less (or more).
    let shaped = |rule: &str| {
        format!(
            "# meshtop\n\n## RBAC\n\n```yaml\nkind: Role\nrules:\n{rule}\n---\nkind: ClusterRole\nrules:\n  - apiGroups: [\"\"]\n    resources: [namespaces]\n    verbs: [get]\n```\n"
        )
    };
    let good = ReadmeRbac::parse(&shaped(
        "  - apiGroups: [\"apps\"]\n    resources: [deployments]\n    verbs: [list, get]",
    ));
    assert_eq!(good.role[0].verbs, ["list", "get"]);
    assert_eq!(good.role[0].groups, ["apps"]);
    for bad in [
        "  - nonResourceURLs: [\"/healthz\"]\n    verbs: [get]",
        "  - apiGroups: [\"apps\"]\n    resources:\n      - deployments\n    verbs: [get]",
        "  - apiGroups: [\"apps\"]\n    resources: [deployments]",
    ] {
        let text = shaped(bad);
        let parsed = std::panic::catch_unwind(|| ReadmeRbac::parse(&text));
        assert!(parsed.is_err(), "{bad:?} was read as {parsed:?}");
    }
}
