//! What every command needs first: the mesh, the state database, the target's record, the daemon.

use std::path::PathBuf;

use crate::backends::daemon::Daemon;
use crate::backends::history::{self, History};
use crate::converge::plan::ManifestSource;
use crate::mesh::file;
use crate::mesh::inputs::Manifest;
use crate::mesh::model::{Mesh, Record, Target};

use super::Failure;
use super::args::Global;

pub fn load_mesh(global: &Global) -> Result<Mesh, Failure> {
    let path = file::find_mesh_file(global.mesh.as_deref()).map_err(|e| Failure::input(e.to_string()))?;
    file::load(&path).map_err(|e| Failure::input(e.to_string()))
}

pub fn state_path(global: &Global) -> Result<PathBuf, Failure> {
    match &global.state {
        Some(path) => Ok(path.clone()),
        None => history::default_path().map_err(|e| Failure::failed(e.to_string())),
    }
}

pub fn open_history(global: &Global) -> Result<History, Failure> {
    let path = state_path(global)?;
    History::open(&path).map_err(|e| Failure::failed(e.to_string()))
}

/// The daemon, or why it cannot be reached (commands that can do without it keep going).
pub async fn connect_daemon() -> Result<Daemon, String> {
    Daemon::connect().await.map_err(|e| e.to_string())
}

/// The target's record and how reasons name it.
pub struct RecordRead {
    pub record: Record,
    pub source: String,
    /// A record that could not be read as a whole reads as silent, with this warning.
    pub warning: Option<String>,
}

pub async fn read_record(mesh: &Mesh, history: &History) -> Result<RecordRead, Failure> {
    match &mesh.target {
        Target::Docker => {
            let record = history.record(&mesh.name).map_err(|e| Failure::failed(e.to_string()))?;
            Ok(RecordRead { record, source: "the docker record".into(), warning: None })
        }
        Target::Kubernetes { namespace, .. } => Ok(RecordRead {
            record: Record::new(),
            source: format!("annotation jr2.dev/images on namespace {namespace}"),
            warning: Some("the Kubernetes record is not read by this build".into()),
        }),
    }
}

/// Previous input manifests from the state database, to tell why an address moved.
pub struct HistoryManifests<'a> {
    pub history: &'a History,
    pub mesh: &'a str,
}

impl ManifestSource for HistoryManifests<'_> {
    fn previous(&self, module: &str, reference: Option<&str>) -> Option<Manifest> {
        let by_ref = reference.and_then(|r| self.history.manifest(self.mesh, module, r).ok().flatten());
        let json = match by_ref {
            Some(json) => json,
            None => self.history.latest_manifest(self.mesh, module).ok().flatten()?.1,
        };
        serde_json::from_str(&json).ok()
    }
}
