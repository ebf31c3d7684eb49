//! Builds placed on the pool's builders as the walk finds them ready (`mesh/schedule.rs` decides where and when;
//! meshtop counts the builds in flight itself), each pushed to the mesh's registry by the builder
//! that made it when the pool hands artifacts over, and signed there when the converge signs. A
//! dependent placed on another builder than the one holding its base gets the base pulled there by
//! a manifest digest this machine pushed or verified (never by the base's tag), and the pulled
//! image must be the base's artifact.
//!
//! A transport fault (the builder went away, dropped the stream, did not end within the deadline)
//! takes the builder out of rotation and puts the build back once for another builder, said on
//! the module's line; a failed Dockerfile step is the user's and never retried. A fault with no
//! builder left to retry on ends the converge naming the daemon, as a single daemon going away did
//! before builders had names.
//!
//! A multi-platform module built through the pool takes no slot itself: it starts at once, and
//! each of its platforms is a part the scheduler places like any build (a slot of the builder it
//! runs on, native before emulated), granted to the module's build through a oneshot and given
//! back through the tier's channel when that platform's build ends. A part's builder that went
//! away is the one blamed, taken out of rotation and avoided by the module's one retry.

use crate::error::HoldLost;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::build::{
    BuildError, BuildJob, BuildOn, Built, PartEnd, PlatformOn, PlatformSlots, PlatformsUnbuilt,
    build_module,
};
use super::builders::{Connection, Member, Pool};
use super::converging::Converging;
use super::error::{BaseOutOfReach, ConvergeError, Undelivery};
use super::handover::{BaseOf, HandOver};
use super::progress::Payload;
use crate::backends::credentials;
use crate::backends::daemon::Daemon;
use crate::mesh::model::{MultiPlatform, Platform, RecordEntry};
use crate::mesh::schedule::{AfterDone, Job, Next, Outcome, Placement, Scheduler, Why, part_key};

/// A build that ended on a builder.
pub(crate) struct Placed {
    pub built: Built,
    /// The builder is the host daemon: the artifact is on the host already.
    pub on_host: bool,
    /// The manifest digest the builder pushed to the registry (the hand-over), when it pushed.
    pub handed: Option<String>,
    /// Why the hand-over push failed, when it did: the module fails (nothing is stamped).
    pub handover_error: Option<Undelivery>,
    /// The hand-over push still to make, once the build gave its slot back.
    pending: Option<PendingHandOver>,
}

/// A hand-over push to make after the build: the builder that holds the artifact.
struct PendingHandOver {
    member: Member,
    artifact: String,
}

/// A module no builder could take: it fails, with why.
pub(crate) struct Unplaced {
    pub module: String,
    pub reason: String,
}

/// What the walk hands the placer as the converge goes (in order: a note on a module comes
/// before any build that builds on it).
pub(crate) enum Placing {
    /// Build this module: every module it builds on is delivered; `bases` names each one's ref
    /// and artifact, for a builder that must fetch it.
    Build {
        job: Box<BuildJob>,
        bases: BTreeMap<String, RecordEntry>,
    },
    /// Its artifact is on the host daemon (the record or the host vouched for it): a dependent
    /// goes to the builder that is the host, where its base is.
    OnHost(String),
    /// The registry holds it as this manifest (the registry vouched for it).
    Handed { module: String, manifest: String },
}

/// How a build handed to the placer ended on its side: built (or failed) on a builder, to be
/// delivered, or taken by no builder.
pub(crate) enum Ended {
    Placed(Box<Placed>),
    Unplaced(Unplaced),
}

/// What every build of a converge reaches, and what the pool keeps across it.
pub(crate) struct Placer<'a> {
    cx: Converging<'a>,
    pub pool: Pool,
    pub scheduler: Scheduler,
    /// Per module, the manifest digest the registry holds it as (pushed in this converge, or
    /// vouched by the registry).
    pub handed: BTreeMap<String, String>,
    pub deadline: Duration,
    /// Per module, the transport fault of its first attempt (said if the retry finds no builder).
    faults: HashMap<String, Fault>,
    started: Instant,
    /// Per queued part (`part_key`), where its placement is granted to its module's build.
    grants: HashMap<String, oneshot::Sender<Grant>>,
    /// The multi-platform modules building now (their parts hold the slots).
    leads: HashMap<String, Lead>,
    /// Multi-platform modules to start again (once, after a builder of one of their platforms
    /// went away).
    retries: Vec<Lead>,
    /// Every build handed to the placer, by module (a retry finds its job here).
    jobs: HashMap<String, BuildJob>,
    /// Each module a build builds on, as the record to be stamped or the record read names it.
    bases: BTreeMap<String, RecordEntry>,
    /// Per module, how many modules build on it, and its longest remaining chain (the queue's
    /// order); computed when the first build is handed over.
    order: Option<Order>,
}

/// What orders the queue: per module, how many modules build on it and its longest remaining
/// chain (`mesh/schedule.rs`).
struct Order {
    waiting: BTreeMap<String, usize>,
    chain_ms: BTreeMap<String, u64>,
}

/// A multi-platform module's build as the placer starts it: its attempt, the builders its parts
/// avoid, and its place in the queue.
#[derive(Debug, Clone)]
struct Lead {
    module: String,
    tier: u32,
    waiting: usize,
    chain_ms: u64,
    attempt: u32,
    avoid: Vec<String>,
}

/// A part's placement, or why no builder can take it.
type Grant = Result<Placement, Unplaced>;

/// A part's build ended on its builder (sent by [`Parts::give_back`]).
struct PartEnded {
    placement: Placement,
    end: PartEnd,
}

impl<'a> Placer<'a> {
    /// `jobs` caps the builds running at once over every builder (`--jobs`).
    pub(crate) fn new(cx: Converging<'a>, pool: Pool, jobs: usize) -> Placer<'a> {
        let scheduler = Scheduler::new(&pool.builders(), jobs);
        let mut placer = Placer {
            cx,
            scheduler,
            pool,
            handed: BTreeMap::new(),
            deadline: super::build::build_deadline(),
            faults: HashMap::new(),
            started: Instant::now(),
            grants: HashMap::new(),
            leads: HashMap::new(),
            retries: Vec::new(),
            jobs: HashMap::new(),
            bases: BTreeMap::new(),
            order: None,
        };
        for member in placer.pool.members.clone() {
            if member.connection.is_none() {
                let why = member.out.clone().unwrap_or_default();
                placer.scheduler.leave_out(&member.builder.name, why);
            }
            // A part goes to a builder of its platform's own architecture first.
            if let Some(described) = &member.described
                && member.builder.platforms.is_empty()
            {
                let native: Vec<Platform> = member
                    .platforms()
                    .into_iter()
                    .filter(|p| member.builds_natively(p))
                    .collect();
                let native = if native.is_empty() {
                    vec![described.platform.clone()]
                } else {
                    native
                };
                placer.scheduler.set_native(&member.builder.name, native);
            }
        }
        placer
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A module whose artifact is on the host daemon (the record or the host vouched for it): a
    /// dependent goes to the builder that is the host, where its base is.
    fn note_on_host(&mut self, module: &str) {
        if let Some(host) = self.pool.host_member() {
            let name = host.builder.name.clone();
            self.scheduler.note_built(module, &name);
        }
    }

    /// The queue's order, read once: the mesh's graph and each module's median build.
    fn order(&mut self) -> &Order {
        self.order.get_or_insert_with(|| {
            let medians = (self.cx.db.lock().ok())
                .and_then(|db| db.median_builds(&self.cx.mesh.name).ok())
                .unwrap_or_default();
            Order {
                waiting: crate::mesh::schedule::waiting_counts(self.cx.mesh),
                chain_ms: crate::mesh::schedule::chain_lengths(self.cx.mesh, &medians),
            }
        })
    }

    /// Take in what the walk handed over: a build is queued (its place by its remaining chain).
    fn take(&mut self, placing: Placing) {
        let job = match placing {
            Placing::OnHost(module) => return self.note_on_host(&module),
            Placing::Handed { module, manifest } => {
                self.handed.insert(module, manifest);
                return;
            }
            Placing::Build { job, bases } => {
                self.bases.extend(bases);
                *job
            }
        };
        let name = job.module.name.clone();
        let order = self.order();
        let waiting = order.waiting.get(&name).copied().unwrap_or(0);
        let chain_ms = order.chain_ms.get(&name).copied().unwrap_or(0);
        if self.in_parts(&job) {
            self.retries.push(Lead {
                module: name.clone(),
                tier: job.module.tier,
                waiting,
                chain_ms,
                attempt: 0,
                avoid: Vec::new(),
            });
        } else {
            self.scheduler.enqueue(Job {
                module: name.clone(),
                tier: job.module.tier,
                waiting,
                chain_ms,
                base: job.module.base.clone(),
                platforms: job.planned.platforms.clone(),
                attempt: 0,
                avoid: Vec::new(),
                part: None,
                secrets: !job.module.secrets.is_empty() || job.module.ssh,
            });
        }
        self.jobs.insert(name, job);
    }

    /// Build what `placings` hands over, each as soon as the scheduler places it, until the walk
    /// closes it and every build ended. Each build that ends is sent to `ended` at once (its
    /// slot already given back), to be delivered while the others build.
    pub(crate) async fn build_all(
        &mut self,
        mut placings: mpsc::UnboundedReceiver<Placing>,
        cancel: &mut watch::Receiver<bool>,
        lost: &mut watch::Receiver<Option<HoldLost>>,
        ended: mpsc::UnboundedSender<Ended>,
    ) -> Result<(), ConvergeError> {
        // A converge that builds nothing (the steady state) asks for no credentials and reads no
        // build history: the placer sets up only once a first build is handed over.
        while self.jobs.is_empty() {
            match placings.recv().await {
                Some(placing) => self.take(placing),
                None => return Ok(()),
            }
        }
        let waiting = self.order().waiting.clone();
        let (part_ends, mut ended_parts) = mpsc::unbounded_channel();
        let handover = match self.pool.handover.clone() {
            Some(registry) => {
                let creds = credentials::for_registry(&registry.host)
                    .await
                    .ok()
                    .flatten();
                Some(HandOver::new(self.cx, registry, creds, self.deadline))
            }
            None => None,
        };
        let shared = Shared {
            cx: self.cx,
            handover,
            deadline: self.deadline,
            members: self.pool.members.clone(),
            part_ends,
            waiting,
        };
        let mut running = FuturesUnordered::new();
        let mut handing = FuturesUnordered::new();
        let mut open = true;
        loop {
            // Every part that ended gives its slot back before anything else is placed.
            while let Ok(part) = ended_parts.try_recv() {
                self.part_ended(part);
            }
            self.start_leads(&mut running, &shared);
            let wake = self.place_ready(&mut running, &shared, &ended)?;
            let idle = running.is_empty() && handing.is_empty();
            if idle && !open && (wake.is_none() || self.scheduler.queued() == 0) {
                break;
            }
            let nap = wake.map(|until| Duration::from_millis(until.saturating_sub(self.now_ms())));
            tokio::select! {
                placing = placings.recv(), if open => match placing {
                    Some(placing) => self.take(placing),
                    None => open = false,
                },
                Some((placement, result)) = running.next() => {
                    match self.ended(placement, result)? {
                        // Its slot is free: the hand-over push runs beside the next builds.
                        Some(placed) if placed.pending.is_some() => {
                            handing.push(hand_over_later(&shared, placed));
                        }
                        // The delivery side is gone only when the converge stops: nothing to do.
                        Some(placed) => {
                            let _ = ended.send(Ended::Placed(Box::new(placed)));
                        }
                        None => {}
                    }
                }
                Some(placed) = handing.next() => {
                    if let Some(digest) = &placed.handed {
                        self.handed.insert(placed.built.planned.name.clone(), digest.clone());
                    }
                    let _ = ended.send(Ended::Placed(Box::new(placed)));
                }
                Some(part) = ended_parts.recv() => self.part_ended(part),
                () = sleep_or_never(nap) => {}
                () = cancelled(cancel) => return Err(ConvergeError::Cancelled),
                message = super::lock::lost(lost) => return Err(ConvergeError::LockLost(message)),
            }
        }
        Ok(())
    }

    /// Start every build the scheduler places now; when it is to be asked again (None: when a
    /// build ends).
    fn place_ready<'f>(
        &mut self,
        running: &mut FuturesUnordered<PlacedFuture<'f>>,
        shared: &'f Shared<'f>,
        ended: &mpsc::UnboundedSender<Ended>,
    ) -> Result<Option<u64>, ConvergeError> {
        loop {
            match self.scheduler.next(self.now_ms()) {
                Next::Place(placement) if placement.part.is_some() => self.grant(placement),
                Next::Place(placement) => {
                    let job = self.jobs.get(&placement.module).cloned();
                    let member = self.pool.member(&placement.builder).cloned();
                    let (Some(job), Some(member)) = (job, member) else {
                        // Never handed over (cannot be): give its slot back.
                        self.scheduler
                            .done(&placement, Outcome::Failed, self.now_ms());
                        continue;
                    };
                    if placement.attempt > 0
                        && let Some(fault) = self.faults.get(&placement.module)
                    {
                        self.cx.emitter.emit(
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
                    let on = BuiltOn {
                        base: self.base_of(&job),
                        contexts: self.contexts_of(&job),
                    };
                    running.push(Box::pin(place_one(shared, member, placement, job, on)));
                }
                Next::Wait { until_ms } => return Ok(until_ms),
                Next::Idle => return Ok(None),
                Next::Unplaceable {
                    module,
                    reason,
                    part: Some(part),
                } => {
                    if let Some(grant) = self.grants.remove(&part_key(&module, Some(&part))) {
                        let _ = grant.send(Err(Unplaced { module, reason }));
                    }
                }
                Next::Unplaceable { module, reason, .. } => {
                    if let Some((_, error)) = self.faults.get(&module) {
                        // No other builder to retry on: the daemon went away, as it did before
                        // builders had names.
                        return Err(ConvergeError::Failed(error.clone()));
                    }
                    let _ = ended.send(Ended::Unplaced(Unplaced { module, reason }));
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
        if let Some(lead) = self.leads.remove(&placement.module) {
            return self.lead_ended(lead, result);
        }
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
            Err(BuildError::PlatformGone { message, .. }) => Err(ConvergeError::Failed(message)),
            Err(BuildError::NoRecord(message)) => Err(ConvergeError::NoRecord(message)),
            Err(BuildError::Unrecorded(message)) => Err(ConvergeError::Unrecorded(message)),
        }
    }

    /// Whether `job` builds as parts (a multi-platform module through the pool).
    fn in_parts(&self, job: &BuildJob) -> bool {
        job.planned.multi_platform
            && job.planned.platforms.len() > 1
            && self.cx.mesh.multi_platform == MultiPlatform::Pool
    }

    /// Start each multi-platform module waiting to (its first attempt, or its retry): its parts
    /// queued, each with the oneshot its placement is granted through, and its build running.
    fn start_leads<'f>(
        &mut self,
        running: &mut FuturesUnordered<PlacedFuture<'f>>,
        shared: &'f Shared<'f>,
    ) {
        for lead in std::mem::take(&mut self.retries) {
            let Some(job) = self.jobs.get(&lead.module).cloned() else {
                continue;
            };
            let mut grants = HashMap::new();
            for platform in &job.planned.platforms {
                let (grant, granted) = oneshot::channel();
                self.grants
                    .insert(part_key(&lead.module, Some(platform)), grant);
                grants.insert(platform.to_string(), granted);
                self.scheduler.enqueue(Job {
                    module: lead.module.clone(),
                    tier: lead.tier,
                    waiting: lead.waiting,
                    chain_ms: lead.chain_ms,
                    base: None,
                    platforms: vec![platform.clone()],
                    attempt: lead.attempt,
                    avoid: lead.avoid.clone(),
                    part: Some(platform.clone()),
                    secrets: !job.module.secrets.is_empty() || job.module.ssh,
                });
            }
            let base = self.base_of(&job);
            // The module holds no slot: its placement names no builder.
            let placement = Placement {
                module: lead.module.clone(),
                builder: String::new(),
                attempt: lead.attempt,
                why: Why::Hash,
                part: None,
            };
            self.leads.insert(lead.module.clone(), lead);
            running.push(Box::pin(lead_one(shared, placement, job, base, grants)));
        }
    }

    /// A module's base as a builder fetches it: its record entry, and the manifest this converge
    /// handed it over as.
    fn base_of(&self, job: &BuildJob) -> Option<BaseOf> {
        job.module.base.as_ref().and_then(|b| self.built_on(b))
    }

    /// A module's named contexts as a builder fetches them, by the name its Dockerfile writes.
    fn contexts_of(&self, job: &BuildJob) -> Vec<(String, BaseOf)> {
        job.module
            .contexts
            .iter()
            .filter_map(|(name, module)| Some((name.clone(), self.built_on(module)?)))
            .collect()
    }

    fn built_on(&self, module: &str) -> Option<BaseOf> {
        self.bases.get(module).map(|entry| BaseOf {
            module: module.to_string(),
            entry: entry.clone(),
            handed: self.handed.get(module).cloned(),
        })
    }

    /// A part was placed: its module's build is given the builder (a build that ended without
    /// it gives the slot straight back).
    fn grant(&mut self, placement: Placement) {
        let key = placement.key();
        let given = match self.grants.remove(&key) {
            Some(grant) => grant.send(Ok(placement.clone())).is_ok(),
            None => false,
        };
        if !given {
            self.scheduler
                .done(&placement, Outcome::Failed, self.now_ms());
        }
    }

    /// A part's build ended: its slot is free; a builder that went away is out of rotation.
    fn part_ended(&mut self, part: PartEnded) {
        let outcome = match part.end {
            PartEnd::Built => Outcome::Built,
            PartEnd::Failed => Outcome::Failed,
            PartEnd::Gone(error) => Outcome::Transport { error },
        };
        self.scheduler.done(&part.placement, outcome, self.now_ms());
    }

    /// A multi-platform module's build ended: its parts still queued are forgotten; a builder of
    /// one of its platforms that went away is blamed by name and the module is started once more
    /// without it (a second fault ends the converge, as any build's does).
    fn lead_ended(
        &mut self,
        lead: Lead,
        result: Result<Placed, BuildError>,
    ) -> Result<Option<Placed>, ConvergeError> {
        self.scheduler.drop_parts(&lead.module);
        self.grants
            .retain(|key, _| !key.starts_with(&format!("{} ", lead.module)));
        let (builder, message) = match result {
            Ok(placed) => return Ok(Some(placed)),
            Err(BuildError::PlatformGone { builder, message }) => (builder, message),
            Err(BuildError::Daemon(message)) => (String::new(), message),
            Err(BuildError::NoRecord(message)) => return Err(ConvergeError::NoRecord(message)),
            Err(BuildError::Unrecorded(message)) => {
                return Err(ConvergeError::Unrecorded(message));
            }
        };
        if lead.attempt > 0 || builder.is_empty() {
            return Err(ConvergeError::Failed(message));
        }
        self.cx.emitter.emit(
            Payload::Requeued {
                from: builder.clone(),
                error: message.clone(),
            },
            Some(&lead.module),
            format!(
                "builder {builder} failed the build ({message}): it is out of rotation for a while; retrying once without it"
            ),
        );
        self.faults
            .insert(lead.module.clone(), (builder.clone(), message));
        let mut avoid = lead.avoid.clone();
        avoid.push(builder);
        self.retries.push(Lead {
            attempt: lead.attempt + 1,
            avoid,
            ..lead
        });
        Ok(None)
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
pub(crate) async fn cancelled(cancel: &mut watch::Receiver<bool>) {
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

/// What one build builds on, as its builder fetches it: the base, and each named context by the
/// name the Dockerfile writes.
struct BuiltOn {
    base: Option<BaseOf>,
    contexts: Vec<(String, BaseOf)>,
}

/// What every build of a tier reads.
struct Shared<'a> {
    cx: Converging<'a>,
    /// The registry artifacts cross through, and how (None: no hand-over).
    handover: Option<HandOver<'a>>,
    deadline: Duration,
    /// Every builder of the pool: a multi-platform module's platforms go to those that build them.
    members: Vec<Member>,
    /// Where a part's build says it ended (its slot given back).
    part_ends: mpsc::UnboundedSender<PartEnded>,
    /// Per module, how many modules of the mesh build FROM it.
    waiting: BTreeMap<String, usize>,
}

impl Shared<'_> {
    /// Whether what `member` built of `module` needs no hand-over: the builder is the host daemon,
    /// which is the target (the artifact is where it runs), no module builds FROM it, and nothing
    /// asks for it in the registry (`--publish` pushes it as the target's delivery; a signing
    /// converge signs every push, the hand-overs included).
    fn stays_on_host(&self, member: &Member, module: &str) -> bool {
        member.is_host
            && self.cx.target.host_holds_what_it_runs()
            && !self.cx.mesh.publish
            && self.cx.mesh.signing.key.is_none()
            && self.waiting.get(module).copied().unwrap_or(0) == 0
    }
}

/// One build on its builder: the base as the builder reaches it, the build, and the hand-over push.
async fn place_one(
    shared: &Shared<'_>,
    member: Member,
    placement: Placement,
    job: BuildJob,
    on: BuiltOn,
) -> (Placement, Result<Placed, BuildError>) {
    let result = build_on(shared, &member, job, on).await;
    (placement, result)
}

async fn build_on(
    shared: &Shared<'_>,
    member: &Member,
    job: BuildJob,
    built_on: BuiltOn,
) -> Result<Placed, BuildError> {
    let daemon: &Daemon = match &member.connection {
        Some(Connection::Own(daemon)) => daemon,
        Some(Connection::Host) | None => shared
            .cx
            .host
            .get()
            .await
            .map_err(|e| BuildError::Daemon(format!("cannot build: {e}")))?,
    };
    let pooled = shared.handover.is_some();
    let out_of_reach = |source| BaseOutOfReach {
        builder: member.builder.name.clone(),
        source,
    };
    let base_arg = match (&shared.handover, &built_on.base) {
        (Some(handover), Some(base)) => handover.base_for(daemon, base).await.map_err(out_of_reach),
        _ => Ok(None),
    };
    let contexts = match &shared.handover {
        Some(handover) => handover
            .contexts_for(daemon, &built_on.contexts)
            .await
            .map_err(out_of_reach),
        None => Ok(BTreeMap::new()),
    };
    let on = BuildOn {
        daemon: Some(daemon),
        builder: pooled.then_some(member.builder.name.as_str()),
        base: base_arg,
        contexts,
        deadline: shared.deadline,
        platforms: None,
    };
    let stays = shared.stays_on_host(member, &job.module.name);
    let built = build_module(job, shared.cx, on).await?;
    let mut placed = Placed {
        on_host: member.is_host,
        handed: built.published.clone(),
        handover_error: None,
        pending: None,
        built,
    };
    let handing = shared
        .handover
        .as_ref()
        .filter(|_| placed.built.published.is_none() && !stays);
    if let (Some(_), Some(artifact)) = (handing, placed.built.artifact.clone()) {
        placed.pending = Some(PendingHandOver {
            member: member.clone(),
            artifact,
        });
    }
    Ok(placed)
}

/// The hand-over push of a build that gave its slot back (so the builder's next build runs while
/// it pushes): the manifest digest it was pushed as, or why not (the module fails).
async fn hand_over_later(shared: &Shared<'_>, mut placed: Placed) -> Placed {
    let (Some(pending), Some(handover)) = (placed.pending.take(), &shared.handover) else {
        return placed;
    };
    let member = &pending.member;
    let daemon = match &member.connection {
        Some(Connection::Own(daemon)) => Ok(daemon),
        Some(Connection::Host) | None => shared.cx.host.get().await,
    };
    let handed = match daemon {
        Ok(daemon) => handover
            .push(
                &member.builder.name,
                daemon,
                &placed.built,
                &pending.artifact,
            )
            .await
            .map_err(Undelivery::from),
        Err(source) => Err(Undelivery::NoDaemon {
            builder: member.builder.name.clone(),
            module: placed.built.planned.name.clone(),
            source,
        }),
    };
    match handed {
        Ok(digest) => placed.handed = Some(digest),
        Err(error) => placed.handover_error = Some(error),
    }
    placed
}

/// A multi-platform module's build: it holds no slot, and each platform takes one when the
/// scheduler places it (`grants`, per platform).
async fn lead_one(
    shared: &Shared<'_>,
    placement: Placement,
    job: BuildJob,
    base: Option<BaseOf>,
    grants: HashMap<String, oneshot::Receiver<Grant>>,
) -> (Placement, Result<Placed, BuildError>) {
    // Without a hand-over, the platforms and the index go to the mesh's registry.
    let through = shared.handover.clone().or_else(|| {
        let registry = shared.cx.mesh.registry.clone()?;
        Some(HandOver::new(shared.cx, registry, None, shared.deadline))
    });
    let parts = through.map(|through| Parts {
        shared,
        module: job.module.name.clone(),
        base,
        through,
        grants: std::sync::Mutex::new(grants),
        held: std::sync::Mutex::new(HashMap::new()),
    });
    let platforms = match &parts {
        Some(parts) => Ok(parts as &dyn PlatformSlots),
        None => Err(PlatformsUnbuilt::NoRegistry {
            module: job.module.name.clone(),
        }),
    };
    let on = BuildOn {
        daemon: None,
        builder: None,
        base: Ok(None),
        contexts: Ok(BTreeMap::new()),
        deadline: shared.deadline,
        platforms: Some(platforms),
    };
    let result = build_module(job, shared.cx, on).await.map(|built| Placed {
        on_host: false,
        handed: built.published.clone(),
        handover_error: None,
        pending: None,
        built,
    });
    (placement, result)
}

/// The slots of one multi-platform module's parts, as its build takes and gives them back.
struct Parts<'s> {
    shared: &'s Shared<'s>,
    module: String,
    base: Option<BaseOf>,
    /// The registry the index is written to and each platform pushed (and the base brought
    /// through).
    through: HandOver<'s>,
    /// Per platform, where its placement comes.
    grants: std::sync::Mutex<HashMap<String, oneshot::Receiver<Grant>>>,
    /// Per platform, the placement it holds.
    held: std::sync::Mutex<HashMap<String, Placement>>,
}

#[async_trait::async_trait]
impl PlatformSlots for Parts<'_> {
    async fn take(&self, platform: &Platform) -> Result<PlatformOn, PlatformsUnbuilt> {
        let no_slot = |why: String| PlatformsUnbuilt::NoSlot {
            module: self.module.clone(),
            platform: platform.clone(),
            why,
        };
        let granted = self
            .grants
            .lock()
            .ok()
            .and_then(|mut grants| grants.remove(&platform.to_string()))
            .ok_or_else(|| no_slot("asked twice".into()))?;
        let placement = granted
            .await
            .map_err(|_| no_slot("the converge stopped placing builds".into()))?
            .map_err(|unplaced| no_slot(unplaced.reason))?;
        let on = self.platform_on(platform, &placement).await;
        match on {
            Ok(on) => {
                if let Ok(mut held) = self.held.lock() {
                    held.insert(platform.to_string(), placement);
                }
                Ok(on)
            }
            Err(why) => {
                let _ = self.shared.part_ends.send(PartEnded {
                    placement,
                    end: PartEnd::Failed,
                });
                Err(why)
            }
        }
    }

    fn give_back(&self, on: &PlatformOn, end: PartEnd) {
        let placement = self
            .held
            .lock()
            .ok()
            .and_then(|mut held| held.remove(&on.platform.to_string()));
        if let Some(placement) = placement {
            let _ = self.shared.part_ends.send(PartEnded { placement, end });
        }
    }
}

impl Parts<'_> {
    /// The platform on the builder its placement names: that builder's daemon, and the base as
    /// that builder reaches it.
    async fn platform_on(
        &self,
        platform: &Platform,
        placement: &Placement,
    ) -> Result<PlatformOn, PlatformsUnbuilt> {
        let shared = self.shared;
        let Some(member) = shared
            .members
            .iter()
            .find(|m| m.builder.name == placement.builder)
        else {
            return Err(PlatformsUnbuilt::NoBuilder {
                module: self.module.clone(),
                platform: platform.clone(),
                builders: super::builders::builders_and_platforms(&shared.members),
            });
        };
        let daemon = match &member.connection {
            Some(Connection::Own(daemon)) => daemon.clone(),
            Some(Connection::Host) | None => shared
                .cx
                .host
                .get()
                .await
                .map_err(|source| PlatformsUnbuilt::Host {
                    platform: platform.clone(),
                    source,
                })?
                .clone(),
        };
        let base = match &self.base {
            Some(base) => self
                .through
                .base_for(&daemon, base)
                .await
                .map_err(|source| {
                    PlatformsUnbuilt::Base(BaseOutOfReach {
                        builder: member.builder.name.clone(),
                        source,
                    })
                })?,
            None => None,
        };
        Ok(PlatformOn {
            platform: platform.clone(),
            builder: member.builder.name.clone(),
            emulated: !member.builds_natively(platform),
            daemon,
            base,
            registry: self.through.registry.clone(),
        })
    }
}
