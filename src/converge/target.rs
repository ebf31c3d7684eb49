//! The target's side of a converge: its record (read, stamp) and delivery.
//! Docker: the record is a table in the state database and the daemon is the target, so delivery
//! is nothing. Kubernetes: the namespace's annotation, and a push or `kind load`.

use std::sync::Mutex;

use super::progress::Emitter;
use crate::backends::history::History;
use crate::mesh::model::{Mesh, Record, Target};

/// The target's record and how reasons name it.
#[derive(Debug, Clone)]
pub struct RecordRead {
    pub record: Record,
    /// Names the record in reasons.
    pub source: String,
    /// A record that could not be read as a whole reads as silent, with this warning.
    pub warning: Option<String>,
}

pub async fn read_record(mesh: &Mesh, history: &Mutex<History>) -> Result<RecordRead, String> {
    match &mesh.target {
        Target::Docker => {
            let history = history
                .lock()
                .map_err(|_| "the state database handle is poisoned".to_string())?;
            let record = history.record(&mesh.name).map_err(|e| e.to_string())?;
            Ok(RecordRead {
                record,
                source: "the docker record".into(),
                warning: None,
            })
        }
        Target::Kubernetes { namespace, .. } => Err(format!(
            "the Kubernetes target (namespace {namespace}) is not wired into this build yet"
        )),
    }
}

/// Deliver one module's artifact to the target.
pub async fn deliver(
    mesh: &Mesh,
    module: &str,
    reference: &str,
    _artifact: &str,
    emitter: &Emitter,
) -> Result<(), String> {
    match &mesh.target {
        Target::Docker => {
            emitter.emit(
                "delivered",
                Some(module),
                format!("{reference} is on the host daemon, which is the target"),
            );
            Ok(())
        }
        Target::Kubernetes { .. } => {
            Err("delivery to Kubernetes is not wired into this build yet".into())
        }
    }
}

/// Stamp the record: merge `entries` into what it holds.
pub async fn stamp(
    mesh: &Mesh,
    history: &Mutex<History>,
    converge_id: &str,
    entries: &Record,
) -> Result<(), String> {
    match &mesh.target {
        Target::Docker => {
            let history = history
                .lock()
                .map_err(|_| "the state database handle is poisoned".to_string())?;
            history
                .stamp_record(&mesh.name, converge_id, entries)
                .map_err(|e| e.to_string())
        }
        Target::Kubernetes { .. } => {
            Err("stamping the Kubernetes record is not wired into this build yet".into())
        }
    }
}
