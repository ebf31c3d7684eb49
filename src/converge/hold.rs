//! An operation that changes something holds the mesh from its start to its end: the hold (the
//! target says where: the state database, and on Kubernetes the namespace's Lease too), its short
//! id said where the team reads it, a heartbeat while it runs, and the release at its end.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::error::ConvergeError;
use super::progress::{Emitter, LastWord, Payload, ProgressTx};
use super::target::Target;
use crate::backends::state::{Holder, StateDb, locked};

/// The mesh held by one operation.
pub struct Held {
    heartbeat: tokio::task::JoinHandle<()>,
    /// Says (with who took it) when the heartbeat found the mesh lost.
    pub lost: watch::Receiver<Option<String>>,
}

/// Hold the mesh for the operation `operation_id` of `kind` (or wait for it), start its emitter
/// (a take-over is its first warning) and its heartbeat.
pub async fn start(
    target: &dyn Target,
    db: &Arc<Mutex<StateDb>>,
    mesh: &str,
    operation_id: &str,
    kind: &str,
    wait: bool,
    tx: Option<ProgressTx>,
) -> Result<(Emitter, Held), ConvergeError> {
    let holder = Holder::here(operation_id);
    let taken_from = target.hold(db, mesh, &holder, kind, wait).await?;
    let emitter = Emitter::new(db.clone(), mesh, target.name(), operation_id, kind, tx);
    target.named(mesh, operation_id, emitter.operation).await;
    if let Some(line) = taken_from {
        emitter.emit(Payload::Warning, None, line);
    }
    let path = locked(db)
        .map(|db| db.path().to_path_buf())
        .map_err(|e| ConvergeError::Failed(e.to_string()))?;
    let (lost_tx, lost) = watch::channel(None);
    let heartbeat = target.heartbeat(path, mesh.to_string(), operation_id.to_string(), lost_tx);
    Ok((emitter, Held { heartbeat, lost }))
}

impl Held {
    /// The operation's last word (how it ended, and what it says), then the mesh given back.
    pub async fn finish(self, target: &dyn Target, emitter: &Emitter, last: LastWord) {
        self.heartbeat.abort();
        emitter.finish(last);
        target.release(&emitter.mesh, &emitter.operation_id).await;
    }
}
