//! One connection per outside system and one state-database handle, shared by every source and
//! action of the dashboard. Each is made on first use and dropped after an error, so that a daemon,
//! cluster or registry that comes back is reached again on the next poll (never twice at once).

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::app::msg::SourceError;
use crate::backends::credentials;
use crate::backends::daemon::{Daemon, LazyDaemon};
use crate::backends::registry::RegistryClient;
use crate::backends::state::StateDb;
use crate::converge::targets::{self, Connected, Overrides};
use crate::mesh::model::Mesh;
use crate::mesh::target::TargetDescription;
use crate::workspace::walks::WalkMemo;

use super::error::stopped;

/// A connection made on first use, shared, and dropped after a failed use.
pub(crate) struct Shared<T> {
    slot: tokio::sync::Mutex<Option<T>>,
}

impl<T: Clone> Shared<T> {
    pub(crate) fn new() -> Shared<T> {
        Shared {
            slot: tokio::sync::Mutex::new(None),
        }
    }

    /// The connection if one is made (never connects).
    pub(crate) async fn peek(&self) -> Option<T> {
        self.slot.lock().await.clone()
    }

    /// Run `work` on the connection (made by `connect` when there is none). A failed `work` drops
    /// the connection: the next use connects again.
    pub(crate) async fn with<R, C, CF, W, WF>(&self, connect: C, work: W) -> Result<R, SourceError>
    where
        C: FnOnce() -> CF,
        CF: Future<Output = Result<T, SourceError>>,
        W: FnOnce(T) -> WF,
        WF: Future<Output = Result<R, SourceError>>,
    {
        let connection = {
            let mut slot = self.slot.lock().await;
            match slot.as_ref() {
                Some(connection) => connection.clone(),
                None => {
                    let connection = connect().await?;
                    *slot = Some(connection.clone());
                    connection
                }
            }
        };
        let result = work(connection).await;
        if result.is_err() {
            *self.slot.lock().await = None;
        }
        result
    }
}

impl<T: Clone> Default for Shared<T> {
    fn default() -> Self {
        Shared::new()
    }
}

/// The state database handle, shared (SQLite calls run on the blocking pool).
pub(crate) type Db = Arc<Mutex<StateDb>>;

/// Everything the dashboard's sources and actions reach, each reached once.
pub struct Session {
    /// The mesh as its file says it (every target).
    pub mesh: Arc<Mesh>,
    pub state_path: PathBuf,
    /// Where the command line's flags point the targets (the seam reads them).
    pub overrides: Overrides,
    db: Shared<Db>,
    daemon: Shared<Daemon>,
    /// One connection per target of the mesh, and the mesh as each target sees it.
    targets: BTreeMap<String, (Shared<Connected>, Arc<Mesh>)>,
    registry: Shared<Arc<RegistryClient>>,
    /// The plan's walks of the contexts, kept while they are watched (the dashboard's watcher).
    pub walks: Arc<WalkMemo>,
}

impl Session {
    pub fn new(mesh: Arc<Mesh>, state_path: PathBuf, overrides: Overrides) -> Arc<Session> {
        let targets = mesh
            .target_names()
            .into_iter()
            .map(|name| {
                let seen = Arc::new(mesh.on_target(name));
                (name.to_string(), (Shared::new(), seen))
            })
            .collect();
        Arc::new(Session {
            mesh,
            state_path,
            overrides,
            db: Shared::new(),
            daemon: Shared::new(),
            targets,
            registry: Shared::new(),
            walks: Arc::new(WalkMemo::new()),
        })
    }

    /// Run `work` against the state database on the blocking pool.
    pub async fn db<R: Send + 'static>(
        &self,
        work: impl FnOnce(&Db) -> Result<R, SourceError> + Send + 'static,
    ) -> Result<R, SourceError> {
        let path = self.state_path.clone();
        self.db
            .with(
                || async move {
                    let opened = tokio::task::spawn_blocking(move || StateDb::open(&path))
                        .await
                        .map_err(stopped("opening"))??;
                    Ok(Arc::new(Mutex::new(opened)))
                },
                |db| async move {
                    tokio::task::spawn_blocking(move || work(&db))
                        .await
                        .map_err(stopped("reading"))?
                },
            )
            .await
    }

    /// The state database handle itself, for engine calls that lock it as they go.
    pub async fn db_handle(&self) -> Result<Db, SourceError> {
        self.db(|db| Ok(db.clone())).await
    }

    /// Run `work` on the host daemon's connection.
    pub async fn daemon<R, W, WF>(&self, work: W) -> Result<R, SourceError>
    where
        W: FnOnce(Daemon) -> WF,
        WF: Future<Output = Result<R, SourceError>>,
    {
        self.daemon
            .with(|| async { Ok(Daemon::connect().await?) }, work)
            .await
    }

    /// The daemon for a dry run or a converge: the shared connection when one is made, else one
    /// made only if asked (a plan or converge the record answers never needs the daemon, and an
    /// unreachable daemon must not fail it).
    pub async fn lazy_daemon(&self) -> Arc<LazyDaemon> {
        match self.daemon.peek().await {
            Some(daemon) => Arc::new(LazyDaemon::with(daemon)),
            None => Arc::new(LazyDaemon::new()),
        }
    }

    /// The target a source or an action acts on when it names none: `shown` (the one the main
    /// view shows), else the mesh's first.
    pub fn target_name<'a>(&'a self, shown: Option<&'a str>) -> &'a str {
        match shown {
            Some(name) if self.targets.contains_key(name) => name,
            _ => self.mesh.first_target(),
        }
    }

    /// The mesh as target `name` sees it (its policy override, its machines).
    pub fn mesh_on(&self, name: &str) -> Arc<Mesh> {
        match self.targets.get(name) {
            Some((_, seen)) => seen.clone(),
            None => self.mesh.clone(),
        }
    }

    /// Run `work` on target `name`'s connection (one cluster connection per target for every
    /// source and action).
    pub async fn target_on<R, W, WF>(&self, name: &str, work: W) -> Result<R, SourceError>
    where
        W: FnOnce(Connected) -> WF,
        WF: Future<Output = Result<R, SourceError>>,
    {
        let Some((shared, _)) = self.targets.get(name) else {
            return Err(SourceError::NoSuchTarget {
                mesh: self.mesh.name.clone(),
                name: name.to_string(),
                names: self.mesh.target_names().join(", "),
            });
        };
        let (mesh, overrides) = (self.mesh.clone(), self.overrides.clone());
        let name = name.to_string();
        shared
            .with(
                || async move {
                    let connected = targets::connect(&mesh, &name, &overrides).await?;
                    Ok(connected)
                },
                work,
            )
            .await
    }

    /// Target `name`, connected (or why it could not be).
    pub async fn connected(&self, name: &str) -> Result<Connected, SourceError> {
        self.target_on(name, |t| async move { Ok(t) }).await
    }

    /// Target `name` in words, as the seam describes it once connected (the connection is kept
    /// for the sources); when it cannot be reached yet, as the mesh file and the flags say.
    pub async fn describe_target(&self, name: &str) -> TargetDescription {
        let connected = self
            .target_on(name, |target| async move { Ok(target.describe()) })
            .await;
        connected.unwrap_or_else(|_| self.describe_offline(name))
    }

    /// Target `name` in words from the mesh file and the flags, without connecting.
    pub fn describe_offline(&self, name: &str) -> TargetDescription {
        targets::describe(&self.mesh, name, &self.overrides)
    }

    /// Run `work` on the registry client (None: the mesh names no registry).
    pub async fn registry<R, W, WF>(&self, work: W) -> Result<R, SourceError>
    where
        W: FnOnce(Arc<RegistryClient>) -> WF,
        WF: Future<Output = Result<R, SourceError>>,
    {
        let registry = self.mesh.registry.clone().ok_or(SourceError::NoRegistry)?;
        self.registry
            .with(
                || async move {
                    let creds = credentials::for_registry(&registry.host).await?;
                    Ok(Arc::new(RegistryClient::new(&registry, creds)?))
                },
                work,
            )
            .await
    }
}
