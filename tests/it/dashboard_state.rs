//! A message in → the state out, for every pane (no terminal, no clock).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::dashboard::*;
use meshtop::app::keys::Mode;
use meshtop::app::msg::{
    ActionRequest, Effect, Msg, PageRequest, Placement, SourceData, SourceId, StateSnapshot,
};
use meshtop::app::state::{AppState, ConfirmThen, Detail, Pane, Running};
use meshtop::app::update::update;
use meshtop::app::window::{MAX_ROWS, PAGE_SIZE};
use meshtop::mesh::behind::MachineState;
use meshtop::mesh::builds::BuildStatus;
use meshtop::mesh::model::Target;
use meshtop::mesh::operation::OperationKind;
use meshtop::mesh::progress::{Outcome, Step};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

fn key(state: &mut AppState, code: KeyCode) -> Vec<Effect> {
    let modifiers = match code {
        KeyCode::Char(c) if c.is_ascii_uppercase() => KeyModifiers::SHIFT,
        _ => KeyModifiers::NONE,
    };
    update(state, Msg::Key(KeyEvent::new(code, modifiers)))
}

fn ch(state: &mut AppState, c: char) -> Vec<Effect> {
    key(state, KeyCode::Char(c))
}

fn fetch_of(effects: &[Effect]) -> Option<&PageRequest> {
    effects.iter().find_map(|e| match e {
        Effect::FetchBuilds(request) => Some(request),
        _ => None,
    })
}

#[test]
fn header_keeps_the_last_good_answer_and_shows_the_error() {
    let mut state = demo_state();
    update(
        &mut state,
        Msg::Polled {
            source: SourceId::Host,
            at_ms: NOW + 5000,
            target: None,
            result: Err(source_failed("daemon gone")),
        },
    );
    let host = state.source(SourceId::Host);
    assert_eq!(host.ok_ms, Some(NOW - 3000));
    assert_eq!(host.error, Some((NOW + 5000, "daemon gone".to_string())));
    assert!(state.host.is_some(), "the last good answer stays");
    update(
        &mut state,
        polled(SourceId::Host, -6000, SourceData::Host(Vec::new())),
    );
    assert_eq!(state.source(SourceId::Host).error, None);
    assert_eq!(state.host.as_ref().map(Vec::len), Some(0));
    assert_eq!(state.now_ms, NOW + 6000);
}

#[test]
fn modules_cursor_moves_and_the_history_follows_it() {
    let mut state = demo_state();
    assert_eq!(state.selected_module().unwrap().name, "base");
    let effects = ch(&mut state, 'j');
    assert_eq!(state.selected_module().unwrap().name, "api");
    let request = fetch_of(&effects).expect("asks for api's builds");
    assert_eq!(
        (request.module.as_deref(), request.placement),
        (Some("api"), Placement::Replace)
    );
    assert!(state.builds.is_empty() && state.builds.loading);
    ch(&mut state, 'G');
    assert_eq!(state.selected_module().unwrap().name, "worker");
    ch(&mut state, 'g');
    assert_eq!(state.selected_module().unwrap().name, "base");
    key(&mut state, KeyCode::Up);
    assert_eq!(state.selected, 0, "the cursor stops at the top");
}

#[test]
fn filter_narrows_the_modules_and_esc_clears_it() {
    let mut state = demo_state();
    ch(&mut state, '/');
    assert_eq!(state.mode, Mode::Filter);
    ch(&mut state, 'w');
    // Text in the filter line, not quit.
    assert!(!ch(&mut state, 'q').contains(&Effect::Quit));
    assert_eq!(state.filter, "wq");
    assert!(state.visible.is_empty());
    key(&mut state, KeyCode::Backspace);
    assert_eq!(state.visible.len(), 1);
    assert_eq!(state.selected_module().unwrap().name, "worker");
    key(&mut state, KeyCode::Enter);
    assert_eq!((state.mode, state.filter.as_str()), (Mode::Normal, "w"));
    key(&mut state, KeyCode::Esc);
    assert_eq!(state.visible.len(), 3);
    assert_eq!(
        state.selected_module().unwrap().name,
        "worker",
        "the cursor stays on the module"
    );
}

#[test]
fn detail_opens_on_enter_and_closes_on_esc() {
    let mut state = demo_state();
    ch(&mut state, 'j');
    key(&mut state, KeyCode::Enter);
    assert_eq!(
        (state.mode, state.detail.clone()),
        (Mode::Detail, Some(Detail::Module("api".into())))
    );
    // Anchored at the end: up scrolls back from it, down returns.
    ch(&mut state, 'k');
    assert_eq!(state.detail_scroll, 1);
    ch(&mut state, 'j');
    assert_eq!(state.detail_scroll, 0);
    assert!(state.detail_wrap);
    ch(&mut state, 'w');
    assert!(!state.detail_wrap, "w toggles wrapping");
    key(&mut state, KeyCode::Esc);
    assert_eq!((state.mode, state.detail.clone()), (Mode::Normal, None));
}

#[test]
fn machines_pane_counts_and_selects() {
    let mut state = demo_state();
    let counts = |s: &AppState, m: &str| {
        let c = s.machine_counts(m);
        (c.current, c.behind, c.held, c.total)
    };
    assert_eq!(counts(&state, "worker"), (2, 1, 0, 3));
    assert_eq!(counts(&state, "api"), (0, 0, 1, 1));
    ch(&mut state, 'G');
    key(&mut state, KeyCode::Tab);
    assert_eq!(state.focus, Pane::Machines);
    ch(&mut state, 'j');
    ch(&mut state, 'j');
    ch(&mut state, 'j');
    assert_eq!(state.machine_selected, 2, "stops at the last machine");
    key(&mut state, KeyCode::Enter);
    assert_eq!(state.detail, Some(Detail::Machine("worker-3".into())));
    key(&mut state, KeyCode::Esc);
    update(
        &mut state,
        polled(
            SourceId::Machines,
            0,
            SourceData::MachinesAgainst(
                demo_record(),
                vec![machine(
                    "worker-1",
                    "worker",
                    'c',
                    meshtop::mesh::behind::MachineState::Current,
                )],
            ),
        ),
    );
    assert_eq!(
        state.machine_selected, 0,
        "the selection shrinks with the listing"
    );
    key(&mut state, KeyCode::BackTab);
    assert_eq!(state.focus, Pane::Modules);
}

#[test]
fn builds_toggle_between_module_and_mesh_and_ignore_stale_pages() {
    let mut state = demo_state();
    assert_eq!(state.builds.scope.as_deref(), Some("base"));
    let effects = ch(&mut state, 'b');
    let request = fetch_of(&effects).unwrap().clone();
    assert_eq!(request.module, None);
    assert_eq!(state.builds.scope, None);
    let stale = PageRequest {
        module: Some("base".into()),
        before: None,
        limit: PAGE_SIZE,
        placement: Placement::Replace,
    };
    update(
        &mut state,
        Msg::BuildsPage {
            request: stale,
            at_ms: NOW,
            result: Ok(demo_builds()),
        },
    );
    assert!(
        state.builds.is_empty() && state.builds.loading,
        "a page of another scope is dropped"
    );
    update(
        &mut state,
        Msg::BuildsPage {
            request,
            at_ms: NOW,
            result: Ok(demo_builds()),
        },
    );
    assert_eq!(state.builds.len(), 3);
    assert!(state.builds.end);
    // The mesh scope does not follow the cursor.
    assert!(fetch_of(&ch(&mut state, 'j')).is_none());
    key(&mut state, KeyCode::Tab);
    key(&mut state, KeyCode::Tab);
    assert_eq!(state.focus, Pane::Builds);
    key(&mut state, KeyCode::Enter);
    assert_eq!(state.detail, Some(Detail::Build("b-api-3".into())));
    assert_eq!(
        state.builds.selected_row().unwrap().status,
        BuildStatus::Failed
    );
}

#[test]
fn history_is_paged_never_loaded_whole() {
    let mut state = big_state(3, 5_000);
    assert!(
        state.builds.len() <= MAX_ROWS,
        "the window holds {}",
        state.builds.len()
    );
    assert!(!state.builds.at_head());
    assert_eq!(
        state.builds.row(0).unwrap().id,
        format!("build-{:06}", 5_000 - MAX_ROWS)
    );
    state.focus = Pane::Builds;
    state.builds.selected = 0;
    let effects = ch(&mut state, 'k');
    let request = fetch_of(&effects)
        .expect("scrolling above the window fetches the newer page")
        .clone();
    assert_eq!(request.placement, Placement::Prepend);
    let newest = request.before.clone().unwrap();
    let rows: Vec<_> = (0..PAGE_SIZE)
        .map(|n| {
            let n = 5_000 - MAX_ROWS - PAGE_SIZE + n;
            build(
                &format!("build-{n:06}"),
                "module-0000",
                BuildStatus::Succeeded,
                NOW - n as i64 * MIN,
                "host-a",
            )
        })
        .collect();
    assert!(rows[0].started_ms < newest.0 || rows[0].id < newest.1);
    update(
        &mut state,
        Msg::BuildsPage {
            request,
            at_ms: NOW,
            result: Ok(rows),
        },
    );
    assert!(state.builds.len() <= MAX_ROWS);
    assert_eq!(
        state.builds.selected, PAGE_SIZE,
        "the cursor stays on the same row"
    );
    assert!(
        !state.builds.end,
        "dropping the oldest page means there is more below"
    );
    // g goes back to the newest build by refetching the head.
    let effects = ch(&mut state, 'g');
    assert_eq!(fetch_of(&effects).unwrap().placement, Placement::Replace);
}

#[test]
fn scrolling_to_the_end_asks_for_the_next_page_once() {
    let mut state = demo_state();
    state.focus = Pane::Builds;
    let rows: Vec<_> = (0..PAGE_SIZE)
        .map(|n| {
            build(
                &format!("b{n:03}"),
                "base",
                BuildStatus::Succeeded,
                NOW - n as i64,
                "h",
            )
        })
        .collect();
    let request = PageRequest {
        module: Some("base".into()),
        before: None,
        limit: PAGE_SIZE,
        placement: Placement::Replace,
    };
    update(
        &mut state,
        Msg::BuildsPage {
            request,
            at_ms: NOW,
            result: Ok(rows),
        },
    );
    let effects = ch(&mut state, 'G');
    let next = fetch_of(&effects)
        .expect("the end of a full page asks for more")
        .clone();
    assert_eq!(next.placement, Placement::Append);
    assert_eq!(next.before, Some((NOW - 99, "b099".to_string())));
    assert!(
        fetch_of(&ch(&mut state, 'j')).is_none(),
        "never two page fetches in flight"
    );
    update(
        &mut state,
        Msg::BuildsPage {
            request: next,
            at_ms: NOW,
            result: Ok(Vec::new()),
        },
    );
    assert!(state.builds.end && !state.builds.loading);
}

#[test]
fn converge_pane_follows_events_and_switches_converges() {
    let mut state = demo_state();
    assert_eq!(
        state.operation.operation_id.as_deref(),
        Some("4b2e9d10-77aa")
    );
    assert_eq!(
        state.operation.operation_id.as_deref(),
        Some("4b2e9d10-77aa")
    );
    assert_eq!(
        (state.operation.lines.len(), state.operation.last_event_id),
        (12, 15),
        "every step but the queued ones (those are the table's) is a line"
    );
    assert_eq!(state.poll_params().events_after, 15);
    let mut next = event(20, tier(0, &["base"]), None, "tier 0: base");
    next.operation_id = "9f00".into();
    next.operation = Some(5);
    next.operation_kind = Some(OperationKind::Rollback);
    let snapshot = StateSnapshot {
        events: vec![next],
        scope: Some("base".into()),
        ..StateSnapshot::default()
    };
    update(
        &mut state,
        polled(SourceId::State, 0, SourceData::State(Box::new(snapshot))),
    );
    assert_eq!(state.operation.operation_id.as_deref(), Some("9f00"));
    assert_eq!(state.operation.lines.len(), 1);
    // The pane names the operation as what it is.
    assert_eq!(state.operation.title(), "rollback #5");
}

#[test]
fn send_asks_first_with_cancel_selected() {
    let mut state = demo_state();
    ch(&mut state, 'G'); // worker: one machine behind
    let notice_before = state.notice.clone();
    assert!(ch(&mut state, 's').is_empty());
    assert_eq!(state.mode, Mode::Confirm);
    let confirm = state.confirm.clone().unwrap();
    assert!(!confirm.go);
    assert_eq!(confirm.lines.len(), 5);
    assert!(confirm.lines[1].contains("worker-1"), "{:?}", confirm.lines);
    assert!(
        confirm.lines[3].contains("recreated with the same configuration"),
        "{:?}",
        confirm.lines
    );
    // What to press when a machine fails or is held after it.
    assert_eq!(
        confirm.lines[4],
        "a machine that fails or is held after it: l logs shows what it says"
    );
    // Enter on the default (Cancel) does nothing.
    assert!(key(&mut state, KeyCode::Enter).is_empty());
    assert_eq!((state.mode, state.confirm.is_none()), (Mode::Normal, true));
    assert_eq!(state.notice, notice_before);
    ch(&mut state, 'k');
    ch(&mut state, 's');
    let confirm = state.confirm.clone().unwrap();
    assert!(
        confirm.lines[1].contains("api-1  sha256:eeeeeeeeeeee… (no build in the history)"),
        "{:?}",
        confirm.lines
    );
    // The target: ref @ short digest and the build that made it — never 64 hex wrapping.
    assert!(
        confirm.lines[2].starts_with("    → demo/api:1111aaaa2222-amd64 @sha256:aaaaaaaaaaaa…"),
        "{:?}",
        confirm.lines
    );
    assert!(
        !confirm.lines[2].contains(&"a".repeat(20)),
        "{:?}",
        confirm.lines
    );
    key(&mut state, KeyCode::Right);
    let effects = key(&mut state, KeyCode::Enter);
    // The action carries exactly the moves the confirm showed: machine, from, and the record's entry.
    let entry = state.record.as_ref().unwrap()["api"].clone();
    let running = state.machines_of("api")[0].running[0].clone();
    assert_eq!(
        effects,
        vec![Effect::Start(ActionRequest::Send {
            module: "api".into(),
            moves: vec![meshtop::mesh::machine::Move {
                module: "api".into(),
                machine: "api-1".into(),
                kind: "container".into(),
                from: running,
                to_reference: entry.reference,
                to_digest: entry.digest,
                to_manifest: entry.manifest,
                to_signed_by: entry.signed_by,
                state: meshtop::mesh::behind::MachineState::Held,
                before_send: None,
                of_module: 1,
                display_name: "api-1".into(),
            }]
        })]
    );
    assert_eq!(state.running, Some(Running::Send("send api".into())));
}

#[test]
fn send_without_a_record_entry_says_why() {
    let mut state = demo_state();
    ch(&mut state, 'G');
    // Both records: the polled one and the one the machines were judged against (the send's).
    state.record.as_mut().unwrap().remove("worker");
    state.machines_record.as_mut().unwrap().remove("worker");
    ch(&mut state, 's');
    assert_eq!(state.mode, Mode::Normal);
    let notice = state.notice.clone().unwrap();
    assert!(
        notice.error && notice.text.contains("record holds nothing for worker"),
        "{notice:?}"
    );
}

#[test]
fn force_then_esc_does_nothing_and_converge_runs_one_at_a_time() {
    let mut state = demo_state();
    ch(&mut state, 'j');
    assert!(ch(&mut state, 'f').is_empty());
    assert!(state.confirm.as_ref().unwrap().lines[0].contains("demo/api:9a8b7c6d5e4f-amd64"));
    assert!(key(&mut state, KeyCode::Esc).is_empty());
    assert_eq!((state.mode, state.running.clone()), (Mode::Normal, None));
    // api would build: c asks first, saying what happens to its machines.
    assert!(ch(&mut state, 'c').is_empty());
    let confirm = state.confirm.clone().expect("c asks when it would build");
    assert!(
        confirm.lines[0].starts_with("build and deliver demo/api:"),
        "{confirm:?}"
    );
    assert!(
        confirm
            .lines
            .iter()
            .any(|l| l.contains("held") && l.contains("api-1")),
        "{confirm:?}"
    );
    key(&mut state, KeyCode::Right);
    let effects = key(&mut state, KeyCode::Enter);
    assert_eq!(
        effects,
        vec![Effect::Start(ActionRequest::Converge {
            modules: Some(vec!["api".into()]),
            force: false
        })]
    );
    assert!(
        ch(&mut state, 'c').is_empty(),
        "a second action waits for the first"
    );
    assert!(state.notice.as_ref().unwrap().error);
    let done = update(
        &mut state,
        Msg::ActionDone {
            at_ms: NOW,
            label: "converge api".into(),
            result: Err(source_failed("not wired yet")),
        },
    );
    assert_eq!(done, vec![Effect::PollNow(SourceId::ALL.to_vec())]);
    assert_eq!(state.running, None);
    assert_eq!(
        state.notice.as_ref().unwrap().text,
        "converge api failed: not wired yet (l logs: what its machines say)"
    );
    ch(&mut state, 'C');
    let confirm = state.confirm.clone().unwrap();
    assert_eq!(
        confirm.then,
        ConfirmThen::Start(ActionRequest::Converge {
            modules: None,
            force: false
        })
    );
    assert!(
        confirm
            .lines
            .iter()
            .any(|l| l.contains("tier 0 base demo/base:3f9c2a1b7d4e-amd64 — skip"))
    );
}

#[test]
fn readonly_has_no_actions_and_says_so() {
    let mut state = demo_state_on(Target::Docker, true);
    for c in ['c', 'C', 'f', 's'] {
        state.notice = None;
        assert!(ch(&mut state, c).is_empty());
        assert_eq!((state.mode, state.running.clone()), (Mode::Normal, None));
        let notice = state
            .notice
            .clone()
            .expect("an action key answers in read-only");
        assert!(notice.text.starts_with("read-only"), "{c}: {notice:?}");
    }
}

/// A later operation of the mesh, from another process, with its short id.
fn other_converge(first_id: i64, uuid: &str, number: i64, last: &str) -> Msg {
    let outcome = match last {
        "converge succeeded" => Outcome::Succeeded,
        _ => Outcome::Failed,
    };
    let mut events = vec![
        event(first_id, started(5), None, "converge of 5 module(s)"),
        event(
            first_id + 1,
            failed("step 3/5: exit 3"),
            Some("api"),
            "step 3/5: exit 3",
        ),
        event(first_id + 2, finished(outcome), None, last),
    ];
    for e in &mut events {
        e.operation_id = uuid.into();
        e.operation = Some(number);
    }
    let snapshot = StateSnapshot {
        events,
        latest_operation: Some(uuid.into()),
        ..demo_history()
    };
    polled(
        SourceId::State,
        -1000,
        SourceData::State(Box::new(snapshot)),
    )
}

#[test]
fn the_notice_follows_the_newest_operation_never_a_stale_success() {
    let mut state = demo_state();
    update(
        &mut state,
        Msg::ActionDone {
            at_ms: NOW,
            label: "converge demo".into(),
            result: Ok("converge #41 succeeded".into()),
        },
    );
    assert!(!state.notice.as_ref().unwrap().error);
    // A converge started from the command line fails while the dashboard is open: the bell rings.
    let effects = update(
        &mut state,
        other_converge(100, "01a22df9-0002", 42, "converge failed"),
    );
    // The table falls back to the plan, asked for anew; the bell rings.
    assert_eq!(
        effects,
        vec![
            Effect::PollNow(vec![
                SourceId::Plan,
                SourceId::Record,
                SourceId::Host,
                SourceId::Machines
            ]),
            Effect::Bell("#42 converge failed".into())
        ]
    );
    let notice = state.notice.clone().unwrap();
    assert!(notice.error, "{notice:?}");
    assert_eq!(notice.text, "#42 converge failed");
    assert!(!notice.text.contains("succeeded"), "{notice:?}");
    assert_eq!(state.operation.operation, Some(42));
    assert_eq!(
        state.operation.operation_id.as_deref(),
        Some("01a22df9-0002")
    );
    // And the next one, succeeding within seconds, is said as such, without the bell.
    let effects = update(
        &mut state,
        other_converge(200, "01a22df9-0003", 43, "converge succeeded"),
    );
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Bell(_))),
        "{effects:?}"
    );
    let notice = state.notice.clone().unwrap();
    assert!(
        !notice.error && notice.text == "#43 converge succeeded",
        "{notice:?}"
    );
}

#[test]
fn no_bell_means_no_bell() {
    let mut state = demo_state();
    state.bell = false;
    let effects = update(
        &mut state,
        other_converge(100, "01a22df9-0002", 42, "converge failed"),
    );
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Bell(_))),
        "{effects:?}"
    );
    assert!(state.notice.unwrap().error);
}

#[test]
fn builder_output_never_becomes_the_notice() {
    let mut state = demo_state();
    state.notice = None;
    update(
        &mut state,
        Msg::ActionProgress(meshtop::mesh::progress::Progress {
            step: Step::Output,
            module: Some("api".into()),
            text: "---> Running in 997ef2f20ecc".into(),
            payload: meshtop::mesh::progress::Payload::output("---> Running in 997ef2f20ecc"),
        }),
    );
    assert!(state.notice.is_none(), "{:?}", state.notice);
}

#[test]
fn help_poll_and_quit() {
    let mut state = demo_state();
    ch(&mut state, '?');
    assert_eq!(state.mode, Mode::Help);
    assert!(!ch(&mut state, 'q').contains(&Effect::Quit));
    assert_eq!(state.mode, Mode::Normal, "q closes the help");
    assert_eq!(
        ch(&mut state, 'r'),
        vec![Effect::PollNow(SourceId::ALL.to_vec())]
    );
    let effects = update(
        &mut state,
        Msg::Key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
    );
    assert_eq!(effects, vec![Effect::Quit]);
}

#[test]
fn the_clock_redraws_only_when_what_shows_changes() {
    let mut state = demo_state();
    state.dirty = false;
    update(&mut state, Msg::Tick(NOW + 200));
    assert!(!state.dirty, "no age changed within the same second");
    update(&mut state, Msg::Tick(NOW + 1200));
    assert!(state.dirty);
    state.dirty = false;
    update(&mut state, Msg::Resize(80, 24));
    assert!(state.dirty && state.size == (80, 24));
}

#[test]
fn the_registry_answers_per_module_and_its_refs_come_from_the_plan() {
    let mut state = demo_state();
    let refs = state.poll_params().refs;
    assert!(
        !refs.is_empty(),
        "the registry source is asked about the planned refs"
    );
    assert!(
        refs.iter()
            .all(|(module, reference)| reference.contains(&format!("/{module}:"))),
        "{refs:?}"
    );
    use meshtop::app::msg::RegistryAnswer;
    let answers = [
        (
            "base".to_string(),
            RegistryAnswer::Published("sha256:aa".into()),
        ),
        ("api".to_string(), RegistryAnswer::Absent),
    ]
    .into_iter()
    .collect();
    update(
        &mut state,
        polled(SourceId::Registry, 1000, SourceData::Registry(answers)),
    );
    let palette = meshtop::widgets::Palette { no_color: true };
    assert_eq!(
        meshtop::widgets::modules::registry_cell(&state, "base", palette).0,
        "✓"
    );
    assert_eq!(
        meshtop::widgets::modules::registry_cell(&state, "api", palette).0,
        "✗"
    );
    assert_eq!(
        meshtop::widgets::modules::registry_cell(&state, "worker", palette).0,
        "–"
    );
    assert!(state.source(SourceId::Registry).ok_ms.is_some());
}

/// The send confirm takes its target from the record the machines were judged against, not from a
/// record polled at another moment: right after a converge the machines poll may answer before the
/// record poll, and the confirm then named the old artifact (and the send was refused as "moved").
#[test]
fn the_send_confirm_goes_to_the_record_the_machines_were_judged_against() {
    let mut state = demo_state();
    ch(&mut state, 'G'); // worker
    let mut newer = state.record.clone().unwrap();
    let mut entry = newer["worker"].clone();
    entry.digest = digest('f');
    newer.insert("worker".into(), entry);
    let machines = vec![
        machine("worker-1", "worker", 'c', MachineState::Behind),
        machine("worker-2", "worker", 'c', MachineState::Behind),
    ];
    update(
        &mut state,
        polled(
            SourceId::Machines,
            0,
            SourceData::MachinesAgainst(newer, machines),
        ),
    );
    ch(&mut state, 's');
    let confirm = state.confirm.clone().expect("a send confirm");
    let ConfirmThen::Start(ActionRequest::Send { moves, .. }) = confirm.then else {
        panic!("not a send: {:?}", confirm.then);
    };
    assert_eq!(moves.len(), 2);
    assert!(
        moves.iter().all(|m| m.to_digest == digest('f')),
        "{moves:?}"
    );
}

/// Issue 18: a send's confirm says what a send does on the target it goes to, in the target's own
/// words; a Kubernetes user is never told that a container is recreated.
#[test]
fn the_send_confirm_says_what_a_send_does_on_a_kubernetes_target() {
    let target = Target::Kubernetes {
        namespace: "demo".into(),
        context: Some("kind-dev".into()),
    };
    let mut state = demo_state_on(target, false);
    ch(&mut state, 'G'); // worker: one machine behind
    assert!(ch(&mut state, 's').is_empty());
    assert_eq!(state.mode, Mode::Confirm);
    let text = state.confirm.clone().unwrap().lines.join("\n");
    assert!(!text.contains("container is recreated"), "{text}");
    assert!(
        text.contains("each workload's container image is patched to ref@digest"),
        "{text}"
    );
}

/// Every source answering again exactly what the state holds (the history with no new step).
fn same_answers(state: &AppState) -> Vec<(SourceId, SourceData)> {
    let mut history = demo_history();
    history.events.clear();
    history.page = state.builds.rows(0, usize::MAX).cloned().collect();
    vec![
        (SourceId::Plan, SourceData::Plan(Box::new(demo_plan()))),
        (SourceId::Record, SourceData::Record(demo_record(), None)),
        (SourceId::Host, SourceData::Host(demo_host())),
        (
            SourceId::Machines,
            SourceData::MachinesAgainst(demo_record(), demo_machines()),
        ),
        (SourceId::State, SourceData::State(Box::new(history))),
    ]
}

/// Issue 18: redraw only when the state changed. A poll that answers what the state holds (the
/// same data, or the same error again) leaves nothing to draw; its age still restarts.
#[test]
fn a_poll_that_answers_what_the_state_holds_marks_nothing_to_draw() {
    let mut state = demo_state();
    for (source, data) in same_answers(&state) {
        state.dirty = false; // the loop drew
        update(&mut state, polled(source, -1000, data));
        assert!(!state.dirty, "{source:?} answered what the state holds");
        assert_eq!(state.source(source).ok_ms, Some(NOW + 1000));
    }
    let error = |at_ms| Msg::Polled {
        source: SourceId::Host,
        at_ms,
        target: None,
        result: Err(source_failed("daemon gone")),
    };
    update(&mut state, error(NOW + 2000));
    assert!(state.dirty, "a new error is drawn");
    state.dirty = false;
    update(&mut state, error(NOW + 3000));
    assert!(!state.dirty, "the same error again is not");
    assert_eq!(
        state.source(SourceId::Host).error,
        Some((NOW + 2000, "daemon gone".to_string())),
        "when it first came is kept"
    );
}

#[test]
fn a_poll_that_answers_something_new_marks_the_screen_to_draw() {
    let mut moved = demo_record();
    moved.get_mut("api").unwrap().digest = digest('f');
    let mut plan = demo_plan();
    plan.modules[0].reason = "another reason".into();
    let mut history = demo_history();
    history.events.clear();
    history.pins.clear();
    history.holder = None;
    history.last_builds.remove("api");
    let changed = vec![
        (SourceId::Plan, SourceData::Plan(Box::new(plan))),
        (SourceId::Record, SourceData::Record(moved.clone(), None)),
        (SourceId::Host, SourceData::Host(Vec::new())),
        (
            SourceId::Machines,
            SourceData::MachinesAgainst(moved, demo_machines()),
        ),
        (
            SourceId::Machines,
            SourceData::MachinesAgainst(demo_record(), demo_machines()[1..].to_vec()),
        ),
        (SourceId::State, SourceData::State(Box::new(history))),
    ];
    for (source, data) in changed {
        let mut state = demo_state();
        state.dirty = false;
        update(&mut state, polled(source, -1000, data));
        assert!(state.dirty, "{source:?} answered something new");
    }
}

/// The header's age of a source whose equal answer was not drawn is drawn at the next tick: the
/// tick compares the clock with what the screen shows, not with the clock a moment before.
#[test]
fn the_age_an_equal_poll_restarted_is_drawn_at_the_next_tick() {
    let mut state = demo_state();
    update(&mut state, Msg::Tick(NOW));
    state.dirty = false; // drawn: `plan 4s`
    assert!(screen(&state, 120, 40).contains("plan 4s"));
    update(
        &mut state,
        polled(
            SourceId::Plan,
            -1000,
            SourceData::Plan(Box::new(demo_plan())),
        ),
    );
    assert!(!state.dirty);
    // Half a second on, no other age moved: only the plan's, from what the screen shows.
    update(&mut state, Msg::Tick(NOW + 1500));
    assert!(state.dirty, "the plan's age restarted");
    assert!(screen(&state, 120, 40).contains("plan 0s"));
    state.dirty = false;
    update(&mut state, Msg::Tick(NOW + 1600));
    assert!(!state.dirty, "nothing on screen moved");
    update(&mut state, Msg::Tick(NOW + 2000));
    assert!(state.dirty, "a second on: `plan 1s`");
}

/// Another process's rollback or gc, ended as `outcome` with its own last line.
fn other_operation(kind: &str, number: i64, outcome: Outcome, last: &str) -> Msg {
    let uuid = format!("01a22df9-{number:04}");
    let mut events = vec![
        event(500, started(1), None, &format!("{kind} of api")),
        event(501, send("api-1"), Some("api"), "api-1: a → b"),
        event(
            502,
            meshtop::mesh::progress::Payload::sent("api-1", outcome == Outcome::Succeeded),
            Some("api"),
            "api-1: moved",
        ),
        event(503, finished(outcome), None, last),
    ];
    for e in &mut events {
        e.operation_id = uuid.clone();
        e.operation = Some(number);
        e.operation_kind = Some(kind.parse().unwrap());
        // Long after the start: a followed operation that ran long rings the bell, whatever its
        // end; these are quick.
        e.at_ms = NOW - 1_000 + e.id;
    }
    let snapshot = StateSnapshot {
        events,
        latest_operation: Some(uuid),
        ..demo_history()
    };
    polled(SourceId::State, 0, SourceData::State(Box::new(snapshot)))
}

/// A rollback's last line ends in its pin, a gc's in the bytes it freed: one that did all it was
/// asked is no error and rings no bell (it rang, red, while the notice read how the line ended).
#[test]
fn a_rollback_or_gc_that_succeeded_is_no_error_and_rings_no_bell() {
    let succeeded = [
        (
            "rollback",
            "rollback: rolled back api to demo/api:1@aaaaaaaaaaaa (#3): 1/1 machine(s) moved; \
             pinned until api's own inputs change",
        ),
        ("gc", "gc: 2 taken, 2048 bytes freed"),
        ("unpin", "unpin: unpinned api"),
    ];
    for (number, (kind, last)) in (60..).zip(succeeded) {
        let mut state = demo_state();
        let effects = update(
            &mut state,
            other_operation(kind, number, Outcome::Succeeded, last),
        );
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Bell(_))),
            "{kind}: {effects:?}"
        );
        let notice = state.notice.clone().unwrap();
        assert!(!notice.error, "{kind}: {notice:?}");
        assert_eq!(notice.text, format!("#{number} {last}"));
    }
    // The same words, failed: red, and the bell.
    let mut state = demo_state();
    let last = "rollback: rolled back api to demo/api:1@aaaaaaaaaaaa (#3): 0/1 machine(s) moved";
    let effects = update(
        &mut state,
        other_operation("rollback", 70, Outcome::Failed, last),
    );
    assert!(
        effects.contains(&Effect::Bell(format!("#70 {last}"))),
        "{effects:?}"
    );
    assert!(state.notice.unwrap().error);
}

/// Every step's text said otherwise: the table, the header and the notice judge the same (the
/// words are for people; what the screen says of an operation is its steps' data).
#[test]
fn reworded_steps_judge_the_same_on_screen() {
    let reworded = |mut history: StateSnapshot| {
        for e in &mut history.events {
            e.text = format!("«{}»", e.text.to_uppercase());
        }
        history
    };
    let follow = |history: StateSnapshot| {
        let mut state = empty_state(&demo_mesh(Target::Docker), false);
        update(
            &mut state,
            polled(SourceId::State, 0, SourceData::State(Box::new(history))),
        );
        state
    };
    for history in [demo_history(), running_history()] {
        let said = follow(history.clone());
        let otherwise = follow(reworded(history));
        let walked = said.operation.live.as_ref().map(|live| live.modules.len());
        assert_eq!(walked, Some(3), "the operation was folded");
        assert_eq!(otherwise.operation.live, said.operation.live);
        assert_eq!(
            otherwise.notice.as_ref().map(|n| n.error),
            said.notice.as_ref().map(|n| n.error)
        );
        let cell = |state: &AppState, module| {
            let palette = meshtop::widgets::Palette { no_color: true };
            meshtop::widgets::modules::decision_cell(state, module, palette).0
        };
        for module in ["base", "api", "worker"] {
            assert_eq!(cell(&otherwise, module), cell(&said, module), "{module}");
        }
        assert_eq!(
            meshtop::widgets::header::operation_text(&otherwise).map(|(_, gone)| gone),
            meshtop::widgets::header::operation_text(&said).map(|(_, gone)| gone)
        );
    }
    // A last line that says the opposite of what happened changes nothing either.
    for (outcome, last) in [
        (Outcome::Succeeded, "rollback failed"),
        (Outcome::Failed, "rollback succeeded"),
    ] {
        let mut said = demo_state();
        let mut otherwise = demo_state();
        let effects = update(
            &mut said,
            other_operation("rollback", 80, outcome, "rolled back"),
        );
        let again = update(
            &mut otherwise,
            other_operation("rollback", 80, outcome, last),
        );
        assert_eq!(
            effects.iter().any(|e| matches!(e, Effect::Bell(_))),
            again.iter().any(|e| matches!(e, Effect::Bell(_)))
        );
        assert_eq!(said.notice.unwrap().error, otherwise.notice.unwrap().error);
    }
}

/// Keys typed into the filter, as the property below presses them.
#[derive(Debug, Clone)]
enum FilterKey {
    Open,
    Type(char),
    Backspace,
    Accept,
    Escape,
    Down,
}

fn filter_key() -> impl proptest::strategy::Strategy<Value = FilterKey> {
    use proptest::prelude::*;
    prop_oneof![
        1 => Just(FilterKey::Open),
        6 => proptest::char::ranges(vec!['a'..='c', 'A'..='C', '-'..='-'].into())
            .prop_map(FilterKey::Type),
        2 => Just(FilterKey::Backspace),
        1 => Just(FilterKey::Accept),
        1 => Just(FilterKey::Escape),
        1 => Just(FilterKey::Down),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 64, ..Default::default() })]

    /// Whatever is typed, erased, kept or cleared, the rows are exactly the modules whose name
    /// holds the filter (either case), in the table's order, and the cursor stays on its module
    /// while that module still passes (else it goes to the first row).
    #[test]
    fn the_filter_shows_exactly_the_matching_modules(
        names in proptest::collection::btree_set("[a-cA-C-]{1,5}", 1..40),
        keys in proptest::collection::vec(filter_key(), 1..40),
    ) {
        use meshtop::mesh::model::Policy;
        let modules = names
            .iter()
            .enumerate()
            .map(|(i, name)| module(name, (i % 3) as u32, None, Policy::Rollout))
            .collect();
        let mut state = empty_state(&mesh(Target::Docker, modules), false);
        for pressed in &keys {
            let before = state.selected_module().map(|m| m.name.clone());
            match pressed {
                FilterKey::Open if state.mode == Mode::Normal => {
                    ch(&mut state, '/');
                }
                FilterKey::Type(c) if state.mode == Mode::Filter => {
                    ch(&mut state, *c);
                }
                FilterKey::Backspace if state.mode == Mode::Filter => {
                    key(&mut state, KeyCode::Backspace);
                }
                FilterKey::Accept if state.mode == Mode::Filter => {
                    key(&mut state, KeyCode::Enter);
                }
                FilterKey::Escape => {
                    key(&mut state, KeyCode::Esc);
                }
                FilterKey::Down if state.mode == Mode::Normal => {
                    ch(&mut state, 'j');
                }
                _ => continue,
            }
            let needle = state.filter.to_lowercase();
            let expected: Vec<&str> = state
                .modules
                .iter()
                .filter(|m| m.name.to_lowercase().contains(&needle))
                .map(|m| m.name.as_str())
                .collect();
            let shown: Vec<&str> = state
                .visible
                .iter()
                .map(|&i| state.modules[i].name.as_str())
                .collect();
            proptest::prop_assert_eq!(&shown, &expected, "filter {:?} after {:?}", state.filter, pressed);
            let now = state.selected_module().map(|m| m.name.clone());
            if matches!(pressed, FilterKey::Down) {
                continue;
            }
            match before.filter(|name| expected.contains(&name.as_str())) {
                Some(name) => proptest::prop_assert_eq!(now, Some(name)),
                None => proptest::prop_assert_eq!(now, expected.first().map(|n| n.to_string())),
            }
        }
    }
}

#[test]
fn the_pollers_params_share_the_plans_refs_and_the_machines_digests() {
    use std::sync::Arc;
    // Derived after every message (src/tui.rs): at 10,000 modules a copy of every planned ref
    // per key was most of a key's time.
    let state = demo_state();
    let (first, again) = (state.poll_params(), state.poll_params());
    assert!(!first.refs.is_empty() && !first.digests.is_empty());
    assert!(Arc::ptr_eq(&first.refs, &again.refs), "the refs are shared");
    assert!(Arc::ptr_eq(&first.digests, &again.digests));
    // A new plan brings its own refs.
    let mut state = state;
    let mut plan = demo_plan();
    let base = plan.modules.iter_mut().find(|m| m.name == "base").unwrap();
    base.reference = Some("demo/base:ffffffffffff-amd64".into());
    update(
        &mut state,
        polled(SourceId::Plan, 0, SourceData::Plan(Box::new(plan))),
    );
    let refs = state.poll_params().refs;
    assert!(!Arc::ptr_eq(&refs, &first.refs));
    assert!(refs.contains(&(
        "base".to_string(),
        "demo/base:ffffffffffff-amd64".to_string()
    )));
    // What a history poll traces: the machines' digests and the record history's, each once.
    let params = meshtop::app::msg::PollParams {
        digests: Arc::from(["sha256:a".to_string(), "sha256:c".to_string()]),
        stamp_digests: vec!["sha256:b".into(), "sha256:c".into()],
        ..Default::default()
    };
    assert_eq!(
        params.traced_digests(),
        ["sha256:a", "sha256:b", "sha256:c"]
    );
}
