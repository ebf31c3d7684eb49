//! gc takes nothing a teammate needs (issue 19): the Kubernetes target on the project's API test
//! server (its controllers roll Deployments out and the pods report the manifest digest they
//! pulled, as containerd does), the real registry (scripts/start-registry.sh, 127.0.0.1:5000) and the
//! real daemon. Nothing here skips: a missing registry or daemon fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use common::kube_api::KubeApi;
use common::kube_mesh::{KubeMesh, REGISTRY, old_id};
use common::registry_proxy::RegistryProxy;
use common::{decisions, said};
use meshtop::backends::cluster::{LEASE_HOST, LEASE_KIND, LEASE_OPERATION, LEASE_PID, lease_name};
use meshtop::backends::registry::{Published, RegistryClient, split_reference};
use meshtop::mesh::model::Registry;
use serde_json::{Value, json};

fn registry() -> RegistryClient {
    RegistryClient::new(
        &Registry {
            host: REGISTRY.into(),
            insecure: false,
        },
        None,
    )
    .unwrap()
}

/// `127.0.0.1:5000/<mesh>/web:<tag>` → `<mesh>/web`.
fn path_of(reference: &str) -> String {
    let (repository, _) = split_reference(reference.split('@').next().unwrap());
    repository
        .strip_prefix(&format!("{REGISTRY}/"))
        .unwrap_or(repository)
        .to_string()
}

async fn present(path: &str, reference: &str) -> Option<String> {
    match registry().manifest(path, reference).await.unwrap() {
        Published::Present { digest } => Some(digest),
        Published::Absent => None,
    }
}

fn digest_of(summary: &Value, module: &str) -> String {
    summary["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == module)
        .unwrap_or_else(|| panic!("no module {module} in {summary}"))["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Give web new inputs and converge: its new artifact.
async fn change_web(k: &KubeMesh, text: &str) -> String {
    std::fs::write(k.mesh.root().join("web/www/version.txt"), text).unwrap();
    let (summary, _) = k.json(&["converge", "--json"]).await;
    assert_eq!(decisions(&summary)["web"], "build", "{summary}");
    digest_of(&summary, "web")
}

/// The manifest digest the build of `artifact` published, from `builds --json`.
async fn published(k: &KubeMesh, artifact: &str) -> (String, String) {
    let (builds, _) = k.json(&["builds", "--json", "--limit", "100"]).await;
    let build = builds
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["digest"] == artifact)
        .unwrap_or_else(|| panic!("no build of {artifact} in {builds}"));
    (
        build["published_ref"].as_str().unwrap().to_string(),
        build["published_digest"].as_str().unwrap().to_string(),
    )
}

fn image_present(id: &str) -> bool {
    Command::new("docker")
        .args(["image", "inspect", id])
        .output()
        .unwrap()
        .status
        .success()
}

fn with_kind<'a>(report: &'a Value, list: &str, kind: &str) -> Vec<&'a Value> {
    report[list]
        .as_array()
        .unwrap_or_else(|| panic!("no {list} in {report}"))
        .iter()
        .filter(|c| c["kind"] == kind)
        .collect()
}

/// The example mesh on the API test server with web's Deployment running an old image, then
/// converged: every module built, pushed and stamped, web's v1 rolled out. Returns the summary.
async fn web_rolled_out(api: &KubeApi, tag: &str) -> (KubeMesh, Value) {
    let k = KubeMesh::new(tag, api, true, "test-ctx", "");
    k.deploy(
        api,
        "web",
        &format!("{REGISTRY}/{}/web:old", k.name()),
        &old_id(1),
    );
    let (first, stderr) = k.json(&["converge", "--json"]).await;
    assert_eq!(first["stamped"], true, "{first}\n{stderr}");
    (k, first)
}

/// web's policy becomes `record`: what it builds is stamped, never sent.
fn web_records(k: &KubeMesh) {
    let file = k.mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replace(
        "name = \"web\"\ncontext = \"web\"\nbase = \"base\"\npolicy = \"rollout\"",
        "name = \"web\"\ncontext = \"web\"\nbase = \"base\"\npolicy = \"record\"",
    );
    assert!(text.contains("context = \"web\"\nbase = \"base\"\npolicy = \"record\""));
    std::fs::write(&file, text).unwrap();
}

/// Issue 19, item 1: v1 is rolled out, web switched to policy `record`, v2..v4 built and stamped:
/// the Deployment still runs v1 by its manifest digest. Before the fix gc compared artifacts only
/// and deleted that manifest (the next pod on a node without the layers: ImagePullBackOff).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_a_pod_runs_survives_gc() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let (k, first) = web_rolled_out(&api, "gcrun").await;
    let v1 = digest_of(&first, "web");
    let running = k.image(&api, "web");
    let (_, v1_manifest) = running.split_once('@').unwrap();
    let path = path_of(&running);
    let (status, _) = k.json(&["status", "--json"]).await;
    assert_eq!(
        status[0]["running"][0], v1_manifest,
        "pods report the manifest digest: {status}"
    );

    // web records from now on: its Deployment stays on v1 while v2..v4 are stamped.
    web_records(&k);
    let v2 = change_web(&k, "two").await;
    for text in ["three", "four"] {
        change_web(&k, text).await;
    }
    assert_eq!(k.image(&api, "web"), running, "policy record sends nothing");
    let (_, v2_manifest) = published(&k, &v2).await;

    // A teammate's state file knows no build of v1: the registry maps the manifest to its artifact.
    let teammate = k.mesh.dir.path().join("teammate.db");
    let dry = k
        .run_with_state(
            &teammate,
            &["gc", "--keep", "1", "--dry-run", "--grace", "0s", "--json"],
        )
        .await;
    assert!(dry.status.success(), "{}", said(&dry));
    let dry: Value = serde_json::from_slice(&dry.stdout).unwrap();
    let images = with_kind(&dry, "candidates", "image");
    assert!(!images.is_empty(), "v2 and v3 are candidates: {dry}");
    assert!(images.iter().all(|c| c["artifact"] != v1.as_str()), "{dry}");

    let (gc, stderr) = k
        .json(&["gc", "--keep", "1", "--yes", "--grace", "0s", "--json"])
        .await;
    assert_eq!(
        present(&path, v1_manifest).await.as_deref(),
        Some(v1_manifest),
        "the running manifest was deleted: {gc}\n{stderr}"
    );
    assert!(
        image_present(&v1),
        "the artifact a pod runs stays on the host: {gc}"
    );
    assert!(
        gc["kept_by"]["running"].as_u64().unwrap() >= 1,
        "kept as running: {gc}"
    );
    // gc still took what nothing needs: v2 and v3 (v4 is the record's and the newest).
    let taken = with_kind(&gc, "candidates", "manifest");
    assert_eq!(taken.len(), 2, "{gc}");
    assert!(taken.iter().all(|c| c["outcome"] == "deleted"), "{gc}");
    assert_eq!(present(&path, &v2_manifest).await, None, "{gc}");
}

/// Pods lag the template (issue 31): web's v2 is sent but its pods are never scheduled, so the
/// Deployment's template names v2 while its pods still run v1 (maxUnavailable 0 keeps them); then web
/// records v3. gc keeps v1 because the pods run it and v2 because the template names it (the next pod
/// pulls it) — on the old test server pods always ran what the template named, so "kept as running"
/// could not be told from "kept as named". Before the fix gc kept what pods ran only and deleted v2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_keeps_what_lagging_pods_run_and_what_their_template_names() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let (k, _) = web_rolled_out(&api, "gclag").await;
    let v1_image = k.image(&api, "web");
    let (_, v1_manifest) = v1_image.split_once('@').unwrap();
    let path = path_of(&v1_image);

    // From now on no new pod of web is scheduled, and the roll-out's deadline has passed.
    api.pods_of_image(
        &format!("{REGISTRY}/{}/web:", k.name()),
        common::kube_controllers::Fate::Unschedulable(
            "0/1 nodes are available: 1 Insufficient cpu.".into(),
        ),
    );
    api.pass_progress_deadline("deployments", &k.namespace, "web-1");
    std::fs::write(k.mesh.root().join("web/www/version.txt"), "two").unwrap();
    let sent = k.run(&["converge", "--json"]).await;
    assert_ne!(
        sent.status.code(),
        Some(0),
        "the roll-out cannot finish: {}",
        said(&sent)
    );
    // The controllers run on to a steady state: the pods that can run have run (on the old server,
    // without unschedulable pods, every pod would now run v2 as the template names it).
    api.settle("deployments", &k.namespace, "web-1");
    let v2_image = k.image(&api, "web");
    assert_ne!(v2_image, v1_image, "the template names v2");
    let (_, v2_manifest) = v2_image.split_once('@').unwrap();
    let (status, _) = k.json(&["status", "--json"]).await;
    assert_eq!(
        status[0]["running"],
        json!([v1_manifest]),
        "the pods run v1: {status}"
    );

    // web records v3 (policy record: nothing is sent).
    web_records(&k);
    let v3 = change_web(&k, "three").await;
    assert_eq!(k.image(&api, "web"), v2_image);

    let (gc, stderr) = k
        .json(&["gc", "--keep", "1", "--yes", "--grace", "0s", "--json"])
        .await;
    assert!(
        present(&path, v1_manifest).await.is_some(),
        "the manifest the pods run was deleted: {gc}\n{stderr}"
    );
    assert!(
        present(&path, v2_manifest).await.is_some(),
        "the manifest the template names was deleted: {gc}\n{stderr}"
    );
    assert!(gc["kept_by"]["running"].as_u64().unwrap() >= 2, "{gc}");
    let (_, v3_manifest) = published(&k, &v3).await;
    assert!(present(&path, &v3_manifest).await.is_some(), "{gc}");
}

/// `PUT /v2/<path>/manifests/<tag>` with the bytes of the manifest `digest`: a tag made by hand.
async fn tag_by_hand(path: &str, digest: &str, tag: &str) {
    let http = reqwest::Client::new();
    let got = http
        .get(format!("http://{REGISTRY}/v2/{path}/manifests/{digest}"))
        .header("Accept", meshtop::backends::registry::MANIFEST_ACCEPT)
        .send()
        .await
        .unwrap();
    assert!(got.status().is_success(), "{}", got.status());
    let media_type = got.headers()["content-type"].clone();
    let body = got.bytes().await.unwrap();
    let put = http
        .put(format!("http://{REGISTRY}/v2/{path}/manifests/{tag}"))
        .header("Content-Type", media_type)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 201, "{:?}", put.text().await);
}

/// Issue 19, item 2: a registry's delete by digest untags every tag naming the manifest
/// (distribution's `DeleteImageManifest`). `prod`, given to v2's manifest by hand, survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_given_by_hand_survives_gc() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = KubeMesh::new("gctag", &api, true, "test-ctx", "");
    let (first, _) = k.json(&["converge", "--json"]).await;
    let v1 = digest_of(&first, "web");
    let v2 = change_web(&k, "two").await;
    change_web(&k, "three").await;
    let (reference, v2_manifest) = published(&k, &v2).await;
    let (_, v1_manifest) = published(&k, &v1).await;
    let path = path_of(&reference);
    tag_by_hand(&path, &v2_manifest, "prod").await;
    assert_eq!(
        present(&path, "prod").await.as_deref(),
        Some(v2_manifest.as_str())
    );

    let (dry, _) = k
        .json(&["gc", "--keep", "1", "--dry-run", "--grace", "0s", "--json"])
        .await;
    let spared = with_kind(&dry, "spared", "manifest");
    assert_eq!(spared.len(), 1, "{dry}");
    assert_eq!(spared[0]["name"], format!("{path}@{v2_manifest}"), "{dry}");
    assert_eq!(spared[0]["why"], "tagged prod by someone else", "{dry}");
    let text = said(
        &k.run(&["gc", "--keep", "1", "--dry-run", "--grace", "0s"])
            .await,
    );
    assert!(text.contains("kept: tagged prod by someone else"), "{text}");

    let (gc, stderr) = k
        .json(&["gc", "--keep", "1", "--yes", "--grace", "0s", "--json"])
        .await;
    assert_eq!(
        present(&path, "prod").await.as_deref(),
        Some(v2_manifest.as_str()),
        "prod was untagged: {gc}\n{stderr}"
    );
    assert!(present(&path, &v2_manifest).await.is_some(), "{gc}");
    // v1's manifest, which only meshtop's own tag named, went.
    assert_eq!(present(&path, &v1_manifest).await, None, "{gc}");
}

/// Issue 19, item 3: nothing built or published within the grace is taken, and the plan says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_within_the_grace_is_kept_and_named_so() {
    common::local_registry::require_registry().await;
    let api = KubeApi::start().await;
    let k = KubeMesh::new("gcgrace", &api, true, "test-ctx", "");
    let (first, _) = k.json(&["converge", "--json"]).await;
    let v1 = digest_of(&first, "web");
    change_web(&k, "two").await;
    let (reference, v1_manifest) = published(&k, &v1).await;
    let path = path_of(&reference);

    let bad = k.run(&["gc", "--grace", "soon", "--dry-run"]).await;
    assert_eq!(bad.status.code(), Some(2), "{}", said(&bad));
    assert!(said(&bad).contains("is not a duration"), "{}", said(&bad));

    // The default grace (1h): v1 was built a moment ago.
    let (dry, _) = k.json(&["gc", "--keep", "1", "--dry-run", "--json"]).await;
    assert_eq!(dry["grace_ms"], 3_600_000, "{dry}");
    assert!(
        dry["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["artifact"] != v1.as_str()),
        "{dry}"
    );
    for kind in ["manifest", "image"] {
        let spared = with_kind(&dry, "spared", kind);
        let v1_spared: Vec<_> = spared
            .iter()
            .filter(|c| c["artifact"] == v1.as_str())
            .collect();
        assert_eq!(v1_spared.len(), 1, "{kind}: {dry}");
        let why = v1_spared[0]["why"].as_str().unwrap();
        assert!(
            why.starts_with("built ") && why.ends_with(" ago, within the grace of 1h"),
            "{why}"
        );
    }
    let text = said(
        &k.run(&["gc", "--keep", "1", "--dry-run", "--grace", "2h"])
            .await,
    );
    assert!(text.contains("within the grace of 2h"), "{text}");

    let (gc, _) = k.json(&["gc", "--keep", "1", "--yes", "--json"]).await;
    assert!(present(&path, &v1_manifest).await.is_some(), "{gc}");
    assert!(image_present(&v1), "{gc}");

    // Without a grace v1 is unreachable: the same plan takes it.
    let (dry, _) = k
        .json(&["gc", "--keep", "1", "--dry-run", "--grace", "0s", "--json"])
        .await;
    let manifests = with_kind(&dry, "candidates", "manifest");
    assert_eq!(manifests.len(), 1, "{dry}");
    assert_eq!(
        manifests[0]["name"],
        format!("{path}@{v1_manifest}"),
        "{dry}"
    );
}

/// Issue 19, item 4: every delete is made only while gc still holds the mesh, checked just before
/// it. Three candidates; a teammate takes the mesh's Lease as gc's second delete reaches the registry
/// (as `kubectl` and a converge on another machine would): the first two are deleted, the third — which
/// a gc checking the lease once, before its first delete, would also delete — is not, and gc says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gc_that_loses_the_lease_deletes_nothing_more() {
    common::local_registry::require_registry().await;
    let api = Arc::new(KubeApi::start().await);
    let place: Arc<OnceLock<(String, String)>> = Arc::default();
    let fired = Arc::new(AtomicBool::new(false));
    let deletes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hook = {
        let (api, place, fired, deletes) =
            (api.clone(), place.clone(), fired.clone(), deletes.clone());
        Arc::new(move || {
            let Some((namespace, mesh)) = place.get() else {
                return;
            };
            // The first delete goes through untouched; the teammate takes the mesh at the second.
            if deletes.fetch_add(1, Ordering::SeqCst) != 1 || fired.swap(true, Ordering::SeqCst) {
                return;
            }
            let name = lease_name(mesh);
            let mut lease = api
                .get("leases", namespace, &name)
                .expect("gc holds the mesh's Lease while it deletes");
            let now = chrono::Utc::now()
                .format("%Y-%m-%dT%H:%M:%S%.6fZ")
                .to_string();
            lease["spec"]["holderIdentity"] = json!("teammate-host/4242/converge/op-teammate");
            lease["spec"]["acquireTime"] = json!(now);
            lease["spec"]["renewTime"] = json!(now);
            let annotations = &mut lease["metadata"]["annotations"];
            annotations[LEASE_HOST] = json!("teammate-host");
            annotations[LEASE_PID] = json!("4242");
            annotations[LEASE_KIND] = json!("converge");
            annotations[LEASE_OPERATION] = json!("op-teammate");
            api.put("leases", namespace, lease);
        })
    };
    let proxy = RegistryProxy::open(hook).await;
    let k = KubeMesh::new("gclost", &api, true, "test-ctx", "").through(&proxy);
    k.json(&["converge", "--json"]).await;
    for text in ["two", "three", "four"] {
        change_web(&k, text).await;
    }
    place
        .set((k.namespace.clone(), k.name().to_string()))
        .unwrap();

    let swept = k
        .run(&["gc", "--keep", "1", "--yes", "--grace", "0s", "--json"])
        .await;
    assert_eq!(swept.status.code(), Some(1), "{}", said(&swept));
    assert!(
        fired.load(Ordering::SeqCst),
        "no second manifest delete reached the registry"
    );
    assert_eq!(
        deletes.load(Ordering::SeqCst),
        2,
        "only two deletes were sent"
    );
    let report: Value = serde_json::from_slice(&swept.stdout).unwrap();
    let manifests = with_kind(&report, "candidates", "manifest");
    assert_eq!(manifests.len(), 3, "{report}");
    assert_eq!(manifests[0]["outcome"], "deleted", "{report}");
    assert_eq!(manifests[1]["outcome"], "deleted", "{report}");
    let refused = manifests[2]["outcome"].as_str().unwrap();
    assert!(
        refused.starts_with("failed: not taken") && refused.contains("teammate-host"),
        "{refused}"
    );
    // The one not taken is still in the registry (asked through the proxy's upstream).
    let (path, digest) = manifests[2]["name"]
        .as_str()
        .unwrap()
        .split_once('@')
        .unwrap();
    assert!(present(path, digest).await.is_some(), "{report}");
}
