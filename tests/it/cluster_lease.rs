//! The mesh's Lease (`coordination.k8s.io/v1`) with the real `kube` client against the API test server:
//! taken by create or by a guarded update only when free, expired or ours; renewed; released; two takers
//! racing; an expired holder taken over; the machine's own kubectl as the oracle for the object.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::kube_api::KubeApi;
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::PostParams;
use meshtop::backends::cluster::{ClusterError, LeaseHolder, LeaseTake, lease_name};
use serde_json::json;

const NS: &str = "mesh-lease";

fn holder(host: &str, kind: &str, operation: &str) -> LeaseHolder {
    let now = meshtop::timefmt::now_ms();
    LeaseHolder {
        host: host.into(),
        pid: 4242,
        kind: kind.into(),
        operation_id: operation.into(),
        short: Some(12),
        acquired_ms: now,
        renewed_ms: now,
        duration_s: 120,
    }
}

async fn api_with_namespace() -> KubeApi {
    let api = KubeApi::start().await;
    api.put_namespace(NS, &[]);
    api
}

#[tokio::test]
async fn a_take_creates_the_lease_naming_host_process_and_operation() {
    let api = api_with_namespace().await;
    let cluster = api.cluster(NS);
    let me = holder("host-a", "send", "op-a");
    assert_eq!(
        cluster.take_lease("demo", &me, &|_| false).await.unwrap(),
        LeaseTake::Taken { from: None }
    );
    let lease = api
        .get("leases", NS, "meshtop-demo")
        .expect("the lease exists");
    assert_eq!(lease["spec"]["holderIdentity"], "host-a/4242/send/op-a");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 120);
    assert!(lease["spec"]["renewTime"].is_string(), "{lease}");
    assert!(lease["spec"]["acquireTime"].is_string(), "{lease}");
    assert_eq!(lease["metadata"]["annotations"]["jr2.dev/operation"], "12");
    let read = cluster.lease_holder("demo").await.unwrap().unwrap();
    assert_eq!((read.host.as_str(), read.pid), ("host-a", 4242));
    assert_eq!(read.operation_label(), "send #12");
    // Taking it again as the same operation keeps it, and is no take-over.
    assert_eq!(
        cluster.take_lease("demo", &me, &|_| false).await.unwrap(),
        LeaseTake::Taken { from: None }
    );
}

#[tokio::test]
async fn a_live_holder_is_not_taken_over_and_the_refused_one_is_told_who() {
    let api = api_with_namespace().await;
    let cluster = api.cluster(NS);
    let alice = holder("alice-laptop", "send", "op-alice");
    cluster
        .take_lease("demo", &alice, &|_| false)
        .await
        .unwrap();
    let bob = holder("bob-laptop", "converge", "op-bob");
    match cluster.take_lease("demo", &bob, &|_| false).await.unwrap() {
        LeaseTake::Busy(h) => {
            assert_eq!(h.host, "alice-laptop");
            assert_eq!(h.kind, "send");
            assert!(
                h.describe()
                    .contains("send #12 (host alice-laptop, process 4242, since")
            );
        }
        other => panic!("bob took a live lease: {other:?}"),
    }
    let lease = api.get("leases", NS, "meshtop-demo").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], alice.identity());
}

#[tokio::test]
async fn two_takers_racing_on_an_absent_lease_one_wins_the_other_is_told_who() {
    let api = api_with_namespace().await;
    let (one, two) = (api.cluster(NS), api.cluster(NS));
    let (a, b) = (
        holder("host-a", "converge", "op-a"),
        holder("host-b", "converge", "op-b"),
    );
    // Both read "no lease" before either writes: both create, the apiserver lets one through.
    api.sync_next_lease_reads(2);
    let (ra, rb) = tokio::join!(
        one.take_lease("demo", &a, &|_| false),
        two.take_lease("demo", &b, &|_| false)
    );
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    assert!(api.responses_with(409) >= 1, "the race never conflicted");
    let (winner, loser_saw) = match (&ra, &rb) {
        (LeaseTake::Taken { from: None }, LeaseTake::Busy(h)) => (&a, h),
        (LeaseTake::Busy(h), LeaseTake::Taken { from: None }) => (&b, h),
        other => panic!("not exactly one winner: {other:?}"),
    };
    assert_eq!(loser_saw.operation_id, winner.operation_id);
    let lease = api.get("leases", NS, "meshtop-demo").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], winner.identity());
}

/// An expired lease as another meshtop left it (its process killed): renewed long ago.
fn put_expired(api: &KubeApi, identity: &str) {
    api.put(
        "leases",
        NS,
        json!({"metadata": {"name": "meshtop-demo",
                "annotations": {"jr2.dev/host": "gone-host", "jr2.dev/pid": "7",
                    "jr2.dev/operation-kind": "converge", "jr2.dev/operation-id": "op-gone"}},
            "spec": {"holderIdentity": identity, "leaseDurationSeconds": 120,
                "acquireTime": "2026-01-01T00:00:00.000000Z", "renewTime": "2026-01-01T00:01:00.000000Z",
                "leaseTransitions": 3}}),
    );
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_naming_who_had_it() {
    let api = api_with_namespace().await;
    put_expired(&api, "gone-host/7/converge/op-gone");
    let me = holder("host-a", "gc", "op-gc");
    match api
        .cluster(NS)
        .take_lease("demo", &me, &|_| false)
        .await
        .unwrap()
    {
        LeaseTake::Taken { from: Some(old) } => {
            assert_eq!(old.host, "gone-host");
            assert_eq!(old.operation_id, "op-gone");
        }
        other => panic!("not taken over: {other:?}"),
    }
    let lease = api.get("leases", NS, "meshtop-demo").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], me.identity());
    assert_eq!(lease["spec"]["leaseTransitions"], 4);
    assert_ne!(lease["spec"]["acquireTime"], "2026-01-01T00:00:00.000000Z");
}

#[tokio::test]
async fn two_takers_racing_on_an_expired_lease_one_wins() {
    let api = api_with_namespace().await;
    put_expired(&api, "gone-host/7/converge/op-gone");
    let (a, b) = (
        holder("host-a", "converge", "op-a"),
        holder("host-b", "send", "op-b"),
    );
    api.sync_next_lease_reads(2);
    let (one, two) = (api.cluster(NS), api.cluster(NS));
    let (ra, rb) = tokio::join!(
        one.take_lease("demo", &a, &|_| false),
        two.take_lease("demo", &b, &|_| false)
    );
    let results = [ra.unwrap(), rb.unwrap()];
    assert!(api.responses_with(409) >= 1, "the race never conflicted");
    let taken = results
        .iter()
        .filter(|r| matches!(r, LeaseTake::Taken { from: Some(_) }))
        .count();
    let busy = results
        .iter()
        .filter(|r| matches!(r, LeaseTake::Busy(_)))
        .count();
    assert_eq!((taken, busy), (1, 1), "{results:?}");
}

#[tokio::test]
async fn a_renewal_after_a_take_over_is_lost_and_names_the_new_holder() {
    let api = api_with_namespace().await;
    let cluster = api.cluster(NS);
    let mut frozen = holder("host-a", "send", "op-frozen");
    frozen.duration_s = 1;
    cluster
        .take_lease("demo", &frozen, &|_| false)
        .await
        .unwrap();
    let before = api.get("leases", NS, "meshtop-demo").unwrap()["spec"]["renewTime"].clone();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    cluster.renew_lease("demo", &frozen).await.unwrap();
    let after = api.get("leases", NS, "meshtop-demo").unwrap()["spec"]["renewTime"].clone();
    assert_ne!(before, after, "a renewal moves renewTime");
    // Frozen past its duration: taken over.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let other = holder("host-b", "converge", "op-other");
    assert!(matches!(
        cluster
            .take_lease("demo", &other, &|_| false)
            .await
            .unwrap(),
        LeaseTake::Taken { from: Some(_) }
    ));
    let error = cluster.renew_lease("demo", &frozen).await.unwrap_err();
    assert!(
        matches!(&error, ClusterError::LeaseLost { taken_by: Some(h), .. } if h.host == "host-b"),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("send #12 lost the mesh's lease \"meshtop-demo\""),
        "{text}"
    );
    assert!(text.contains("converge #12 (host host-b"), "{text}");
    // Its release leaves the new holder's lease alone.
    cluster.release_lease("demo", &frozen).await.unwrap();
    let lease = api.get("leases", NS, "meshtop-demo").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], other.identity());
}

#[tokio::test]
async fn a_released_lease_is_free_and_kubectl_reads_and_deletes_it() {
    let api = api_with_namespace().await;
    let cluster = api.cluster(NS);
    let me = holder("host-a", "rollback", "op-r");
    cluster.take_lease("demo", &me, &|_| false).await.unwrap();
    let (ok, said) = api
        .kubectl(&[
            "get",
            "lease",
            "meshtop-demo",
            "-n",
            NS,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .await;
    assert!(ok && said.contains("host-a/4242/rollback/op-r"), "{said}");
    cluster.release_lease("demo", &me).await.unwrap();
    let lease = api.get("leases", NS, "meshtop-demo").unwrap();
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(cluster.lease_holder("demo").await.unwrap(), None);
    // Free: the next one takes it without a take-over.
    let next = holder("host-b", "converge", "op-next");
    assert_eq!(
        cluster.take_lease("demo", &next, &|_| false).await.unwrap(),
        LeaseTake::Taken { from: None }
    );
    // A stuck lease is broken by hand, as the README says.
    let (ok, said) = api
        .kubectl(&["delete", "lease", "meshtop-demo", "-n", NS])
        .await;
    assert!(ok, "{said}");
    assert!(api.get("leases", NS, "meshtop-demo").is_none());
    assert_eq!(cluster.lease_holder("demo").await.unwrap(), None);
}

#[tokio::test]
async fn the_server_guards_lease_writes_as_the_apiserver_does() {
    let api = api_with_namespace().await;
    let leases: Api<Lease> = Api::namespaced(api.client(), NS);
    let name = lease_name("demo");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"holderIdentity": "x"}}))
    .unwrap();
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();
    let again = leases
        .create(&PostParams::default(), &lease)
        .await
        .unwrap_err();
    assert!(matches!(&again, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists"));
    // A replace with the read resourceVersion goes through; a second with the same (now stale) one is 409.
    let mut first = created.clone();
    first.spec.as_mut().unwrap().holder_identity = Some("y".into());
    leases
        .replace(&name, &PostParams::default(), &first)
        .await
        .unwrap();
    let stale = leases
        .replace(&name, &PostParams::default(), &first)
        .await
        .unwrap_err();
    assert!(matches!(&stale, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"));
    // Without a resourceVersion: 422 (no unconditional update for leases).
    let mut blind = created.clone();
    blind.metadata.resource_version = None;
    let invalid = leases
        .replace(&name, &PostParams::default(), &blind)
        .await
        .unwrap_err();
    assert!(matches!(&invalid, kube::Error::Api(s) if s.code == 422));
    // In a namespace that does not exist: 404.
    let elsewhere: Api<Lease> = Api::namespaced(api.client(), "no-such-ns");
    let missing = elsewhere
        .create(&PostParams::default(), &lease)
        .await
        .unwrap_err();
    assert!(matches!(&missing, kube::Error::Api(s) if s.code == 404));
}

/// A live lease (renewed just now, two minutes to run) held on this host by `pid`.
fn put_live_here(api: &KubeApi, pid: u32) {
    let host = meshtop::backends::state::this_host();
    let now = chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    api.put(
        "leases",
        NS,
        json!({"metadata": {"name": "meshtop-demo",
                "annotations": {"jr2.dev/host": host, "jr2.dev/pid": pid.to_string(),
                    "jr2.dev/operation-kind": "send", "jr2.dev/operation-id": "op-here"}},
            "spec": {"holderIdentity": format!("{host}/{pid}/send/op-here"), "leaseDurationSeconds": 120,
                "acquireTime": now, "renewTime": now, "leaseTransitions": 1}}),
    );
}

/// meshtop's own test of a holder (converge/lease.rs `gone`): it ran on this host and its process is
/// gone (`Holder::process_gone`).
fn gone_here(h: &LeaseHolder) -> bool {
    meshtop::backends::state::Holder {
        operation_id: h.operation_id.clone(),
        host: h.host.clone(),
        pid: h.pid,
        since_ms: h.acquired_ms,
        heartbeat_ms: h.renewed_ms,
    }
    .process_gone()
}

#[tokio::test]
async fn a_live_lease_whose_process_died_on_this_host_is_taken_over_at_once() {
    // The holder's process is really gone (a child the test ran and reaped): its lease, renewed a moment
    // ago, is taken over without waiting out its two minutes. The same lease held by a live process (the
    // test's own) is not.
    let dead = std::process::Command::new("true").spawn().unwrap();
    let pid = dead.id();
    let mut dead = dead;
    dead.wait().unwrap();
    let api = api_with_namespace().await;
    let cluster = api.cluster(NS);
    let me = holder("host-a", "converge", "op-mine");

    put_live_here(&api, std::process::id());
    match cluster.take_lease("demo", &me, &gone_here).await.unwrap() {
        LeaseTake::Busy(h) => assert_eq!(h.pid, std::process::id()),
        other => panic!("a live holder was taken over: {other:?}"),
    }

    put_live_here(&api, pid);
    let asked = std::sync::Mutex::new(Vec::new());
    let gone = |h: &LeaseHolder| {
        asked.lock().unwrap().push((h.host.clone(), h.pid));
        gone_here(h)
    };
    match cluster.take_lease("demo", &me, &gone).await.unwrap() {
        LeaseTake::Taken { from: Some(old) } => {
            assert_eq!((old.pid, old.operation_id.as_str()), (pid, "op-here"));
            assert!(
                !old.expired_at(meshtop::timefmt::now_ms()),
                "taken as dead, not as expired"
            );
        }
        other => panic!("the dead holder's lease was not taken over: {other:?}"),
    }
    assert_eq!(
        asked.into_inner().unwrap(),
        vec![(meshtop::backends::state::this_host(), pid)],
        "the take asked about the holder the lease names"
    );
    let lease = api.get("leases", NS, "meshtop-demo").unwrap();
    assert_eq!(lease["spec"]["holderIdentity"], me.identity());
    assert_eq!(lease["spec"]["leaseTransitions"], 2);
}

#[tokio::test]
async fn a_lease_the_apiserver_would_not_validate_is_refused() {
    // pkg/apis/coordination/validation/validation.go ValidateLeaseSpec; micro_time.go's RFC3339Micro.
    let api = api_with_namespace().await;
    let leases: Api<Lease> = Api::namespaced(api.client(), NS);
    let raw: Api<kube::core::DynamicObject> = Api::namespaced_with(
        api.client(),
        NS,
        &kube::core::ApiResource::erase::<Lease>(&()),
    );
    let zero: Lease = serde_json::from_value(json!({"metadata": {"name": "zero"},
        "spec": {"holderIdentity": "x", "leaseDurationSeconds": 0}}))
    .unwrap();
    let err = leases
        .create(&PostParams::default(), &zero)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422
            && s.message == "Lease.coordination.k8s.io \"zero\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"),
        "{err}"
    );
    // A renewTime without its six fractional digits cannot be decoded: 400, nothing stored.
    let seconds: kube::core::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "seconds"},
        "spec": {"holderIdentity": "x", "renewTime": "2026-01-01T00:00:00Z"}}))
    .unwrap();
    let err = raw
        .create(&PostParams::default(), &seconds)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 400),
        "{err}"
    );
    assert!(api.get("leases", NS, "seconds").is_none());
    // What meshtop writes passes: a take, a renewal and a release.
    let cluster = api.cluster(NS);
    let me = holder("host-a", "send", "op-a");
    cluster.take_lease("demo", &me, &|_| false).await.unwrap();
    cluster.renew_lease("demo", &me).await.unwrap();
    cluster.release_lease("demo", &me).await.unwrap();
    assert_eq!(api.responses_with(422) + api.responses_with(400), 2);
}
