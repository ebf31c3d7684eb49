//! A module builds when what it builds on is delivered, not when its whole tier is (on the real
//! daemon). The example mesh: base → tools, web; tools → api, worker. Steps held until the test
//! lets them go make the order certain, not a guess at how long a build takes: api builds while
//! web (a sibling of its base) is still held, the critical path follows api's own base, and a
//! failed module stops only what builds on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common;
use common::{ExampleMesh, said};
use meshtop::mesh::progress::Payload;
use serde_json::Value;

const WITHIN: Duration = Duration::from_secs(240);

fn append(mesh: &ExampleMesh, file: &str, text: &str) {
    let path = mesh.root().join(file);
    let mut content = std::fs::read_to_string(&path).unwrap();
    content.push_str(text);
    std::fs::write(&path, content).unwrap();
}

/// `meshtop converge --json --jobs 3` in the background (its summary to `converge.json`).
fn converge(mesh: &ExampleMesh) -> Child {
    Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .args(["converge", "--json", "--jobs", "3"])
        .stdout(std::fs::File::create(mesh.dir.path().join("converge.json")).unwrap())
        .stderr(std::fs::File::create(mesh.dir.path().join("converge.log")).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

fn converge_said(mesh: &ExampleMesh) -> String {
    std::fs::read_to_string(mesh.dir.path().join("converge.log")).unwrap_or_default()
}

/// The steps the converge said so far, as (module, payload).
fn steps(mesh: &ExampleMesh) -> Vec<(Option<String>, Payload)> {
    let Ok(db) = meshtop::backends::state::StateDb::open(&mesh.state()) else {
        return Vec::new();
    };
    db.events_after(&mesh.name, 0, usize::MAX)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| Some((e.module, e.payload?)))
        .collect()
}

fn said_built(mesh: &ExampleMesh, module: &str) -> bool {
    steps(mesh)
        .iter()
        .any(|(m, p)| m.as_deref() == Some(module) && matches!(p, Payload::Built { .. }))
}

fn said_build(mesh: &ExampleMesh, module: &str) -> bool {
    steps(mesh)
        .iter()
        .any(|(m, p)| m.as_deref() == Some(module) && matches!(p, Payload::Build { .. }))
}

/// Wait until `done` holds, failing at once (with what the converge said) if it ended first.
fn wait_while_running(mesh: &ExampleMesh, child: &mut Child, what: &str, done: impl Fn() -> bool) {
    common::wait_until(what, WITHIN, || {
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the converge ended ({status}) before {what}:\n{}",
                converge_said(mesh)
            );
        }
        done()
    });
}

fn summary(mesh: &ExampleMesh, child: &mut Child, ok: bool) -> Value {
    let status = common::wait_exit(child, WITHIN, "every held step let go");
    assert_eq!(status.success(), ok, "{}", converge_said(mesh));
    let text = std::fs::read(mesh.dir.path().join("converge.json")).unwrap();
    serde_json::from_slice(&text).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&text),
            converge_said(mesh)
        )
    })
}

/// Each module's spans in the operation's timeline, as (phase, start, end).
fn spans(mesh: &ExampleMesh, operation: i64) -> BTreeMap<String, Vec<(String, i64, i64)>> {
    let traced = mesh.meshtop(&["trace", &format!("#{operation}"), "--format", "json"]);
    assert!(traced.status.success(), "{}", said(&traced));
    let traced: Value = serde_json::from_slice(&traced.stdout).unwrap();
    traced["timeline"]["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let spans = m["spans"].as_array().unwrap().iter().map(|s| {
                (
                    s["phase"].as_str().unwrap().to_string(),
                    s["start_ms"].as_i64().unwrap(),
                    s["end_ms"].as_i64().unwrap(),
                )
            });
            (m["name"].as_str().unwrap().to_string(), spans.collect())
        })
        .collect()
}

fn first(spans: &[(String, i64, i64)], phase: &str) -> (i64, i64) {
    spans
        .iter()
        .find(|s| s.0 == phase)
        .map(|s| (s.1, s.2))
        .unwrap_or_else(|| panic!("no {phase} span in {spans:?}"))
}

#[test]
fn a_module_builds_once_its_own_base_is_delivered_while_a_sibling_of_its_base_still_builds() {
    let mesh = ExampleMesh::new("graph");
    // web (tier 1, no module builds on it) is held until api was built and its own step held;
    // api (on tools) is held until web was built: api's end is the converge's last.
    let (web_step, web_held) = common::held_run("true");
    let (api_step, api_held) = common::held_run("true");
    append(&mesh, "web/Dockerfile", &web_step);
    append(&mesh, "api/Dockerfile", &api_step);
    let mut child = converge(&mesh);
    // Under a tier barrier api would wait for web: it never starts while web is held.
    wait_while_running(
        &mesh,
        &mut child,
        "api's build started while web was held",
        || said_build(&mesh, "api") && !common::processes_saying(&api_held).is_empty(),
    );
    assert!(
        !said_built(&mesh, "web"),
        "web must still be building: {}",
        converge_said(&mesh)
    );
    wait_while_running(
        &mesh,
        &mut child,
        "worker built beside the held ones",
        || said_built(&mesh, "worker"),
    );
    common::let_go(&web_held);
    wait_while_running(&mesh, &mut child, "web built once let go", || {
        said_built(&mesh, "web")
    });
    common::let_go(&api_held);
    let summary = summary(&mesh, &mut child, true);
    assert_eq!(summary["ok"], true, "{summary}");
    // api waited on its own base, tools: never on web, the slower sibling of tools.
    assert_eq!(
        summary["timeline"]["critical_path"],
        serde_json::json!(["base", "tools", "api"]),
        "{}",
        summary["timeline"]
    );
    // By start times: api began once tools was delivered, before web's build ended; the time it
    // gained over a tier barrier is web's slack, measured here, not assumed.
    let spans = spans(&mesh, summary["operation"].as_i64().unwrap());
    let tools_built = first(&spans["tools"], "build").1;
    let web_built = first(&spans["web"], "build").1;
    let api_began = spans["api"]
        .iter()
        .find(|s| s.0 != "queued" && s.0 != "waiting")
        .map(|s| s.1)
        .unwrap();
    assert!(api_began >= tools_built, "api began before tools was built");
    assert!(
        api_began < web_built,
        "api began at {api_began}, after web's build ended at {web_built}: a tier barrier"
    );
    let api_build = first(&spans["api"], "build");
    assert!(api_build.0 < web_built, "api's build waited for web");
}

#[test]
fn a_failed_module_stops_only_what_builds_on_it_and_nothing_is_stamped() {
    let mesh = ExampleMesh::new("graphfail");
    // site builds on web, a sibling of tools; tools fails (held until site built, so that the
    // siblings' dependents build while the failed one's stay unattempted).
    std::fs::create_dir_all(mesh.root().join("site")).unwrap();
    std::fs::write(
        mesh.root().join("site/Dockerfile"),
        "ARG BASE\nFROM ${BASE}\nCMD [\"true\"]\n",
    )
    .unwrap();
    append(
        &mesh,
        "mesh.toml",
        "\n[[module]]\nname = \"site\"\ncontext = \"site\"\nbase = \"web\"\npolicy = \"record\"\n",
    );
    let (tools_step, tools_held) = common::held_run("true");
    append(&mesh, "tools/Dockerfile", &tools_step);
    append(&mesh, "tools/Dockerfile", &common::fresh_run("false"));
    let mut child = converge(&mesh);
    wait_while_running(&mesh, &mut child, "site built while tools was held", || {
        said_built(&mesh, "site") && !common::processes_saying(&tools_held).is_empty()
    });
    common::let_go(&tools_held);
    let summary = summary(&mesh, &mut child, false);
    let ends: BTreeMap<String, String> = summary["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["outcome"].to_string(),
            )
        })
        .collect();
    assert!(ends["tools"].contains("failed"), "{ends:?}");
    for built in ["web", "site"] {
        assert!(ends[built].contains("built"), "{built}: {ends:?}");
    }
    for unattempted in ["api", "worker"] {
        assert!(
            ends[unattempted].contains("not reached") && ends[unattempted].contains("tools"),
            "{unattempted} is not attempted, naming tools: {ends:?}"
        );
        assert!(!said_build(&mesh, unattempted), "{unattempted} was built");
    }
    assert_eq!(summary["stamped"], false, "{summary}");
    assert!(
        summary["record"]
            .as_str()
            .unwrap()
            .starts_with("nothing stamped"),
        "{summary}"
    );
    // The record (the state database's, on the Docker target) holds nothing of this converge.
    let state = meshtop::backends::state::StateDb::open(&mesh.state()).unwrap();
    let record = state.record(&mesh.name, "default").unwrap();
    assert!(record.is_empty(), "stamped: {record:?}");
}
