//! What every command needs first: the mesh, the state database, the target's record, the daemon.

use std::path::PathBuf;

use crate::backends::state::{self, StateDb};
use crate::converge::target::ConnectedTarget;
use crate::mesh::model::Mesh;
use crate::workspace::file;

use super::Failure;
use super::args::Global;

pub fn load_mesh(global: &Global) -> Result<Mesh, Failure> {
    let path =
        file::find_mesh_file(global.mesh.as_deref()).map_err(|e| Failure::input(e.to_string()))?;
    file::load(&path).map_err(|e| Failure::input(e.to_string()))
}

pub fn state_path(global: &Global) -> Result<PathBuf, Failure> {
    match &global.state {
        Some(path) => Ok(path.clone()),
        None => state::default_path().map_err(|e| Failure::failed(e.to_string())),
    }
}

pub fn open_state(global: &Global) -> Result<StateDb, Failure> {
    let path = state_path(global)?;
    StateDb::open(&path).map_err(|e| Failure::failed(e.to_string()))
}

/// For the commands that only read (plan, builds, status, history, stats): read-only when it cannot
/// be written.
pub fn open_state_for_reading(global: &Global) -> Result<StateDb, Failure> {
    let path = state_path(global)?;
    StateDb::open_for_reading(&path).map_err(|e| Failure::failed(e.to_string()))
}

/// The mesh's target, connected once for the command: `--context`/`--namespace` override the
/// mesh file's (a Docker target has neither).
pub async fn target(global: &Global, mesh: &Mesh) -> Result<ConnectedTarget, Failure> {
    ConnectedTarget::connect(mesh, global.context.as_deref(), global.namespace.as_deref())
        .await
        .map_err(Failure::failed)
}
