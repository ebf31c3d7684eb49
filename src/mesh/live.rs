//! An operation as it runs, folded from its progress steps: each module's state in it (queued,
//! building step n/m, built, delivered, skipped, sent, failed, cancelled), the tier it is in, and how
//! many modules are done. The dashboard folds the steps it reads from the state database, so a
//! converge started in another terminal is followed the same way as one started on screen.

use std::collections::BTreeMap;

use super::decide::Decision;
use super::progress::{EventRow, Step};

/// A tier's place in one operation: the `index`-th (from 1) of the `total` tiers it walks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierPlace {
    pub index: u32,
    pub total: u32,
}

impl TierPlace {
    /// The text a [`Step::Queued`] step carries: `tier 2 of 3`.
    pub fn text(self) -> String {
        format!("tier {} of {}", self.index, self.total)
    }

    pub fn parse(text: &str) -> Option<TierPlace> {
        let (index, total) = text.strip_prefix("tier ")?.split_once(" of ")?;
        let place = TierPlace {
            index: index.parse().ok()?,
            total: total.parse().ok()?,
        };
        (place.index >= 1 && place.index <= place.total).then_some(place)
    }
}

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

    pub fn is_bad(&self) -> bool {
        matches!(
            self,
            ModuleRun::Failed(_) | ModuleRun::NotReached(_) | ModuleRun::Ended(_)
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
    /// What its start said (`converge of 3 module(s)`).
    pub title: Option<String>,
    /// The tier being walked now.
    pub tier: Option<TierPlace>,
    pub modules: BTreeMap<String, LiveModule>,
    /// The operation's last word and when it was said; None while it runs.
    pub finished: Option<(i64, String)>,
}

impl LiveOperation {
    pub fn new(first: &EventRow) -> LiveOperation {
        LiveOperation {
            operation_id: first.operation_id.clone(),
            operation: first.operation,
            started_ms: first.at_ms,
            saw_start: false,
            title: None,
            tier: None,
            modules: BTreeMap::new(),
            finished: None,
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

    /// Fold one step of this operation in (steps of another operation are not this one's).
    pub fn apply(&mut self, event: &EventRow) {
        if event.operation_id != self.operation_id {
            return;
        }
        self.operation = self.operation.or(event.operation);
        let at = event.at_ms;
        if event.step == Step::Tier {
            self.tier = tier_of_line(&event.text)
                .and_then(|first| self.modules.get(first))
                .and_then(|m| m.tier)
                .or(self.tier);
            return;
        }
        if event.step == Step::Started {
            self.title = Some(event.text.clone());
            self.started_ms = at;
            self.saw_start = true;
            return;
        }
        if event.step == Step::Finished {
            self.finish(at, &event.text);
            return;
        }
        let Some(name) = event.module.as_deref() else {
            return;
        };
        let module = self
            .modules
            .entry(name.to_string())
            .or_insert_with(|| LiveModule {
                tier: None,
                reference: None,
                run: ModuleRun::Queued,
                sends: Sends::default(),
                created: 0,
            });
        match event.step {
            Step::Queued => module.tier = TierPlace::parse(&event.text),
            Step::Decided => {
                module.run = decided(&event.text);
                module.reference = decided_ref(&event.text).or(module.reference.take());
            }
            Step::Build => {
                module.run = ModuleRun::Building {
                    since_ms: at,
                    step: None,
                }
            }
            Step::Output => {
                if let ModuleRun::Building { step, .. } = &mut module.run
                    && let Some(said) = builder_step(&event.text)
                {
                    *step = Some(said);
                }
            }
            Step::Built => {
                let since = match module.run {
                    ModuleRun::Building { since_ms, .. } => since_ms,
                    _ => at,
                };
                module.run = ModuleRun::Built {
                    took_ms: at - since,
                };
            }
            Step::Delivered => {
                let built = !matches!(module.run, ModuleRun::Skipped(Decision::Host));
                module.run = ModuleRun::Delivered { built };
            }
            Step::Failed => module.run = ModuleRun::Failed(event.text.clone()),
            Step::Created => module.created += 1,
            Step::Send => {
                module.sends.started += 1;
                // A module no converge walked (a send, a rollback): its state is its sending.
                if module.tier.is_none() && module.run == ModuleRun::Queued {
                    module.run = ModuleRun::Sending;
                }
            }
            Step::Sent => {
                if sent_ok(&event.text) {
                    module.sends.moved += 1;
                } else {
                    module.sends.failed += 1;
                }
                let sends = module.sends;
                if module.run == ModuleRun::Sending && sends.moved + sends.failed >= sends.started {
                    module.run = ModuleRun::Sent;
                }
            }
            _ => {}
        }
    }

    fn finish(&mut self, at: i64, text: &str) {
        let cancelled = text.contains("cancelled");
        for module in self.modules.values_mut() {
            module.run = match &module.run {
                ModuleRun::Building { .. } | ModuleRun::ToBuild | ModuleRun::Queued
                    if cancelled =>
                {
                    ModuleRun::Cancelled
                }
                ModuleRun::Building { .. } | ModuleRun::Sending => {
                    ModuleRun::Ended(text.to_string())
                }
                ModuleRun::Queued | ModuleRun::ToBuild => ModuleRun::NotReached(text.to_string()),
                other => other.clone(),
            };
        }
        self.finished = Some((at, text.to_string()));
    }
}

/// The first module a tier step names (`tier 1: api, worker` → `api`).
fn tier_of_line(text: &str) -> Option<&str> {
    let (_, names) = text.split_once(": ")?;
    names.split(", ").next().filter(|n| !n.is_empty())
}

/// A decided step reads `<decision> <ref> — <reason>`.
fn decided(text: &str) -> ModuleRun {
    let word = text.split_whitespace().next().unwrap_or("");
    match Decision::parse(word) {
        Some(Decision::Build | Decision::Forced) => ModuleRun::ToBuild,
        Some(Decision::Refused) => {
            let why = text.split_once(" — ").map_or(text, |(_, why)| why);
            ModuleRun::NotReached(why.to_string())
        }
        Some(skip) => ModuleRun::Skipped(skip),
        None => ModuleRun::Queued,
    }
}

/// The ref of a decided step (`build demo/api:9a8b — …` → `demo/api:9a8b`); none for `(no ref)`.
fn decided_ref(text: &str) -> Option<String> {
    let head = text.split(" — ").next()?;
    let reference = head.split_whitespace().nth(1)?;
    (!reference.starts_with('(')).then(|| reference.to_string())
}

/// The builder's place in the Dockerfile: the classic builder's `Step 3/5 : RUN …`, or BuildKit's
/// `#7 [2/4] RUN …` (`[stage 2/4]` in a multi-stage build).
pub fn builder_step(line: &str) -> Option<(u32, u32)> {
    let fraction = |text: &str| -> Option<(u32, u32)> {
        let (n, m) = text.split_once('/')?;
        let (n, m) = (n.trim().parse().ok()?, m.trim().parse().ok()?);
        (n >= 1 && n <= m).then_some((n, m))
    };
    if let Some(rest) = line.trim_start().strip_prefix("Step ") {
        return fraction(rest.split(" :").next()?);
    }
    let open = line.find('[')?;
    let close = open + line[open..].find(']')?;
    let inside = &line[open + 1..close];
    fraction(inside.rsplit(' ').next()?)
}

/// The text of a [`Step::Sent`] step for one machine: `web-1: moved` or `web-1: failed: …`.
pub fn sent_text(machine: &str, ok: bool, message: &str) -> String {
    if ok {
        format!("{machine}: moved")
    } else {
        format!("{machine}: {message}")
    }
}

/// Whether a [`Step::Sent`] step for one machine says it moved (see [`sent_text`]).
pub fn sent_ok(text: &str) -> bool {
    text.ends_with(": moved")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, at_ms: i64, step: Step, module: Option<&str>, text: &str) -> EventRow {
        EventRow {
            id,
            at_ms,
            mesh: "demo".into(),
            operation_id: "c1".into(),
            operation: Some(7),
            operation_kind: None,
            step,
            module: module.map(str::to_string),
            text: text.into(),
        }
    }

    fn fold(events: &[EventRow]) -> LiveOperation {
        let mut live = LiveOperation::new(&events[0]);
        for e in events {
            live.apply(e);
        }
        live
    }

    #[test]
    fn tier_places_round_trip() {
        let place = TierPlace { index: 2, total: 3 };
        assert_eq!(TierPlace::parse(&place.text()), Some(place));
        assert_eq!(TierPlace::parse("tier 4 of 3"), None);
        assert_eq!(TierPlace::parse("tier 0: base"), None);
    }

    #[test]
    fn builder_steps_classic_and_buildkit() {
        assert_eq!(builder_step("Step 3/5 : RUN make"), Some((3, 5)));
        assert_eq!(builder_step("#7 [2/4] RUN make"), Some((2, 4)));
        assert_eq!(builder_step("#9 [build 3/6] COPY . ."), Some((3, 6)));
        assert_eq!(builder_step(" ---> Running in 997ef2f20ecc"), None);
        assert_eq!(builder_step("[0/0]"), None);
        assert_eq!(builder_step("Step x/5 : RUN"), None);
    }

    #[test]
    fn sent_words_round_trip() {
        assert!(sent_ok(&sent_text("web-1", true, "moved")));
        assert!(!sent_ok(&sent_text(
            "web-1",
            false,
            "failed: no such image"
        )));
    }

    #[test]
    fn a_converge_walks_its_modules() {
        let events = [
            event(1, 1_000, Step::Started, None, "converge of 3 module(s)"),
            event(2, 1_000, Step::Queued, Some("base"), "tier 1 of 2"),
            event(3, 1_000, Step::Queued, Some("api"), "tier 2 of 2"),
            event(4, 1_000, Step::Queued, Some("web"), "tier 2 of 2"),
            event(5, 1_001, Step::Tier, None, "tier 0: base"),
            event(
                6,
                1_001,
                Step::Decided,
                Some("base"),
                "record demo/base:1 — the record names it",
            ),
            event(7, 1_002, Step::Tier, None, "tier 1: api, web"),
            event(
                8,
                1_002,
                Step::Decided,
                Some("api"),
                "build demo/api:2 — no record",
            ),
            event(
                9,
                1_002,
                Step::Decided,
                Some("web"),
                "host demo/web:3 — the host holds it",
            ),
            event(10, 1_003, Step::Build, Some("api"), "building demo/api:2"),
            event(11, 1_004, Step::Output, Some("api"), "Step 2/4 : RUN make"),
        ];
        let live = fold(&events);
        assert_eq!(live.operation, Some(7));
        assert_eq!(live.title.as_deref(), Some("converge of 3 module(s)"));
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

        let mut more = events.to_vec();
        more.push(event(
            12,
            1_004,
            Step::Delivered,
            Some("web"),
            "on the host",
        ));
        more.push(event(13, 6_003, Step::Built, Some("api"), "built"));
        more.push(event(
            14,
            6_004,
            Step::Delivered,
            Some("api"),
            "on the host",
        ));
        more.push(event(15, 6_005, Step::Send, Some("api"), "api-1: a → b"));
        more.push(event(16, 6_006, Step::Sent, Some("api"), "api-1: moved"));
        more.push(event(17, 6_007, Step::Finished, None, "converge succeeded"));
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
    }

    #[test]
    fn a_send_is_its_sending_never_queued() {
        let events = [
            event(1, 0, Step::Started, None, "send of api"),
            event(2, 1, Step::Send, Some("api"), "api-1: a → b"),
            event(3, 1, Step::Send, Some("api"), "api-2: a → b"),
            event(4, 2, Step::Sent, Some("api"), "api-1: moved"),
        ];
        let live = fold(&events);
        assert_eq!(live.modules["api"].run, ModuleRun::Sending);
        assert_eq!(live.done_of(), (0, 1));
        let mut more = events.to_vec();
        more.push(event(
            5,
            3,
            Step::Sent,
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

    #[test]
    fn a_cancelled_converge_cancels_what_was_on_its_way() {
        let events = [
            event(1, 0, Step::Started, None, "converge of 2 module(s)"),
            event(2, 0, Step::Queued, Some("base"), "tier 1 of 2"),
            event(3, 0, Step::Queued, Some("api"), "tier 2 of 2"),
            event(
                4,
                1,
                Step::Decided,
                Some("base"),
                "build demo/base:1 — no record",
            ),
            event(5, 2, Step::Build, Some("base"), "building"),
            event(
                6,
                9,
                Step::Finished,
                None,
                "converge cancelled: running builds were marked cancelled, nothing was stamped",
            ),
        ];
        let live = fold(&events);
        assert_eq!(live.modules["base"].run, ModuleRun::Cancelled);
        assert_eq!(live.modules["api"].run, ModuleRun::Cancelled);
    }

    #[test]
    fn a_failed_base_leaves_its_dependents_not_reached() {
        let events = [
            event(1, 0, Step::Started, None, "converge of 2 module(s)"),
            event(2, 0, Step::Queued, Some("base"), "tier 1 of 2"),
            event(3, 0, Step::Queued, Some("api"), "tier 2 of 2"),
            event(4, 1, Step::Build, Some("base"), "building"),
            event(
                5,
                2,
                Step::Failed,
                Some("base"),
                "RUN returned a non-zero code: 3",
            ),
            event(
                6,
                3,
                Step::Decided,
                Some("api"),
                "refused (no ref) — base base failed",
            ),
            event(7, 4, Step::Finished, None, "converge failed"),
        ];
        let live = fold(&events);
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
        let mut other = event(8, 5, Step::Build, Some("api"), "building");
        other.operation_id = "c2".into();
        live.apply(&other);
        assert!(matches!(live.modules["api"].run, ModuleRun::NotReached(_)));
    }
}
