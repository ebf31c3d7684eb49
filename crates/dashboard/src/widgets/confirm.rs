//! The confirmation: what exactly will happen, with Cancel selected by default.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

use crate::app::keys::{Action, Mode};
use crate::app::state::AppState;

use super::lines::{Palette, overlay, put};

pub(crate) fn draw(buf: &mut Buffer, body: Rect, state: &AppState, palette: Palette) {
    let Some(confirm) = &state.confirm else {
        return;
    };
    let longest = confirm
        .lines
        .iter()
        .map(|l| l.chars().count())
        .max()
        .unwrap_or(20) as u16;
    let width = (longest + 2).clamp(30, body.width);
    // Long lines wrap: every digest is shown whole.
    let lines = wrap(&confirm.lines, usize::from(width.saturating_sub(2)).max(1));
    let height = (lines.len() as u16 + 4).min(body.height);
    let Some(inner) = overlay(buf, body, width, height, &format!(" {} ", confirm.title)) else {
        return;
    };
    let rows = usize::from(inner.height.saturating_sub(1));
    let shown = if lines.len() > rows {
        rows.saturating_sub(1)
    } else {
        rows
    };
    for (row, line) in lines.iter().take(shown).enumerate() {
        put(
            buf,
            inner,
            inner.x,
            inner.y + row as u16,
            usize::from(inner.width),
            line,
            palette.plain(),
        );
    }
    if lines.len() > shown && rows > 0 {
        let more = format!("… and {} more lines", lines.len() - shown);
        put(
            buf,
            inner,
            inner.x,
            inner.y + shown as u16,
            usize::MAX,
            &more,
            palette.dim(),
        );
    }
    let y = inner.bottom() - 1;
    let cancel = if confirm.go {
        palette.plain()
    } else {
        palette.selected(true)
    };
    let go = if confirm.go {
        palette.selected(true)
    } else {
        palette.plain()
    };
    let x = put(buf, inner, inner.x, y, usize::MAX, "[ Cancel ]", cancel) + 2;
    let x = put(
        buf,
        inner,
        x,
        y,
        usize::MAX,
        &format!("[ {} ]", confirm.verb),
        go,
    ) + 2;
    put(
        buf,
        inner,
        x,
        y,
        usize::MAX,
        &state.keys.hint_line(
            Mode::Confirm,
            &[Action::Toggle, Action::Accept, Action::Close],
        ),
        palette.dim(),
    );
}

/// Cut lines longer than `width` characters into continuation lines indented by four spaces.
pub(crate) fn wrap(lines: &[String], width: usize) -> Vec<String> {
    let mut out = Vec::new();
    for line in lines {
        let chars: Vec<char> = line.chars().collect();
        if chars.len() <= width {
            out.push(line.clone());
            continue;
        }
        out.push(chars[..width].iter().collect());
        let room = width.saturating_sub(4).max(1);
        for chunk in chars[width..].chunks(room) {
            out.push(format!("    {}", chunk.iter().collect::<String>()));
        }
    }
    out
}
