//! What every command needs first: the mesh, the state database, the target's record, the daemon.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::backends::state::{self, StateDb};
use crate::converge::engine;
use crate::converge::error::TargetError;
use crate::converge::targets::{self, Connected, RecordRead};
use crate::mesh::model::Mesh;
use crate::workspace::file;

use super::Failure;
use super::args::Global;

/// What a command that reads starts from, in its order: the mesh (as the command's target sees
/// it), the state database opened for reading, the target connected once, and its record as the
/// target read it. The mesh is loaded first so that a command checks its own arguments against it
/// ([`select`], a trusted key) before anything else is opened.
pub(crate) struct Reading {
    pub(crate) mesh: Mesh,
    pub(crate) db: Mutex<StateDb>,
    pub(crate) target: Connected,
    pub(crate) record: RecordRead,
}

impl Reading {
    /// The rest of the preamble for `mesh` (from [`load_mesh`]): state → target → record (its
    /// entries and pins: a history kept apart is left unread, `Target::read_entries`).
    pub(crate) async fn of(global: &Global, mesh: Mesh) -> Result<Reading, Failure> {
        Stated::open(global, mesh)?
            .read_as(global, false)
            .await
            .map_err(|(_, why)| why.failure())
    }
}

/// The preamble's first half: the mesh, and the state database opened for reading. A command that
/// can do without its target (history reads the state's copy) goes on from here when
/// [`Stated::read`] says why the target could not be read.
pub(crate) struct Stated {
    pub(crate) mesh: Mesh,
    pub(crate) db: Mutex<StateDb>,
}

/// Why the target's record could not be read: the target was not reached, or it did not answer.
pub(crate) enum NotRead {
    Target(Failure),
    Record { target: String, error: TargetError },
}

impl NotRead {
    /// As the command that cannot go on says it.
    pub(crate) fn failure(self) -> Failure {
        match self {
            NotRead::Target(failure) => failure,
            NotRead::Record { error, .. } => Failure::failed(error),
        }
    }

    /// As [`NotRead::failure`], the record's error naming its target (`target NAME: …`).
    pub(crate) fn naming_target(self) -> Failure {
        match self {
            NotRead::Target(failure) => failure,
            NotRead::Record { target, error } => {
                Failure::failed(format!("target {target}: {error}"))
            }
        }
    }
}

impl Stated {
    pub(crate) fn open(global: &Global, mesh: Mesh) -> Result<Stated, Failure> {
        let db = Mutex::new(open_state_for_reading(global)?);
        Ok(Stated { mesh, db })
    }

    /// The preamble's second half: target → record (with its whole history); else why not, and
    /// the state to go on with.
    pub(crate) async fn read(self, global: &Global) -> Result<Reading, (Stated, NotRead)> {
        self.read_as(global, true).await
    }

    async fn read_as(self, global: &Global, history: bool) -> Result<Reading, (Stated, NotRead)> {
        let target = match target(global, &self.mesh).await {
            Ok(target) => target,
            Err(failure) => return Err((self, NotRead::Target(failure))),
        };
        let read = if history {
            target.read_record(&self.mesh, &self.db).await
        } else {
            target.read_entries(&self.mesh, &self.db).await
        };
        match read {
            Ok(record) => Ok(Reading {
                mesh: self.mesh,
                db: self.db,
                target,
                record,
            }),
            Err(error) => {
                let target = target.name().to_string();
                Err((self, NotRead::Record { target, error }))
            }
        }
    }
}

/// What a command that moves one module's machines starts from (a rollback, a send, an unpin):
/// the mesh as the target sees it, the module checked against it, the state database opened to
/// write, and the target connected once.
pub(crate) struct ActingOn {
    pub(crate) mesh: Mesh,
    pub(crate) db: Arc<Mutex<StateDb>>,
    pub(crate) target: Connected,
}

impl ActingOn {
    pub(crate) async fn module(global: &Global, module: &str) -> Result<ActingOn, Failure> {
        let mesh = load_mesh(global)?;
        super::known_module(&mesh, module)?;
        let db = Arc::new(Mutex::new(open_state(global)?));
        let target = target(global, &mesh).await?;
        Ok(ActingOn { mesh, db, target })
    }

    /// Says where it acts (a Kubernetes context, when it is not the file's), before it asks.
    pub(crate) fn say_where(&self) {
        if let Some(acting_on) = self.target.acting_on() {
            eprintln!("meshtop: {acting_on}");
        }
    }
}

/// The mesh as its file says it (every target as declared).
pub(crate) fn load_file(global: &Global) -> Result<Mesh, Failure> {
    let path = file::find_mesh_file(global.mesh.as_deref()).map_err(Failure::input)?;
    file::load(&path).map_err(Failure::input)
}

/// The mesh as the command's target sees it (its policy override, its machines): `--target`, else
/// the mesh file's first target.
pub(crate) fn load_mesh(global: &Global) -> Result<Mesh, Failure> {
    let mesh = load_file(global)?;
    if let Some((logins, what)) = crate::backends::credentials::logins_file() {
        crate::workspace::secrets::refuse_naming(&mesh, &logins, what).map_err(Failure::input)?;
    }
    let name = target_name(global, &mesh)?;
    Ok(mesh.on_target(&name))
}

/// The target a command acts on: `--target`, else the mesh file's first. Bad input (exit 2): a
/// name the mesh does not declare, or a kind's flag on a mesh whose targets are named (each acts
/// where it names; `--target` chooses one).
pub(crate) fn target_name(global: &Global, mesh: &Mesh) -> Result<String, Failure> {
    global.overrides.check_for(mesh).map_err(Failure::input)?;
    let names = mesh.target_names();
    match &global.target {
        None => Ok(mesh.first_target().to_string()),
        Some(name) if names.contains(&name.as_str()) => Ok(name.clone()),
        Some(name) => Err(Failure::input(format!(
            "--target {name}: mesh {} ({}) names no such target; its targets: {}",
            mesh.name,
            mesh.file.display(),
            names.join(", ")
        ))),
    }
}

pub(crate) fn state_path(global: &Global) -> Result<PathBuf, Failure> {
    match &global.state {
        Some(path) => Ok(path.clone()),
        None => state::default_path().map_err(Failure::failed),
    }
}

pub(crate) fn open_state(global: &Global) -> Result<StateDb, Failure> {
    let path = state_path(global)?;
    StateDb::open(&path).map_err(Failure::failed)
}

/// For the commands that only read (plan, builds, status, history, stats): read-only when it cannot
/// be written.
pub(crate) fn open_state_for_reading(global: &Global) -> Result<StateDb, Failure> {
    let path = state_path(global)?;
    StateDb::open_for_reading(&path).map_err(Failure::failed)
}

/// The command's target, connected once for the command: the kinds' flags override a single
/// `[target]`'s. A named target the kind cannot reach as named (a context the kubeconfig lacks)
/// is bad input, refused before any call.
pub(crate) async fn target(global: &Global, mesh: &Mesh) -> Result<Connected, Failure> {
    let name = target_name(global, mesh)?;
    connect(global, mesh, &name).await
}

/// Target `name` of the mesh, connected (the flags apply to a single `[target]` only).
pub(crate) async fn connect(
    global: &Global,
    mesh: &Mesh,
    name: &str,
) -> Result<Connected, Failure> {
    connect_target(global, mesh, name)
        .await
        .map_err(|e| match e {
            TargetError::KindInput(_) => Failure::input(e),
            other => Failure::failed(other),
        })
}

/// Target `name` connected, or the target's own error (a command that reads several targets
/// says it beside the others rather than exiting).
pub(crate) async fn connect_target(
    global: &Global,
    mesh: &Mesh,
    name: &str,
) -> Result<Connected, TargetError> {
    targets::connect(mesh, name, &global.overrides).await
}

/// The named modules, each checked against the mesh (None = all).
pub(crate) fn select(mesh: &Mesh, names: &[String]) -> Result<Option<BTreeSet<String>>, Failure> {
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
pub(crate) struct ConvergeSetup {
    pub(crate) mesh: Mesh,
    pub(crate) modules: Option<BTreeSet<String>>,
    pub(crate) state_path: PathBuf,
    pub(crate) jobs: usize,
    pub(crate) target: Connected,
}

pub(crate) async fn converge_setup(
    global: &Global,
    modules: &[String],
    jobs: Option<u16>,
    publish: bool,
    sign_key: Option<&Path>,
) -> Result<ConvergeSetup, Failure> {
    let mut mesh = load_mesh(global)?;
    // Whatever this converge pushes is signed: --publish on Docker, every delivery to a registry on
    // Kubernetes.
    if let Some(key_file) = sign_key {
        let key = file::read_signing_key(key_file).map_err(Failure::input)?;
        let what = "meshtop's signing key (--sign-key)";
        crate::workspace::secrets::refuse_naming(&mesh, key_file, what).map_err(Failure::input)?;
        mesh.signing.key = Some(key);
    }
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
