//! The operation pane: live progress of the mesh's latest operation (a converge, a send, a
//! rollback, a gc), started here or elsewhere, followed through the state database.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;

use crate::app::keys::{Action, Mode};
use crate::app::state::{AppState, Pane};
use crate::mesh::live::{ModuleRun, OperationState};
use crate::mesh::operation::OperationKind;
use crate::mesh::progress::{EventRow, Step, said_once};

use super::lines::{Palette, focused, put, rule};

pub fn draw(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    if area.height == 0 || area.width == 0 {
        return;
    }
    let view = &state.operation;
    let mut title = view.title();
    if let Some(running) = &state.running {
        title.push_str(&format!(" · running: {}", running.label()));
    }
    // Focused on an operation: where its time went is a key away.
    if focused(state, Pane::Operation) && view.operation_id.is_some() {
        let hint = state.keys.hint_line(Mode::Normal, &[Action::Timeline]);
        if !hint.is_empty() {
            title.push_str(&format!(" · {hint}"));
        }
    }
    rule(buf, area, &title, focused(state, Pane::Operation), palette);
    let rows = usize::from(area.height - 1);
    if view.lines.is_empty() {
        put(
            buf,
            area,
            area.x,
            area.y + 1,
            usize::MAX,
            "no operation recorded yet",
            palette.dim(),
        );
        return;
    }
    let end = view.lines.len().saturating_sub(view.scroll);
    let start = end.saturating_sub(rows);
    let has_focus = focused(state, Pane::Operation);
    for (row, event) in view.lines.iter().skip(start).take(end - start).enumerate() {
        let y = area.y + 1 + row as u16;
        // The cursor is the last line shown: Up moves it (and the lines) back.
        let selected = has_focus && start + row + 1 == end;
        // Typed steps: the styles once matched names the engine never wrote (`build-output`).
        let style = match event.step {
            Step::Output => palette.dim(),
            Step::Failed | Step::Refused => palette.bad(),
            Step::Built | Step::Delivered | Step::Stamped => palette.good(),
            _ => palette.plain(),
        };
        let module = event.module.as_deref().unwrap_or("");
        let (label, said) = said_once(event.step, event.module.as_deref(), &event.text);
        let text = format!(
            "{label:<14} {module:<12} {}",
            crate::mesh::text::plain(said)
        );
        let style = if selected {
            style.patch(palette.selected(true))
        } else {
            style
        };
        put(buf, area, area.x, y, usize::from(area.width), &text, style);
    }
}

/// One line of the pane in full (Enter on a line without a module).
pub(crate) fn event_lines(
    state: &AppState,
    id: i64,
    palette: Palette,
) -> (String, Vec<(String, Style)>) {
    let Some(event) = state.operation.lines.iter().find(|e| e.id == id) else {
        return (
            state.operation.title(),
            vec![("this line left the operation pane".into(), palette.dim())],
        );
    };
    let label = crate::mesh::progress::operation_label(event.operation, &event.operation_id);
    let lines = vec![
        (
            format!(
                "{label} · {} · {}",
                event.step,
                crate::timefmt::local_time(event.at_ms)
            ),
            palette.dim(),
        ),
        (
            crate::mesh::text::plain(&event.text).into_owned(),
            palette.plain(),
        ),
    ];
    let kind = event
        .operation_kind
        .map_or("operation", OperationKind::as_str);
    (format!("{kind} {label} · {}", event.step), lines)
}

/// Most output lines of one module the module's detail shows (the pane keeps the newest 500 lines, 1 MiB).
const MODULE_OUTPUT_LINES: usize = 200;

/// A module in the followed operation, for its detail: its state there, its error in full, and its
/// builder output as the pane holds it (the detail is anchored at its end, so a running build's
/// newest lines stay in sight as they arrive).
pub(crate) fn module_operation_lines(
    state: &AppState,
    module: &str,
    palette: Palette,
) -> Vec<(String, Style)> {
    let Some((live, now)) = state.followed() else {
        return Vec::new();
    };
    let Some(walked) = live.modules.get(module) else {
        return Vec::new();
    };
    let label = crate::mesh::progress::operation_label(live.operation, &live.operation_id);
    let when = match now {
        OperationState::Running => "running".to_string(),
        OperationState::Finished => "finished".to_string(),
        OperationState::Gone => "stopped (process gone)".to_string(),
    };
    let (cell, style) = super::lines::live_cell(walked, state.now_ms, palette);
    let mut lines = vec![(format!("in {label} ({when}): {cell}"), style)];
    match &walked.run {
        ModuleRun::Failed(error) | ModuleRun::NotReached(error) | ModuleRun::Ended(error) => {
            lines.push((format!("  {error}"), palette.bad()));
        }
        _ => {}
    }
    let output: Vec<&EventRow> = state
        .operation
        .lines
        .iter()
        .filter(|e| e.step == Step::Output && e.module.as_deref() == Some(module))
        .collect();
    if !output.is_empty() {
        let skip = output.len().saturating_sub(MODULE_OUTPUT_LINES);
        lines.push((format!("output in {label}:"), palette.dim()));
        lines.extend(
            output
                .iter()
                .skip(skip)
                .map(|e| (format!("  {}", e.text), palette.dim())),
        );
    }
    lines
}
