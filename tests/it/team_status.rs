//! One mesh, many hands (issues 19 and 21): what CI rolled out reads `current` from any state file.
//! Pods report the *manifest* digest they pulled (`repo@sha256:…`, as containerd and cri-dockerd do),
//! the record names the artifact (the config digest). CI's state file knows which manifest its push
//! published; a teammate's fresh state file does not, and asks the registry, so that it never calls
//! a machine behind that runs exactly the record's artifact. The real binary, registry and daemon;
//! the API test server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::kube_api::KubeApi;
use common::said;
use common::team::Team;
use serde_json::Value;

/// `status --json` of one state file: machine name → its row.
async fn status(team: &Team, state: &std::path::Path) -> serde_json::Map<String, Value> {
    let output = team.run(state, &["status", "--json"]).await;
    assert!(output.status.success(), "{}", said(&output));
    let rows: Value = serde_json::from_slice(&output.stdout).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .map(|row| (row["name"].as_str().unwrap().to_string(), row.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_ci_rolled_out_is_current_in_a_teammates_fresh_state_file() {
    let api = KubeApi::start().await;
    let team = Team::new("tstat", &api).await;
    team.runs_old(&api, "base");

    // CI (alice's state file here) converges base: pushed, stamped, base-1 rolled to ref@manifest.
    let ci = team
        .run(&team.alice(), &["converge", "--json", "base"])
        .await;
    assert!(ci.status.success(), "{}", said(&ci));
    let record = api.cluster(&team.namespace).read_record().await.unwrap();
    let artifact = record.record["base"].digest.clone();

    // The new pod runs the pushed manifest, which is not the artifact's (config) digest.
    let deadline = Instant::now() + Duration::from_secs(30);
    let running = loop {
        let rows = status(&team, &team.alice()).await;
        let running = rows["base-1"]["running"][0].as_str().unwrap_or_default();
        if rows["base-1"]["state"] == "current" {
            break running.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "base-1 never current for CI: {rows:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_ne!(running, artifact, "pods report the manifest digest");

    // Bob: a fresh state file, no build row of CI's push. Same verdict, same running digest.
    let rows = status(&team, &team.bob()).await;
    assert_eq!(rows["base-1"]["state"], "current", "{rows:?}");
    assert_eq!(rows["base-1"]["running"][0], running.as_str(), "{rows:?}");
    let exit = team.run(&team.bob(), &["status", "--exit-code"]).await;
    assert_eq!(exit.status.code(), Some(0), "{}", said(&exit));
}
