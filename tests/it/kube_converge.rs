//! The Kubernetes target end to end: the real binary (KUBECONFIG pointing at the API test server),
//! the real registry (scripts/start-registry.sh, 127.0.0.1:5000) and the real daemon.
//! Nothing here skips: a missing registry or daemon fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use common::kube_api::KubeApi;
use common::kube_controllers::Fate;
use common::kube_mesh::{KubeMesh, REGISTRY, old_id};
use common::kube_objects::{pod, workload};
use common::{decisions, said};
use meshtop::backends::cluster::{Cluster, RECORD_ANNOTATION};
use meshtop::backends::daemon::LazyDaemon;
use meshtop::backends::registry::{Published, RegistryClient, split_reference};
use meshtop::backends::state::StateDb;
use meshtop::converge::progress::Emitter;
use meshtop::converge::send;
use meshtop::converge::targets::{self, Reach};
use meshtop::mesh::model::{Record, RecordEntry, Registry};
use meshtop::mesh::operation::OperationKind;
use meshtop::mesh::pin::{PinChange, StampBy};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converge_pushes_stamps_sends_then_the_record_vouches() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = KubeMesh::new("kc", &api, true, "test-ctx", "");
    let repo = |module: &str| format!("{REGISTRY}/{}/{module}", k.name());
    for (n, module) in [(1, "web"), (2, "worker"), (3, "api")] {
        k.deploy(&api, module, &format!("{}:old", repo(module)), &old_id(n));
    }

    let (first, stderr) = k.json(&["converge", "--json"]).await;
    assert!(
        stderr.contains(&format!("context test-ctx, namespace {}", k.namespace)),
        "the converge names where it acts:\n{stderr}"
    );
    assert_eq!(first["stamped"], true, "{first}");
    assert!(decisions(&first).values().all(|d| d == "build"), "{first}");

    // The annotation holds every module's ref and artifact.
    let annotation = k.annotation(&api);
    let modules = first["modules"].as_array().unwrap();
    assert_eq!(annotation.as_object().unwrap().len(), 5, "{annotation}");
    for m in modules {
        let name = m["name"].as_str().unwrap();
        assert_eq!(annotation[name]["ref"], m["ref"], "{annotation}");
        assert_eq!(annotation[name]["digest"], m["digest"], "{annotation}");
        assert!(m["ref"].as_str().unwrap().starts_with(&repo(name)));
    }

    // What was pushed is what the registry answers, and it is kept with the build.
    let (builds, _) = k.json(&["builds", "--json", "--limit", "100"]).await;
    let client = RegistryClient::new(
        &Registry {
            host: REGISTRY.into(),
            insecure: false,
        },
        None,
    )
    .unwrap();
    let mut published = BTreeMap::new();
    for build in builds.as_array().unwrap() {
        let reference = build["ref"].as_str().unwrap();
        let (repository, tag) = split_reference(reference);
        let path = repository.strip_prefix(&format!("{REGISTRY}/")).unwrap();
        let Published::Present { digest } = client.manifest(path, tag).await.unwrap() else {
            panic!("{reference} is not in the registry");
        };
        assert_eq!(build["published_digest"], json!(digest), "{build}");
        assert_eq!(build["published_ref"], json!(reference), "{build}");
        published.insert(
            build["module"].as_str().unwrap().to_string(),
            (reference.to_string(), digest),
        );
    }
    assert_eq!(published.len(), 5);

    // Rollout modules were sent to ref@<registry digest>; the record-policy module was not.
    let sends = first["sends"].as_array().unwrap();
    assert_eq!(sends.len(), 2, "{first}");
    assert!(sends.iter().all(|s| s["ok"] == true), "{first}");
    for module in ["web", "worker"] {
        let (reference, digest) = &published[module];
        assert_eq!(k.image(&api, module), format!("{reference}@{digest}"));
    }
    assert_eq!(k.image(&api, "api"), format!("{}:old", repo("api")));

    // The new pods report the manifest digest they pulled: current (the published digest names the
    // artifact). The old pods are gone: the controller terminated them once the new ones were ready.
    let (status, _) = k.json(&["status", "--json"]).await;
    let states: BTreeMap<String, String> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(states["web-1"], "current", "{status}");
    assert_eq!(states["worker-1"], "current", "{status}");
    assert_eq!(states["api-1"], "held", "{status}");
    let web = status
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "web-1")
        .unwrap();
    assert_eq!(web["kind"], "Deployment");
    assert_eq!(web["health"], "1/1 ready");
    assert_eq!(
        web["built_by"]["module"], "web",
        "the running digest traces to its build: {web}"
    );

    // A second converge: the record vouches for everything, nothing is built or sent.
    let (second, _) = k.json(&["converge", "--json"]).await;
    assert!(
        decisions(&second).values().all(|d| d == "record"),
        "{second}"
    );
    assert!(second["sends"].as_array().unwrap().is_empty(), "{second}");
    let (builds, _) = k.json(&["builds", "--json", "--limit", "100"]).await;
    assert_eq!(builds.as_array().unwrap().len(), 5);
    let reason = second["modules"][0]["outcome"].as_str().unwrap();
    assert_eq!(reason, "skipped (record)");
    let (plan, _) = k.json(&["plan", "--json"]).await;
    let why = plan["modules"][0]["reason"].as_str().unwrap();
    assert!(
        why.contains(&format!(
            "annotation jr2.dev/images on namespace {}",
            k.namespace
        )),
        "{why}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_annotation_warns_and_decides_build_then_host() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = KubeMesh::new("km", &api, true, "test-ctx", "");
    k.set_annotation(&api, "{not json");

    let (plan, stderr) = k.json(&["plan", "--json", "base"]).await;
    assert!(
        stderr.contains("warning") && stderr.contains(&k.namespace),
        "{stderr}"
    );
    assert_eq!(plan["modules"][0]["decision"], "build", "{plan}");

    let (summary, stderr) = k.json(&["converge", "--json", "base"]).await;
    assert!(
        stderr.contains("warning") && stderr.contains(&k.namespace),
        "{stderr}"
    );
    assert_eq!(
        summary["warnings"].as_array().unwrap().len(),
        1,
        "{summary}"
    );
    assert_eq!(decisions(&summary)["base"], "build", "{summary}");
    // The stamp wrote a readable record over the broken one.
    assert_eq!(
        k.annotation(&api)["base"]["ref"],
        summary["modules"][0]["ref"]
    );

    // Broken again: the host (which holds the built image) answers.
    k.set_annotation(&api, r#"{"base": {"ref": 7}}"#);
    let (plan, stderr) = k.json(&["plan", "--json", "base"]).await;
    assert!(stderr.contains("warning"), "{stderr}");
    assert_eq!(plan["modules"][0]["decision"], "host", "{plan}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_converges_with_their_own_state_take_turns_and_both_land() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let extra = "[[module]]\nname = \"solo\"\ncontext = \"base\"\npolicy = \"record\"\n";
    let k = KubeMesh::new("kr", &api, true, "test-ctx", extra);
    let other_state = k.mesh.dir.path().join("other.db");
    // The mesh's Lease lets one converge at a time whatever the state file: the other waits.
    let (a, b) = tokio::join!(
        k.run(&["converge", "--json", "--wait", "base"]),
        k.run_with_state(&other_state, &["converge", "--json", "--wait", "solo"])
    );
    assert!(a.status.success(), "{}", said(&a));
    assert!(b.status.success(), "{}", said(&b));
    let annotation = k.annotation(&api);
    assert!(
        annotation.get("base").is_some() && annotation.get("solo").is_some(),
        "{annotation}"
    );

    // The engine's stamp, forced to conflict: both entries still land. Two meshes share the
    // namespace's annotation (each holds its own Lease), so their stamps can race.
    let entry = |d: &str| RecordEntry::new(format!("{REGISTRY}/x/m:{d}"), format!("sha256:{d}"));
    let mesh = meshtop::workspace::file::load(&k.mesh.mesh_file()).unwrap();
    let mut mesh2 = mesh.clone();
    mesh2.name = format!("{}-2", mesh.name);
    let one = targets::kubernetes(api.cluster(&k.namespace), mesh.registry.clone());
    let two = one.clone();
    // Two converges with their own state databases, each holding its mesh.
    let own_state = |name: &str| Mutex::new(StateDb::open(&k.mesh.dir.path().join(name)).unwrap());
    let (db, history2) = (own_state("one.db"), own_state("two.db"));
    let holder = meshtop::backends::state::Holder::here;
    one.hold(&db, &mesh.name, &holder("c1"), "converge", false)
        .await
        .unwrap();
    two.hold(&history2, &mesh2.name, &holder("c2"), "converge", false)
        .await
        .unwrap();
    api.sync_next_namespace_reads(2);
    let conflicts_before = api.responses_with(409);
    let x = Record::from([("x".to_string(), entry("01"))]);
    let y = Record::from([("y".to_string(), entry("02"))]);
    let no_pins = PinChange::default();
    let (r1, r2) = tokio::join!(
        one.stamp(
            &mesh,
            &db,
            StampBy::new("c1", OperationKind::Converge),
            &x,
            &no_pins
        ),
        two.stamp(
            &mesh2,
            &history2,
            StampBy::new("c2", OperationKind::Converge),
            &y,
            &no_pins
        )
    );
    r1.unwrap();
    r2.unwrap();
    assert!(
        api.responses_with(409) > conflicts_before,
        "the race never conflicted"
    );
    let annotation = k.annotation(&api);
    for module in ["base", "solo", "x", "y"] {
        assert!(
            annotation.get(module).is_some(),
            "{module} lost: {annotation}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neither_registry_nor_kind_context_is_refused_before_any_build() {
    let api = KubeApi::start().await;
    let k = KubeMesh::new("kn", &api, false, "plain-ctx", "");
    let output = k.run(&["converge", "--json"]).await;
    assert!(!output.status.success(), "{}", said(&output));
    let text = said(&output);
    assert!(text.contains("refused before any build"), "{text}");
    assert!(
        text.contains("registry") && text.contains("kind-"),
        "{text}"
    );
    let (builds, _) = k.json(&["builds", "--json"]).await;
    assert!(builds.as_array().unwrap().is_empty(), "{builds}");
    assert!(
        api.get("namespaces", "", &k.namespace).unwrap()["metadata"]["annotations"]
            .get(RECORD_ANNOTATION)
            .is_none()
    );
}

/// The example mesh on the API test server, its base built for two platforms through this
/// machine's `docker buildx` (`multi_platform = "buildx"`: the user asks for it), `more` appended
/// to its mesh file; this machine must have no `docker buildx` (the build then fails naming it).
fn multi_platform_base(tag: &str, api: &KubeApi, more: &str) -> KubeMesh {
    let buildx = std::process::Command::new("docker")
        .args(["buildx", "version"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(!buildx, "this test needs a machine without docker buildx");
    let k = KubeMesh::new(tag, api, true, "test-ctx", "");
    let file = k.mesh.mesh_file();
    let mut text = std::fs::read_to_string(&file)
        .unwrap()
        .replacen(
            "context = \"base\"\n",
            "context = \"base\"\nplatforms = [\"linux/amd64\", \"linux/arm64\"]\n",
            1,
        )
        .replacen("[mesh]\n", "[mesh]\nmulti_platform = \"buildx\"\n", 1);
    text.push_str(more);
    std::fs::write(&file, text).unwrap();
    k
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_platform_module_without_buildx_fails_naming_it() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = multi_platform_base("kx", &api, "");
    let output = k.run(&["converge", "--json", "base"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    let outcome = summary["modules"][0]["outcome"].as_str().unwrap();
    assert!(
        outcome.contains("module base") && outcome.contains("docker buildx"),
        "{outcome}"
    );
    assert_eq!(summary["stamped"], false);
}

/// On a pool of builders, a multi-platform module whose mesh asks for buildx goes through this
/// machine's `docker buildx` wherever the pool places it: its build row names that, not a daemon that never saw the build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_platform_module_on_a_pool_names_buildx_as_its_builder() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = multi_platform_base(
        "kxpool",
        &api,
        "\n[[builder]]\nname = \"one\"\nendpoint = \"unix:///var/run/docker.sock\"\n\
         \n[[builder]]\nname = \"two\"\nendpoint = \"unix:///run/meshtop-test-dockerd2/docker.sock\"\n",
    );
    let output = k.run(&["converge", "--json", "base"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    assert!(said(&output).contains("docker buildx"), "{}", said(&output));
    let rows = common::builds(&k.mesh);
    let base = rows
        .iter()
        .find(|r| r.module.as_deref() == Some("base"))
        .unwrap();
    assert_eq!(
        base.builder.as_deref(),
        Some(meshtop::converge::build::BUILDX_BUILDER),
        "{base:#?}"
    );
}

/// A kind context, no registry: a send of a crafted record, without any build.
fn kind_setup(api: &KubeApi, tag: &str) -> (KubeMesh, String) {
    let k = KubeMesh::new(tag, api, false, "kind-t", "");
    let reference = format!("{}/web:aaaaaaaaaaaa-amd64", k.name());
    let record =
        json!({"web": {"ref": reference, "digest": format!("sha256:{}", "ab".repeat(32))}});
    k.set_annotation(api, &record.to_string());
    k.deploy(api, "web", &format!("{}/web:old", k.name()), &old_id(9));
    (k, reference)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_stuck_on_image_pull_back_off_fails_naming_it() {
    let api = KubeApi::start().await;
    let (k, reference) = kind_setup(&api, "kb");
    // The kubelet cannot pull the new image: the new pod goes ErrImagePull, then ImagePullBackOff, which
    // fails the send once it lasted web's `rollout_backoff`.
    let file = k.mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "name = \"web\"\n",
        "name = \"web\"\nrollout_backoff = \"2s\"\n",
    );
    std::fs::write(&file, text).unwrap();
    api.pods_of_image(&reference, Fate::PullFails("not found".into()));
    let output = k.run(&["send", "web", "--yes", "--json"]).await;
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("context kind-t, namespace {}", k.namespace)),
        "{stderr}"
    );
    let outcomes: Value = serde_json::from_slice(&output.stdout).unwrap();
    let message = outcomes[0]["message"].as_str().unwrap();
    assert!(
        message.contains("ImagePullBackOff") && message.contains("Failed to pull image"),
        "{message}"
    );
    // kind-loaded: the ref itself, with the artifact on the pod template.
    assert_eq!(k.image(&api, "web"), reference);
    let deployment = api.get("deployments", &k.namespace, "web-1").unwrap();
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["annotations"]["jr2.dev/artifact"],
        json!(format!("sha256:{}", "ab".repeat(32)))
    );
    // kubectl reaches the same verdict: not rolled out.
    let (done, said) = api
        .kubectl(&[
            "rollout",
            "status",
            "deployment/web-1",
            "-n",
            &k.namespace,
            "--timeout=3s",
        ])
        .await;
    assert!(!done, "kubectl: {said}");
    let db = StateDb::open(&k.mesh.state()).unwrap();
    let rows = db.sends(k.name(), Some("web"), 10).unwrap();
    assert_eq!(rows.len(), 1);
    assert!(
        rows[0].outcome.contains("ImagePullBackOff"),
        "{}",
        rows[0].outcome
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_whose_guard_fails_is_reported_not_overwritten() {
    let api = KubeApi::start().await;
    let (k, _) = kind_setup(&api, "kg");
    let mesh = meshtop::workspace::file::load(&k.mesh.mesh_file()).unwrap();
    let db = Arc::new(Mutex::new(StateDb::open(&k.mesh.state()).unwrap()));
    let cluster = Cluster::from_client(api.client(), "kind-t", &k.namespace);
    let backend = targets::kubernetes(cluster, None);
    let daemon = LazyDaemon::new();
    let record = backend.read_record(&mesh, &db).await.unwrap();
    let reach = Reach {
        daemon: &daemon,
        db: &db,
    };
    let listed = backend
        .machines(&mesh, &record.record, reach)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state.as_str(), "behind");
    // Someone changes the image between our listing and our patch.
    let mut changed = api.get("deployments", &k.namespace, "web-1").unwrap();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("someone/else:1");
    api.put("deployments", &k.namespace, changed);

    let moves = send::moves_for(&record.record, &listed, "web");
    backend
        .hold(
            &db,
            &mesh.name,
            &meshtop::backends::state::Holder::here("test"),
            "send",
            false,
        )
        .await
        .unwrap();
    let emitter = Emitter::new(
        db.clone(),
        &mesh.name,
        "default",
        "test",
        OperationKind::Converge,
        None,
    );
    let outcomes = send::send(&mesh, &moves, &daemon, backend.as_ref(), &db, &emitter).await;
    assert_eq!(outcomes.len(), 1);
    assert!(!outcomes[0].ok);
    assert!(
        outcomes[0].message.contains("changed by someone else")
            && outcomes[0].message.contains("someone/else:1"),
        "{}",
        outcomes[0].message
    );
    assert_eq!(k.image(&api, "web"), "someone/else:1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_over_500_workloads_takes_a_bounded_number_of_calls() {
    let api = KubeApi::start().await;
    let k = KubeMesh::new("ks", &api, true, "test-ctx", "");
    let modules = ["base", "tools", "web", "api", "worker"];
    for i in 0..500 {
        let module = modules[i % modules.len()];
        let name = format!("w{i}");
        let image = format!("{REGISTRY}/{}/{module}:t", k.name());
        api.put(
            "deployments",
            &k.namespace,
            workload("deployments", &name, module, &[("app", &image)], 1),
        );
        api.put(
            "pods",
            &k.namespace,
            pod(
                &format!("{name}-0"),
                &name,
                "app",
                &image,
                &old_id((i % 200) as u8),
            ),
        );
    }
    api.reset_counts();
    let (status, _) = k.json(&["status", "--json"]).await;
    assert_eq!(status.as_array().unwrap().len(), 500);
    let calls = api.total_requests();
    eprintln!("status over 500 workloads: {calls} API calls");
    assert!(calls <= 5, "{calls} calls");
}

/// Every permission a converge of the example mesh asks for (the mesh's Lease included: every
/// changing operation holds it; README, RBAC), but `missing`.
fn converge_role_without(api: &KubeApi, missing: &[(&str, &str)]) {
    let all = [
        ("get", "namespaces"),
        ("patch", "namespaces"),
        ("get", "leases"),
        ("create", "leases"),
        ("update", "leases"),
        ("list", "deployments"),
        ("list", "statefulsets"),
        ("list", "daemonsets"),
        ("list", "pods"),
        ("patch", "deployments"),
    ];
    let allowed: Vec<(&str, &str)> = all.into_iter().filter(|p| !missing.contains(p)).collect();
    api.identity("ci", &allowed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_converge_that_may_not_write_the_record_is_refused_before_any_build() {
    // Item 7: an identity with the built-in edit role's verbs, which do not include the namespace object.
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = KubeMesh::new("ka", &api, true, "test-ctx", "");
    // The built-in edit role's verbs, which do not include the namespace object.
    converge_role_without(&api, &[("patch", "namespaces")]);
    let output = k.run(&["converge", "--json"]).await;
    assert_ne!(output.status.code(), Some(0), "{}", said(&output));
    let text = said(&output);
    assert!(
        text.contains(&format!("cannot patch namespaces \"{}\"", k.namespace)),
        "{text}"
    );
    assert!(text.contains("RBAC"), "{text}");
    assert!(!text.contains("Status {"), "{text}");
    let (builds, _) = k.json(&["builds", "--json"]).await;
    assert!(
        builds.as_array().unwrap().is_empty(),
        "nothing was built: {builds}"
    );

    // It may write the record, but not the Deployment of a module whose policy rolls out.
    k.deploy(
        &api,
        "web",
        &format!("{REGISTRY}/{}/web:old", k.name()),
        &old_id(1),
    );
    converge_role_without(&api, &[("patch", "deployments")]);
    let output = k.run(&["converge", "--json"]).await;
    assert_ne!(output.status.code(), Some(0), "{}", said(&output));
    let text = said(&output);
    assert!(
        text.contains(&format!(
            "cannot patch deployments (API group apps) in namespace \"{}\"",
            k.namespace
        )),
        "{text}"
    );
    let (builds, _) = k.json(&["builds", "--json"]).await;
    assert!(builds.as_array().unwrap().is_empty(), "{builds}");

    // Everything but the mesh's Lease (the built-in edit role of an older cluster, say): refused
    // as up front and as plainly as the rest, naming the verbs, the API group and the role to fix.
    converge_role_without(&api, &[("create", "leases"), ("update", "leases")]);
    let output = k.run(&["converge", "--json"]).await;
    assert_ne!(output.status.code(), Some(0), "{}", said(&output));
    let text = said(&output);
    assert!(
        text.contains(&format!(
            "cannot create leases (API group coordination.k8s.io) in namespace \"{}\"",
            k.namespace
        )),
        "{text}"
    );
    assert!(text.contains("RBAC"), "{text}");
    let (builds, _) = k.json(&["builds", "--json"]).await;
    assert!(builds.as_array().unwrap().is_empty(), "{builds}");
}

#[tokio::test]
async fn the_roll_out_deadline_can_be_set_in_the_mesh_file() {
    // Item 5.
    let api = KubeApi::start().await;
    let k = KubeMesh::new("kd", &api, false, "kind-t", "");
    let file = k.mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let with = |value: &str| {
        text.replacen(
            "kind = \"kubernetes\"\n",
            &format!("kind = \"kubernetes\"\nrollout_deadline = {value}\n"),
            1,
        )
    };
    std::fs::write(&file, with("\"15m\"")).unwrap();
    let mesh = meshtop::workspace::file::load(&file).unwrap();
    assert_eq!(
        mesh.rollout_deadline,
        Some(std::time::Duration::from_secs(900))
    );
    std::fs::write(&file, with("\"soon\"")).unwrap();
    let err = meshtop::workspace::file::load(&file)
        .unwrap_err()
        .to_string();
    assert!(err.contains("rollout_deadline"), "{err}");
    std::fs::write(&file, text).unwrap();
    assert_eq!(
        meshtop::workspace::file::load(&file)
            .unwrap()
            .rollout_deadline,
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_loaded_send_rolls_out_and_its_machine_reads_current() {
    // Item 8: containerd reports its import digest; the pods carry the artifact meshtop wrote.
    let api = KubeApi::start().await;
    let (k, reference) = kind_setup(&api, "kk");
    let output = k.run(&["send", "web", "--yes", "--json"]).await;
    assert!(output.status.success(), "{}", said(&output));
    assert_eq!(k.image(&api, "web"), reference);
    let (status, _) = k.json(&["status", "--json"]).await;
    let web = &status.as_array().unwrap()[0];
    assert_eq!(web["state"], "current", "{status}");
    let (done, said) = api
        .kubectl(&[
            "rollout",
            "status",
            "deployment/web-1",
            "-n",
            &k.namespace,
            "--timeout=3s",
        ])
        .await;
    assert!(
        done && said.contains("successfully rolled out"),
        "kubectl: {said}"
    );
    assert_eq!(
        web["running"],
        json!([format!("sha256:{}", "ab".repeat(32))]),
        "{status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_may_not_patch_the_workload_is_refused_naming_it() {
    // Item 7.
    let api = KubeApi::start().await;
    let (k, _) = kind_setup(&api, "kp");
    converge_role_without(&api, &[("patch", "namespaces"), ("patch", "deployments")]);
    let output = k.run(&["send", "web", "--yes", "--json"]).await;
    assert_ne!(output.status.code(), Some(0), "{}", said(&output));
    let text = said(&output);
    assert!(
        text.contains(&format!(
            "cannot patch deployments (API group apps) in namespace \"{}\"",
            k.namespace
        )),
        "{text}"
    );
    assert!(text.contains("RBAC"), "{text}");
    assert_eq!(api.responses_with(403), 0, "nothing was tried: {text}");
}

/// Issue 12: `meshtop rollback` on Kubernetes asks the registry whether it still holds the artifact's
/// manifest: held → the Deployment's image goes back to `ref@<manifest digest>` and the module is
/// pinned; deleted from the registry → refused, nothing moves, the rebuild offered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_checks_the_registry_then_moves_the_deployment_back() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = KubeMesh::new("krb", &api, true, "test-ctx", "");
    let repo = format!("{REGISTRY}/{}/web", k.name());
    k.deploy(&api, "web", &format!("{repo}:old"), &old_id(1));
    let digest_of = |summary: &Value| {
        summary["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "web")
            .unwrap()["digest"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let (first, _) = k.json(&["converge", "--json"]).await;
    let v1 = digest_of(&first);
    let v1_image = k.image(&api, "web");
    assert!(v1_image.starts_with(&format!("{repo}:")), "{v1_image}");
    std::fs::write(k.mesh.root().join("web/www/version.txt"), "two").unwrap();
    let (second, _) = k.json(&["converge", "--json"]).await;
    assert_eq!(decisions(&second)["web"], "build", "{second}");
    let v2 = digest_of(&second);
    let v2_image = k.image(&api, "web");
    assert_ne!(v1_image, v2_image, "the converge sent web its new artifact");

    // The registry still holds v1: the rollback goes through and the Deployment moves back.
    let (report, stderr) = k.json(&["rollback", "web", "--yes", "--json"]).await;
    assert_eq!(report["to"]["digest"], v1.as_str(), "{report}\n{stderr}");
    assert_eq!(report["pinned"], true, "{report}");
    assert!(
        report["outcomes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["ok"] == true),
        "{report}"
    );
    assert_eq!(k.image(&api, "web"), v1_image);
    assert_eq!(k.annotation(&api)["web"]["digest"], v1.as_str());
    let (history, _) = k.json(&["history", "web", "--json"]).await;
    assert_eq!(history[0]["kind"], "rollback", "{history}");
    assert_eq!(history[0]["from_digest"], v2.as_str(), "{history}");

    // Delete v2's manifest from the registry: rolling back to it is refused, the rebuild offered.
    // `127.0.0.1:5000/<mesh>/web:<tag>@sha256:…` → the repository path and the manifest digest.
    let (reference, manifest) = v2_image.split_once('@').unwrap();
    let (repository, _tag) = split_reference(reference);
    let path = repository.strip_prefix(&format!("{REGISTRY}/")).unwrap();
    let client = RegistryClient::new(
        &Registry {
            host: REGISTRY.into(),
            insecure: false,
        },
        None,
    )
    .unwrap();
    assert_eq!(
        client.delete_manifest(path, manifest).await.unwrap(),
        meshtop::backends::registry::Deleted::Deleted
    );
    let refused = k.run(&["rollback", "web", "--to", &v2, "--yes"]).await;
    let text = said(&refused);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("is no longer held by registry {REGISTRY}")),
        "{text}"
    );
    assert!(text.contains("nothing was rolled back"), "{text}");
    assert!(
        text.contains("Rebuild it from its recorded inputs")
            || text.contains("converge --force web"),
        "the rebuild is offered: {text}"
    );
    assert_eq!(k.image(&api, "web"), v1_image, "nothing moved");
    assert_eq!(k.annotation(&api)["web"]["digest"], v1.as_str());
}

/// Issue 12: a registry that wants a login. The push used the Docker config's login, but the
/// rollback's "is it still held" question and gc's registry reads went without it (401): the
/// rollback failed and gc took nothing. They now carry the push's credentials.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_and_gc_ask_a_registry_that_wants_a_login_with_the_login() {
    common::local_registry::require_registry().await;
    let proxy = common::registry_proxy::RegistryProxy::start().await;
    let api = KubeApi::start().await;
    let k = KubeMesh::new("krl", &api, true, "test-ctx", "").behind_login(&proxy);
    let repo = format!("{}/{}/web", proxy.host, k.name());
    k.deploy(&api, "web", &format!("{repo}:old"), &old_id(1));
    let (first, stderr) = k.json(&["converge", "--json"]).await;
    assert_eq!(first["stamped"], true, "{first}\n{stderr}");
    let v1_image = k.image(&api, "web");
    assert!(v1_image.starts_with(&format!("{repo}:")), "{v1_image}");
    std::fs::write(k.mesh.root().join("web/www/version.txt"), "two").unwrap();
    let (second, _) = k.json(&["converge", "--json"]).await;
    assert_eq!(decisions(&second)["web"], "build", "{second}");
    assert_ne!(k.image(&api, "web"), v1_image);

    let rollback = k.run(&["rollback", "web", "--yes", "--json"]).await;
    assert!(
        rollback.status.success(),
        "the rollback asks the registry with the login:\n{}",
        said(&rollback)
    );
    assert_eq!(k.image(&api, "web"), v1_image);

    let (gc, stderr) = k.json(&["gc", "--dry-run", "--json"]).await;
    assert!(
        gc["candidates"].as_array().is_some(),
        "gc read the registry with the login: {gc}\n{stderr}"
    );
    assert!(!gc["warnings"].to_string().contains("401"), "{gc}");
    // The login was needed: requests without it were refused (each client's first try).
    assert!(proxy.refused() > 0);
}

/// Issue 21 on Kubernetes: a clean machine (none of the mesh's images, a fresh state file, a
/// namespace without a record) reuses what an earlier converge pushed: the registry vouches and
/// nothing is pushed again. `api`'s inputs moved, so it builds FROM `tools`' artifact, which the
/// registry vouched for: `tools` (and `base` under it) are pulled onto the host for that build,
/// `web` and `worker`, which nothing builds FROM, are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_machine_reuses_the_registry_and_pulls_only_what_a_build_is_from() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = KubeMesh::new("kreuse", &api, true, "test-ctx", "");
    let (first, _) = k.json(&["converge", "--json"]).await;
    assert!(decisions(&first).values().all(|d| d == "build"), "{first}");
    let built: BTreeMap<String, Value> = first["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["name"].as_str().unwrap().to_string(), m["digest"].clone()))
        .collect();

    k.mesh.clean_daemon();
    api.put_namespace(&k.namespace, &[]);
    let app = k.mesh.root().join("api/app.sh");
    let mut text = std::fs::read_to_string(&app).unwrap();
    text.push_str("# moved on the clean machine\n");
    std::fs::write(&app, text).unwrap();
    let fresh = k.mesh.dir.path().join("clean-machine.db");
    let output = k.run_with_state(&fresh, &["converge", "--json"]).await;
    assert!(output.status.success(), "{}", said(&output));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    let decided = decisions(&summary);
    for module in ["base", "tools", "web", "worker"] {
        assert_eq!(decided[module], "registry", "{summary}");
    }
    assert_eq!(decided["api"], "build", "{summary}");
    let annotation = k.annotation(&api);
    for module in ["base", "tools", "web", "worker"] {
        assert_eq!(annotation[module]["digest"], built[module], "{annotation}");
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let repo = |module: &str| format!("{REGISTRY}/{}/{module}@sha256:", k.name());
    for module in ["base", "tools"] {
        assert!(
            stderr.contains(&format!("pulled {}", repo(module))),
            "{module} is pulled for api's build FROM it:\n{stderr}"
        );
    }
    for module in ["web", "worker"] {
        assert!(
            !stderr.contains(&format!("pulled {}", repo(module))),
            "nothing builds FROM {module}:\n{stderr}"
        );
        assert!(
            stderr.contains("nothing to push"),
            "the registry holds {module}:\n{stderr}"
        );
    }
    // One build on the clean machine, api's, pushed as every Kubernetes delivery is.
    let rows = StateDb::open(&fresh)
        .unwrap()
        .builds(&meshtop::backends::state::BuildQuery {
            mesh: k.name().to_string(),
            limit: 100,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].module.as_deref(), Some("api"), "{rows:?}");
    assert!(rows[0].published_digest.is_some(), "{rows:?}");
}
