//! The dashboard's logs view (`l`, issue 30) from a fixed state through `update`: what it asks the
//! sources for, following and scrolling, search, wrap, the previous container, closing (the streams
//! stop), a stream's batches dropped once it is not the view's, `--readonly` keeping it, and
//! snapshots of the view.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::dashboard::*;
use meshtop::app::keys::Mode;
use meshtop::app::msg::{Effect, LogRequest, Msg, SourceError};
use meshtop::app::state::{AppState, Pane};
use meshtop::app::update::update;
use meshtop::mesh::logs::{LogAsk, LogItem, Stream};
use meshtop::mesh::model::Target;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

fn key(state: &mut AppState, code: KeyCode) -> Vec<Effect> {
    let modifiers = if matches!(code, KeyCode::Char(c) if c.is_ascii_uppercase()) {
        KeyModifiers::SHIFT
    } else {
        KeyModifiers::NONE
    };
    update(state, Msg::Key(KeyEvent::new(code, modifiers)))
}

fn typed(state: &mut AppState, text: &str) {
    for c in text.chars() {
        key(state, KeyCode::Char(c));
    }
}

fn line(text: &str) -> LogItem {
    LogItem::line(Stream::Stdout, None, text)
}

/// `l` on base in the modules pane: the request it makes.
fn opened(readonly: bool) -> (AppState, LogRequest) {
    let mut state = demo_state_on(Target::Docker, readonly);
    let effects = key(&mut state, KeyCode::Char('l'));
    let [Effect::FollowLogs(request)] = effects.as_slice() else {
        panic!("l asks for the streams: {effects:?}");
    };
    (state, request.clone())
}

fn feed(state: &mut AppState, stream: u64, items: Vec<(&str, LogItem)>) {
    let items = items.into_iter().map(|(m, i)| (m.to_string(), i)).collect();
    update(state, Msg::LogLines { stream, items });
}

/// Each machine says `count` numbered lines, interleaved.
fn chatter(state: &mut AppState, stream: u64, count: usize) {
    let mut items = Vec::new();
    for n in 1..=count {
        items.push(("base-1", line(&format!("base-1 says {n}"))));
        items.push(("base-2", line(&format!("base-2 says {n}"))));
    }
    feed(state, stream, items);
}

#[test]
fn l_on_a_module_follows_its_machines_and_esc_stops_the_streams() {
    let (mut state, request) = opened(false);
    assert_eq!(state.mode, Mode::Logs);
    let names: Vec<&str> = request.machines.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["base-1", "base-2"]);
    assert_eq!(
        request.ask,
        LogAsk {
            follow: true,
            previous: false,
            tail: Some(1_000),
            since_seconds: None
        }
    );
    chatter(&mut state, request.stream, 3);
    let view = state.logs.as_ref().unwrap();
    assert!(view.following());
    assert_eq!(view.book.len(), 6);
    // Esc closes the view and stops its streams; a late batch of them changes nothing.
    assert_eq!(key(&mut state, KeyCode::Esc), vec![Effect::StopLogs]);
    assert_eq!(state.mode, Mode::Normal);
    assert!(state.logs.is_none());
    chatter(&mut state, request.stream, 1);
    assert!(state.logs.is_none());
}

#[test]
fn l_on_a_machine_reads_that_machine_and_a_module_without_machines_says_so() {
    let mut state = demo_state();
    state.focus = Pane::Machines;
    key(&mut state, KeyCode::Down);
    let effects = key(&mut state, KeyCode::Char('l'));
    let [Effect::FollowLogs(request)] = effects.as_slice() else {
        panic!("{effects:?}");
    };
    let names: Vec<&str> = request.machines.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["base-2"]);
    assert_eq!(state.logs.as_ref().unwrap().title, "machine base-2 of base");
    key(&mut state, KeyCode::Esc);

    // Before the machines answered, base has none: nothing is streamed, and the notice says why.
    let mut state = empty_state(&demo_mesh(Target::Docker), false);
    assert!(key(&mut state, KeyCode::Char('l')).is_empty());
    assert_eq!(state.mode, Mode::Normal);
    let notice = state.notice.as_ref().unwrap();
    assert!(
        notice.text.contains("module base has no machines"),
        "{notice:?}"
    );
}

#[test]
fn scrolling_up_stops_following_and_g_follows_again() {
    let (mut state, request) = opened(false);
    chatter(&mut state, request.stream, 10);
    key(&mut state, KeyCode::Up);
    key(&mut state, KeyCode::Up);
    assert_eq!(state.logs.as_ref().unwrap().scroll, 2);
    // New lines come: the view stays on the lines it shows.
    chatter(&mut state, request.stream, 2);
    let view = state.logs.as_ref().unwrap();
    assert!(!view.following());
    assert_eq!(view.scroll, 6);
    key(&mut state, KeyCode::Char('G'));
    assert!(state.logs.as_ref().unwrap().following());
    key(&mut state, KeyCode::PageUp);
    key(&mut state, KeyCode::End);
    assert!(state.logs.as_ref().unwrap().following());
}

#[test]
fn search_goes_to_the_newest_match_and_n_to_older_ones() {
    let (mut state, request) = opened(false);
    chatter(&mut state, request.stream, 5);
    key(&mut state, KeyCode::Char('/'));
    assert_eq!(state.mode, Mode::LogSearch);
    // Letters are the query here, not keys (`n`, `q`, `G`).
    typed(&mut state, "Says 3");
    assert_eq!(state.mode, Mode::LogSearch);
    key(&mut state, KeyCode::Enter);
    assert_eq!(state.mode, Mode::Logs);
    let view = state.logs.as_ref().unwrap();
    let shown = view.book.shown();
    let at = view.at_match.unwrap();
    assert_eq!(view.book.text(&shown[at], false), "base-2 | base-2 says 3");
    assert_eq!(view.scroll, shown.len() - 1 - at);
    key(&mut state, KeyCode::Char('n'));
    let view = state.logs.as_ref().unwrap();
    let at = view.at_match.unwrap();
    assert_eq!(
        view.book.text(&shown_of(&state)[at], false),
        "base-1 | base-1 says 3"
    );
    // n again wraps round to the newest; N goes back.
    key(&mut state, KeyCode::Char('n'));
    key(&mut state, KeyCode::Char('N'));
    let view = state.logs.as_ref().unwrap();
    assert_eq!(
        view.book
            .text(&shown_of(&state)[view.at_match.unwrap()], false),
        "base-1 | base-1 says 3"
    );
    // Esc while typing clears the search, Esc in the view closes it.
    key(&mut state, KeyCode::Char('/'));
    typed(&mut state, "x");
    key(&mut state, KeyCode::Esc);
    assert_eq!(state.mode, Mode::Logs);
    assert!(state.logs.as_ref().unwrap().query.is_empty());
}

fn shown_of(state: &AppState) -> Vec<meshtop::mesh::logs::Shown<'_>> {
    state.logs.as_ref().unwrap().book.shown()
}

#[test]
fn p_reads_the_previous_container_on_a_stream_of_its_own() {
    let (mut state, request) = opened(false);
    chatter(&mut state, request.stream, 2);
    let effects = key(&mut state, KeyCode::Char('p'));
    let [Effect::FollowLogs(previous)] = effects.as_slice() else {
        panic!("{effects:?}");
    };
    assert!(
        previous.ask.previous && !previous.ask.follow,
        "{previous:?}"
    );
    assert_ne!(previous.stream, request.stream);
    let view = state.logs.as_ref().unwrap();
    assert!(view.previous && view.book.is_empty());
    // A late batch of the current container's stream is not the previous one's.
    chatter(&mut state, request.stream, 1);
    assert!(state.logs.as_ref().unwrap().book.is_empty());
    chatter(&mut state, previous.stream, 1);
    assert_eq!(state.logs.as_ref().unwrap().book.len(), 2);
    let back = key(&mut state, KeyCode::Char('p'));
    assert!(matches!(back.as_slice(), [Effect::FollowLogs(r)] if r.ask.follow && !r.ask.previous));
}

#[test]
fn readonly_may_read_logs() {
    let (state, request) = opened(true);
    assert_eq!(state.mode, Mode::Logs);
    assert_eq!(request.machines.len(), 2);
}

#[test]
fn the_hints_point_at_logs() {
    let mut state = demo_state();
    update(
        &mut state,
        Msg::ActionDone {
            at_ms: NOW,
            label: "send worker".into(),
            result: Err(SourceError::Unfinished("worker-1 did not start".into())),
        },
    );
    let notice = state.notice.as_ref().unwrap();
    assert!(
        notice.text.contains("(l logs: what its machines say)"),
        "{notice:?}"
    );
    // The help lists the view's keys.
    let help = meshtop::widgets::help::help_lines(&state);
    let text: Vec<&str> = help.iter().map(|(l, _)| l.as_str()).collect();
    assert!(text.iter().any(|l| l.starts_with("logs mode")), "{text:?}");
    assert!(
        text.iter()
            .any(|l| l.contains("p ") && l.contains("previous container")),
        "{text:?}"
    );
}

#[test]
fn snapshots_of_the_view() {
    let (mut state, request) = opened(false);
    let mut items = vec![
        (
            "base-1",
            LogItem::RunStarted {
                at: "2026-12-02T05:00:00Z".into(),
                restarts: 1,
            },
        ),
        ("base-1", line("listening on :8080")),
        ("base-2", line("\x1b[31mlistening\x1b[0m on :8080")),
        (
            "base-2",
            LogItem::line(Stream::Stderr, None, "warning: cache cold"),
        ),
        (
            "base-1",
            line(&format!("a long line {}", "that goes on and on ".repeat(8))),
        ),
    ];
    items.push((
        "base-2",
        LogItem::Exited {
            code: 3,
            at: Some("2026-12-02T05:01:00Z".into()),
            reason: None,
        },
    ));
    items.push((
        "base-2",
        LogItem::Replaced {
            now: "container 0123456789ab (demo/base:tag)".into(),
        },
    ));
    items.push(("base-2", line("listening again")));
    feed(&mut state, request.stream, items);
    insta::assert_snapshot!("logs_following_100x20", screen(&state, 100, 20));
    key(&mut state, KeyCode::Char('w'));
    key(&mut state, KeyCode::Up);
    key(&mut state, KeyCode::Up);
    insta::assert_snapshot!("logs_cut_scrolled_100x20", screen(&state, 100, 20));
    key(&mut state, KeyCode::Char('/'));
    typed(&mut state, "listen");
    insta::assert_snapshot!("logs_searching_80x16", screen(&state, 80, 16));
    for (width, height) in [(40, 10), (60, 15), (200, 50)] {
        screen(&state, width, height);
    }
}

#[test]
fn a_machine_holds_at_most_its_cap_with_a_marker() {
    let (mut state, request) = opened(false);
    let items: Vec<(&str, LogItem)> = (0..5_010)
        .map(|n| ("base-1", line(&format!("n {n}"))))
        .collect();
    feed(&mut state, request.stream, items);
    let view = state.logs.as_ref().unwrap();
    assert_eq!(view.book.dropped("base-1"), 10);
    let shown = view.book.shown();
    assert_eq!(
        view.book.text(&shown[0], false),
        "base-1 | ── 10 older line(s) dropped (at most 5000 lines, 2.0 MiB kept) ──"
    );
    assert_eq!(view.book.text(&shown[1], false), "base-1 | n 10");
}

/// A key as `keys.toml` writes it.
fn toml_key(key: &meshtop::app::keys::Key) -> String {
    let shown = key.to_string();
    match shown.as_str() {
        "↑" => "up".into(),
        "↓" => "down".into(),
        "←" => "left".into(),
        "→" => "right".into(),
        _ => shown,
    }
}

/// `assets/keys.toml` is every default binding of every mode, as a user's file would set them:
/// read back it changes nothing and warns of nothing (the logs view's keys among them).
#[test]
fn the_assets_keys_toml_is_the_default_table() {
    use meshtop::app::keys::KeyTable;
    let defaults = KeyTable::new(false);
    let mut expected = String::from(
        "# meshtop's default keys, one table per mode (copy to ~/.config/meshtop/keys.toml and change\n\
         # what you like; docs/dashboard.md). tests/dashboard_logs.rs checks this file is the default table.\n",
    );
    for mode in Mode::ALL {
        expected.push_str(&format!("\n[{}]\n", mode.name()));
        for binding in defaults.bindings(mode) {
            let keys: Vec<String> = binding
                .keys
                .iter()
                .map(|k| format!("{:?}", toml_key(k)))
                .collect();
            expected.push_str(&format!(
                "{} = [{}]\n",
                binding.action.name(),
                keys.join(", ")
            ));
        }
    }
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/keys.toml");
    let file = std::fs::read_to_string(path).unwrap_or_default();
    assert_eq!(
        file, expected,
        "assets/keys.toml is not the default table; it should read:\n{expected}"
    );
    let (table, warnings) = KeyTable::with_overrides(false, &file);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(table, defaults);
    // A user's own keys for the view are taken.
    let (table, warnings) =
        KeyTable::with_overrides(false, "[normal]\nlogs = \"L\"\n[logs]\nprevious = \"P\"\n");
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        table.keys_text(Mode::Normal, meshtop::app::keys::Action::Logs),
        "L"
    );
    assert_eq!(
        table.keys_text(Mode::Logs, meshtop::app::keys::Action::Previous),
        "P"
    );
}
