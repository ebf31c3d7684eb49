//! The build history of the selected module or of the whole mesh; failures stand out.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::state::{AppState, Pane};
use crate::mesh::builds::BuildStatus;

use super::lines::{Palette, focused, put, rule, scroll_offset, tag_of};

pub fn draw(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    if area.height == 0 || area.width == 0 {
        return;
    }
    let has_focus = focused(state, Pane::Builds);
    let window = &state.builds;
    let mut title = match &window.scope {
        Some(module) => format!("builds · {module}"),
        None => format!("builds · mesh {}", state.context.mesh),
    };
    if window.loading {
        title.push_str(" · loading…");
    }
    if !window.at_head() {
        title.push_str(" · newer above");
    }
    rule(buf, area, &title, has_focus, palette);
    let rows = usize::from(area.height - 1);
    if window.is_empty() {
        let text = if window.loading {
            ""
        } else {
            "no builds recorded"
        };
        put(
            buf,
            area,
            area.x,
            area.y + 1,
            usize::MAX,
            text,
            palette.dim(),
        );
        return;
    }
    let first = scroll_offset(window.selected, rows);
    for (row, build) in window.rows(first, rows).enumerate() {
        let y = area.y + 1 + row as u16;
        let selected = first + row == window.selected;
        let (mark, style) = match build.status {
            BuildStatus::Succeeded => ("✓ ok     ", palette.plain()),
            BuildStatus::Failed => ("✗ failed ", palette.bad()),
            BuildStatus::Running if build.process_gone => ("■ stopped", palette.warn()),
            BuildStatus::Running => ("… running", palette.warn()),
            BuildStatus::Cancelled => ("– cancel ", palette.dim()),
            BuildStatus::Stopped => ("■ stopped", palette.warn()),
        };
        let age = build.age(state.now_ms);
        let commit = build
            .commit
            .as_deref()
            .map(crate::mesh::text::short_commit)
            .unwrap_or("–");
        let tag = build.reference.as_deref().map(tag_of).unwrap_or("–");
        let error = match build.error.as_deref() {
            _ if build.process_gone => "(process gone)",
            Some(error) => error.lines().next().unwrap_or(""),
            None => "",
        };
        let text = format!(
            "{age:>4} {mark} {:<12} {:<20} {commit:<7} {:<10} {error}",
            build.subject(),
            tag,
            build.built_by()
        );
        let style = if selected {
            style.patch(palette.selected(has_focus))
        } else {
            style
        };
        put(buf, area, area.x, y, usize::from(area.width), &text, style);
    }
}
