//! An operation's timeline, end to end on the real daemon: a converge of the example mesh with a
//! slow step on a known chain (base → tools → api, each slow module measurably longer than its
//! tier's other) leaves a timeline whose phases nest and whose critical path is that chain; the
//! Chrome trace `meshtop trace` writes reads back as the format says, module by module; `--compare`
//! names the module made slower on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;

use common::{ExampleMesh, fresh_run, said};
use serde_json::Value;

/// The slow step: measurably longer than any other module's whole build here.
const SLOW: &str = "busybox sleep 3";

fn append(mesh: &ExampleMesh, file: &str, text: &str) {
    let path = mesh.root().join(file);
    let mut content = std::fs::read_to_string(&path).unwrap();
    content.push_str(text);
    std::fs::write(&path, content).unwrap();
}

fn stdout_json(output: &std::process::Output) -> Value {
    assert!(output.status.success(), "{}", said(output));
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", said(output)))
}

/// `meshtop converge --json`, letting each held step go once the module beside it was built (and
/// the step reached its hold); answers the summary.
fn converge_letting_go(mesh: &ExampleMesh, holds: &[(&str, &str)]) -> Value {
    let (out, err) = (
        mesh.dir.path().join("converge.json"),
        mesh.dir.path().join("converge.log"),
    );
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .args(["converge", "--json"])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let said_so_far = || std::fs::read_to_string(&err).unwrap_or_default();
    for (held, other) in holds {
        common::wait_until(
            &format!("{other} built while the slow step {held} was held"),
            std::time::Duration::from_secs(240),
            || {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("the converge ended ({status}) first:\n{}", said_so_far());
                }
                built(mesh, other) && !common::processes_saying(held).is_empty()
            },
        );
        common::let_go(held);
    }
    let status = common::wait_exit(
        &mut child,
        std::time::Duration::from_secs(240),
        "the held steps let go",
    );
    assert!(status.success(), "{}", said_so_far());
    let text = std::fs::read(&out).unwrap();
    serde_json::from_slice(&text).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&text),
            said_so_far()
        )
    })
}

/// Whether the converge said `module` was built.
fn built(mesh: &ExampleMesh, module: &str) -> bool {
    meshtop::backends::state::StateDb::open(&mesh.state())
        .unwrap()
        .events_after(&mesh.name, 0, usize::MAX)
        .unwrap()
        .iter()
        .any(|e| {
            e.module.as_deref() == Some(module)
                && matches!(
                    e.payload,
                    Some(meshtop::mesh::progress::Payload::Built { .. })
                )
        })
}

/// A span as (phase, start, end).
type SpanSeen = (String, i64, i64);
/// A complete event on its thread as (start, end, name).
type EventSeen = (i64, i64, String);

/// Each module's spans, and its tier.
fn modules(timeline: &Value) -> BTreeMap<String, (u64, Vec<SpanSeen>)> {
    timeline["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let spans = m["spans"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let end = s["end_ms"]
                        .as_i64()
                        .unwrap_or_else(|| panic!("{} has a span still open: {s}", m["name"]));
                    (
                        s["phase"].as_str().unwrap().to_string(),
                        s["start_ms"].as_i64().unwrap(),
                        end,
                    )
                })
                .collect();
            (
                m["name"].as_str().unwrap().to_string(),
                (m["tier"].as_u64().unwrap(), spans),
            )
        })
        .collect()
}

/// Every span lies within the operation and ends after it starts; a step lies within a build of
/// its module; the other phases of a module follow one another.
fn assert_phases_nest(timeline: &Value) {
    let (start, end) = (
        timeline["started_ms"].as_i64().unwrap(),
        timeline["ended_ms"].as_i64().expect("the converge ended"),
    );
    for (name, (_, spans)) in modules(timeline) {
        let mut previous_end = start;
        for (phase, a, b) in &spans {
            assert!(
                start <= *a && a <= b && *b <= end,
                "{name} {phase} {a}..{b}"
            );
            if phase == "step" {
                assert!(
                    spans
                        .iter()
                        .any(|(p, s, e)| p == "build" && s <= a && b <= e),
                    "{name}: a step outside its build"
                );
            } else {
                assert!(
                    *a >= previous_end,
                    "{name}: {phase} overlaps the phase before"
                );
                previous_end = *b;
            }
        }
    }
}

/// The hand computation: a module is ready for what waits on it when its build ended (a tier
/// delivers its modules one after another afterwards); within each tier the module ready last is
/// what the next tier waited on.
fn ready(timeline: &Value) -> BTreeMap<String, i64> {
    modules(timeline)
        .into_iter()
        .map(|(name, (_, spans))| {
            let build_end = spans.iter().filter(|s| s.0 == "build").map(|s| s.2).max();
            let last_end = spans.iter().map(|s| s.2).max().unwrap();
            (name, build_end.unwrap_or(last_end))
        })
        .collect()
}

/// A small reader of the Chrome trace event format: every event has ph/ts/pid/tid; complete
/// events (`X`) a duration, and on one thread they nest (one inside the other, or apart); `M`
/// events name the processes and threads. Answers each thread's name and its `X` events' names.
fn read_chrome_trace(trace: &Value) -> BTreeMap<String, Vec<String>> {
    let events = trace["traceEvents"].as_array().expect("traceEvents");
    let mut threads: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut spans: BTreeMap<(u64, u64), Vec<EventSeen>> = BTreeMap::new();
    let mut processes = Vec::new();
    for event in events {
        for key in ["ph", "ts", "pid", "tid", "name"] {
            assert!(event.get(key).is_some(), "{event} has no {key}");
        }
        let id = (
            event["pid"].as_u64().unwrap(),
            event["tid"].as_u64().unwrap(),
        );
        match event["ph"].as_str().unwrap() {
            "X" => {
                let (ts, dur) = (
                    event["ts"].as_i64().unwrap(),
                    event["dur"].as_i64().unwrap(),
                );
                assert!(ts >= 0 && dur >= 0, "{event}");
                let name = event["name"].as_str().unwrap().to_string();
                spans.entry(id).or_default().push((ts, ts + dur, name));
            }
            "M" if event["name"] == "thread_name" => {
                threads.insert(id, event["args"]["name"].as_str().unwrap().to_string());
            }
            "M" if event["name"] == "process_name" => {
                processes.push(event["args"]["name"].as_str().unwrap().to_string())
            }
            "M" => {}
            other => panic!("an event of phase {other} this trace never writes: {event}"),
        }
    }
    assert!(processes.contains(&"meshtop".to_string()), "{processes:?}");
    for (id, list) in &spans {
        for (i, a) in list.iter().enumerate() {
            for b in &list[i + 1..] {
                let apart = a.1 <= b.0 || b.1 <= a.0;
                let nested = (a.0 <= b.0 && b.1 <= a.1) || (b.0 <= a.0 && a.1 <= b.1);
                assert!(apart || nested, "thread {id:?}: {a:?} and {b:?} cross");
            }
        }
    }
    threads
        .into_iter()
        .map(|(id, name)| {
            let names = spans
                .get(&id)
                .map(|list| list.iter().map(|s| s.2.clone()).collect())
                .unwrap_or_default();
            (name, names)
        })
        .collect()
}

#[test]
fn a_converge_keeps_its_timeline_and_trace_shows_and_compares_it() {
    let mesh = ExampleMesh::new("timeline");
    // Each slow step sleeps, then is held until its tier's other module was built: the chain
    // base → tools → api is so by construction, not because 3 s outlasted web's and worker's
    // builds on a busy machine.
    let (tools_step, tools_held) = common::held_run(SLOW);
    let (api_step, api_held) = common::held_run(SLOW);
    append(&mesh, "tools/Dockerfile", &tools_step);
    append(&mesh, "api/Dockerfile", &api_step);

    let first = converge_letting_go(&mesh, &[(&tools_held, "web"), (&api_held, "worker")]);
    assert_eq!(first["ok"], true, "{first}");
    // The summary's words are as they were; the timeline is an object beside them.
    assert!(first["modules"].is_array() && first["record"].is_string());
    let account = &first["timeline"];
    assert_eq!(
        account["critical_path"],
        serde_json::json!(["base", "tools", "api"])
    );
    assert!(
        account["critical_ms"].as_i64().unwrap() >= 6_000,
        "{account}"
    );
    assert!(account["critical_ms"].as_i64() <= account["total_ms"].as_i64());
    assert_eq!(account["running"], false);
    let number = first["operation"].as_i64().unwrap();

    let traced = stdout_json(&mesh.meshtop(&["trace", &format!("#{number}"), "--format", "json"]));
    let timeline = &traced["timeline"];
    assert_phases_nest(timeline);
    // By hand: tools was ready after web (tier 1), api after worker (tier 2): the chain is
    // base → tools → api.
    let ready = ready(timeline);
    assert!(ready["tools"] > ready["web"], "{ready:?}");
    assert!(ready["api"] > ready["worker"], "{ready:?}");
    assert_eq!(traced["summary"]["critical_path"], account["critical_path"]);
    // Each slow step shows as a step of its build, run (not cached), about as long as it slept.
    let tools = timeline["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "tools")
        .unwrap();
    let slow = tools["spans"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["phase"] == "step" && s["label"].as_str().unwrap().contains("sleep 3"))
        .unwrap_or_else(|| panic!("no slow step in {tools}"));
    assert!(slow["end_ms"].as_i64().unwrap() - slow["start_ms"].as_i64().unwrap() >= 3_000);
    assert!(slow.get("cached").is_none(), "{slow}");

    let chrome = stdout_json(&mesh.meshtop(&["trace", &format!("#{number}")]));
    let threads = read_chrome_trace(&chrome);
    for module in ["base", "tools", "web", "api", "worker"] {
        let names = threads
            .get(module)
            .unwrap_or_else(|| panic!("no thread for {module}: {threads:?}"));
        assert!(!names.is_empty(), "{module} has no span in the trace");
    }
    assert!(threads["tools"].iter().any(|n| n == "build"));

    // web made slower on purpose: the second converge builds only web.
    append(&mesh, "web/Dockerfile", &fresh_run(SLOW));
    let second = mesh.meshtop(&["converge"]);
    assert!(second.status.success(), "{}", said(&second));
    let text = String::from_utf8(second.stdout).unwrap();
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("critical path ") && last.contains("skip(s) saved"),
        "the summary is converge's last line: {text}"
    );
    let compared = mesh.meshtop(&["trace", "--compare", &format!("#{number}")]);
    assert!(compared.status.success(), "{}", said(&compared));
    let compared = String::from_utf8(compared.stdout).unwrap();
    let slowest = compared.lines().nth(1).unwrap_or_default();
    assert!(
        slowest.starts_with("web ") && slowest.contains("built both times"),
        "web first, most slowed: {compared}"
    );
    assert!(
        slowest.contains("sleep 3"),
        "the slow step named: {compared}"
    );
    let tools_line = compared.lines().find(|l| l.starts_with("tools ")).unwrap();
    assert!(tools_line.contains("skipped (was built)"), "{compared}");
}

#[test]
fn trace_names_what_is_wrong_with_an_operation_asked_for() {
    let mesh = ExampleMesh::new("tlbad");
    let none = mesh.meshtop(&["trace"]);
    assert_eq!(none.status.code(), Some(2), "{}", said(&none));
    assert!(
        said(&none).contains("has no operation yet"),
        "{}",
        said(&none)
    );
    let bad = mesh.meshtop(&["trace", "yesterday"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        said(&bad).contains("\"yesterday\" is not an operation"),
        "{}",
        said(&bad)
    );
}
