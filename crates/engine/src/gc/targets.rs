//! The other targets of the mesh: gc takes nothing any of them needs. Before anything is taken,
//! each is read as the acting one is (its record, its machines, its pins) and the artifact each of
//! its modules would roll back to is kept too; a target that cannot be read stops gc, naming it.
//! One that an operation holds now is named: a sweep takes nothing while it runs.

use std::sync::Mutex;

use super::registry::{Pulled, keep_running};
use crate::backends::daemon::LazyDaemon;
use crate::backends::state::{StateDb, StateError, locked};
use crate::error::GcError;
use crate::mesh::gc::Roots;
use crate::mesh::model::Mesh;
use crate::mesh::pin::{RollbackTarget, rollback_target};
use crate::targets::{Connected, Reach, Target};

/// Another target of the mesh, connected (or why it could not be: the caller's error, whole; gc
/// names it as the root it could not read).
pub struct Other {
    pub name: String,
    pub target: Result<Connected, Box<dyn std::error::Error + Send + Sync>>,
}

/// Where gc acts (the target it holds) and the mesh's other targets, whose keep sets count too.
#[derive(Clone, Copy)]
pub struct GcTargets<'a> {
    pub acting: &'a dyn Target,
    pub others: &'a [Other],
}

impl<'a> GcTargets<'a> {
    /// A mesh with one target: the one gc acts on.
    pub fn only(acting: &'a dyn Target) -> GcTargets<'a> {
        GcTargets {
            acting,
            others: &[],
        }
    }
}

/// Keep what every other target needs; the operations holding one of them now, in words.
pub(super) async fn keep_others(
    mesh: &Mesh,
    others: &[Other],
    daemon: &LazyDaemon,
    db: &Mutex<StateDb>,
    roots: &mut Roots,
    registry: Option<&Pulled<'_>>,
) -> Result<Vec<String>, GcError> {
    let mut busy = Vec::new();
    for other in others {
        let name = &other.name;
        let root = |what: &str| format!("target {name}'s {what}");
        let target = other
            .target
            .as_ref()
            .map_err(|e| GcError::unreadable(&format!("target {name}"), e.to_string()))?;
        let seen = mesh.on_target(name);
        let read = target
            .read_record(&seen, db)
            .await
            .map_err(|e| GcError::unreadable(&root("record"), e))?;
        if let Some(warning) = read.warning {
            return Err(GcError::unreadable(&root("record"), warning));
        }
        if let Some(warning) = read.team_warning {
            return Err(GcError::unreadable(&root("pins"), warning));
        }
        for (module, entry) in &read.record {
            roots.keep.entry(entry.digest.clone()).or_insert((
                "record",
                format!("target {name}'s record artifact of {module}"),
            ));
            roots.kept_refs.insert(entry.reference.clone());
        }
        let machines = target
            .machines(&seen, &read.record, Reach { daemon, db })
            .await
            .map_err(|e| GcError::unreadable(&root(target.machines_root()), e))?;
        let named: Vec<_> = machines
            .into_iter()
            .map(|mut m| {
                m.name = format!("{} on target {name}", m.name);
                m
            })
            .collect();
        keep_running(&seen, &named, roots, registry).await?;
        let here = kept_in_state(mesh, name, &read.record, db, roots)?;
        let team = target.held_by(&mesh.name).await.ok().flatten();
        if let Some(team) = team {
            busy.push(format!(
                "target {name} is held by {} on {}",
                team.operation, team.host
            ));
        } else if let Some(holder) = here {
            busy.push(format!(
                "target {name} is held by {} on {}",
                crate::lock::holder_name(db, &holder),
                holder.host
            ));
        }
    }
    Ok(busy)
}

/// What the state database keeps of another target: its pins and its record's history (copied
/// from the target when it keeps them), and who holds it here, if a live operation does.
fn kept_in_state(
    mesh: &Mesh,
    name: &str,
    record: &crate::mesh::model::Record,
    db: &Mutex<StateDb>,
    roots: &mut Roots,
) -> Result<Option<crate::backends::state::Holder>, GcError> {
    {
        let state = |e: StateError| GcError::unreadable("the state database", e);
        let db_now = locked(db).map_err(|e| state(e.into()))?;
        for (module, pin) in db_now.pins(&mesh.name, name).map_err(state)? {
            roots.keep.entry(pin.to_digest.clone()).or_insert((
                "pinned",
                format!("{module} is pinned to it on target {name}"),
            ));
            roots.kept_refs.insert(pin.to_ref);
        }
        for (module, current) in record {
            let stamps = db_now
                .stamps(&mesh.name, name, module, 1_000)
                .map_err(state)?;
            if let RollbackTarget::To(back) = rollback_target(&stamps, current) {
                roots.keep.entry(back.digest.clone()).or_insert((
                    "history",
                    format!("target {name} would roll {module} back to it"),
                ));
                roots.kept_refs.insert(back.reference);
            }
        }
        let here = db_now
            .mesh_holder(&mesh.name, name)
            .map_err(state)?
            .filter(|h| !h.is_dead(crate::timefmt::now_ms()));
        Ok(here)
    }
}
