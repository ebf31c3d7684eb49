//! The footer: hints of the current mode, from the key table.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::state::AppState;

use super::{Palette, put};

pub fn draw(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    let mut x = area.x + 1;
    for (key, word) in state.keys.hints(state.mode) {
        let start = x;
        x = put(buf, area, x, area.y, usize::MAX, &key, palette.heading());
        x = put(buf, area, x, area.y, usize::MAX, &format!(":{word}  "), palette.dim());
        if x == start {
            break;
        }
    }
    if state.readonly {
        let tag = "read-only";
        let at = area.right().saturating_sub(tag.len() as u16 + 1);
        if at > x {
            put(buf, area, at, area.y, usize::MAX, tag, palette.warn());
        }
    }
}
