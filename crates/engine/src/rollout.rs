//! After the stamp: the declared machines that do not exist are created, then the behind machines
//! of every `rollout` module are sent, in tier order.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use super::error::ConvergeError;
use super::progress::{Emitter, Payload};
use super::send;
use super::targets::{Reach, Target};
use crate::backends::daemon::LazyDaemon;
use crate::backends::state::StateDb;
use crate::mesh::model::{Mesh, Record};

/// After the stamp: create declared machines that do not exist yet, then send the behind machines
/// of every `rollout` module, in tier order. Under `record` policy nothing here touches the target.
pub(crate) async fn roll_out(
    mesh: &Mesh,
    record: &Record,
    modules: Option<&BTreeSet<String>>,
    target: &dyn Target,
    daemon: &Arc<LazyDaemon>,
    db: &Arc<Mutex<StateDb>>,
    emitter: &Emitter,
) -> Result<(Vec<String>, Vec<send::SendOutcome>), ConvergeError> {
    let in_scope = |module: &str| modules.is_none_or(|names| names.contains(module));
    let rolls_out = mesh
        .modules
        .iter()
        .any(|m| in_scope(&m.name) && m.policy == crate::mesh::Policy::Rollout);
    let declares = mesh.machines.iter().any(|m| in_scope(&m.module));
    if !rolls_out && !declares {
        return Ok((Vec::new(), Vec::new()));
    }
    let reach = || Reach {
        daemon: daemon.as_ref(),
        db: db.as_ref(),
    };
    let existing = target.machines(mesh, record, reach()).await?;
    let created = target
        .create_declared(mesh, record, &existing, &in_scope, reach(), emitter)
        .await?;
    let machines = if created.is_empty() {
        existing
    } else {
        target.machines(mesh, record, reach()).await?
    };
    let mut sends = Vec::new();
    for module in mesh
        .modules
        .iter()
        .filter(|m| in_scope(&m.name) && m.policy == crate::mesh::Policy::Rollout)
    {
        let moves = send::moves_for(record, &machines, &module.name);
        for outcome in send::send(mesh, &moves, daemon, target, db, emitter).await {
            sends.push(outcome);
        }
    }
    if !sends.is_empty() {
        let moved = sends.iter().filter(|s| s.ok).count();
        emitter.emit(
            Payload::Sent {
                machine: None,
                moved: moved as u32,
                total: sends.len() as u32,
            },
            None,
            format!("{moved}/{} machine(s) moved", sends.len()),
        );
    }
    Ok((created, sends))
}
