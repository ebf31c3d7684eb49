//! An operation's timeline: per module, its phases with their times (queued, waiting on its base,
//! deciding, each build step, push or delivery, roll-out) and the builder it ran on, folded from the
//! progress steps the engine emits. Pure: the caller brings each step's time. The same fold runs
//! where the steps are emitted (the recording kept in the state database) and where they are
//! followed (the dashboard's live view), so both draw the same bars. What the timeline says of the
//! whole (the critical path, builders busy, skips saved, meshtop's own time) is in
//! [`super::timeline_summary`].

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::decide::Decision;
use super::progress::{DeliveredBy, EventRow, Payload};

/// A module keeps at most this many spans (a Dockerfile of hundreds of steps keeps its first ones
/// and counts the rest), so a recording stays bounded.
pub(crate) const MAX_SPANS_PER_MODULE: usize = 200;
/// What a module decided to build waits for until its build begins, said on its decide span.
pub const WAITING_FOR_A_SLOT: &str = "waiting for a build slot";
/// A step's label keeps at most this many characters.
const STEP_LABEL_CHARS: usize = 60;

/// What a module was doing in a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Announced, while the converge planned (before its first tier began).
    Queued,
    /// Waiting for what it builds on (its base, its named contexts) to be delivered.
    Waiting,
    /// What it builds on was delivered: decided again, then waiting for a build slot (or skipped).
    Decide,
    /// Built on a builder: from the build's row to its end.
    Build,
    /// One step of the Dockerfile, inside its build.
    Step,
    /// Pushed to a registry (published, a hand-over, a Kubernetes delivery, signed).
    Push,
    /// Brought to the target otherwise (on the host already, pulled, `kind load`).
    Deliver,
    /// A machine moved to the new artifact.
    Rollout,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Queued => "queued",
            Phase::Waiting => "waiting",
            Phase::Decide => "decide",
            Phase::Build => "build",
            Phase::Step => "step",
            Phase::Push => "push",
            Phase::Deliver => "deliver",
            Phase::Rollout => "rollout",
        }
    }

    /// Whether an outside system (a builder, a registry, the target) holds the work in this phase:
    /// the time it does not is meshtop's own.
    pub(crate) fn is_outside(self) -> bool {
        matches!(
            self,
            Phase::Build | Phase::Step | Phase::Push | Phase::Deliver | Phase::Rollout
        )
    }

    /// Whether the module is at work (not waiting for the converge or for earlier tiers).
    pub(crate) fn is_active(self) -> bool {
        !matches!(self, Phase::Queued | Phase::Waiting)
    }
}

/// One phase of one module: from `start_ms` to `end_ms` (None while it runs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub phase: Phase,
    pub start_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<i64>,
    /// The builder a build (or its step) ran on; None: the local daemon of a mesh without builders.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub builder: Option<String>,
    /// A step's place in the Dockerfile (`2/4`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<(u32, u32)>,
    /// A step the builder's cache answered.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
    /// What it is: a step's instruction, the machine moved, how it was delivered, why a build was
    /// put back.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
}

impl Span {
    fn open(phase: Phase, start_ms: i64) -> Span {
        Span {
            phase,
            start_ms,
            end_ms: None,
            builder: None,
            step: None,
            cached: false,
            label: String::new(),
        }
    }

    /// Its end, or `now_ms` while it runs (never before its start).
    pub fn end_or(&self, now_ms: i64) -> i64 {
        self.end_ms.unwrap_or(now_ms).max(self.start_ms)
    }

    pub fn duration_ms(&self, now_ms: i64) -> i64 {
        self.end_or(now_ms) - self.start_ms
    }
}

/// How a module's part ended, as far as the timeline knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModuleState {
    /// Announced, not reached yet (or never: the converge stopped first).
    #[default]
    Pending,
    /// At work.
    Running,
    /// Built (and delivered, when the target needs it).
    Built,
    /// Skipped: a record vouched.
    Skipped,
    Failed,
}

/// One module's timeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleTimeline {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    /// The module it builds FROM, when the caller knows the mesh (the steps do not say it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// The modules of the mesh it builds on by a named context (the caller fills them as `base`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contexts: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    #[serde(default)]
    pub state: ModuleState,
    /// Its spans, oldest first; a step span lies inside its build span.
    pub spans: Vec<Span>,
    /// Spans left out past [`MAX_SPANS_PER_MODULE`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped: u32,
    /// When the module was last heard of (where spans still open are closed when the operation ends).
    #[serde(default)]
    pub last_ms: i64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl ModuleTimeline {
    /// The modules it builds on: its base, then its named contexts' modules.
    pub fn builds_on(&self) -> impl Iterator<Item = &str> {
        self.base
            .iter()
            .chain(self.contexts.iter())
            .map(String::as_str)
    }

    /// When it began its work (what it builds on delivered), if it did.
    pub fn active_start(&self) -> Option<i64> {
        self.spans
            .iter()
            .find(|s| s.phase.is_active())
            .map(|s| s.start_ms)
    }

    /// When its last span ended (or `now_ms` when one still runs).
    pub fn end(&self, now_ms: i64) -> Option<i64> {
        self.spans.iter().map(|s| s.end_or(now_ms)).max()
    }

    /// When it was ready for what waited on it: its last build's end (a tier delivers its
    /// modules one after another once all its builds ended, so a delivery's end says more of the
    /// tier's order than of the module), else its last span's end before its roll-outs (which
    /// come after every tier, and are counted on their own).
    pub(crate) fn ready(&self, now_ms: i64) -> Option<i64> {
        self.spans
            .iter()
            .rev()
            .find(|s| s.phase == Phase::Build)
            .map(|s| s.end_or(now_ms))
            .or_else(|| {
                self.spans
                    .iter()
                    .filter(|s| s.phase != Phase::Rollout)
                    .map(|s| s.end_or(now_ms))
                    .max()
            })
    }

    /// The builder its (last) build ran on.
    pub fn builder(&self) -> Option<&str> {
        self.spans
            .iter()
            .rev()
            .find(|s| s.phase == Phase::Build)
            .and_then(|s| s.builder.as_deref())
    }

    /// Its own time: its phases at work (deciding, building, delivering, rolling out), without
    /// the waits between them.
    pub fn own_ms(&self, now_ms: i64) -> i64 {
        self.spans
            .iter()
            .filter(|s| s.phase.is_active() && s.phase != Phase::Step)
            .map(|s| s.duration_ms(now_ms))
            .sum()
    }

    /// How long its builds took (closed ones; an open one up to `now_ms`).
    pub(crate) fn build_ms(&self, now_ms: i64) -> i64 {
        self.spans
            .iter()
            .filter(|s| s.phase == Phase::Build)
            .map(|s| s.duration_ms(now_ms))
            .sum()
    }

    /// Whether a record vouched and nothing was built.
    pub(crate) fn skipped(&self) -> bool {
        self.state == ModuleState::Skipped
    }

    fn push_span(&mut self, span: Span) {
        if self.spans.len() < MAX_SPANS_PER_MODULE {
            self.spans.push(span);
        } else {
            self.dropped += 1;
        }
    }

    /// Close the newest open span of one of `phases` at `at_ms`.
    fn close(&mut self, phases: &[Phase], at_ms: i64) -> bool {
        match self
            .spans
            .iter_mut()
            .rev()
            .find(|s| s.end_ms.is_none() && phases.contains(&s.phase))
        {
            Some(span) => {
                span.end_ms = Some(at_ms.max(span.start_ms));
                true
            }
            None => false,
        }
    }

    fn close_all(&mut self, at_ms: i64) {
        for span in self.spans.iter_mut().filter(|s| s.end_ms.is_none()) {
            span.end_ms = Some(at_ms.max(span.start_ms));
        }
    }

    fn open_step(&mut self) -> Option<&mut Span> {
        self.spans
            .iter_mut()
            .rev()
            .find(|s| s.phase == Phase::Step && s.end_ms.is_none())
    }
}

/// One operation's timeline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeline {
    pub operation_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<i64>,
    pub started_ms: i64,
    /// None while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_ms: Option<i64>,
    /// When its first tier began (before it: planning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_tier_ms: Option<i64>,
    /// In the order they were announced.
    pub modules: Vec<ModuleTimeline>,
    /// Whether a step was folded yet (its time is the start until `started` says one); a
    /// timeline read back has begun.
    #[serde(skip, default = "begun")]
    begun: bool,
    /// When the engine last finished a piece of some module's work (a build, a delivery): a tier
    /// delivers its modules one after another once its builds ended, so a delivery began no
    /// earlier than this.
    #[serde(skip)]
    last_done_ms: i64,
    /// Where each module is in `modules`: a folded step finds its module in one lookup, not a
    /// scan (a converge of 10,000 modules folds tens of thousands of steps).
    #[serde(skip)]
    index: ModuleIndex,
}

fn begun() -> bool {
    true
}

/// A module's place in [`Timeline::modules`] by name; rebuilt when out of step with them (a
/// timeline read back, or modules pushed from outside). Not part of what a timeline says: two
/// timelines are equal whatever their indexes hold.
#[derive(Debug, Clone, Default)]
struct ModuleIndex(HashMap<String, usize>);

impl PartialEq for ModuleIndex {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl Eq for ModuleIndex {}

impl Timeline {
    pub fn new(operation_id: &str, operation: Option<i64>) -> Timeline {
        Timeline {
            operation_id: operation_id.to_string(),
            operation,
            ..Timeline::default()
        }
    }

    /// Fold the stored steps of one operation (the first row names it).
    pub fn from_events<'e>(events: impl IntoIterator<Item = &'e EventRow>) -> Timeline {
        let mut timeline: Option<Timeline> = None;
        for event in events {
            let t =
                timeline.get_or_insert_with(|| Timeline::new(&event.operation_id, event.operation));
            if event.operation_id != t.operation_id {
                continue;
            }
            if let Some(payload) = &event.payload {
                t.fold(event.at_ms, event.module.as_deref(), payload, &event.text);
            }
        }
        timeline.unwrap_or_default()
    }

    pub fn module(&self, name: &str) -> Option<&ModuleTimeline> {
        self.modules.iter().find(|m| m.name == name)
    }

    /// Where the operation ends: its end, or `now_ms` while it runs.
    pub fn end_or(&self, now_ms: i64) -> i64 {
        self.ended_ms.unwrap_or(now_ms).max(self.started_ms)
    }

    /// Fill each module's base and named contexts from the mesh (the steps do not carry them).
    pub fn with_bases(mut self, mesh: &super::model::Mesh) -> Timeline {
        let by_name: HashMap<&str, &super::model::Module> = (mesh.modules.iter())
            .map(|m| (m.name.as_str(), m))
            .collect();
        for module in &mut self.modules {
            let of = by_name.get(module.name.as_str());
            module.base = of.and_then(|m| m.base.clone());
            module.contexts = of.map_or_else(Vec::new, |m| m.contexts.values().cloned().collect());
        }
        self
    }

    fn entry(&mut self, name: &str, at_ms: i64) -> &mut ModuleTimeline {
        let stale = self.index.0.len() != self.modules.len()
            || self
                .index
                .0
                .get(name)
                .is_some_and(|&i| self.modules.get(i).is_none_or(|m| m.name != name));
        if stale {
            self.index.0 = (self.modules.iter().enumerate())
                .map(|(i, m)| (m.name.clone(), i))
                .collect();
        }
        let index = match self.index.0.get(name) {
            Some(&index) => index,
            None => {
                self.modules.push(ModuleTimeline {
                    name: name.to_string(),
                    ..ModuleTimeline::default()
                });
                self.index
                    .0
                    .insert(name.to_string(), self.modules.len() - 1);
                self.modules.len() - 1
            }
        };
        let module = &mut self.modules[index];
        module.last_ms = module.last_ms.max(at_ms);
        module
    }

    /// Take in one step, at `at_ms`: `module` and `payload` as the engine emitted them, `text` the
    /// builder's line for an output step.
    pub fn fold(&mut self, at_ms: i64, module: Option<&str>, payload: &Payload, text: &str) {
        if !self.begun {
            self.begun = true;
            self.started_ms = at_ms;
        }
        match (payload, module) {
            (Payload::Started { .. }, _) => self.started_ms = self.started_ms.min(at_ms),
            (Payload::Tier { tier, modules }, _) => self.tier_began(at_ms, *tier, modules),
            (Payload::Finished { .. }, _) => self.finished(at_ms),
            (_, Some(name)) => self.module_step(at_ms, name, payload, text),
            _ => {}
        }
    }

    fn tier_began(&mut self, at_ms: i64, tier: u32, names: &[String]) {
        if self.first_tier_ms.is_none() {
            self.first_tier_ms = Some(at_ms);
            for module in self.modules.iter_mut().filter(|m| !names.contains(&m.name)) {
                if module.close(&[Phase::Queued], at_ms) {
                    module.push_span(Span::open(Phase::Waiting, at_ms));
                }
            }
        }
        for name in names {
            let module = self.entry(name, at_ms);
            module.tier = Some(tier);
            module.close(&[Phase::Queued, Phase::Waiting], at_ms);
            module.state = ModuleState::Running;
            module.push_span(Span::open(Phase::Decide, at_ms));
        }
    }

    fn module_step(&mut self, at_ms: i64, name: &str, payload: &Payload, text: &str) {
        let done_before = self.last_done_ms;
        if matches!(
            payload,
            Payload::Built { .. }
                | Payload::Failed { .. }
                | Payload::Delivered { .. }
                | Payload::Requeued { .. }
                | Payload::Created { .. }
                | Payload::Sent { .. }
        ) {
            self.last_done_ms = self.last_done_ms.max(at_ms);
        }
        let module = self.entry(name, at_ms);
        match payload {
            Payload::Queued { .. } if module.spans.is_empty() => {
                module.push_span(Span::open(Phase::Queued, at_ms));
            }
            Payload::Decided { decision, .. } => decided(module, at_ms, *decision),
            Payload::Refused => {
                module.close_all(at_ms);
                module.state = ModuleState::Failed;
            }
            Payload::Build { builder, .. } => {
                module.close(&[Phase::Decide, Phase::Deliver], at_ms);
                let mut span = Span::open(Phase::Build, at_ms);
                span.builder = builder.clone();
                module.push_span(span);
                module.state = ModuleState::Running;
            }
            Payload::Output { builder_step } => output(module, at_ms, *builder_step, text),
            Payload::Built { .. } => {
                module.close(&[Phase::Step], at_ms);
                module.close(&[Phase::Build], at_ms);
                module.state = ModuleState::Built;
                module.push_span(Span::open(Phase::Deliver, at_ms));
            }
            Payload::Failed { error } => {
                module.close(&[Phase::Step], at_ms);
                module.close(&[Phase::Build, Phase::Decide, Phase::Deliver], at_ms);
                if let Some(span) = module.spans.last_mut()
                    && span.label.is_empty()
                {
                    span.label = clip(error);
                }
                module.state = ModuleState::Failed;
            }
            Payload::Requeued { from, error } => {
                module.close(&[Phase::Step], at_ms);
                if let Some(span) = module
                    .spans
                    .iter_mut()
                    .rev()
                    .find(|s| s.phase == Phase::Build && s.end_ms.is_none())
                {
                    span.end_ms = Some(at_ms.max(span.start_ms));
                    span.label = clip(&format!("put back: {from} failed it ({error})"));
                }
            }
            Payload::Delivered { by, .. } => delivered(module, at_ms, done_before, by),
            // Machines are created one after another once the record is stamped.
            Payload::Created { machine, .. } => {
                let mut span = Span::open(Phase::Rollout, done_before.clamp(0, at_ms));
                span.end_ms = Some(at_ms);
                span.label = format!("created {machine}");
                module.push_span(span);
            }
            Payload::Send { machine, .. } => {
                let mut span = Span::open(Phase::Rollout, at_ms);
                span.label = machine.clone();
                module.push_span(span);
            }
            Payload::Sent {
                machine: Some(machine),
                ..
            } => {
                if let Some(span) = module.spans.iter_mut().rev().find(|s| {
                    s.phase == Phase::Rollout && s.end_ms.is_none() && &s.label == machine
                }) {
                    span.end_ms = Some(at_ms.max(span.start_ms));
                }
            }
            _ => {}
        }
    }

    fn finished(&mut self, at_ms: i64) {
        self.ended_ms = Some(at_ms.max(self.started_ms));
        for module in &mut self.modules {
            // A delivery nobody announced (a record skip delivers nothing) ends where it began.
            module.spans.retain(|s| {
                !(s.end_ms.is_none() && s.phase == Phase::Deliver && module.last_ms <= s.start_ms)
            });
            let last = module.last_ms;
            module.close_all(last);
            if module.state == ModuleState::Running {
                module.state = ModuleState::Failed;
            }
        }
    }
}

fn decided(module: &mut ModuleTimeline, at_ms: i64, decision: Decision) {
    module.decision = Some(decision);
    // Decided while queued: the plan's first word; it is decided again once it is ready.
    let Some(deciding) = (module.spans.iter_mut())
        .rev()
        .find(|s| s.phase == Phase::Decide && s.end_ms.is_none())
    else {
        return;
    };
    match decision {
        // Until its build begins it waits for a build slot (what it builds on is delivered).
        Decision::Build | Decision::Forced => deciding.label = WAITING_FOR_A_SLOT.to_string(),
        Decision::Record | Decision::Pinned => {
            module.close(&[Phase::Decide], at_ms);
            module.state = ModuleState::Skipped;
        }
        Decision::Host | Decision::Registry => {
            module.close(&[Phase::Decide], at_ms);
            module.state = ModuleState::Skipped;
            module.push_span(Span::open(Phase::Deliver, at_ms));
        }
        Decision::Refused => {
            module.close(&[Phase::Decide], at_ms);
            module.state = ModuleState::Failed;
        }
    }
}

fn output(module: &mut ModuleTimeline, at_ms: i64, step: Option<(u32, u32)>, text: &str) {
    match step {
        // BuildKit says a step's place again as its lines resume: the same step goes on.
        Some(place) if module.open_step().is_some_and(|s| s.step == Some(place)) => {}
        Some(place) => {
            module.close(&[Phase::Step], at_ms);
            let builder = module.builder().map(str::to_string);
            let mut span = Span::open(Phase::Step, at_ms);
            span.step = Some(place);
            span.builder = builder;
            span.label = clip(instruction(text));
            module.push_span(span);
        }
        None if says_cached(text) => {
            if let Some(span) = module.open_step() {
                span.cached = true;
            }
        }
        None => {}
    }
}

/// A delivery ended at `at_ms`; it began when its module was ready, or after the work the engine
/// finished before it (`done_before`), whichever came last.
fn delivered(module: &mut ModuleTimeline, at_ms: i64, done_before: i64, by: &DeliveredBy) {
    let phase = match by {
        DeliveredBy::Published { .. } | DeliveredBy::Pushed { .. } | DeliveredBy::Signed { .. } => {
            Phase::Push
        }
        _ => Phase::Deliver,
    };
    let label = match by {
        DeliveredBy::OnHost => "on the host",
        DeliveredBy::Published { .. } => "published",
        DeliveredBy::Pushed { .. } => "pushed",
        DeliveredBy::Pulled { .. } => "pulled",
        DeliveredBy::Loaded { .. } => "kind load",
        DeliveredBy::InRegistry { .. } => "in the registry",
        DeliveredBy::Signed { .. } => "signed",
    };
    let open = module
        .spans
        .iter_mut()
        .rev()
        .find(|s| s.end_ms.is_none() && matches!(s.phase, Phase::Deliver | Phase::Push));
    match open {
        Some(span) => {
            span.phase = phase;
            span.label = label.to_string();
            span.start_ms = span.start_ms.max(done_before.min(at_ms));
            span.end_ms = Some(at_ms.max(span.start_ms));
        }
        None => {
            // A second delivery word (signed, then pushed): from the module's previous word.
            let start = module
                .spans
                .iter()
                .filter_map(|s| s.end_ms)
                .max()
                .unwrap_or(at_ms);
            let mut span = Span::open(phase, start.min(at_ms));
            span.label = label.to_string();
            span.end_ms = Some(at_ms);
            module.push_span(span);
        }
    }
    if module.state == ModuleState::Running {
        module.state = ModuleState::Built;
    }
}

/// The instruction of a builder's step line: `Step 2/4 : RUN make` → `RUN make`,
/// `#7 [2/4] RUN make` → `RUN make`.
fn instruction(line: &str) -> &str {
    if let Some((_, rest)) = line.split_once(" : ") {
        return rest.trim();
    }
    match line.find(']') {
        Some(close) => line[close + 1..].trim(),
        None => line.trim(),
    }
}

/// Whether a builder's line says the step came from its cache: the classic builder's
/// ` ---> Using cache`, BuildKit's `#7 CACHED`.
fn says_cached(line: &str) -> bool {
    let line = line.trim();
    line.ends_with("Using cache") || line.ends_with(" CACHED") || line == "CACHED"
}

fn clip(text: &str) -> String {
    let mut clipped: String = text.chars().take(STEP_LABEL_CHARS).collect();
    if text.chars().count() > STEP_LABEL_CHARS {
        clipped.push('…');
    }
    clipped
}

#[cfg(test)]
#[path = "timeline_tests.rs"]
mod tests;
