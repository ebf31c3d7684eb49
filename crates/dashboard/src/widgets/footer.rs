//! The footer: hints of the current mode, from the key table.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::keys::{Action, Mode};
use crate::app::state::{AppState, Detail, Pane};

use super::lines::{Palette, put};

pub fn draw(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    let mut hints = state.keys.hints(state.mode);
    // `R` is hinted where it applies: the selected module has an earlier artifact to go back to.
    if !crate::app::views::rollback_applies(state) {
        hints.retain(|(_, _, action)| *action != Action::Rollback);
    }
    // The environments view's keys are hinted in it; the targets' where the mesh has several.
    let several = state.targets.len() > 1;
    let in_view = state.detail == Some(Detail::Environments);
    hints.retain(|(_, _, action)| match action {
        Action::Promote => in_view,
        Action::NextTarget if state.mode == Mode::Detail => in_view,
        Action::NextTarget | Action::Environments => several,
        // Where an operation is in view: the operation pane focused, a build's detail.
        Action::Timeline => match state.mode {
            Mode::Detail => matches!(state.detail, Some(Detail::Build(_))),
            _ => state.focus == Pane::Operation,
        },
        _ => true,
    });
    let tag = if state.readonly { 10 } else { 0 };
    let room = usize::from(area.width).saturating_sub(1 + tag);
    let kept = fit(&hints, room);
    let mut x = area.x + 1;
    for (key, word) in kept {
        x = put(buf, area, x, area.y, usize::MAX, &key, palette.heading());
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

/// The keys a newcomer finds their way with: they always show, whatever else does not fit.
const NAVIGATION: [Action; 4] = [Action::Help, Action::NextPane, Action::Open, Action::Quit];

/// The hints that fit in `room` columns, in table order with quit last. The navigation keys always
/// stay; the others by the key table's rank while they fit. When one is left out, help reads
/// `more` (the help lists every key): no key drops out silently.
fn fit(hints: &[(String, &'static str, Action)], room: usize) -> Vec<(String, &'static str)> {
    let cost =
        |(key, word, _): &(String, &str, Action)| key.chars().count() + word.chars().count() + 3;
    let navigation = |i: &usize| NAVIGATION.contains(&hints[*i].2);
    let mut budget = room.saturating_sub(
        (0..hints.len())
            .filter(navigation)
            .map(|i| cost(&hints[i]))
            .sum(),
    );
    // When not all fit, the actions go first, then the ways around (the key table ranks them).
    let mut order: Vec<usize> = (0..hints.len()).filter(|i| !navigation(i)).collect();
    order.sort_by_key(|i| hints[*i].2.footer_rank());
    let mut chosen: Vec<usize> = (0..hints.len()).filter(navigation).collect();
    let mut left_out = false;
    for i in order {
        if cost(&hints[i]) <= budget {
            budget -= cost(&hints[i]);
            chosen.push(i);
        } else {
            left_out = true;
        }
    }
    chosen.sort_by_key(|i| (hints[*i].2 == Action::Quit, *i));
    chosen
        .into_iter()
        .map(|i| {
            let (key, word, action) = &hints[i];
            let word = if left_out && *action == Action::Help {
                "more"
            } else {
                word
            };
            (key.clone(), word)
        })
        .collect()
}
