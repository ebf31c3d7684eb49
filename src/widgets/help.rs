//! The `?` overlay, generated from the key table (what is not in the table is not here either).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::keys::{Action, Mode};
use crate::app::state::AppState;

use super::{Palette, overlay, put};

/// The help text: one heading per mode, one line per action.
pub fn help_lines(state: &AppState) -> Vec<(String, bool)> {
    let mut lines = Vec::new();
    if state.readonly {
        lines.push((
            "read-only: actions that change something are off".to_string(),
            true,
        ));
    }
    for mode in [
        Mode::Normal,
        Mode::Filter,
        Mode::Confirm,
        Mode::Detail,
        Mode::Help,
    ] {
        lines.push((format!("{} mode", mode.name()), true));
        for binding in state.keys.bindings(mode) {
            let keys = state.keys.keys_text(mode, binding.action);
            lines.push((
                format!("  {keys:<18} {}", binding.action.description()),
                false,
            ));
        }
    }
    if !state.warnings.is_empty() {
        lines.push(("warnings".to_string(), true));
        lines.extend(state.warnings.iter().map(|w| (format!("  {w}"), false)));
    }
    lines
}

pub fn draw(buf: &mut Buffer, body: Rect, state: &AppState, palette: Palette) {
    let close = state
        .keys
        .hint_line(Mode::Help, &[Action::Close, Action::Help]);
    let title = format!(" help · {close} ");
    let Some(inner) = overlay(buf, body, 80, body.height, &title) else {
        return;
    };
    let lines = help_lines(state);
    let rows = usize::from(inner.height);
    let skip = state.help_scroll.min(lines.len().saturating_sub(rows));
    for (row, (text, heading)) in lines.iter().skip(skip).take(rows).enumerate() {
        let style = if *heading {
            palette.heading()
        } else {
            palette.plain()
        };
        put(
            buf,
            inner,
            inner.x,
            inner.y + row as u16,
            usize::from(inner.width),
            text,
            style,
        );
    }
}
