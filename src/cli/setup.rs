//! What every command needs first: the mesh, the state database, the target's record, the daemon.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::backends::state::{self, StateDb};
use crate::converge::engine;
use crate::converge::target::{self, Connected};
use crate::mesh::model::{DEFAULT_TARGET, Mesh};
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
pub async fn target(global: &Global, mesh: &Mesh) -> Result<Connected, Failure> {
    target::connect(
        mesh,
        DEFAULT_TARGET,
        global.context.as_deref(),
        global.namespace.as_deref(),
    )
    .await
    .map_err(Failure::failed)
}

/// The named modules, each checked against the mesh (None = all).
pub fn select(mesh: &Mesh, names: &[String]) -> Result<Option<BTreeSet<String>>, Failure> {
    if names.is_empty() {
        return Ok(None);
    }
    let known: Vec<&str> = mesh.modules.iter().map(|m| m.name.as_str()).collect();
    for name in names {
        if !known.contains(&name.as_str()) {
            return Err(Failure::input(format!(
                "no module {name:?} in mesh {} ({}); modules: {}",
                mesh.name,
                mesh.file.display(),
                known.join(", ")
            )));
        }
    }
    Ok(Some(names.iter().cloned().collect()))
}

/// What a converge and a watch start from, made once: the mesh, the modules selected, the state's
/// path, the builds of one tier at once, and the target, connected. `publish` (`--publish`): push
/// each build to the mesh's registry, which it must name.
pub struct ConvergeSetup {
    pub mesh: Mesh,
    pub modules: Option<BTreeSet<String>>,
    pub state_path: PathBuf,
    pub jobs: usize,
    pub target: Connected,
}

pub async fn converge_setup(
    global: &Global,
    modules: &[String],
    jobs: Option<u16>,
    publish: bool,
) -> Result<ConvergeSetup, Failure> {
    let mut mesh = load_mesh(global)?;
    if publish {
        if mesh.registry.is_none() {
            return Err(Failure::input(format!(
                "--publish: mesh {} names no registry to publish to; add registry = \"host:port\" under [mesh] in {}",
                mesh.name,
                mesh.file.display()
            )));
        }
        mesh.publish = true;
    }
    let modules = select(&mesh, modules)?;
    let state_path = state_path(global)?;
    let jobs = jobs.map_or_else(engine::default_jobs, usize::from);
    let target = target(global, &mesh).await?;
    Ok(ConvergeSetup {
        mesh,
        modules,
        state_path,
        jobs,
        target,
    })
}
