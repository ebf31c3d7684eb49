//! What an operation's timeline says of the whole: the critical path (the chain of modules whose
//! end decided the total), how busy each builder was, the build time the skips did not spend, and
//! meshtop's own time; and, between two operations, what got slower and why. Pure.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::timeline::{ModuleState, ModuleTimeline, Phase, Span, Timeline};

/// The builder a build without one named ran on: the local daemon.
pub const LOCAL_BUILDER: &str = "local";

/// One builder's share of the operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuilderBusy {
    pub builder: String,
    /// Time at least one build ran on it.
    pub busy_ms: i64,
    /// `busy_ms` of the operation's total, in whole percent.
    pub percent: u32,
}

/// The timeline's one-line account, as the view's header, `converge`'s last line and the
/// `timeline` object of `converge --json` say it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimelineSummary {
    pub operation_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<i64>,
    /// Modules, first to last: each waited on the one before it.
    pub critical_path: Vec<String>,
    /// The chain's own time: each of its modules from its start to its build's end, then
    /// the roll-outs (`rollout_ms`), which wait for every tier.
    pub critical_ms: i64,
    /// The modules whose machines moved, in the order their roll-outs began: the path's tail.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rolled_out: Vec<String>,
    /// Time at least one machine was moving.
    #[serde(skip_serializing_if = "is_zero")]
    pub rollout_ms: i64,
    pub total_ms: i64,
    pub builders: Vec<BuilderBusy>,
    /// Modules a record vouched for (nothing built).
    pub skips: u32,
    /// Each skip counted at its module's median build (as `stats` counts).
    pub saved_ms: i64,
    /// Time no builder, registry or target held any module's work: planning, deciding, stamping.
    pub own_ms: i64,
    /// Still running: the times are up to now.
    pub running: bool,
}

/// `12.3 s`.
pub fn secs(ms: i64) -> String {
    format!("{:.1} s", ms as f64 / 1000.0)
}

impl TimelineSummary {
    /// `critical path base → tools → api 12.3 s of 14.1 s · builders local 71% · 2 skips saved ~4.0 s · meshtop 0.9 s`
    /// With roll-outs the path ends in them, and says what share of the total they took:
    /// `critical path app → roll-out of app 36.0 s of 36.1 s (roll-outs 34.8 s, most of it)`.
    pub fn line(&self) -> String {
        let mut steps = self.critical_path.clone();
        if !self.rolled_out.is_empty() {
            steps.push(format!("roll-out of {}", self.rolled_out.join(", ")));
        }
        let path = if steps.is_empty() {
            "critical path –".to_string()
        } else {
            format!(
                "critical path {} {} of {}{}",
                steps.join(" → "),
                secs(self.critical_ms),
                secs(self.total_ms),
                self.rollout_share()
            )
        };
        let builders = if self.builders.is_empty() {
            "no builds".to_string()
        } else {
            let each: Vec<String> = self
                .builders
                .iter()
                .map(|b| format!("{} {}%", b.builder, b.percent))
                .collect();
            format!("builders {}", each.join(", "))
        };
        format!(
            "{path} · {builders} · {} skip(s) saved ~{} · meshtop {}{}",
            self.skips,
            secs(self.saved_ms),
            secs(self.own_ms),
            if self.running { " · running" } else { "" }
        )
    }
}

impl TimelineSummary {
    /// ` (roll-outs 34.8 s, most of it)`: how much of the total the roll-outs took; empty
    /// without any.
    fn rollout_share(&self) -> String {
        if self.rollout_ms == 0 {
            return String::new();
        }
        let most = if self.rollout_ms * 2 >= self.total_ms {
            ", most of it"
        } else {
            ""
        };
        format!(" (roll-outs {}{most})", secs(self.rollout_ms))
    }
}

fn is_zero(ms: &i64) -> bool {
    *ms == 0
}

/// The roll-outs: the modules whose machines moved (in the order they began) and the time at
/// least one machine was moving.
pub(crate) fn rollouts(timeline: &Timeline, now_ms: i64) -> (Vec<String>, i64) {
    let mut began: Vec<(i64, &str)> = timeline
        .modules
        .iter()
        .filter_map(|m| {
            let first = m.spans.iter().find(|s| s.phase == Phase::Rollout)?;
            Some((first.start_ms, m.name.as_str()))
        })
        .collect();
    began.sort_unstable();
    let spans = timeline
        .modules
        .iter()
        .flat_map(|m| m.spans.iter())
        .filter(|s| s.phase == Phase::Rollout)
        .map(|s| interval(s, now_ms))
        .collect();
    (
        began.into_iter().map(|(_, m)| m.to_string()).collect(),
        covered(spans),
    )
}

/// A module placed on the clock: when it was ready for what builds on it.
struct Placed<'t> {
    module: &'t ModuleTimeline,
    end: i64,
}

fn placed(timeline: &Timeline, now_ms: i64) -> Vec<Placed<'_>> {
    timeline
        .modules
        .iter()
        .filter_map(|module| {
            module.active_start()?;
            Some(Placed {
                module,
                end: module.ready(now_ms)?,
            })
        })
        .collect()
}

/// The critical path: the module ready last (its build ended last; see
/// [`ModuleTimeline::ready`]), then the one it waited on, and so on. A module begins once every
/// module it builds on was delivered (the engine walks the graph, not the tiers), so what it waited
/// on is the one of those ready last (its base when two were ready at once); a module that waited
/// only for a build slot, or builds on nothing of the operation, begins the path.
pub fn critical_path(timeline: &Timeline, now_ms: i64) -> Vec<&ModuleTimeline> {
    let all = placed(timeline, now_ms);
    let last = all.iter().max_by(|a, b| {
        (a.end, a.module.tier)
            .cmp(&(b.end, b.module.tier))
            .then_with(|| b.module.name.cmp(&a.module.name))
    });
    let Some(mut current) = last else {
        return Vec::new();
    };
    let mut path = vec![current.module];
    let mut seen: BTreeSet<&str> = BTreeSet::from([current.module.name.as_str()]);
    loop {
        let builds_on: BTreeSet<&str> = current.module.builds_on().collect();
        let waited_on = all
            .iter()
            .filter(|p| builds_on.contains(p.module.name.as_str()))
            .filter(|p| !seen.contains(p.module.name.as_str()))
            .max_by(|a, b| {
                let is_base =
                    |p: &Placed<'_>| current.module.base.as_deref() == Some(p.module.name.as_str());
                (a.end, is_base(a))
                    .cmp(&(b.end, is_base(b)))
                    .then_with(|| b.module.name.cmp(&a.module.name))
            });
        let Some(previous) = waited_on else { break };
        seen.insert(previous.module.name.as_str());
        path.push(previous.module);
        current = previous;
    }
    path.reverse();
    path
}

/// The length of the union of `intervals` (each `start..end`).
fn covered(mut intervals: Vec<(i64, i64)>) -> i64 {
    intervals.sort_unstable();
    let mut total = 0;
    let mut reach = i64::MIN;
    for (start, end) in intervals {
        let start = start.max(reach);
        if end > start {
            total += end - start;
            reach = end;
        }
    }
    total
}

fn interval(span: &Span, now_ms: i64) -> (i64, i64) {
    (span.start_ms, span.end_or(now_ms))
}

/// How busy each builder was: the time at least one build ran on it, of the operation's total.
pub(crate) fn builders_busy(timeline: &Timeline, now_ms: i64) -> Vec<BuilderBusy> {
    let total = timeline.end_or(now_ms) - timeline.started_ms;
    let mut per: BTreeMap<String, Vec<(i64, i64)>> = BTreeMap::new();
    for module in &timeline.modules {
        for span in module.spans.iter().filter(|s| s.phase == Phase::Build) {
            let builder = span.builder.as_deref().unwrap_or(LOCAL_BUILDER);
            per.entry(builder.to_string())
                .or_default()
                .push(interval(span, now_ms));
        }
    }
    per.into_iter()
        .map(|(builder, spans)| {
            let busy_ms = covered(spans);
            let percent = if total > 0 {
                ((busy_ms * 100 + total / 2) / total).clamp(0, 100) as u32
            } else {
                0
            };
            BuilderBusy {
                builder,
                busy_ms,
                percent,
            }
        })
        .collect()
}

/// meshtop's own time: the operation's total less the time any builder, registry or target held
/// some module's work.
pub fn own_ms(timeline: &Timeline, now_ms: i64) -> i64 {
    let (start, end) = (timeline.started_ms, timeline.end_or(now_ms));
    let outside: Vec<(i64, i64)> = timeline
        .modules
        .iter()
        .flat_map(|m| m.spans.iter())
        .filter(|s| s.phase.is_outside())
        .map(|s| {
            let (a, b) = interval(s, now_ms);
            (a.clamp(start, end), b.clamp(start, end))
        })
        .collect();
    (end - start - covered(outside)).max(0)
}

/// The whole account; `medians` holds each module's median build (`stats`), what a skip saved.
pub fn summarize(
    timeline: &Timeline,
    medians: &BTreeMap<String, i64>,
    now_ms: i64,
) -> TimelineSummary {
    let path = critical_path(timeline, now_ms);
    let (rolled_out, rollout_ms) = rollouts(timeline, now_ms);
    let critical_ms = path
        .iter()
        .filter_map(|m| Some(m.ready(now_ms)? - m.active_start()?))
        .sum::<i64>()
        + rollout_ms;
    let skipped: Vec<&ModuleTimeline> = timeline.modules.iter().filter(|m| m.skipped()).collect();
    TimelineSummary {
        operation_id: timeline.operation_id.clone(),
        operation: timeline.operation,
        critical_path: path.iter().map(|m| m.name.clone()).collect(),
        critical_ms,
        rolled_out,
        rollout_ms,
        total_ms: timeline.end_or(now_ms) - timeline.started_ms,
        builders: builders_busy(timeline, now_ms),
        skips: skipped.len() as u32,
        saved_ms: skipped.iter().filter_map(|m| medians.get(&m.name)).sum(),
        own_ms: own_ms(timeline, now_ms),
        running: timeline.ended_ms.is_none(),
    }
}

/// One module between two operations: how long each took and why it changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleChange {
    pub module: String,
    /// Its own time (deciding, building, delivering, rolling out, without the waits between);
    /// None: it did no work there.
    pub before_ms: Option<i64>,
    pub after_ms: Option<i64>,
    /// `after − before` (0 when either is missing).
    pub delta_ms: i64,
    /// Why, in words: built against skipped, the steps that changed.
    pub why: Vec<String>,
}

impl ModuleChange {
    pub fn line(&self) -> String {
        let side = |ms: Option<i64>| ms.map(secs).unwrap_or_else(|| "–".into());
        format!(
            "{:<16} {:>9}  {} → {}  {}",
            self.module,
            format!("{:+.1} s", self.delta_ms as f64 / 1000.0),
            side(self.before_ms),
            side(self.after_ms),
            self.why.join("; ")
        )
    }
}

/// A module's own time in an operation; None: it did no work there.
fn took(module: &ModuleTimeline) -> Option<i64> {
    module.active_start()?;
    Some(module.own_ms(module.last_ms))
}

/// Step times closer than this are the same for a person (and the clock's noise).
const SAME_MS: i64 = 100;

fn how(module: &ModuleTimeline) -> &'static str {
    match module.state {
        ModuleState::Skipped => "skipped",
        ModuleState::Built => "built",
        ModuleState::Failed => "failed",
        ModuleState::Running => "running",
        ModuleState::Pending => "not reached",
    }
}

/// The steps of a module's builds, by their instruction.
fn steps(module: &ModuleTimeline) -> BTreeMap<&str, &Span> {
    module
        .spans
        .iter()
        .filter(|s| s.phase == Phase::Step)
        .map(|s| (s.label.as_str(), s))
        .collect()
}

fn step_name(step: &Span) -> String {
    match step.step {
        Some((n, m)) => format!("step {n}/{m} {}", step.label),
        None => format!("step {}", step.label),
    }
}

/// The steps that changed most (by their instruction; a step the first build did not have is
/// new), the most slowed first.
fn steps_changed(before: &ModuleTimeline, after: &ModuleTimeline) -> Vec<String> {
    let (old, new) = (steps(before), steps(after));
    let took = |s: &Span| s.duration_ms(s.start_ms);
    let mut changed: Vec<(i64, String)> = new
        .iter()
        .map(|(label, step)| match old.get(label) {
            Some(then) => {
                let cache = match (then.cached, step.cached) {
                    (true, false) => ", ran (was cached)",
                    (false, true) => ", cached (ran before)",
                    _ => "",
                };
                (
                    took(step) - took(then),
                    format!(
                        "{} {} → {}{cache}",
                        step_name(step),
                        secs(took(then)),
                        secs(took(step))
                    ),
                )
            }
            None => (
                took(step),
                format!("new {} {}", step_name(step), secs(took(step))),
            ),
        })
        .filter(|(delta, _)| delta.abs() >= SAME_MS)
        .collect();
    changed.sort_by_key(|(delta, _)| std::cmp::Reverse(*delta));
    changed.into_iter().take(2).map(|(_, text)| text).collect()
}

fn why_changed(before: &ModuleTimeline, after: &ModuleTimeline) -> Vec<String> {
    let (was, is) = (how(before), how(after));
    let mut why = vec![if was != is {
        format!("{is} (was {was})")
    } else {
        format!("{is} both times")
    }];
    why.extend(steps_changed(before, after));
    let (a, b) = (
        before.build_ms(before.last_ms),
        after.build_ms(after.last_ms),
    );
    if a != b && (a > 0 || b > 0) {
        why.push(format!("build {} → {}", secs(a), secs(b)));
    }
    why
}

/// Per module of either operation, what changed from `before` to `after`, the most slowed first.
pub fn compare(before: &Timeline, after: &Timeline) -> Vec<ModuleChange> {
    let mut names: Vec<&str> = after.modules.iter().map(|m| m.name.as_str()).collect();
    for module in &before.modules {
        if !names.contains(&module.name.as_str()) {
            names.push(&module.name);
        }
    }
    let mut changes: Vec<ModuleChange> = names
        .into_iter()
        .map(|name| {
            let (old, new) = (before.module(name), after.module(name));
            let (before_ms, after_ms) = (old.and_then(took), new.and_then(took));
            let why = match (old, new) {
                (Some(old), Some(new)) => why_changed(old, new),
                (None, Some(_)) => vec!["only in the second operation".into()],
                _ => vec!["only in the first operation".into()],
            };
            ModuleChange {
                module: name.to_string(),
                before_ms,
                after_ms,
                delta_ms: match (before_ms, after_ms) {
                    (Some(a), Some(b)) => b - a,
                    _ => 0,
                },
                why,
            }
        })
        .collect();
    changes.sort_by(|a, b| b.delta_ms.cmp(&a.delta_ms).then(a.module.cmp(&b.module)));
    changes
}
