//! Trust from the door to the machine on Kubernetes (the API test server, the real registry and
//! daemon), with `trust` set: the record keeps the manifest CI pushed and verified, every send
//! deploys `ref@<that manifest>` whoever sends and from whichever state file, a tag pushed over
//! afterwards never rolls out, and `verify` compares manifests with manifests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::example::{builds, decisions, said};
use common::kube_api::KubeApi;
use common::kube_objects::{pod, workload};
use common::local_registry::docker;
use common::signing::*;
use common::team::Team;
use meshtop::backends::cluster::PINS_ANNOTATION;

/// The example mesh on the API test server with `trust`, CI's key made; `api-1` runs an old image.
async fn signed_team(tag: &str, api: &KubeApi) -> (Team, std::path::PathBuf) {
    let team = Team::new(tag, api).await;
    let (ci_key, _) = trust_ci_key(&team.mesh);
    team.runs_old(api, "api");
    (team, ci_key)
}

fn deployment_image(api: &KubeApi, team: &Team, name: &str) -> String {
    api.get("deployments", &team.namespace, name).unwrap()["spec"]["template"]["spec"]["containers"]
        [0]["image"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ref_pushed_over_after_ci_recorded_it_is_never_sent_from_a_teammates_machine() {
    let api = KubeApi::start().await;
    let (team, ci_key) = signed_team("kttag", &api).await;
    // CI converges, pushes and signs; api's policy records it without a send.
    let ci = team
        .run(
            &team.alice(),
            &["converge", "--sign-key", ci_key.to_str().unwrap(), "--json"],
        )
        .await;
    assert!(ci.status.success(), "{}", said(&ci));
    let record = api.cluster(&team.namespace).read_record().await.unwrap();
    let entry = record.record["api"].clone();
    let genuine = entry
        .manifest
        .clone()
        .expect("the record keeps the manifest CI pushed");

    // The look-alike pushed over api's ref after CI recorded it.
    let look_alike = look_alike_of(team.mesh.dir.path(), &entry.reference);
    docker(&["push", &entry.reference]);
    assert_ne!(look_alike, entry.digest);

    // Bob: his own state file (no build row of CI's push). The record answers for everything…
    let bob = team.run(&team.bob(), &["converge", "--json"]).await;
    assert!(bob.status.success(), "{}", said(&bob));
    let bob: serde_json::Value = serde_json::from_slice(&bob.stdout).unwrap();
    assert!(decisions(&bob).values().all(|d| d == "record"), "{bob}");
    // …and his send deploys the recorded manifest, not what the tag names now.
    let sent = team.run(&team.bob(), &["send", "api", "--yes"]).await;
    assert!(sent.status.success(), "{}", said(&sent));
    assert_eq!(
        deployment_image(&api, &team, "api-1"),
        format!("{}@{genuine}", entry.reference)
    );

    // verify: the pods report the manifest digest, which CI's key signed.
    let verify = team.run(&team.bob(), &["verify", "api", "--json"]).await;
    assert_eq!(verify.status.code(), Some(0), "{}", said(&verify));
    let checked: serde_json::Value = serde_json::from_slice(&verify.stdout).unwrap();
    let machine = checked
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["of"] == "api-1")
        .unwrap_or_else(|| panic!("api-1 checked: {checked}"));
    assert_eq!(machine["signed"], true, "{machine}");
    assert_eq!(machine["artifact"], genuine.as_str(), "{machine}");

    // Someone sets the look-alike by hand (what `kubectl set image` does): verify says ✗.
    let forged = {
        let path = entry.reference.rsplit_once(':').unwrap().0;
        let listing = docker(&[
            "inspect",
            "-f",
            "{{range .RepoDigests}}{{.}} {{end}}",
            &look_alike,
        ]);
        listing
            .split_whitespace()
            .find(|d| d.starts_with(path))
            .expect("the pushed look-alike has a repo digest")
            .to_string()
    };
    api.put(
        "deployments",
        &team.namespace,
        workload("deployments", "api-1", "api", &[("app", &forged)], 1),
    );
    api.put(
        "pods",
        &team.namespace,
        pod(
            "api-1-pod",
            "api-1",
            "app",
            &forged,
            &format!("docker-pullable://{forged}"),
        ),
    );
    let verify = team.run(&team.bob(), &["verify", "api"]).await;
    let text = said(&verify);
    assert_eq!(verify.status.code(), Some(1), "{text}");
    assert!(text.contains("✗ api (api-1)"), "{text}");
}

/// `name`'s state in `status --json`.
fn state_of(status: &serde_json::Value, name: &str) -> String {
    status
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {status}"))["state"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_annotation_is_not_what_runs_where_the_target_pulls_from_a_registry() {
    // Issue 51, case 4: the pod annotation `jr2.dev/artifact` was believed whenever the image had
    // no `@`, on every target. Whoever can patch a Deployment set `<ref>:evil` with the annotation
    // naming the recorded artifact, and status and verify read it as current.
    let api = KubeApi::start().await;
    api.runtime(common::kube_controllers::Runtime::Containerd);
    let (team, ci_key) = signed_team("ktannot", &api).await;
    let ci = team
        .run(
            &team.alice(),
            &["converge", "--sign-key", ci_key.to_str().unwrap(), "--json"],
        )
        .await;
    assert!(ci.status.success(), "{}", said(&ci));
    let sent = team.run(&team.alice(), &["send", "api", "--yes"]).await;
    assert!(sent.status.success(), "{}", said(&sent));
    let entry = api
        .cluster(&team.namespace)
        .read_record()
        .await
        .unwrap()
        .record["api"]
        .clone();
    let status = |state: std::path::PathBuf| {
        let team = &team;
        async move {
            let out = team.run(&state, &["status", "--json"]).await;
            assert!(out.status.success(), "{}", said(&out));
            serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
        }
    };
    assert_eq!(state_of(&status(team.alice()).await, "api-1"), "current");

    // Another module's real image pushed under `<api's repository>:evil`.
    let repository = entry.reference.rsplit_once(':').unwrap().0.to_string();
    let evil = format!("{repository}:evil");
    let tools_ref = api
        .cluster(&team.namespace)
        .read_record()
        .await
        .unwrap()
        .record["tools"]
        .reference
        .clone();
    docker(&["tag", &tools_ref, &evil]);
    docker(&["push", &evil]);
    let served = docker(&[
        "inspect",
        "-f",
        "{{range .RepoDigests}}{{.}} {{end}}",
        &evil,
    ])
    .split_whitespace()
    .find(|d| d.starts_with(&format!("{repository}@")))
    .expect("the pushed image has a repo digest")
    .to_string();

    // The Deployment patched by hand: the tag, and the annotations naming the recorded artifact.
    let mut object = api.get("deployments", &team.namespace, "api-1").unwrap();
    object["spec"]["template"]["spec"]["containers"][0]["image"] = serde_json::json!(evil);
    object["spec"]["template"]["metadata"]["annotations"] = serde_json::json!({
        "jr2.dev/artifact": entry.digest,
        "jr2.dev/artifact-image": evil,
    });
    let generation = object["metadata"]["generation"].as_i64().unwrap_or(1);
    object["metadata"]["generation"] = serde_json::json!(generation + 1);
    api.put("deployments", &team.namespace, object);
    api.settle("deployments", &team.namespace, "api-1");
    // The pods report what the registry served for the tag, as a runtime does.
    let pods: Vec<serde_json::Value> = api
        .all("pods", &team.namespace)
        .into_iter()
        .filter(|p| p["spec"]["containers"][0]["image"] == evil.as_str())
        .collect();
    assert!(!pods.is_empty(), "the patched template's pods run");
    for pod in &pods {
        assert_eq!(
            pod["status"]["containerStatuses"][0]["imageID"],
            served.as_str(),
            "{pod}"
        );
    }

    let seen = status(team.bob()).await;
    assert_ne!(state_of(&seen, "api-1"), "current", "{seen}");
    let verify = team.run(&team.bob(), &["verify", "api"]).await;
    let text = said(&verify);
    assert_eq!(verify.status.code(), Some(1), "{text}");
    assert!(text.contains("✗ api (api-1)"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_that_cannot_be_read_stop_a_kubernetes_converge_before_any_build() {
    let api = KubeApi::start().await;
    let (team, ci_key) = signed_team("ktpins", &api).await;
    api.put_namespace(&team.namespace, &[(PINS_ANNOTATION, "{not json")]);
    let converge = team
        .run(
            &team.alice(),
            &["converge", "--sign-key", ci_key.to_str().unwrap()],
        )
        .await;
    let text = said(&converge);
    assert_ne!(converge.status.code(), Some(0), "{text}");
    assert!(
        text.contains("unreadable annotation") && text.contains("nothing was built or pushed"),
        "{text}"
    );
    assert!(builds(&team.mesh).is_empty(), "nothing built: {text}");
}
