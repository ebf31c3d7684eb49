//! One operation per mesh at a time: take the mesh's lock in the state database (or wait for it),
//! and keep it alive with a heartbeat while the operation runs.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use crate::backends::history::{History, Holder, locked};

use super::engine::ConvergeError;

/// Hold the mesh for this operation (or wait for it); a dead holder does not hold it forever.
pub async fn acquire(
    history: &Mutex<History>,
    mesh: &str,
    holder: &Holder,
    wait: bool,
) -> Result<(), ConvergeError> {
    loop {
        let held = locked(history)
            .map_err(ConvergeError::Failed)?
            .lock_converge(mesh, holder)
            .map_err(|e| ConvergeError::NoRecord(e.to_string()))?;
        match held {
            Ok(()) => return Ok(()),
            Err(current) if !wait => {
                return Err(ConvergeError::Busy {
                    mesh: mesh.to_string(),
                    holder: current,
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Beat every 20 s while the operation runs (abort the handle when it ends).
pub fn spawn_heartbeat(
    path: PathBuf,
    mesh: String,
    converge_id: String,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // Opened at the first beat, not before: a converge the record answers ends long before.
        let mut history: Option<History> = None;
        loop {
            tokio::time::sleep(Duration::from_secs(20)).await;
            if history.is_none() {
                history = History::open(&path).ok();
            }
            if let Some(history) = &history {
                let _ = history.heartbeat(&mesh, &converge_id);
            }
        }
    })
}
