//! One operation per mesh at a time: take the mesh's lock in the state database (or wait for it),
//! and keep it alive with a heartbeat while the operation runs.

use crate::error::HoldLost;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::watch;

use crate::backends::state::{Holder, StateDb, StateError, lock_stale_ms, locked};
use crate::timefmt;

use super::error::ConvergeError;

/// Hold the mesh for this operation (or wait for it); a dead holder does not hold it forever.
/// Returns the holder it was taken over from, if any (say so: [`took_over`]).
pub(crate) async fn acquire(
    db: &Mutex<StateDb>,
    mesh: &str,
    target: &str,
    holder: &Holder,
    wait: bool,
) -> Result<Option<Holder>, ConvergeError> {
    loop {
        let held = locked(db)
            .map_err(ConvergeError::Handle)?
            .take_mesh(mesh, target, holder)
            .map_err(|e| ConvergeError::NoRecord(e.into()))?;
        match held {
            Ok(taken_from) => return Ok(taken_from),
            Err(current) if !wait => {
                return Err(ConvergeError::Busy {
                    mesh: held_name(mesh, target),
                    by: holder_name(db, &current),
                    holder: current,
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// How a person names the operation a holder runs: `send #12 (<uuid>)`, whatever its kind; the
/// uuid alone when the state database gives no short id for it.
pub(crate) fn holder_name(db: &Mutex<StateDb>, holder: &Holder) -> String {
    let known = locked(db)
        .ok()
        .and_then(|db| db.operation(&holder.operation_id).ok().flatten());
    match known {
        Some(operation) => format!(
            "{} #{} ({})",
            operation.kind, operation.number, holder.operation_id
        ),
        None => format!("operation {}", holder.operation_id),
    }
}

/// What a person calls what an operation holds: `demo` (the single target's), else `demo (target
/// prod)`.
pub(crate) fn held_name(mesh: &str, target: &str) -> String {
    if target == crate::mesh::model::DEFAULT_TARGET {
        mesh.to_string()
    } else {
        format!("{mesh} (target {target})")
    }
}

/// The line that says a take-over happened (on the CLI's stderr and in the operation's events):
/// `took mesh demo over from send #12 (<uuid>) …`.
pub(crate) fn took_over(db: &Mutex<StateDb>, mesh: &str, target: &str, from: &Holder) -> String {
    let age_s = timefmt::now_ms().saturating_sub(from.heartbeat_ms) / 1000;
    let mesh = held_name(mesh, target);
    format!(
        "took mesh {mesh} over from {} (host {}, process {}, since {}): its last heartbeat was {age_s} s ago or its process is gone; its running builds were marked stopped",
        holder_name(db, from),
        from.host,
        from.pid,
        timefmt::local_time(from.since_ms)
    )
}

/// How often a holder beats: a sixth of the stale limit (20 s for the 2 minutes).
fn beat_every() -> Duration {
    Duration::from_millis(u64::try_from(lock_stale_ms() / 6).unwrap_or(20_000).max(50))
}

/// Beat while the operation runs (abort the handle when it ends). When a beat finds the lock lost
/// (another converge took the mesh over while this one was frozen), `lost` gets the error naming
/// who took it, and the beating stops: the converge must stop before stamping or sending.
pub(crate) fn spawn_heartbeat(
    path: PathBuf,
    mesh: String,
    target: String,
    operation_id: String,
    lost: watch::Sender<Option<HoldLost>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move { beat(path, mesh, target, operation_id, &lost).await })
}

/// The heartbeat itself, as a future (a target that holds the mesh elsewhere too runs it beside
/// its own renewals).
pub(crate) async fn beat(
    path: PathBuf,
    mesh: String,
    target: String,
    operation_id: String,
    lost: &watch::Sender<Option<HoldLost>>,
) {
    // Opened at the first beat, not before: a converge the record answers ends long before.
    let mut db: Option<StateDb> = None;
    loop {
        tokio::time::sleep(beat_every()).await;
        if db.is_none() {
            db = StateDb::open(&path).ok();
        }
        if let Some(db) = &db
            && let Err(error @ StateError::LockLost { .. }) =
                db.heartbeat(&mesh, &target, &operation_id)
        {
            let _ = lost.send(Some(HoldLost::Lock(std::sync::Arc::new(error))));
            return;
        }
    }
}

/// Resolves once the heartbeat found the lock lost, with why.
pub(crate) async fn lost(lost: &mut watch::Receiver<Option<HoldLost>>) -> HoldLost {
    loop {
        if let Some(message) = lost.borrow().clone() {
            return message;
        }
        if lost.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}
