//! The `?` overlay, generated from the key table (what is not in the table is not here either).

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::keys::{Action, Mode};
use crate::app::state::AppState;

use super::lines::{Palette, overlay, put};

/// What every column and symbol of the screen means. `{force}`, `{wrap}` and `{logs}` stand for
/// the keys the key table binds (see [`legend`]): a rebinding in `keys.toml` shows here too.
const LEGEND: [&str; 34] = [
    "T          tier: 0 has no base in the mesh, else its base's tier + 1",
    "REF        the content address <mesh>/<module>:<hash12>-<arch>; `pending (base)`",
    "           until the base's artifact is known; a long one keeps its tag: `demo/…:3f9c…`",
    "DECISION   skip·record  the target's record names this ref: no build, no delivery",
    "           deliver·host the host holds a meshtop-labelled image with this tag: delivery only",
    "           build        nothing vouches: build and deliver; forced: --force{force}",
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
    "detail     opens at its end: a failure's last log lines, then its error; `{wrap}` wraps",
    "logs       `{logs}`: newest at the bottom, following; `api-1 | ` names the machine, `stderr| ` its",
    "           stream; ── markers say where a run began, an exit, a send's new container",
    "header     each source's age, or ✗ its error (last ok 40s ago)",
    "gc, stats  views: what a sweep would take and why, the keep set; what the skips saved",
    "envs       view: modules down, targets across: the recorded artifact, machines (2/2,",
    "           1 behind, missing), ≠ differs from its promote_from, its age; [cell] selected",
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
        Mode::Logs,
        Mode::LogSearch,
        Mode::Help,
    ] {
        lines.push((format!("{} mode", mode.name()), true));
        for binding in state.keys.bindings(mode) {
            let keys = state.keys.keys_text(mode, binding.action);
            // The same action reads differently per mode: the row says what it does here.
            let description = binding.action.says_in(mode);
            lines.push((format!("  {keys:<18} {description}"), false));
        }
    }
    lines.push(("legend".to_string(), true));
    lines.extend(legend(state).into_iter().map(|l| (format!("  {l}"), false)));
    if !state.warnings.is_empty() {
        lines.push(("warnings".to_string(), true));
        lines.extend(state.warnings.iter().map(|w| (format!("  {w}"), false)));
    }
    lines
}

/// The legend with the keys the table binds: ` / f` after `--force` (nothing in read-only, where
/// no key forces), the detail's wrap key, the logs key.
fn legend(state: &AppState) -> Vec<String> {
    let keys = |mode, action| state.keys.keys_text(mode, action);
    let force = match keys(Mode::Normal, Action::ForceRebuild) {
        key if key.is_empty() => String::new(),
        key => format!(" / {key}"),
    };
    let (wrap, logs) = (
        keys(Mode::Detail, Action::Wrap),
        keys(Mode::Normal, Action::Logs),
    );
    LEGEND
        .iter()
        .map(|line| {
            line.replace("{force}", &force)
                .replace("{wrap}", &wrap)
                .replace("{logs}", &logs)
        })
        .collect()
}

/// The help is as wide as the terminal lets it be (up to what its longest line needs), never a
/// fixed box: its lines wrap at words and are never cut.
const MAX_HELP_WIDTH: u16 = 124;

pub(crate) fn draw(buf: &mut Buffer, body: Rect, state: &AppState, palette: Palette) {
    let close = state
        .keys
        .hint_line(Mode::Help, &[Action::Close, Action::Help]);
    let title = format!(" help · {close} ");
    let width = body.width.clamp(3, MAX_HELP_WIDTH);
    let Some(inner) = overlay(buf, body, width, body.height, &title) else {
        return;
    };
    let lines = wrapped(&help_lines(state), usize::from(inner.width));
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

/// The help's lines wrapped at words to `width` columns; a continuation is indented under the
/// text it continues (past the key or the column name), so nothing is cut.
pub(crate) fn wrapped(lines: &[(String, bool)], width: usize) -> Vec<(String, bool)> {
    let mut out = Vec::with_capacity(lines.len());
    for (text, heading) in lines {
        for piece in wrap_words(text, width) {
            out.push((piece, *heading));
        }
    }
    out
}

fn wrap_words(text: &str, width: usize) -> Vec<String> {
    if text.chars().count() <= width || width < 8 {
        return vec![text.to_string()];
    }
    let indent = continuation_indent(text).min(width / 2);
    let mut out = Vec::new();
    let mut line = String::new();
    let mut len = 0;
    // Nothing but the indent on this line yet.
    let mut fresh = true;
    for (gap, word) in segments(text) {
        let mut word: Vec<char> = word.chars().collect();
        if !fresh && len + gap + word.len() > width {
            out.push(std::mem::take(&mut line));
            line = " ".repeat(indent);
            len = indent;
            fresh = true;
        }
        // The first line keeps its lead and the column spacing; a continuation's indent
        // replaces the gap it broke at.
        if !fresh || out.is_empty() {
            line.push_str(&" ".repeat(gap));
            len += gap;
        }
        // A word longer than a whole line is split where the line ends.
        while len + word.len() > width {
            let take = width.saturating_sub(len).clamp(1, word.len());
            line.extend(word.drain(..take));
            out.push(std::mem::take(&mut line));
            line = " ".repeat(indent);
            len = indent;
        }
        len += word.len();
        line.extend(word);
        fresh = false;
    }
    out.push(line);
    out
}

/// A line as (spaces before, word) pairs, so that wrapping keeps the spacing between columns.
fn segments(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut rest = text;
    loop {
        let gap = rest.len() - rest.trim_start_matches(' ').len();
        rest = &rest[gap..];
        if rest.is_empty() {
            return out;
        }
        let end = rest.find(' ').unwrap_or(rest.len());
        out.push((gap, &rest[..end]));
        rest = &rest[end..];
    }
}

/// Where a help line's text starts: after its key column (`  ↑/k  …`) or the legend's column
/// name (`  DECISION   …`), found as the first run of two spaces after the line's start.
fn continuation_indent(text: &str) -> usize {
    let chars: Vec<char> = text.chars().collect();
    let lead = chars.iter().take_while(|c| **c == ' ').count();
    let mut i = lead;
    while i + 1 < chars.len() {
        if chars[i] == ' ' && chars[i + 1] == ' ' {
            let mut j = i;
            while j < chars.len() && chars[j] == ' ' {
                j += 1;
            }
            return j;
        }
        i += 1;
    }
    lead + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_line_wraps_at_words_under_its_text_and_loses_nothing() {
        let line =
            "  DECISION   build        nothing vouches: build and deliver; forced: --force / f";
        let lines = wrap_words(line, 40);
        assert_eq!(
            lines,
            vec![
                "  DECISION   build        nothing".to_string(),
                "             vouches: build and deliver;".to_string(),
                "             forced: --force / f".to_string(),
            ]
        );
        assert!(lines.iter().all(|l| l.chars().count() <= 40), "{lines:?}");
        let words = |t: &str| t.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        assert_eq!(words(&lines.join(" ")), words(line));
        // A line that fits is left as it is.
        assert_eq!(
            wrap_words("  T          tier", 40),
            vec!["  T          tier"]
        );
    }
}
