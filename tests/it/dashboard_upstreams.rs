//! The dashboard and moved upstreams (issue 52): the upstreams source's answer marks each module
//! whose Dockerfile names an upstream its registry has moved past the lock (`⇡`), the detail says
//! locked and current, and `u` asks first, then moves the lock and converges the modules on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::dashboard::*;
use meshtop::app::msg::{ActionRequest, Effect, Msg, SourceData, SourceId};
use meshtop::app::state::AppState;
use meshtop::app::update::update;
use meshtop::mesh::upstream_lock::UpstreamNow;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

const IMAGE: &str = "python:3.12-slim";

fn key(state: &mut AppState, code: KeyCode) -> Vec<Effect> {
    update(state, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

/// api's and worker's Dockerfiles name IMAGE; its registry serves `now` under the tag.
fn upstreams(now: &str) -> SourceData {
    SourceData::Upstreams(vec![UpstreamNow {
        image: IMAGE.into(),
        locked: digest('1'),
        current: Some(now.into()),
        error: None,
        modules: vec!["api".into(), "worker".into()],
        machines: 2,
    }])
}

#[test]
fn a_moved_upstream_marks_its_modules_and_u_moves_the_lock_then_converges_them() {
    let mut state = demo_state();
    // Nothing heard yet: no mark, and `u` says why it does nothing.
    key(&mut state, KeyCode::Char('j'));
    assert!(key(&mut state, KeyCode::Char('u')).is_empty());
    assert!(state.confirm.is_none());
    let notice = state.notice.clone().expect("u says why it did nothing");
    assert!(
        notice.text.contains("no upstream of api has moved"),
        "{notice:?}"
    );

    update(
        &mut state,
        polled(SourceId::Upstreams, 0, upstreams(&digest('2'))),
    );
    let text = screen(&state, 160, 30);
    assert!(text.contains("api ⇡"), "{text}");
    assert!(text.contains("worker ⇡"), "{text}");
    assert!(!text.contains("base ⇡"), "{text}");
    assert!(
        text.contains("upstreams"),
        "the header names the source: {text}"
    );

    key(&mut state, KeyCode::Enter);
    let text = screen(&state, 160, 40);
    assert!(
        text.contains(&format!("upstream {IMAGE}: locked sha256:111111111111, its registry serves sha256:222222222222 now — u updates mesh.lock and converges")),
        "{text}"
    );
    key(&mut state, KeyCode::Esc);

    assert!(key(&mut state, KeyCode::Char('u')).is_empty());
    let confirm = state.confirm.clone().expect("u asks first");
    assert_eq!(
        confirm.lines[..2],
        [
            format!("move {IMAGE} in mesh.lock: sha256:111111111111… → sha256:222222222222…"),
            "then converge api, worker (their addresses move)".to_string()
        ],
        "{confirm:?}"
    );
    key(&mut state, KeyCode::Right);
    let effects = key(&mut state, KeyCode::Enter);
    assert_eq!(
        effects,
        vec![Effect::Start(ActionRequest::UpdateUpstreams {
            images: vec![IMAGE.into()],
            modules: vec!["api".into(), "worker".into()],
        })]
    );

    // The registry serves the locked digest again (or the lock moved): the mark goes.
    let mut state = demo_state();
    update(
        &mut state,
        polled(SourceId::Upstreams, 0, upstreams(&digest('1'))),
    );
    assert!(!screen(&state, 160, 30).contains('⇡'));
}

/// A module that builds on another through a named context moves with it: `f` on `lib` says so
/// (the count read the base alone before).
#[test]
fn a_force_rebuild_counts_the_modules_on_its_named_contexts() {
    use meshtop::mesh::model::{Policy, Target};
    let lib = module("lib", 0, None, Policy::Rollout);
    let mut app = module("app", 1, None, Policy::Rollout);
    app.contexts.insert("shared".into(), "lib".into());
    let mut state = empty_state(&mesh(Target::Docker, vec![lib, app]), false);
    let at_lib = state.modules.iter().position(|m| m.name == "lib").unwrap();
    for _ in 0..at_lib {
        key(&mut state, KeyCode::Char('j'));
    }
    assert_eq!(state.selected_module().unwrap().name, "lib");
    key(&mut state, KeyCode::Char('f'));
    let confirm = state.confirm.clone().expect("f asks first");
    assert!(
        confirm
            .lines
            .iter()
            .any(|l| l.contains("1 module(s) are out of date") && l.contains("app")),
        "{confirm:?}"
    );
}
