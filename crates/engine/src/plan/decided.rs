//! What the planner has decided so far in one plan or converge: the artifact each module resolves
//! to, the modules refused, and what a converge tells it as builds end.

use std::collections::BTreeMap;

use super::Planner;
use crate::mesh::decide::RefState;
use crate::mesh::model::{Module, RecordEntry};

impl Planner<'_> {
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
    pub fn record_entry(&self, module: &str) -> Option<&RecordEntry> {
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

    pub(super) fn base_state(&self, module: &Module) -> (Option<RefState>, Option<String>) {
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

    /// Pinned modules whose pin this converge ends (a third address, or forced), and why.
    pub fn ended_pins(&self) -> &BTreeMap<String, String> {
        &self.ended_pins
    }
}
