//! Drawing only: a widget reads the state and draws; it never does I/O and never changes state.
//! Every size down to 40×10 draws; a smaller terminal is told so.

pub mod builds;
pub(crate) mod confirm;
pub mod detail;
pub(crate) mod environments;
pub mod footer;
pub(crate) mod gc;
pub mod header;
pub mod help;
pub(crate) mod ladder;
pub mod lines;
pub(crate) mod logs;
pub mod machines;
pub mod modules;
pub mod operation;
pub(crate) mod record_history;
pub(crate) mod stats;
pub(crate) mod timeline;

pub use lines::Palette;

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::widgets::Clear;

use crate::app::keys::Mode;
use crate::app::state::AppState;

use lines::{RenderInto, put};

pub(crate) const MIN_WIDTH: u16 = 40;
pub(crate) const MIN_HEIGHT: u16 = 10;

/// Where each pane goes for a body area.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Panes {
    pub modules: Rect,
    pub detail: Rect,
    pub machines: Rect,
    pub builds: Rect,
    /// The followed operation's progress.
    pub operation: Rect,
}

/// Split the body between the panes; small bodies keep the modules and the builds only.
pub fn split_body(body: Rect) -> Panes {
    let h = body.height;
    let row = |y: u16, height: u16| Rect {
        x: body.x,
        y: body.y + y,
        width: body.width,
        height,
    };
    if h < 12 {
        let builds = h / 3;
        return Panes {
            modules: row(0, h - builds),
            builds: row(h - builds, builds),
            ..Panes::default()
        };
    }
    let modules = h * 2 / 5;
    let lower = h / 4;
    let builds = (h - modules - lower) / 2;
    let operation = h - modules - lower - builds;
    let lower_area = row(modules, lower);
    let left = lower_area.width / 2;
    Panes {
        modules: row(0, modules),
        detail: Rect {
            width: left,
            ..lower_area
        },
        machines: Rect {
            x: lower_area.x + left + 1,
            width: lower_area.width.saturating_sub(left + 1),
            ..lower_area
        },
        builds: row(modules + lower, builds),
        operation: row(modules + lower + builds, operation),
    }
}

/// Draw the whole screen.
pub fn draw(frame: &mut Frame, state: &AppState) {
    let area = frame.area();
    draw_to(frame.buffer_mut(), area, state);
}

/// Draw the whole screen into a buffer (benchmarks and tests draw here too).
pub(crate) fn draw_to(buf: &mut Buffer, area: Rect, state: &AppState) {
    let palette = Palette::of(state);
    if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
        let text = format!("terminal too small (need {MIN_WIDTH}×{MIN_HEIGHT})");
        if usize::from(area.width) >= text.chars().count() {
            put(buf, area, area.x, area.y, usize::MAX, &text, palette.warn());
        } else {
            for (i, word) in text.split(' ').enumerate() {
                put(
                    buf,
                    area,
                    area.x,
                    area.y + i as u16,
                    usize::MAX,
                    word,
                    palette.warn(),
                );
            }
        }
        return;
    }
    let header_height = 2;
    let notice_height = u16::from(header::has_notice_line(state));
    let header_area = Rect {
        height: header_height,
        ..area
    };
    header::draw(buf, header_area, state, palette);
    let notice_area = Rect {
        y: area.y + header_height,
        height: notice_height,
        ..area
    };
    header::draw_notice(buf, notice_area, state, palette);
    let footer_area = Rect {
        y: area.bottom() - 1,
        height: 1,
        ..area
    };
    footer::draw(buf, footer_area, state, palette);
    let top = header_height + notice_height;
    let body = Rect {
        y: area.y + top,
        height: area.height - top - 1,
        ..area
    };
    // The logs view covers the body and redraws at every batch: nothing under it is drawn.
    if matches!(state.mode, Mode::Logs | Mode::LogSearch) {
        logs::draw(buf, body, state, palette);
        return;
    }
    let panes = split_body(body);
    modules::draw(buf, panes.modules, state, palette);
    detail::draw_pane(buf, panes.detail, state, palette);
    if panes.machines.width > 0 && panes.machines.height > 0 {
        for y in panes.machines.top()..panes.machines.bottom() {
            put(
                buf,
                area,
                panes.machines.x - 1,
                y,
                1,
                if y == panes.machines.y { "┬" } else { "│" },
                palette.dim(),
            );
        }
    }
    machines::draw(buf, panes.machines, state, palette);
    builds::draw(buf, panes.builds, state, palette);
    operation::draw(buf, panes.operation, state, palette);
    match state.mode {
        Mode::Help => help::draw(buf, body, state, palette),
        Mode::Detail => {
            Clear.render_into(buf, body);
            detail::draw_full(buf, body, state, palette);
        }
        Mode::Confirm => confirm::draw(buf, body, state, palette),
        Mode::Normal | Mode::Filter | Mode::Logs | Mode::LogSearch => {}
    }
}
