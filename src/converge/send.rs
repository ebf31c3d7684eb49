//! Send: move a module's behind machines to the record's artifact, each move recorded.

use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::progress::Emitter;
use crate::backends::daemon::LazyDaemon;
use crate::backends::history::{History, SendRow};
use crate::mesh::behind::Machine;
use crate::mesh::model::{Mesh, Record, Target};
use crate::timefmt;

/// One machine to move: from the artifact it runs to the record's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub module: String,
    pub machine: String,
    pub from: String,
    #[serde(rename = "to_ref")]
    pub to_reference: String,
    pub to_digest: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SendOutcome {
    #[serde(flatten)]
    pub moved: Move,
    pub ok: bool,
    pub message: String,
}

/// The behind (or held) machines of `module`, and where each goes.
pub fn moves_for(mesh: &Mesh, record: &Record, machines: &[Machine], module: &str) -> Vec<Move> {
    let _ = mesh;
    let Some(entry) = record.get(module) else {
        return Vec::new();
    };
    machines
        .iter()
        .filter(|m| m.module == module && m.state.is_behind())
        .map(|m| Move {
            module: module.to_string(),
            machine: m.name.clone(),
            from: m.running.first().cloned().unwrap_or_default(),
            to_reference: entry.reference.clone(),
            to_digest: entry.digest.clone(),
        })
        .collect()
}

/// Carry out `moves`, one machine at a time; every outcome is recorded.
pub async fn send(
    mesh: &Mesh,
    moves: &[Move],
    daemon: &LazyDaemon,
    history: &Arc<Mutex<History>>,
    emitter: &Emitter,
) -> Vec<SendOutcome> {
    let mut outcomes = Vec::new();
    for moved in moves {
        emitter.emit(
            "send",
            Some(&moved.module),
            format!(
                "{}: {} → {}@{}",
                moved.machine, moved.from, moved.to_reference, moved.to_digest
            ),
        );
        let result = match &mesh.target {
            Target::Docker => match daemon.get().await {
                Ok(daemon) => daemon
                    .recreate(&moved.machine, &moved.to_digest)
                    .await
                    .map_err(|e| e.to_string()),
                Err(error) => Err(error),
            },
            Target::Kubernetes { .. } => {
                Err("sending on Kubernetes is not wired into this build yet".to_string())
            }
        };
        let (ok, message) = match result {
            Ok(()) => (true, "moved".to_string()),
            Err(error) => (false, format!("failed: {error}")),
        };
        let row = SendRow {
            mesh: mesh.name.clone(),
            module: moved.module.clone(),
            machine: moved.machine.clone(),
            from_digest: moved.from.clone(),
            to_ref: moved.to_reference.clone(),
            to_digest: moved.to_digest.clone(),
            outcome: message.clone(),
            at_ms: timefmt::now_ms(),
            converge_id: Some(emitter.converge_id.clone()),
        };
        if let Ok(history) = history.lock()
            && let Err(error) = history.record_send(&row)
        {
            tracing::warn!("cannot record a send: {error}");
        }
        emitter.emit(
            "sent",
            Some(&moved.module),
            format!("{}: {message}", moved.machine),
        );
        outcomes.push(SendOutcome {
            moved: moved.clone(),
            ok,
            message,
        });
    }
    outcomes
}
