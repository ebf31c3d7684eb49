//! The mesh held on Kubernetes: the state database's lock (one person's: it lets that person's
//! dashboard follow the operation), then the namespace's Lease, where every teammate's meshtop meets
//! (`lease.rs`); the heartbeat renews both, and each write checks both first.

use crate::error::HoldLost;
use std::path::PathBuf;
use std::sync::Mutex;

use tokio::sync::watch;

use crate::backends::state::{Holder, StateDb, locked};
use crate::error::{ConvergeError, TargetError, still_holds};
use crate::lock;
use crate::mesh::live::HeldBy;

use super::super::seam::HoldsTheMesh;
use super::Kube;
use super::lease;

/// The hold's role, answered here rather than through the seam's default (the state database's
/// lock alone): both the lock and the Lease.
#[async_trait::async_trait]
impl HoldsTheMesh for Kube {
    /// The state database's lock, then the namespace's Lease (the team's); a Lease held by someone
    /// else gives the state database's lock back at once.
    async fn hold<'a>(
        &'a self,
        db: &'a Mutex<StateDb>,
        mesh: &'a str,
        holder: &'a Holder,
        kind: &'a str,
        wait: bool,
    ) -> Result<Option<String>, ConvergeError> {
        let from_db = lock::acquire(db, mesh, &self.name, holder, wait).await?;
        let claim = lease::claim(holder, kind);
        match lease::take(&self.cluster, &self.claims, mesh, claim, wait).await {
            Ok(Some(from)) => Ok(Some(lease::took_over(mesh, &from))),
            Ok(None) => Ok(from_db.map(|from| lock::took_over(db, mesh, &self.name, &from))),
            Err(error) => {
                if let Ok(db) = locked(db) {
                    let _ = db.unlock_mesh(mesh, &self.name, &holder.operation_id);
                }
                Err(error.into())
            }
        }
    }

    async fn named<'a>(&'a self, mesh: &'a str, operation_id: &'a str, short: Option<i64>) {
        self.claims.set_short(operation_id, short);
        // Said at once (a refused teammate reads it); a failure here is the heartbeat's to judge.
        let _ = lease::check(&self.cluster, &self.claims, mesh, operation_id).await;
    }

    fn heartbeat(
        &self,
        state_path: PathBuf,
        mesh: String,
        operation_id: String,
        lost: watch::Sender<Option<HoldLost>>,
    ) -> tokio::task::JoinHandle<()> {
        let (cluster, claims) = (self.cluster.clone(), self.claims.clone());
        let target = self.name.clone();
        tokio::spawn(async move {
            let beat = lock::beat(
                state_path,
                mesh.clone(),
                target,
                operation_id.clone(),
                &lost,
            );
            let renew = lease::renew_while_running(cluster, claims, mesh, operation_id, &lost);
            tokio::join!(beat, renew);
        })
    }

    /// The Lease's holder, unless it expired.
    async fn held_by<'a>(&'a self, mesh: &'a str) -> Result<Option<HeldBy>, TargetError> {
        let holder = self.cluster.lease_holder(mesh).await?;
        let now = crate::timefmt::now_ms();
        Ok(holder.filter(|h| !h.expired_at(now)).map(|h| HeldBy {
            operation: h.operation_label(),
            operation_id: h.operation_id,
            host: h.host,
            pid: h.pid,
            since_ms: h.acquired_ms,
        }))
    }

    async fn still_holds<'a>(
        &'a self,
        db: &'a Mutex<StateDb>,
        mesh: &'a str,
        operation_id: &'a str,
    ) -> Result<(), ConvergeError> {
        still_holds(db, mesh, &self.name, operation_id)?;
        Ok(lease::check(&self.cluster, &self.claims, mesh, operation_id).await?)
    }

    async fn release<'a>(&'a self, mesh: &'a str, operation_id: &'a str) {
        lease::release(&self.cluster, &self.claims, mesh, operation_id).await;
    }
}
