//! The `?` overlay, generated from the key table (what is not in the table is not here either).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::keys::{Action, Mode};
use crate::app::state::AppState;

use super::lines::{Palette, overlay, put};

/// What every column and symbol of the screen means.
const LEGEND: [&str; 30] = [
    "T          tier: 0 has no base in the mesh, else its base's tier + 1",
    "REF        the content address <mesh>/<module>:<hash12>-<arch>; `pending (base)`",
    "           until the base's artifact is known; a long one keeps its tag: `demo/…:3f9c…`",
    "DECISION   skip·record  the target's record names this ref: no build, no delivery",
    "           deliver·host the host holds a meshtop-labelled image with this tag: delivery only",
    "           build        nothing vouches: build and deliver; forced: --force / f",
    "           refused      its base has no artifact in the mesh yet",
    "           ⚑ pinned     rolled back by hand (rollback): converges keep its artifact until its",
    "                        address moves to a third one, `meshtop unpin` or a forced converge;",
    "                        the detail says from what, by whom, when (#op) and the record history",
    "NOW        replaces DECISION while an operation runs (from any process): queued, to build,",
    "           building 2/4 12s (Dockerfile step, time), built 40s, delivered(·host), skip·record,",
    "           failed, not reached (its base failed), cancelled; sent 1/2 machines moved; a send",
    "           or rollback: sending 0/2, sent 2/2; – the module is not part of the operation",
    "RECORD     ✓ the record names this ref  ✗ it does not  ? could not be asked",
    "HOST, REG  – cannot tell (ref pending, multi-platform, not asked)",
    "MACHINES   2/2 current of all  1 behind/3 (policy rollout: a converge sends them)",
    "           held (policy record: they stay until someone sends)  1 missing/2 (declared,",
    "           does not exist)  – none  ? the machines could not be listed",
    "LAST BUILD ✓ 3m host-a (the build host's name)  ✗ 1h failed (for the current ref)",
    "           ✗ 1h old ref (a failure of an older ref)  … running  – cancelled  ■ stopped",
    "machine    current  behind  held  unrecorded (the record holds nothing)  missing",
    "builds     ✓ ok  ✗ failed (first line of its error)  … running  – cancelled  ■ stopped",
    "           (its converge ended without its end, or its process is gone: `(process gone)`)",
    "converge   the newest operation of the mesh, `#42` its short id, from any process",
    "notice     ⟳ #42 … · tier 2 of 3 · 3/7 done · 42s: the operation running; its end after;",
    "           ✗ #42 stopped (process gone): it never ended and its process is gone",
    "detail     opens at its end: a failure's last log lines, then its error; `w` wraps",
    "header     each source's age, or ✗ its error (last ok 40s ago)",
    "gc, stats  views: what a sweep would take and why, the keep set; what the skips saved",
];

/// The help text: one heading per mode, one line per action, then the legend.
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
            // The same action reads differently per mode: say what it does here.
            let description = match (mode, binding.action) {
                (Mode::Normal, Action::Close) => "clear the filter and the notice",
                (Mode::Confirm, Action::Close) => "cancel",
                (Mode::Detail | Mode::Help, Action::Close) => "close",
                (Mode::Detail | Mode::Help, Action::Up | Action::Down) => "scroll",
                (Mode::Detail | Mode::Help, Action::Top) => "to the start",
                (Mode::Detail | Mode::Help, Action::Bottom) => "to the end",
                (Mode::Confirm, Action::Accept) => "do what is selected (Cancel by default)",
                (Mode::Filter, Action::Accept) => "keep the filter",
                (Mode::Filter, Action::Close) => "clear the filter",
                (_, action) => action.description(),
            };
            lines.push((format!("  {keys:<18} {description}"), false));
        }
    }
    lines.push(("legend".to_string(), true));
    lines.extend(LEGEND.iter().map(|l| (format!("  {l}"), false)));
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
