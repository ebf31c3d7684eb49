//! An operation as it runs, folded from its progress steps: each module's state in it (queued,
//! building step n/m, built, delivered, skipped, sent, failed, cancelled), the tier it is in, and how
//! many modules are done. The dashboard folds the steps it reads from the state database, so a
//! converge started in another terminal is followed the same way as one started on screen.

use std::collections::BTreeMap;

use super::decide::Decision;
use super::pool::{PoolState, folds};
use super::progress::{EventRow, Outcome, Payload, Step, TierPlace};

/// Where one module stands in the operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleRun {
    /// Its tier has not come yet.
    Queued,
    /// Decided to build; waiting for a build slot.
    ToBuild,
    /// Building since `since_ms`; the builder's `Step n/m` when it said one.
    Building {
        since_ms: i64,
        step: Option<(u32, u32)>,
    },
    Built {
        took_ms: i64,
    },
    /// On the target: built here (`built`) or taken from the host's image.
    Delivered {
        built: bool,
    },
    /// The record vouched, or the module is pinned: nothing to build or deliver.
    Skipped(Decision),
    Failed(String),
    /// A base failed or has no artifact: never built.
    NotReached(String),
    Cancelled,
    /// The operation ended while this module was on its way (lock lost, an error of the whole).
    Ended(String),
    /// An operation that only sends (send, rollback): its machines are being moved.
    Sending,
    /// Every machine of such an operation answered (see [`LiveModule::sends`]).
    Sent,
}

impl ModuleRun {
    /// Whether nothing more will happen to the module's build in this operation.
    pub fn is_final(&self) -> bool {
        !matches!(
            self,
            ModuleRun::Queued
                | ModuleRun::ToBuild
                | ModuleRun::Building { .. }
                | ModuleRun::Sending
        )
    }
}

/// The machines a module's roll-out moved in this operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sends {
    pub started: u32,
    pub moved: u32,
    pub failed: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveModule {
    pub tier: Option<TierPlace>,
    /// The ref this operation decided on (known once its base was built, when the plan said
    /// `pending`).
    pub reference: Option<String>,
    pub run: ModuleRun,
    pub sends: Sends,
    pub created: u32,
    /// The pool's builder its build runs (or ran) on; None: the local daemon of a mesh without
    /// builders.
    pub builder: Option<String>,
}

/// Who holds a mesh's converge lock, and whether that process is alive: it exists on this host,
/// or (on another host) its heartbeat is within the stale limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockHolder {
    pub operation_id: String,
    pub host: String,
    pub pid: u32,
    pub heartbeat_ms: i64,
    pub alive: bool,
}

/// Who holds the mesh where the team meets (the namespace's Lease): someone else's operation,
/// perhaps on another machine, that the screen names while it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldBy {
    pub operation_id: String,
    /// `send #12` (its short id in its holder's state file), or `send 0190abcd`.
    pub operation: String,
    pub host: String,
    pub pid: u32,
    pub since_ms: i64,
}

impl HeldBy {
    /// `mesh held by send #12 on bob-laptop (process 4242) since 14:02:11`.
    pub fn text(&self, since: &str) -> String {
        format!(
            "mesh held by {} on {} (process {}) since {since}",
            self.operation, self.host, self.pid
        )
    }
}

/// Where an operation stands, its steps and the lock read together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OperationState {
    Running,
    Finished,
    /// No last word, and its process no longer holds the mesh: it was killed or lost the mesh.
    Gone,
}

/// One operation, as far as its steps have been read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveOperation {
    pub operation_id: String,
    /// Its short id within the mesh (`#142`).
    pub operation: Option<i64>,
    pub started_ms: i64,
    /// Whether its first step was read (the first poll reads a tail that may begin mid-way: then
    /// its start time and its list of modules are not known whole).
    pub saw_start: bool,
    /// The deepest tier begun so far.
    pub tier: Option<TierPlace>,
    pub modules: BTreeMap<String, LiveModule>,
    /// When its last word was said and how it ended (None: a row written before payloads, which
    /// says only that it ended); None while it runs.
    pub finished: Option<(i64, Option<Outcome>)>,
    /// The builders of a converge whose mesh names some: their caps and the builds on each.
    pub pool: PoolState,
}

impl LiveOperation {
    pub fn new(first: &EventRow) -> LiveOperation {
        LiveOperation {
            operation_id: first.operation_id.clone(),
            operation: first.operation,
            started_ms: first.at_ms,
            saw_start: false,
            tier: None,
            modules: BTreeMap::new(),
            finished: None,
            pool: PoolState::default(),
        }
    }

    pub fn is_running(&self) -> bool {
        self.finished.is_none()
    }

    /// Running only while its last word has not come and its process holds the mesh, alive.
    pub fn state(&self, holder: Option<&LockHolder>) -> OperationState {
        if self.finished.is_some() {
            return OperationState::Finished;
        }
        match holder {
            Some(h) if h.operation_id == self.operation_id && h.alive => OperationState::Running,
            _ => OperationState::Gone,
        }
    }

    /// Modules with nothing more to happen to their build, and all modules known.
    pub fn done_of(&self) -> (usize, usize) {
        let done = self.modules.values().filter(|m| m.run.is_final()).count();
        (done, self.modules.len())
    }

    pub fn elapsed_ms(&self, now_ms: i64) -> i64 {
        let end = self.finished.as_ref().map_or(now_ms, |(at, _)| *at);
        end.saturating_sub(self.started_ms).max(0)
    }

    /// Fold one step of this operation in (steps of another operation are not this one's). Only
    /// the step's kind and its payload are read: the text is for people.
    pub fn apply(&mut self, event: &EventRow) {
        if event.operation_id != self.operation_id {
            return;
        }
        self.operation = self.operation.or(event.operation);
        let at = event.at_ms;
        let payload = event.payload.as_ref();
        if folds(event.step)
            && let Some(payload) = payload
        {
            self.pool.apply(event.module.as_deref(), payload);
        }
        match event.step {
            Step::Tier => {
                if let Some(Payload::Tier { modules, .. }) = payload {
                    // Modules of several tiers build at once (each when what it builds on is
                    // delivered): the place shown is the deepest begun, never going back.
                    let began = modules
                        .first()
                        .and_then(|first| self.modules.get(first))
                        .and_then(|m| m.tier);
                    self.tier = self.tier.max(began);
                }
                return;
            }
            Step::Started => {
                self.started_ms = at;
                self.saw_start = true;
                return;
            }
            Step::Finished => {
                self.finish(at, payload);
                return;
            }
            _ => {}
        }
        let Some(name) = event.module.as_deref() else {
            return;
        };
        self.modules
            .entry(name.to_string())
            .or_insert_with(|| LiveModule {
                tier: None,
                reference: None,
                run: ModuleRun::Queued,
                sends: Sends::default(),
                created: 0,
                builder: None,
            })
            .apply(event.step, payload, at);
    }

    fn finish(&mut self, at: i64, payload: Option<&Payload>) {
        let (outcome, error) = match payload {
            Some(Payload::Finished { outcome, error }) => (Some(*outcome), error.clone()),
            _ => (None, None),
        };
        let why = error.unwrap_or_else(|| match outcome {
            Some(outcome) => format!("the operation {}", outcome.as_str()),
            None => "the operation ended".to_string(),
        });
        let cancelled = outcome == Some(Outcome::Cancelled);
        for module in self.modules.values_mut() {
            module.run = match &module.run {
                ModuleRun::Building { .. } | ModuleRun::ToBuild | ModuleRun::Queued
                    if cancelled =>
                {
                    ModuleRun::Cancelled
                }
                ModuleRun::Building { .. } | ModuleRun::Sending => ModuleRun::Ended(why.clone()),
                ModuleRun::Queued | ModuleRun::ToBuild => ModuleRun::NotReached(why.clone()),
                other => other.clone(),
            };
        }
        self.finished = Some((at, outcome));
    }
}

/// What a failed step of a row written before payloads says of its error (its text, in the
/// operation pane, says the rest).
const FAILED_UNRECORDED: &str = "failed (the error is in the operation's lines)";

impl LiveModule {
    /// Fold one of the module's steps in: by its payload, or by its kind alone where that says all
    /// (build, built, delivered, created, send — and every step of a row without a payload).
    fn apply(&mut self, step: Step, payload: Option<&Payload>, at: i64) {
        match payload {
            Some(Payload::Queued { place }) => self.tier = Some(*place),
            Some(Payload::Build {
                builder: Some(builder),
                ..
            }) => {
                self.builder = Some(builder.clone());
                self.by_kind(step, at);
            }
            Some(Payload::Decided {
                decision,
                reference,
                reason,
            }) => {
                self.run = decided(*decision, reason);
                if reference.is_some() {
                    self.reference = reference.clone();
                }
            }
            Some(Payload::Output {
                builder_step: Some(said),
            }) => {
                if let ModuleRun::Building { step, .. } = &mut self.run {
                    *step = Some(*said);
                }
            }
            Some(Payload::Failed { error }) => self.run = ModuleRun::Failed(error.clone()),
            Some(Payload::Sent { moved, total, .. }) => {
                self.answered(*moved, total.saturating_sub(*moved));
            }
            _ => self.by_kind(step, at),
        }
    }

    fn by_kind(&mut self, step: Step, at: i64) {
        match step {
            Step::Build => {
                self.run = ModuleRun::Building {
                    since_ms: at,
                    step: None,
                }
            }
            Step::Built => {
                let since = match self.run {
                    ModuleRun::Building { since_ms, .. } => since_ms,
                    _ => at,
                };
                self.run = ModuleRun::Built {
                    took_ms: at - since,
                };
            }
            Step::Delivered => {
                let built = !matches!(self.run, ModuleRun::Skipped(Decision::Host));
                self.run = ModuleRun::Delivered { built };
            }
            Step::Failed => self.run = ModuleRun::Failed(FAILED_UNRECORDED.to_string()),
            Step::Created => self.created += 1,
            Step::Send => {
                self.sends.started += 1;
                // A module no converge walked (a send, a rollback): its state is its sending.
                if self.tier.is_none() && self.run == ModuleRun::Queued {
                    self.run = ModuleRun::Sending;
                }
            }
            _ => {}
        }
    }

    /// Machines of the module answered a send: `moved` of them moved, `failed` did not.
    fn answered(&mut self, moved: u32, failed: u32) {
        self.sends.moved += moved;
        self.sends.failed += failed;
        let sends = self.sends;
        if self.run == ModuleRun::Sending && sends.moved + sends.failed >= sends.started {
            self.run = ModuleRun::Sent;
        }
    }
}

/// Where a decision leaves a module: to build, not reached (refused, with why), or skipped.
fn decided(decision: Decision, reason: &str) -> ModuleRun {
    match decision {
        Decision::Build | Decision::Forced => ModuleRun::ToBuild,
        Decision::Refused => ModuleRun::NotReached(reason.to_string()),
        skip => ModuleRun::Skipped(skip),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::{DeliveredBy, Stamp};

    fn event(id: i64, at_ms: i64, payload: Payload, module: Option<&str>, text: &str) -> EventRow {
        EventRow {
            id,
            at_ms,
            mesh: "demo".into(),
            operation_id: "c1".into(),
            operation: Some(7),
            operation_kind: None,
            step: payload.step(),
            module: module.map(str::to_string),
            text: text.into(),
            payload: Some(payload),
        }
    }

    fn fold(events: &[EventRow]) -> LiveOperation {
        let mut live = LiveOperation::new(&events[0]);
        for e in events {
            live.apply(e);
        }
        live
    }

    fn queued(index: u32, total: u32) -> Payload {
        Payload::Queued {
            place: TierPlace { index, total },
        }
    }

    fn tier(tier: u32, modules: &[&str]) -> Payload {
        Payload::Tier {
            tier,
            modules: modules.iter().map(|m| m.to_string()).collect(),
        }
    }

    fn decided(decision: Decision, reference: Option<&str>, reason: &str) -> Payload {
        Payload::Decided {
            decision,
            reference: reference.map(str::to_string),
            reason: reason.into(),
        }
    }

    fn build(reference: &str) -> Payload {
        Payload::Build {
            reference: reference.into(),
            build: "01a".into(),
            builder: None,
        }
    }

    fn built(reference: &str) -> Payload {
        Payload::Built {
            reference: reference.into(),
            digest: "sha256:ab".into(),
        }
    }

    fn on_host(reference: &str) -> Payload {
        Payload::Delivered {
            reference: reference.into(),
            by: DeliveredBy::OnHost,
        }
    }

    fn send(machine: &str) -> Payload {
        Payload::Send {
            machine: machine.into(),
            from: "sha256:aa".into(),
            to_reference: "demo/api:2".into(),
            to_digest: "sha256:bb".into(),
        }
    }

    fn finished(outcome: Outcome, error: Option<&str>) -> Payload {
        Payload::Finished {
            outcome,
            error: error.map(str::to_string),
        }
    }

    fn a_converge() -> Vec<EventRow> {
        vec![
            event(
                1,
                1_000,
                Payload::Started { modules: 3 },
                None,
                "converge of 3 module(s)",
            ),
            event(2, 1_000, queued(1, 2), Some("base"), "tier 1 of 2"),
            event(3, 1_000, queued(2, 2), Some("api"), "tier 2 of 2"),
            event(4, 1_000, queued(2, 2), Some("web"), "tier 2 of 2"),
            event(5, 1_001, tier(0, &["base"]), None, "tier 0: base"),
            event(
                6,
                1_001,
                decided(Decision::Record, Some("demo/base:1"), "the record names it"),
                Some("base"),
                "record demo/base:1 — the record names it",
            ),
            event(7, 1_002, tier(1, &["api", "web"]), None, "tier 1: api, web"),
            event(
                8,
                1_002,
                decided(Decision::Build, Some("demo/api:2"), "no record"),
                Some("api"),
                "build demo/api:2 — no record",
            ),
            event(
                9,
                1_002,
                decided(Decision::Host, Some("demo/web:3"), "the host holds it"),
                Some("web"),
                "host demo/web:3 — the host holds it",
            ),
            event(
                10,
                1_003,
                build("demo/api:2"),
                Some("api"),
                "building demo/api:2",
            ),
            event(
                11,
                1_004,
                Payload::output("Step 2/4 : RUN make"),
                Some("api"),
                "Step 2/4 : RUN make",
            ),
        ]
    }

    fn the_rest_of_a_converge() -> Vec<EventRow> {
        vec![
            event(12, 1_004, on_host("demo/web:3"), Some("web"), "on the host"),
            event(13, 6_003, built("demo/api:2"), Some("api"), "built"),
            event(14, 6_004, on_host("demo/api:2"), Some("api"), "on the host"),
            event(
                15,
                6_004,
                Payload::Stamped {
                    stamp: Stamp::Stamped { modules: 2 },
                },
                None,
                "record stamped: 2 module(s)",
            ),
            event(15, 6_005, send("api-1"), Some("api"), "api-1: a → b"),
            event(
                16,
                6_006,
                Payload::sent("api-1", true),
                Some("api"),
                "api-1: moved",
            ),
            event(
                17,
                6_007,
                finished(Outcome::Succeeded, None),
                None,
                "converge succeeded",
            ),
        ]
    }

    #[test]
    fn the_tier_shown_is_the_deepest_begun_when_a_shallower_one_begins_later() {
        let mut events = a_converge();
        // web's tier-1 sibling api is slow; base2 (tier 0, nothing waits on it) begins last.
        events.push(event(20, 1_010, queued(1, 2), Some("base2"), "tier 1 of 2"));
        events.push(event(21, 1_011, tier(0, &["base2"]), None, "tier 0: base2"));
        let live = fold(&events);
        assert_eq!(live.tier, Some(TierPlace { index: 2, total: 2 }));
    }

    #[test]
    fn a_converge_walks_its_modules() {
        let events = a_converge();
        let live = fold(&events);
        assert_eq!(live.operation, Some(7));
        assert!(live.saw_start);
        assert_eq!(live.tier, Some(TierPlace { index: 2, total: 2 }));
        assert_eq!(
            live.modules["base"].run,
            ModuleRun::Skipped(Decision::Record)
        );
        assert_eq!(
            live.modules["api"].run,
            ModuleRun::Building {
                since_ms: 1_003,
                step: Some((2, 4))
            }
        );
        assert_eq!(live.modules["web"].run, ModuleRun::Skipped(Decision::Host));
        assert_eq!(live.modules["api"].reference.as_deref(), Some("demo/api:2"));
        assert_eq!(live.done_of(), (2, 3));
        assert!(live.is_running());

        let mut more = events;
        more.extend(the_rest_of_a_converge());
        let live = fold(&more);
        assert_eq!(
            live.modules["web"].run,
            ModuleRun::Delivered { built: false }
        );
        assert_eq!(
            live.modules["api"].run,
            ModuleRun::Delivered { built: true }
        );
        assert_eq!(
            live.modules["api"].sends,
            Sends {
                started: 1,
                moved: 1,
                failed: 0
            }
        );
        assert_eq!(live.done_of(), (3, 3));
        assert_eq!(live.elapsed_ms(99_999), 5_007);
        assert!(!live.is_running());
        assert_eq!(live.finished, Some((6_007, Some(Outcome::Succeeded))));
    }

    fn a_send() -> Vec<EventRow> {
        vec![
            event(1, 0, Payload::Started { modules: 1 }, None, "send of api"),
            event(2, 1, send("api-1"), Some("api"), "api-1: a → b"),
            event(3, 1, send("api-2"), Some("api"), "api-2: a → b"),
            event(
                4,
                2,
                Payload::sent("api-1", true),
                Some("api"),
                "api-1: moved",
            ),
        ]
    }

    #[test]
    fn a_send_is_its_sending_never_queued() {
        let events = a_send();
        let live = fold(&events);
        assert_eq!(live.modules["api"].run, ModuleRun::Sending);
        assert_eq!(live.done_of(), (0, 1));
        let mut more = events;
        more.push(event(
            5,
            3,
            Payload::sent("api-2", false),
            Some("api"),
            "api-2: failed: no such image",
        ));
        let live = fold(&more);
        assert_eq!(live.modules["api"].run, ModuleRun::Sent);
        assert_eq!(
            live.modules["api"].sends,
            Sends {
                started: 2,
                moved: 1,
                failed: 1
            }
        );
        assert_eq!(live.done_of(), (1, 1));
    }

    fn a_cancelled_converge() -> Vec<EventRow> {
        vec![
            event(
                1,
                0,
                Payload::Started { modules: 2 },
                None,
                "converge of 2 module(s)",
            ),
            event(2, 0, queued(1, 2), Some("base"), "tier 1 of 2"),
            event(3, 0, queued(2, 2), Some("api"), "tier 2 of 2"),
            event(
                4,
                1,
                decided(Decision::Build, Some("demo/base:1"), "no record"),
                Some("base"),
                "build demo/base:1 — no record",
            ),
            event(5, 2, build("demo/base:1"), Some("base"), "building"),
            event(
                6,
                9,
                finished(Outcome::Cancelled, Some("converge cancelled")),
                None,
                "converge cancelled: running builds were marked cancelled, nothing was stamped",
            ),
        ]
    }

    #[test]
    fn a_cancelled_converge_cancels_what_was_on_its_way() {
        let live = fold(&a_cancelled_converge());
        assert_eq!(live.modules["base"].run, ModuleRun::Cancelled);
        assert_eq!(live.modules["api"].run, ModuleRun::Cancelled);
    }

    fn a_failed_base() -> Vec<EventRow> {
        vec![
            event(
                1,
                0,
                Payload::Started { modules: 2 },
                None,
                "converge of 2 module(s)",
            ),
            event(2, 0, queued(1, 2), Some("base"), "tier 1 of 2"),
            event(3, 0, queued(2, 2), Some("api"), "tier 2 of 2"),
            event(4, 1, build("demo/base:1"), Some("base"), "building"),
            event(
                5,
                2,
                Payload::Failed {
                    error: "RUN returned a non-zero code: 3".into(),
                },
                Some("base"),
                "RUN returned a non-zero code: 3",
            ),
            event(
                6,
                3,
                decided(Decision::Refused, None, "base base failed"),
                Some("api"),
                "refused (no ref) — base base failed",
            ),
            event(
                7,
                4,
                finished(Outcome::Failed, None),
                None,
                "converge failed",
            ),
        ]
    }

    #[test]
    fn a_failed_base_leaves_its_dependents_not_reached() {
        let live = fold(&a_failed_base());
        assert!(
            matches!(live.modules["base"].run, ModuleRun::Failed(ref e) if e.contains("non-zero"))
        );
        assert_eq!(
            live.modules["api"].run,
            ModuleRun::NotReached("base base failed".into())
        );
        assert_eq!(live.modules["api"].reference, None);
        // Another operation's steps are not this one's.
        let mut live = live;
        let mut other = event(8, 5, build("demo/api:2"), Some("api"), "building");
        other.operation_id = "c2".into();
        live.apply(&other);
        assert!(matches!(live.modules["api"].run, ModuleRun::NotReached(_)));
    }

    #[test]
    fn an_operation_that_lost_the_mesh_ends_what_was_on_its_way_with_its_error() {
        let mut events = a_send();
        events.push(event(
            5,
            3,
            finished(Outcome::Failed, Some("lock lost: taken over by #9")),
            None,
            "send: nothing more sent: lock lost: taken over by #9",
        ));
        let live = fold(&events);
        assert_eq!(
            live.modules["api"].run,
            ModuleRun::Ended("lock lost: taken over by #9".into())
        );
    }

    /// Every step's text said another way: the words are for people, the state is the data's.
    fn reworded(events: &[EventRow]) -> Vec<EventRow> {
        events
            .iter()
            .map(|e| EventRow {
                text: format!(
                    "«{}» said otherwise",
                    e.text.chars().rev().collect::<String>()
                ),
                ..e.clone()
            })
            .collect()
    }

    #[test]
    fn reworded_steps_fold_the_same() {
        let mut converge = a_converge();
        converge.extend(the_rest_of_a_converge());
        let mut send = a_send();
        send.push(event(
            5,
            3,
            Payload::sent("api-2", false),
            Some("api"),
            "api-2: failed",
        ));
        for events in [
            a_converge(),
            converge,
            send,
            a_cancelled_converge(),
            a_failed_base(),
        ] {
            let said = fold(&events);
            assert_eq!(fold(&reworded(&events)), said, "{events:#?}");
            // No words at all: the same.
            let silent: Vec<EventRow> = events
                .iter()
                .map(|e| EventRow {
                    text: String::new(),
                    ..e.clone()
                })
                .collect();
            assert_eq!(fold(&silent), said);
        }
    }

    #[test]
    fn rows_written_before_payloads_fold_by_their_kind_and_end() {
        let bare = |id, step, module: Option<&str>| EventRow {
            id,
            at_ms: id * 10,
            mesh: "demo".into(),
            operation_id: "c1".into(),
            operation: Some(3),
            operation_kind: Some(crate::operation::OperationKind::Converge),
            step,
            module: module.map(str::to_string),
            text: "build demo/api:2 — no record".into(),
            payload: None,
        };
        let events = [
            bare(1, Step::Started, None),
            bare(2, Step::Decided, Some("api")),
            bare(3, Step::Build, Some("api")),
            bare(4, Step::Build, Some("web")),
            bare(5, Step::Built, Some("api")),
            bare(6, Step::Failed, Some("web")),
            bare(7, Step::Finished, None),
        ];
        let live = fold(&events[..5]);
        assert!(live.saw_start);
        assert_eq!(live.modules["api"].run, ModuleRun::Built { took_ms: 20 });
        assert!(matches!(
            live.modules["web"].run,
            ModuleRun::Building { .. }
        ));
        let live = fold(&events);
        // It ended: never "stopped (process gone)", though how it ended is not known.
        assert_eq!(live.finished, Some((70, None)));
        assert_eq!(live.state(None), OperationState::Finished);
        assert_eq!(
            live.modules["web"].run,
            ModuleRun::Failed(FAILED_UNRECORDED.into())
        );
    }
}
