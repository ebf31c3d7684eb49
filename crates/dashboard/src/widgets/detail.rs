//! The detail of the selected module: the why of its address, its base and the base's artifact,
//! what each source answered and when. Enter opens it in full (also for a build or a machine).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;

use crate::app::keys::{Action, Mode};
use crate::app::msg::{RegistryAnswer, SourceId};
use crate::app::state::{AppState, Detail, ModuleInfo};
use crate::mesh::builds::{BuildRow, BuildStatus};
use crate::mesh::cosign::SignatureVerdict;
use crate::mesh::decide::{Decision, HostSays, RegistryHeld, host_says, refusal_detail};
use crate::mesh::text::short_id;
use crate::mesh::why::Change;
use crate::timefmt;

use super::lines::{Palette, build_summary, failed_for_current, put, rule, short_digest};

type Line = (String, Style);

fn answered(state: &AppState, id: SourceId) -> String {
    let status = state.source(id);
    match (&status.error, status.ok_ms) {
        (Some((_, error)), Some(at)) => format!(
            "{} ago; now failing: {error}",
            timefmt::age_since(at, state.now_ms)
        ),
        (Some((_, error)), None) => format!("never answered: {error}"),
        (None, Some(at)) => format!("{} ago", timefmt::age_since(at, state.now_ms)),
        (None, None) => "not yet".into(),
    }
}

/// The lines about a module; `full` lists every changed file.
pub fn module_lines(
    state: &AppState,
    module: &ModuleInfo,
    full: bool,
    palette: Palette,
) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    let planned = state.planned(&module.name);
    plan_lines(state, planned, full, &mut lines, palette);
    // The pin as the history holds it (the plan's decision says it too once it has answered).
    if planned.is_none_or(|p| p.decision != Decision::Pinned)
        && let Some(line) = super::record_history::pin_line(state, &module.name, palette)
    {
        lines.push(line);
    }
    lines.push(base_line(state, module, planned, palette));
    lines.push((
        format!(
            "{} ({})",
            record_line(state, &module.name, full),
            answered(state, SourceId::Record)
        ),
        palette.plain(),
    ));
    let reference = planned.and_then(|p| p.reference.as_deref());
    lines.push((
        format!(
            "{} ({})",
            host_line(state, &module.name, planned, reference),
            answered(state, SourceId::Host)
        ),
        palette.plain(),
    ));
    if state.context.registry.is_some()
        && planned.is_none_or(|p| p.registry_held.is_none())
        && let Some(line) = registry_line(state, &module.name)
    {
        lines.push((line, palette.plain()));
    }
    upstream_lines(state, &module.name, &mut lines, palette);
    if full {
        lines.push((format!("policy: {}", module.policy), palette.plain()));
        lines.extend(super::record_history::lines(state, &module.name, palette));
        operation_and_build_lines(state, &module.name, reference, &mut lines, palette);
    }
    lines
}

/// What the plan says of the module: its why and decision (with `full`, its ref and every changed
/// file), or that it has not answered.
fn plan_lines(
    state: &AppState,
    planned: Option<&crate::mesh::plan::PlannedModule>,
    full: bool,
    lines: &mut Vec<Line>,
    palette: Palette,
) {
    let Some(p) = planned else {
        lines.push((
            format!(
                "why: the plan has not answered ({})",
                answered(state, SourceId::Plan)
            ),
            palette.dim(),
        ));
        return;
    };
    lines.push((format!("why: {}", p.why), palette.plain()));
    lines.push((
        format!("decision: {} — {}", p.decision, p.reason),
        palette.plain(),
    ));
    if let Some(held) = &p.registry_held {
        lines.push(held_line(held, p.decision, palette));
    }
    if full {
        lines.push((
            format!("ref: {}", p.reference.as_deref().unwrap_or("pending")),
            palette.plain(),
        ));
        for change in &p.changes {
            change_lines(change, lines, palette);
        }
    }
}

/// What the target's record holds for the module (its tag and short digest; `full`: the ref).
fn record_line(state: &AppState, module: &str, full: bool) -> String {
    match state.record.as_ref().map(|r| r.get(module)) {
        Some(Some(entry)) if !full => format!(
            "record: {} @{}",
            super::lines::tag_of(&entry.reference),
            short_id(&entry.digest)
        ),
        Some(Some(entry)) => format!(
            "record: {}@{}",
            entry.reference,
            short_digest(&entry.digest)
        ),
        Some(None) => format!("record: holds nothing for {module}"),
        None => "record: –".to_string(),
    }
}

/// What the host holds under the module's ref, and whether it answers for this module.
fn host_line(
    state: &AppState,
    module: &str,
    planned: Option<&crate::mesh::plan::PlannedModule>,
    reference: Option<&str>,
) -> String {
    let inputs = planned
        .and_then(|p| p.inputs.as_ref())
        .map(|i| i.digest.as_str());
    match (&state.host, reference) {
        (Some(images), Some(reference)) => match host_says(images, module, reference, inputs) {
            HostSays::NotVouched(image) => format!(
                "host: ✗ holds {} tagged with the ref, not built here and unsigned: with trust it answers for nothing",
                short_id(&image.id)
            ),
            HostSays::OtherLabels(image) => format!(
                "host: ✗ holds {} tagged with the ref, labelled for another module or other inputs: it answers for nothing",
                short_id(&image.id)
            ),
            HostSays::Answers(image) => {
                format!("host: holds {} tagged with the ref", short_id(&image.id))
            }
            HostSays::Nothing => "host: holds no meshtop-labelled image with this tag".to_string(),
        },
        (Some(_), None) => "host: – (ref pending)".to_string(),
        (None, _) => "host: –".to_string(),
    }
}

/// The module's operation and last build. The detail opens at its end: a build running now ends
/// it with its newest output; otherwise a failure's last words do.
fn operation_and_build_lines(
    state: &AppState,
    module: &str,
    reference: Option<&str>,
    lines: &mut Vec<Line>,
    palette: Palette,
) {
    let operation = super::operation::module_operation_lines(state, module, palette);
    let building_now = state
        .live_running()
        .and_then(|live| live.modules.get(module))
        .is_some_and(|m| !m.run.is_final());
    if !building_now {
        lines.extend(operation.iter().cloned());
    }
    if let Some(build) = state.last_builds.get(module) {
        lines.push((
            format!("last build: {}", build_summary(build, state.now_ms)),
            palette.plain(),
        ));
        failure_lines(build, reference, lines, palette);
    }
    if building_now {
        lines.extend(operation);
    }
}

/// The base and the artifact it resolved to (what `BASE` names).
fn base_line(
    state: &AppState,
    module: &ModuleInfo,
    planned: Option<&crate::mesh::plan::PlannedModule>,
    palette: Palette,
) -> Line {
    match &module.base {
        Some(base) => {
            let base_ref = state
                .planned(base)
                .and_then(|b| b.reference.clone())
                .or_else(|| {
                    state
                        .record
                        .as_ref()
                        .and_then(|r| r.get(base))
                        .map(|e| e.reference.clone())
                });
            let artifact = planned
                .and_then(|p| p.base_artifact.as_deref())
                .map(short_digest);
            let text = match (base_ref, artifact) {
                (Some(r), Some(a)) => format!("base: {base} → {r}@{a}"),
                (Some(r), None) => format!("base: {base} → {r} (artifact pending)"),
                (None, _) => format!("base: {base} (no artifact yet)"),
            };
            (text, palette.plain())
        }
        None => (format!("base: none (tier {})", module.tier), palette.dim()),
    }
}

/// What the registry held under the ref and what its signatures said (the plan's typed answer):
/// refused in the words of the REG column and why; signed, by whom; unverified without trust.
fn held_line(held: &RegistryHeld, decision: Decision, palette: Palette) -> Line {
    let manifest = short_id(&held.manifest);
    if held.refused() {
        return (
            format!(
                "registry: {} — {}: manifest {manifest} (meshtop's labels, these inputs) refused, the module is built",
                held.signature.words(),
                refusal_detail(&held.signature)
            ),
            palette.bad(),
        );
    }
    let vouched = if decision == Decision::Registry {
        "it vouches"
    } else {
        "it vouched, but the module is built (see the decision)"
    };
    match &held.signature {
        SignatureVerdict::Trusted { key } => (
            format!("registry: ✓ signed by {key} — manifest {manifest}: {vouched}"),
            palette.good(),
        ),
        _ => (
            format!(
                "registry: unverified — manifest {manifest}: {vouched}; the mesh trusts no key (`trust` in the mesh file checks signatures)"
            ),
            palette.plain(),
        ),
    }
}

/// Each upstream the module's Dockerfile names: locked, and what its registry served when last asked
/// (moved ones warn, with the key that updates the lock and converges).
fn upstream_lines(state: &AppState, module: &str, lines: &mut Vec<Line>, palette: Palette) {
    let asked = answered(state, SourceId::Upstreams);
    let key = state.keys.keys_text(Mode::Normal, Action::UpdateUpstreams);
    for upstream in state
        .upstreams
        .iter()
        .filter(|u| u.modules.iter().any(|m| m == module))
    {
        let locked = short_digest(&upstream.locked);
        let (said, style) = match (&upstream.current, &upstream.error) {
            (Some(now), _) if upstream.moved() => (
                format!(
                    "upstream {}: locked {locked}, its registry serves {} now — {key} updates mesh.lock and converges ({asked})",
                    upstream.image,
                    short_digest(now)
                ),
                palette.warn(),
            ),
            (Some(_), _) => (
                format!(
                    "upstream {}: locked {locked}, current ({asked})",
                    upstream.image
                ),
                palette.plain(),
            ),
            (None, error) => (
                format!(
                    "upstream {}: locked {locked}; its registry could not say: {} ({asked})",
                    upstream.image,
                    error.as_deref().unwrap_or("no answer")
                ),
                palette.dim(),
            ),
        };
        lines.push((said, style));
    }
}

/// What the registry source answered for the module's planned ref, when the plan holds no answer.
fn registry_line(state: &AppState, module: &str) -> Option<String> {
    let said = match state.registry_answers.get(module)? {
        RegistryAnswer::Published(digest) => {
            format!("registry: holds {} under this ref", short_id(digest))
        }
        RegistryAnswer::Absent => "registry: holds nothing under this ref".to_string(),
        RegistryAnswer::Failed(error) => format!("registry: could not answer: {error}"),
    };
    Some(format!("{said} ({})", answered(state, SourceId::Registry)))
}

/// The last build's failure: in full with the end of its log when it was for the current ref;
/// said plainly to belong to an older ref otherwise.
fn failure_lines(build: &BuildRow, current: Option<&str>, lines: &mut Vec<Line>, palette: Palette) {
    if build.status != BuildStatus::Failed {
        return;
    }
    if !failed_for_current(build, current) {
        lines.push((
            format!(
                "the last failure (build {}) was for an older ref {}; the current ref {} has not failed",
                crate::mesh::text::first_chars(&build.id, 8),
                build.reference.as_deref().unwrap_or("–"),
                current.unwrap_or("(pending)")
            ),
            palette.dim(),
        ));
        return;
    }
    lines.push((
        format!(
            "failed build {} of the current ref:",
            crate::mesh::text::first_chars(&build.id, 8)
        ),
        palette.bad(),
    ));
    // The end of the log, then the error: the detail opens at its end, where they meet.
    if let Some(tail) = &build.log_tail {
        lines.push(("end of its log:".into(), palette.heading()));
        let tail = crate::mesh::text::plain(tail);
        lines.extend(tail.lines().map(|l| (format!("  {l}"), palette.plain())));
    }
    if let Some(error) = &build.error {
        lines.push(("error:".into(), palette.bad()));
        let error = crate::mesh::text::plain(error);
        lines.extend(error.lines().map(|l| (format!("  {l}"), palette.bad())));
    }
}

/// `  base moved: sha256:0123… → sha256:4567…` (`none` on a side without one).
fn moved(what: &str, from: &Option<String>, to: &Option<String>) -> String {
    let short = |d: &Option<String>| d.as_deref().map_or_else(|| "none".into(), short_digest);
    format!("  {what} moved: {} → {}", short(from), short(to))
}

fn change_lines(change: &Change, lines: &mut Vec<Line>, palette: Palette) {
    let mut list = |word: &str, paths: &[String]| {
        lines.push((format!("  {word} ({}):", paths.len()), palette.heading()));
        lines.extend(paths.iter().map(|p| (format!("    {p}"), palette.plain())));
    };
    match change {
        Change::NewModule => lines.push(("  new module: no earlier build".into(), palette.plain())),
        Change::NoEarlierInputs { record, platforms } => {
            lines.push((format!("  not the record's {record}"), palette.plain()));
            lines.push((
                "  this state file holds no earlier inputs of it to compare".into(),
                palette.dim(),
            ));
            if let Some((from, to)) = platforms {
                lines.push((format!("  platforms {from} → {to}"), palette.plain()));
            }
        }
        Change::Forced => lines.push(("  forced".into(), palette.special())),
        Change::Added(paths) => list("added", paths),
        Change::Removed(paths) => list("removed", paths),
        Change::Changed(paths) => list("changed", paths),
        Change::DockerfileChanged => lines.push(("  Dockerfile changed".into(), palette.plain())),
        Change::TargetChanged { from, to } => lines.push((
            format!(
                "  {}",
                crate::mesh::why::target_changed_text(from.as_deref(), to.as_deref())
            ),
            palette.plain(),
        )),
        Change::BaseMoved { from, to } => lines.push((moved("base", from, to), palette.plain())),
        Change::ContextMoved { name, from, to } => lines.push((
            moved(&format!("named context {name}"), from, to),
            palette.plain(),
        )),
        Change::PlatformsChanged { from, to } => {
            lines.push((
                format!("  platforms: {} → {}", from.join(","), to.join(",")),
                palette.plain(),
            ));
        }
        Change::ArgsChanged(names) => lines.push((
            format!("  build args changed: {}", names.join(", ")),
            palette.plain(),
        )),
        Change::UpstreamMoved { image, from, to } => lines.push((
            format!(
                "  {}",
                crate::mesh::why::upstream_moved_text(image, from.as_deref(), to.as_deref())
            ),
            palette.plain(),
        )),
    }
}

fn build_lines(build: &BuildRow, state: &AppState, palette: Palette) -> Vec<Line> {
    let style = if build.status == BuildStatus::Failed {
        palette.bad()
    } else {
        palette.plain()
    };
    let mut lines = vec![
        (
            format!("build {} of {}", build.id, build.subject()),
            palette.heading(),
        ),
        (build_summary(build, state.now_ms), style),
        (
            format!("started {}", utc_time(build.started_ms)),
            palette.plain(),
        ),
        (
            format!("ref: {}", build.reference.as_deref().unwrap_or("–")),
            palette.plain(),
        ),
        (
            format!("digest: {}", build.digest.as_deref().unwrap_or("–")),
            palette.plain(),
        ),
        (
            format!(
                "platforms: {} · forced: {} · why: {}",
                build.platforms, build.forced, build.why
            ),
            palette.plain(),
        ),
    ];
    if let Some(base) = &build.base_module {
        lines.push((
            format!(
                "base: {base} @ {}",
                build.base_digest.as_deref().unwrap_or("–")
            ),
            palette.plain(),
        ));
    }
    if let Some(published) = &build.published_ref {
        lines.push((
            format!(
                "published: {published} @ {}",
                build.published_digest.as_deref().unwrap_or("–")
            ),
            palette.plain(),
        ));
    }
    // The log's end, then the error last: the detail opens at its end, where they meet.
    if let Some(tail) = &build.log_tail {
        lines.push(("log tail:".into(), palette.heading()));
        let tail = crate::mesh::text::plain(tail);
        lines.extend(tail.lines().map(|l| (format!("  {l}"), palette.plain())));
    }
    if let Some(error) = &build.error {
        lines.push(("error:".into(), palette.bad()));
        let error = crate::mesh::text::plain(error);
        lines.extend(error.lines().map(|l| (format!("  {l}"), palette.bad())));
    }
    lines
}

/// `2026-11-29 14:00:00 UTC` (the same on every machine, unlike local time).
fn utc_time(at_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(at_ms).map_or_else(
        || format!("@{at_ms}ms"),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

fn draw_lines(buf: &mut Buffer, area: Rect, lines: &[Line], skip: usize) {
    for (row, (text, style)) in lines
        .iter()
        .skip(skip)
        .take(usize::from(area.height))
        .enumerate()
    {
        put(
            buf,
            area,
            area.x,
            area.y + row as u16,
            usize::from(area.width),
            text,
            *style,
        );
    }
}

/// The compact pane under the modules.
pub fn draw_pane(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    if area.height == 0 || area.width == 0 {
        return;
    }
    let Some(module) = state.selected_module() else {
        rule(buf, area, "detail", false, palette);
        return;
    };
    rule(buf, area, &module.name, false, palette);
    let body = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    draw_lines(buf, body, &module_lines(state, module, false, palette), 0);
}

/// The full detail (Enter): a module, a build with its error and log tail, or a machine.
pub(crate) fn draw_full(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    let (title, lines) = match &state.detail {
        Some(Detail::Module(name)) => match state.modules.iter().find(|m| &m.name == name) {
            Some(module) => (
                format!("detail · {name}"),
                module_lines(state, module, true, palette),
            ),
            None => (
                format!("detail · {name}"),
                vec![("no such module any more".into(), palette.dim())],
            ),
        },
        Some(Detail::Build(id)) => match state
            .builds
            .rows(0, state.builds.len())
            .find(|b| &b.id == id)
        {
            Some(build) => (
                match build.operation_id {
                    // Its operation's timeline is a key away.
                    Some(_) => format!(
                        "build · {} · {}",
                        build.subject(),
                        state.keys.hint_line(Mode::Detail, &[Action::Timeline])
                    ),
                    None => format!("build · {}", build.subject()),
                },
                build_lines(build, state, palette),
            ),
            None => (
                "build".into(),
                vec![("this build left the history window".into(), palette.dim())],
            ),
        },
        Some(Detail::Machine(name)) => match state.machines.iter().find(|m| &m.name == name) {
            Some(machine) => (
                format!("machine · {name}"),
                super::machines::detail_lines(machine, state, palette),
            ),
            None => (
                format!("machine · {name}"),
                vec![("no such machine any more".into(), palette.dim())],
            ),
        },
        Some(Detail::Event(id)) => super::operation::event_lines(state, *id, palette),
        Some(Detail::Gc) => ("gc".into(), super::gc::lines(state, palette)),
        Some(Detail::Stats) => ("stats".into(), super::stats::lines(state, palette)),
        Some(Detail::Timeline(id)) => {
            super::timeline::lines(state, id, usize::from(area.width), palette)
        }
        Some(Detail::Environments) => (
            "environments".into(),
            super::environments::lines(state, palette),
        ),
        None => return,
    };
    let close = state.keys.hint_line(Mode::Detail, &[Action::Close]);
    rule(buf, area, &format!("{title} ({close})"), true, palette);
    if area.height < 2 {
        return;
    }
    let body = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    let lines = if state.detail_wrap {
        wrap(lines, usize::from(body.width))
    } else {
        lines
    };
    // Anchored at the end (a log's last words first); the position is in the title.
    let rows = usize::from(body.height);
    let max_skip = lines.len().saturating_sub(rows);
    let skip = max_skip.saturating_sub(state.detail_scroll);
    let last = (skip + rows).min(lines.len());
    let wrap_hint = state.keys.hint_line(Mode::Detail, &[Action::Wrap]);
    let position = format!("lines {}–{last} of {}", skip + 1, lines.len());
    rule(
        buf,
        area,
        &format!("{title} · {position} · {wrap_hint} ({close})"),
        true,
        palette,
    );
    draw_lines(buf, body, &lines, skip);
}

/// Long lines broken at the width, by characters; a continuation is indented by two spaces.
pub(crate) fn wrap(lines: Vec<Line>, width: usize) -> Vec<Line> {
    if width < 8 {
        return lines;
    }
    let mut out = Vec::with_capacity(lines.len());
    for (text, style) in lines {
        let chars: Vec<char> = text.chars().collect();
        if ratatui::text::Span::raw(text.as_str()).width() <= width {
            out.push((text, style));
            continue;
        }
        let mut rest: &[char] = &chars;
        let mut first = true;
        while !rest.is_empty() {
            let room = if first { width } else { width - 2 };
            let take = room.min(rest.len());
            let piece: String = rest[..take].iter().collect();
            out.push((if first { piece } else { format!("  {piece}") }, style));
            rest = &rest[take..];
            first = false;
        }
    }
    out
}
