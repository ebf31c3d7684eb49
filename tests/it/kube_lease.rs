//! One mesh, many hands (issue 19, the lock): on Kubernetes the mesh is held by a Lease in the
//! namespace, renewed while any operation that changes something runs. The real binary, the real
//! registry and daemon, the API test server; the stale limit shortened through the test hook
//! `MESHTOP_TEST_LOCK_STALE_MS`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

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

/// Wait until the mesh's Lease was renewed after the stale limit had passed since it was taken: its
/// holder renews it (a holder that did not would be free for the taking by now).
async fn renewed_past_the_stale_limit(api: &KubeApi, team: &Team) {
    let name = format!("meshtop-{}", team.mesh.name);
    let stale_ms: i64 = common::team::STALE_MS.parse().unwrap();
    let time = |lease: &serde_json::Value, field: &str| {
        chrono::DateTime::parse_from_rfc3339(lease["spec"][field].as_str().unwrap_or_default())
            .map(|t| t.timestamp_millis())
            .unwrap_or(0)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lease = api.get("leases", &team.namespace, &name).unwrap();
        if time(&lease, "renewTime") - time(&lease, "acquireTime") > stale_ms {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} was never renewed past the stale limit: {lease}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A team whose Alice converged base (pushed, stamped) while a Deployment runs an older base, whose
/// new pods never start until the test clears their fate: a send of base follows its roll-out until
/// the test lets it end (its deadline, 300 s, never races the commands a test runs meanwhile).
async fn base_behind_with_pods_that_never_start(api: &KubeApi, tag: &str) -> Team {
    let team = Team::new(tag, api).await;
    team.rollout_deadline("300s");
    let first = team
        .run(&team.alice(), &["converge", "--json", "base"])
        .await;
    assert!(first.status.success(), "{}", said(&first));
    team.runs_old(api, "base");
    api.pods_of_image(
        &format!("{REGISTRY}/{}/base:", team.mesh.name),
        Fate::Waits("ContainerCreating".into(), String::new()),
    );
    team
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_killed_on_this_host_leaves_the_mesh_to_the_next_at_once() {
    // converge/lease.rs `gone`: a holder that ran on this host and whose process is gone never renews
    // again; the next operation takes the mesh over without waiting out the Lease's duration (one
    // minute here, far longer than the test).
    let api = KubeApi::start().await;
    let team = base_behind_with_pods_that_never_start(&api, "leasekill").await;
    let mut send = team
        .command(&team.alice(), &["send", "base", "--yes", "--json"])
        .env(meshtop::backends::state::TEST_STALE_ENV, "60000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let lease = lease_held_by(&api, &team, "send").await;
    let pid = lease["metadata"]["annotations"]["jr2.dev/pid"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(pid, send.id().unwrap().to_string());
    send.kill().await.unwrap();
    let bob = team
        .command(&team.bob(), &["converge", "--json", "tools"])
        .env(meshtop::backends::state::TEST_STALE_ENV, "60000")
        .output()
        .await
        .unwrap();
    let text = said(&bob);
    assert!(bob.status.success(), "{text}");
    assert!(
        text.contains(&format!("took mesh {} over from send", team.mesh.name))
            && text.contains(&format!("process {pid}")),
        "{text}"
    );
    let taken = api
        .get(
            "leases",
            &team.namespace,
            &format!("meshtop-{}", team.mesh.name),
        )
        .unwrap();
    assert!(
        taken["spec"]["holderIdentity"].is_null(),
        "bob released it: {taken}"
    );
    assert_eq!(taken["spec"]["leaseTransitions"], 2, "{taken}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_past_the_stale_limit_holds_the_mesh_against_both_state_files() {
    let api = KubeApi::start().await;
    let team = base_behind_with_pods_that_never_start(&api, "lease").await;
    let send = team
        .command(&team.alice(), &["send", "base", "--yes", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lease = lease_held_by(&api, &team, "send").await;
    // Renewed past the stale limit (1.5 s): a send that never renewed would be taken over now.
    renewed_past_the_stale_limit(&api, &team).await;

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

    // Its pods run now: the send ends on its own terms, never a lost mesh.
    api.clear_fates();
    let sent = send.wait_with_output().await.unwrap();
    let text = said(&sent);
    assert!(sent.status.success(), "{text}");
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
