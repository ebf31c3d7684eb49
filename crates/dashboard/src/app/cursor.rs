//! The cursor of the focused pane: modules (and the history that follows them), machines, the
//! paged builds window, the operation pane's selected line.

use super::msg::Effect;
use super::state::{AppState, Pane};

fn clamp_move(at: usize, delta: isize, len: usize) -> usize {
    let last = len.saturating_sub(1) as isize;
    (at as isize).saturating_add(delta).clamp(0, last.max(0)) as usize
}

pub(super) fn move_cursor(state: &mut AppState, delta: isize) -> Vec<Effect> {
    match state.focus {
        Pane::Modules => {
            state.selected = clamp_move(state.selected, delta, state.visible.len());
            state.machine_selected = 0;
            state.sync_history_scope()
        }
        Pane::Machines => {
            let count = state.selected_machines().len();
            state.machine_selected = clamp_move(state.machine_selected, delta, count);
            Vec::new()
        }
        Pane::Builds => {
            let request = match delta {
                isize::MIN => state.builds.jump_to_top(),
                isize::MAX => {
                    let len = state.builds.len() as isize;
                    state.builds.move_by(len)
                }
                _ => state.builds.move_by(delta),
            };
            request.map(Effect::FetchBuilds).into_iter().collect()
        }
        Pane::Operation => {
            // Scrolling counts up from the tail: Up shows older lines.
            let max = state.operation.lines.len().saturating_sub(1) as isize;
            state.operation.scroll = (state.operation.scroll as isize)
                .saturating_sub(delta)
                .clamp(0, max) as usize;
            Vec::new()
        }
    }
}
