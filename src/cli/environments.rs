//! `meshtop status --all-targets [--json]`: the environments grid, modules down, targets across
//! (the dashboard's environments view draws the same grid).

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use crate::backends::daemon::LazyDaemon;
use crate::converge::environments;
use crate::mesh::environments::{Grid, grid, grid_text};
use crate::timefmt;

use super::args::Global;
use super::{Outcome, print_json, print_out, setup};

/// Every target read (one that cannot be read is a column saying why; exit 1 then), the grid
/// printed. `exit_code`: exit 1 as well when a machine is not current or a cell differs from its
/// source.
pub(crate) async fn run(global: &Global, json: bool, exit_code: bool) -> Outcome {
    let mesh = setup::load_file(global)?;
    let db = Mutex::new(setup::open_state_for_reading(global)?);
    let daemon = Arc::new(LazyDaemon::new());
    let mut reads = Vec::new();
    for name in mesh.target_names() {
        let connected = setup::connect_target(global, &mesh, name).await;
        let target = match &connected {
            Ok(target) => Ok(target.as_ref()),
            Err(error) => Err(error as &(dyn std::error::Error + Send + Sync)),
        };
        reads.push(environments::read(&mesh, name, target, &daemon, &db).await);
    }
    let grid = grid(&mesh, &reads);
    if json {
        print_json(&grid)?;
    } else {
        print_out(&grid_text(&grid, timefmt::now_ms()))?;
    }
    let unreadable = grid.targets.iter().any(|t| t.error.is_some());
    Ok(if unreadable || (exit_code && unsettled(&grid)) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// A machine not on its record's artifact, or a cell that differs from its source.
fn unsettled(grid: &Grid) -> bool {
    grid.rows
        .iter()
        .flat_map(|r| &r.cells)
        .any(|c| c.promotable() || c.machines.current < c.machines.total)
}
