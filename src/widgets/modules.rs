//! The modules, grouped by tier: ref, decision with the record that vouched, what each source
//! answered, the machines summary and the last build. Only the visible rows are drawn.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;

use crate::app::msg::{RegistryAnswer, SourceId};
use crate::app::state::{AppState, ModuleInfo, Pane};
use crate::mesh::builds::BuildStatus;
use crate::mesh::decide::{Decision, labelled_image_tagged};
use crate::timefmt;

use super::{Palette, focused, put, rule, scroll_offset, tag_of};

/// One cell: text and style.
type Cell = (String, Style);

/// The REF cell: the ref, `pending (base)`, or `…` before the plan answered.
pub fn ref_cell(state: &AppState, module: &ModuleInfo, palette: Palette) -> Cell {
    match state.planned(&module.name) {
        Some(planned) => match (&planned.reference, &module.base) {
            (Some(reference), _) => (reference.clone(), palette.plain()),
            (None, Some(base)) if planned.decision != Decision::Refused => {
                (format!("pending ({base})"), palette.warn())
            }
            (None, _) => ("–".into(), palette.dim()),
        },
        None => ("…".into(), palette.dim()),
    }
}

/// The DECISION cell, naming the record that vouched.
pub fn decision_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
    match state.planned(module).map(|p| p.decision) {
        Some(Decision::Record) => ("skip·record".into(), palette.good()),
        Some(Decision::Host) => ("deliver·host".into(), palette.info()),
        Some(Decision::Build) => ("build".into(), palette.warn()),
        Some(Decision::Forced) => ("forced".into(), palette.special()),
        Some(Decision::Refused) => ("refused".into(), palette.bad()),
        Some(Decision::Pinned) => ("pinned".into(), palette.special()),
        None => ("…".into(), palette.dim()),
    }
}

/// RECORD: ✓ the record names this ref, ✗ it names another or nothing, – not known yet.
pub fn record_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
    let reference = state.planned(module).and_then(|p| p.reference.as_deref());
    match (&state.record, reference) {
        (Some(record), Some(reference)) => match record.get(module) {
            Some(entry) if entry.reference == reference => ("✓".into(), palette.good()),
            _ => ("✗".into(), palette.bad()),
        },
        (None, _) if state.source(SourceId::Record).error.is_some() => ("?".into(), palette.warn()),
        _ => ("–".into(), palette.dim()),
    }
}

/// HOST: ✓ holds a meshtop-labelled image tagged with the ref, ✗ does not, ? could not answer,
/// – cannot answer (ref pending, multi-platform) or not asked yet.
/// What the registry answered for the module's planned ref: ✓ published, ✗ absent, ? no answer.
pub fn registry_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
    match state.registry_answers.get(module) {
        Some(RegistryAnswer::Published(_)) => ("✓".into(), palette.good()),
        Some(RegistryAnswer::Absent) => ("✗".into(), palette.bad()),
        Some(RegistryAnswer::Failed(_)) => ("?".into(), palette.warn()),
        None if state.source(SourceId::Registry).error.is_some() => ("?".into(), palette.warn()),
        None => ("–".into(), palette.dim()),
    }
}

pub fn host_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
    let Some(planned) = state.planned(module) else {
        return ("–".into(), palette.dim());
    };
    let Some(reference) = planned.reference.as_deref() else {
        return ("–".into(), palette.dim());
    };
    if planned.multi_platform {
        return ("–".into(), palette.dim());
    }
    match &state.host {
        Some(images) => {
            if labelled_image_tagged(images, reference).is_some() {
                ("✓".into(), palette.good())
            } else {
                ("✗".into(), palette.bad())
            }
        }
        None if state.source(SourceId::Host).error.is_some() => ("?".into(), palette.warn()),
        None => ("–".into(), palette.dim()),
    }
}

/// MACHINES: `2/2`, `1 behind/3`, `held`, `–` when none.
pub fn machines_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
    let (current, behind, held, total) = state.machine_counts(module);
    match () {
        _ if total == 0 => ("–".into(), palette.dim()),
        _ if behind > 0 => (format!("{behind} behind/{total}"), palette.warn()),
        _ if held > 0 => ("held".into(), palette.info()),
        _ if current == total => (format!("{current}/{total}"), palette.good()),
        _ => (format!("{current}/{total}"), palette.plain()),
    }
}

/// LAST BUILD: `✓ 3m host-a`, `✗ 1h failed`.
pub fn last_build_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
    let Some(build) = state.last_builds.get(module) else {
        return ("–".into(), palette.dim());
    };
    let age = timefmt::age_since(build.ended_ms.unwrap_or(build.started_ms), state.now_ms);
    match build.status {
        BuildStatus::Succeeded => (format!("✓ {age} {}", build.host), palette.good()),
        BuildStatus::Failed => (format!("✗ {age} failed"), palette.bad()),
        BuildStatus::Running => (format!("… {age} running"), palette.warn()),
        BuildStatus::Cancelled => (format!("– {age} cancelled"), palette.dim()),
    }
}

struct Columns {
    name: u16,
    reference: u16,
    registry: bool,
}

const DECISION_W: u16 = 12;
const MACHINES_W: u16 = 11;
const LAST_W: u16 = 15;

fn columns(state: &AppState, width: u16, first: usize, rows: usize) -> Columns {
    let longest = state
        .visible
        .iter()
        .skip(first)
        .take(rows)
        .map(|&i| state.modules[i].name.chars().count())
        .max();
    let name = (longest.unwrap_or(6).max(6) as u16).min(24);
    let registry = state.context.registry.is_some();
    let fixed = 2
        + name
        + 1
        + DECISION_W
        + 1
        + 7
        + 5
        + if registry { 4 } else { 0 }
        + MACHINES_W
        + 1
        + LAST_W;
    Columns {
        name,
        reference: width.saturating_sub(fixed + 1).max(4),
        registry,
    }
}

pub fn draw(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    if area.height == 0 {
        return;
    }
    let has_focus = focused(state, Pane::Modules);
    let title = format!(
        "modules · {} of {}",
        state.visible.len(),
        state.modules.len()
    );
    rule(buf, area, &title, has_focus, palette);
    if area.height < 3 {
        return;
    }
    let rows = usize::from(area.height - 2);
    let first = scroll_offset(state.selected, rows);
    let cols = columns(state, area.width, first, rows);
    let mut heads: Vec<(&str, u16)> = vec![
        ("T", 2),
        ("MODULE", cols.name + 1),
        ("REF", cols.reference + 1),
        ("DECISION", DECISION_W + 1),
        ("RECORD", 7),
        ("HOST", 5),
    ];
    if cols.registry {
        heads.push(("REG", 4));
    }
    heads.push(("MACHINES", MACHINES_W + 1));
    heads.push(("LAST BUILD", LAST_W));
    let y = area.y + 1;
    let mut x = area.x;
    for (head, width) in &heads {
        put(
            buf,
            area,
            x,
            y,
            usize::from(*width),
            head,
            palette.heading(),
        );
        x += width;
    }
    let mut previous_tier = first
        .checked_sub(1)
        .and_then(|i| state.visible.get(i))
        .map(|&m| state.modules[m].tier);
    for (row, &index) in state.visible.iter().skip(first).take(rows).enumerate() {
        let module = &state.modules[index];
        let y = area.y + 2 + row as u16;
        let selected = first + row == state.selected;
        let tier = if previous_tier == Some(module.tier) {
            String::new()
        } else {
            module.tier.to_string()
        };
        previous_tier = Some(module.tier);
        let (reference, ref_style) = ref_cell(state, module, palette);
        let reference = if reference.chars().count() > usize::from(cols.reference) {
            tag_of(&reference).to_string()
        } else {
            reference
        };
        let mut cells: Vec<(Cell, u16)> = vec![
            ((tier, palette.dim()), 2),
            (
                (
                    module.name.clone(),
                    if selected {
                        palette.selected(has_focus)
                    } else {
                        palette.plain()
                    },
                ),
                cols.name + 1,
            ),
            ((reference, ref_style), cols.reference + 1),
            (decision_cell(state, &module.name, palette), DECISION_W + 1),
            (record_cell(state, &module.name, palette), 7),
            (host_cell(state, &module.name, palette), 5),
        ];
        if cols.registry {
            cells.push((registry_cell(state, &module.name, palette), 4));
        }
        cells.push((machines_cell(state, &module.name, palette), MACHINES_W + 1));
        cells.push((last_build_cell(state, &module.name, palette), LAST_W));
        let mut x = area.x;
        if selected {
            put(
                buf,
                area,
                x,
                y,
                usize::from(area.width),
                &" ".repeat(usize::from(area.width)),
                palette.selected(has_focus),
            );
        }
        for ((text, style), width) in cells {
            let style = if selected {
                style.patch(palette.selected(has_focus))
            } else {
                style
            };
            put(
                buf,
                area,
                x,
                y,
                usize::from(width.saturating_sub(1)),
                &text,
                style,
            );
            x += width;
        }
    }
    if state.visible.is_empty() {
        let text = if state.modules.is_empty() {
            "the mesh has no modules"
        } else {
            "no module matches the filter"
        };
        put(
            buf,
            area,
            area.x + 1,
            area.y + 2,
            usize::MAX,
            text,
            palette.dim(),
        );
    }
}
