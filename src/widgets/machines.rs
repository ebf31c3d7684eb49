//! The machines of the selected module: name, running digest, state, and the build that made
//! what it runs (host, commit, age).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;

use crate::app::msg::SourceId;
use crate::app::state::{AppState, Pane};
use crate::mesh::behind::MachineState;
use crate::mesh::machine::Machine;

use super::lines::{Palette, focused, put, rule, scroll_offset};
use crate::mesh::text::short_id;

pub fn draw(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    if area.height == 0 || area.width == 0 {
        return;
    }
    let has_focus = focused(state, Pane::Machines);
    rule(buf, area, "machines", has_focus, palette);
    let machines = state.selected_machines();
    let rows = usize::from(area.height - 1);
    if machines.is_empty() {
        let text = match &state.source(SourceId::Machines).error {
            Some((_, error)) => format!("machines could not be listed: {error}"),
            None => "no machine runs this module".to_string(),
        };
        put(
            buf,
            area,
            area.x,
            area.y + 1,
            usize::MAX,
            &text,
            palette.dim(),
        );
        return;
    }
    let name_width = machines
        .iter()
        .map(|m| m.display_name.chars().count())
        .max()
        .unwrap_or(4)
        .min(28);
    let first = scroll_offset(state.machine_selected, rows);
    for (row, machine) in machines.iter().enumerate().skip(first).take(rows) {
        let y = area.y + 1 + (row - first) as u16;
        let selected = row == state.machine_selected;
        let digest = machine
            .running
            .first()
            .map(|d| short_id(d).to_string())
            .unwrap_or_else(|| "–".into());
        let state_style = match machine.state {
            MachineState::Current => palette.good(),
            MachineState::Behind => palette.warn(),
            MachineState::Held | MachineState::Paused => palette.info(),
            MachineState::Unrecorded => palette.dim(),
            MachineState::Missing | MachineState::UnknownContainer => palette.bad(),
        };
        let made = match machine.running.first().and_then(|d| state.build_of(d)) {
            Some(build) if area.width < 60 => build.made_by(state.now_ms),
            Some(build) => format!("built by {}", build.made_by(state.now_ms)),
            None => "built by –".to_string(),
        };
        let name_style = if selected {
            palette.selected(has_focus)
        } else {
            palette.plain()
        };
        let mut x = put(
            buf,
            area,
            area.x,
            y,
            name_width,
            &machine.display_name,
            name_style,
        );
        x = x.max(area.x + name_width as u16 + 1);
        x = put(buf, area, x, y, 12, &digest, palette.dim()) + 1;
        x = put(buf, area, x, y, 8, machine.state.as_str(), state_style).max(x + 8);
        if area.width >= 56 {
            // How it runs: a container's status, a workload's ready pods.
            x = put(buf, area, x, y, 14, &machine.health, palette.dim()).max(x + 14) + 1;
        }
        put(buf, area, x, y, usize::MAX, &made, palette.plain());
    }
}

/// A machine in full (Enter on the machines pane): every running digest and the build that made it.
pub fn detail_lines(machine: &Machine, state: &AppState, palette: Palette) -> Vec<(String, Style)> {
    let mut lines = vec![
        (
            format!(
                "{} {} of module {}",
                machine.kind, machine.name, machine.module
            ),
            palette.heading(),
        ),
        (
            format!("state: {} · {}", machine.state, machine.health),
            palette.plain(),
        ),
        (format!("image: {}", machine.image), palette.plain()),
    ];
    for digest in &machine.running {
        let made = match state.build_of(digest) {
            Some(build) => super::lines::build_summary(build, state.now_ms),
            None => "no build in the history made it".into(),
        };
        lines.push((format!("runs {digest}: {made}"), palette.plain()));
    }
    lines
}
