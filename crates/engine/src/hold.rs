//! An operation that changes something holds the mesh from its start to its end: the hold (the
//! target says where: the state database, and on Kubernetes the namespace's Lease too), its short
//! id said where the team reads it, a heartbeat while it runs, and the release at its end.
//! [`Operation::run`] is that lifecycle, written once: converge, send, rollback, unpin, promote and
//! gc each give it their work and their last word.

use crate::error::HoldLost;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::error::ConvergeError;
use super::progress::{Emitter, LastWord, Payload, ProgressTx};
use super::targets::HoldsTheMesh;
use crate::backends::state::{Holder, StateDb, locked};
use crate::mesh::operation::OperationKind;

/// One operation that changes something, before it runs: its id (a fresh uuid), the target and
/// mesh it holds, its kind (`converge`, `send`, …), whether it waits for the mesh, and where its
/// progress goes besides the state database.
pub(crate) struct Operation<'a> {
    target: &'a dyn HoldsTheMesh,
    db: &'a Arc<Mutex<StateDb>>,
    mesh: &'a str,
    kind: OperationKind,
    wait: bool,
    tx: Option<ProgressTx>,
}

/// What the work of a running operation reaches: its emitter (its id is `emitter.operation_id`)
/// and the word of its heartbeat.
pub(crate) struct Running {
    pub emitter: Emitter,
    /// Says (with who took it) when the heartbeat found the mesh lost.
    pub lost: watch::Receiver<Option<HoldLost>>,
}

impl<'a> Operation<'a> {
    pub(crate) fn new(
        target: &'a dyn HoldsTheMesh,
        db: &'a Arc<Mutex<StateDb>>,
        mesh: &'a str,
        kind: OperationKind,
    ) -> Operation<'a> {
        Operation {
            target,
            db,
            mesh,
            kind,
            wait: false,
            tx: None,
        }
    }

    /// Wait for the mesh while another operation holds it (else: refused at once).
    pub(crate) fn waiting(mut self, wait: bool) -> Operation<'a> {
        self.wait = wait;
        self
    }

    /// Send each step here too (the dashboard's notice, a command's live lines).
    pub(crate) fn progress(mut self, tx: Option<ProgressTx>) -> Operation<'a> {
        self.tx = tx;
        self
    }

    /// Hold the mesh, run `work`, say `last_word` of its result (how it ended, and its words) as the
    /// operation's last event,
    /// give the mesh back. A mesh that cannot be held is the error (nothing ran).
    pub(crate) async fn run<T, E>(
        self,
        work: impl AsyncFnOnce(&Running) -> Result<T, E>,
        last_word: impl FnOnce(&Result<T, E>) -> LastWord,
    ) -> Result<T, E>
    where
        E: From<ConvergeError>,
    {
        let target = self.target;
        let operation_id = uuid::Uuid::now_v7().to_string();
        let (running, held) = start(
            target,
            self.db,
            self.mesh,
            &operation_id,
            self.kind,
            self.wait,
            self.tx,
        )
        .await?;
        let result = work(&running).await;
        held.finish(target, &running.emitter, last_word(&result))
            .await;
        result
    }
}

/// The mesh held by one operation.
struct Held {
    heartbeat: tokio::task::JoinHandle<()>,
}

/// Hold the mesh for the operation `operation_id` of `kind` (or wait for it), start its emitter
/// (a take-over is its first warning) and its heartbeat.
async fn start(
    target: &dyn HoldsTheMesh,
    db: &Arc<Mutex<StateDb>>,
    mesh: &str,
    operation_id: &str,
    kind: OperationKind,
    wait: bool,
    tx: Option<ProgressTx>,
) -> Result<(Running, Held), ConvergeError> {
    let holder = Holder::here(operation_id);
    let taken_from = target.hold(db, mesh, &holder, kind.as_str(), wait).await?;
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
    Ok((Running { emitter, lost }, Held { heartbeat }))
}

impl Held {
    /// The operation's last word (how it ended, and what it says), then the mesh given back.
    async fn finish(self, target: &dyn HoldsTheMesh, emitter: &Emitter, last: LastWord) {
        self.heartbeat.abort();
        emitter.finish(last);
        target.release(&emitter.mesh, &emitter.operation_id).await;
    }
}
