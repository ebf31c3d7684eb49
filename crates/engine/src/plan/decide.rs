//! The verdict per module: its pin's, else the skip decision's over the vouchers' answers, and
//! what moved its address since the record's.

use std::collections::BTreeMap;

use super::inputs::BuiltOn;
use super::{ManifestSource, PlanError, PlannedModule, Planner};
use crate::mesh::decide::{self, Decision, Question, RefState, Verdict};
use crate::mesh::manifest::own_digest;
use crate::mesh::model::Module;
use crate::mesh::pin;
use crate::mesh::text::short_id;
use crate::mesh::why::{self, Change};
use crate::workspace::inputs::Inputs;

impl Planner<'_> {
    /// Decide `modules` (in tier order), asking the registry for every ref it is needed for at once
    /// (bounded), then deciding again with its answers; a dependent whose base the registry answered
    /// for learns its ref only then, so this repeats at most once per tier.
    pub(crate) async fn decide_all(
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

    /// Decide one module (its base must have been decided, or built, before).
    pub(crate) async fn decide(
        &mut self,
        module: &Module,
        manifests: &dyn ManifestSource,
    ) -> Result<PlannedModule, PlanError> {
        let forced = self.ctx.force;
        let platforms = self.platforms(module).await;
        let multi_platform = platforms.len() > 1;
        let (blocked, base_artifact) = self.base_state(module);
        let (blocked, contexts) = match (blocked, self.contexts_state(module)) {
            (Some(state), _) => (Some(state), BTreeMap::new()),
            (None, Ok(contexts)) => (None, contexts),
            (None, Err(state)) => (Some(state), BTreeMap::new()),
        };
        let (state, inputs, image_ref) = match blocked {
            Some(state) => (state, None, None),
            None => {
                let on = BuiltOn {
                    base: base_artifact.as_deref(),
                    contexts: &contexts,
                };
                self.address(module, &platforms, on, manifests)?
            }
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
        let waited = match &question.reference {
            RefState::BaseMissing { base } | RefState::Pending { base } => base.as_str(),
            RefState::Known(_) => "?",
        };
        // What it builds on by name: its base, or a module its Dockerfile reaches as a named context.
        let on = if module.base.as_deref() == Some(waited) {
            "base"
        } else {
            "named context's module"
        };
        let why = match (&inputs, decision) {
            (_, Decision::Refused) => format!("{on} {waited} has no artifact"),
            (None, _) => format!("waits for {on} {waited}"),
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
            contexts,
            builds_on: module.builds_on().into_iter().map(str::to_string).collect(),
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

    /// The verdict for one module: its pin's, else the skip decision's (an artifact the host
    /// lost is rebuilt where the host is the target), refused when it builds FROM a base outside
    /// the selection whose artifact is gone.
    pub(super) async fn verdict(
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
                if self.host_images_answer()
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
            .builds_on()
            .into_iter()
            .find_map(|base| Some((base, self.unselected_base_gone(base)?)));
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
    pub(super) fn changes(
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
