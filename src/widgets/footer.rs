//! The footer: hints of the current mode, from the key table.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::keys::Action;
use crate::app::state::AppState;

use super::lines::{Palette, put};

pub fn draw(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    let mut hints = state.keys.hints(state.mode);
    // `R` is hinted where it applies: the selected module has an earlier artifact to go back to.
    if !crate::app::views::rollback_applies(state) {
        hints.retain(|(_, _, action)| *action != Action::Rollback);
    }
    let tag = if state.readonly { 10 } else { 0 };
    let room = usize::from(area.width).saturating_sub(1 + tag);
    let cost =
        |(key, word, _): &(String, &str, Action)| key.chars().count() + word.chars().count() + 3;
    // Quit always shows; the others in table order as long as they fit.
    let quit = hints
        .iter()
        .position(|(_, _, action)| *action == Action::Quit);
    let mut budget = room.saturating_sub(quit.map_or(0, |i| cost(&hints[i])));
    // When not all fit, the actions go first, then the ways around (the key table ranks them).
    let mut order: Vec<usize> = (0..hints.len()).filter(|i| Some(*i) != quit).collect();
    order.sort_by_key(|i| hints[*i].2.footer_rank());
    let mut chosen = Vec::new();
    for i in order {
        if cost(&hints[i]) <= budget {
            budget -= cost(&hints[i]);
            chosen.push(i);
        }
    }
    chosen.sort_unstable();
    let mut kept: Vec<&(String, &str, Action)> = chosen.into_iter().map(|i| &hints[i]).collect();
    kept.extend(quit.map(|i| &hints[i]));
    let mut x = area.x + 1;
    for (key, word, _) in kept {
        x = put(buf, area, x, area.y, usize::MAX, key, palette.heading());
        x = put(
            buf,
            area,
            x,
            area.y,
            usize::MAX,
            &format!(":{word}  "),
            palette.dim(),
        );
    }
    if state.readonly {
        let tag = "read-only";
        let at = area.right().saturating_sub(tag.len() as u16 + 1);
        if at > x {
            put(buf, area, at, area.y, usize::MAX, tag, palette.warn());
        }
    }
}
