//! The record's history in the module detail, pinned modules, the gc and stats views, and where
//! `R` is hinted: snapshots at 120×40 and 80×24 from fixed states, and the update behind them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;

use common::dashboard::*;
use meshtop::app::keys::Mode;
use meshtop::app::msg::{
    ActionRequest, Effect, Msg, SourceData, SourceError, SourceId, StateSnapshot,
};
use meshtop::app::state::{AppState, Detail};
use meshtop::app::update::update;
use meshtop::app::views::{GC_GRACE_MS, GC_KEEP_NEWEST, ViewData, ViewRequest};
use meshtop::mesh::decide::Decision;
use meshtop::mesh::model::Target;
use meshtop::widgets::{self, Palette};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;
use ratatui::style::Color;

fn footer(state: &AppState, width: u16) -> String {
    let area = Rect::new(0, 0, width, 1);
    let mut buffer = Buffer::empty(area);
    widgets::footer::draw(&mut buffer, area, state, Palette { no_color: true });
    text(&buffer)
}

fn key(state: &mut AppState, code: KeyCode) -> Vec<Effect> {
    let modifiers = if matches!(code, KeyCode::Char(c) if c.is_ascii_uppercase()) {
        KeyModifiers::SHIFT
    } else {
        KeyModifiers::NONE
    };
    update(state, Msg::Key(KeyEvent::new(code, modifiers)))
}

/// The demo state after api was rolled back (#14) and pinned: the plan says so, the history
/// source read api's record history and the pin.
fn pinned_state() -> AppState {
    let mut state = demo_state();
    let mut plan = demo_plan();
    let api = plan.modules.iter_mut().find(|m| m.name == "api").unwrap();
    api.decision = Decision::Pinned;
    api.reference = Some("demo/api:7777dddd8888-amd64".into());
    api.reason = "pinned: rolled back from demo/api:7777dddd8888-amd64@dddddddddddd by host-a at 2027-01-15 07:55:00 UTC (#14)".into();
    update(
        &mut state,
        polled(SourceId::Plan, 0, SourceData::Plan(Box::new(plan))),
    );
    key(&mut state, KeyCode::Char('j'));
    assert_eq!(state.poll_params().stamps_module.as_deref(), Some("api"));
    assert_eq!(state.poll_params().history_opened, None);
    let snapshot = StateSnapshot {
        stamps: Some(("api".into(), demo_stamps())),
        pins: BTreeMap::from([("api".to_string(), demo_pin())]),
        events: Vec::new(),
        ..demo_history()
    };
    update(
        &mut state,
        polled(SourceId::State, 0, SourceData::State(Box::new(snapshot))),
    );
    state.now_ms = NOW;
    state
}

#[test]
fn the_module_detail_shows_the_record_history_and_the_pin() {
    let mut state = pinned_state();
    let table = screen(&state, 120, 40);
    insta::assert_snapshot!("pinned_screen_120x40", table);
    // Enter asks the record source (the module's history, where the target keeps it apart) and
    // the history source now: the record history shows without waiting for their polls.
    assert_eq!(
        key(&mut state, KeyCode::Enter),
        vec![Effect::PollNow(vec![SourceId::Record, SourceId::State])]
    );
    assert_eq!(state.detail, Some(Detail::Module("api".into())));
    // Only the open module's history is read from the target; none while no detail is open.
    assert_eq!(state.poll_params().history_opened.as_deref(), Some("api"));
    // Open at the top: the history sits above the end (a failure's log stays last).
    key(&mut state, KeyCode::Char('g'));
    let full = screen(&state, 120, 40);
    assert!(full.contains("record history (3, newest first):"), "{full}");
    assert!(
        full.contains("#14 rollback by host-a · 7777dddd8888-amd64@dddddddddddd → 1111aaaa2222-amd64@aaaaaaaaaaaa"),
        "{full}"
    );
    assert!(
        full.contains("#9 converge by host-a · (nothing) →"),
        "{full}"
    );
    let rollback = full.find("#14 rollback").unwrap();
    assert!(
        rollback < full.find("#13 converge").unwrap(),
        "newest first:\n{full}"
    );
    insta::assert_snapshot!("pinned_detail_120x40", full);
    insta::assert_snapshot!("pinned_detail_80x24", screen(&state, 80, 24));
}

#[test]
fn a_pinned_decision_wears_a_colour_no_other_decision_does() {
    let state = pinned_state();
    let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
    terminal.draw(|frame| widgets::draw(frame, &state)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    let row_of = |word: &str| {
        let text = text(&buffer);
        let y = text.lines().position(|l| l.contains(word)).unwrap();
        let line = text.lines().nth(y).unwrap();
        // The column in cells (one per char on these rows), not bytes.
        let x = line[..line.find(word).unwrap()].chars().count();
        (x as u16, y as u16)
    };
    let (x, y) = row_of("⚑ pinned");
    let pinned = buffer[(x + 2, y)].fg;
    assert_eq!(pinned, Color::LightBlue);
    for word in ["skip·record", "deliver·host"] {
        let (x, y) = row_of(word);
        assert_ne!(buffer[(x, y)].fg, pinned, "{word}");
    }
    // The pin without the plan's word: the compact detail says it from the history.
    let mut early = demo_state();
    key(&mut early, KeyCode::Char('j'));
    update(
        &mut early,
        polled(
            SourceId::State,
            0,
            SourceData::State(Box::new(StateSnapshot {
                pins: BTreeMap::from([("api".to_string(), demo_pin())]),
                events: Vec::new(),
                ..demo_history()
            })),
        ),
    );
    let out = screen(&early, 120, 40);
    assert!(
        out.contains("pinned: rolled back from demo/api:7777dddd8888-amd64@dddddd…"),
        "{out}"
    );
    let api = early.selected_module().unwrap().clone();
    let full: Vec<String> =
        widgets::detail::module_lines(&early, &api, true, Palette { no_color: true })
            .into_iter()
            .map(|(line, _)| line)
            .collect();
    assert!(
        full.contains(&"pinned: rolled back from demo/api:7777dddd8888-amd64@dddddddddddd by host-a at 2027-01-15 07:55:00 UTC (#14)".to_string()),
        "{full:#?}"
    );
}

#[test]
fn the_help_uses_the_terminals_width_and_wraps_never_cutting_a_line() {
    // Issue 23: an 80-column box in any terminal, its legend cut with `…`.
    let mut state = demo_state();
    key(&mut state, KeyCode::Char('?'));
    let help: Vec<String> = widgets::help::help_lines(&state)
        .into_iter()
        .map(|(l, _)| l)
        .collect();
    let words = |text: &str| -> Vec<String> {
        text.replace('│', " ")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    let wanted = words(&help.join("\n"));
    for width in [60, 100, 200] {
        let drawn = words(&screen(&state, width, 300));
        // Every word of the help, in order, on screen: nothing cut.
        let mut at = 0;
        for word in &wanted {
            match drawn[at..].iter().position(|w| w == word) {
                Some(found) => at += found + 1,
                None => panic!("{width}: `{word}` is not on screen"),
            }
        }
    }
    // A wide terminal shows a long legend line on one row.
    let long = help
        .iter()
        .find(|l| l.chars().count() > 90)
        .expect("a legend line over 90 columns");
    assert!(screen(&state, 200, 300).contains(long.as_str()), "{long}");
}

#[test]
fn one_build_has_one_age_in_last_build_and_in_the_builds_pane() {
    // Issue 23: LAST BUILD said `✓ 26s`, the builds pane `33s`, for the same build (one counted
    // from its end, the other from its start).
    let mut state = demo_state();
    let mut made = build(
        "b-base-2",
        "base",
        meshtop::mesh::builds::BuildStatus::Succeeded,
        NOW - 33_000,
        "host-a",
    );
    made.ended_ms = Some(NOW - 26_000);
    let mut snapshot = demo_history();
    snapshot.events = Vec::new();
    snapshot.last_builds.insert("base".into(), made.clone());
    snapshot.page = vec![made];
    update(
        &mut state,
        polled(SourceId::State, 0, SourceData::State(Box::new(snapshot))),
    );
    let cell = widgets::modules::last_build_cell(&state, "base", Palette { no_color: true }).0;
    assert_eq!(cell, "✓ 26s host-a");
    let out = screen(&state, 120, 40);
    assert!(out.contains(" 26s ✓ ok"), "{out}");
    assert!(!out.contains("33s"), "{out}");
}

#[test]
fn the_help_legend_names_pinned() {
    let mut state = demo_state();
    key(&mut state, KeyCode::Char('?'));
    let lines: Vec<String> = widgets::help::help_lines(&state)
        .into_iter()
        .map(|(l, _)| l)
        .collect();
    let text = lines.join("\n");
    assert!(text.contains("⚑ pinned     rolled back by hand"), "{text}");
    assert!(text.contains("gc view: what a sweep would take"), "{text}");
    assert!(text.contains("stats view:"), "{text}");
}

#[test]
fn the_help_legend_follows_the_key_table() {
    // Issue 37: the legend said `f`, `w` and `l` whatever keys.toml bound them to.
    let legend = |state: &AppState| -> String {
        let lines = widgets::help::help_lines(state);
        let from = lines.iter().position(|(l, _)| l == "legend").unwrap();
        lines[from..]
            .iter()
            .map(|(l, _)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let defaults = legend(&demo_state());
    assert!(defaults.contains("forced: --force / f\n"), "{defaults}");
    assert!(defaults.contains("`w` wraps"), "{defaults}");
    assert!(defaults.contains("`l`: newest at the bottom"), "{defaults}");
    let mut state = demo_state();
    let (keys, warnings) = meshtop::app::keys::KeyTable::with_overrides(
        false,
        "[normal]\nforce_rebuild = \"F\"\nlogs = \"L\"\n[detail]\nwrap = \"W\"\n",
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    state.keys = keys;
    let rebound = legend(&state);
    assert!(rebound.contains("forced: --force / F\n"), "{rebound}");
    assert!(rebound.contains("`W` wraps"), "{rebound}");
    assert!(rebound.contains("`L`: newest at the bottom"), "{rebound}");
    // Read-only has no force key: the legend names the flag alone.
    let mut readonly = demo_state();
    readonly.keys = meshtop::app::keys::KeyTable::new(true);
    let readonly = legend(&readonly);
    assert!(readonly.contains("forced: --force\n"), "{readonly}");
}

#[test]
fn rollback_is_hinted_where_it_applies() {
    let mut state = pinned_state();
    // api: the record names 1111aaaa (stamped by #14 from 7777dddd): something to go back to.
    assert!(
        footer(&state, 120).contains("R:rollback"),
        "{}",
        footer(&state, 120)
    );
    insta::assert_snapshot!("footer_rollback_120", footer(&state, 120));
    insta::assert_snapshot!("footer_rollback_80", footer(&state, 80));
    // Only the first stamp (from nothing): nothing to go back to.
    let snapshot = StateSnapshot {
        stamps: Some(("api".into(), demo_stamps().split_off(2))),
        events: Vec::new(),
        ..demo_history()
    };
    let mut first = demo_state();
    key(&mut first, KeyCode::Char('j'));
    update(
        &mut first,
        polled(SourceId::State, 0, SourceData::State(Box::new(snapshot))),
    );
    let hints = footer(&first, 120);
    assert!(!hints.contains("rollback"), "{hints}");
    // A module the record holds nothing for: no hint either.
    state.record = Some(Default::default());
    assert!(!footer(&state, 120).contains("rollback"));
}

#[test]
fn the_footer_keeps_the_navigation_keys_and_says_when_more_exist() {
    // Issue 23: once `R:rollback` showed, `tab:pane` and `x:gc` dropped out and nothing said so.
    let state = pinned_state();
    for width in [60, 80, 120] {
        let hints = footer(&state, width);
        for kept in ["?:more", "tab:pane", "enter:detail", "q:quit"] {
            assert!(hints.contains(kept), "{width}: {kept} in {hints}");
        }
        assert!(!hints.contains("?:help"), "{width}: {hints}");
    }
    // Room for every key: help is help, and every hinted key shows.
    let wide = footer(&state, 250);
    assert!(wide.contains("?:help"), "{wide}");
    for hint in [
        "tab:pane",
        "R:rollback",
        "x:gc",
        "S:stats",
        "a:auto",
        "esc:close",
    ] {
        assert!(wide.contains(hint), "{hint} in {wide}");
    }
}

fn gc_loaded(state: &mut AppState, result: Result<ViewData, SourceError>) {
    let effects = key(state, KeyCode::Char('x'));
    let request = ViewRequest::Gc {
        keep_newest: GC_KEEP_NEWEST,
        grace_ms: GC_GRACE_MS,
        target: Some("default".into()),
    };
    assert_eq!(effects, vec![Effect::FetchView(request.clone())]);
    assert_eq!(state.detail, Some(Detail::Gc));
    assert!(screen(state, 80, 24).contains("reading every root"));
    update(
        state,
        Msg::ViewLoaded {
            request,
            at_ms: NOW,
            result,
        },
    );
}

#[test]
fn the_gc_view_lists_candidates_and_sweeps_after_a_confirm() {
    let mut state = demo_state();
    gc_loaded(&mut state, Ok(ViewData::Gc(Box::new(demo_gc_report()))));
    let out = screen(&state, 120, 40);
    assert!(out.contains("a sweep would take 2 (12.3 MB):"), "{out}");
    assert!(
        out.contains("image    sha256:eeeeeeeeeeee [api] 12.3 MB"),
        "{out}"
    );
    assert!(
        out.contains("keep set: 5 artifact(s), 48.2 MB on the host — newest 2, record 3"),
        "{out}"
    );
    insta::assert_snapshot!("gc_120x40", out);
    insta::assert_snapshot!("gc_80x24", screen(&state, 80, 24));
    // `x` in the view asks; Cancel is the default.
    assert!(key(&mut state, KeyCode::Char('x')).is_empty());
    assert_eq!(state.mode, Mode::Confirm);
    insta::assert_snapshot!("gc_confirm_80x24", screen(&state, 80, 24));
    key(&mut state, KeyCode::Tab);
    let effects = key(&mut state, KeyCode::Enter);
    assert_eq!(
        effects,
        vec![Effect::Start(ActionRequest::Gc {
            keep_newest: 3,
            grace_ms: 3_600_000,
            confirmed: demo_gc_report().candidates,
        })]
    );
    update(
        &mut state,
        Msg::ActionDone {
            at_ms: NOW,
            label: "gc".into(),
            result: Ok("took 2 of 2 confirmed, 12345678 bytes freed".into()),
        },
    );
    let notice = &state.notice.as_ref().unwrap().text;
    assert_eq!(notice, "gc: took 2 of 2 confirmed, 12345678 bytes freed");
}

#[test]
fn a_root_that_cannot_be_read_offers_nothing_to_sweep() {
    let mut state = demo_state();
    gc_loaded(
        &mut state,
        Err(source_failed(
            "the host daemon's containers cannot be read (connection refused)",
        )),
    );
    let out = screen(&state, 80, 24);
    assert!(
        out.contains("gc takes nothing: the host daemon's containers cannot be read"),
        "{out}"
    );
    insta::assert_snapshot!("gc_unreadable_80x24", out);
    assert!(key(&mut state, KeyCode::Char('x')).is_empty());
    assert_eq!(state.mode, Mode::Detail, "no confirm is offered");
    assert!(state.confirm.is_none());
    let notice = state.notice.as_ref().unwrap();
    assert!(
        notice.error && notice.text.starts_with("gc takes nothing"),
        "{notice:?}"
    );
}

#[test]
fn readonly_lists_but_answers_read_only_to_the_sweep() {
    let mut state = demo_state_on(Target::Docker, true);
    gc_loaded(&mut state, Ok(ViewData::Gc(Box::new(demo_gc_report()))));
    let out = screen(&state, 120, 40);
    assert!(
        out.contains("read-only: sweeping is off (--readonly)"),
        "{out}"
    );
    assert!(key(&mut state, KeyCode::Char('x')).is_empty());
    assert!(state.confirm.is_none());
    let notice = state.notice.as_ref().unwrap();
    assert!(notice.text.starts_with("read-only"), "{notice:?}");
}

#[test]
fn the_stats_view_shows_what_the_skips_saved() {
    let mut state = demo_state();
    let effects = key(&mut state, KeyCode::Char('S'));
    let request = ViewRequest::Stats { since_ms: None };
    assert_eq!(effects, vec![Effect::FetchView(request.clone())]);
    update(
        &mut state,
        Msg::ViewLoaded {
            request,
            at_ms: NOW,
            result: Ok(ViewData::Stats(Box::new(demo_stats()))),
        },
    );
    let out = screen(&state, 120, 40);
    assert!(
        out.contains("12 converge(s): the skips did not spend about 509.5s of build time"),
        "{out}"
    );
    assert!(out.contains("api"), "{out}");
    insta::assert_snapshot!("stats_120x40", out);
    insta::assert_snapshot!("stats_80x24", screen(&state, 80, 24));
}

/// `R` confirms with the artifact it goes back to and every machine that moves, each with the
/// build that made what it runs (as the send confirm does); Cancel is selected.
#[test]
fn the_rollback_confirm_names_the_target_and_the_machines_that_move() {
    let mut state = pinned_state();
    assert!(key(&mut state, KeyCode::Char('R')).is_empty());
    assert_eq!(state.mode, Mode::Confirm);
    let confirm = state.confirm.clone().unwrap();
    assert!(!confirm.go);
    let text = confirm.lines.join("\n");
    // api's record names 1111aaaa (stamped by the rollback #14 from 7777dddd): back to 7777dddd.
    assert!(
        text.contains("roll api back from demo/api:1111aaaa2222-amd64@"),
        "{text}"
    );
    assert!(
        text.contains("  to demo/api:7777dddd8888-amd64@sha256:dddddddddddd"),
        "{text}"
    );
    let machines = state.machines_of("api").to_vec();
    assert!(!machines.is_empty());
    for machine in &machines {
        assert!(
            confirm
                .lines
                .iter()
                .any(|l| l.starts_with(&format!("  {}  ", machine.name))
                    && l.ends_with("→ @sha256:dddddddddddd…")),
            "{} moves: {text}",
            machine.name
        );
    }
    // What a send does on the target, in its words (the Docker host here).
    assert!(
        text.contains("each container is recreated with the same configuration"),
        "{text}"
    );
    assert!(text.contains("and pin it"), "{text}");
}

/// Issue 19: while a teammate's operation holds the mesh (the namespace's Lease), the line under
/// the header names it: which operation, on which host and process, since when; it goes away
/// when the Lease is free again.
#[test]
fn a_teammates_operation_holding_the_mesh_is_named_under_the_header() {
    use meshtop::mesh::live::HeldBy;
    let mut state = demo_state_on(
        Target::Kubernetes {
            namespace: "demo".into(),
            context: None,
        },
        false,
    );
    assert!(!screen(&state, 120, 40).contains("mesh held by"));
    let held = HeldBy {
        operation_id: "0190-bob".into(),
        operation: "send #12".into(),
        host: "bob-laptop".into(),
        pid: 4242,
        since_ms: NOW - 90_000,
    };
    update(
        &mut state,
        polled(
            SourceId::Record,
            0,
            SourceData::Record(demo_record(), Some(held.clone())),
        ),
    );
    let shown = screen(&state, 120, 40);
    let since = meshtop::timefmt::local_time(held.since_ms);
    assert!(
        shown.contains(&format!(
            "mesh held by send #12 on bob-laptop (process 4242) since {since}"
        )),
        "{shown}"
    );
    update(
        &mut state,
        polled(SourceId::Record, 0, SourceData::Record(demo_record(), None)),
    );
    assert!(!screen(&state, 120, 40).contains("mesh held by"));
}
