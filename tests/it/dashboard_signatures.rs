//! The screen says what the registry held and why its signatures refused it (issue 29): the REG
//! column and the detail pane read the plan's typed answer (`PlannedModule::registry_held`), never
//! its reason's words. Snapshots at 120×40 and 80×24 of a mesh whose registry holds a manifest for
//! every module: one signed by the trusted key (vouches), one unsigned, one signed by another key,
//! one whose trusted signature names another digest; and a mesh without trust (unverified).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::dashboard::*;
use meshtop::app::msg::{Msg, SourceData, SourceId};
use meshtop::app::state::AppState;
use meshtop::app::update::update;
use meshtop::converge::plan::{Plan, PlannedModule};
use meshtop::mesh::cosign::SignatureVerdict;
use meshtop::mesh::decide::{Decision, RegistryHeld};
use meshtop::mesh::model::{Policy, Registry, Target};
use meshtop::widgets::modules::{RegForm, registry_cell, registry_cell_as};
use meshtop::widgets::{self, Palette};
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;

const REGISTRY: &str = "127.0.0.1:5000";

fn held(manifest: char, signature: SignatureVerdict) -> Option<RegistryHeld> {
    Some(RegistryHeld {
        registry: REGISTRY.into(),
        manifest: digest(manifest),
        signature,
    })
}

/// A module the plan decided on what the registry held: `decision` with its reason.
fn decided(
    name: &str,
    tier: u32,
    base: Option<&str>,
    decision: Decision,
    registry_held: Option<RegistryHeld>,
    reason: &str,
) -> PlannedModule {
    let reference = format!("{REGISTRY}/demo/{name}:3f9c2a1b7d4e-amd64");
    let mut module = planned(name, tier, base, Some(&reference), decision);
    module.reason = reason.into();
    module.registry_held = registry_held;
    module
}

/// base vouched (signed by keys/ci.pub); api unsigned; worker signed by another key; web's
/// trusted signature names another digest. The three refused are built.
fn signed_plan() -> Plan {
    let refused = |words: &str| {
        format!(
            "the docker record has no entry; the host holds no meshtop-labelled image with this tag; registry {REGISTRY} holds manifest eeeeeeeeeeee labelled by meshtop with these inputs, {words}; it does not vouch"
        )
    };
    Plan {
        mesh: "demo".into(),
        target: "default".into(),
        target_kind: "docker".into(),
        tiers: vec![
            vec!["base".into()],
            vec!["api".into(), "web".into(), "worker".into()],
        ],
        modules: vec![
            decided(
                "base",
                0,
                None,
                Decision::Registry,
                held(
                    'd',
                    SignatureVerdict::Trusted {
                        key: "keys/ci.pub".into(),
                    },
                ),
                "the docker record has no entry; the host holds no meshtop-labelled image with this tag; registry 127.0.0.1:5000 holds manifest sha256:dddd… labelled by meshtop with these inputs, signed by keys/ci.pub",
            ),
            decided(
                "api",
                1,
                Some("base"),
                Decision::Build,
                held('e', SignatureVerdict::Unsigned),
                &refused("✗ unsigned: no signature under its .sig tag"),
            ),
            decided(
                "web",
                1,
                Some("base"),
                Decision::Build,
                held('f', SignatureVerdict::OtherDigest { names: digest('1') }),
                &refused(
                    "✗ signature names another digest: a trusted signature names 111111111111, not this manifest",
                ),
            ),
            decided(
                "worker",
                1,
                Some("base"),
                Decision::Build,
                held('9', SignatureVerdict::UntrustedKey),
                &refused("✗ untrusted key: no signature by a key the mesh trusts"),
            ),
        ],
        host_error: None,
        registry_error: None,
        upstreams_locked: Vec::new(),
    }
}

/// The demo mesh with a registry and a fourth module, web, after the plan `plan` answered.
fn state_with(plan: Plan) -> AppState {
    let mut mesh = mesh(
        Target::Docker,
        vec![
            module("base", 0, None, Policy::Rollout),
            module("api", 1, Some("base"), Policy::Record),
            module("web", 1, Some("base"), Policy::Rollout),
            module("worker", 1, Some("base"), Policy::Rollout),
        ],
    );
    mesh.registry = Some(Registry {
        host: REGISTRY.into(),
        insecure: false,
    });
    let mut state = empty_state(&mesh, false);
    update(
        &mut state,
        polled(SourceId::Plan, 2000, SourceData::Plan(Box::new(plan))),
    );
    update(
        &mut state,
        polled(
            SourceId::Record,
            1000,
            SourceData::Record(Default::default(), None),
        ),
    );
    update(
        &mut state,
        polled(SourceId::Host, 1000, SourceData::Host(Vec::new())),
    );
    state.now_ms = NOW;
    state
}

fn select(state: &mut AppState, module: &str) {
    let key = |state: &mut AppState, c: char| {
        update(
            state,
            Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)),
        );
    };
    key(state, 'g');
    for _ in 0..state.visible.len() {
        if state.modules[state.visible[state.selected]].name == module {
            return;
        }
        key(state, 'j');
    }
    panic!("{module} is not shown");
}

fn pane(width: u16, height: u16, draw: impl Fn(&mut Buffer, Rect)) -> String {
    let area = Rect::new(0, 0, width, height);
    let mut buffer = Buffer::empty(area);
    draw(&mut buffer, area);
    text(&buffer)
}

/// Each refusal in the REG column, in full at 120 columns and short at 80; the detail of a refused
/// module says what the registry held and why; the whole screen at both sizes.
#[test]
fn the_reg_column_and_the_detail_say_each_refusal() {
    let mut state = state_with(signed_plan());
    let palette = Palette { no_color: true };
    let words = |module: &str, form: RegForm| registry_cell_as(&state, module, form, palette).0;
    assert_eq!(words("base", RegForm::Full), "✓ signed");
    assert_eq!(words("api", RegForm::Full), "✗ unsigned");
    assert_eq!(words("worker", RegForm::Full), "✗ untrusted key");
    assert_eq!(
        words("web", RegForm::Full),
        "✗ signature names another digest"
    );
    assert_eq!(words("web", RegForm::Short), "✗ digest");
    assert_eq!(words("web", RegForm::Glyph), "✗");
    assert_eq!(registry_cell(&state, "api", palette).0, "✗ unsigned");

    insta::assert_snapshot!("signatures_screen_120x40", screen(&state, 120, 40));
    insta::assert_snapshot!("signatures_screen_80x24", screen(&state, 80, 24));
    let modules = |width: u16, state: &AppState| {
        let panes = widgets::split_body(Rect::new(0, 0, width, 20));
        let area = panes.modules;
        pane(area.width, area.height, |b, a| {
            widgets::modules::draw(b, a, state, palette)
        })
    };
    let wide = modules(120, &state);
    for said in [
        "✓ signed",
        "✗ unsigned",
        "✗ untrusted key",
        "✗ signature names another digest",
    ] {
        assert!(wide.contains(said), "{said} at 120 columns:\n{wide}");
    }
    let narrow = modules(80, &state);
    for said in ["✓ signed", "✗ unsigned", "✗ untrusted", "✗ digest"] {
        assert!(narrow.contains(said), "{said} at 80 columns:\n{narrow}");
    }

    for (module, said) in [
        ("api", "✗ unsigned — no signature under its .sig tag"),
        (
            "worker",
            "✗ untrusted key — no signature by a key the mesh trusts",
        ),
        (
            "web",
            "✗ signature names another digest — a trusted signature names 111111111111, not this manifest",
        ),
        (
            "base",
            "✓ signed by keys/ci.pub — manifest dddddddddddd: it vouches",
        ),
    ] {
        select(&mut state, module);
        let lines = widgets::detail::module_lines(
            &state,
            &state.modules[state.visible[state.selected]],
            false,
            palette,
        );
        let registry = lines
            .iter()
            .map(|(l, _)| l.as_str())
            .find(|l| l.starts_with("registry: "))
            .unwrap_or_else(|| panic!("no registry line for {module}: {lines:?}"));
        assert!(registry.contains(said), "{module}: {registry}");
        // Right under the decision: the first lines are what the pane shows at 80×24.
        assert!(
            lines
                .iter()
                .position(|(l, _)| l.starts_with("registry: "))
                .is_some_and(|at| at <= 2),
            "{lines:?}"
        );
    }
    select(&mut state, "api");
    insta::assert_snapshot!("signatures_detail_api_120x40", screen(&state, 120, 40));
    insta::assert_snapshot!("signatures_detail_api_80x24", screen(&state, 80, 24));
}

/// Without trust the registry vouches unverified, and the screen says so.
#[test]
fn without_trust_the_screen_says_unverified() {
    let mut plan = signed_plan();
    for module in &mut plan.modules {
        module.decision = Decision::Registry;
        if let Some(held) = &mut module.registry_held {
            held.signature = SignatureVerdict::Unverified;
        }
        module.reason = format!(
            "the docker record has no entry; registry {REGISTRY} holds manifest sha256:… labelled by meshtop with these inputs, unverified (the mesh trusts no key)"
        );
    }
    let state = state_with(plan);
    let palette = Palette { no_color: true };
    assert_eq!(registry_cell(&state, "api", palette).0, "✓ unverified");
    assert_eq!(
        registry_cell_as(&state, "api", RegForm::Short, palette).0,
        "✓ unverif."
    );
    let lines = widgets::detail::module_lines(&state, &state.modules[0], false, palette);
    assert!(
        lines
            .iter()
            .any(|(l, _)| l.starts_with("registry: unverified — ")
                && l.contains("the mesh trusts no key")),
        "{lines:?}"
    );
    insta::assert_snapshot!("unverified_screen_120x40", screen(&state, 120, 40));
    insta::assert_snapshot!("unverified_screen_80x24", screen(&state, 80, 24));
}
