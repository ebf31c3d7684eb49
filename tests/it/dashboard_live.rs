//! The live converge on the dashboard, message in → state out: the table follows the operation
//! read from the state database; an operation whose process is gone says so; quitting while a
//! converge started here runs asks, then cancels it and quits once it stopped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::dashboard::*;
use meshtop::app::keys::Mode;
use meshtop::app::msg::{ActionRequest, Effect, Msg, SourceData, SourceId};
use meshtop::app::quit::QUIT_GRACE_MS;
use meshtop::app::state::{AppState, ConfirmThen, Running};
use meshtop::app::update::update;
use meshtop::mesh::live::{ModuleRun, OperationState};
use meshtop::mesh::progress::Step;
use meshtop::widgets::Palette;
use meshtop::widgets::header::operation_text;
use meshtop::widgets::modules::decision_cell;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

fn key(state: &mut AppState, code: KeyCode, modifiers: KeyModifiers) -> Vec<Effect> {
    update(state, Msg::Key(KeyEvent::new(code, modifiers)))
}

fn q(state: &mut AppState) -> Vec<Effect> {
    key(state, KeyCode::Char('q'), KeyModifiers::NONE)
}

fn ctrl_c(state: &mut AppState) -> Vec<Effect> {
    key(state, KeyCode::Char('c'), KeyModifiers::CONTROL)
}

fn running_state() -> AppState {
    let mut state = demo_state();
    update(
        &mut state,
        polled(
            SourceId::State,
            1000,
            SourceData::State(Box::new(running_history())),
        ),
    );
    state
}

/// `C`, then go: a converge of the mesh starts on the dashboard.
fn converge_here(state: &mut AppState) -> Vec<Effect> {
    key(state, KeyCode::Char('C'), KeyModifiers::SHIFT);
    key(state, KeyCode::Right, KeyModifiers::NONE);
    key(state, KeyCode::Enter, KeyModifiers::NONE)
}

fn decision(state: &AppState, module: &str) -> String {
    decision_cell(state, module, Palette { no_color: true }).0
}

#[test]
fn while_a_converge_runs_the_table_shows_each_module_in_it() {
    let mut state = demo_state();
    // Finished: the table shows the plan.
    assert_eq!(decision(&state, "api"), "build");
    assert_eq!(operation_text(&state), None);
    update(
        &mut state,
        polled(
            SourceId::State,
            1000,
            SourceData::State(Box::new(running_history())),
        ),
    );
    let (live, now) = state.followed().unwrap();
    assert_eq!(now, OperationState::Running);
    assert_eq!(live.done_of(), (1, 3));
    assert_eq!(decision(&state, "base"), "skip·record");
    assert!(
        decision(&state, "api").starts_with("building 2/4 "),
        "{}",
        decision(&state, "api")
    );
    assert_eq!(decision(&state, "worker"), "queued");
    let (text, gone) = operation_text(&state).unwrap();
    assert!(!gone);
    assert!(text.contains("tier 2 of 2 · 1/3 done"), "{text}");
}

#[test]
fn a_converge_whose_process_is_gone_is_said_stopped_and_the_plan_comes_back() {
    let mut state = demo_state();
    let mut history = running_history();
    // Killed: no last word, and the lock's holder is dead (or the lock gone).
    history.holder.as_mut().unwrap().alive = false;
    update(
        &mut state,
        polled(SourceId::State, 1000, SourceData::State(Box::new(history))),
    );
    assert_eq!(state.followed().unwrap().1, OperationState::Gone);
    let (text, gone) = operation_text(&state).unwrap();
    assert!(gone && text.contains("stopped (process gone)"), "{text}");
    // Nothing runs: the table shows the plan, never a `building` that is not so.
    assert_eq!(decision(&state, "api"), "build");
}

#[test]
fn the_end_of_a_followed_converge_asks_for_a_fresh_plan() {
    let mut state = running_state();
    let mut done = event(
        130,
        finished(meshtop::mesh::progress::Outcome::Failed),
        None,
        "converge failed",
    );
    done.at_ms = NOW;
    done.operation_id = "7c00aa11-0001".into();
    let mut history = running_history();
    history.events = vec![done];
    history.holder = None;
    let effects = update(
        &mut state,
        polled(SourceId::State, 0, SourceData::State(Box::new(history))),
    );
    assert!(
        effects.contains(&Effect::PollNow(vec![
            SourceId::Plan,
            SourceId::Record,
            SourceId::Host,
            SourceId::Machines
        ])),
        "{effects:?}"
    );
    let live = state.operation.live.as_ref().unwrap();
    assert!(matches!(live.modules["api"].run, ModuleRun::Ended(_)));
    assert!(matches!(
        live.modules["worker"].run,
        ModuleRun::NotReached(_)
    ));
    assert_eq!(decision(&state, "api"), "build");
}

#[test]
fn quit_while_nothing_runs_quits_at_once() {
    let mut state = demo_state();
    assert_eq!(q(&mut state), vec![Effect::Quit]);
}

#[test]
fn quit_while_a_converge_started_here_runs_asks_then_cancels_and_quits_when_it_stopped() {
    let mut state = running_state();
    let started = converge_here(&mut state);
    assert!(matches!(
        started.as_slice(),
        [Effect::Start(ActionRequest::Converge { .. })]
    ));
    assert!(matches!(state.running, Some(Running::Converge(_))));

    // q asks, with Cancel selected; Enter on Cancel keeps running.
    assert!(q(&mut state).is_empty());
    assert_eq!(state.mode, Mode::Confirm);
    let confirm = state.confirm.clone().unwrap();
    assert_eq!(confirm.then, ConfirmThen::CancelAndQuit);
    assert!(!confirm.go);
    assert!(
        confirm.lines.iter().any(|l| l.contains("marked cancelled")),
        "{:?}",
        confirm.lines
    );
    assert!(
        confirm
            .lines
            .iter()
            .any(|l| l.contains("building now: api")),
        "{:?}",
        confirm.lines
    );
    assert!(key(&mut state, KeyCode::Enter, KeyModifiers::NONE).is_empty());
    assert!(state.confirm.is_none());

    // q, then go: the action is asked to stop; nothing quits yet.
    q(&mut state);
    key(&mut state, KeyCode::Right, KeyModifiers::NONE);
    assert_eq!(
        key(&mut state, KeyCode::Enter, KeyModifiers::NONE),
        vec![Effect::CancelAction]
    );
    assert!(
        state
            .notice
            .as_ref()
            .unwrap()
            .text
            .starts_with("cancelling")
    );
    // Its end arrives: now it quits.
    let effects = update(
        &mut state,
        Msg::ActionDone {
            at_ms: NOW + 1000,
            label: "converge mesh".into(),
            result: Err(source_failed(
                "converge cancelled: running builds were marked cancelled",
            )),
        },
    );
    assert_eq!(effects.last(), Some(&Effect::Quit));
}

#[test]
fn ctrl_c_twice_cancels_and_a_stuck_action_is_left_after_the_grace() {
    let mut state = running_state();
    converge_here(&mut state);
    assert!(ctrl_c(&mut state).is_empty(), "the first ctrl-c asks");
    assert_eq!(ctrl_c(&mut state), vec![Effect::CancelAction]);
    // The action never ends: the clock quits after the grace.
    let at = state.now_ms;
    assert!(update(&mut state, Msg::Tick(at + QUIT_GRACE_MS - 1)).is_empty());
    assert_eq!(
        update(&mut state, Msg::Tick(at + QUIT_GRACE_MS)),
        vec![Effect::Quit]
    );
}

#[test]
fn a_new_operation_clears_an_earlier_notice() {
    let mut state = demo_state();
    assert_eq!(
        state.notice.as_ref().map(|n| n.text.as_str()),
        Some("4b2e9d10 converge succeeded")
    );
    let mut history = running_history();
    history.events.truncate(1);
    for e in &mut history.events {
        e.id += 200;
        e.operation_id = "next".into();
        e.operation = Some(44);
    }
    history.holder.as_mut().unwrap().operation_id = "next".into();
    // Read after the first poll: this start is live.
    update(
        &mut state,
        polled(SourceId::State, 0, SourceData::State(Box::new(history))),
    );
    assert_eq!(
        state.notice, None,
        "an earlier operation's word is not current"
    );
    let (text, _) = operation_text(&state).unwrap();
    assert!(text.starts_with("⟳ #44 converge of 3 module(s)"), "{text}");
}

/// A send (or a rollback) walks no tiers: its module reads `sending`, then `sent 1/1`, never
/// `queued`; the modules it does not touch read `–`.
#[test]
fn a_send_from_another_terminal_reads_sending_then_sent() {
    let mut state = demo_state();
    let mut events = vec![
        event(300, started(1), None, "send of worker"),
        event(301, send("worker-1"), Some("worker"), "worker-1: a → b"),
    ];
    for e in &mut events {
        e.operation_id = "send-1".into();
        e.operation = Some(50);
    }
    let mut history = running_history();
    history.events = events;
    history.holder.as_mut().unwrap().operation_id = "send-1".into();
    update(
        &mut state,
        polled(
            SourceId::State,
            0,
            SourceData::State(Box::new(history.clone())),
        ),
    );
    assert_eq!(decision(&state, "worker"), "sending 0/1");
    assert_eq!(decision(&state, "api"), "–");
    let mut sent = event(
        302,
        meshtop::mesh::progress::Payload::sent("worker-1", true),
        Some("worker"),
        "worker-1: moved",
    );
    sent.operation_id = "send-1".into();
    history.events = vec![sent];
    update(
        &mut state,
        polled(SourceId::State, 0, SourceData::State(Box::new(history))),
    );
    assert_eq!(decision(&state, "worker"), "sent 1/1");
}

/// The first poll reads only the newest steps: an operation read from mid-way has lost its start
/// and perhaps some modules, so the header claims neither a total nor an exact running time.
#[test]
fn an_operation_read_from_mid_way_claims_no_total() {
    let mut state = empty_state(&demo_mesh(meshtop::mesh::model::Target::Docker), false);
    let mut history = running_history();
    // Its tail only: from api's build on.
    history.events.retain(|e| e.id >= 109);
    update(
        &mut state,
        polled(SourceId::State, 1000, SourceData::State(Box::new(history))),
    );
    let (text, gone) = operation_text(&state).unwrap();
    assert!(!gone);
    assert!(text.contains("0 done · over "), "{text}");
    assert!(!text.contains('/'), "no total is known: {text}");
    // Read from its start, the same operation has both.
    let (text, _) = operation_text(&running_state()).unwrap();
    assert!(text.contains("1/3 done · "), "{text}");
}

#[test]
fn a_history_answer_read_twice_shows_each_event_once() {
    // A converge started here asks the history source at each step: a poll that began before the
    // previous answer was taken in reads the same events again (issue 23: 24 events, 125 lines).
    let mut state = running_state();
    let lines = state.operation.lines.len();
    let done = state.operation.live.clone();
    update(
        &mut state,
        polled(
            SourceId::State,
            2000,
            SourceData::State(Box::new(running_history())),
        ),
    );
    assert_eq!(state.operation.lines.len(), lines);
    assert_eq!(state.operation.live, done);
    // A later answer that overlaps the earlier one adds only what is new.
    let mut later = running_history();
    let last = later.events.last().cloned().unwrap();
    let mut next = last.clone();
    next.id += 1;
    next.step = Step::Built;
    next.payload = Some(built("demo/api:9a8b7c6d5e4f-amd64", "sha256:aaaa"));
    next.text = "built in 3s".into();
    later.events.push(next);
    update(
        &mut state,
        polled(SourceId::State, 3000, SourceData::State(Box::new(later))),
    );
    assert_eq!(state.operation.lines.len(), lines + 1);
    let ids: Vec<i64> = state.operation.lines.iter().map(|e| e.id).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique);
}
