//! What each target of a mesh answers for the environments grid (`meshtop status --all-targets`
//! and the dashboard's environments view read it through here; `mesh::environments::grid` makes
//! the grid of it): its record, its machines, when each module's entry last moved, who holds it.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::lock::holder_name;
use super::targets::{Reach, Target};
use crate::backends::daemon::LazyDaemon;
use crate::backends::state::{StateDb, locked};
use crate::mesh::environments::TargetRead;
use crate::mesh::model::Mesh;

/// Read target `name` of `mesh` (as its file says it), connected or not (`target`'s error then
/// is the column's, in words); nothing is changed.
pub async fn read(
    mesh: &Mesh,
    name: &str,
    target: Result<&dyn Target, &(dyn std::error::Error + Send + Sync)>,
    daemon: &LazyDaemon,
    db: &Mutex<StateDb>,
) -> TargetRead {
    // The column's words, made here where they are shown.
    let failed = |error: &dyn std::fmt::Display| TargetRead {
        name: name.to_string(),
        error: Some(error.to_string()),
        ..TargetRead::default()
    };
    let target = match target {
        Ok(target) => target,
        Err(error) => return failed(&error),
    };
    let seen = mesh.on_target(name);
    let description = target.describe();
    let record = match target.read_record(&seen, db).await {
        Ok(read) => match read.warning {
            // A record read as silent is no column of empty cells: say why.
            Some(warning) => return failed(&warning),
            None => read.record,
        },
        Err(error) => return failed(&error),
    };
    let machines = match target.machines(&seen, &record, Reach { daemon, db }).await {
        Ok(machines) => machines,
        Err(error) => return failed(&error),
    };
    let team = target.held_by(&mesh.name).await.ok().flatten();
    let (moved_ms, here) = match locked(db) {
        Ok(db) => {
            let moved: BTreeMap<String, i64> = record
                .keys()
                .filter_map(|module| {
                    let newest = db.stamps(&mesh.name, name, module, 1).ok()?;
                    Some((module.clone(), newest.first()?.by.at_ms))
                })
                .collect();
            let here = db
                .mesh_holder(&mesh.name, name)
                .ok()
                .flatten()
                .filter(|h| !h.is_dead(crate::timefmt::now_ms()));
            (moved, here)
        }
        Err(_) => (BTreeMap::new(), None),
    };
    let held_by = match (team, here) {
        (Some(team), _) => Some(format!("{} on {}", team.operation, team.host)),
        (None, Some(holder)) => Some(format!("{} on {}", holder_name(db, &holder), holder.host)),
        (None, None) => None,
    };
    TargetRead {
        name: name.to_string(),
        kind: description.kind,
        place: description.place,
        record,
        machines,
        moved_ms,
        held_by,
        error: None,
    }
}
