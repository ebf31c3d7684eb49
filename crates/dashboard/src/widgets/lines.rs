//! Drawing helpers every widget shares: the palette, writing a cut cell, a pane's rule, an
//! overlay, short forms of digests and refs, and the cells and summaries more than one pane shows
//! (a module's state in the running operation, a build in one line). They call no widget.

use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, Clear};

use crate::app::keys::Mode;
use crate::app::state::{AppState, Pane};
use crate::mesh::builds::BuildRow;
use crate::mesh::decide::Decision;
use crate::mesh::live::{LiveModule, ModuleRun};
use crate::mesh::text::short_id;
use crate::timefmt;

/// One cell: text and style.
pub type Cell = (String, Style);

/// Styles, or modifiers only under `NO_COLOR`.
#[derive(Debug, Clone, Copy)]
pub struct Palette {
    pub no_color: bool,
}

impl Palette {
    pub(crate) fn of(state: &AppState) -> Palette {
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

    pub(crate) fn plain(self) -> Style {
        Style::default()
    }
    pub(crate) fn good(self) -> Style {
        self.fg(Color::Green)
    }
    pub fn bad(self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }
    pub(crate) fn warn(self) -> Style {
        self.fg(Color::Yellow)
    }
    pub(crate) fn info(self) -> Style {
        self.fg(Color::Cyan)
    }
    pub(crate) fn special(self) -> Style {
        self.fg(Color::Magenta)
    }
    /// A module rolled back by hand: a colour no other decision wears (underlined under `NO_COLOR`).
    pub(crate) fn pinned(self) -> Style {
        if self.no_color {
            Style::default().add_modifier(Modifier::UNDERLINED)
        } else {
            Style::default()
                .fg(Color::LightBlue)
                .add_modifier(Modifier::BOLD)
        }
    }
    pub(crate) fn dim(self) -> Style {
        if self.no_color {
            Style::default()
        } else {
            Style::default().fg(Color::DarkGray)
        }
    }
    pub(crate) fn heading(self) -> Style {
        Style::default().add_modifier(Modifier::BOLD)
    }
    pub(crate) fn selected(self, focused: bool) -> Style {
        if focused {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default().add_modifier(Modifier::BOLD)
        }
    }
}

/// Write `text` at (x, y) within `area`, at most `width` cells; nothing outside the area.
pub(crate) fn put(
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
pub(crate) fn rule(buf: &mut Buffer, area: Rect, title: &str, focused: bool, palette: Palette) {
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
pub(crate) fn short_digest(digest: &str) -> String {
    format!("sha256:{}", short_id(digest))
}

/// The tag part of a ref (`demo/api:9a8b…-amd64` → `9a8b…-amd64`).
pub(crate) fn tag_of(reference: &str) -> &str {
    reference.rsplit_once(':').map_or(reference, |(_, tag)| tag)
}

/// The row offset that keeps `selected` visible in `height` rows.
pub(crate) fn scroll_offset(selected: usize, height: usize) -> usize {
    if height == 0 {
        0
    } else {
        selected.saturating_sub(height - 1)
    }
}

/// A rectangle centered in `area`, at most `width`×`height`.
pub(crate) fn centered(area: Rect, width: u16, height: u16) -> Rect {
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
pub(crate) fn overlay(
    buf: &mut Buffer,
    body: Rect,
    width: u16,
    height: u16,
    title: &str,
) -> Option<Rect> {
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

/// Whether a pane has the keyboard.
pub(crate) fn focused(state: &AppState, pane: Pane) -> bool {
    state.focus == pane && matches!(state.mode, Mode::Normal)
}

/// A module's state in the running operation: `queued`, `building 2/4 12s`, `built 40s`,
/// `delivered`, `skip·record`, `failed`, `not reached`, `cancelled`, with `sent 1/2` once it sends.
pub(crate) fn live_cell(module: &LiveModule, now_ms: i64, palette: Palette) -> Cell {
    let sends = module.sends;
    let bad_sends = if sends.failed > 0 {
        palette.bad()
    } else {
        palette.good()
    };
    let (text, style) = match &module.run {
        // An operation that only sends: its state is the sending itself.
        ModuleRun::Sending => {
            return (
                format!("sending {}/{}", sends.moved, sends.started),
                palette.warn(),
            );
        }
        ModuleRun::Sent => return (format!("sent {}/{}", sends.moved, sends.started), bad_sends),
        ModuleRun::Queued => ("queued".to_string(), palette.dim()),
        ModuleRun::ToBuild => ("to build".to_string(), palette.warn()),
        ModuleRun::Building { since_ms, step } => {
            let step = step.map_or(String::new(), |(n, m)| format!("{n}/{m} "));
            let on = module
                .builder
                .as_ref()
                .map_or(String::new(), |b| format!(" on {b}"));
            (
                format!("building {step}{}{on}", timefmt::elapsed(now_ms - since_ms)),
                palette.warn(),
            )
        }
        ModuleRun::Built { took_ms } => (
            format!("built {}", timefmt::elapsed(*took_ms)),
            palette.good(),
        ),
        ModuleRun::Delivered { built: true } => ("delivered".to_string(), palette.good()),
        ModuleRun::Delivered { built: false } => ("delivered·host".to_string(), palette.info()),
        ModuleRun::Skipped(Decision::Pinned) => ("pinned".to_string(), palette.special()),
        ModuleRun::Skipped(Decision::Host) => ("skip·host".to_string(), palette.info()),
        ModuleRun::Skipped(Decision::Registry) => ("skip·registry".to_string(), palette.info()),
        ModuleRun::Skipped(_) => ("skip·record".to_string(), palette.good()),
        ModuleRun::Failed(_) => ("failed".to_string(), palette.bad()),
        ModuleRun::NotReached(_) => ("not reached".to_string(), palette.bad()),
        ModuleRun::Cancelled => ("cancelled".to_string(), palette.dim()),
        ModuleRun::Ended(_) => ("stopped".to_string(), palette.bad()),
    };
    if sends.started == 0 {
        return (text, style);
    }
    let style = if sends.failed > 0 {
        palette.bad()
    } else {
        style
    };
    (
        format!("{text} sent {}/{}", sends.moved, sends.started),
        style,
    )
}

/// Whether a failed build was for the module's current ref (an unknown ref counts as current).
pub(crate) fn failed_for_current(build: &BuildRow, current: Option<&str>) -> bool {
    match (build.reference.as_deref(), current) {
        (Some(built), Some(current)) => built == current,
        _ => true,
    }
}

/// `✓ succeeded 3m ago on host-a from c0ffee1`.
pub fn build_summary(build: &BuildRow, now_ms: i64) -> String {
    let age = build.age(now_ms);
    let commit = build
        .commit
        .as_deref()
        .map(crate::mesh::text::short_commit)
        .unwrap_or("no commit");
    let dirty = if build.dirty { "+dirty" } else { "" };
    format!(
        "{} {age} ago on {} from {commit}{dirty}",
        build.shown_status(),
        build.host
    )
}

pub(crate) trait RenderInto {
    fn render_into(self, buf: &mut Buffer, area: Rect);
}

impl<W: ratatui::widgets::Widget> RenderInto for W {
    fn render_into(self, buf: &mut Buffer, area: Rect) {
        self.render(area, buf);
    }
}
