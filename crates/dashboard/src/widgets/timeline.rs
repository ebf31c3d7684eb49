//! The timeline view (in the detail overlay): modules down, time across, a bar per phase, the
//! critical path marked; the summary line above (critical path, builders busy, skips saved,
//! meshtop's own time) and each module's phases in words below. Drawing only.

use ratatui::style::Style;

use crate::app::state::AppState;
use crate::mesh::timeline::{
    ModuleState, ModuleTimeline, Phase, Span, Timeline, WAITING_FOR_A_SLOT,
};
use crate::mesh::timeline_summary::{TimelineSummary, critical_path, secs, summarize};

use super::lines::Palette;

type Line = (String, Style);

/// The legend under the bars: what each mark means.
pub(crate) const LEGEND: &str = "· waiting  ▒ deciding  █▓ build steps  ░ cached step  ▸ push/deliver  » roll-out  * critical path";

/// The view's title and lines for the operation `operation_id`, `width` cells wide.
pub(crate) fn lines(
    state: &AppState,
    operation_id: &str,
    width: usize,
    palette: Palette,
) -> (String, Vec<Line>) {
    let view = &state.views.timeline;
    let timeline = crate::app::timeline::shown(state, operation_id);
    let label = |t: &Timeline| crate::mesh::progress::operation_label(t.operation, operation_id);
    let Some(timeline) = timeline else {
        let said = match (&view.result, view.loading) {
            (Some(Err(error)), _) => (format!("cannot read the timeline: {error}"), palette.bad()),
            (_, true) => ("reading the timeline…".into(), palette.dim()),
            _ => ("no steps of this operation are kept".into(), palette.dim()),
        };
        return ("timeline".into(), vec![said]);
    };
    let medians = match &view.result {
        Some(Ok(read)) => read.medians.clone(),
        _ => Default::default(),
    };
    let summary = summarize(&timeline, &medians, state.now_ms);
    let title = format!("timeline · {}", label(&timeline));
    (
        title,
        timeline_lines(&timeline, &summary, state.now_ms, width, palette),
    )
}

/// The view's lines for a timeline and its summary, open spans drawn up to `now_ms`.
pub(crate) fn timeline_lines(
    timeline: &Timeline,
    summary: &TimelineSummary,
    now_ms: i64,
    width: usize,
    palette: Palette,
) -> Vec<Line> {
    // The account's one line, broken before the builders so that it reads on a narrow screen.
    let line = summary.line();
    let mut lines: Vec<Line> = match line.split_once(" · builders") {
        Some((path, rest)) => vec![
            (path.to_string(), palette.heading()),
            (format!("builders{rest}"), palette.heading()),
        ],
        None => vec![(line, palette.heading())],
    };
    if timeline.modules.is_empty() {
        lines.push(("no module steps in this operation".into(), palette.dim()));
        return lines;
    }
    let critical: Vec<&str> = critical_path(timeline, now_ms)
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    let name_width = timeline
        .modules
        .iter()
        .map(|m| m.name.chars().count())
        .max()
        .unwrap_or(0)
        .clamp(4, 16);
    // `* name   12.3 s ` then the bars.
    let prefix = 2 + name_width + 1 + 7 + 1;
    let cols = width.saturating_sub(prefix + 1).max(10);
    let (start, end) = (timeline.started_ms, timeline.end_or(now_ms));
    let total = (end - start).max(1);
    lines.push((axis(prefix, cols, total), palette.dim()));
    for module in &timeline.modules {
        let on_path = critical.contains(&module.name.as_str());
        let took = module
            .end(now_ms)
            .zip(module.active_start())
            .map(|(e, s)| secs(e - s))
            .unwrap_or_else(|| "–".into());
        let text = format!(
            "{} {:<name_width$} {took:>7} {}",
            if on_path { '*' } else { ' ' },
            clip(&module.name, name_width),
            bar(module, start, total, cols, now_ms)
        );
        let style = match (module.state, on_path) {
            (ModuleState::Failed, _) => palette.bad(),
            (_, true) => palette.warn(),
            _ => palette.plain(),
        };
        lines.push((text, style));
    }
    lines.push((LEGEND.to_string(), palette.dim()));
    lines.push((String::new(), palette.plain()));
    for module in &timeline.modules {
        lines.push((phases_text(module, now_ms), palette.plain()));
    }
    lines
}

fn clip(text: &str, width: usize) -> String {
    text.chars().take(width).collect()
}

/// `0 s` under the bars' start, the total under their end.
fn axis(prefix: usize, cols: usize, total_ms: i64) -> String {
    let end = secs(total_ms);
    let room = cols.saturating_sub(3 + end.chars().count());
    format!("{:prefix$}0 s{:room$}{end}", "", "")
}

/// Which mark a span draws, and how much it weighs when spans share a cell (the work wins).
fn mark(span: &Span) -> (char, u8) {
    match span.phase {
        Phase::Queued => (' ', 0),
        Phase::Waiting => ('·', 1),
        Phase::Decide => ('▒', 2),
        Phase::Rollout => ('»', 3),
        Phase::Push | Phase::Deliver => ('▸', 4),
        Phase::Build => ('█', 5),
        Phase::Step if span.cached => ('░', 6),
        // Steps alternate their shade, so that each one shows where it ends.
        Phase::Step => match span.step {
            Some((n, _)) if n % 2 == 0 => ('▓', 6),
            _ => ('█', 6),
        },
    }
}

/// A module's bar: each cell is `total / cols` of the operation; a span marks every cell it
/// touches (a short one still shows), the heaviest mark winning a shared cell.
fn bar(module: &ModuleTimeline, start: i64, total: i64, cols: usize, now_ms: i64) -> String {
    let mut cells: Vec<(char, u8)> = vec![(' ', 0); cols];
    let cell_of = |ms: i64| -> usize {
        let offset = (ms - start).clamp(0, total);
        ((offset as i128 * cols as i128 / total as i128) as usize).min(cols - 1)
    };
    for span in &module.spans {
        let (glyph, weight) = mark(span);
        if weight == 0 {
            continue;
        }
        let (first, last) = (cell_of(span.start_ms), cell_of(span.end_or(now_ms)));
        for cell in &mut cells[first..=last.max(first)] {
            if weight >= cell.1 {
                *cell = (glyph, weight);
            }
        }
    }
    cells.into_iter().map(|(glyph, _)| glyph).collect()
}

/// `tools  tier 1 · built on local · waiting 0.1 s · build 8.1 s (2 steps, 1 cached; longest 2/2 RUN slow 8.0 s) · deliver 0.0 s`
fn phases_text(module: &ModuleTimeline, now_ms: i64) -> String {
    let mut parts = vec![module.name.clone()];
    if let Some(tier) = module.tier {
        parts.push(format!("tier {tier}"));
    }
    let state = match module.state {
        ModuleState::Pending => "not reached".to_string(),
        ModuleState::Running => "running".to_string(),
        ModuleState::Skipped => format!(
            "skipped ({})",
            module.decision.map_or("record", |d| d.as_str())
        ),
        ModuleState::Built => match module.builder() {
            Some(builder) => format!("built on {builder}"),
            None => "built".to_string(),
        },
        ModuleState::Failed => "failed".to_string(),
    };
    parts.push(state);
    for phase in [
        Phase::Waiting,
        Phase::Decide,
        Phase::Build,
        Phase::Push,
        Phase::Deliver,
        Phase::Rollout,
    ] {
        let spans: Vec<&Span> = module.spans.iter().filter(|s| s.phase == phase).collect();
        if spans.is_empty() {
            continue;
        }
        let ms: i64 = spans.iter().map(|s| s.duration_ms(now_ms)).sum();
        let mut text = format!("{} {}", phase_words(module, phase, &spans), secs(ms));
        if phase == Phase::Build {
            text.push_str(&steps_text(module, now_ms));
        }
        parts.push(text);
    }
    parts.join(" · ")
}

/// What a phase is called on a module's line: what it waited on (`waiting on base, lib`), and a
/// build slot said as such (`decide, then a build slot`).
fn phase_words(module: &ModuleTimeline, phase: Phase, spans: &[&Span]) -> String {
    let on: Vec<&str> = module.builds_on().collect();
    match phase {
        Phase::Waiting if !on.is_empty() => format!("waiting on {}", on.join(", ")),
        Phase::Decide if spans.iter().any(|s| s.label == WAITING_FOR_A_SLOT) => {
            "decide, then a build slot".to_string()
        }
        _ => phase.as_str().to_string(),
    }
}

/// ` (2 steps, 1 cached; longest 2/2 RUN slow 8.0 s)`, or nothing without steps.
fn steps_text(module: &ModuleTimeline, now_ms: i64) -> String {
    let steps: Vec<&Span> = module
        .spans
        .iter()
        .filter(|s| s.phase == Phase::Step)
        .collect();
    let Some(longest) = steps.iter().max_by_key(|s| s.duration_ms(now_ms)) else {
        return String::new();
    };
    let cached = steps.iter().filter(|s| s.cached).count();
    let (n, m) = longest.step.unwrap_or((0, 0));
    format!(
        " ({} steps, {cached} cached; longest {n}/{m} {} {})",
        steps.len(),
        longest.label,
        secs(longest.duration_ms(now_ms))
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::collections::BTreeMap;

    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::text::{Line as TextLine, Text};
    use ratatui::widgets::Paragraph;

    use super::*;
    use crate::mesh::decide::Decision;
    use crate::mesh::timeline::ModuleTimeline;

    fn span(phase: Phase, start_ms: i64, end_ms: i64) -> Span {
        Span {
            phase,
            start_ms,
            end_ms: Some(end_ms),
            builder: None,
            step: None,
            cached: false,
            label: String::new(),
        }
    }

    fn step(n: u32, m: u32, start_ms: i64, end_ms: i64, cached: bool, label: &str) -> Span {
        Span {
            step: Some((n, m)),
            cached,
            label: label.into(),
            builder: Some("farm-1".into()),
            ..span(Phase::Step, start_ms, end_ms)
        }
    }

    fn waiting_for_a_slot(mut decide: Span) -> Span {
        decide.label = WAITING_FOR_A_SLOT.into();
        decide
    }

    fn module(name: &str, tier: u32, state: ModuleState, spans: Vec<Span>) -> ModuleTimeline {
        ModuleTimeline {
            name: name.into(),
            tier: Some(tier),
            base: None,
            contexts: Vec::new(),
            decision: Some(if state == ModuleState::Skipped {
                Decision::Record
            } else {
                Decision::Build
            }),
            state,
            last_ms: spans.iter().filter_map(|s| s.end_ms).max().unwrap_or(0),
            spans,
            dropped: 0,
        }
    }

    /// base skipped; tools slow on farm-1; web fast; api after tools.
    fn fixed() -> Timeline {
        let on = |mut s: Span, builder: &str| {
            s.builder = Some(builder.into());
            s
        };
        let mut timeline = Timeline::new("0192-op", Some(42));
        timeline.ended_ms = Some(14_100);
        timeline.first_tier_ms = Some(300);
        timeline.modules = vec![
            module(
                "base",
                0,
                ModuleState::Skipped,
                vec![span(Phase::Queued, 0, 300), span(Phase::Decide, 300, 400)],
            ),
            module(
                "tools",
                1,
                ModuleState::Built,
                vec![
                    span(Phase::Queued, 0, 300),
                    span(Phase::Waiting, 300, 450),
                    waiting_for_a_slot(span(Phase::Decide, 450, 600)),
                    on(span(Phase::Build, 600, 9_000), "farm-1"),
                    step(1, 3, 650, 700, true, "FROM scratch"),
                    step(2, 3, 700, 800, true, "COPY busybox /bin/busybox"),
                    step(3, 3, 800, 9_000, false, "RUN busybox sh -c 'slow'"),
                    span(Phase::Push, 9_000, 9_800),
                ],
            ),
            module(
                "web",
                1,
                ModuleState::Built,
                vec![
                    span(Phase::Queued, 0, 300),
                    span(Phase::Waiting, 300, 450),
                    span(Phase::Decide, 450, 600),
                    on(span(Phase::Build, 600, 2_000), "local"),
                    span(Phase::Deliver, 2_000, 2_100),
                ],
            ),
            module(
                "api",
                2,
                ModuleState::Built,
                vec![
                    span(Phase::Queued, 0, 300),
                    span(Phase::Waiting, 300, 9_900),
                    span(Phase::Decide, 9_900, 10_000),
                    on(span(Phase::Build, 10_000, 13_500), "farm-1"),
                    span(Phase::Push, 13_500, 13_600),
                    span(Phase::Rollout, 13_600, 14_000),
                ],
            ),
        ];
        // The mesh's graph, as the app fills it: tools and web FROM base, api FROM tools.
        for module in &mut timeline.modules {
            module.base = match module.name.as_str() {
                "tools" | "web" => Some("base".into()),
                "api" => Some("tools".into()),
                _ => None,
            };
        }
        timeline
    }

    fn screen(width: u16, height: u16) -> String {
        let timeline = fixed();
        let medians = BTreeMap::from([("base".to_string(), 2_500)]);
        let summary = summarize(&timeline, &medians, 0);
        let palette = Palette { no_color: true };
        let lines = timeline_lines(&timeline, &summary, 0, usize::from(width), palette);
        let text = Text::from(
            lines
                .into_iter()
                .map(|(text, style)| TextLine::styled(text, style))
                .collect::<Vec<_>>(),
        );
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal
            .draw(|frame| frame.render_widget(Paragraph::new(text), frame.area()))
            .unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..height)
            .map(|y| {
                let row: String = (0..width)
                    .map(|x| buffer[(x, y)].symbol().to_string())
                    .collect();
                row.trim_end().to_string()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_view_of_a_fixed_timeline() {
        insta::assert_snapshot!("timeline_view_120x14", screen(120, 14));
        insta::assert_snapshot!("timeline_view_80x14", screen(80, 14));
    }

    #[test]
    fn a_narrow_view_still_draws_every_module() {
        let text = screen(40, 10);
        for name in ["base", "tools", "web", "api"] {
            assert!(text.contains(name), "{text}");
        }
    }
}
