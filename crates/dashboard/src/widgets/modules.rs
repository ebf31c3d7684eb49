//! The modules, grouped by tier: ref, decision with the record that vouched, what each source
//! answered, the machines summary and the last build. Only the visible rows are drawn.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::msg::{RegistryAnswer, SourceId};
use crate::app::state::{AppState, ModuleInfo, Pane};
use crate::mesh::builds::BuildStatus;
use crate::mesh::cosign::SignatureVerdict;
use crate::mesh::decide::{Decision, HostSays, RegistryHeld, host_says};

use super::lines::{Cell, Palette, focused, live_cell, put, rule, scroll_offset, tag_of};

/// The REF cell: the ref, `pending (base)`, or `…` before the plan answered.
pub(crate) fn ref_cell(state: &AppState, module: &ModuleInfo, palette: Palette) -> Cell {
    // The running operation decided a ref the plan could not know yet (its base was pending).
    if let Some(reference) = state
        .live_running()
        .and_then(|live| live.modules.get(&module.name))
        .and_then(|m| m.reference.clone())
    {
        return (reference, palette.plain());
    }
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

/// The DECISION cell, naming the record that vouched; while an operation runs, the module's state
/// in it (the plan was made before it and would contradict what the operation is doing).
pub fn decision_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
    if let Some(live) = state.live_running() {
        return match live.modules.get(module) {
            Some(walked) => live_cell(walked, state.now_ms, palette),
            None => ("–".into(), palette.dim()),
        };
    }
    match state.planned(module).map(|p| p.decision) {
        Some(Decision::Record) => ("skip·record".into(), palette.good()),
        Some(Decision::Host) => ("deliver·host".into(), palette.info()),
        Some(Decision::Registry) => ("pull·registry".into(), palette.info()),
        Some(Decision::Build) => ("build".into(), palette.warn()),
        Some(Decision::Forced) => ("forced".into(), palette.special()),
        Some(Decision::Refused) => ("refused".into(), palette.bad()),
        Some(Decision::Pinned) => ("⚑ pinned".into(), palette.pinned()),
        None => ("…".into(), palette.dim()),
    }
}

/// RECORD: ✓ the record names this ref, ✗ it names another or nothing, – not known yet.
pub(crate) fn record_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
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

/// How much room the REG column has for what the registry's signatures said: the words in full,
/// a short form, or the glyph alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegForm {
    Full,
    Short,
    Glyph,
}

/// What the registry held and what its signatures said, from the plan's typed answer: `✓ signed`,
/// `✓ unverified` (the mesh trusts no key) when it vouched; `✗ unsigned`, `✗ untrusted key`,
/// `✗ signature names another digest` when it held a look-alike-proof manifest it refused.
fn held_cell(held: &RegistryHeld, vouched: bool, form: RegForm, palette: Palette) -> Cell {
    let (full, short, glyph, style) = match &held.signature {
        SignatureVerdict::Trusted { .. } if vouched => {
            ("✓ signed", "✓ signed", "✓", palette.good())
        }
        SignatureVerdict::Unverified if vouched => {
            ("✓ unverified", "✓ unverif.", "✓", palette.info())
        }
        // It vouched, yet the pull failed and the module is built (the reason says).
        SignatureVerdict::Trusted { .. } | SignatureVerdict::Unverified => {
            ("✓", "✓", "✓", palette.good())
        }
        SignatureVerdict::Unsigned => ("✗ unsigned", "✗ unsigned", "✗", palette.bad()),
        SignatureVerdict::UntrustedKey => ("✗ untrusted key", "✗ untrusted", "✗", palette.bad()),
        SignatureVerdict::OtherDigest { .. } => (
            "✗ signature names another digest",
            "✗ digest",
            "✗",
            palette.bad(),
        ),
        SignatureVerdict::OtherBuildType { .. } => {
            ("✗ not a meshtop build", "✗ build type", "✗", palette.bad())
        }
        SignatureVerdict::OtherModule { .. } => {
            ("✗ built as another module", "✗ module", "✗", palette.bad())
        }
        SignatureVerdict::OtherInputs { .. } => {
            ("✗ built from other inputs", "✗ inputs", "✗", palette.bad())
        }
        SignatureVerdict::UntrustedBuilder { .. } => {
            ("✗ untrusted builder", "✗ builder", "✗", palette.bad())
        }
        SignatureVerdict::UnboundBuilder { .. } => (
            "✗ builder claimed by another key",
            "✗ builder key",
            "✗",
            palette.bad(),
        ),
        SignatureVerdict::NoProvenance => ("✗ no provenance", "✗ no prov.", "✗", palette.bad()),
    };
    let text = match form {
        RegForm::Full => full,
        RegForm::Short => short,
        RegForm::Glyph => glyph,
    };
    (text.into(), style)
}

/// REG: what the registry held for the planned ref and whether it vouched (the plan's answer, with
/// its signatures' verdict), else what the registry source answered for the ref: ✓ published,
/// ✗ absent, ? no answer.
pub fn registry_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
    registry_cell_as(state, module, RegForm::Full, palette)
}

/// [`registry_cell`] in the form the column has room for.
pub fn registry_cell_as(state: &AppState, module: &str, form: RegForm, palette: Palette) -> Cell {
    let planned = state.planned(module);
    if let Some(planned) = planned
        && let Some(held) = &planned.registry_held
    {
        return held_cell(held, planned.decision == Decision::Registry, form, palette);
    }
    if planned.is_some_and(|p| p.decision == Decision::Registry) {
        return ("✓".into(), palette.good());
    }
    match state.registry_answers.get(module) {
        Some(RegistryAnswer::Published(_)) => ("✓".into(), palette.good()),
        Some(RegistryAnswer::Absent) => ("✗".into(), palette.bad()),
        Some(RegistryAnswer::Failed(_)) => ("?".into(), palette.warn()),
        None if state.source(SourceId::Registry).error.is_some() => ("?".into(), palette.warn()),
        None => ("–".into(), palette.dim()),
    }
}

/// HOST: ✓ holds a meshtop-labelled image tagged with the ref, ✗ does not, ? could not answer,
/// – cannot answer (ref pending, multi-platform) or not asked yet.
pub(crate) fn host_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
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
            let inputs = planned.inputs.as_ref().map(|i| i.digest.as_str());
            match host_says(images, module, reference, inputs) {
                HostSays::Answers(_) => ("✓".into(), palette.good()),
                // Another module's image under the ref, or with `trust` one this machine neither
                // built nor verified under it, answers nothing.
                HostSays::OtherLabels(_) | HostSays::NotVouched(_) | HostSays::Nothing => {
                    ("✗".into(), palette.bad())
                }
            }
        }
        None if state.source(SourceId::Host).error.is_some() => ("?".into(), palette.warn()),
        None => ("–".into(), palette.dim()),
    }
}

/// MACHINES: `2/2`, `1 behind/3`, `1 missing/2`, `held`, `–` when none, `?` when they could not
/// be listed.
pub(crate) fn machines_cell(state: &AppState, module: &str, palette: Palette) -> Cell {
    let counts = state.machine_counts(module);
    let (current, behind, held, total) = (counts.current, counts.behind, counts.held, counts.total);
    match () {
        _ if total == 0 && state.source(SourceId::Machines).error.is_some() => {
            ("?".into(), palette.warn())
        }
        _ if total == 0 => ("–".into(), palette.dim()),
        _ if behind > 0 => (format!("{behind} behind/{total}"), palette.warn()),
        _ if counts.missing > 0 => (format!("{} missing/{total}", counts.missing), palette.bad()),
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
    let age = build.age(state.now_ms);
    match build.status {
        BuildStatus::Succeeded => (format!("✓ {age} {}", build.host), palette.good()),
        BuildStatus::Failed => {
            let current = state.planned(module).and_then(|p| p.reference.as_deref());
            if super::lines::failed_for_current(build, current) {
                (format!("✗ {age} failed"), palette.bad())
            } else {
                // A failure of an older ref: the current ref has not failed.
                (format!("✗ {age} old ref"), palette.dim())
            }
        }
        BuildStatus::Running if build.process_gone => {
            (format!("■ {age} {}", build.shown_status()), palette.warn())
        }
        BuildStatus::Running => (format!("… {age} running"), palette.warn()),
        BuildStatus::Cancelled => (format!("– {age} cancelled"), palette.dim()),
        BuildStatus::Stopped => (format!("■ {age} stopped"), palette.warn()),
    }
}

struct Columns {
    name: u16,
    reference: u16,
    decision: u16,
    /// The REG column's width and the form of its cells; None without a registry.
    registry: Option<(u16, RegForm)>,
}

const DECISION_W: u16 = 12;
/// While an operation runs the column holds `building 12/15 3m05s sent 2/2`-like states.
const LIVE_W: u16 = 20;
const MACHINES_W: u16 = 11;
/// The most of a builder's name the NOW column makes room for (a longer one is cut with `…`).
const MAX_BUILDER_W: u16 = 16;
const LAST_W: u16 = 15;

fn columns(state: &AppState, width: u16, first: usize, rows: usize) -> Columns {
    let shown = || {
        state
            .visible
            .iter()
            .skip(first)
            .take(rows)
            .map(|&i| &state.modules[i])
    };
    let longest = shown().map(|m| name_text(state, m).chars().count()).max();
    let name = (longest.unwrap_or(6).max(6) as u16).min(24);
    let decision = match state.live_running() {
        // On a pool the state also names the builder (`building 2/4 50s on farm-1`).
        Some(live) => {
            let builder = live
                .pool
                .builders
                .iter()
                .map(|b| b.name.chars().count())
                .max();
            let builder = builder.map(|n| u16::try_from(n).unwrap_or(u16::MAX));
            LIVE_W + builder.map_or(0, |n| n.min(MAX_BUILDER_W) + 4)
        }
        None => DECISION_W,
    };
    let fixed = 2 + name + 1 + decision + 1 + 7 + 5 + MACHINES_W + 1 + LAST_W;
    // REF is as wide as the longest ref shown, at most REF_MAX; the rest of the row stays free.
    let longest_ref = shown()
        .map(|m| {
            state
                .planned(&m.name)
                .and_then(|p| p.reference.as_deref())
                .map_or(8, |r| r.chars().count())
        })
        .max()
        .unwrap_or(8)
        .clamp(3, usize::from(REF_MAX)) as u16;
    // REG says what the registry's signatures said in full while REF keeps its tag, shorter
    // while REF keeps a few characters, else by its glyph alone.
    let registry = state.context.registry.is_some().then(|| {
        let reg_width = |form: RegForm| {
            let widest = shown()
                .map(|m| {
                    let (text, _) =
                        registry_cell_as(state, &m.name, form, Palette { no_color: true });
                    text.chars().count()
                })
                .max()
                .unwrap_or(0);
            widest.max(3) as u16 + 1
        };
        let room = |reg: u16| width.saturating_sub(fixed + reg + 1);
        [
            (RegForm::Full, longest_ref.min(REF_TAG)),
            (RegForm::Short, REF_SHORTEST),
        ]
        .into_iter()
        .map(|(form, keep)| (reg_width(form), form, keep))
        .find(|&(reg, _, keep)| room(reg) >= keep)
        .map_or((4, RegForm::Glyph), |(reg, form, _)| (reg, form))
    });
    let fixed = fixed + registry.map_or(0, |(reg, _)| reg);
    Columns {
        name,
        decision,
        reference: width.saturating_sub(fixed + 1).clamp(4, longest_ref.max(4)),
        registry,
    }
}

/// What REF keeps while REG says its words in full: a one-platform tag (`3f9c2a1b7d4e-amd64`).
const REF_TAG: u16 = 18;
/// What REF keeps at least while REG says its short words.
const REF_SHORTEST: u16 = 6;

/// The widest REF column: a ref longer than this elides its middle.
const REF_MAX: u16 = 48;

/// A ref that does not fit loses the middle of its repository, never its tag:
/// `demo/wor…:0c1d2e3f4a5b-amd64`; with no room for more, the tag alone (cut with `…`).
pub(crate) fn elide_ref(reference: &str, width: usize) -> String {
    let length = reference.chars().count();
    if length <= width {
        return reference.to_string();
    }
    let tag = tag_of(reference);
    let tag_length = tag.chars().count() + 1;
    if tag_length + 2 > width {
        return tag.to_string();
    }
    let head: String = reference.chars().take(width - tag_length - 1).collect();
    format!("{head}…:{tag}")
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
    draw_heads(buf, area, state, &cols, palette);
    let mut previous_tier = first
        .checked_sub(1)
        .and_then(|i| state.visible.get(i))
        .map(|&m| state.modules[m].tier);
    for (row, &index) in state.visible.iter().skip(first).take(rows).enumerate() {
        let module = &state.modules[index];
        let y = area.y + 2 + row as u16;
        let selected = (first + row == state.selected).then_some(has_focus);
        let tier = if previous_tier == Some(module.tier) {
            String::new()
        } else {
            module.tier.to_string()
        };
        previous_tier = Some(module.tier);
        let cells = row_cells(state, module, tier, &cols, selected, palette);
        draw_row(buf, area, y, cells, selected, palette);
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

/// The column heads: DECISION reads NOW while an operation runs.
fn draw_heads(buf: &mut Buffer, area: Rect, state: &AppState, cols: &Columns, palette: Palette) {
    let mut heads: Vec<(&str, u16)> = vec![
        ("T", 2),
        ("MODULE", cols.name + 1),
        ("REF", cols.reference + 1),
        (
            if state.live_running().is_some() {
                "NOW"
            } else {
                "DECISION"
            },
            cols.decision + 1,
        ),
        ("RECORD", 7),
        ("HOST", 5),
    ];
    if let Some((reg, _)) = cols.registry {
        heads.push(("REG", reg));
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
}

/// The MODULE cell: the name, marked `⇡` when an upstream its Dockerfile names has moved past the
/// lock (what the upstreams source last heard; `u` updates and converges).
fn name_text(state: &AppState, module: &ModuleInfo) -> String {
    if state.moved_upstreams(&module.name).is_empty() {
        module.name.clone()
    } else {
        format!("{} ⇡", module.name)
    }
}

/// One module's cells with their widths; `selected` holds whether the pane has the focus.
fn row_cells(
    state: &AppState,
    module: &ModuleInfo,
    tier: String,
    cols: &Columns,
    selected: Option<bool>,
    palette: Palette,
) -> Vec<(Cell, u16)> {
    let (reference, ref_style) = ref_cell(state, module, palette);
    let reference = elide_ref(&reference, usize::from(cols.reference));
    let name_style = match selected {
        Some(has_focus) => palette.selected(has_focus),
        None => palette.plain(),
    };
    let mut cells: Vec<(Cell, u16)> = vec![
        ((tier, palette.dim()), 2),
        ((name_text(state, module), name_style), cols.name + 1),
        ((reference, ref_style), cols.reference + 1),
        (
            decision_cell(state, &module.name, palette),
            cols.decision + 1,
        ),
        (record_cell(state, &module.name, palette), 7),
        (host_cell(state, &module.name, palette), 5),
    ];
    if let Some((reg, form)) = cols.registry {
        cells.push((registry_cell_as(state, &module.name, form, palette), reg));
    }
    cells.push((machines_cell(state, &module.name, palette), MACHINES_W + 1));
    cells.push((last_build_cell(state, &module.name, palette), LAST_W));
    cells
}

/// One row; the selected one (`Some(has_focus)`) is highlighted across the whole width.
fn draw_row(
    buf: &mut Buffer,
    area: Rect,
    y: u16,
    cells: Vec<(Cell, u16)>,
    selected: Option<bool>,
    palette: Palette,
) {
    let mut x = area.x;
    if let Some(has_focus) = selected {
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
        let style = match selected {
            Some(has_focus) => style.patch(palette.selected(has_focus)),
            None => style,
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

#[cfg(test)]
mod tests {
    use super::elide_ref;

    #[test]
    fn refs_keep_their_tag() {
        let r = "demo/worker:0c1d2e3f4a5b-amd64";
        assert_eq!(elide_ref(r, 40), r);
        assert_eq!(elide_ref(r, 28), "demo/wor…:0c1d2e3f4a5b-amd64");
        assert_eq!(elide_ref(r, 28).chars().count(), 28);
        assert_eq!(elide_ref(r, 12), "0c1d2e3f4a5b-amd64");
    }
}
