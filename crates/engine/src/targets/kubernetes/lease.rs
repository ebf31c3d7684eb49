//! The mesh held on Kubernetes: besides the state file's lock (one person's: it lets that person's
//! dashboard follow the operation), the namespace's Lease, where every teammate's meshtop meets
//! (`backends::cluster` takes, renews and releases it as client-go's leader election does).
//! An operation takes it before it changes anything, renews it while it runs (the heartbeat), renews
//! it again in the same step as each write (so a write is only made while the Lease is ours), and
//! releases it at its end.

use crate::error::HoldLost;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::backends::cluster::{Cluster, ClusterError, LeaseHolder, LeaseTake, lease_name};
use crate::backends::state::{Holder, lock_stale_ms, this_host};
use crate::timefmt;

/// The Lease of a mesh is held by someone else, alive.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "mesh {mesh} is held by {} — the lease {lease} in namespace {namespace} (last renewed {}): wait for it to finish (converge: --wait); a stuck lease is broken with `kubectl delete lease {lease} -n {namespace}`",
    .holder.describe(), timefmt::local_time(.holder.renewed_ms)
)]
pub struct LeaseBusy {
    pub mesh: String,
    pub lease: String,
    pub namespace: String,
    pub holder: LeaseHolder,
}

/// Why an operation may not (or no longer) write.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HoldError {
    #[error(transparent)]
    Busy(#[from] Box<LeaseBusy>),
    /// Someone else holds it now (or nobody): stop before the next write.
    #[error(transparent)]
    Lost(#[from] LeaseLost),
    /// The cluster could not be asked: whether the mesh is still ours is not known.
    #[error("{0}")]
    Failed(String),
}

/// Why an operation no longer holds its mesh's Lease.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LeaseLost {
    #[error(
        "operation {operation_id} does not hold the lease {lease} in namespace {namespace}: nothing more is written"
    )]
    NotClaimed {
        operation_id: String,
        lease: String,
        namespace: String,
    },
    /// Another holder's renewal or takeover (the cluster's words name it).
    #[error(transparent)]
    TakenOver(Arc<ClusterError>),
    #[error(
        "{operation} could not renew the lease {lease} for {seconds} s ({source}): another operation may hold mesh {mesh} now; it stopped before its next write"
    )]
    Unrenewed {
        operation: String,
        lease: String,
        seconds: i32,
        mesh: String,
        source: Arc<ClusterError>,
    },
}

/// The operations of this process that hold a mesh's Lease, by operation id (a dashboard runs one
/// operation per mesh at a time, but a refused one must not touch the claim of the one that runs).
#[derive(Debug, Default)]
pub(super) struct LeaseClaims(Mutex<HashMap<String, LeaseHolder>>);

impl LeaseClaims {
    pub(super) fn get(&self, operation_id: &str) -> Option<LeaseHolder> {
        self.0.lock().ok()?.get(operation_id).cloned()
    }

    fn put(&self, claim: LeaseHolder) {
        if let Ok(mut claims) = self.0.lock() {
            claims.insert(claim.operation_id.clone(), claim);
        }
    }

    fn remove(&self, operation_id: &str) -> Option<LeaseHolder> {
        self.0.lock().ok()?.remove(operation_id)
    }

    /// Name the operation's short id (`#142`) in its claim, once the state file gave it one.
    pub(super) fn set_short(&self, operation_id: &str, short: Option<i64>) {
        if let Ok(mut claims) = self.0.lock()
            && let Some(claim) = claims.get_mut(operation_id)
        {
            claim.short = short;
        }
    }
}

/// The Lease's duration: the stale limit, in whole seconds (at least one).
fn duration_s() -> i32 {
    i32::try_from((lock_stale_ms() + 999) / 1000)
        .unwrap_or(120)
        .max(1)
}

/// How often the Lease is renewed: a sixth of its duration (20 s for the 2 minutes).
fn renew_every() -> Duration {
    Duration::from_millis(u64::try_from(lock_stale_ms() / 6).unwrap_or(20_000).max(50))
}

/// This operation's claim on the Lease.
pub(super) fn claim(holder: &Holder, kind: &str) -> LeaseHolder {
    LeaseHolder {
        host: holder.host.clone(),
        pid: holder.pid,
        kind: kind.to_string(),
        operation_id: holder.operation_id.clone(),
        short: None,
        acquired_ms: holder.since_ms,
        renewed_ms: holder.since_ms,
        duration_s: duration_s(),
    }
}

/// A holder that ran on this host and whose process no longer exists can never renew again.
fn gone(holder: &LeaseHolder) -> bool {
    holder.host == this_host()
        && Holder {
            operation_id: holder.operation_id.clone(),
            host: holder.host.clone(),
            pid: holder.pid,
            since_ms: holder.acquired_ms,
            heartbeat_ms: holder.renewed_ms,
        }
        .process_gone()
}

/// Take the mesh's Lease for `claim` (or wait for it). Returns the holder it was taken over from.
pub(super) async fn take(
    cluster: &Cluster,
    claims: &LeaseClaims,
    mesh: &str,
    claim: LeaseHolder,
    wait: bool,
) -> Result<Option<LeaseHolder>, HoldError> {
    loop {
        let taken = cluster
            .take_lease(mesh, &claim, &gone)
            .await
            .map_err(|e| HoldError::Failed(e.to_string()))?;
        match taken {
            LeaseTake::Taken { from } => {
                claims.put(claim);
                return Ok(from);
            }
            LeaseTake::Busy(holder) if !wait => {
                return Err(HoldError::Busy(Box::new(LeaseBusy {
                    mesh: mesh.to_string(),
                    lease: lease_name(mesh),
                    namespace: cluster.namespace.clone(),
                    holder,
                })));
            }
            LeaseTake::Busy(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// The line that says a take-over of the Lease happened.
pub(super) fn took_over(mesh: &str, from: &LeaseHolder) -> String {
    let age_s = timefmt::now_ms().saturating_sub(from.renewed_ms) / 1000;
    format!(
        "took mesh {mesh} over from {} (host {}, process {}, since {}): its lease {} was last renewed {age_s} s ago or its process is gone",
        from.operation_label(),
        from.host,
        from.pid,
        timefmt::local_time(from.acquired_ms),
        lease_name(mesh)
    )
}

/// Renew the Lease now: call it in the same step as each write, just before it. `Lost` (naming who
/// holds it) when it is no longer ours; `Failed` when the cluster cannot say.
pub(super) async fn check(
    cluster: &Cluster,
    claims: &LeaseClaims,
    mesh: &str,
    operation_id: &str,
) -> Result<(), HoldError> {
    let Some(claim) = claims.get(operation_id) else {
        return Err(HoldError::Lost(LeaseLost::NotClaimed {
            operation_id: operation_id.to_string(),
            lease: lease_name(mesh),
            namespace: cluster.namespace.clone(),
        }));
    };
    match cluster.renew_lease(mesh, &claim).await {
        Ok(()) => Ok(()),
        Err(error @ ClusterError::LeaseLost { .. }) => {
            Err(HoldError::Lost(LeaseLost::TakenOver(Arc::new(error))))
        }
        Err(error) => Err(HoldError::Failed(format!(
            "cannot tell whether {} still holds mesh {mesh} ({error}); nothing more is written",
            claim.operation_label()
        ))),
    }
}

/// Renew the Lease while the operation runs (abort the task when it ends). A renewal that finds it
/// lost, or renewals failing for longer than the Lease's duration (someone may have taken it since),
/// tell `lost` why, and the renewing stops.
pub(super) async fn renew_while_running(
    cluster: Cluster,
    claims: std::sync::Arc<LeaseClaims>,
    mesh: String,
    operation_id: String,
    lost: &watch::Sender<Option<HoldLost>>,
) {
    let mut renewed_ms = timefmt::now_ms();
    loop {
        tokio::time::sleep(renew_every()).await;
        let Some(claim) = claims.get(&operation_id) else {
            return;
        };
        match cluster.renew_lease(&mesh, &claim).await {
            Ok(()) => renewed_ms = timefmt::now_ms(),
            Err(error @ ClusterError::LeaseLost { .. }) => {
                let lease = LeaseLost::TakenOver(Arc::new(error));
                let _ = lost.send(Some(HoldLost::Target(Arc::new(lease))));
                return;
            }
            Err(error) if timefmt::now_ms() - renewed_ms > i64::from(claim.duration_s) * 1000 => {
                let lease = LeaseLost::Unrenewed {
                    operation: claim.operation_label(),
                    lease: lease_name(&mesh),
                    seconds: claim.duration_s,
                    mesh: mesh.clone(),
                    source: Arc::new(error),
                };
                let _ = lost.send(Some(HoldLost::Target(Arc::new(lease))));
                return;
            }
            Err(error) => tracing::warn!("cannot renew the lease of mesh {mesh}: {error}"),
        }
    }
}

/// Give the Lease back at the operation's end (a Lease someone else took is left alone).
pub(super) async fn release(
    cluster: &Cluster,
    claims: &LeaseClaims,
    mesh: &str,
    operation_id: &str,
) {
    let Some(claim) = claims.remove(operation_id) else {
        return;
    };
    if let Err(error) = cluster.release_lease(mesh, &claim).await {
        tracing::warn!(
            "cannot release the lease {} (it expires by itself): {error}",
            lease_name(mesh)
        );
    }
}
