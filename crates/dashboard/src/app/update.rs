//! `update`: a message in, the state changed, effects out. Pure: no I/O, no clock.
//! A poll's answer is `polled.rs`'s, a cursor move `cursor.rs`'s, quitting `quit.rs`'s.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::mesh::progress::Step;

use super::ask::{self, NotAsked};
use super::keys::{Action, Mode};
use super::msg::{ActionRequest, Effect, Msg, SourceError, SourceId};
use super::state::{AppState, Confirm, ConfirmThen, Detail, Pane};

pub fn update(state: &mut AppState, msg: Msg) -> Vec<Effect> {
    let effects = apply(state, msg);
    // What is marked dirty is drawn next, with the clock's face as it is now.
    if state.dirty {
        state.clock_drawn = state.clock_face();
    }
    effects
}

fn apply(state: &mut AppState, msg: Msg) -> Vec<Effect> {
    match msg {
        Msg::Key(event) => {
            if event.kind == KeyEventKind::Release {
                return Vec::new();
            }
            state.dirty = true;
            key(state, event)
        }
        Msg::Resize(width, height) => {
            state.size = (width, height);
            state.dirty = true;
            Vec::new()
        }
        Msg::Tick(now_ms) => tick(state, now_ms),
        Msg::Polled {
            source,
            at_ms,
            target,
            result,
        } => {
            state.now_ms = state.now_ms.max(at_ms);
            // An answer polled for the target the main view showed before `t` switched it.
            if source.of_target() && target.is_some_and(|t| t != state.target.name) {
                return Vec::new();
            }
            let status = &mut state.sources[source.index()];
            status.polls += 1;
            match result {
                Ok(data) => {
                    // A first answer, or one after an error, changes the header at once.
                    if status.error.take().is_some() || status.ok_ms.is_none() {
                        state.dirty = true;
                    }
                    status.ok_ms = Some(at_ms);
                    super::polled::polled(state, data, at_ms)
                }
                Err(error) => {
                    // The header only shows it: kept as the words it shows. The same error again
                    // changes nothing on screen (when it first came is kept).
                    let error = error.to_string();
                    if status.error.as_ref().map(|(_, e)| e) != Some(&error) {
                        status.error = Some((at_ms, error));
                        state.dirty = true;
                    }
                    Vec::new()
                }
            }
        }
        Msg::BuildsPage {
            request,
            at_ms,
            result,
        } => {
            state.now_ms = state.now_ms.max(at_ms);
            match result {
                Ok(rows) => {
                    if state.builds.apply_page(&request, rows, at_ms) {
                        state.dirty = true;
                    }
                }
                Err(error) => {
                    if request.module == state.builds.scope {
                        state.builds.loading = false;
                    }
                    state.notify(format!("cannot read the build history: {error}"), true);
                }
            }
            Vec::new()
        }
        Msg::InputsChanged(modules) => {
            state.changed = Some((modules.clone(), state.now_ms));
            state.dirty = true;
            if state.auto_converge {
                state.converge_on_plan = true;
            }
            state.notify(
                format!("inputs changed: {}; planning", modules.join(", ")),
                false,
            );
            vec![Effect::PollNow(vec![SourceId::Plan])]
        }
        Msg::ActionProgress(step) => {
            // Builder output belongs to the operation pane and the logs, not the one-line notice.
            if step.step == Step::Output || !step.step.is_line() {
                return Vec::new();
            }
            state.notify(step.line().trim_start().to_string(), false);
            // The table follows the operation through the state database: read its new step now
            // rather than at the next timed poll.
            vec![Effect::PollNow(vec![SourceId::State])]
        }
        Msg::ActionDone {
            at_ms,
            label,
            result,
        } => action_done(state, at_ms, label, result),
        Msg::ViewLoaded {
            request,
            at_ms,
            result,
        } => super::views::loaded(state, request, at_ms, result),
        Msg::ProvenanceRead {
            digest,
            at_ms,
            result,
        } => {
            state.now_ms = state.now_ms.max(at_ms);
            super::provenance::read(state, digest, at_ms, result);
            Vec::new()
        }
        Msg::LogLines { stream, items } => super::logs::lines(state, stream, items),
        Msg::LogsEnded { stream, failures } => super::logs::ended(state, stream, failures),
    }
}

/// The clock moved: quit when a cancelled action overran, redraw when an age on screen changed.
fn tick(state: &mut AppState, now_ms: i64) -> Vec<Effect> {
    state.now_ms = state.now_ms.max(now_ms);
    if super::quit::overdue(state) {
        return vec![Effect::Quit];
    }
    // Against what the screen shows: a poll that changed nothing else was not drawn, but
    // the age it reset is, at the next tick.
    if state.clock_face() != state.clock_drawn {
        state.dirty = true;
    }
    // The environments view, while open, reads every target again now and then.
    super::environments::tick(state)
}

/// An action started here ended.
fn action_done(
    state: &mut AppState,
    at_ms: i64,
    label: String,
    result: Result<String, SourceError>,
) -> Vec<Effect> {
    state.now_ms = state.now_ms.max(at_ms);
    state.running = None;
    match result {
        Ok(text) => state.notify(format!("{label}: {text}"), false),
        Err(error) => {
            let logs = super::logs::hint(state);
            let text = if logs.is_empty() {
                format!("{label} failed: {error}")
            } else {
                format!("{label} failed: {error} ({logs}: what its machines say)")
            };
            state.notify(text, true)
        }
    }
    if state.quit_after_ms.is_some() {
        return vec![Effect::Quit];
    }
    let mut effects = vec![Effect::PollNow(SourceId::ALL.to_vec())];
    effects.extend(super::environments::after_action(state));
    effects
}

fn key(state: &mut AppState, event: KeyEvent) -> Vec<Effect> {
    let mode = state.mode;
    let Some(action) = state.keys.lookup(mode, &event) else {
        // `--readonly` removed the actions that change something: their keys answer so.
        if state.readonly
            && matches!(mode, Mode::Normal | Mode::Detail)
            && let Some(action) = super::keys::KeyTable::new(false).lookup(mode, &event)
            && action.is_mutating()
        {
            state.notify(
                format!("read-only: {} is off (--readonly)", action.description()),
                true,
            );
            return Vec::new();
        }
        if mode == Mode::LogSearch
            && let KeyCode::Char(c) = event.code
            && !event.modifiers.contains(KeyModifiers::CONTROL)
        {
            super::logs::typed(state, c);
            return Vec::new();
        }
        if mode == Mode::Filter
            && let KeyCode::Char(c) = event.code
            && !event.modifiers.contains(KeyModifiers::CONTROL)
        {
            state.filter.push(c);
            state.refilter();
            return state.sync_history_scope();
        }
        return Vec::new();
    };
    if action == Action::Quit {
        return super::quit::asked(state);
    }
    match mode {
        Mode::Normal => normal(state, action),
        Mode::Filter => {
            match action {
                Action::Accept => state.mode = Mode::Normal,
                Action::Close => {
                    state.filter.clear();
                    state.refilter();
                    state.mode = Mode::Normal;
                }
                Action::Backspace => {
                    state.filter.pop();
                    state.refilter();
                }
                _ => {}
            }
            state.sync_history_scope()
        }
        Mode::Help => {
            match action {
                Action::Up => state.help_scroll = state.help_scroll.saturating_sub(1),
                Action::Down => state.help_scroll += 1,
                Action::PageUp => {
                    state.help_scroll = state.help_scroll.saturating_sub(page_rows(state))
                }
                Action::PageDown => state.help_scroll += page_rows(state),
                Action::Top => state.help_scroll = 0,
                Action::Bottom => state.help_scroll = usize::MAX / 2,
                Action::Close => state.mode = Mode::Normal,
                _ => {}
            }
            Vec::new()
        }
        Mode::Detail => {
            if action == Action::Sweep {
                return super::views::sweep(state);
            }
            if action == Action::Timeline {
                return super::timeline::open(state);
            }
            if state.detail == Some(Detail::Environments)
                && let Some(effects) = super::environments::key(state, action)
            {
                return effects;
            }
            let page = page_rows(state);
            match action {
                // The detail is anchored at its end: `detail_scroll` counts lines up from it.
                Action::Up => state.detail_scroll = state.detail_scroll.saturating_add(1),
                Action::Down => state.detail_scroll = state.detail_scroll.saturating_sub(1),
                Action::PageUp => state.detail_scroll = state.detail_scroll.saturating_add(page),
                Action::PageDown => state.detail_scroll = state.detail_scroll.saturating_sub(page),
                Action::Top => state.detail_scroll = usize::MAX / 2,
                Action::Bottom => state.detail_scroll = 0,
                Action::Wrap => state.detail_wrap = !state.detail_wrap,
                Action::Close => {
                    state.mode = Mode::Normal;
                    state.detail = None;
                }
                _ => {}
            }
            Vec::new()
        }
        Mode::Confirm => confirm(state, action),
        Mode::Logs => super::logs::key(state, action),
        Mode::LogSearch => super::logs::search_key(state, action),
    }
}

fn confirm(state: &mut AppState, action: Action) -> Vec<Effect> {
    match action {
        Action::Toggle => {
            if let Some(confirm) = &mut state.confirm {
                confirm.go = !confirm.go;
            }
            Vec::new()
        }
        Action::Accept => {
            state.mode = Mode::Normal;
            match state.confirm.take() {
                Some(confirm) if confirm.go => match confirm.then {
                    ConfirmThen::Start(request) => state.start(request),
                    ConfirmThen::CancelAndQuit => super::quit::cancel_and_quit(state),
                },
                _ => Vec::new(),
            }
        }
        Action::Close => {
            state.mode = Mode::Normal;
            state.confirm = None;
            Vec::new()
        }
        _ => Vec::new(),
    }
}

fn ask(state: &mut AppState, built: Result<Confirm, NotAsked>) -> Vec<Effect> {
    match built {
        Ok(confirm) => {
            state.confirm = Some(confirm);
            state.mode = Mode::Confirm;
        }
        Err(why) => state.notify(why.to_string(), true),
    }
    Vec::new()
}

/// Rows a page key moves.
fn page_rows(state: &AppState) -> usize {
    usize::from(state.size.1 / 3).max(1)
}

fn normal(state: &mut AppState, action: Action) -> Vec<Effect> {
    let page = page_rows(state) as isize;
    match action {
        Action::Up => super::cursor::move_cursor(state, -1),
        Action::Down => super::cursor::move_cursor(state, 1),
        Action::PageUp => super::cursor::move_cursor(state, -page),
        Action::PageDown => super::cursor::move_cursor(state, page),
        Action::Top => super::cursor::move_cursor(state, isize::MIN),
        Action::Bottom => super::cursor::move_cursor(state, isize::MAX),
        Action::NextPane | Action::PrevPane => {
            let at = Pane::ORDER
                .iter()
                .position(|p| *p == state.focus)
                .unwrap_or(0);
            let step = if action == Action::NextPane {
                1
            } else {
                Pane::ORDER.len() - 1
            };
            state.focus = Pane::ORDER[(at + step) % Pane::ORDER.len()];
            Vec::new()
        }
        Action::Open => open(state),
        Action::Close => {
            state.notice = None;
            if !state.filter.is_empty() {
                state.filter.clear();
                state.refilter();
                return state.sync_history_scope();
            }
            Vec::new()
        }
        Action::Filter => {
            state.mode = Mode::Filter;
            Vec::new()
        }
        Action::Poll => {
            super::provenance::forget_failed(state);
            vec![Effect::PollNow(SourceId::ALL.to_vec())]
        }
        Action::ConvergeModule => converge_module(state),
        Action::ConvergeMesh => {
            let built = ask::converge_mesh(state);
            ask(state, built)
        }
        Action::ForceRebuild => {
            let built = ask::force_rebuild(state);
            ask(state, built)
        }
        Action::Send => {
            let built = ask::send(state);
            ask(state, built)
        }
        Action::Rollback => {
            let built = ask::rollback(state);
            ask(state, built)
        }
        Action::UpdateUpstreams => {
            let built = ask::update_upstreams(state);
            ask(state, built)
        }
        Action::ToggleHistory => {
            state.history_by_module = !state.history_by_module;
            state.sync_history_scope()
        }
        Action::AutoConverge => {
            state.auto_converge = !state.auto_converge;
            state.converge_on_plan = false;
            let text = if state.auto_converge {
                "auto-converge on: a save plans, then converges what the plan would build or deliver"
            } else {
                "auto-converge off"
            };
            state.notify(text.to_string(), false);
            Vec::new()
        }
        Action::Gc | Action::Stats => super::views::open(state, action),
        Action::Environments => super::environments::open(state),
        Action::Timeline => super::timeline::open(state),
        Action::Logs => super::logs::open(state),
        Action::NextTarget => super::environments::next_target(state),
        Action::Help => {
            state.mode = Mode::Help;
            state.help_scroll = 0;
            Vec::new()
        }
        Action::Quit
        | Action::Accept
        | Action::Backspace
        | Action::Toggle
        | Action::Wrap
        | Action::Sweep
        | Action::Promote
        | Action::Left
        | Action::Right
        | Action::Search
        | Action::NextMatch
        | Action::PrevMatch
        | Action::Previous => Vec::new(),
    }
}

/// Enter: the detail of what is under the focused pane's cursor.
fn open(state: &mut AppState) -> Vec<Effect> {
    let detail = match state.focus {
        Pane::Modules => state
            .selected_module()
            .map(|m| Detail::Module(m.name.clone())),
        Pane::Machines => state
            .selected_machines()
            .get(state.machine_selected)
            .map(|m| Detail::Machine(m.name.clone())),
        Pane::Builds => state
            .builds
            .selected_row()
            .map(|b| Detail::Build(b.id.clone())),
        // A module's line opens the module (its state, error and output in this operation); any
        // other line opens in full.
        Pane::Operation => state
            .operation
            .selected_line()
            .map(|event| match &event.module {
                Some(module) => Detail::Module(module.clone()),
                None => Detail::Event(event.id),
            }),
    };
    let Some(detail) = detail else {
        return Vec::new();
    };
    // A module's record history is read now, not at the next polls: from the target (where it
    // keeps it apart: the record source reads the module's shard alone), then the state database.
    let module = matches!(detail, Detail::Module(_));
    state.detail = Some(detail);
    state.detail_scroll = 0;
    state.mode = Mode::Detail;
    if module {
        return vec![Effect::PollNow(vec![SourceId::Record, SourceId::State])];
    }
    Vec::new()
}

/// `c`: converge the selected module, asking first when it would build, deliver or send. While an
/// action runs, `start` says so at once (no confirm to answer first).
fn converge_module(state: &mut AppState) -> Vec<Effect> {
    match ask::converge_module(state).map(|c| c.filter(|_| state.running.is_none())) {
        Ok(None) => match state.selected_module() {
            Some(module) => {
                let request = ActionRequest::Converge {
                    modules: Some(vec![module.name.clone()]),
                    force: false,
                };
                state.start(request)
            }
            None => Vec::new(),
        },
        Ok(Some(confirm)) => ask(state, Ok(confirm)),
        Err(error) => ask(state, Err(error)),
    }
}
