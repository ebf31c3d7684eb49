//! Builds of one tier placed on the pool's builders (`mesh/schedule.rs` decides where and when;
//! meshtop counts the builds in flight itself), each pushed to the mesh's registry by the builder
//! that made it when the pool hands artifacts over. A dependent placed on another builder than the
//! one holding its base gets the base by digest from the registry (`BASE` names `repo@sha256:…`).
//!
//! A transport fault (the builder went away, dropped the stream, did not end within the deadline)
//! takes the builder out of rotation and puts the build back once for another builder, said on
//! the module's line; a failed Dockerfile step is the user's and never retried. A fault with no
//! builder left to retry on ends the converge naming the daemon, as a single daemon going away did
//! before builders had names.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::watch;
use tokio::time::Instant;

use super::build::{BuildError, BuildJob, BuildOn, Built, build_module};
use super::builders::{Connection, Member, Pool};
use super::error::ConvergeError;
use super::progress::{Emitter, Payload};
use crate::backends::credentials::{self, Credentials};
use crate::backends::daemon::push::push_image;
use crate::backends::daemon::{Daemon, LazyDaemon};
use crate::backends::registry::{Published, RegistryClient, repository_in};
use crate::backends::state::StateDb;
use crate::mesh::model::{Mesh, RecordEntry, Registry};
use crate::mesh::progress::DeliveredBy;
use crate::mesh::refs::repository_of;
use crate::mesh::schedule::{AfterDone, Job, Next, Outcome, Placement, Scheduler};
use crate::mesh::text::short_id;

/// A build that ended on a builder.
pub struct Placed {
    pub built: Built,
    pub builder: String,
    /// The builder is the host daemon: the artifact is on the host already.
    pub on_host: bool,
    /// The manifest digest the builder pushed to the registry (the hand-over), when it pushed.
    pub handed: Option<String>,
    /// Why the hand-over push failed, when it did: the module fails (nothing is stamped).
    pub handover_error: Option<String>,
}

/// A module no builder could take: it fails, with why.
pub struct Unplaced {
    pub module: String,
    pub reason: String,
}

/// What the placing of one tier answers.
pub struct TierBuilds {
    pub placed: Vec<Placed>,
    pub unplaced: Vec<Unplaced>,
}

/// What every build of a converge reaches, and what the pool keeps across its tiers.
pub struct Placer<'a> {
    pub mesh: &'a Mesh,
    pub pool: Pool,
    pub scheduler: Scheduler,
    pub host: &'a LazyDaemon,
    pub db: &'a Arc<Mutex<StateDb>>,
    pub emitter: &'a Emitter,
    /// Per module, the manifest digest the registry holds it as (pushed in this converge, or
    /// vouched by the registry).
    pub handed: BTreeMap<String, String>,
    pub deadline: Duration,
    /// Per module, the transport fault of its first attempt (said if the retry finds no builder).
    faults: HashMap<String, Fault>,
    started: Instant,
}

impl<'a> Placer<'a> {
    /// `jobs` caps the builds running at once over every builder (`--jobs`).
    pub fn new(
        mesh: &'a Mesh,
        pool: Pool,
        jobs: usize,
        host: &'a LazyDaemon,
        db: &'a Arc<Mutex<StateDb>>,
        emitter: &'a Emitter,
    ) -> Placer<'a> {
        let scheduler = Scheduler::new(&pool.builders(), jobs);
        let mut placer = Placer {
            mesh,
            scheduler,
            pool,
            host,
            db,
            emitter,
            handed: BTreeMap::new(),
            deadline: super::build::build_deadline(),
            faults: HashMap::new(),
            started: Instant::now(),
        };
        for member in placer.pool.members.clone() {
            if member.connection.is_none() {
                let why = member.out.clone().unwrap_or_default();
                placer.scheduler.leave_out(&member.builder.name, why);
            }
        }
        placer
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A module whose artifact is on the host daemon (the record or the host vouched for it): a
    /// dependent goes to the builder that is the host, where its base is.
    pub fn note_on_host(&mut self, module: &str) {
        if let Some(host) = self.pool.host_member() {
            let name = host.builder.name.clone();
            self.scheduler.note_built(module, &name);
        }
    }

    /// Build `jobs` (one tier) on the pool; `bases` names each base's ref and artifact.
    pub async fn build_tier(
        &mut self,
        tier: u32,
        jobs: Vec<BuildJob>,
        bases: &BTreeMap<String, RecordEntry>,
        cancel: &mut watch::Receiver<bool>,
        lost: &mut watch::Receiver<Option<String>>,
    ) -> Result<TierBuilds, ConvergeError> {
        let waiting = crate::mesh::schedule::waiting_counts(self.mesh);
        let mut by_name: HashMap<String, BuildJob> = HashMap::new();
        for job in jobs {
            self.scheduler.enqueue(Job {
                module: job.module.name.clone(),
                tier,
                waiting: waiting.get(&job.module.name).copied().unwrap_or(0),
                base: job.module.base.clone(),
                platforms: job.planned.platforms.clone(),
                attempt: 0,
                avoid: Vec::new(),
            });
            by_name.insert(job.module.name.clone(), job);
        }
        let mut out = TierBuilds {
            placed: Vec::new(),
            unplaced: Vec::new(),
        };
        let shared = Shared {
            mesh: self.mesh,
            host: self.host,
            db: self.db,
            emitter: self.emitter,
            registry: self.pool.handover.clone(),
            creds: self.handover_credentials().await,
            deadline: self.deadline,
        };
        let mut running = FuturesUnordered::new();
        loop {
            let wake = self.place_ready(&mut running, &by_name, bases, &shared, &mut out)?;
            if running.is_empty() {
                match wake {
                    Some(until) if self.scheduler.queued() > 0 => {
                        let wait = until.saturating_sub(self.now_ms());
                        tokio::time::sleep(Duration::from_millis(wait)).await;
                        continue;
                    }
                    _ => break,
                }
            }
            let nap = wake.map(|until| Duration::from_millis(until.saturating_sub(self.now_ms())));
            tokio::select! {
                Some((placement, result)) = running.next() => {
                    if let Some(placed) = self.ended(placement, result)? {
                        out.placed.push(placed);
                    }
                }
                () = sleep_or_never(nap) => {}
                () = cancelled(cancel) => return Err(ConvergeError::Cancelled),
                message = super::lock::lost(lost) => return Err(ConvergeError::LockLost(message)),
            }
        }
        Ok(out)
    }

    /// Start every build the scheduler places now; when it is to be asked again (None: when a
    /// build ends).
    fn place_ready<'f>(
        &mut self,
        running: &mut FuturesUnordered<PlacedFuture<'f>>,
        by_name: &HashMap<String, BuildJob>,
        bases: &BTreeMap<String, RecordEntry>,
        shared: &'f Shared<'f>,
        out: &mut TierBuilds,
    ) -> Result<Option<u64>, ConvergeError> {
        loop {
            match self.scheduler.next(self.now_ms()) {
                Next::Place(placement) => {
                    let job = by_name.get(&placement.module).cloned();
                    let member = self.pool.member(&placement.builder).cloned();
                    let (Some(job), Some(member)) = (job, member) else {
                        // Not this tier's (cannot be): give its slot back.
                        self.scheduler
                            .done(&placement, Outcome::Failed, self.now_ms());
                        continue;
                    };
                    if placement.attempt > 0
                        && let Some(fault) = self.faults.get(&placement.module)
                    {
                        self.emitter.emit(
                            Payload::Requeued {
                                from: fault.0.clone(),
                                error: fault.1.clone(),
                            },
                            Some(&placement.module),
                            format!(
                                "builder {} failed the build ({}): it is out of rotation for a while; retrying once on builder {}",
                                fault.0, fault.1, placement.builder
                            ),
                        );
                    }
                    let base = job.module.base.as_ref().and_then(|b| {
                        bases
                            .get(b)
                            .map(|entry| (entry.clone(), self.handed.get(b).cloned()))
                    });
                    running.push(Box::pin(place_one(shared, member, placement, job, base)));
                }
                Next::Wait { until_ms } => return Ok(until_ms),
                Next::Idle => return Ok(None),
                Next::Unplaceable { module, reason } => {
                    if let Some((_, error)) = self.faults.get(&module) {
                        // No other builder to retry on: the daemon went away, as it did before
                        // builders had names.
                        return Err(ConvergeError::Failed(error.clone()));
                    }
                    out.unplaced.push(Unplaced { module, reason });
                }
            }
        }
    }

    /// A placed build ended: tell the scheduler, and what the tier keeps.
    fn ended(
        &mut self,
        placement: Placement,
        result: Result<Placed, BuildError>,
    ) -> Result<Option<Placed>, ConvergeError> {
        let now = self.now_ms();
        match result {
            Ok(placed) => {
                let outcome = if placed.built.artifact.is_some() {
                    Outcome::Built
                } else {
                    Outcome::Failed
                };
                self.scheduler.done(&placement, outcome, now);
                if let Some(digest) = &placed.handed {
                    self.handed.insert(placement.module.clone(), digest.clone());
                }
                Ok(Some(placed))
            }
            Err(BuildError::Daemon(message)) => {
                let outcome = Outcome::Transport {
                    error: message.clone(),
                };
                match self.scheduler.done(&placement, outcome, now) {
                    AfterDone::Requeued => {
                        self.faults.insert(
                            placement.module.clone(),
                            (placement.builder.clone(), message),
                        );
                        Ok(None)
                    }
                    AfterDone::GaveUp | AfterDone::Finished => Err(ConvergeError::Failed(message)),
                }
            }
            Err(BuildError::NoRecord(message)) => Err(ConvergeError::NoRecord(message)),
            Err(BuildError::Unrecorded(message)) => Err(ConvergeError::Unrecorded(message)),
        }
    }

    async fn handover_credentials(&self) -> Option<Credentials> {
        let registry = self.pool.handover.as_ref()?;
        credentials::for_registry(&registry.host)
            .await
            .ok()
            .flatten()
    }
}

/// The fault of a module's first attempt: the builder and its error.
type Fault = (String, String);

impl std::fmt::Debug for Placer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placer")
            .field("handed", &self.handed)
            .finish_non_exhaustive()
    }
}

type PlacedFuture<'f> = std::pin::Pin<
    Box<dyn std::future::Future<Output = (Placement, Result<Placed, BuildError>)> + Send + 'f>,
>;

/// Resolves once `cancel` says true (Ctrl-C, the dashboard's stop).
pub async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    while !*cancel.borrow() {
        if cancel.changed().await.is_err() {
            // Nobody can cancel any more: never resolve.
            std::future::pending::<()>().await;
        }
    }
}

async fn sleep_or_never(nap: Option<Duration>) {
    match nap {
        Some(nap) => tokio::time::sleep(nap).await,
        None => std::future::pending().await,
    }
}

/// What every build of a tier reads.
struct Shared<'a> {
    mesh: &'a Mesh,
    host: &'a LazyDaemon,
    db: &'a Arc<Mutex<StateDb>>,
    emitter: &'a Emitter,
    /// The registry artifacts cross through (None: no hand-over).
    registry: Option<Registry>,
    creds: Option<Credentials>,
    deadline: Duration,
}

/// One build on its builder: the base as the builder reaches it, the build, and the hand-over push.
async fn place_one(
    shared: &Shared<'_>,
    member: Member,
    placement: Placement,
    job: BuildJob,
    base: Option<(RecordEntry, Option<String>)>,
) -> (Placement, Result<Placed, BuildError>) {
    let result = build_on(shared, &member, job, base).await;
    (placement, result)
}

async fn build_on(
    shared: &Shared<'_>,
    member: &Member,
    job: BuildJob,
    base: Option<(RecordEntry, Option<String>)>,
) -> Result<Placed, BuildError> {
    let daemon: &Daemon = match &member.connection {
        Some(Connection::Own(daemon)) => daemon,
        Some(Connection::Host) | None => shared
            .host
            .get()
            .await
            .map_err(|e| BuildError::Daemon(format!("cannot build: {e}")))?,
    };
    let pooled = shared.registry.is_some();
    let base_arg = match (&shared.registry, base) {
        (Some(registry), Some((entry, manifest))) => {
            base_for(shared, daemon, registry, &entry, manifest)
                .await
                .map_err(|why| format!("builder {}: {why}", member.builder.name))
        }
        _ => Ok(None),
    };
    let on = BuildOn {
        daemon,
        builder: pooled.then_some(member.builder.name.as_str()),
        base: base_arg,
        deadline: shared.deadline,
    };
    let module = job.module.name.clone();
    let built = build_module(job, shared.mesh, on, shared.db, shared.emitter).await?;
    let mut placed = Placed {
        builder: member.builder.name.clone(),
        on_host: member.is_host,
        handed: built.published.clone(),
        handover_error: None,
        built,
    };
    let handing = shared
        .registry
        .as_ref()
        .filter(|_| placed.built.published.is_none());
    let (Some(registry), Some(artifact)) = (handing, placed.built.artifact.clone()) else {
        return Ok(placed);
    };
    let reference = placed.built.planned.reference.clone().unwrap_or_default();
    let pushing = Instant::now();
    let push = push_image(daemon.docker(), &reference, shared.creds.as_ref());
    // A push that hangs (a registry that stops answering mid-upload) must not hold the converge.
    let pushed = match tokio::time::timeout(shared.deadline, push).await {
        Ok(pushed) => pushed.map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "the push did not end within {} s (MESHTOP_BUILD_DEADLINE)",
            shared.deadline.as_secs()
        )),
    };
    match pushed {
        Ok(digest) => {
            let push_ms = i64::try_from(pushing.elapsed().as_millis()).unwrap_or(i64::MAX);
            let id = placed.built.correlation_id.clone();
            if let Ok(db) = crate::backends::state::locked(shared.db) {
                let _ = db.set_published(&id, &reference, &digest);
                let _ = db.set_push_time(&id, push_ms);
            }
            shared.emitter.emit(
                Payload::Delivered {
                    reference: reference.clone(),
                    by: DeliveredBy::Published {
                        registry: registry.host.clone(),
                        digest: digest.clone(),
                    },
                },
                Some(&module),
                format!(
                    "builder {} pushed {reference} ({}) to registry {} → {digest} in {} ms",
                    member.builder.name,
                    short_id(&artifact),
                    registry.host,
                    push_ms
                ),
            );
            placed.handed = Some(digest);
        }
        Err(error) => {
            placed.handover_error = Some(format!(
                "builder {} could not push {reference} to registry {}: {error}",
                member.builder.name, registry.host
            ));
        }
    }
    Ok(placed)
}

/// `BASE` for a build on `daemon`: None when the builder holds the base's artifact (the artifact
/// id names it there), else `repo@sha256:…` of its manifest in the registry — pushed in this
/// converge, answered by the registry for the base's ref, or pushed now from the host, which holds
/// every artifact the Docker target's record names. Err: the builder cannot reach the base.
async fn base_for(
    shared: &Shared<'_>,
    daemon: &Daemon,
    registry: &Registry,
    entry: &RecordEntry,
    manifest: Option<String>,
) -> Result<Option<String>, String> {
    if daemon.has_image(&entry.digest).await.unwrap_or(false) {
        return Ok(None);
    }
    let repository = repository_of(&entry.reference).to_string();
    if let Some(manifest) = manifest {
        return Ok(Some(format!("{repository}@{manifest}")));
    }
    let client = RegistryClient::new(registry, shared.creds.clone()).map_err(|e| e.to_string())?;
    let (path, tag) = repository_in(&registry.host, &entry.reference);
    if let Ok(Published::Present { digest }) = client.manifest(path, tag).await {
        return Ok(Some(format!("{repository}@{digest}")));
    }
    let host = shared.host.get().await.map_err(|e| e.to_string())?;
    if !host.has_image(&entry.digest).await.unwrap_or(false) {
        return Err(format!(
            "the base's artifact {} ({}) is neither on this builder, nor in registry {}, nor on the host daemon: converge the base module again",
            short_id(&entry.digest),
            entry.reference,
            registry.host
        ));
    }
    let digest = push_image(host.docker(), &entry.reference, shared.creds.as_ref())
        .await
        .map_err(|e| format!("the base could not be handed over: {e}"))?;
    Ok(Some(format!("{repository}@{digest}")))
}
