//! Progress of a converge: each step goes to the state database (so another process can follow it
//! live) and to an optional channel (the command's stderr, the dashboard).

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedSender;

use crate::backends::history::{History, NewEvent};

/// One step of a converge, as the state database keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// `started`, `tier`, `decided`, `build`, `output`, `built`, `failed`, `delivered`, `stamped`,
    /// `send`, `sent`, `created`, `finished`.
    pub kind: &'static str,
    pub module: Option<String>,
    pub text: String,
}

pub type ProgressTx = UnboundedSender<Progress>;

/// Writes each step to the database and the channel; a step the database cannot take is logged,
/// never fatal (the build records themselves are written separately, and those are required).
#[derive(Clone)]
pub struct Emitter {
    pub history: Arc<Mutex<History>>,
    pub mesh: String,
    pub converge_id: String,
    pub tx: Option<ProgressTx>,
}

impl Emitter {
    pub fn emit(&self, kind: &'static str, module: Option<&str>, text: impl Into<String>) {
        let progress = Progress {
            kind,
            module: module.map(str::to_string),
            text: text.into(),
        };
        let event = NewEvent {
            mesh: self.mesh.clone(),
            converge_id: self.converge_id.clone(),
            kind: kind.to_string(),
            module: progress.module.clone(),
            text: progress.text.clone(),
        };
        match self.history.lock() {
            Ok(history) => {
                if let Err(error) = history.append_event(&event) {
                    tracing::warn!("cannot record a converge event: {error}");
                }
            }
            Err(_) => tracing::warn!("the state database handle is poisoned; event not recorded"),
        }
        if let Some(tx) = &self.tx {
            let _ = tx.send(progress);
        }
    }
}
