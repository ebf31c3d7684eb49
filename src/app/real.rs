//! The sources and backend the dashboard uses for real: the planner's dry run, the state database,
//! the host daemon. Blocking work (SQLite, input hashing) runs on the blocking pool.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::backends::credentials;
use crate::backends::daemon::{Daemon, LazyDaemon};
use crate::backends::history::{BuildQuery, BuildRow, History};
use crate::backends::registry::{self, Published, RegistryClient};
use crate::converge::engine::{self, ConvergeRequest};
use crate::converge::plan::{self, HistoryManifests, PlanContext};
use crate::converge::progress::Progress;
use crate::converge::target::{self, TargetBackend};
use crate::converge::{machines, send};
use crate::mesh::model::{Mesh, Target};

use super::msg::{
    ActionRequest, HistorySnapshot, PageRequest, PollParams, RegistryAnswer, SourceData, SourceId,
};
use super::sources::{Backend, BoxFuture, Source};

/// Events read per history poll (the first poll reads the tail of the latest ones).
const EVENTS_PER_POLL: usize = 500;
/// At most this many running digests are traced back to their builds per poll.
const MAX_TRACED: usize = 200;

/// A state database handle opened lazily and kept across polls (dropped after an error).
#[derive(Clone)]
struct Db {
    path: PathBuf,
    handle: Arc<Mutex<Option<History>>>,
}

impl Db {
    fn new(path: PathBuf) -> Db {
        Db {
            path,
            handle: Arc::new(Mutex::new(None)),
        }
    }

    /// Run `work` against the database on the blocking pool.
    fn with<T: Send + 'static>(
        &self,
        work: impl FnOnce(&History) -> Result<T, String> + Send + 'static,
    ) -> BoxFuture<Result<T, String>> {
        let db = self.clone();
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let mut guard = db
                    .handle
                    .lock()
                    .map_err(|_| "the state database handle was poisoned".to_string())?;
                if guard.is_none() {
                    *guard = Some(History::open(&db.path).map_err(|e| e.to_string())?);
                }
                let history = guard.as_ref().ok_or("the state database is not open")?;
                let result = work(history);
                if result.is_err() {
                    *guard = None;
                }
                result
            })
            .await
            .map_err(|e| format!("reading the state database stopped: {e}"))?
        })
    }
}

/// The dry run, as `meshtop plan` makes it (on its own thread: hashing reads every context).
struct PlanSource {
    mesh: Arc<Mesh>,
    state_path: PathBuf,
    place: Place,
}

/// The Kubernetes context and namespace given on the command line (they win over the mesh file's).
#[derive(Debug, Clone, Default)]
pub struct Place {
    pub context: Option<String>,
    pub namespace: Option<String>,
}

impl Place {
    async fn connect(&self, mesh: &Mesh) -> Result<TargetBackend, String> {
        TargetBackend::connect(mesh, self.context.as_deref(), self.namespace.as_deref()).await
    }
}

impl Source for PlanSource {
    fn id(&self) -> SourceId {
        SourceId::Plan
    }
    fn interval(&self) -> Duration {
        Duration::from_secs(10)
    }
    fn poll(&self, _params: PollParams) -> BoxFuture<Result<SourceData, String>> {
        let (mesh, path, place) = (
            self.mesh.clone(),
            self.state_path.clone(),
            self.place.clone(),
        );
        Box::pin(async move {
            tokio::task::spawn_blocking(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("cannot start the planner's runtime: {e}"))?;
                runtime.block_on(async {
                    let history = Mutex::new(History::open(&path).map_err(|e| e.to_string())?);
                    let backend = place.connect(&mesh).await?;
                    let read = target::read_record(&mesh, &backend, &history).await?;
                    let ctx = PlanContext {
                        mesh: &mesh,
                        record: read.record,
                        record_source: read.source,
                        selected: None,
                        force: false,
                    };
                    let manifests = HistoryManifests {
                        history: &history,
                        mesh: &mesh.name,
                    };
                    let plan = plan::dry_run(ctx, Arc::new(LazyDaemon::new()), &manifests).await?;
                    Ok(SourceData::Plan(Box::new(plan)))
                })
            })
            .await
            .map_err(|e| format!("the dry run stopped: {e}"))?
        })
    }
}

struct RecordSource {
    mesh: Arc<Mesh>,
    db: Db,
    place: Place,
    /// The Kubernetes connection, kept across polls (dropped after an error).
    cluster: Arc<tokio::sync::Mutex<Option<TargetBackend>>>,
}

impl Source for RecordSource {
    fn id(&self) -> SourceId {
        SourceId::Record
    }
    fn interval(&self) -> Duration {
        Duration::from_secs(3)
    }
    fn poll(&self, _params: PollParams) -> BoxFuture<Result<SourceData, String>> {
        let mesh = self.mesh.clone();
        if mesh.target == Target::Docker {
            return self.db.with(move |history| {
                history
                    .record(&mesh.name)
                    .map(SourceData::Record)
                    .map_err(|e| e.to_string())
            });
        }
        let (place, cluster, path) = (
            self.place.clone(),
            self.cluster.clone(),
            self.db.path.clone(),
        );
        Box::pin(async move {
            let mut guard = cluster.lock().await;
            if guard.is_none() {
                *guard = Some(place.connect(&mesh).await?);
            }
            let backend = guard.as_ref().ok_or("the cluster is not connected")?;
            // The Kubernetes record lives on the namespace; the database is only named here.
            let history = tokio::task::spawn_blocking(move || {
                History::open(&path).map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| format!("opening the state database stopped: {e}"))??;
            let read = target::read_record(&mesh, backend, &Mutex::new(history)).await;
            if read.is_err() {
                *guard = None;
            }
            read.map(|r| SourceData::Record(r.record))
        })
    }
}

struct HostSource {
    daemon: Arc<tokio::sync::Mutex<Option<Daemon>>>,
}

impl Source for HostSource {
    fn id(&self) -> SourceId {
        SourceId::Host
    }
    fn interval(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn poll(&self, _params: PollParams) -> BoxFuture<Result<SourceData, String>> {
        let daemon = self.daemon.clone();
        Box::pin(async move {
            let mut guard = daemon.lock().await;
            if guard.is_none() {
                *guard = Some(Daemon::connect().await.map_err(|e| e.to_string())?);
            }
            let connected = guard.as_ref().ok_or("the daemon is not connected")?;
            match connected.labelled_images().await {
                Ok(images) => Ok(SourceData::Host(images)),
                Err(error) => {
                    *guard = None;
                    Err(error.to_string())
                }
            }
        })
    }
}

struct HistorySource {
    mesh: String,
    db: Db,
}

impl Source for HistorySource {
    fn id(&self) -> SourceId {
        SourceId::History
    }
    fn interval(&self) -> Duration {
        Duration::from_secs(2)
    }
    fn poll(&self, params: PollParams) -> BoxFuture<Result<SourceData, String>> {
        let mesh = self.mesh.clone();
        self.db.with(move |history| {
            let e = |e: crate::backends::history::HistoryError| e.to_string();
            let last_builds = history.last_builds(&mesh).map_err(e)?;
            let query = BuildQuery {
                mesh: mesh.clone(),
                module: params.history_module.clone(),
                failed_only: false,
                limit: params.page_size.max(1),
                before: None,
            };
            let page = history.builds(&query).map_err(e)?;
            // First poll: the tail only, not every kept event in batches.
            let mut events = if params.events_after == 0 {
                history.events_tail(&mesh, EVENTS_PER_POLL).map_err(e)?
            } else {
                Vec::new()
            };
            let mut after = events.last().map_or(params.events_after, |row| row.id);
            loop {
                let batch = history
                    .events_after(&mesh, after, EVENTS_PER_POLL)
                    .map_err(e)?;
                let full = batch.len() == EVENTS_PER_POLL;
                after = batch.last().map_or(after, |row| row.id);
                events.extend(batch);
                if events.len() > EVENTS_PER_POLL {
                    events.drain(..events.len() - EVENTS_PER_POLL);
                }
                if !full {
                    break;
                }
            }
            let latest_converge = history.latest_converge(&mesh).map_err(e)?;
            let mut made_by: BTreeMap<String, BuildRow> = BTreeMap::new();
            for digest in params.digests.iter().take(MAX_TRACED) {
                if let Some(row) = history.build_by_digest(&mesh, digest).map_err(e)? {
                    made_by.insert(digest.clone(), row);
                }
            }
            Ok(SourceData::History(Box::new(HistorySnapshot {
                last_builds,
                scope: params.history_module,
                page,
                events,
                latest_converge,
                made_by,
            })))
        })
    }
}

/// A target connection and the daemon beside it.
type Connected = (TargetBackend, Arc<LazyDaemon>);

/// The machines of the mesh on its target, as the engine lists them, with their state against the record.
struct MachinesSource {
    mesh: Arc<Mesh>,
    state_path: PathBuf,
    place: Place,
    /// The target and daemon connections, kept across polls (dropped after an error, so that a
    /// daemon or cluster that comes back is seen again).
    connected: Arc<tokio::sync::Mutex<Option<Connected>>>,
}

impl Source for MachinesSource {
    fn id(&self) -> SourceId {
        SourceId::Machines
    }
    fn interval(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn poll(&self, _params: PollParams) -> BoxFuture<Result<SourceData, String>> {
        let (mesh, path, place, connected) = (
            self.mesh.clone(),
            self.state_path.clone(),
            self.place.clone(),
            self.connected.clone(),
        );
        Box::pin(async move {
            let mut guard = connected.lock().await;
            if guard.is_none() {
                *guard = Some((place.connect(&mesh).await?, Arc::new(LazyDaemon::new())));
            }
            let (backend, daemon) = guard.as_ref().ok_or("the target is not connected")?;
            let history = tokio::task::spawn_blocking(move || {
                History::open(&path).map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| format!("opening the state database stopped: {e}"))??;
            let history = Mutex::new(history);
            let listed = match target::read_record(&mesh, backend, &history).await {
                Ok(read) => machines::list(&mesh, &read.record, daemon, backend, &history).await,
                Err(error) => Err(error),
            };
            if listed.is_err() {
                *guard = None;
            }
            listed.map(SourceData::Machines)
        })
    }
}

/// What the registry holds for each module's planned ref (HEAD on its manifest).
struct RegistrySource {
    registry: crate::mesh::model::Registry,
    client: Arc<tokio::sync::Mutex<Option<RegistryClient>>>,
}

impl Source for RegistrySource {
    fn id(&self) -> SourceId {
        SourceId::Registry
    }
    fn interval(&self) -> Duration {
        Duration::from_secs(10)
    }
    fn poll(&self, params: PollParams) -> BoxFuture<Result<SourceData, String>> {
        let (registry, client) = (self.registry.clone(), self.client.clone());
        Box::pin(async move {
            let mut guard = client.lock().await;
            if guard.is_none() {
                let creds = credentials::for_registry(&registry.host)
                    .await
                    .map_err(|e| e.to_string())?;
                *guard = Some(RegistryClient::new(&registry, creds).map_err(|e| e.to_string())?);
            }
            let client = guard.as_ref().ok_or("the registry client is not ready")?;
            let mut answers = BTreeMap::new();
            for (module, reference) in params.refs {
                let (repository, tag) = registry::split_reference(&reference);
                let repository = repository
                    .strip_prefix(&format!("{}/", registry.host))
                    .unwrap_or(repository)
                    .to_string();
                let answer = match client.manifest(&repository, tag).await {
                    Ok(Published::Present { digest }) => RegistryAnswer::Published(digest),
                    Ok(Published::Absent) => RegistryAnswer::Absent,
                    Err(error) => RegistryAnswer::Failed(error.to_string()),
                };
                answers.insert(module, answer);
            }
            Ok(SourceData::Registry(answers))
        })
    }
}

/// The real sources of a mesh.
pub fn sources(mesh: Arc<Mesh>, state_path: PathBuf, place: Place) -> Vec<Arc<dyn Source>> {
    let db = Db::new(state_path.clone());
    let registry: Option<Arc<dyn Source>> = mesh.registry.clone().map(|registry| {
        Arc::new(RegistrySource {
            registry,
            client: Arc::new(tokio::sync::Mutex::new(None)),
        }) as Arc<dyn Source>
    });
    let mut all: Vec<Arc<dyn Source>> = vec![
        Arc::new(PlanSource {
            mesh: mesh.clone(),
            state_path,
            place: place.clone(),
        }),
        Arc::new(RecordSource {
            mesh: mesh.clone(),
            db: db.clone(),
            place: place.clone(),
            cluster: Arc::new(tokio::sync::Mutex::new(None)),
        }),
        Arc::new(HostSource {
            daemon: Arc::new(tokio::sync::Mutex::new(None)),
        }),
        Arc::new(HistorySource {
            mesh: mesh.name.clone(),
            db: db.clone(),
        }),
        Arc::new(MachinesSource {
            mesh,
            state_path: db.path.clone(),
            place: place.clone(),
            connected: Arc::new(tokio::sync::Mutex::new(None)),
        }),
    ];
    all.extend(registry);
    all
}

/// History pages from the state database, and the actions: converge and send through the engine.
pub struct RealBackend {
    mesh: Arc<Mesh>,
    state_path: PathBuf,
    place: Place,
    db: Db,
}

impl RealBackend {
    pub fn new(mesh: &Mesh, state_path: PathBuf, place: Place) -> RealBackend {
        RealBackend {
            mesh: Arc::new(mesh.clone()),
            db: Db::new(state_path.clone()),
            state_path,
            place,
        }
    }
}

/// Run one action to its end; progress lines go to `progress` as they come.
async fn run_action(
    mesh: Arc<Mesh>,
    state_path: PathBuf,
    place: Place,
    request: ActionRequest,
    progress: mpsc::UnboundedSender<String>,
) -> Result<String, String> {
    let backend = place.connect(&mesh).await?;
    let (tx, mut rx) = mpsc::unbounded_channel::<Progress>();
    let forward = tokio::spawn(async move {
        while let Some(step) = rx.recv().await {
            if progress.send(step.line()).is_err() {
                break;
            }
        }
    });
    let daemon = Arc::new(LazyDaemon::new());
    let result = match request {
        ActionRequest::Converge { modules, force } => {
            let request = ConvergeRequest {
                mesh: (*mesh).clone(),
                state_path,
                force,
                jobs: std::thread::available_parallelism().map_or(2, |n| n.get()),
                modules: modules.map(|names| names.into_iter().collect()),
                wait: false,
                target: backend,
            };
            // Nothing cancels a converge started here but quitting the dashboard.
            let (_cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
            match engine::converge(request, daemon, Some(tx), cancel_rx).await {
                Ok(summary) if summary.ok => {
                    Ok(format!("converge {} succeeded", summary.converge_id))
                }
                Ok(summary) => Err(format!(
                    "converge {} failed: {}",
                    summary.converge_id,
                    summary
                        .modules
                        .iter()
                        .filter(|m| !m.ok)
                        .map(|m| format!("{} {}", m.name, m.outcome))
                        .collect::<Vec<_>>()
                        .join("; ")
                )),
                Err(error) => Err(error.to_string()),
            }
        }
        ActionRequest::Send { module, machines } => {
            let history = tokio::task::spawn_blocking(move || {
                History::open(&state_path).map_err(|e| e.to_string())
            })
            .await
            .map_err(|e| format!("opening the state database stopped: {e}"))??;
            let history = Arc::new(Mutex::new(history));
            let moves: Vec<_> = send::prepare(&mesh, &module, &daemon, &backend, &history)
                .await?
                .into_iter()
                .filter(|m| machines.contains(&m.machine))
                .collect();
            if moves.is_empty() {
                Ok(format!(
                    "nothing to send: every machine of {module} runs the record's artifact"
                ))
            } else {
                let outcomes =
                    send::send_holding_mesh(&mesh, &moves, &daemon, &backend, &history, Some(tx))
                        .await?;
                let failed: Vec<String> = outcomes
                    .iter()
                    .filter(|o| !o.ok)
                    .map(|o| format!("{}: {}", o.moved.machine, o.message))
                    .collect();
                if failed.is_empty() {
                    Ok(format!(
                        "sent {module}: {} machine(s) moved",
                        outcomes.len()
                    ))
                } else {
                    Err(format!("send {module} failed: {}", failed.join("; ")))
                }
            }
        }
    };
    let _ = forward.await;
    result
}

impl Backend for RealBackend {
    fn builds_page(&self, request: PageRequest) -> BoxFuture<Result<Vec<BuildRow>, String>> {
        let query = BuildQuery {
            mesh: self.mesh.name.clone(),
            module: request.module,
            failed_only: false,
            limit: request.limit,
            before: request.before,
        };
        self.db
            .with(move |history| history.builds(&query).map_err(|e| e.to_string()))
    }

    fn start(
        &self,
        request: ActionRequest,
        progress: mpsc::UnboundedSender<String>,
    ) -> BoxFuture<Result<String, String>> {
        Box::pin(run_action(
            self.mesh.clone(),
            self.state_path.clone(),
            self.place.clone(),
            request,
            progress,
        ))
    }
}
