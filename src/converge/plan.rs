//! The planner: resolves refs tier by tier and asks the skip decision for each module.
//! A dry run (`meshtop plan`) and a converge share it; a converge feeds built artifacts back in
//! with [`Planner::built`] before it decides the next tier.
//! Long: the planner walks tiers and asks each voucher in order (the record, the host once, the
//! registry in rounds); the pure decision is mesh/decide.rs.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;

use rayon::prelude::*;

pub use super::error::PlanError;
pub use super::manifests::{ManifestSource, NoManifests, StateManifests};
use super::targets::{RecordRead, Target};
use super::vouch::RegistryVoucher;
use crate::backends::daemon::LazyDaemon;
use crate::mesh::decide::{
    self, Decision, HostAnswer, Question, RefState, RegistryAnswer, Verdict,
};
use crate::mesh::manifest::own_digest;
use crate::mesh::model::{Mesh, Module, Platform, Record};
use crate::mesh::pin::{self, Pin};
pub use crate::mesh::plan::{Plan, PlannedModule};
use crate::mesh::refs::ImageRef;
use crate::mesh::target::TargetDescription;
use crate::mesh::text::short_id;
use crate::mesh::why::{self, Change};
use crate::workspace::inputs::{self, InputSpec, Inputs, Walked};
use crate::workspace::stat_cache::ContextCache;
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
    /// The target's word (its `host_is_target()`): the host daemon is
    /// the target, so it can tell an artifact the target lost.
    pub host_is_target: bool,
    /// The target planned for, in its words: the plan names it (name and kind).
    pub target: TargetDescription,
}

impl<'a> PlanContext<'a> {
    /// What a plan of `mesh` on `target` starts from: the record as the target read it; `selected`
    /// None plans every module.
    pub fn new(
        mesh: &'a Mesh,
        target: &dyn Target,
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
            host_is_target: target.host_is_target(),
            target: target.describe(),
        }
    }
}

pub struct Planner<'a> {
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
    registry_wanted: Vec<String>,
}

/// Run blocking work (reading files) from async code: inline on a current-thread runtime (the
/// command's own thread), else without blocking the other tasks of a worker.
fn blocking_here<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

impl<'a> Planner<'a> {
    /// `daemon` connects on first use: a plan the record answers in full never asks it.
    pub fn new(ctx: PlanContext<'a>, daemon: Arc<LazyDaemon>) -> Planner<'a> {
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
        }
    }

    /// Ask `voucher` (the mesh's registry) for what the record and the host leave to build.
    pub fn use_registry(&mut self, voucher: Option<RegistryVoucher>) {
        self.registry = voucher;
    }

    pub fn registry(&self) -> Option<&RegistryVoucher> {
        self.registry.as_ref()
    }

    pub fn registry_mut(&mut self) -> Option<&mut RegistryVoucher> {
        self.registry.as_mut()
    }

    /// The manifest digest the registry vouched with for `reference`, if it did.
    pub fn registry_manifest(&self, reference: &str) -> Option<String> {
        match self.registry.as_ref()?.answer(reference) {
            RegistryAnswer::Holds { image, .. } => Some(image.manifest),
            _ => None,
        }
    }

    /// The trusted key whose signature the registry's manifest for `reference` carried, if any.
    pub fn registry_signer(&self, reference: &str) -> Option<String> {
        match self.registry.as_ref()?.answer(reference) {
            RegistryAnswer::Holds {
                signature: crate::mesh::cosign::SignatureVerdict::Trusted { key },
                ..
            } => Some(key),
            _ => None,
        }
    }

    /// Decide `modules` (in tier order), asking the registry for every ref it is needed for at once
    /// (bounded), then deciding again with its answers; a dependent whose base the registry answered
    /// for learns its ref only then, so this repeats at most once per tier.
    pub async fn decide_all(
        &mut self,
        modules: &[&Module],
        manifests: &dyn ManifestSource,
    ) -> Result<Vec<PlannedModule>, PlanError> {
        loop {
            self.defer_registry = self.registry.is_some();
            self.registry_wanted.clear();
            let mut decided = Vec::new();
            for module in modules {
                decided.push(self.decide(module, manifests).await);
            }
            self.defer_registry = false;
            let wanted = std::mem::take(&mut self.registry_wanted);
            match &mut self.registry {
                Some(voucher) if !wanted.is_empty() => {
                    voucher.ask(wanted).await;
                    self.reset();
                }
                _ => return decided.into_iter().collect(),
            }
        }
    }

    /// Walk the contexts of `modules` now, all at once (a context's walk does not depend on its
    /// base: only the address does), for the decisions that follow; through `memo`, a watched
    /// context that reported no change is not walked again.
    pub fn walk_ahead(
        &mut self,
        modules: &[&Module],
        manifests: &dyn ManifestSource,
        memo: Option<&WalkMemo>,
    ) {
        let walked: Vec<(String, Walk)> = blocking_here(|| {
            modules
                .par_iter()
                .map(|module| (module.name.clone(), walk(module, manifests, memo)))
                .collect()
        });
        let mut caches = Vec::new();
        for (module, (walked, cache)) in walked {
            caches.extend(cache);
            self.walked.insert(module, walked);
        }
        manifests.keep_input_caches(caches);
    }

    /// Pinned modules whose pin this converge ends (a third address, or forced), and why.
    pub fn ended_pins(&self) -> &BTreeMap<String, String> {
        &self.ended_pins
    }

    pub fn host_answer(&self) -> &HostAnswer {
        &self.host
    }

    /// Ask the host daemon for its labelled images, once per plan. With `trust`, each is marked
    /// with whether this machine vouches for it (`manifests` knows what it built and verified).
    pub async fn ask_host(&mut self, manifests: &dyn ManifestSource) {
        if self.host != HostAnswer::NotAsked {
            return;
        }
        self.host = match self.daemon.get().await {
            Ok(daemon) => match daemon.labelled_images().await {
                Ok(images) => HostAnswer::Holds(images),
                Err(error) => HostAnswer::Failed(error.to_string()),
            },
            Err(why) => HostAnswer::Failed(why.to_string()),
        };
        if let HostAnswer::Holds(images) = &mut self.host
            && !self.ctx.mesh.signing.trust.is_empty()
        {
            decide::mark_origins(images, &manifests.vouched_here());
        }
    }

    /// The registry's answer for `question` when the record and the host leave it to build (asked
    /// now, or noted for [`Planner::decide_all`] to ask with the others).
    async fn ask_registry(&mut self, question: &Question) -> RegistryAnswer {
        let (Some(voucher), RefState::Known(reference)) = (&mut self.registry, &question.reference)
        else {
            return RegistryAnswer::NotAsked;
        };
        if !decide::needs_registry(question, &self.ctx.record, &self.host) {
            return RegistryAnswer::NotAsked;
        }
        if !voucher.knows(reference) {
            if self.defer_registry {
                self.registry_wanted.push(reference.clone());
                return RegistryAnswer::NotAsked;
            }
            voucher.ask(vec![reference.clone()]).await;
        }
        voucher.answer(reference)
    }

    /// Docker target: the host daemon is the target, so it can tell an artifact the target lost.
    pub fn host_is_target(&self) -> bool {
        self.ctx.host_is_target
    }

    /// Whether a `record` decision made before the host was asked would now be a rebuild
    /// (the host no longer holds its artifact): the plan is then made again.
    pub fn any_gone(&self, planned: &[&PlannedModule]) -> bool {
        self.host_is_target()
            && planned.iter().any(|p| {
                !p.multi_platform
                    && decide::gone_from_host(
                        &Verdict {
                            decision: p.decision,
                            reason: String::new(),
                            artifact: p.artifact.clone(),
                            registry: None,
                        },
                        &self.host,
                    )
            })
    }

    /// The recorded artifact of `base` when the host (the target) no longer holds it and `base` is
    /// not selected in this converge, so that nothing here would build it again. Asked only once
    /// the host has answered.
    fn unselected_base_gone(&self, base: &str) -> Option<String> {
        if !self.host_is_target() || self.is_selected(base) {
            return None;
        }
        let HostAnswer::Holds(images) = &self.host else {
            return None;
        };
        let entry = self.ctx.record.get(base)?;
        (!images.iter().any(|image| image.id == entry.digest)).then(|| entry.digest.clone())
    }

    /// Whether a module that builds FROM a base outside the selection would build FROM an artifact
    /// the host lost (decided before the host was asked): the plan is then made again.
    pub fn any_unselected_base_gone(&self, planned: &[&PlannedModule]) -> bool {
        planned.iter().any(|p| {
            p.decision.builds()
                && p.base
                    .as_deref()
                    .is_some_and(|base| self.unselected_base_gone(base).is_some())
        })
    }

    /// Forget every decision (the host's answer stays): to decide the modules again.
    pub fn reset(&mut self) {
        self.artifacts.clear();
        self.refused.clear();
    }

    pub fn is_selected(&self, module: &str) -> bool {
        self.ctx
            .selected
            .as_ref()
            .is_none_or(|names| names.contains(module))
    }

    /// What the record read when the converge started names for `module`.
    pub fn record_entry(&self, module: &str) -> Option<&crate::mesh::model::RecordEntry> {
        self.ctx.record.get(module)
    }

    /// A module of this converge was built: its dependents resolve against `artifact`.
    pub fn built(&mut self, module: &str, artifact: &str) {
        self.artifacts
            .insert(module.to_string(), Some(artifact.to_string()));
    }

    /// A module decided on another voucher is built after all (its pull failed): its dependents
    /// wait for that build.
    pub fn rebuilding(&mut self, module: &str) {
        self.artifacts.insert(module.to_string(), None);
    }

    /// A module's build failed or was skipped: its dependents are refused.
    pub fn failed(&mut self, module: &str) {
        self.artifacts.remove(module);
        self.refused.insert(module.to_string());
    }

    fn base_state(&self, module: &Module) -> (Option<RefState>, Option<String>) {
        let Some(base) = &module.base else {
            return (None, None);
        };
        let missing = || (Some(RefState::BaseMissing { base: base.clone() }), None);
        if self.refused.contains(base) {
            return missing();
        }
        if self.is_selected(base) {
            return match self.artifacts.get(base) {
                Some(Some(artifact)) => (None, Some(artifact.clone())),
                Some(None) => (Some(RefState::Pending { base: base.clone() }), None),
                None => missing(),
            };
        }
        match self.ctx.record.get(base) {
            Some(entry) => (None, Some(entry.digest.clone())),
            None => missing(),
        }
    }

    /// The module's platforms; unset means the daemon's own (the local machine's when the daemon
    /// cannot be reached, so that a plan still runs).
    async fn platforms(&mut self, module: &Module) -> Vec<Platform> {
        if !module.platforms.is_empty() {
            return module.platforms.clone();
        }
        if self.platform.is_none() {
            let own = match self.daemon.get().await {
                Ok(daemon) => daemon
                    .platform()
                    .await
                    .cloned()
                    .unwrap_or_else(|_| Platform::local()),
                Err(_) => Platform::local(),
            };
            self.platform = Some(own);
        }
        self.platform.clone().into_iter().collect()
    }

    /// Decide one module (its base must have been decided, or built, before).
    pub async fn decide(
        &mut self,
        module: &Module,
        manifests: &dyn ManifestSource,
    ) -> Result<PlannedModule, PlanError> {
        let forced = self.ctx.force;
        let platforms = self.platforms(module).await;
        let multi_platform = platforms.len() > 1;
        let (blocked, base_artifact) = self.base_state(module);
        let (state, inputs, image_ref) = match blocked {
            Some(state) => (state, None, None),
            None => self.address(module, &platforms, base_artifact.as_deref(), manifests)?,
        };
        let question = Question {
            module: module.name.clone(),
            reference: state,
            forced,
            multi_platform,
            inputs: inputs.as_ref().map(|i| i.digest.clone()),
        };
        let verdict = self
            .verdict(module, &question, inputs.as_ref(), manifests)
            .await?;
        let Verdict {
            decision,
            reason,
            artifact,
            registry: registry_held,
        } = verdict;
        let reason = match self.ended_pins.get(&module.name) {
            Some(why) => format!("{reason}; {why}"),
            None => reason,
        };
        match decision {
            Decision::Refused => {
                self.refused.insert(module.name.clone());
            }
            Decision::Record | Decision::Host | Decision::Registry | Decision::Pinned => {
                self.artifacts.insert(module.name.clone(), artifact.clone());
            }
            Decision::Build | Decision::Forced => {
                self.artifacts.insert(module.name.clone(), None);
            }
        }
        let reference = image_ref.as_ref().map(ToString::to_string);
        let changes = self.changes(module, inputs.as_ref(), reference.as_deref(), manifests);
        let why = match (&inputs, decision) {
            (_, Decision::Refused) => format!(
                "base {} has no artifact",
                module.base.as_deref().unwrap_or("?")
            ),
            (None, _) => format!("waits for base {}", module.base.as_deref().unwrap_or("?")),
            (Some(_), _) => why::summary(&changes),
        };
        Ok(PlannedModule {
            name: module.name.clone(),
            tier: module.tier,
            base: module.base.clone(),
            policy: module.policy,
            reference,
            decision,
            reason,
            base_artifact,
            artifact,
            registry_held,
            why,
            changes,
            multi_platform,
            platforms,
            inputs,
            image_ref,
        })
    }

    /// The module's inputs and the address they give (its base's artifact is known).
    fn address(
        &mut self,
        module: &Module,
        platforms: &[Platform],
        base_artifact: Option<&str>,
        manifests: &dyn ManifestSource,
    ) -> Result<(RefState, Option<Inputs>, Option<ImageRef>), PlanError> {
        let spec = InputSpec {
            context: &module.context,
            dockerfile: &module.dockerfile,
            build_args: &module.build_args,
            base_digest: base_artifact,
            platforms,
        };
        // Kept (not taken): a module may be decided again once the registry answered.
        let walked = match self.walked.get(&module.name) {
            Some(walked) => walked.clone(),
            // Hashing reads files (those the stat cache does not answer for): see `blocking_here`.
            None => {
                let (walked, cache) = blocking_here(|| walk(module, manifests, None));
                manifests.keep_input_caches(cache.into_iter().collect());
                walked
            }
        };
        let inputs = inputs::inputs_of(&spec, walked?);
        let mesh = self.ctx.mesh;
        let registry = mesh.registry.as_ref().map(|r| r.host.as_str());
        let image_ref = ImageRef::new(
            registry,
            &mesh.name,
            &module.name,
            &inputs.digest,
            platforms,
        );
        Ok((
            RefState::Known(image_ref.to_string()),
            Some(inputs),
            Some(image_ref),
        ))
    }

    /// The verdict for one module: its pin's, else the skip decision's (an artifact the host
    /// lost is rebuilt where the host is the target), refused when it builds FROM a base outside
    /// the selection whose artifact is gone.
    async fn verdict(
        &mut self,
        module: &Module,
        question: &Question,
        inputs: Option<&Inputs>,
        manifests: &dyn ManifestSource,
    ) -> Result<Verdict, PlanError> {
        let multi_platform = question.multi_platform;
        if self.pins.is_none() {
            // Pins that cannot be read stop the plan: deciding without them would undo a rollback.
            self.pins = Some(manifests.pins()?);
        }
        let pins = self.pins.get_or_insert_with(BTreeMap::new);
        // A pin holds only while the record still names the pinned artifact.
        let pinned = pins
            .get(&module.name)
            .filter(|p| self.ctx.record.get(&module.name) == Some(&p.entry()));
        let at = pinned
            .map(|p| crate::timefmt::local_time(p.at_ms))
            .unwrap_or_default();
        // Only a pinned module needs its own inputs' digest (the base left out).
        let own = pinned.and(inputs).map(|i| own_digest(&i.manifest));
        let pin_verdict = pin::pinned_verdict(question, pinned, own.as_deref(), &at);
        if let Some(why) = pin::pin_ends(question, pinned, own.as_deref()) {
            self.ended_pins.insert(module.name.clone(), why);
        }
        let verdict = match pin_verdict {
            Some(verdict) => verdict,
            None => {
                if decide::needs_host(question, &self.ctx.record) {
                    self.ask_host(manifests).await;
                }
                let registry = self.ask_registry(question).await;
                let verdict = decide::decide_with_registry(
                    question,
                    &self.ctx.record,
                    &self.host,
                    &registry,
                    &self.ctx.record_source,
                );
                // Where the host is the target, an artifact it lost is rebuilt (when the host was asked).
                if self.host_is_target()
                    && !multi_platform
                    && decide::gone_from_host(&verdict, &self.host)
                {
                    decide::rebuild_gone(&verdict, &self.ctx.record_source)
                } else {
                    verdict
                }
            }
        };
        // A build FROM a base outside the selection whose recorded artifact the host lost would
        // make the daemon look for `sha256:…` on Docker Hub: refused, naming the base and the fix.
        let gone_base = module
            .base
            .as_deref()
            .and_then(|base| Some((base, self.unselected_base_gone(base)?)));
        Ok(match gone_base {
            Some((base, artifact)) if verdict.decision.builds() => Verdict {
                decision: Decision::Refused,
                reason: format!(
                    "base {base}'s artifact {} ({} names it) is gone from the host daemon, and {base} is not selected in this converge, so nothing would build it again: converge it too (meshtop converge {base} {}), or converge every module (meshtop converge)",
                    short_id(&artifact),
                    self.ctx.record_source,
                    module.name
                ),
                artifact: None,
                registry: None,
            },
            _ => verdict,
        })
    }

    /// What moved the address since the record's (forced first, when forced).
    fn changes(
        &self,
        module: &Module,
        inputs: Option<&Inputs>,
        reference: Option<&str>,
        manifests: &dyn ManifestSource,
    ) -> Vec<Change> {
        let forced = self.ctx.force;
        let record_ref = self
            .ctx
            .record
            .get(&module.name)
            .map(|e| e.reference.as_str());
        match inputs {
            // The address the record names: the same inputs by construction, nothing to look up.
            Some(_) if reference.is_some() && reference == record_ref => {
                if forced {
                    vec![Change::Forced]
                } else {
                    Vec::new()
                }
            }
            Some(inputs) => {
                let previous = manifests.previous(&module.name, record_ref);
                let mut changes = why::why_against_record(
                    previous.as_ref(),
                    &inputs.manifest,
                    record_ref,
                    reference,
                );
                if forced {
                    changes.insert(0, Change::Forced);
                }
                changes
            }
            None => Vec::new(),
        }
    }
}

/// A walk's result, and the stat cache it went through with its context (to keep; none when
/// `memo` answered).
type Walk = (Result<Walked, PlanError>, Option<(PathBuf, ContextCache)>);

/// Walk `module`'s context through the stat cache (and `memo`, when given).
fn walk(module: &Module, manifests: &dyn ManifestSource, memo: Option<&WalkMemo>) -> Walk {
    let (context, dockerfile) = (module.context.as_path(), module.dockerfile.as_str());
    if let Some(walked) = memo.and_then(|memo| memo.get(&module.name, context, dockerfile)) {
        return (Ok(walked), None);
    }
    let ticket = memo.map(|memo| memo.ticket(&module.name));
    let cache = manifests.input_cache(context);
    // What was read before a failure is still worth keeping: the cache is kept either way.
    let walked = inputs::walk_cached(context, dockerfile, &cache).map_err(|e| PlanError::Inputs {
        module: module.name.clone(),
        why: e.to_string(),
    });
    if let (Ok(walked), Some(memo), Some(ticket)) = (&walked, memo, ticket) {
        memo.keep(&module.name, context, dockerfile, ticket, walked);
    }
    (walked, Some((context.to_path_buf(), cache)))
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
    })
}
