//! The logs view (`l`): what the selected module's machines (modules pane) or the selected machine
//! (machines pane) say, newest at the bottom, followed. The source streams the lines in small
//! batches (`sources/logs.rs`); the app holds them here, at most `HELD_PER_MACHINE` per machine
//! (`mesh::logs::LogBook`, older ones dropped with a marker); the widget only draws.
//! Reading changes nothing: `--readonly` keeps the view.

use crate::mesh::logs::{LogAsk, LogBook, LogItem, next_match};
use crate::mesh::machine::Machine;

use super::keys::{Action, Mode};
use super::log_view::LogView;
use super::msg::{Effect, LogRequest};
use super::state::{AppState, Pane};

/// How many of each machine's newest lines the view asks for when it opens (the CLI's default is
/// all there is; the view holds at most `HELD_PER_MACHINE` anyway).
pub(crate) const OPENING_TAIL: u64 = 1_000;

/// `l logs`: what the confirms and the failure notices say to point at what machines say (empty
/// when the key table has no key for it).
pub(crate) fn hint(state: &AppState) -> String {
    state.keys.hint_line(Mode::Normal, &[Action::Logs])
}

/// `l`: open the view on what the focused pane has under its cursor, and start its streams.
pub(crate) fn open(state: &mut AppState) -> Vec<Effect> {
    let Some(module) = state.selected_module().map(|m| m.name.clone()) else {
        return Vec::new();
    };
    let (title, machines): (String, Vec<Machine>) = match state.focus {
        Pane::Machines => match state.selected_machines().get(state.machine_selected) {
            Some(machine) => (
                format!("machine {} of {module}", machine.name),
                vec![(*machine).clone()],
            ),
            None => (format!("module {module}"), Vec::new()),
        },
        _ => (
            format!("module {module}"),
            state.machines_of(&module).to_vec(),
        ),
    };
    if machines.is_empty() {
        let text = format!(
            "module {module} has no machines on target {}: no logs to show",
            state.target.name
        );
        state.notify(text, false);
        return Vec::new();
    }
    state.logs_stream += 1;
    state.logs = Some(LogView {
        title,
        book: LogBook::new(machines.iter().map(|m| m.name.as_str())),
        machines,
        previous: false,
        scroll: 0,
        wrap: true,
        query: String::new(),
        at_match: None,
        stream: state.logs_stream,
        ended: None,
    });
    state.mode = Mode::Logs;
    state.dirty = true;
    start(state)
}

/// The request for the view's streams as it stands (the current or the previous container).
fn start(state: &AppState) -> Vec<Effect> {
    let Some(view) = &state.logs else {
        return Vec::new();
    };
    vec![Effect::FollowLogs(LogRequest {
        stream: view.stream,
        target: Some(state.target.name.clone()),
        machines: view.machines.clone(),
        ask: LogAsk {
            // The previous container does not speak any more: read it whole.
            follow: !view.previous,
            previous: view.previous,
            tail: Some(OPENING_TAIL),
            since_seconds: None,
        },
    })]
}

/// Rows a page key moves.
fn page(state: &AppState) -> usize {
    usize::from(state.size.1 / 2).max(1)
}

/// A key in the logs view.
pub(crate) fn key(state: &mut AppState, action: Action) -> Vec<Effect> {
    let page = page(state);
    let Some(view) = state.logs.as_mut() else {
        state.mode = Mode::Normal;
        return Vec::new();
    };
    let newest = view.book.len().saturating_sub(1);
    match action {
        Action::Up => view.scroll = (view.scroll + 1).min(newest),
        Action::Down => view.scroll = view.scroll.saturating_sub(1),
        Action::PageUp => view.scroll = (view.scroll + page).min(newest),
        Action::PageDown => view.scroll = view.scroll.saturating_sub(page),
        Action::Top => view.scroll = newest,
        Action::Bottom => view.scroll = 0,
        Action::Wrap => view.wrap = !view.wrap,
        Action::Search => {
            view.query.clear();
            view.at_match = None;
            state.mode = Mode::LogSearch;
        }
        Action::NextMatch | Action::PrevMatch => go_to_match(view, action == Action::PrevMatch),
        Action::Previous => {
            view.previous = !view.previous;
            state.logs_stream += 1;
            view.stream = state.logs_stream;
            view.book = LogBook::new(view.machines.iter().map(|m| m.name.as_str()));
            view.scroll = 0;
            view.at_match = None;
            view.ended = None;
            return start(state);
        }
        Action::Close => return close(state),
        _ => {}
    }
    Vec::new()
}

/// `n` goes to the next older match, `N` to the next newer one (the newest lines are at the
/// bottom: a search reads up from them).
fn go_to_match(view: &mut LogView, newer: bool) {
    let matches = view.book.matches(&view.query);
    let Some(newest) = view.book.len().checked_sub(1) else {
        return;
    };
    let from = view
        .at_match
        .or(Some(newest.saturating_sub(view.scroll) + 1));
    let Some(found) = next_match(&matches, from, newer) else {
        return;
    };
    view.at_match = Some(found);
    view.scroll = newest - found;
}

/// A key while typing a search: Enter keeps it (at its newest match), Esc clears it.
pub(crate) fn search_key(state: &mut AppState, action: Action) -> Vec<Effect> {
    let Some(view) = state.logs.as_mut() else {
        state.mode = Mode::Normal;
        return Vec::new();
    };
    match action {
        Action::Accept => {
            state.mode = Mode::Logs;
            view.at_match = None;
            view.scroll = 0;
            go_to_match(view, false);
        }
        Action::Close => {
            view.query.clear();
            view.at_match = None;
            state.mode = Mode::Logs;
        }
        Action::Backspace => {
            view.query.pop();
        }
        _ => {}
    }
    Vec::new()
}

/// A character typed into the search.
pub(crate) fn typed(state: &mut AppState, c: char) {
    if let Some(view) = state.logs.as_mut() {
        view.query.push(c);
        state.dirty = true;
    }
}

/// `esc`: the view closes and its streams stop.
pub(crate) fn close(state: &mut AppState) -> Vec<Effect> {
    state.logs = None;
    state.mode = Mode::Normal;
    state.dirty = true;
    vec![Effect::StopLogs]
}

/// A batch of lines of the view's stream. Following, the view stays at the bottom; scrolled up,
/// it stays on the lines it shows.
pub(crate) fn lines(
    state: &mut AppState,
    stream: u64,
    items: Vec<(String, LogItem)>,
) -> Vec<Effect> {
    let Some(view) = state.logs.as_mut().filter(|v| v.stream == stream) else {
        return Vec::new();
    };
    let before = view.book.len();
    for (machine, item) in items {
        view.book.push(&machine, item);
    }
    let added = view.book.len() - before;
    if !view.following() {
        view.scroll = (view.scroll + added).min(view.book.len().saturating_sub(1));
    }
    state.dirty = true;
    Vec::new()
}

/// The view's streams ended: said in its title (a follow ends only on a fault).
pub(crate) fn ended(
    state: &mut AppState,
    stream: u64,
    failures: Vec<(String, String)>,
) -> Vec<Effect> {
    if let Some(view) = state.logs.as_mut().filter(|v| v.stream == stream) {
        view.ended = Some(failures);
        state.dirty = true;
    }
    Vec::new()
}
