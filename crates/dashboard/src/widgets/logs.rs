//! The logs view (`l`) in the detail overlay: the newest lines at the bottom, each machine's name
//! before its lines when there are several (as `meshtop logs` prints them), stderr and the markers
//! (a run began, an exit, a send's new container, dropped lines) in their own styles, the search's
//! matches highlighted. Only the rows on screen are laid out.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Modifier, Style};

use crate::app::keys::{Action, Mode};
use crate::app::log_view::LogView;
use crate::app::state::AppState;
use crate::mesh::logs::{LogItem, Shown, Stream};

use super::lines::{Palette, put, rule};

pub(crate) fn draw(buf: &mut Buffer, area: Rect, state: &AppState, palette: Palette) {
    let Some(view) = &state.logs else {
        return;
    };
    let shown = view.book.shown();
    rule(buf, area, &title(state, view, &shown), true, palette);
    if area.height < 2 || area.width < 4 {
        return;
    }
    let body = Rect {
        y: area.y + 1,
        height: area.height - 1,
        ..area
    };
    if shown.is_empty() {
        let waiting = match &view.ended {
            Some(_) => "nothing to show",
            None => "waiting for the machines to speak…",
        };
        put(
            buf,
            body,
            body.x,
            body.y,
            usize::from(body.width),
            waiting,
            palette.dim(),
        );
        return;
    }
    let rows = layout(
        view,
        &shown,
        usize::from(body.width),
        usize::from(body.height),
        palette,
    );
    let query: Vec<char> = view.query.to_lowercase().chars().collect();
    for (row, laid) in rows.iter().enumerate() {
        let y = body.y + row as u16;
        draw_row(buf, body, y, laid, &query);
    }
}

/// `logs · module api · 2 machines · following · /err (3 matches) · hints`.
fn title(state: &AppState, view: &LogView, shown: &[Shown<'_>]) -> String {
    let keys = &state.keys;
    let mut parts = vec![format!("logs · {}", view.title)];
    if view.machines.len() > 1 {
        parts.push(format!("{} machines", view.machines.len()));
    }
    if view.previous {
        parts.push("previous container".into());
    }
    parts.push(if view.following() {
        "following".into()
    } else {
        format!(
            "line {} of {} ({} follows)",
            shown.len() - view.scroll,
            shown.len(),
            keys.keys_text(Mode::Logs, Action::Bottom)
        )
    });
    if state.mode == Mode::LogSearch {
        parts.push(format!("/{}█", view.query));
    } else if !view.query.is_empty() {
        let found = view.book.matches(&view.query).len();
        parts.push(format!("/{} ({found} matching)", view.query));
    }
    if let Some(failures) = &view.ended {
        for (machine, why) in failures {
            parts.push(format!("✗ {machine}: {why}"));
        }
    }
    let hints = if state.mode == Mode::LogSearch {
        keys.hint_line(Mode::LogSearch, &[Action::Accept, Action::Close])
    } else {
        keys.hint_line(
            Mode::Logs,
            &[
                Action::Search,
                Action::Wrap,
                Action::Previous,
                Action::Close,
            ],
        )
    };
    parts.push(hints);
    parts.join(" · ")
}

/// One screen row: its characters, and how many of them are the machine's prefix.
struct Row {
    chars: Vec<char>,
    prefix: usize,
    style: Style,
    /// The row's first character's place in its line (a continuation's indent excluded).
    indent: usize,
}

/// The rows that fill the body, oldest first, ending `view.scroll` lines above the newest.
fn layout(
    view: &LogView,
    shown: &[Shown<'_>],
    width: usize,
    height: usize,
    palette: Palette,
) -> Vec<Row> {
    let last = shown.len() - 1 - view.scroll.min(shown.len() - 1);
    let mut rows: Vec<Row> = Vec::with_capacity(height);
    for index in (0..=last).rev() {
        if rows.len() >= height {
            break;
        }
        let item = &shown[index];
        let text: Vec<char> = view.book.text(item, false).chars().collect();
        let prefix = view
            .book
            .prefix(item.machine)
            .map_or(0, |p| p.chars().count());
        let mut style = match item.item {
            LogItem::Line {
                stream: Stream::Stderr,
                ..
            } => palette.warn(),
            LogItem::Line { .. } => palette.plain(),
            LogItem::Cut { .. } => palette.bad(),
            _ => palette.dim(),
        };
        if view.at_match == Some(index) {
            style = style.add_modifier(Modifier::BOLD);
        }
        let mut pieces = Vec::new();
        if !view.wrap || text.len() <= width || width < 8 {
            let mut chars = text;
            if chars.len() > width {
                chars.truncate(width.saturating_sub(1));
                chars.push('…');
            }
            pieces.push(Row {
                chars,
                prefix,
                style,
                indent: 0,
            });
        } else {
            let mut at = 0;
            while at < text.len() {
                let room = if at == 0 { width } else { width - 2 };
                let end = (at + room).min(text.len());
                let mut chars: Vec<char> = if at == 0 { Vec::new() } else { vec![' ', ' '] };
                chars.extend(&text[at..end]);
                pieces.push(Row {
                    chars,
                    prefix: prefix.saturating_sub(at),
                    style,
                    indent: if at == 0 { 0 } else { 2 },
                });
                at = end;
            }
        }
        for piece in pieces.into_iter().rev() {
            rows.push(piece);
        }
    }
    rows.truncate(height);
    rows.reverse();
    rows
}

/// Draw one row in runs of one style: the prefix, the text, the search's matches reversed.
fn draw_row(buf: &mut Buffer, area: Rect, y: u16, row: &Row, query: &[char]) {
    let lower: Vec<char> = row
        .chars
        .iter()
        .map(|c| c.to_lowercase().next().unwrap_or(*c))
        .collect();
    let mut matched = vec![false; row.chars.len()];
    if !query.is_empty() && lower.len() >= query.len() {
        for start in 0..=lower.len() - query.len() {
            if lower[start..start + query.len()] == *query {
                matched[start..start + query.len()].fill(true);
            }
        }
    }
    let style_at = |i: usize| {
        let mut style = row.style;
        if i >= row.indent && i - row.indent < row.prefix {
            style = style.add_modifier(Modifier::DIM);
        }
        if matched[i] {
            style = style.add_modifier(Modifier::REVERSED);
        }
        style
    };
    let mut x = area.x;
    let mut start = 0;
    while start < row.chars.len() {
        let style = style_at(start);
        let mut end = start + 1;
        while end < row.chars.len() && style_at(end) == style {
            end += 1;
        }
        let run: String = row.chars[start..end].iter().collect();
        x = put(buf, area, x, y, usize::MAX, &run, style);
        start = end;
    }
}
