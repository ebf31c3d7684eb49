//! Snapshots of the screen and of each pane, from a fixed state, at 120×40 and 80×24; every size
//! from 40×10 to 200×60 draws without panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::dashboard::*;
use meshtop::app::keys::{KeyTable, Mode};
use meshtop::app::msg::{Msg, SourceData, SourceId};
use meshtop::app::state::{AppState, Pane};
use meshtop::app::update::update;
use meshtop::mesh::model::Target;
use meshtop::widgets::{self, Palette};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;

fn pane(width: u16, height: u16, draw: impl Fn(&mut Buffer, Rect)) -> String {
    let area = Rect::new(0, 0, width, height);
    let mut buffer = Buffer::empty(area);
    draw(&mut buffer, area);
    text(&buffer)
}

fn key(state: &mut AppState, code: KeyCode) {
    let modifiers = if matches!(code, KeyCode::Char(c) if c.is_ascii_uppercase()) {
        KeyModifiers::SHIFT
    } else {
        KeyModifiers::NONE
    };
    update(state, Msg::Key(KeyEvent::new(code, modifiers)));
}

#[test]
fn whole_screen() {
    let state = demo_state();
    insta::assert_snapshot!("screen_120x40", screen(&state, 120, 40));
    insta::assert_snapshot!("screen_80x24", screen(&state, 80, 24));
    insta::assert_snapshot!("screen_60x15", screen(&state, 60, 15));
    insta::assert_snapshot!("screen_200x50", screen(&state, 200, 50));
}

#[test]
fn kubernetes_header_and_readonly_footer() {
    let target = Target::Kubernetes {
        namespace: "demo".into(),
        context: Some("kind-dev".into()),
    };
    let state = demo_state_on(target, true);
    let palette = Palette { no_color: true };
    for (width, name) in [(120, "kube_header_120"), (80, "kube_header_80")] {
        let out = pane(width, 2, |buf, area| {
            widgets::header::draw(buf, area, &state, palette)
        });
        insta::assert_snapshot!(name, out);
    }
    let out = pane(80, 1, |buf, area| {
        widgets::footer::draw(buf, area, &state, palette)
    });
    insta::assert_snapshot!("readonly_footer_80", out);
}

#[test]
fn each_pane() {
    let mut state = demo_state();
    key(&mut state, KeyCode::Char('j')); // api: failed build, held machine, changed files
    update(
        &mut state,
        Msg::BuildsPage {
            request: meshtop::app::msg::PageRequest {
                module: Some("api".into()),
                before: None,
                limit: 100,
                placement: meshtop::app::msg::Placement::Replace,
            },
            at_ms: NOW,
            result: Ok(demo_builds()),
        },
    );
    update(
        &mut state,
        Msg::Polled {
            source: SourceId::Host,
            at_ms: NOW - 500,
            target: None,
            result: Err(source_failed("cannot reach the Docker daemon")),
        },
    );
    let palette = Palette { no_color: true };
    for (width, height) in [(120u16, 40u16), (80, 24)] {
        let tag = format!("{width}x{height}");
        let panes = widgets::split_body(Rect::new(0, 0, width, height - 4));
        let size = |r: Rect| (r.width, r.height);
        let (w, h) = size(panes.modules);
        insta::assert_snapshot!(
            format!("modules_{tag}"),
            pane(w, h, |b, a| widgets::modules::draw(b, a, &state, palette))
        );
        let (w, h) = size(panes.detail);
        insta::assert_snapshot!(
            format!("detail_{tag}"),
            pane(w, h, |b, a| widgets::detail::draw_pane(
                b, a, &state, palette
            ))
        );
        let (w, h) = size(panes.machines);
        insta::assert_snapshot!(
            format!("machines_{tag}"),
            pane(w, h, |b, a| widgets::machines::draw(b, a, &state, palette))
        );
        let (w, h) = size(panes.builds);
        insta::assert_snapshot!(
            format!("builds_{tag}"),
            pane(w, h, |b, a| widgets::builds::draw(b, a, &state, palette))
        );
        let (w, h) = size(panes.operation);
        insta::assert_snapshot!(
            format!("converge_{tag}"),
            pane(w, h, |b, a| widgets::operation::draw(b, a, &state, palette))
        );
        insta::assert_snapshot!(
            format!("header_{tag}"),
            pane(width, 2, |b, a| widgets::header::draw(
                b, a, &state, palette
            ))
        );
        insta::assert_snapshot!(
            format!("footer_{tag}"),
            pane(width, 1, |b, a| widgets::footer::draw(
                b, a, &state, palette
            ))
        );
    }
}

#[test]
fn overlays() {
    let mut state = demo_state();
    key(&mut state, KeyCode::Char('?'));
    insta::assert_snapshot!("help_120x40", screen(&state, 120, 40));
    insta::assert_snapshot!("help_80x24", screen(&state, 80, 24));
    key(&mut state, KeyCode::Esc);
    key(&mut state, KeyCode::Char('j'));
    key(&mut state, KeyCode::Char('s'));
    assert_eq!(state.mode, Mode::Confirm);
    insta::assert_snapshot!("confirm_send_120x40", screen(&state, 120, 40));
    insta::assert_snapshot!("confirm_send_80x24", screen(&state, 80, 24));
    key(&mut state, KeyCode::Esc);
    key(&mut state, KeyCode::Enter);
    insta::assert_snapshot!("detail_api_120x40", screen(&state, 120, 40));
    insta::assert_snapshot!("detail_api_80x24", screen(&state, 80, 24));
    key(&mut state, KeyCode::Esc);
    let request = state.builds.rescope(Some("api".into()));
    update(
        &mut state,
        Msg::BuildsPage {
            request,
            at_ms: NOW,
            result: Ok(demo_builds()),
        },
    );
    state.focus = Pane::Builds;
    key(&mut state, KeyCode::Enter);
    insta::assert_snapshot!("build_failed_120x40", screen(&state, 120, 40));
    insta::assert_snapshot!("build_failed_80x24", screen(&state, 80, 24));
}

#[test]
fn filter_line_and_key_warnings() {
    let mesh = demo_mesh(Target::Docker);
    let (keys, warnings) = KeyTable::with_overrides(false, "[normal]\nsend = \"b\"\n");
    let mut state = AppState::new(&mesh, described(&mesh), context(&mesh), false, keys, NOW);
    state.warnings = warnings;
    key(&mut state, KeyCode::Char('/'));
    key(&mut state, KeyCode::Char('a'));
    insta::assert_snapshot!("filter_and_warning_80x24", screen(&state, 80, 24));
}

#[test]
fn every_size_draws_without_panic() {
    let mut states = vec![demo_state(), big_state(50, 300)];
    let mut help = demo_state();
    key(&mut help, KeyCode::Char('?'));
    states.push(help);
    let mut confirm = demo_state();
    key(&mut confirm, KeyCode::Char('C'));
    states.push(confirm);
    let mut detail = demo_state();
    key(&mut detail, KeyCode::Enter);
    states.push(detail);
    for state in &states {
        for width in (1..=200).step_by(7).chain([39, 40, 41, 200]) {
            for height in (1..=60).step_by(3).chain([9, 10, 11, 60]) {
                let out = screen(state, width, height);
                if width < 40 || height < 10 {
                    assert!(
                        out.starts_with("terminal") || out.trim().is_empty() || width < 9,
                        "{width}×{height}: {out}"
                    );
                }
            }
        }
    }
    let small = screen(&demo_state(), 39, 10);
    assert!(small.contains("terminal too small"), "{small}");
}

#[test]
fn no_color_draws_without_colors() {
    let mut state = demo_state();
    let colored = |state: &AppState| {
        let mut terminal = Terminal::new(TestBackend::new(120, 40)).unwrap();
        terminal.draw(|frame| widgets::draw(frame, state)).unwrap();
        let buffer = terminal.backend().buffer().clone();
        buffer
            .content()
            .iter()
            .filter(|c| c.fg != ratatui::style::Color::Reset)
            .count()
    };
    assert!(colored(&state) > 0, "the demo state uses colors");
    state.no_color = true;
    assert_eq!(colored(&state), 0);
}

/// Issue 5: the Kubernetes target with the same panes — workloads as machines, pods' readiness as health.
#[test]
fn kubernetes_whole_screen() {
    let target = Target::Kubernetes {
        namespace: "demo".into(),
        context: Some("kind-dev".into()),
    };
    let mut state = demo_state_on(target, false);
    let workload = |name: &str, module: &str, kind: &str, running: char, health: &str, st| {
        // As the Kubernetes target lists a workload: its kind and kubectl's name for it.
        let mut m = machine(name, module, running, st);
        m.kind = kind.into();
        m.display_name = format!("{}/{name}", kind.to_lowercase());
        m.health = health.into();
        m
    };
    use meshtop::mesh::behind::MachineState;
    let workloads = vec![
        workload(
            "base",
            "base",
            "DaemonSet",
            'b',
            "3/3 ready",
            MachineState::Current,
        ),
        workload(
            "api",
            "api",
            "Deployment",
            'e',
            "2/2 ready",
            MachineState::Held,
        ),
        workload(
            "worker",
            "worker",
            "StatefulSet",
            'd',
            "1/3 ready",
            MachineState::Behind,
        ),
    ];
    update(
        &mut state,
        polled(
            SourceId::Machines,
            1000,
            SourceData::MachinesAgainst(demo_record(), workloads),
        ),
    );
    key(&mut state, KeyCode::Char('j'));
    key(&mut state, KeyCode::Char('j'));
    insta::assert_snapshot!("kubernetes_screen_120x40", screen(&state, 120, 40));
}

/// While a converge runs (from any process), the table shows each module's state in it, and the
/// line under the header its tier, what is done and how long it has run; Enter on the converge
/// pane's build line opens the module with its output so far.
#[test]
fn live_converge() {
    let mut state = demo_state();
    // The next converge (#43) starts, from any process: its holder alive.
    let mut running = running_history();
    running.page = state.builds.rows(0, state.builds.len()).cloned().collect();
    update(
        &mut state,
        polled(SourceId::State, 1000, SourceData::State(Box::new(running))),
    );
    insta::assert_snapshot!("live_screen_120x40", screen(&state, 120, 40));
    insta::assert_snapshot!("live_screen_80x24", screen(&state, 80, 24));
    // The converge pane is a list: the cursor starts on the last line (api's output).
    state.focus = Pane::Operation;
    key(&mut state, KeyCode::Up);
    key(&mut state, KeyCode::Enter);
    insta::assert_snapshot!("live_detail_api_80x24", screen(&state, 80, 24));
}

/// A converge on a pool of builders: the line under the header counts each builder's builds
/// against its cap and says which is out; the building module's line names its builder.
#[test]
fn live_converge_on_a_pool_says_its_builders() {
    use meshtop::mesh::progress::Payload;
    let mut state = demo_state();
    let mut running = running_history();
    running.page = state.builds.rows(0, state.builds.len()).cloned().collect();
    let template = running.events[0].clone();
    let builder = |name: &str, max_builds: u32, out: Option<&str>| {
        let mut row = template.clone();
        let payload = Payload::Builder {
            builder: name.into(),
            endpoint: format!("tcp://{name}:2376"),
            max_builds,
            out: out.map(str::to_string),
        };
        row.step = payload.step();
        row.module = None;
        row.text = format!("builder {name}");
        row.payload = Some(payload);
        row
    };
    let mut events = vec![running.events[0].clone()];
    events.push(builder("farm-1", 2, None));
    events.push(builder("farm-2", 1, Some("cannot reach it")));
    events.extend(running.events[1..].iter().cloned());
    let mut building = 0;
    for event in &mut events {
        if let Some(Payload::Build { builder, .. }) = &mut event.payload {
            *builder = Some("farm-1".into());
            building += 1;
        }
    }
    assert!(building > 0, "the running history builds a module");
    let first = events[0].id;
    for (i, event) in events.iter_mut().enumerate() {
        event.id = first + i64::try_from(i).unwrap();
    }
    running.events = events;
    update(
        &mut state,
        polled(SourceId::State, 1000, SourceData::State(Box::new(running))),
    );
    let text = screen(&state, 120, 40);
    assert!(
        text.contains("builders farm-1 1/2 · farm-2 0/1 out"),
        "the header's builders line:\n{text}"
    );
    assert!(
        text.contains(" on farm-1"),
        "the building line names its builder:\n{text}"
    );
}
