//! The machines of the selected module: name, running digest, state, and the build that made
//! what it runs (host, commit, age): this machine's build row, else the artifact's signed
//! provenance as the app read it (`app/provenance.rs`).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;

use crate::app::msg::SourceId;
use crate::app::state::{AppState, Pane};
use crate::mesh::behind::MachineState;
use crate::mesh::machine::Machine;

use super::ladder::{self, Rung, Waiting};
use super::lines::{Palette, focused, put, rule, scroll_offset};
use crate::mesh::provenance::ReadProvenance;
use crate::mesh::text::short_id;
use crate::timefmt;

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
        let (made, made_style) = built_by(machine.running.first(), state, area.width < 60, palette);
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
        put(buf, area, x, y, usize::MAX, &made, made_style);
    }
}

/// The BUILT BY cell of a running digest: the build here that made it (`built by host-a @c0ffee1
/// 3m`), else what its signed provenance says, on the panes' loading ladder (`built by ci-7
/// @0123abc 5m (provenance)`), else `built by –`. `narrow` leaves out `built by `.
fn built_by(
    digest: Option<&String>,
    state: &AppState,
    narrow: bool,
    palette: Palette,
) -> (String, Style) {
    let said = |words: String| {
        if narrow {
            words
        } else {
            format!("built by {words}")
        }
    };
    let Some(digest) = digest else {
        return ("built by –".into(), palette.plain());
    };
    if let Some(build) = state.build_of(digest) {
        return (said(build.made_by(state.now_ms)), palette.plain());
    }
    let Some(loaded) = state.provenance_of(digest) else {
        return ("built by –".into(), palette.plain());
    };
    let waiting = Waiting {
        reading: "built by … (reading its provenance)",
        unread: "built by –",
        reread_hides_answer: false,
    };
    match ladder::rung(loaded, &waiting, palette) {
        Rung::Answer(Some(read)) => (
            said(format!(
                "{} (provenance)",
                provenance_made_by(read, state.now_ms)
            )),
            palette.plain(),
        ),
        Rung::Answer(None) => ("built by –".into(), palette.plain()),
        Rung::Failed(_) => ("built by ? (provenance not read)".into(), palette.dim()),
        Rung::Waiting(line) => line,
    }
}

/// Who built it, from which commit, how long ago, as a provenance says: `ci-7 @0123abc 5m` (its
/// builder id where it names no host).
fn provenance_made_by(read: &ReadProvenance, now_ms: i64) -> String {
    let who = read
        .host
        .as_deref()
        .or(read.builder_id.as_deref())
        .unwrap_or("?");
    let commit = read
        .commit
        .as_deref()
        .map(crate::mesh::text::short_commit)
        .unwrap_or("–");
    match provenance_at(read) {
        Some(at) => format!("{who} @{commit} {}", timefmt::age_since(at, now_ms)),
        None => format!("{who} @{commit}"),
    }
}

/// When the build a provenance names ended (or began, when it says no end).
fn provenance_at(read: &ReadProvenance) -> Option<i64> {
    read.finished_on
        .as_deref()
        .or(read.started_on.as_deref())
        .and_then(timefmt::rfc3339_ms)
}

/// A running digest's provenance in full, for the machine's detail: what it says (host, builder,
/// commit, operation, when) under `runs …: built on … (from the signed provenance)`, or where its
/// read stands.
fn provenance_lines(digest: &str, state: &AppState, palette: Palette) -> Vec<(String, Style)> {
    let none = format!("runs {digest}: no build in the history made it");
    let Some(loaded) = state.provenance_of(digest) else {
        return vec![(none, palette.plain())];
    };
    let reading =
        format!("runs {digest}: no build in the history made it; reading its signed provenance…");
    let waiting = Waiting {
        reading: &reading,
        unread: &none,
        reread_hides_answer: false,
    };
    let read = match ladder::rung(loaded, &waiting, palette) {
        Rung::Answer(Some(read)) => read,
        Rung::Answer(None) => {
            return vec![(
                format!("{none}, and no provenance signed by a key the mesh trusts names it"),
                palette.plain(),
            )];
        }
        Rung::Failed(error) => {
            return vec![(
                format!(
                    "{none}; its signed provenance could not be read: {error} (r reads it again)"
                ),
                palette.warn(),
            )];
        }
        Rung::Waiting(line) => return vec![line],
    };
    let shown = |v: &Option<String>| v.clone().unwrap_or_else(|| "–".into());
    let when = match (&read.started_on, &read.finished_on) {
        (Some(start), Some(end)) => format!("{start} → {end}"),
        (start, end) => shown(&end.clone().or(start.clone())),
    };
    let ago = provenance_at(read)
        .map(|at| format!(" ({} ago)", timefmt::age_since(at, state.now_ms)))
        .unwrap_or_default();
    let source = read
        .source
        .as_ref()
        .map(|s| format!(" ({s})"))
        .unwrap_or_default();
    vec![
        (
            format!(
                "runs {digest}: built by {} (from the signed provenance)",
                provenance_made_by(read, state.now_ms)
            ),
            palette.plain(),
        ),
        (
            format!("  host       {}", shown(&read.host)),
            palette.plain(),
        ),
        (
            format!("  builder    {}", shown(&read.builder_id)),
            palette.plain(),
        ),
        (
            format!("  commit     {}{source}", shown(&read.commit)),
            palette.plain(),
        ),
        (
            format!("  operation  {}", shown(&read.invocation_id)),
            palette.plain(),
        ),
        (format!("  when       {when}{ago}"), palette.plain()),
        (format!("  signed by  {}", read.key), palette.dim()),
    ]
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
        match state.build_of(digest) {
            Some(build) => lines.push((
                format!(
                    "runs {digest}: {}",
                    super::lines::build_summary(build, state.now_ms)
                ),
                palette.plain(),
            )),
            None => lines.extend(provenance_lines(digest, state, palette)),
        }
    }
    lines
}
