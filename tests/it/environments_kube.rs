//! Environments end to end (issue 24): one mesh, two targets on two simulated clusters (two API test
//! servers, one kubeconfig with two contexts whose current one is prod's), the real registry (behind
//! a proxy that counts what is written to it) and the real daemon, the real binary. `converge
//! --target staging` acts on staging only; `promote api --to prod` records and sends on prod the
//! exact artifact staging's record names, building and pushing nothing; a promote whose artifact
//! the registry lost is refused naming it, stamping nothing; a named target whose context the
//! kubeconfig lacks is refused before any call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;

use common::kube_api::KubeApi;
use common::kube_objects::{pod, workload};
use common::registry_proxy::RegistryProxy;
use common::{ExampleMesh, said};
use meshtop::backends::cluster::{HISTORY_ANNOTATION, RECORD_ANNOTATION};
use meshtop::backends::registry::{Deleted, Published, RegistryClient, repository_in};
use meshtop::mesh::model::Registry;
use serde_json::Value;

/// The example mesh with two named kubernetes targets, staging and prod (promoted from staging),
/// on two API test servers, pushing to the registry through `registry`.
struct Envs {
    mesh: ExampleMesh,
    staging: KubeApi,
    prod: KubeApi,
    kubeconfig: PathBuf,
    registry: RegistryProxy,
}

impl Envs {
    async fn new(tag: &str, extra_targets: &str) -> Envs {
        common::local_registry::require_registry().await;
        let (staging, prod) = (KubeApi::start().await, KubeApi::start().await);
        let registry = RegistryProxy::open(Arc::new(|| {})).await;
        let mesh = ExampleMesh::new(tag);
        let file = mesh.mesh_file();
        let text = std::fs::read_to_string(&file).unwrap();
        let text = text.split("[[machine]]").next().unwrap().to_string();
        let name = mesh.name.clone();
        let text = text
            .replace(
                &format!("name = \"{name}\"\n"),
                &format!("name = \"{name}\"\nregistry = \"{}\"\n", registry.host),
            )
            .replace("[target]\nkind = \"docker\"\n", "");
        let targets = format!(
            "\n[[target]]\nname = \"staging\"\nkind = \"kubernetes\"\ncontext = \"ctx-staging\"\n\
             namespace = \"ns-{name}-s\"\nrollout_deadline = \"20s\"\n\n\
             [[target]]\nname = \"prod\"\nkind = \"kubernetes\"\ncontext = \"ctx-prod\"\n\
             namespace = \"ns-{name}-p\"\npromote_from = \"staging\"\nrollout_deadline = \"20s\"\n{extra_targets}"
        );
        std::fs::write(&file, format!("{text}{targets}")).unwrap();
        let kubeconfig = mesh.dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: ctx-prod\nclusters:\n\
                 - name: staging\n  cluster:\n    server: http://{}\n\
                 - name: prod\n  cluster:\n    server: http://{}\n\
                 contexts:\n- name: ctx-staging\n  context:\n    cluster: staging\n    user: test\n\
                 - name: ctx-prod\n  context:\n    cluster: prod\n    user: test\n\
                 users:\n- name: test\n  user: {{}}\n",
                staging.addr, prod.addr
            ),
        )
        .unwrap();
        let envs = Envs {
            mesh,
            staging,
            prod,
            kubeconfig,
            registry,
        };
        for (api, ns) in [(&envs.staging, envs.ns("s")), (&envs.prod, envs.ns("p"))] {
            api.put_namespace(&ns, &[]);
            for (n, module) in [(1u8, "web"), (3, "api")] {
                let image = format!("{}/{}/{module}:old", envs.registry.host, envs.mesh.name);
                let id = format!(
                    "docker-pullable://{image}@sha256:{}",
                    format!("{n:02x}").repeat(32)
                );
                let deployment = format!("{module}-1");
                api.put(
                    "deployments",
                    &ns,
                    workload("deployments", &deployment, module, &[("app", &image)], 1),
                );
                api.put(
                    "pods",
                    &ns,
                    pod(
                        &format!("{deployment}-pod"),
                        &deployment,
                        "app",
                        &image,
                        &id,
                    ),
                );
            }
        }
        envs
    }

    fn ns(&self, which: &str) -> String {
        format!("ns-{}-{which}", self.mesh.name)
    }

    fn run(&self, args: &[&str]) -> Output {
        std::process::Command::new(env!("CARGO_BIN_EXE_meshtop"))
            .env("KUBECONFIG", &self.kubeconfig)
            .arg("--mesh")
            .arg(self.mesh.mesh_file())
            .arg("--state")
            .arg(self.mesh.state())
            .args(args)
            .output()
            .unwrap()
    }

    fn json(&self, args: &[&str]) -> (Value, String) {
        let output = self.run(args);
        common::json_of(args, &output)
    }

    /// A namespace annotation, parsed (None: the namespace has none).
    fn annotation(&self, api: &KubeApi, ns: &str, key: &str) -> Option<Value> {
        let ns = api.get("namespaces", "", ns).unwrap();
        let text = ns["metadata"]["annotations"][key].as_str()?;
        Some(serde_json::from_str(text).unwrap())
    }

    fn image(&self, api: &KubeApi, ns: &str, deployment: &str) -> String {
        api.get("deployments", ns, deployment).unwrap()["spec"]["template"]["spec"]["containers"][0]
            ["image"]
            .as_str()
            .unwrap()
            .to_string()
    }

    fn client(&self) -> RegistryClient {
        let registry = Registry {
            host: self.registry.host.clone(),
            insecure: false,
        };
        RegistryClient::new(&registry, None).unwrap()
    }

    /// The manifest digest the registry serves for `reference` (None: it holds none).
    async fn published(&self, reference: &str) -> Option<String> {
        let (path, tag) = repository_in(&self.registry.host, reference);
        match self.client().manifest(path, tag).await.unwrap() {
            Published::Present { digest } => Some(digest),
            Published::Absent => None,
        }
    }

    fn builds(&self) -> usize {
        let (builds, _) = self.json(&["builds", "--json", "--limit", "1000"]);
        builds.as_array().unwrap().len()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converge_on_staging_then_promote_to_prod_moves_the_exact_artifact_and_builds_nothing() {
    let envs = Envs::new("envk", "").await;
    let (s, p) = (envs.ns("s"), envs.ns("p"));

    // converge --target staging: builds, pushes, stamps and rolls out there, and only there.
    let (first, stderr) = envs.json(&["converge", "--target", "staging", "--json"]);
    assert_eq!(first["stamped"], true, "{first}\n{stderr}");
    assert!(
        stderr.contains(&format!("context ctx-staging, namespace {s}")),
        "the converge names where it acts:\n{stderr}"
    );
    let staging = envs
        .annotation(&envs.staging, &s, RECORD_ANNOTATION)
        .unwrap();
    assert_eq!(staging.as_object().unwrap().len(), 5, "{staging}");
    let web = &staging["web"];
    let web_manifest = envs.published(web["ref"].as_str().unwrap()).await.unwrap();
    assert_eq!(
        envs.image(&envs.staging, &s, "web-1"),
        format!("{}@{web_manifest}", web["ref"].as_str().unwrap()),
        "staging's rollout module was sent"
    );
    assert_eq!(
        envs.prod.total_requests(),
        0,
        "the converge of staging never reached prod's cluster (its context is the current one)"
    );
    assert_eq!(envs.annotation(&envs.prod, &p, RECORD_ANNOTATION), None);

    // The grid: staging holds everything, prod nothing, each of prod's cells differs.
    let (grid, _) = envs.json(&["status", "--all-targets", "--json"]);
    let cell = |grid: &Value, module: &str, target: &str| -> Value {
        common::grid_cell(grid, module, target).clone()
    };
    assert_eq!(
        cell(&grid, "api", "staging")["artifact"],
        staging["api"],
        "{grid}"
    );
    assert_eq!(cell(&grid, "api", "prod")["differs"], true, "{grid}");
    assert_eq!(
        cell(&grid, "api", "staging")["differs"],
        Value::Null,
        "staging has no source"
    );

    // promote api --to prod: staging's exact ref and digest, prod's Deployment on ref@digest,
    // nothing built, nothing written to the registry.
    let (builds, writes) = (envs.builds(), envs.registry.writes());
    envs.prod.reset_counts();
    let (promoted, stderr) = envs.json(&["promote", "api", "--to", "prod", "--yes", "--json"]);
    let api = &staging["api"];
    let prod = envs.annotation(&envs.prod, &p, RECORD_ANNOTATION).unwrap();
    assert_eq!(
        prod["api"], *api,
        "prod's record names staging's artifact\n{stderr}"
    );
    assert_eq!(prod.as_object().unwrap().len(), 1, "only api moved: {prod}");
    let reference = api["ref"].as_str().unwrap();
    let api_manifest = envs.published(reference).await.unwrap();
    assert_eq!(
        envs.image(&envs.prod, &p, "api-1"),
        format!("{reference}@{api_manifest}"),
        "{promoted}\n{stderr}"
    );
    assert_eq!(envs.builds(), builds, "a promote builds nothing");
    assert_eq!(envs.registry.writes(), writes, "a promote pushes nothing");
    assert_eq!(promoted["report"]["sends"][0]["ok"], true, "{promoted}");
    assert_eq!(
        envs.annotation(&envs.staging, &s, RECORD_ANNOTATION)
            .unwrap(),
        staging,
        "staging's record is untouched"
    );
    // The history on prod says who moved what from where.
    let history = envs.annotation(&envs.prod, &p, HISTORY_ANNOTATION).unwrap();
    let stamp = &history["api"][0];
    assert_eq!(stamp["kind"], "promote", "{history}");
    assert_eq!(stamp["from_target"], "staging", "{history}");
    assert_eq!(stamp["to_digest"], api["digest"], "{history}");
    let (local, _) = envs.json(&["history", "api", "--target", "prod", "--json"]);
    assert_eq!(local[0]["kind"], "promote", "{local}");
    assert_eq!(local[0]["from_target"], "staging", "{local}");
    // The grid: api is the same on both now; web on prod still differs.
    let (grid, _) = envs.json(&["status", "--all-targets", "--json"]);
    assert_eq!(cell(&grid, "api", "prod")["differs"], false, "{grid}");
    assert_eq!(cell(&grid, "web", "prod")["differs"], true, "{grid}");

    // A new api on staging whose manifest the registry then lost: the promote is refused, naming
    // it, and prod's record and Deployment stay as they were.
    std::fs::write(envs.mesh.root().join("api/changed.txt"), "v2\n").unwrap();
    let (second, _) = envs.json(&["converge", "--target", "staging", "--json", "api"]);
    assert_eq!(second["stamped"], true, "{second}");
    let moved = envs
        .annotation(&envs.staging, &s, RECORD_ANNOTATION)
        .unwrap()["api"]
        .clone();
    let lost_ref = moved["ref"].as_str().unwrap().to_string();
    assert_ne!(lost_ref, reference);
    let manifest = envs.published(&lost_ref).await.unwrap();
    let (path, _) = repository_in(&envs.registry.host, &lost_ref);
    assert_eq!(
        envs.client()
            .delete_manifest(path, &manifest)
            .await
            .unwrap(),
        Deleted::Deleted
    );
    let before = (
        envs.annotation(&envs.prod, &p, RECORD_ANNOTATION),
        envs.annotation(&envs.prod, &p, HISTORY_ANNOTATION),
        envs.image(&envs.prod, &p, "api-1"),
    );
    let refused = envs.run(&["promote", "api", "--to", "prod", "--yes"]);
    let text = said(&refused);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&lost_ref),
        "the refusal names the artifact:\n{text}"
    );
    assert!(
        text.contains(&format!(
            "is no longer held by registry {}",
            envs.registry.host
        )),
        "{text}"
    );
    assert!(text.contains("nothing was promoted or stamped"), "{text}");
    let after = (
        envs.annotation(&envs.prod, &p, RECORD_ANNOTATION),
        envs.annotation(&envs.prod, &p, HISTORY_ANNOTATION),
        envs.image(&envs.prod, &p, "api-1"),
    );
    assert_eq!(after, before, "nothing was stamped or sent on prod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_target_whose_context_the_kubeconfig_lacks_is_refused_before_any_call() {
    let qa = "\n[[target]]\nname = \"qa\"\nkind = \"kubernetes\"\ncontext = \"ctx-qa\"\nnamespace = \"qa\"\n";
    let envs = Envs::new("envq", qa).await;
    let text = std::fs::read_to_string(envs.mesh.mesh_file()).unwrap();
    // The target's line is its [[target]] header's, the one above its name.
    let line = text
        .lines()
        .position(|l| l == "name = \"qa\"")
        .expect("the qa target");
    envs.staging.reset_counts();
    envs.prod.reset_counts();
    for args in [
        &["converge", "--target", "qa"][..],
        &["status", "--target", "qa"],
        &["promote", "api", "--to", "qa", "--from", "staging", "--yes"],
    ] {
        let out = envs.run(args);
        let said = said(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
        assert!(
            said.contains(&format!(
                "{}:{line}: target \"qa\" names context \"ctx-qa\", which the kubeconfig ({}) does not have",
                envs.mesh.mesh_file().display(),
                envs.kubeconfig.display()
            )),
            "{args:?}: {said}"
        );
        assert!(
            said.contains("contexts there: ctx-staging, ctx-prod"),
            "{args:?}: {said}"
        );
    }
    assert_eq!(envs.staging.total_requests(), 0, "no call reached staging");
    assert_eq!(
        envs.prod.total_requests(),
        0,
        "no call reached prod (the current context)"
    );
    assert_eq!(envs.builds(), 0, "nothing was built");
    // --context cannot point a named target elsewhere.
    let out = envs.run(&["status", "--target", "staging", "--context", "ctx-prod"]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(said(&out).contains("names its targets"), "{}", said(&out));
    assert_eq!(envs.prod.total_requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_cannot_be_read_is_said_in_the_grid_and_never_promoted_over() {
    let envs = Envs::new("envu", "").await;
    let (first, stderr) = envs.json(&["converge", "--target", "staging", "--json"]);
    assert_eq!(first["stamped"], true, "{first}\n{stderr}");
    // Someone's hand-edit broke prod's record: what is in it may still be mended by hand.
    let p = envs.ns("p");
    let broken = "{\"api\": {\"ref\": \"x\", \"digest\":";
    envs.prod.put_namespace(&p, &[(RECORD_ANNOTATION, broken)]);

    // The grid does not show prod as empty: it says why, and the command fails.
    let out = envs.run(&["status", "--all-targets", "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let grid: Value = serde_json::from_slice(&out.stdout).unwrap();
    let prod = grid["targets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "prod")
        .cloned()
        .unwrap_or_else(|| panic!("prod's column: {grid}"));
    assert!(
        prod["error"]
            .as_str()
            .unwrap_or_default()
            .contains(RECORD_ANNOTATION),
        "{grid}"
    );

    // A promote would write web and drop what the broken record held: refused, nothing written.
    let out = envs.run(&["promote", "web", "--to", "prod", "--yes"]);
    assert_ne!(out.status.code(), Some(0), "{}", said(&out));
    assert!(
        said(&out).contains("nothing was promoted or stamped"),
        "{}",
        said(&out)
    );
    let ns = envs.prod.get("namespaces", "", &p).unwrap();
    assert_eq!(
        ns["metadata"]["annotations"][RECORD_ANNOTATION], broken,
        "prod's record is as it was"
    );
    assert_eq!(
        envs.image(&envs.prod, &p, "web-1"),
        format!("{}/{}/web:old", envs.registry.host, envs.mesh.name)
    );
}
