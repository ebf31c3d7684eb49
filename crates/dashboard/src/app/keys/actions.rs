//! The key table as data: one row per action — its name in `keys.toml`, its keys in each mode
//! (and what the help says it does there), its line in the help, its footer word and rank, and
//! whether it changes something. Dispatch, the help, the footer and every hint read these rows.
//!
//! A mode lists its actions in row order; a new action is one row here (the `Action` enum is
//! made from the rows, so an action without a row cannot be written).

use ratatui::crossterm::event::KeyCode;

use super::Mode;
use super::chord::Key;

/// One action of the key table.
#[derive(Debug)]
pub struct ActionRow {
    pub action: Action,
    /// The name used in `keys.toml`.
    pub name: &'static str,
    /// One line for the help overlay.
    pub description: &'static str,
    /// The short word of the footer hints ("" = not hinted).
    pub hint: &'static str,
    /// Which hints the footer keeps when it is short of room: lower first (actions, then the
    /// ways around). Help, the next pane, detail and quit always show.
    pub footer_rank: u8,
    /// It changes something: `--readonly` removes it (and it asks first where it says so).
    pub mutating: bool,
    /// Its default keys in each mode that offers it.
    pub keys: &'static [InMode],
}

/// An action's default keys in one mode, and what the help says it does there when that is
/// not its description.
#[derive(Debug)]
pub struct InMode {
    pub mode: Mode,
    pub keys: &'static [Key],
    pub says: Option<&'static str>,
}

const fn bound(mode: Mode, keys: &'static [Key]) -> InMode {
    InMode {
        mode,
        keys,
        says: None,
    }
}

const fn says(mode: Mode, keys: &'static [Key], says: &'static str) -> InMode {
    InMode {
        mode,
        keys,
        says: Some(says),
    }
}

pub(super) const CTRL_C: Key = Key {
    code: KeyCode::Char('c'),
    ctrl: true,
};

const UP: &[Key] = &[Key::plain(KeyCode::Up), Key::ch('k')];
const DOWN: &[Key] = &[Key::plain(KeyCode::Down), Key::ch('j')];
const TOP: &[Key] = &[Key::ch('g'), Key::plain(KeyCode::Home)];
const BOTTOM: &[Key] = &[Key::ch('G'), Key::plain(KeyCode::End)];
const PAGE_UP: &[Key] = &[Key::plain(KeyCode::PageUp)];
const PAGE_DOWN: &[Key] = &[Key::plain(KeyCode::PageDown)];

use Mode::{Confirm, Detail, Filter, Help, LogSearch, Logs, Normal};

/// Writes the `Action` enum and `ACTIONS` from one list of rows, so that the two cannot part:
/// `ACTIONS[action as usize]` is that action's row.
macro_rules! key_table {
    ($($action:ident { $($field:ident: $value:expr),* $(,)? })*) => {
        /// What the keyboard can ask for (one row of `ACTIONS` each).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Action {
            $($action),*
        }

        /// Every action, in the order the modes list them.
        pub static ACTIONS: &[ActionRow] = &[
            $(ActionRow { action: Action::$action, $($field: $value),* }),*
        ];
    };
}

key_table! {
    Up {
        name: "up", description: "move up", hint: "", footer_rank: 13, mutating: false,
        keys: &[bound(Normal, UP), says(Help, UP, "scroll"), says(Detail, UP, "scroll"),
            says(Logs, UP, "scroll up (stops following)")],
    }
    Down {
        name: "down", description: "move down", hint: "", footer_rank: 13, mutating: false,
        keys: &[bound(Normal, DOWN), says(Help, DOWN, "scroll"), says(Detail, DOWN, "scroll"),
            says(Logs, DOWN, "scroll down (follows again at the end)")],
    }
    Top {
        name: "top", description: "go to the first row", hint: "", footer_rank: 13,
        mutating: false,
        keys: &[bound(Normal, TOP), says(Help, TOP, "to the start"), says(Detail, TOP, "to the start"),
            says(Logs, TOP, "to the oldest line (stops following)")],
    }
    Bottom {
        name: "bottom", description: "go to the last row", hint: "", footer_rank: 13,
        mutating: false,
        keys: &[bound(Normal, BOTTOM), says(Help, BOTTOM, "to the end"), says(Detail, BOTTOM, "to the end"),
            says(Logs, BOTTOM, "to the newest line, following again")],
    }
    PageUp {
        name: "page_up", description: "one page up", hint: "", footer_rank: 13, mutating: false,
        keys: &[bound(Normal, PAGE_UP), bound(Help, PAGE_UP), bound(Detail, PAGE_UP), bound(Logs, PAGE_UP)],
    }
    PageDown {
        name: "page_down", description: "one page down", hint: "", footer_rank: 13,
        mutating: false,
        keys: &[bound(Normal, PAGE_DOWN), bound(Help, PAGE_DOWN), bound(Detail, PAGE_DOWN),
            bound(Logs, PAGE_DOWN)],
    }
    NextPane {
        name: "next_pane", description: "focus the next pane", hint: "pane", footer_rank: 10,
        mutating: false,
        keys: &[bound(Normal, &[Key::plain(KeyCode::Tab)])],
    }
    PrevPane {
        name: "prev_pane", description: "focus the previous pane", hint: "", footer_rank: 13,
        mutating: false,
        keys: &[bound(Normal, &[Key::plain(KeyCode::BackTab)])],
    }
    Open {
        name: "open", description: "open the detail of the selected row", hint: "detail",
        footer_rank: 6, mutating: false,
        keys: &[bound(Normal, &[Key::plain(KeyCode::Enter)])],
    }
    Toggle {
        name: "toggle", description: "switch between Cancel and the action", hint: "switch",
        footer_rank: 13, mutating: false,
        keys: &[bound(
            Confirm,
            &[Key::plain(KeyCode::Left), Key::plain(KeyCode::Right), Key::plain(KeyCode::Tab)],
        )],
    }
    Accept {
        name: "accept", description: "accept", hint: "accept", footer_rank: 13, mutating: false,
        keys: &[
            says(Filter, &[Key::plain(KeyCode::Enter)], "keep the filter"),
            says(Confirm, &[Key::plain(KeyCode::Enter)], "do what is selected (Cancel by default)"),
            says(LogSearch, &[Key::plain(KeyCode::Enter)], "keep the search, at its newest match"),
        ],
    }
    Close {
        name: "close", description: "close / cancel", hint: "close", footer_rank: 11,
        mutating: false,
        keys: &[
            says(Normal, &[Key::plain(KeyCode::Esc)], "clear the filter and the notice"),
            says(Filter, &[Key::plain(KeyCode::Esc)], "clear the filter"),
            says(Help, &[Key::plain(KeyCode::Esc), Key::ch('?'), Key::ch('q')], "close"),
            says(Confirm, &[Key::plain(KeyCode::Esc), Key::ch('n')], "cancel"),
            says(Detail, &[Key::plain(KeyCode::Esc), Key::ch('q')], "close"),
            says(Logs, &[Key::plain(KeyCode::Esc), Key::ch('q')], "close (stops the streams)"),
            says(LogSearch, &[Key::plain(KeyCode::Esc)], "clear the search"),
        ],
    }
    Backspace {
        name: "backspace", description: "delete the last character", hint: "", footer_rank: 13,
        mutating: false,
        keys: &[
            bound(Filter, &[Key::plain(KeyCode::Backspace)]),
            bound(LogSearch, &[Key::plain(KeyCode::Backspace)]),
        ],
    }
    Filter {
        name: "filter", description: "filter modules by name", hint: "filter", footer_rank: 8,
        mutating: false,
        keys: &[bound(Normal, &[Key::ch('/')])],
    }
    Poll {
        name: "poll", description: "poll every source now", hint: "poll", footer_rank: 9,
        mutating: false,
        keys: &[bound(Normal, &[Key::ch('r')])],
    }
    ConvergeModule {
        name: "converge_module", description: "converge the selected module", hint: "converge",
        footer_rank: 1, mutating: true,
        keys: &[bound(Normal, &[Key::ch('c')])],
    }
    ConvergeMesh {
        name: "converge_mesh", description: "converge the whole mesh (asks first)",
        hint: "converge all", footer_rank: 7, mutating: true,
        keys: &[bound(Normal, &[Key::ch('C')])],
    }
    ForceRebuild {
        name: "force_rebuild", description: "force-rebuild the selected module (asks first)",
        hint: "force", footer_rank: 2, mutating: true,
        keys: &[bound(Normal, &[Key::ch('f')])],
    }
    Send {
        name: "send", description: "send the selected module's behind machines (asks first)",
        hint: "send", footer_rank: 3, mutating: true,
        keys: &[bound(Normal, &[Key::ch('s')])],
    }
    UpdateUpstreams {
        name: "update_upstreams",
        description: "move the selected module's moved upstreams in mesh.lock and converge (asks first)",
        hint: "", footer_rank: 13, mutating: true,
        keys: &[bound(Normal, &[Key::ch('u')])],
    }
    Rollback {
        name: "rollback", description: "roll the selected module back and pin it (asks first)",
        hint: "rollback", footer_rank: 4, mutating: true,
        keys: &[bound(Normal, &[Key::ch('R')])],
    }
    ToggleHistory {
        name: "toggle_history", description: "build history: selected module / whole mesh",
        hint: "builds", footer_rank: 5, mutating: false,
        keys: &[bound(Normal, &[Key::ch('b')])],
    }
    AutoConverge {
        name: "auto_converge",
        description: "converge by itself after a save (toggle; the plan shows first)",
        hint: "auto", footer_rank: 13, mutating: true,
        keys: &[bound(Normal, &[Key::ch('a')])],
    }
    Gc {
        name: "gc", description: "gc view: what a sweep would take and why, the keep set",
        hint: "gc", footer_rank: 12, mutating: false,
        keys: &[bound(Normal, &[Key::ch('x')])],
    }
    Stats {
        name: "stats",
        description: "stats view: builds, failures, median build, what the skips saved",
        hint: "stats", footer_rank: 12, mutating: false,
        keys: &[bound(Normal, &[Key::ch('S')])],
    }
    Wrap {
        name: "wrap", description: "wrap long lines / cut them at the edge", hint: "wrap",
        footer_rank: 13, mutating: false,
        keys: &[bound(Detail, &[Key::ch('w')]), bound(Logs, &[Key::ch('w')])],
    }
    Sweep {
        name: "sweep", description: "sweep what the gc view lists (asks first)", hint: "",
        footer_rank: 13, mutating: true,
        keys: &[bound(Detail, &[Key::ch('x')])],
    }
    Left {
        name: "left", description: "the target to the left (environments view)", hint: "",
        footer_rank: 13, mutating: false,
        keys: &[bound(Detail, &[Key::plain(KeyCode::Left), Key::ch('h')])],
    }
    Right {
        name: "right", description: "the target to the right (environments view)", hint: "",
        footer_rank: 13, mutating: false,
        keys: &[bound(Detail, &[Key::plain(KeyCode::Right), Key::ch('l')])],
    }
    Promote {
        name: "promote",
        description: "promote the selected cell from its source (environments view; asks first)",
        hint: "promote", footer_rank: 4, mutating: true,
        keys: &[bound(Detail, &[Key::ch('p')])],
    }
    Environments {
        name: "environments",
        description: "environments view: every target side by side, each module's artifact there",
        hint: "envs", footer_rank: 12, mutating: false,
        keys: &[bound(Normal, &[Key::ch('e')])],
    }
    NextTarget {
        name: "next_target",
        description: "show the next target in the main view (in the environments view: the selected one)",
        hint: "target", footer_rank: 12, mutating: false,
        keys: &[bound(Normal, &[Key::ch('t')]), bound(Detail, &[Key::ch('t')])],
    }
    Timeline {
        name: "timeline",
        description: "timeline view: where the operation's time went (critical path, builders, skips)",
        hint: "timeline", footer_rank: 13, mutating: false,
        keys: &[bound(Normal, &[Key::ch('T')]),
            says(Detail, &[Key::ch('T')], "the timeline of the shown build's operation")],
    }
    Logs {
        name: "logs",
        description: "logs view: what the selected module's machines (or the selected machine) say, followed",
        hint: "logs", footer_rank: 9, mutating: false,
        keys: &[bound(Normal, &[Key::ch('l')])],
    }
    Search {
        name: "search", description: "search the lines (highlighted; n / N the next / previous)",
        hint: "search", footer_rank: 13, mutating: false,
        keys: &[bound(Logs, &[Key::ch('/')])],
    }
    NextMatch {
        name: "next_match", description: "the next match of the search (older)", hint: "",
        footer_rank: 13, mutating: false,
        keys: &[bound(Logs, &[Key::ch('n')])],
    }
    PrevMatch {
        name: "prev_match", description: "the previous match of the search (newer)", hint: "",
        footer_rank: 13, mutating: false,
        keys: &[bound(Logs, &[Key::ch('N')])],
    }
    Previous {
        name: "previous",
        description: "the previous container's lines (before the last restart) / the current ones",
        hint: "previous", footer_rank: 13, mutating: false,
        keys: &[bound(Logs, &[Key::ch('p')])],
    }
    Help {
        name: "help", description: "show / hide this help", hint: "help", footer_rank: 0,
        mutating: false,
        keys: &[bound(Normal, &[Key::ch('?')])],
    }
    Quit {
        name: "quit", description: "quit meshtop", hint: "quit", footer_rank: 13,
        mutating: false,
        keys: &[
            bound(Normal, &[Key::ch('q'), CTRL_C]),
            bound(Filter, &[CTRL_C]),
            bound(Help, &[CTRL_C]),
            bound(Confirm, &[CTRL_C]),
            bound(Detail, &[CTRL_C]),
            bound(Logs, &[CTRL_C]),
            bound(LogSearch, &[CTRL_C]),
        ],
    }
}

impl Action {
    /// This action's row of the key table.
    pub fn row(self) -> &'static ActionRow {
        // The macro writes the enum and the rows in one order: the index is the row.
        &ACTIONS[self as usize]
    }

    /// Every action, in row order.
    pub fn all() -> impl Iterator<Item = Action> {
        ACTIONS.iter().map(|row| row.action)
    }

    pub fn name(self) -> &'static str {
        self.row().name
    }

    pub fn description(self) -> &'static str {
        self.row().description
    }

    pub fn hint(self) -> &'static str {
        self.row().hint
    }

    pub fn footer_rank(self) -> u8 {
        self.row().footer_rank
    }

    pub fn is_mutating(self) -> bool {
        self.row().mutating
    }

    /// What the help says this action does in `mode`.
    pub fn says_in(self, mode: Mode) -> &'static str {
        self.row()
            .keys
            .iter()
            .find(|bound| bound.mode == mode)
            .and_then(|bound| bound.says)
            .unwrap_or(self.row().description)
    }

    pub fn parse(name: &str) -> Option<Action> {
        Action::all().find(|a| a.name() == name)
    }
}
