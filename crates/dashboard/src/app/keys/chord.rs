//! One key as the key table names it: parsed from `keys.toml`, matched against key events,
//! written in the help and the footer.

use std::fmt;

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

/// A key's name `keys.toml` gives that names no key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown key {text:?}: write one character, ctrl-<char>, or one of enter esc tab shift-tab \
     up down left right pgup pgdn home end space backspace f1…f12"
)]
pub struct UnknownKey {
    pub text: String,
}

/// One key: a code and whether Ctrl is held (Shift is part of the character itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Key {
    pub code: KeyCode,
    pub ctrl: bool,
}

impl Key {
    pub const fn plain(code: KeyCode) -> Key {
        Key { code, ctrl: false }
    }

    pub const fn ch(c: char) -> Key {
        Key {
            code: KeyCode::Char(c),
            ctrl: false,
        }
    }

    /// Parse `q`, `G`, `?`, `ctrl-c`, `enter`, `esc`, `tab`, `shift-tab`, `up`, `pgdn`, `f1`…
    pub fn parse(text: &str) -> Result<Key, UnknownKey> {
        let bad = || UnknownKey {
            text: text.to_string(),
        };
        if let Some(rest) = text.strip_prefix("ctrl-") {
            let mut chars = rest.chars();
            return match (chars.next(), chars.next()) {
                (Some(c), None) => Ok(Key {
                    code: KeyCode::Char(c.to_ascii_lowercase()),
                    ctrl: true,
                }),
                _ => Err(bad()),
            };
        }
        let mut chars = text.chars();
        if let (Some(c), None) = (chars.next(), chars.next()) {
            return Ok(Key::ch(c));
        }
        let code = match text.to_ascii_lowercase().as_str() {
            "enter" | "return" => KeyCode::Enter,
            "esc" | "escape" => KeyCode::Esc,
            "tab" => KeyCode::Tab,
            "shift-tab" | "backtab" => KeyCode::BackTab,
            "up" => KeyCode::Up,
            "down" => KeyCode::Down,
            "left" => KeyCode::Left,
            "right" => KeyCode::Right,
            "pgup" | "pageup" => KeyCode::PageUp,
            "pgdn" | "pagedown" => KeyCode::PageDown,
            "home" => KeyCode::Home,
            "end" => KeyCode::End,
            "space" => KeyCode::Char(' '),
            "backspace" => KeyCode::Backspace,
            other => match other.strip_prefix('f').and_then(|n| n.parse::<u8>().ok()) {
                Some(n) if (1..=12).contains(&n) => KeyCode::F(n),
                _ => return Err(bad()),
            },
        };
        Ok(Key::plain(code))
    }

    /// Whether a key event is this key (Shift is ignored: it is in the character already).
    pub fn matches(&self, event: &KeyEvent) -> bool {
        let ctrl = event.modifiers.contains(KeyModifiers::CONTROL);
        let code = match event.code {
            KeyCode::Char(c) if ctrl => KeyCode::Char(c.to_ascii_lowercase()),
            other => other,
        };
        code == self.code && ctrl == self.ctrl
    }

    /// A printable character without Ctrl: text in the filter line.
    pub fn is_text(&self) -> bool {
        matches!(self.code, KeyCode::Char(_)) && !self.ctrl
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ctrl {
            f.write_str("ctrl-")?;
        }
        match self.code {
            KeyCode::Char(' ') => f.write_str("space"),
            KeyCode::Char(c) => write!(f, "{c}"),
            KeyCode::Enter => f.write_str("enter"),
            KeyCode::Esc => f.write_str("esc"),
            KeyCode::Tab => f.write_str("tab"),
            KeyCode::BackTab => f.write_str("shift-tab"),
            KeyCode::Up => f.write_str("↑"),
            KeyCode::Down => f.write_str("↓"),
            KeyCode::Left => f.write_str("←"),
            KeyCode::Right => f.write_str("→"),
            KeyCode::PageUp => f.write_str("pgup"),
            KeyCode::PageDown => f.write_str("pgdn"),
            KeyCode::Home => f.write_str("home"),
            KeyCode::End => f.write_str("end"),
            KeyCode::Backspace => f.write_str("backspace"),
            KeyCode::F(n) => write!(f, "f{n}"),
            other => write!(f, "{other:?}"),
        }
    }
}
