//! The planner: resolves refs tier by tier and asks the skip decision for each module.
//! A dry run (`meshtop plan`) and a converge share it; a converge feeds built artifacts back in
//! with [`Planner::built`] before it decides the next tier. The pure decision is mesh/decide.rs;
//! the planner's own ideas, a file each: what it has decided so far ([`decided`]), the vouchers it
//! asks (the host once, the registry in rounds: [`vouchers`]), the contexts it walks into
//! addresses ([`inputs`]), and the verdict per module ([`decide`]).

mod decide;
mod decided;
mod inputs;
mod upstreams;

pub use upstreams::{
    LockUpdate, Refreshed, UpstreamNow, moved_under, outdated, refresh_upstreams, update_lock,
};
mod vouchers;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

pub use super::error::PlanError;
pub use super::manifests::{ManifestSource, NoManifests, StateManifests};
use super::targets::{Delivers, RecordRead};
use super::vouch::RegistryVoucher;
use crate::backends::daemon::LazyDaemon;
use crate::mesh::decide::HostAnswer;
use crate::mesh::model::{Mesh, Module, Platform, Record};
use crate::mesh::pin::Pin;
pub use crate::mesh::plan::{Plan, PlannedModule};
use crate::mesh::target::TargetDescription;
use crate::workspace::inputs::Walked;
use crate::workspace::walks::WalkMemo;

/// What the planner is told about the world.
pub struct PlanContext<'a> {
    pub mesh: &'a Mesh,
    pub record: Record,
    /// Names the record in reasons, e.g. "the docker record" or "annotation jr2.dev/images on namespace demo".
    pub record_source: String,
    /// None = every module.
    pub selected: Option<BTreeSet<String>>,
    pub force: bool,
    /// The target's word (its `host_images_answer()`): an image on the host daemon answers for
    /// it, so the host can tell an artifact the target lost.
    pub host_images_answer: bool,
    /// The target planned for, in its words: the plan names it (name and kind).
    pub target: TargetDescription,
}

impl<'a> PlanContext<'a> {
    /// What a plan of `mesh` on `target` starts from: the record as the target read it; `selected`
    /// None plans every module.
    pub fn new(
        mesh: &'a Mesh,
        target: &dyn Delivers,
        record: &RecordRead,
        selected: Option<BTreeSet<String>>,
        force: bool,
    ) -> PlanContext<'a> {
        PlanContext {
            mesh,
            record: record.record.clone(),
            record_source: record.source.clone(),
            selected,
            force,
            host_images_answer: target.host_images_answer(),
            target: target.describe(),
        }
    }
}

pub(crate) struct Planner<'a> {
    ctx: PlanContext<'a>,
    daemon: Arc<LazyDaemon>,
    host: HostAnswer,
    /// The daemon's own platform (asked only when a module leaves `platforms` unset).
    platform: Option<Platform>,
    /// Per module decided so far: the artifact it resolves to (None: built later in this converge).
    artifacts: HashMap<String, Option<String>>,
    refused: BTreeSet<String>,
    /// The pinned modules, read at the first decision.
    pins: Option<BTreeMap<String, Pin>>,
    /// Pinned modules whose pin ends in this converge, and why.
    ended_pins: BTreeMap<String, String>,
    /// Contexts walked ahead of their decision ([`Planner::walk_ahead`]), by module.
    walked: HashMap<String, Result<Walked, PlanError>>,
    /// The mesh's registry, the third voucher (None: the mesh has none, or it is not asked).
    registry: Option<RegistryVoucher>,
    /// While set, a decision that needs the registry notes its ref in `registry_wanted` instead of
    /// asking: [`Planner::decide_all`] then asks them all at once.
    defer_registry: bool,
    registry_wanted: Vec<(String, crate::mesh::provenance::Wanted)>,
    /// Per module, each upstream its Dockerfile names → the digest mesh.lock holds
    /// ([`Planner::lock_upstreams`]).
    upstreams: HashMap<String, BTreeMap<String, String>>,
    /// What [`Planner::lock_upstreams`] locked now, to be said once.
    upstream_notes: Vec<String>,
}

impl<'a> Planner<'a> {
    /// `daemon` connects on first use: a plan the record answers in full never asks it.
    pub(crate) fn new(ctx: PlanContext<'a>, daemon: Arc<LazyDaemon>) -> Planner<'a> {
        Planner {
            ctx,
            daemon,
            host: HostAnswer::NotAsked,
            platform: None,
            artifacts: HashMap::new(),
            refused: BTreeSet::new(),
            pins: None,
            ended_pins: BTreeMap::new(),
            walked: HashMap::new(),
            registry: None,
            defer_registry: false,
            registry_wanted: Vec::new(),
            upstreams: HashMap::new(),
            upstream_notes: Vec::new(),
        }
    }
}

pub async fn dry_run(
    ctx: PlanContext<'_>,
    daemon: Arc<LazyDaemon>,
    manifests: &dyn ManifestSource,
) -> Result<Plan, PlanError> {
    dry_run_watched(ctx, daemon, manifests, None).await
}

/// [`dry_run`], walking again only the contexts `memo` does not answer for (see
/// [`crate::workspace::walks`]).
pub async fn dry_run_watched(
    ctx: PlanContext<'_>,
    daemon: Arc<LazyDaemon>,
    manifests: &dyn ManifestSource,
    memo: Option<&WalkMemo>,
) -> Result<Plan, PlanError> {
    let mesh = ctx.mesh;
    let target = ctx.target.name.clone();
    let mut planner = Planner::new(ctx, daemon);
    planner.use_registry(RegistryVoucher::for_mesh(mesh, &target).await);
    let selected: Vec<&Module> = mesh
        .modules
        .iter()
        .filter(|m| planner.is_selected(&m.name))
        .collect();
    planner.walk_ahead(&selected, manifests, memo);
    planner.lock_upstreams(&selected).await?;
    let mut modules = planner.decide_all(&selected, manifests).await?;
    // The host was asked after some record hits were decided: those whose artifact it no longer
    // holds are shown as rebuilds, and their dependents follow.
    let decided: Vec<&PlannedModule> = modules.iter().collect();
    if planner.any_gone(&decided) || planner.any_unselected_base_gone(&decided) {
        planner.reset();
        modules = planner.decide_all(&selected, manifests).await?;
    }
    let mut tiers: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for planned in &modules {
        tiers
            .entry(planned.tier)
            .or_default()
            .push(planned.name.clone());
    }
    let host_error = match planner.host_answer() {
        HostAnswer::Failed(error) => Some(error.clone()),
        _ => None,
    };
    Ok(Plan {
        mesh: mesh.name.clone(),
        target: planner.ctx.target.name.clone(),
        target_kind: planner.ctx.target.kind.clone(),
        tiers: tiers.into_values().collect(),
        modules,
        host_error,
        registry_error: planner.registry().and_then(RegistryVoucher::warning),
        upstreams_locked: planner.upstream_notes.clone(),
    })
}
