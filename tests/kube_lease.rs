//! One mesh, many hands (issue 19, the lock): on Kubernetes the mesh is held by a Lease in the
//! namespace, renewed while any operation that changes something runs. The real binary, the real
//! registry and daemon, the API test server; the stale limit shortened through the test hook
//! `MESHTOP_TEST_LOCK_STALE_MS`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::{Duration, Instant};

use common::kube_api::KubeApi;
use common::kube_controllers::Fate;
use common::said;
use common::team::{REGISTRY, Team};

/// Wait until the mesh's Lease names an operation of `kind`.
async fn lease_held_by(api: &KubeApi, team: &Team, kind: &str) -> serde_json::Value {
    let name = format!("meshtop-{}", team.mesh.name);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(lease) = api.get("leases", &team.namespace, &name)
            && lease["metadata"]["annotations"]["jr2.dev/operation-kind"] == kind
            && !lease["spec"]["holderIdentity"].is_null()
        {
            return lease;
        }
        assert!(Instant::now() < deadline, "no {kind} ever held {name}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_past_the_stale_limit_holds_the_mesh_against_both_state_files() {
    let api = KubeApi::start().await;
    let team = Team::new("lease", &api).await;
    // Alice converges base (pushed, stamped), then a Deployment runs an older base.
    let first = team
        .run(&team.alice(), &["converge", "--json", "base"])
        .await;
    assert!(first.status.success(), "{}", said(&first));
    team.runs_old(&api, "base");
    // The new pods never become ready: the send follows the roll-out until its 6 s deadline.
    api.pods_of_image(
        &format!("{REGISTRY}/{}/base:", team.mesh.name),
        Fate::Waits("ContainerCreating".into(), String::new()),
    );
    let send = team
        .command(&team.alice(), &["send", "base", "--yes", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lease = lease_held_by(&api, &team, "send").await;
    // Well past the stale limit (1.5 s): a send that never renewed would be taken over now.
    tokio::time::sleep(Duration::from_millis(3000)).await;

    // Bob, with his own state file: refused, told who holds the mesh and what it does.
    let bob = team
        .run(&team.bob(), &["converge", "--json", "tools"])
        .await;
    assert!(!bob.status.success(), "{}", said(&bob));
    let text = said(&bob);
    let host = lease["metadata"]["annotations"]["jr2.dev/host"]
        .as_str()
        .unwrap();
    let pid = lease["metadata"]["annotations"]["jr2.dev/pid"]
        .as_str()
        .unwrap();
    assert!(
        text.contains(&format!(
            "is held by send #2 (host {host}, process {pid}, since"
        )),
        "{text}"
    );
    assert!(!text.contains("took mesh"), "{text}");
    // Alice's own second converge (the same state file) is refused as well, not a take-over.
    let again = team
        .run(&team.alice(), &["converge", "--json", "tools"])
        .await;
    assert!(!again.status.success(), "{}", said(&again));
    assert!(!said(&again).contains("took mesh"), "{}", said(&again));

    // The send ends on its own terms (the roll-out's deadline), never a lost mesh.
    let sent = send.wait_with_output().await.unwrap();
    let text = said(&sent);
    assert!(!text.contains("lost"), "{text}");
    assert!(text.contains("base-1"), "{text}");
    let released = api
        .get(
            "leases",
            &team.namespace,
            &format!("meshtop-{}", team.mesh.name),
        )
        .unwrap();
    assert!(released["spec"]["holderIdentity"].is_null(), "{released}");

    // After it, Bob's converge goes through.
    let bob = team
        .run(&team.bob(), &["converge", "--json", "tools"])
        .await;
    assert!(bob.status.success(), "{}", said(&bob));
}
