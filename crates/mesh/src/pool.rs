//! The pool of builders as one converge's steps tell it: each builder's cap and state (from the
//! check when the converge started), the builds running on it, and the builds still waiting for
//! one. Pure: it folds the steps' data, never their text. `meshtop builders` and the live view's
//! header read it.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::progress::{Payload, Step};

/// One builder as the steps tell it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PoolBuilder {
    pub name: String,
    pub endpoint: String,
    pub max_builds: u32,
    /// Why it is out (left out by the check, or out of rotation after a fault).
    pub out: Option<String>,
    /// The modules building on it now.
    pub running: BTreeSet<String>,
}

/// The pool of one converge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PoolState {
    pub builders: Vec<PoolBuilder>,
    /// Modules decided to build that no builder has started yet.
    pub queued: BTreeSet<String>,
    /// Where each module is building (or last built) in this converge.
    pub built_on: BTreeMap<String, String>,
    /// The operation ended: nothing runs any more.
    pub finished: bool,
}

impl PoolState {
    /// Fold one step (its module, its data) of the converge.
    pub fn apply(&mut self, module: Option<&str>, payload: &Payload) {
        match (payload, module) {
            (
                Payload::Builder {
                    builder,
                    endpoint,
                    max_builds,
                    out,
                },
                _,
            ) => {
                self.builders.retain(|b| b.name != *builder);
                self.builders.push(PoolBuilder {
                    name: builder.clone(),
                    endpoint: endpoint.clone(),
                    max_builds: *max_builds,
                    out: out.clone(),
                    running: BTreeSet::new(),
                });
            }
            (Payload::Decided { decision, .. }, Some(module)) if decision.builds() => {
                self.queued.insert(module.to_string());
            }
            (Payload::Build { builder, .. }, Some(module)) => {
                self.queued.remove(module);
                self.stop(module);
                if let Some(name) = builder {
                    self.built_on.insert(module.to_string(), name.clone());
                    if let Some(b) = self.builders.iter_mut().find(|b| b.name == *name) {
                        b.running.insert(module.to_string());
                    }
                }
            }
            (Payload::Requeued { from, error }, Some(module)) => {
                self.stop(module);
                self.queued.insert(module.to_string());
                if let Some(b) = self.builders.iter_mut().find(|b| b.name == *from) {
                    b.out = Some(error.clone());
                }
            }
            (Payload::Built { .. } | Payload::Failed { .. }, Some(module)) => {
                self.queued.remove(module);
                self.stop(module);
            }
            (Payload::Finished { .. }, _) => {
                self.finished = true;
                self.queued.clear();
                for b in &mut self.builders {
                    b.running.clear();
                }
            }
            _ => {}
        }
    }

    fn stop(&mut self, module: &str) {
        for b in &mut self.builders {
            b.running.remove(module);
        }
    }

    /// Fold a converge's steps in order.
    pub fn of<'a>(steps: impl IntoIterator<Item = (Option<&'a str>, &'a Payload)>) -> PoolState {
        let mut state = PoolState::default();
        for (module, payload) in steps {
            state.apply(module, payload);
        }
        state
    }

    /// The header's words: `builders a 1/2 · b 0/1 out` (empty: no builder was checked).
    pub fn line(&self) -> String {
        self.builders
            .iter()
            .map(|b| {
                let out = if b.out.is_some() { " out" } else { "" };
                format!("{} {}/{}{out}", b.name, b.running.len(), b.max_builds)
            })
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// Whether a step changes what [`PoolState`] folds (the others need not be read).
pub fn folds(step: Step) -> bool {
    matches!(
        step,
        Step::Builder
            | Step::Decided
            | Step::Build
            | Step::Requeued
            | Step::Built
            | Step::Failed
            | Step::Finished
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::Decision;
    use crate::progress::Outcome;

    fn builder(name: &str, out: Option<&str>) -> Payload {
        Payload::Builder {
            builder: name.into(),
            endpoint: format!("unix:///run/{name}.sock"),
            max_builds: 2,
            out: out.map(str::to_string),
        }
    }

    fn decided(decision: Decision) -> Payload {
        Payload::Decided {
            decision,
            reference: Some("demo/x:1".into()),
            reason: String::new(),
        }
    }

    fn build(on: &str) -> Payload {
        Payload::Build {
            reference: "demo/x:1".into(),
            build: "01".into(),
            builder: Some(on.into()),
        }
    }

    #[test]
    fn running_and_queued_follow_the_steps() {
        let steps = [
            (None, builder("a", None)),
            (None, builder("b", Some("cannot reach it"))),
            (Some("base"), decided(Decision::Build)),
            (Some("web"), decided(Decision::Build)),
            (Some("api"), decided(Decision::Record)),
            (Some("base"), build("a")),
        ];
        let state = PoolState::of(steps.iter().map(|(m, p)| (*m, p)));
        assert_eq!(state.queued, BTreeSet::from(["web".to_string()]));
        assert_eq!(
            state.builders[0].running,
            BTreeSet::from(["base".to_string()])
        );
        assert_eq!(state.line(), "a 1/2 · b 0/2 out");

        let mut more = state.clone();
        more.apply(
            Some("base"),
            &Payload::Requeued {
                from: "a".into(),
                error: "EOF".into(),
            },
        );
        assert!(more.builders[0].running.is_empty());
        assert_eq!(more.builders[0].out.as_deref(), Some("EOF"));
        assert!(more.queued.contains("base"));
        more.apply(Some("base"), &build("b"));
        assert_eq!(more.built_on["base"], "b");
        more.apply(
            Some("base"),
            &Payload::Built {
                reference: "demo/x:1".into(),
                digest: "sha256:1".into(),
            },
        );
        assert_eq!(more.line(), "a 0/2 out · b 0/2 out");
        more.apply(
            None,
            &Payload::Finished {
                outcome: Outcome::Succeeded,
                error: None,
            },
        );
        assert!(more.finished && more.queued.is_empty());
    }
}
