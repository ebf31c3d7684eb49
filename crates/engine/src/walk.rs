//! Build and deliver by the dependency graph: a module is decided as soon as every module of the
//! converge it builds on (its base, its named contexts) was delivered or vouched for, then skipped
//! (a record or the host vouched) or handed to the placer, which builds several at once (up to
//! `jobs`), the longest remaining chain first. Tiers are what the screen shows, not a barrier.
//! What succeeded goes into the stamp; a failure stops what builds on it (decided as refused, not
//! attempted), its siblings go on, and nothing is stamped.

use crate::error::HoldLost;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::build::{BuildJob, Built};
use super::converging::Converging;
use super::deliver::Delivered;
use super::error::{ConvergeError, TargetError};
use super::place::{Placer, Placing};
use super::plan::{PlannedModule, Planner, StateManifests};
use super::progress::Payload;
use super::summary::{ModuleEnd, ModuleOutcome};
use super::targets::Artifact;
use crate::mesh::Module;
use crate::mesh::decide::Decision;
use crate::mesh::model::{Record, RecordEntry};
use crate::mesh::progress::DeliveredBy;

/// Why an artifact the registry vouched for could not be brought where it is needed (the module
/// is built instead, and the plan's reason says this).
#[derive(Debug, thiserror::Error)]
enum FetchError {
    #[error("a registry answer without ref or artifact")]
    Unanswered,
    #[error("its manifest digest was lost")]
    ManifestLost,
    #[error("pulling {manifest} failed ({source})")]
    Pull {
        manifest: String,
        source: TargetError,
    },
}

/// How often a converge asks the target whether it still holds the mesh before handing builds
/// over: one that woke up after being taken over builds nothing more.
const HOLD_CHECK_EVERY: Duration = Duration::from_secs(1);

/// One converge's walk over its modules' graph, and what it gathered.
pub(crate) struct Walk<'a> {
    /// The converge's context, as every stage reaches it.
    pub cx: Converging<'a>,
    pub planner: Planner<'a>,
    pub manifests: StateManifests<'a>,
    /// Decided before any build; a module whose base is built in this converge is decided again.
    pub planned: BTreeMap<String, PlannedModule>,
    pub outcomes: Vec<ModuleOutcome>,
    /// What the record will name once everything succeeded.
    pub stamp: Record,
    pub all_ok: bool,
    /// Says (with who took it) when the heartbeat found the mesh's lock lost.
    pub lost: watch::Receiver<Option<HoldLost>>,
    /// The builds handed to the placer and not through yet, as they were decided.
    pub building: BTreeMap<String, PlannedModule>,
}

/// Which modules of the converge wait on which: per module, how many it builds on are not
/// through yet, and the modules that build on it.
struct Graph<'m> {
    unmet: HashMap<&'m str, usize>,
    dependents: HashMap<&'m str, Vec<&'m Module>>,
    /// The modules none of whose bases is in the converge, in the selection's order.
    roots: Vec<&'m Module>,
}

impl<'m> Graph<'m> {
    fn of(selected: &[&'m Module]) -> Graph<'m> {
        let names: std::collections::HashSet<&str> =
            selected.iter().map(|m| m.name.as_str()).collect();
        let mut graph = Graph {
            unmet: HashMap::new(),
            dependents: HashMap::new(),
            roots: Vec::new(),
        };
        for module in selected {
            let mut on = module.builds_on();
            on.retain(|below| names.contains(below));
            on.sort_unstable();
            on.dedup();
            for below in &on {
                graph.dependents.entry(below).or_default().push(module);
            }
            if on.is_empty() {
                graph.roots.push(module);
            }
            graph.unmet.insert(module.name.as_str(), on.len());
        }
        graph
    }

    /// `module` is through (delivered, vouched for, or failed): the modules it made ready.
    fn through(&mut self, module: &str) -> Vec<&'m Module> {
        let mut ready = Vec::new();
        for dependent in self.dependents.remove(module).unwrap_or_default() {
            if let Some(count) = self.unmet.get_mut(dependent.name.as_str()) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    ready.push(dependent);
                }
            }
        }
        ready
    }
}

fn outcome_of(planned: &PlannedModule, outcome: ModuleEnd) -> ModuleOutcome {
    ModuleOutcome {
        name: planned.name.clone(),
        tier: planned.tier,
        decision: planned.decision,
        reference: planned.reference.clone(),
        digest: planned.artifact.clone(),
        correlation_id: None,
        ok: outcome.is_ok(),
        outcome,
    }
}

impl<'a> Walk<'a> {
    /// A multi-platform build has a registry to push its platforms and its index to: the
    /// target's, or the mesh's (the Docker target runs its platform out of the index there).
    fn index_has_a_registry(&self) -> bool {
        self.cx.target.pushes_to().is_some() || self.cx.mesh.registry.is_some()
    }

    /// Walk every selected module: each decided once what it builds on is through, built on the
    /// placer while the deliveries of earlier builds go on, until every module is through.
    pub(crate) async fn run_all(
        &mut self,
        selected: &[&Module],
        placer: &mut Placer<'a>,
        cancel: &mut watch::Receiver<bool>,
    ) -> Result<(), ConvergeError> {
        let (placings, handed) = mpsc::unbounded_channel();
        let (ended, ends) = mpsc::unbounded_channel();
        let (delivered, deliveries) = mpsc::unbounded_channel();
        let mut lost = self.lost.clone();
        // A copy of the context: the deliveries borrow nothing of the walk, so they run while
        // the placer builds.
        let cx = self.cx;
        let placing = placer.build_all(handed, cancel, &mut lost, ended);
        let delivering = async {
            super::deliver::as_they_end(cx, ends, delivered).await;
            Ok(())
        };
        let walking = self.walk(selected, placings, deliveries);
        tokio::try_join!(placing, delivering, walking)?;
        Ok(())
    }

    /// Decide what is ready, hand its builds over, take each delivery as it ends: the modules it
    /// made ready are next. `placings` is dropped when every module is through (the placer ends).
    async fn walk(
        &mut self,
        selected: &[&Module],
        placings: mpsc::UnboundedSender<Placing>,
        mut deliveries: mpsc::UnboundedReceiver<Delivered>,
    ) -> Result<(), ConvergeError> {
        let mut graph = Graph::of(selected);
        let mut ready = std::mem::take(&mut graph.roots);
        let mut through = 0;
        let mut hold_checked: Option<Instant> = None;
        while through < selected.len() {
            if !ready.is_empty() {
                self.began(&ready);
                // Each build is handed over as soon as it is decided: the placer starts it while
                // the rest of the batch is decided (a host skip may publish first).
                for module in std::mem::take(&mut ready) {
                    let Some(job) = self.start(module, &placings).await? else {
                        through += 1;
                        ready.extend(graph.through(&module.name));
                        continue;
                    };
                    self.check_hold(&mut hold_checked).await?;
                    let bases = self.base_entries(&job);
                    (self.building).insert(job.module.name.clone(), job.planned.clone());
                    let job = Box::new(job);
                    let _ = placings.send(Placing::Build { job, bases });
                }
                continue;
            }
            if self.building.is_empty() {
                return Err(ConvergeError::Failed(format!(
                    "{} module(s) never became ready: what they build on never went through",
                    selected.len() - through
                )));
            }
            let Some(done) = deliveries.recv().await else {
                // The placer ended with builds it never ended (cannot be): they fail, said.
                for planned in std::mem::take(&mut self.building).into_values() {
                    let reason = "its build was handed over and never ended".to_string();
                    self.failed(&planned, ModuleEnd::Failed(reason), None);
                }
                return Ok(());
            };
            let name = self.finish(done);
            self.building.remove(&name);
            through += 1;
            ready.extend(graph.through(&name));
        }
        Ok(())
    }

    /// The modules that became ready begin, said per tier (`tier 1: api, web`): the tier is what
    /// the screen shows of where a module stands.
    fn began(&self, ready: &[&Module]) {
        let mut by_tier: BTreeMap<u32, Vec<String>> = BTreeMap::new();
        for module in ready {
            by_tier
                .entry(module.tier)
                .or_default()
                .push(module.name.clone());
        }
        for (tier, modules) in by_tier {
            let text = format!("tier {tier}: {}", modules.join(", "));
            self.cx
                .emitter
                .defer(Payload::Tier { tier, modules }, None, text);
        }
    }

    /// Decide one ready module and skip it, fail it, or give back its build to hand over.
    async fn start(
        &mut self,
        module: &Module,
        placings: &mpsc::UnboundedSender<Placing>,
    ) -> Result<Option<BuildJob>, ConvergeError> {
        let decided = self.decide(module).await?;
        let pushes = self.index_has_a_registry();
        let job = |planned| BuildJob {
            module: module.clone(),
            planned,
            pushes,
        };
        match decided.decision {
            Decision::Refused => {
                let end = ModuleEnd::NotReached(decided.reason.clone());
                self.failed(&decided, end, None);
                Ok(None)
            }
            Decision::Registry => match self.fetch(&decided).await {
                Ok(()) => self.skip(module, decided, placings).await.map(|()| None),
                Err(planned) => Ok(Some(job(planned))),
            },
            Decision::Record | Decision::Host | Decision::Pinned => {
                self.skip(module, decided, placings).await.map(|()| None)
            }
            Decision::Build | Decision::Forced => Ok(Some(job(decided))),
        }
    }

    /// A converge that woke up after being taken over builds nothing more: the target is asked
    /// before builds are handed over, at most every [`HOLD_CHECK_EVERY`].
    async fn check_hold(&self, checked: &mut Option<Instant>) -> Result<(), ConvergeError> {
        if checked.is_some_and(|at| at.elapsed() < HOLD_CHECK_EVERY) {
            return Ok(());
        }
        self.cx
            .target
            .still_holds(
                self.cx.db,
                &self.cx.mesh.name,
                &self.cx.emitter.operation_id,
            )
            .await?;
        *checked = Some(Instant::now());
        Ok(())
    }

    /// What `job` builds on as the record to be stamped (built or vouched in this converge) or
    /// the record read names it: its ref and artifact, for a builder that must fetch it.
    fn base_entries(&self, job: &BuildJob) -> BTreeMap<String, RecordEntry> {
        (job.module.builds_on().into_iter())
            .filter_map(|base| {
                let entry = self
                    .stamp
                    .get(base)
                    .cloned()
                    .or_else(|| self.planner.record_entry(base).cloned())?;
                Some((base.to_string(), entry))
            })
            .collect()
    }

    /// The module's decision: the one made before any build, or a new one once what it builds on
    /// was built in this converge (now its ref is known).
    async fn decide(&mut self, module: &Module) -> Result<PlannedModule, ConvergeError> {
        let mut decided = self.planned.remove(&module.name).ok_or_else(|| {
            ConvergeError::Failed(format!("module {} was not planned", module.name))
        })?;
        if decided.reference.is_none() {
            decided = self.planner.decide(module, &self.manifests).await?;
        }
        self.cx.emitter.defer(
            Payload::Decided {
                decision: decided.decision,
                reference: decided.reference.clone(),
                reason: decided.reason.clone(),
            },
            Some(&module.name),
            format!(
                "{} {} — {}",
                decided.decision,
                decided.reference.as_deref().unwrap_or("(no ref)"),
                decided.reason
            ),
        );
        Ok(decided)
    }

    /// Bring what the registry vouched for where the target needs it (the seam's word). A pull that
    /// fails after the registry answered falls back to a build (the planned module given back says
    /// so), and every module built FROM it, decided on the registry's artifact, is decided again
    /// after that build.
    async fn fetch(&mut self, decided: &PlannedModule) -> Result<(), PlannedModule> {
        let error = match self.fetch_vouched(decided).await {
            Ok(()) => return Ok(()),
            Err(error) => error,
        };
        let reason = format!("{}; {error}: built instead", decided.reason);
        self.cx
            .emitter
            .emit(Payload::Warning, Some(&decided.name), reason.clone());
        self.planner.rebuilding(&decided.name);
        let mut moved = vec![decided.name.clone()];
        while let Some(base) = moved.pop() {
            for planned in self.planned.values_mut() {
                if planned.builds_on.contains(&base) && planned.reference.is_some() {
                    planned.reference = None;
                    moved.push(planned.name.clone());
                }
            }
        }
        Err(PlannedModule {
            decision: Decision::Build,
            reason,
            artifact: None,
            ..decided.clone()
        })
    }

    /// Ask the target to bring a registry-vouched artifact where it needs it; onto the host too
    /// when a module of this converge may build FROM it. A multi-platform ref: the target runs its
    /// own platform out of the index, if it runs any (`run_from_index`).
    async fn fetch_vouched(&self, decided: &PlannedModule) -> Result<(), FetchError> {
        let (Some(reference), Some(digest)) = (&decided.reference, &decided.artifact) else {
            return Err(FetchError::Unanswered);
        };
        let Some(manifest) = self.planner.registry_manifest(reference) else {
            return Err(FetchError::ManifestLost);
        };
        let signer = self.planner.registry_signer(reference);
        let artifact = Artifact {
            module: &decided.name,
            reference,
            digest,
            build_id: None,
            manifest: Some(&manifest),
            signed_by: signer.as_deref(),
        };
        if decided.multi_platform {
            self.cx.emitter.emit(
                Payload::Delivered {
                    reference: reference.clone(),
                    by: DeliveredBy::InRegistry {
                        manifest: manifest.clone(),
                    },
                },
                Some(&decided.name),
                format!("{reference} is in the registry as {manifest}"),
            );
            // Runnable where the target runs it (the Docker target pulls its platform out).
            return self
                .cx
                .target
                .run_from_index(self.cx.mesh, artifact, self.cx.reach(), self.cx.emitter)
                .await
                .map_err(|source| FetchError::Pull {
                    manifest: manifest.clone(),
                    source,
                });
        }
        let on_host = self.built_from(&decided.name);
        self.cx
            .target
            .fetch_vouched(
                self.cx.mesh,
                artifact,
                &manifest,
                on_host,
                self.cx.reach(),
                self.cx.emitter,
            )
            .await
            .map_err(|source| FetchError::Pull { manifest, source })
    }

    /// Whether a module of this converge may build FROM `module`: a dependent that builds, or one
    /// the registry vouched for that a module builds FROM in turn (should its pull fail, it builds).
    fn built_from(&self, module: &str) -> bool {
        self.planned.values().any(|p| {
            p.builds_on.iter().any(|on| on == module)
                && (p.decision.builds()
                    || (p.decision == Decision::Registry && self.built_from(&p.name)))
        })
    }

    /// A module the record or the host vouched for: no build; a host skip is still delivered.
    async fn skip(
        &mut self,
        module: &Module,
        decided: PlannedModule,
        placings: &mpsc::UnboundedSender<Placing>,
    ) -> Result<(), ConvergeError> {
        let (Some(reference), Some(artifact)) =
            (decided.reference.clone(), decided.artifact.clone())
        else {
            return Err(ConvergeError::Failed(format!(
                "module {}: a skip without ref or artifact",
                module.name
            )));
        };
        // What the record will say of the artifact's manifest: the record's own word for a record
        // hit, the verified one for a registry hit, what a host skip's delivery pushed.
        let mut entry = match decided.decision {
            Decision::Record => self
                .planner
                .record_entry(&module.name)
                .filter(|e| e.reference == reference && e.digest == artifact)
                .cloned()
                .unwrap_or_else(|| RecordEntry::new(reference.clone(), artifact.clone())),
            Decision::Registry => RecordEntry::new(reference.clone(), artifact.clone())
                .with_manifest(
                    self.planner.registry_manifest(&reference),
                    self.planner.registry_signer(&reference),
                ),
            _ => RecordEntry::new(reference.clone(), artifact.clone()),
        };
        if decided.decision == Decision::Host {
            // Published too where the converge publishes (`--publish`): a skip still signs.
            let delivered = super::deliver::publish_and_deliver(
                self.cx,
                &module.name,
                &reference,
                &artifact,
                None,
            )
            .await;
            match delivered {
                Ok(pushed) => entry.manifest = pushed,
                Err(error) => {
                    // Said once, where it is shown: the event's line and the module's end.
                    let said = error.to_string();
                    self.cx
                        .emitter
                        .emit(failed_payload(&error), Some(&module.name), said.clone());
                    self.failed(&decided, ModuleEnd::DeliveryFailed(said), None);
                    return Ok(());
                }
            }
        }
        if self.cx.target.host_holds_what_it_runs() {
            let _ = placings.send(Placing::OnHost(module.name.clone()));
        }
        if decided.decision == Decision::Registry
            && let Some(manifest) = self.planner.registry_manifest(&reference)
        {
            let module = module.name.clone();
            let _ = placings.send(Placing::Handed { module, manifest });
        }
        // A pinned module keeps the record's entry as the rollback stamped it.
        if decided.decision != Decision::Pinned {
            self.stamp.insert(module.name.clone(), entry);
        }
        let end = match decided.decision {
            Decision::Record => ModuleEnd::SkippedRecord,
            Decision::Pinned => ModuleEnd::KeptPinned,
            Decision::Registry => ModuleEnd::SkippedBuildRegistry,
            _ => ModuleEnd::SkippedBuildHost,
        };
        self.outcomes.push(outcome_of(&decided, end));
        Ok(())
    }

    /// A build's delivery ended: what succeeded goes into the stamp; what did not fails its
    /// module (said once, on its line). The module's name.
    fn finish(&mut self, delivered: Delivered) -> String {
        match delivered {
            Delivered::Done { built, manifest } => {
                let name = built.planned.name.clone();
                let Some(artifact) = built.artifact.clone() else {
                    return name;
                };
                let reference = built.planned.reference.clone().unwrap_or_default();
                self.planner.built(&built.planned.name, &artifact);
                self.stamp.insert(
                    built.planned.name.clone(),
                    RecordEntry::new(reference, artifact.clone()).with_manifest(manifest, None),
                );
                let mut outcome = outcome_of(&built.planned, ModuleEnd::Built);
                outcome.digest = Some(artifact);
                outcome.correlation_id = Some(built.correlation_id.clone());
                self.outcomes.push(outcome);
                name
            }
            Delivered::BuildFailed(built) => {
                let error = built.error.clone().unwrap_or_default();
                self.failed(
                    &built.planned,
                    ModuleEnd::Failed(error),
                    Some((&built, None)),
                );
                built.planned.name
            }
            Delivered::Unplaced(unplaced) => {
                let Some(planned) = self.building.get(&unplaced.module).cloned() else {
                    return unplaced.module;
                };
                self.cx.emitter.emit(
                    failed_payload(&unplaced.reason),
                    Some(&unplaced.module),
                    unplaced.reason.clone(),
                );
                self.failed(&planned, ModuleEnd::Failed(unplaced.reason), None);
                unplaced.module
            }
            Delivered::Undelivered { built, error } => {
                let error = error.to_string();
                self.cx.emitter.emit(
                    failed_payload(&error),
                    Some(&built.planned.name),
                    error.clone(),
                );
                let artifact = built.artifact.clone();
                self.failed(
                    &built.planned,
                    ModuleEnd::DeliveryFailed(error),
                    Some((&built, artifact.as_ref())),
                );
                built.planned.name
            }
        }
    }

    /// A module that did not make it: its dependents are not reached and nothing is stamped.
    fn failed(
        &mut self,
        planned: &PlannedModule,
        end: ModuleEnd,
        build: Option<(&Built, Option<&String>)>,
    ) {
        self.all_ok = false;
        self.planner.failed(&planned.name);
        let mut outcome = outcome_of(planned, end);
        if let Some((built, artifact)) = build {
            outcome.correlation_id = Some(built.correlation_id.clone());
            if let Some(artifact) = artifact {
                outcome.digest = Some(artifact.clone());
            }
        }
        self.outcomes.push(outcome);
    }
}

/// The data of a step that says `error` failed a module.
fn failed_payload(error: &impl std::fmt::Display) -> Payload {
    Payload::Failed {
        error: error.to_string(),
    }
}
