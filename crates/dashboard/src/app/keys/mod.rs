//! The ONE key table (its rows in `actions.rs`): it drives dispatch, the `?` help overlay and the
//! footer hints.
//! Users override it from `<config dir>/meshtop/keys.toml`; a bad override is reported, never fatal.
//! Long: the whole key table (actions, modes, defaults, overrides) is read as one; its tests are apart.

use ratatui::crossterm::event::KeyEvent;

mod actions;
mod chord;

use actions::CTRL_C;
pub use actions::{ACTIONS, Action, ActionRow, InMode};
pub use chord::{Key, UnknownKey};

/// Why one override in `keys.toml` is skipped (the default keys are kept): said as one warning
/// line after the section and the action's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindingError {
    #[error("unknown action; actions are {known}")]
    UnknownAction { known: String },
    #[error("ignored: --readonly removes this action")]
    Readonly,
    #[error("{item} is not a key; write keys as strings, e.g. \"ctrl-d\"")]
    NotAString { item: String },
    #[error("write a key as a string or a list of strings")]
    NotKeys,
    #[error(transparent)]
    UnknownKey(#[from] UnknownKey),
    #[error("no key given; the default keys are kept")]
    NoKey,
    #[error("{key} is text in the filter line; bind a non-printing key")]
    TextInFilter { key: Key },
    #[error("this action has no meaning in {mode} mode")]
    NoMeaningIn { mode: &'static str },
    #[error("{key} is already bound to {other}; the default keys are kept")]
    AlreadyBound { key: Key, other: &'static str },
}

/// The modes the keyboard is in; each has its own bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Normal,
    Filter,
    Help,
    Confirm,
    Detail,
    /// The logs view (`l`): scroll, follow, search, wrap, the previous container.
    Logs,
    /// Typing a search in the logs view.
    LogSearch,
}

impl Mode {
    pub const ALL: [Mode; 7] = [
        Mode::Normal,
        Mode::Filter,
        Mode::Help,
        Mode::Confirm,
        Mode::Detail,
        Mode::Logs,
        Mode::LogSearch,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Filter => "filter",
            Mode::Help => "help",
            Mode::Confirm => "confirm",
            Mode::Detail => "detail",
            Mode::Logs => "logs",
            Mode::LogSearch => "log_search",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// An action and its keys in one mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub action: Action,
    pub keys: Vec<Key>,
}

/// Names `keys.toml` takes at its top level as settings, not modes.
const SETTINGS: [&str; 1] = ["bell"];

/// Settings from `keys.toml` beside the key tables; None: as the command line says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `bell = false` turns off the bell (and the desktop notification), as `--no-bell` does.
    pub bell: Option<bool>,
}

/// The bindings of every mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTable {
    modes: [Vec<Binding>; 7],
}

/// The default bindings of a mode: every row that has keys there, in row order.
fn defaults(mode: Mode) -> impl Iterator<Item = (Action, &'static [Key])> {
    ACTIONS.iter().filter_map(move |row| {
        row.keys
            .iter()
            .find(|bound| bound.mode == mode)
            .map(|bound| (row.action, bound.keys))
    })
}

impl KeyTable {
    /// The built-in table; `readonly` drops every action that changes something.
    pub fn new(readonly: bool) -> KeyTable {
        let modes = Mode::ALL.map(|mode| {
            defaults(mode)
                .filter(|(action, _)| !(readonly && action.is_mutating()))
                .map(|(action, keys)| Binding {
                    action,
                    keys: keys.to_vec(),
                })
                .collect()
        });
        KeyTable { modes }
    }

    /// The settings `keys.toml` holds beside the key tables (`bell = false`); a bad value is one
    /// warning line and leaves the setting as the command line made it.
    pub(crate) fn settings_of(text: &str) -> (Settings, Vec<String>) {
        let mut settings = Settings::default();
        let Ok(parsed) = toml::from_str::<toml::Table>(text) else {
            // with_overrides reports the broken file.
            return (settings, Vec::new());
        };
        let mut warnings = Vec::new();
        if let Some(value) = parsed.get("bell") {
            match value.as_bool() {
                Some(bell) => settings.bell = Some(bell),
                None => warnings.push(format!(
                    "keys.toml: bell must be true or false, not {value}; the bell stays as it was"
                )),
            }
        }
        (settings, warnings)
    }

    /// The built-in table with the user's overrides (`keys.toml` text) applied. Each problem is
    /// one warning line; a bad override is skipped, the default kept.
    pub fn with_overrides(readonly: bool, text: &str) -> (KeyTable, Vec<String>) {
        let mut table = KeyTable::new(readonly);
        let mut warnings = Vec::new();
        let parsed: toml::Table = match toml::from_str(text) {
            Ok(parsed) => parsed,
            Err(error) => {
                let first = error.to_string().lines().next().unwrap_or("").to_string();
                return (
                    table,
                    vec![format!(
                        "keys.toml is not valid TOML ({first}); using the default keys"
                    )],
                );
            }
        };
        for (section, value) in &parsed {
            // Top-level settings (not key bindings): read by `settings_of`.
            if SETTINGS.contains(&section.as_str()) {
                continue;
            }
            let Some(mode) = Mode::ALL.into_iter().find(|m| m.name() == section) else {
                warnings.push(format!(
                    "keys.toml: unknown mode [{section}]; modes are normal, filter, help, confirm, detail, logs, log_search"
                ));
                continue;
            };
            let Some(entries) = value.as_table() else {
                warnings.push(format!(
                    "keys.toml: [{section}] must be a table of action = \"key\" or [\"keys\"]"
                ));
                continue;
            };
            for (name, keys) in entries {
                if let Err(warning) = table.apply(mode, name, keys, readonly) {
                    warnings.push(format!("keys.toml [{section}] {name}: {warning}"));
                }
            }
        }
        (table, warnings)
    }

    fn apply(
        &mut self,
        mode: Mode,
        name: &str,
        value: &toml::Value,
        readonly: bool,
    ) -> Result<(), BindingError> {
        let action = Action::parse(name).ok_or_else(|| {
            let names: Vec<&str> = Action::all().map(Action::name).collect();
            BindingError::UnknownAction {
                known: names.join(", "),
            }
        })?;
        if readonly && action.is_mutating() {
            return Err(BindingError::Readonly);
        }
        let texts: Vec<&str> = match value {
            toml::Value::String(s) => vec![s.as_str()],
            toml::Value::Array(items) => items
                .iter()
                .map(|item| {
                    item.as_str().ok_or_else(|| BindingError::NotAString {
                        item: item.to_string(),
                    })
                })
                .collect::<Result<_, BindingError>>()?,
            _ => return Err(BindingError::NotKeys),
        };
        let mut keys = texts
            .iter()
            .map(|t| Key::parse(t))
            .collect::<Result<Vec<Key>, UnknownKey>>()?;
        if keys.is_empty() {
            return Err(BindingError::NoKey);
        }
        // Ctrl-C quits from every mode, whatever else quit is bound to.
        if action == Action::Quit && !keys.contains(&CTRL_C) {
            keys.push(CTRL_C);
        }
        if matches!(mode, Mode::Filter | Mode::LogSearch)
            && let Some(key) = keys.iter().find(|k| k.is_text())
        {
            return Err(BindingError::TextInFilter { key: *key });
        }
        let bindings = &mut self.modes[mode.index()];
        let Some(index) = bindings.iter().position(|b| b.action == action) else {
            return Err(BindingError::NoMeaningIn { mode: mode.name() });
        };
        for key in &keys {
            if let Some(other) = bindings
                .iter()
                .find(|b| b.action != action && b.keys.contains(key))
            {
                return Err(BindingError::AlreadyBound {
                    key: *key,
                    other: other.action.name(),
                });
            }
        }
        bindings[index].keys = keys;
        Ok(())
    }

    pub fn bindings(&self, mode: Mode) -> &[Binding] {
        &self.modes[mode.index()]
    }

    /// The action a key event asks for in `mode`.
    pub(crate) fn lookup(&self, mode: Mode, event: &KeyEvent) -> Option<Action> {
        self.bindings(mode)
            .iter()
            .find(|b| b.keys.iter().any(|k| k.matches(event)))
            .map(|b| b.action)
    }

    /// Whether `action` is bound in `mode` (the tests hold the tables to what they must bind).
    #[cfg(test)]
    pub(crate) fn has(&self, mode: Mode, action: Action) -> bool {
        self.bindings(mode).iter().any(|b| b.action == action)
    }

    /// The keys of an action in a mode, as the footer and help write them (`↑/k`).
    pub fn keys_text(&self, mode: Mode, action: Action) -> String {
        self.bindings(mode)
            .iter()
            .find(|b| b.action == action)
            .map(|b| {
                b.keys
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("/")
            })
            .unwrap_or_default()
    }

    /// Footer hints for a mode: `(first key, word, action)` of every hinted action.
    pub(crate) fn hints(&self, mode: Mode) -> Vec<(String, &'static str, Action)> {
        let mut hinted: Vec<&Binding> = self
            .bindings(mode)
            .iter()
            .filter(|b| !b.action.hint().is_empty())
            .collect();
        // Help first, quit last: the two a newcomer looks for. Over a view or a question the
        // way out stands beside quit.
        hinted.sort_by_key(|b| match b.action {
            Action::Help => 0,
            Action::Close if mode != Mode::Normal => 2,
            Action::Quit => 3,
            _ => 1,
        });
        hinted
            .into_iter()
            .filter_map(|b| {
                b.keys
                    .first()
                    .map(|k| (k.to_string(), b.action.hint(), b.action))
            })
            .collect()
    }

    /// A line of hints for some actions of a mode, as overlays show them: `←/→ switch · enter
    /// accept · esc close`. An action without a key in the mode is left out.
    pub(crate) fn hint_line(&self, mode: Mode, actions: &[Action]) -> String {
        actions
            .iter()
            .filter_map(|action| {
                let keys = self.keys_text(mode, *action);
                let word = match action.hint() {
                    "" => action.description(),
                    word => word,
                };
                (!keys.is_empty()).then(|| format!("{keys} {word}"))
            })
            .collect::<Vec<_>>()
            .join(" · ")
    }

    /// Every key bound to two actions of one mode, as `mode: key → a, b` (the tests hold the
    /// tables to none).
    #[cfg(test)]
    pub(crate) fn clashes(&self) -> Vec<String> {
        let mut found = Vec::new();
        for mode in Mode::ALL {
            let bindings = self.bindings(mode);
            for (i, a) in bindings.iter().enumerate() {
                for b in &bindings[i + 1..] {
                    for key in a.keys.iter().filter(|k| b.keys.contains(k)) {
                        found.push(format!(
                            "{}: {key} → {}, {}",
                            mode.name(),
                            a.action.name(),
                            b.action.name()
                        ));
                    }
                }
            }
        }
        found
    }
}

#[cfg(test)]
mod tests;
