//! BUILT BY on a machine with no build row (issue 40): the machines pane and the machine's detail
//! answer from the artifact's signed provenance, read in the background (once per artifact, a few
//! at once) on the panes' loading ladder. Snapshots of a fixed state (`TestBackend`), and end to
//! end on the real registry and daemon: CI publishes with its signing key, then a clean machine
//! (a fresh state file, no build rows) opens the dashboard; a provenance signed by a key the mesh
//! does not trust, or naming another artifact, is never shown.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::dashboard::*;
use common::example::{decisions, said};
use common::local_registry::{LOCAL, require_registry};
use common::provenance::*;
use common::run_id;
use common::signing::*;
use common::tmux::{Tmux, row};
use meshtop::app::msg::{Effect, Msg, ProvenanceAsk, SourceData, SourceId};
use meshtop::app::state::AppState;
use meshtop::app::update::update;
use meshtop::mesh::model::{RecordEntry, Registry, Target};
use meshtop::mesh::provenance::ReadProvenance;
use meshtop::widgets::{self, Palette};
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::layout::Rect;

/// A key the mesh trusts (any P-256 public key: the app never verifies, the sources do).
const CI_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAERN3iToDoesa3g2Nla5Uk5hD1pOCh
H31dRHmW6BOv9k6veQn48An2KSF6SsVo2KN0tkSfWu+5ERPG2MtTwbtK4Q==
-----END PUBLIC KEY-----
";

fn key(state: &mut AppState, code: KeyCode) -> Vec<Effect> {
    update(state, Msg::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

/// The demo mesh with a registry and `trust`, after every source answered once: the history knows
/// base's artifact (`b`) only, so api's (`e`) and worker's (`c`, `d`) have no build row here.
/// The effects the history poll asked for.
fn trusting_state() -> (AppState, Vec<Effect>) {
    let mut mesh = demo_mesh(Target::Docker);
    mesh.registry = Some(Registry {
        host: "127.0.0.1:5000".into(),
        insecure: false,
    });
    mesh.signing.trust =
        vec![meshtop::mesh::cosign::read_public_key("keys/ci.pub", CI_PUB).unwrap()];
    let mut state = empty_state(&mesh, false);
    for msg in [
        polled(
            SourceId::Plan,
            4000,
            SourceData::Plan(Box::new(demo_plan())),
        ),
        polled(
            SourceId::Record,
            1000,
            SourceData::Record(demo_record(), None),
        ),
        polled(SourceId::Host, 3000, SourceData::Host(demo_host())),
        polled(
            SourceId::Machines,
            2000,
            SourceData::MachinesAgainst(demo_record(), demo_machines()),
        ),
    ] {
        assert!(update(&mut state, msg).is_empty());
    }
    let mut history = demo_history();
    history.unbuilt = vec![digest('c'), digest('d'), digest('e')];
    let effects = update(
        &mut state,
        polled(SourceId::State, 1000, SourceData::State(Box::new(history))),
    );
    state.now_ms = NOW;
    (state, effects)
}

/// What CI's provenance of worker's artifact says (as `ReadProvenance` reads meshtop's own).
fn ci_provenance() -> ReadProvenance {
    ReadProvenance {
        key: "keys/ci.pub".into(),
        subjects: vec![digest('7')],
        build_type: Some("https://meshtop.dev/provenance/build/v1".into()),
        builder_id: Some("https://ci.example/builders/linux-7".into()),
        module: Some("worker".into()),
        inputs: Some(digest('9')),
        commit: Some("0123abc4567def89012345678901234567890abc".into()),
        source: Some("git+https://example.com/demo.git".into()),
        invocation_id: Some("7c00aa11-0002-4a4a-8b8b-0123456789ab".into()),
        started_on: Some("2027-01-15T07:54:00Z".into()),
        finished_on: Some("2027-01-15T07:55:00Z".into()),
        host: Some("ci-7".into()),
    }
}

fn read(state: &mut AppState, of: char, said: Option<ReadProvenance>) {
    update(
        state,
        Msg::ProvenanceRead {
            digest: digest(of),
            at_ms: NOW,
            result: Ok(said),
        },
    );
}

fn machines_pane(state: &AppState, width: u16) -> String {
    let panes = widgets::split_body(Rect::new(0, 0, width, 40));
    let area = panes.machines;
    let area = Rect::new(0, 0, area.width, area.height);
    let mut buffer = Buffer::empty(area);
    widgets::machines::draw(&mut buffer, area, state, Palette { no_color: true });
    text(&buffer)
}

#[test]
fn built_by_and_the_detail_answer_from_the_signed_provenance() {
    let (mut state, effects) = trusting_state();
    // One read per artifact without a build row that a machine runs, with the record's entry.
    let asked: Vec<ProvenanceAsk> = effects
        .into_iter()
        .find_map(|e| match e {
            Effect::FetchProvenance(asks) => Some(asks),
            _ => None,
        })
        .expect("the history poll asks for the provenance of what has no build row");
    let digests: Vec<&str> = asked.iter().map(|a| a.digest.as_str()).collect();
    assert_eq!(digests, [digest('c'), digest('d'), digest('e')]);
    assert_eq!(
        asked[0].recorded,
        Some(RecordEntry::new(
            "demo/worker:5555bbbb6666-amd64".into(),
            digest('c')
        ))
    );
    assert_eq!(asked[0].image, "demo/worker:tag");
    // The next history poll asks for none of them again.
    let mut history = demo_history();
    history.unbuilt = vec![digest('c'), digest('d'), digest('e')];
    let again = update(
        &mut state,
        polled(SourceId::State, 0, SourceData::State(Box::new(history))),
    );
    assert!(
        !again
            .iter()
            .any(|e| matches!(e, Effect::FetchProvenance(_))),
        "{again:?}"
    );
    state.now_ms = NOW;

    // worker-2 and worker-3 run c (CI's provenance), worker-1 runs d (none a trusted key signed).
    key(&mut state, KeyCode::Char('j'));
    key(&mut state, KeyCode::Char('j'));
    assert_eq!(state.selected_module().unwrap().name, "worker");
    let reading = machines_pane(&state, 200);
    assert!(
        reading.contains("built by … (reading its provenance)"),
        "{reading}"
    );
    read(&mut state, 'c', Some(ci_provenance()));
    read(&mut state, 'd', None);
    let wide = machines_pane(&state, 200);
    assert!(
        wide.contains("built by ci-7 @0123abc 5m (provenance)"),
        "{wide}"
    );
    assert!(
        wide.lines()
            .find(|l| l.contains("worker-1"))
            .unwrap()
            .contains("built by –"),
        "{wide}"
    );
    insta::assert_snapshot!("provenance_machines_200", wide);
    insta::assert_snapshot!("provenance_screen_200x50", screen(&state, 200, 50));

    // The machine's detail in full.
    key(&mut state, KeyCode::Tab);
    key(&mut state, KeyCode::Char('j'));
    key(&mut state, KeyCode::Enter);
    let detail = screen(&state, 200, 50);
    for said in [
        "built by ci-7 @0123abc 5m (from the signed provenance)",
        "host       ci-7",
        "builder    https://ci.example/builders/linux-7",
        "commit     0123abc4567def89012345678901234567890abc (git+https://example.com/demo.git)",
        "operation  7c00aa11-0002-4a4a-8b8b-0123456789ab",
        "when       2027-01-15T07:54:00Z → 2027-01-15T07:55:00Z (5m ago)",
        "signed by  keys/ci.pub",
    ] {
        assert!(detail.contains(said), "{said}:\n{detail}");
    }
    insta::assert_snapshot!("provenance_detail_200x50", detail);
}

#[test]
fn a_failed_read_is_said_and_read_again_after_r() {
    let (mut state, _) = trusting_state();
    update(
        &mut state,
        Msg::ProvenanceRead {
            digest: digest('e'),
            at_ms: NOW,
            result: Err(source_failed("registry 127.0.0.1:5000 did not answer")),
        },
    );
    key(&mut state, KeyCode::Char('j'));
    assert_eq!(state.selected_module().unwrap().name, "api");
    let pane = machines_pane(&state, 200);
    assert!(pane.contains("built by ? (provenance not read)"), "{pane}");
    let lines = widgets::machines::detail_lines(
        &state.machines_of("api")[0],
        &state,
        Palette { no_color: true },
    );
    assert!(
        lines.iter().any(|(l, _)| l.contains(
            "its signed provenance could not be read: registry 127.0.0.1:5000 did not answer"
        )),
        "{lines:?}"
    );
    key(&mut state, KeyCode::Char('r'));
    let mut history = demo_history();
    history.unbuilt = vec![digest('e')];
    let effects = update(
        &mut state,
        polled(SourceId::State, 0, SourceData::State(Box::new(history))),
    );
    let asked: Vec<String> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::FetchProvenance(asks) => Some(asks.iter().map(|a| a.digest.clone())),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(asked, [digest('e')]);
}

#[test]
fn without_trust_nothing_is_asked() {
    let mut state = empty_state(&demo_mesh(Target::Docker), false);
    update(
        &mut state,
        polled(
            SourceId::Machines,
            0,
            SourceData::MachinesAgainst(demo_record(), demo_machines()),
        ),
    );
    let mut history = demo_history();
    history.unbuilt = vec![digest('c')];
    let effects = update(
        &mut state,
        polled(SourceId::State, 0, SourceData::State(Box::new(history))),
    );
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::FetchProvenance(_))),
        "{effects:?}"
    );
}

/// On the clean machine's dashboard (the modules pane focused; its rows: base, tools, web, api,
/// worker): select `module`, wait until its machine's row holds `row_done`, open the machine's
/// detail and wait until it holds `detail_done`; back to the modules pane. The row as it is once
/// the detail was done, and the detail.
fn machine_of(
    tmux: &Tmux,
    mesh: &str,
    module: &str,
    row_done: impl Fn(&str) -> bool,
    detail_done: impl Fn(&str) -> bool,
) -> (String, String) {
    let order = ["base", "tools", "web", "api", "worker"];
    let at = order.iter().position(|m| *m == module).unwrap();
    tmux.keys(&["g"]);
    for _ in 0..at {
        tmux.keys(&["j"]);
    }
    let machine = format!("{mesh}-{module}-1");
    let line_of = |s: &str| s.lines().find(|l| l.contains(&machine)).map(str::to_string);
    let screen = tmux.wait_for(
        &format!("{module}'s machine's BUILT BY"),
        Duration::from_secs(60),
        |s| line_of(s).is_some_and(|l| row_done(&l)),
    );
    assert!(line_of(&screen).is_some());
    tmux.keys(&["Tab", "Enter"]);
    let detail = tmux.wait_for(
        &format!("{module}'s machine's detail"),
        Duration::from_secs(60),
        |s| s.contains(&format!("of module {module}")) && detail_done(s),
    );
    // Esc alone (an escape followed at once by another key reads as alt-<key>), then on from the
    // machines pane round to the modules pane (builds, converge, modules).
    tmux.keys(&["Escape"]);
    // Closed, and the screen redrawn with the machine's row (a capture between the two lacks it).
    let screen = tmux.wait_for("the detail to close", Duration::from_secs(10), |s| {
        !s.contains(&format!("of module {module}")) && line_of(s).is_some()
    });
    tmux.keys(&["Tab", "Tab", "Tab"]);
    // The row once the read has ended (the detail said so): while it reads, `built by … (reading
    // its provenance)`.
    (line_of(&screen).unwrap(), detail)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_clean_machine_shows_built_by_from_the_signed_provenance() {
    require_registry().await;
    let signed = signed_mesh("pvdash");
    let commit = commit_all(&signed.mesh.root());
    let builder = format!("https://ci.test/builders/{}", run_id());
    ci_publishes_signed_with(&signed, &signed.ci_key, &[("MESHTOP_BUILDER_ID", &builder)]);
    let mesh = &signed.mesh;
    let published = published(mesh);
    let (web_repository, web_manifest) = &published["web"];
    let statement = &spec_attestations(web_repository, web_manifest, &signed.ci_pub)[0];
    let operation = statement["predicate"]["runDetails"]["metadata"]["invocationId"]
        .as_str()
        .unwrap()
        .to_string();

    // A clean machine: no images, a fresh state file; its converge pulls what CI published.
    mesh.clean_daemon();
    let fresh = mesh.dir.path().join("clean-machine.db");
    let clean = mesh.json_with_state(&fresh, &["converge", "--json"]);
    assert_eq!(decisions(&clean)["web"], "registry", "{clean}");
    let builds = mesh.meshtop_with_state(&fresh, &["builds", "--json"]);
    assert!(builds.status.success(), "{}", said(&builds));
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&builds.stdout).unwrap(),
        serde_json::json!([]),
        "the clean machine has no build row"
    );

    let tmux = Tmux::start_on(mesh, &fresh, &[]);
    tmux.resize(240, 50);
    tmux.wait_for("the modules table", Duration::from_secs(30), |s| {
        s.contains("modules · 5 of 5") && !row(s, "web").is_empty()
    });
    let (web, detail) = machine_of(
        &tmux,
        &mesh.name,
        "web",
        |l| l.contains("(provenance)"),
        |s| s.contains("(from the signed provenance)"),
    );
    assert!(web.contains(&format!("@{}", &commit[..7])), "{web}");
    // The machine's detail in full: host, builder id, commit, operation id, when.
    for said in [
        format!("builder    {builder}"),
        format!("commit     {commit}"),
        format!("operation  {operation}"),
        "host       ".to_string(),
        "when       ".to_string(),
        "signed by  keys/ci.pub".to_string(),
    ] {
        assert!(detail.contains(&said), "{said}:\n{detail}");
    }
    tmux.keys(&["Escape", "q"]);
    tmux.wait_for("the shell prompt", Duration::from_secs(10), |s| {
        !s.contains("modules ·")
    });
    drop(tmux);

    // web's provenance now signed by a key the mesh does not trust; api's signed by the trusted
    // key but naming another artifact (web's manifest). Neither is shown; worker's CI one still is.
    let work = mesh.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let (stranger, _) = keypair(&work.join("keys"), "stranger");
    let web_inputs = image_inputs(web_repository, web_manifest);
    spec_attest(
        &work,
        web_repository,
        web_manifest,
        &stranger,
        &[other_tools_statement(
            &format!("{LOCAL}/{web_repository}"),
            web_manifest,
            &web_inputs,
            &builder,
        )],
    );
    let (api_repository, api_manifest) = &published["api"];
    spec_attest(
        &work,
        api_repository,
        api_manifest,
        &signed.ci_key,
        &[other_tools_statement(
            &format!("{LOCAL}/{api_repository}"),
            web_manifest,
            &image_inputs(api_repository, api_manifest),
            &builder,
        )],
    );
    let tmux = Tmux::start_on(mesh, &fresh, &[]);
    tmux.resize(240, 50);
    tmux.wait_for("the modules table", Duration::from_secs(30), |s| {
        s.contains("modules · 5 of 5") && !row(s, "web").is_empty()
    });
    let (worker, _) = machine_of(
        &tmux,
        &mesh.name,
        "worker",
        |l| l.contains("(provenance)"),
        |s| s.contains("(from the signed provenance)"),
    );
    assert!(worker.contains(&format!("@{}", &commit[..7])), "{worker}");
    // Each read to its end (the detail says none was found), and nothing shown from it.
    for module in ["web", "api"] {
        let (line, detail) = machine_of(
            &tmux,
            &mesh.name,
            module,
            |l| l.contains("built by"),
            |s| s.contains("no provenance signed by a key the mesh trusts names it"),
        );
        assert!(
            line.contains("built by –") && !line.contains("provenance"),
            "{module}: {line}"
        );
        assert!(!detail.contains("(from the signed provenance)"), "{detail}");
    }
}
