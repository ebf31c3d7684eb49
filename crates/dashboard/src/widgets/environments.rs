//! The environments view (in the detail overlay): modules down, targets across, each cell the
//! target's recorded artifact (short digest), its machines, `≠` where it differs from the target it
//! is promoted from, and how long ago it moved; the selected cell in brackets.

use ratatui::style::Style;

use crate::app::keys::{Action, Mode};
use crate::app::state::AppState;
use crate::mesh::environments::{Column, Grid};
use crate::timefmt;

use super::ladder::{Rung, Waiting, rung};
use super::lines::Palette;

type Line = (String, Style);

pub(crate) fn lines(state: &AppState, palette: Palette) -> Vec<Line> {
    let view = &state.views.environments;
    let mut lines: Vec<Line> = vec![(
        format!(
            "environments of mesh {}: each target's recorded artifact, its machines, when it moved",
            state.context.mesh
        ),
        palette.heading(),
    )];
    // Opening the view starts its read, so before an answer it is always being read; the grid
    // stays on screen while it is read again.
    let waiting = Waiting {
        reading: "reading every target…",
        unread: "reading every target…",
        reread_hides_answer: false,
    };
    let grid = match rung(view, &waiting, palette) {
        Rung::Answer(grid) => grid,
        Rung::Waiting(line) => {
            lines.push(line);
            return lines;
        }
        Rung::Failed(error) => {
            lines.push((format!("cannot read the targets: {error}"), palette.bad()));
            return lines;
        }
    };
    lines.extend(table(grid, state, palette));
    for column in &grid.targets {
        if let Some(error) = &column.error {
            lines.push((
                format!("{}: cannot be read: {error}", column.name),
                palette.bad(),
            ));
        }
        if let Some(held) = &column.held_by {
            lines.push((format!("⟳ {}: held by {held}", column.name), palette.info()));
        }
    }
    lines.push((
        "≠ differs from the target it is promoted from (its column says ← which)".into(),
        palette.dim(),
    ));
    let key = |action| state.keys.keys_text(Mode::Detail, action);
    let mut keys = format!(
        "{} {} {} {} select a cell",
        key(Action::Left),
        key(Action::Right),
        key(Action::Up),
        key(Action::Down)
    );
    let promote = key(Action::Promote);
    if !promote.is_empty() {
        keys.push_str(&format!(" · {promote} promote into it from its source"));
    }
    keys.push_str(&format!(
        " · {} show its target · {} close",
        key(Action::NextTarget),
        key(Action::Close)
    ));
    lines.push((keys, palette.info()));
    if let Some(at) = view.at_ms {
        lines.push((
            format!("read {} ago", timefmt::age_since(at, state.now_ms)),
            palette.dim(),
        ));
    }
    lines
}

/// The grid's rows, the selected cell in brackets, its row highlighted.
fn table(grid: &Grid, state: &AppState, palette: Palette) -> Vec<Line> {
    let (selected_row, selected_column) = state.views.cell;
    let mut cells: Vec<Vec<String>> = Vec::new();
    let mut header = vec!["MODULE".to_string()];
    header.extend(grid.targets.iter().map(|c: &Column| {
        let shown = if c.name == state.target.name {
            " *"
        } else {
            ""
        };
        format!(" {}{shown} ", c.title())
    }));
    cells.push(header);
    for (r, row) in grid.rows.iter().enumerate() {
        let mut line = vec![row.module.clone()];
        for (c, cell) in row.cells.iter().enumerate() {
            let text = cell.text(state.now_ms);
            line.push(if (r, c) == (selected_row, selected_column) {
                format!("[{text}]")
            } else {
                format!(" {text} ")
            });
        }
        cells.push(line);
    }
    let widths: Vec<usize> = (0..cells[0].len())
        .map(|i| {
            cells
                .iter()
                .map(|l| l.get(i).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    cells
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let text: Vec<String> = line
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            let style = match i {
                0 => palette.heading(),
                n if n - 1 == selected_row => palette.selected(true),
                _ => palette.plain(),
            };
            (text.join(" ").trim_end().to_string(), style)
        })
        .collect()
}
