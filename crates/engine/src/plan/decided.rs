//! What the planner has decided so far in one plan or converge: the artifact each module resolves
//! to, the modules refused, and what a converge tells it as builds end.

use std::collections::BTreeMap;

use super::Planner;
use crate::mesh::decide::RefState;
use crate::mesh::model::{Module, RecordEntry};

impl Planner<'_> {
    /// Forget every decision (the host's answer stays): to decide the modules again.
    pub(crate) fn reset(&mut self) {
        self.artifacts.clear();
        self.refused.clear();
    }

    pub(crate) fn is_selected(&self, module: &str) -> bool {
        self.ctx
            .selected
            .as_ref()
            .is_none_or(|names| names.contains(module))
    }

    /// What the record read when the converge started names for `module`.
    pub(crate) fn record_entry(&self, module: &str) -> Option<&RecordEntry> {
        self.ctx.record.get(module)
    }

    /// A module of this converge was built: its dependents resolve against `artifact`.
    pub(crate) fn built(&mut self, module: &str, artifact: &str) {
        self.artifacts
            .insert(module.to_string(), Some(artifact.to_string()));
    }

    /// A module decided on another voucher is built after all (its pull failed): its dependents
    /// wait for that build.
    pub(crate) fn rebuilding(&mut self, module: &str) {
        self.artifacts.insert(module.to_string(), None);
    }

    /// A module's build failed or was skipped: its dependents are refused.
    pub(crate) fn failed(&mut self, module: &str) {
        self.artifacts.remove(module);
        self.refused.insert(module.to_string());
    }

    pub(super) fn base_state(&self, module: &Module) -> (Option<RefState>, Option<String>) {
        let Some(base) = &module.base else {
            return (None, None);
        };
        match self.artifact_of(base) {
            Ok(artifact) => (None, Some(artifact)),
            Err(state) => (Some(state), None),
        }
    }

    /// Each named context's module's artifact, by the name the Dockerfile writes; else what the
    /// first one without an artifact leaves the module in (pending on its build, or refused).
    pub(super) fn contexts_state(
        &self,
        module: &Module,
    ) -> Result<BTreeMap<String, String>, RefState> {
        module
            .contexts
            .iter()
            .map(|(name, on)| Ok((name.clone(), self.artifact_of(on)?)))
            .collect()
    }

    /// The artifact a module this one builds on resolved to: decided or built in this converge,
    /// else (outside the selection) the record's.
    fn artifact_of(&self, on: &str) -> Result<String, RefState> {
        let missing = || RefState::BaseMissing {
            base: on.to_string(),
        };
        if self.refused.contains(on) {
            return Err(missing());
        }
        if self.is_selected(on) {
            return match self.artifacts.get(on) {
                Some(Some(artifact)) => Ok(artifact.clone()),
                Some(None) => Err(RefState::Pending {
                    base: on.to_string(),
                }),
                None => Err(missing()),
            };
        }
        match self.ctx.record.get(on) {
            Some(entry) => Ok(entry.digest.clone()),
            None => Err(missing()),
        }
    }

    /// Pinned modules whose pin this converge ends (a third address, or forced), and why.
    pub(crate) fn ended_pins(&self) -> &BTreeMap<String, String> {
        &self.ended_pins
    }
}
