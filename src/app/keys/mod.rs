//! The ONE key table: it drives dispatch, the `?` help overlay and the footer hints.
//! Users override it from `<config dir>/meshtop/keys.toml`; a bad override is reported, never fatal.
//! Long: the whole key table (actions, modes, defaults, overrides) is read as one; its tests are apart.

use ratatui::crossterm::event::{KeyCode, KeyEvent};

mod chord;

pub use chord::Key;

/// What the keyboard can ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    Up,
    Down,
    Top,
    Bottom,
    PageUp,
    PageDown,
    NextPane,
    PrevPane,
    Open,
    Close,
    Filter,
    Poll,
    ConvergeModule,
    ConvergeMesh,
    ForceRebuild,
    Send,
    Rollback,
    ToggleHistory,
    Help,
    Quit,
    Accept,
    Backspace,
    Toggle,
    Wrap,
    AutoConverge,
    Gc,
    Stats,
    Sweep,
    Environments,
    NextTarget,
    Promote,
    Left,
    Right,
}

impl Action {
    pub const ALL: [Action; 33] = [
        Action::Up,
        Action::Down,
        Action::Top,
        Action::Bottom,
        Action::PageUp,
        Action::PageDown,
        Action::NextPane,
        Action::PrevPane,
        Action::Open,
        Action::Close,
        Action::Filter,
        Action::Poll,
        Action::ConvergeModule,
        Action::ConvergeMesh,
        Action::ForceRebuild,
        Action::Send,
        Action::Rollback,
        Action::ToggleHistory,
        Action::Help,
        Action::Quit,
        Action::Accept,
        Action::Backspace,
        Action::Toggle,
        Action::Wrap,
        Action::AutoConverge,
        Action::Gc,
        Action::Stats,
        Action::Sweep,
        Action::Environments,
        Action::NextTarget,
        Action::Promote,
        Action::Left,
        Action::Right,
    ];

    /// The name used in `keys.toml`.
    pub fn name(self) -> &'static str {
        self.meta().0
    }

    /// One line for the help overlay.
    pub fn description(self) -> &'static str {
        self.meta().1
    }

    /// The short word of the footer hints ("" = not hinted).
    pub fn hint(self) -> &'static str {
        self.meta().2
    }

    fn meta(self) -> (&'static str, &'static str, &'static str) {
        match self {
            Action::Up => ("up", "move up", ""),
            Action::Down => ("down", "move down", ""),
            Action::Top => ("top", "go to the first row", ""),
            Action::Bottom => ("bottom", "go to the last row", ""),
            Action::PageUp => ("page_up", "one page up", ""),
            Action::PageDown => ("page_down", "one page down", ""),
            Action::NextPane => ("next_pane", "focus the next pane", "pane"),
            Action::PrevPane => ("prev_pane", "focus the previous pane", ""),
            Action::Open => ("open", "open the detail of the selected row", "detail"),
            Action::Close => ("close", "close / cancel", "close"),
            Action::Filter => ("filter", "filter modules by name", "filter"),
            Action::Poll => ("poll", "poll every source now", "poll"),
            Action::ConvergeModule => (
                "converge_module",
                "converge the selected module",
                "converge",
            ),
            Action::ConvergeMesh => (
                "converge_mesh",
                "converge the whole mesh (asks first)",
                "converge all",
            ),
            Action::ForceRebuild => (
                "force_rebuild",
                "force-rebuild the selected module (asks first)",
                "force",
            ),
            Action::Send => (
                "send",
                "send the selected module's behind machines (asks first)",
                "send",
            ),
            Action::Rollback => (
                "rollback",
                "roll the selected module back and pin it (asks first)",
                "rollback",
            ),
            Action::ToggleHistory => (
                "toggle_history",
                "build history: selected module / whole mesh",
                "builds",
            ),
            Action::Help => ("help", "show / hide this help", "help"),
            Action::Quit => ("quit", "quit meshtop", "quit"),
            Action::Accept => ("accept", "accept", "accept"),
            Action::Backspace => ("backspace", "delete the last character", ""),
            Action::Toggle => ("toggle", "switch between Cancel and the action", "switch"),
            Action::Wrap => ("wrap", "wrap long lines / cut them at the edge", "wrap"),
            Action::AutoConverge => (
                "auto_converge",
                "converge by itself after a save (toggle; the plan shows first)",
                "auto",
            ),
            Action::Gc => (
                "gc",
                "gc view: what a sweep would take and why, the keep set",
                "gc",
            ),
            Action::Stats => (
                "stats",
                "stats view: builds, failures, median build, what the skips saved",
                "stats",
            ),
            Action::Sweep => ("sweep", "sweep what the gc view lists (asks first)", ""),
            Action::Environments => (
                "environments",
                "environments view: every target side by side, each module's artifact there",
                "envs",
            ),
            Action::NextTarget => (
                "next_target",
                "show the next target in the main view (in the environments view: the selected one)",
                "target",
            ),
            Action::Promote => (
                "promote",
                "promote the selected cell from its source (environments view; asks first)",
                "promote",
            ),
            Action::Left => ("left", "the target to the left (environments view)", ""),
            Action::Right => ("right", "the target to the right (environments view)", ""),
        }
    }

    /// Which hints the footer keeps when it is short of room: lower first (actions, then the ways
    /// around). Help and quit always show.
    pub fn footer_rank(self) -> u8 {
        match self {
            Action::Help => 0,
            Action::ConvergeModule => 1,
            Action::ForceRebuild => 2,
            Action::Send => 3,
            Action::Rollback => 4,
            Action::ToggleHistory => 5,
            Action::Open => 6,
            Action::ConvergeMesh => 7,
            Action::Filter => 8,
            Action::Poll => 9,
            Action::NextPane => 10,
            Action::Close => 11,
            Action::Gc | Action::Stats | Action::Environments | Action::NextTarget => 12,
            Action::Promote => 4,
            _ => 13,
        }
    }

    /// Actions that change something: `--readonly` removes them.
    pub fn is_mutating(self) -> bool {
        matches!(
            self,
            Action::ConvergeModule
                | Action::ConvergeMesh
                | Action::ForceRebuild
                | Action::Send
                | Action::Rollback
                | Action::AutoConverge
                | Action::Sweep
                | Action::Promote
        )
    }

    pub fn parse(name: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// The modes the keyboard is in; each has its own bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    Normal,
    Filter,
    Help,
    Confirm,
    Detail,
}

impl Mode {
    pub const ALL: [Mode; 5] = [
        Mode::Normal,
        Mode::Filter,
        Mode::Help,
        Mode::Confirm,
        Mode::Detail,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::Normal => "normal",
            Mode::Filter => "filter",
            Mode::Help => "help",
            Mode::Confirm => "confirm",
            Mode::Detail => "detail",
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
pub struct Settings {
    /// `bell = false` turns off the bell (and the desktop notification), as `--no-bell` does.
    pub bell: Option<bool>,
}

/// The bindings of every mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTable {
    modes: [Vec<Binding>; 5],
}

const CTRL_C: Key = Key {
    code: KeyCode::Char('c'),
    ctrl: true,
};

fn defaults(mode: Mode) -> Vec<(Action, Vec<Key>)> {
    use Action as A;
    let up = (A::Up, vec![Key::plain(KeyCode::Up), Key::ch('k')]);
    let down = (A::Down, vec![Key::plain(KeyCode::Down), Key::ch('j')]);
    let top = (A::Top, vec![Key::ch('g'), Key::plain(KeyCode::Home)]);
    let bottom = (A::Bottom, vec![Key::ch('G'), Key::plain(KeyCode::End)]);
    let page_up = (A::PageUp, vec![Key::plain(KeyCode::PageUp)]);
    let page_down = (A::PageDown, vec![Key::plain(KeyCode::PageDown)]);
    match mode {
        Mode::Normal => vec![
            up,
            down,
            top,
            bottom,
            page_up,
            page_down,
            (A::NextPane, vec![Key::plain(KeyCode::Tab)]),
            (A::PrevPane, vec![Key::plain(KeyCode::BackTab)]),
            (A::Open, vec![Key::plain(KeyCode::Enter)]),
            (A::Close, vec![Key::plain(KeyCode::Esc)]),
            (A::Filter, vec![Key::ch('/')]),
            (A::Poll, vec![Key::ch('r')]),
            (A::ConvergeModule, vec![Key::ch('c')]),
            (A::ConvergeMesh, vec![Key::ch('C')]),
            (A::ForceRebuild, vec![Key::ch('f')]),
            (A::Send, vec![Key::ch('s')]),
            (A::Rollback, vec![Key::ch('R')]),
            (A::ToggleHistory, vec![Key::ch('b')]),
            (A::AutoConverge, vec![Key::ch('a')]),
            (A::Gc, vec![Key::ch('x')]),
            (A::Stats, vec![Key::ch('S')]),
            (A::Environments, vec![Key::ch('e')]),
            (A::NextTarget, vec![Key::ch('t')]),
            (A::Help, vec![Key::ch('?')]),
            (A::Quit, vec![Key::ch('q'), CTRL_C]),
        ],
        Mode::Filter => vec![
            (A::Accept, vec![Key::plain(KeyCode::Enter)]),
            (A::Close, vec![Key::plain(KeyCode::Esc)]),
            (A::Backspace, vec![Key::plain(KeyCode::Backspace)]),
            (A::Quit, vec![CTRL_C]),
        ],
        Mode::Help => vec![
            up,
            down,
            top,
            bottom,
            page_up,
            page_down,
            (
                A::Close,
                vec![Key::plain(KeyCode::Esc), Key::ch('?'), Key::ch('q')],
            ),
            (A::Quit, vec![CTRL_C]),
        ],
        Mode::Confirm => vec![
            (
                A::Toggle,
                vec![
                    Key::plain(KeyCode::Left),
                    Key::plain(KeyCode::Right),
                    Key::plain(KeyCode::Tab),
                ],
            ),
            (A::Accept, vec![Key::plain(KeyCode::Enter)]),
            (A::Close, vec![Key::plain(KeyCode::Esc), Key::ch('n')]),
            (A::Quit, vec![CTRL_C]),
        ],
        Mode::Detail => vec![
            up,
            down,
            top,
            bottom,
            page_up,
            page_down,
            (A::Wrap, vec![Key::ch('w')]),
            (A::Sweep, vec![Key::ch('x')]),
            (A::Left, vec![Key::plain(KeyCode::Left), Key::ch('h')]),
            (A::Right, vec![Key::plain(KeyCode::Right), Key::ch('l')]),
            (A::Promote, vec![Key::ch('p')]),
            (A::NextTarget, vec![Key::ch('t')]),
            (A::Close, vec![Key::plain(KeyCode::Esc), Key::ch('q')]),
            (A::Quit, vec![CTRL_C]),
        ],
    }
}

impl KeyTable {
    /// The built-in table; `readonly` drops every action that changes something.
    pub fn new(readonly: bool) -> KeyTable {
        let modes = Mode::ALL.map(|mode| {
            defaults(mode)
                .into_iter()
                .filter(|(action, _)| !(readonly && action.is_mutating()))
                .map(|(action, keys)| Binding { action, keys })
                .collect()
        });
        KeyTable { modes }
    }

    /// The settings `keys.toml` holds beside the key tables (`bell = false`); a bad value is one
    /// warning line and leaves the setting as the command line made it.
    pub fn settings_of(text: &str) -> (Settings, Vec<String>) {
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
                    "keys.toml: unknown mode [{section}]; modes are normal, filter, help, confirm, detail"
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
    ) -> Result<(), String> {
        let action = Action::parse(name).ok_or_else(|| {
            let names: Vec<&str> = Action::ALL.iter().map(|a| a.name()).collect();
            format!("unknown action; actions are {}", names.join(", "))
        })?;
        if readonly && action.is_mutating() {
            return Err("ignored: --readonly removes this action".into());
        }
        let texts: Vec<&str> = match value {
            toml::Value::String(s) => vec![s.as_str()],
            toml::Value::Array(items) => items
                .iter()
                .map(|item| {
                    item.as_str().ok_or_else(|| {
                        format!("{item} is not a key; write keys as strings, e.g. \"ctrl-d\"")
                    })
                })
                .collect::<Result<_, String>>()?,
            _ => return Err("write a key as a string or a list of strings".into()),
        };
        let mut keys = texts
            .iter()
            .map(|t| Key::parse(t))
            .collect::<Result<Vec<Key>, String>>()?;
        if keys.is_empty() {
            return Err("no key given; the default keys are kept".into());
        }
        // Ctrl-C quits from every mode, whatever else quit is bound to.
        if action == Action::Quit && !keys.contains(&CTRL_C) {
            keys.push(CTRL_C);
        }
        if mode == Mode::Filter
            && let Some(key) = keys.iter().find(|k| k.is_text())
        {
            return Err(format!(
                "{key} is text in the filter line; bind a non-printing key"
            ));
        }
        let bindings = &mut self.modes[mode.index()];
        let Some(index) = bindings.iter().position(|b| b.action == action) else {
            return Err(format!(
                "this action has no meaning in {} mode",
                mode.name()
            ));
        };
        for key in &keys {
            if let Some(other) = bindings
                .iter()
                .find(|b| b.action != action && b.keys.contains(key))
            {
                return Err(format!(
                    "{key} is already bound to {}; the default keys are kept",
                    other.action.name()
                ));
            }
        }
        bindings[index].keys = keys;
        Ok(())
    }

    pub fn bindings(&self, mode: Mode) -> &[Binding] {
        &self.modes[mode.index()]
    }

    /// The action a key event asks for in `mode`.
    pub fn lookup(&self, mode: Mode, event: &KeyEvent) -> Option<Action> {
        self.bindings(mode)
            .iter()
            .find(|b| b.keys.iter().any(|k| k.matches(event)))
            .map(|b| b.action)
    }

    pub fn has(&self, mode: Mode, action: Action) -> bool {
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
    pub fn hints(&self, mode: Mode) -> Vec<(String, &'static str, Action)> {
        let mut hinted: Vec<&Binding> = self
            .bindings(mode)
            .iter()
            .filter(|b| !b.action.hint().is_empty())
            .collect();
        // Help first, quit last: the two a newcomer looks for.
        hinted.sort_by_key(|b| match b.action {
            Action::Help => 0,
            Action::Quit => 2,
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
    pub fn hint_line(&self, mode: Mode, actions: &[Action]) -> String {
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

    /// Every key bound to two actions of one mode, as `mode: key → a, b`.
    pub fn clashes(&self) -> Vec<String> {
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
