//! The converge pane: live progress of the latest converge, started here or elsewhere, followed
//! through the state database.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::state::{AppState, Pane};
use crate::mesh::progress::Step;

use super::{Palette, focused, put, rule};

pub fn draw(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    if area.height == 0 || area.width == 0 {
        return;
    }
    let view = &state.converge;
    let mut title = match &view.converge_id {
        Some(id) => format!(
            "converge {}",
            crate::mesh::progress::operation_label(view.operation, id)
        ),
        None => "converge".to_string(),
    };
    if let Some(running) = &state.running {
        title.push_str(&format!(" · running: {running}"));
    }
    rule(buf, area, &title, focused(state, Pane::Converge), palette);
    let rows = usize::from(area.height - 1);
    if view.lines.is_empty() {
        put(
            buf,
            area,
            area.x,
            area.y + 1,
            usize::MAX,
            "no converge recorded yet",
            palette.dim(),
        );
        return;
    }
    let end = view.lines.len().saturating_sub(view.scroll);
    let start = end.saturating_sub(rows);
    for (row, event) in view.lines.iter().skip(start).take(end - start).enumerate() {
        let y = area.y + 1 + row as u16;
        // Typed steps: the styles once matched names the engine never wrote (`build-output`).
        let style = match event.step {
            Step::Output => palette.dim(),
            Step::Failed | Step::Refused => palette.bad(),
            Step::Built | Step::Delivered | Step::Stamped => palette.good(),
            _ => palette.plain(),
        };
        let module = event.module.as_deref().unwrap_or("");
        let text = format!(
            "{:<14} {:<12} {}",
            event.step,
            module,
            crate::mesh::text::plain(&event.text)
        );
        put(buf, area, area.x, y, usize::from(area.width), &text, style);
    }
}
