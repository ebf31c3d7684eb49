//! The sources and backend the dashboard uses for real: the planner's dry run, the state database,
//! the host daemon. Blocking work (SQLite, input hashing) runs on the blocking pool.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::backends::daemon::{Daemon, LazyDaemon};
use crate::backends::history::{BuildQuery, BuildRow, History};
use crate::converge::plan::{self, HistoryManifests, PlanContext};
use crate::converge::target::{self, TargetBackend};
use crate::mesh::model::{Mesh, Target};

use super::msg::{ActionRequest, HistorySnapshot, PageRequest, PollParams, SourceData, SourceId};
use super::sources::{Backend, BoxFuture, FnSource, Source};

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
            let mut events = Vec::new();
            let mut after = params.events_after;
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

/// The real sources of a mesh. Machines are listed by the engine (`converge::machines::list`),
/// which is not wired here yet: that source answers "not wired yet".
pub fn sources(mesh: Arc<Mesh>, state_path: PathBuf, place: Place) -> Vec<Arc<dyn Source>> {
    let db = Db::new(state_path.clone());
    vec![
        Arc::new(PlanSource {
            mesh: mesh.clone(),
            state_path,
            place: place.clone(),
        }),
        Arc::new(RecordSource {
            mesh: mesh.clone(),
            db: db.clone(),
            place,
            cluster: Arc::new(tokio::sync::Mutex::new(None)),
        }),
        Arc::new(HostSource {
            daemon: Arc::new(tokio::sync::Mutex::new(None)),
        }),
        Arc::new(HistorySource {
            mesh: mesh.name.clone(),
            db,
        }),
        Arc::new(FnSource {
            id: SourceId::Machines,
            interval: Duration::from_secs(5),
            answer: |_: &PollParams| Err("not wired yet".to_string()),
        }),
    ]
}

/// History pages from the state database; actions answer "not wired yet" until the engine's
/// converge and send are connected here.
pub struct RealBackend {
    mesh: String,
    db: Db,
}

impl RealBackend {
    pub fn new(mesh: &Mesh, state_path: PathBuf) -> RealBackend {
        RealBackend {
            mesh: mesh.name.clone(),
            db: Db::new(state_path),
        }
    }
}

impl Backend for RealBackend {
    fn builds_page(&self, request: PageRequest) -> BoxFuture<Result<Vec<BuildRow>, String>> {
        let query = BuildQuery {
            mesh: self.mesh.clone(),
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
        _progress: mpsc::UnboundedSender<String>,
    ) -> BoxFuture<Result<String, String>> {
        let _ = request;
        Box::pin(async move { Err("not wired yet".to_string()) })
    }
}
