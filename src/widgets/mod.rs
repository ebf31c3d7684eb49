//! Drawing only: a widget reads the state and draws; it never does I/O and never changes state.
//! Every size down to 40×10 draws; a smaller terminal is told so.

pub mod builds;
pub mod confirm;
pub mod converge;
pub mod detail;
pub mod footer;
pub mod gc;
pub mod header;
pub mod help;
pub mod machines;
pub mod modules;
pub mod record_history;
pub mod stats;

use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, Clear};

use crate::app::keys::Mode;
use crate::app::state::{AppState, Pane};
use crate::mesh::text::short_id;

pub const MIN_WIDTH: u16 = 40;
pub const MIN_HEIGHT: u16 = 10;

/// Styles, or modifiers only under `NO_COLOR`.
#[derive(Debug, Clone, Copy)]
pub struct Palette {
    pub no_color: bool,
}

impl Palette {
    pub fn of(state: &AppState) -> Palette {
        Palette {
            no_color: state.no_color,
        }
    }

    fn fg(self, color: Color) -> Style {
        if self.no_color {
            Style::default()
        } else {
            Style::default().fg(color)
        }
    }

    pub fn plain(self) -> Style {
        Style::default()
    }
    pub fn good(self) -> Style {
        self.fg(Color::Green)
    }
    pub fn bad(self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }
    pub fn warn(self) -> Style {
        self.fg(Color::Yellow)
    }
    pub fn info(self) -> Style {
        self.fg(Color::Cyan)
    }
    pub fn special(self) -> Style {
        self.fg(Color::Magenta)
    }
    /// A module rolled back by hand: a colour no other decision wears (underlined under `NO_COLOR`).
    pub fn pinned(self) -> Style {
        if self.no_color {
            Style::default().add_modifier(Modifier::UNDERLINED)
        } else {
            Style::default()
                .fg(Color::LightBlue)
                .add_modifier(Modifier::BOLD)
        }
    }
    pub fn dim(self) -> Style {
        if self.no_color {
            Style::default()
        } else {
            Style::default().fg(Color::DarkGray)
        }
    }
    pub fn heading(self) -> Style {
        Style::default().add_modifier(Modifier::BOLD)
    }
    pub fn selected(self, focused: bool) -> Style {
        if focused {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default().add_modifier(Modifier::BOLD)
        }
    }
}

/// Write `text` at (x, y) within `area`, at most `width` cells; nothing outside the area.
pub fn put(
    buf: &mut Buffer,
    area: Rect,
    x: u16,
    y: u16,
    width: usize,
    text: &str,
    style: Style,
) -> u16 {
    if y < area.top() || y >= area.bottom() || x >= area.right() || x < area.left() {
        return x;
    }
    let room = usize::from(area.right() - x).min(width);
    // Text that does not fit ends in `…`, never mid-word without a mark.
    if room > 0 && ratatui::text::Span::raw(text).width() > room {
        let end = buf.set_stringn(x, y, text, room - 1, style).0;
        return buf.set_stringn(end, y, "…", 1, style).0;
    }
    buf.set_stringn(x, y, text, room, style).0
}

/// A pane's title rule: `── title ───────`, bold when the pane has the focus.
pub fn rule(buf: &mut Buffer, area: Rect, title: &str, focused: bool, palette: Palette) {
    if area.height == 0 {
        return;
    }
    let style = if focused {
        palette.heading().add_modifier(Modifier::UNDERLINED)
    } else {
        palette.dim()
    };
    let text = format!("── {title} ");
    let end = put(buf, area, area.x, area.y, usize::MAX, &text, style);
    let fill = usize::from(area.right().saturating_sub(end));
    put(
        buf,
        area,
        end,
        area.y,
        fill,
        &"─".repeat(fill),
        palette.dim(),
    );
}

/// `sha256:3f9c2a1b7d4e` (the 12 first hex digits).
pub fn short_digest(digest: &str) -> String {
    format!("sha256:{}", short_id(digest))
}

/// The tag part of a ref (`demo/api:9a8b…-amd64` → `9a8b…-amd64`).
pub fn tag_of(reference: &str) -> &str {
    reference.rsplit_once(':').map_or(reference, |(_, tag)| tag)
}

/// The row offset that keeps `selected` visible in `height` rows.
pub fn scroll_offset(selected: usize, height: usize) -> usize {
    if height == 0 {
        0
    } else {
        selected.saturating_sub(height - 1)
    }
}

/// A rectangle centered in `area`, at most `width`×`height`.
pub fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    }
}

/// A bordered overlay centred in `body`: clears what is under it, draws the frame and title, and
/// returns the inside (None when too small to hold anything).
pub fn overlay(buf: &mut Buffer, body: Rect, width: u16, height: u16, title: &str) -> Option<Rect> {
    let area = centered(body, width, height);
    Clear.render_into(buf, area);
    Block::default()
        .borders(Borders::ALL)
        .title(title.to_string())
        .render_into(buf, area);
    if area.height < 3 || area.width < 3 {
        return None;
    }
    Some(Rect {
        x: area.x + 1,
        y: area.y + 1,
        width: area.width - 2,
        height: area.height - 2,
    })
}

/// Where each pane goes for a body area.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Panes {
    pub modules: Rect,
    pub detail: Rect,
    pub machines: Rect,
    pub builds: Rect,
    pub converge: Rect,
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
    let converge = h - modules - lower - builds;
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
        converge: row(modules + lower + builds, converge),
    }
}

/// Draw the whole screen.
pub fn draw(frame: &mut Frame, state: &AppState) {
    let area = frame.area();
    draw_to(frame.buffer_mut(), area, state);
}

/// Draw the whole screen into a buffer (benchmarks and tests draw here too).
pub fn draw_to(buf: &mut Buffer, area: Rect, state: &AppState) {
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
    converge::draw(buf, panes.converge, state, palette);
    match state.mode {
        Mode::Help => help::draw(buf, body, state, palette),
        Mode::Detail => {
            Clear.render_into(buf, body);
            detail::draw_full(buf, body, state, palette);
        }
        Mode::Confirm => confirm::draw(buf, body, state, palette),
        Mode::Normal | Mode::Filter => {}
    }
}

/// Whether a pane has the keyboard.
pub fn focused(state: &AppState, pane: Pane) -> bool {
    state.focus == pane && matches!(state.mode, Mode::Normal)
}

trait RenderInto {
    fn render_into(self, buf: &mut Buffer, area: Rect);
}

impl<W: ratatui::widgets::Widget> RenderInto for W {
    fn render_into(self, buf: &mut Buffer, area: Rect) {
        self.render(area, buf);
    }
}
