#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use super::*;
use crate::progress::{Outcome, TierPlace};
use crate::timeline_summary::{compare, critical_path, summarize};

/// A converge told step by step: `(at_ms, module, payload, text)`.
fn fold(steps: &[(i64, Option<&str>, Payload, &str)]) -> Timeline {
    let mut timeline = Timeline::new("op-1", Some(7));
    for (at, module, payload, text) in steps {
        timeline.fold(*at, *module, payload, text);
    }
    timeline
}

fn queued() -> Payload {
    Payload::Queued {
        place: TierPlace { index: 1, total: 3 },
    }
}

fn tier(n: u32, modules: &[&str]) -> Payload {
    Payload::Tier {
        tier: n,
        modules: modules.iter().map(|m| m.to_string()).collect(),
    }
}

fn decided(decision: Decision) -> Payload {
    Payload::Decided {
        decision,
        reference: Some("demo/x:1".into()),
        reason: String::new(),
    }
}

fn build(builder: Option<&str>) -> Payload {
    Payload::Build {
        reference: "demo/x:1".into(),
        build: "b".into(),
        builder: builder.map(str::to_string),
    }
}

fn built() -> Payload {
    Payload::Built {
        reference: "demo/x:1".into(),
        digest: "sha256:1".into(),
    }
}

fn on_host() -> Payload {
    Payload::Delivered {
        reference: "demo/x:1".into(),
        by: DeliveredBy::OnHost,
    }
}

fn finished() -> Payload {
    Payload::Finished {
        outcome: Outcome::Succeeded,
        error: None,
    }
}

/// base (skipped by the record) → tools (built, slow) and web (built, fast) → api (built on tools).
fn converge() -> Timeline {
    let line = |text: &str| Payload::output(text);
    let mut timeline = fold(&[
        (1_000, None, Payload::Started { modules: 4 }, ""),
        (1_000, Some("base"), queued(), ""),
        (1_000, Some("tools"), queued(), ""),
        (1_000, Some("web"), queued(), ""),
        (1_000, Some("api"), queued(), ""),
        (1_100, Some("base"), decided(Decision::Record), ""),
        (1_200, None, tier(0, &["base"]), ""),
        (1_210, Some("base"), decided(Decision::Record), ""),
        (1_300, None, tier(1, &["tools", "web"]), ""),
        (1_310, Some("tools"), decided(Decision::Build), ""),
        (1_310, Some("web"), decided(Decision::Build), ""),
        (1_400, Some("tools"), build(None), ""),
        (1_400, Some("web"), build(None), ""),
        (
            1_450,
            Some("tools"),
            line("Step 1/2 : FROM scratch"),
            "Step 1/2 : FROM scratch",
        ),
        (
            1_460,
            Some("tools"),
            line(" ---> Using cache"),
            " ---> Using cache",
        ),
        (
            1_500,
            Some("tools"),
            line("Step 2/2 : RUN slow"),
            "Step 2/2 : RUN slow",
        ),
        (1_600, Some("web"), built(), ""),
        (1_610, Some("web"), on_host(), ""),
        (9_500, Some("tools"), built(), ""),
        (9_510, Some("tools"), on_host(), ""),
        (9_600, None, tier(2, &["api"]), ""),
        (9_610, Some("api"), decided(Decision::Build), ""),
        (9_700, Some("api"), build(None), ""),
        (11_000, Some("api"), built(), ""),
        (11_010, Some("api"), on_host(), ""),
        (11_500, None, finished(), ""),
    ]);
    // The bases, as `with_bases` fills them from the mesh (the steps do not carry them).
    for module in &mut timeline.modules {
        module.base = match module.name.as_str() {
            "tools" | "web" => Some("base".into()),
            "api" => Some("tools".into()),
            _ => None,
        };
    }
    timeline
}

/// Every span closes, ends after it begins, lies within the operation; a step lies within its
/// build, and a module's phases follow one another without overlap.
fn assert_nests(timeline: &Timeline) {
    let end = timeline.ended_ms.unwrap();
    for module in &timeline.modules {
        let mut previous_end = timeline.started_ms;
        for span in &module.spans {
            let span_end = span.end_ms.unwrap();
            assert!(span.start_ms <= span_end, "{} {span:?}", module.name);
            assert!(span.start_ms >= timeline.started_ms && span_end <= end);
            if span.phase == Phase::Step {
                let build = module
                    .spans
                    .iter()
                    .filter(|s| s.phase == Phase::Build)
                    .find(|b| b.start_ms <= span.start_ms && span_end <= b.end_ms.unwrap());
                assert!(build.is_some(), "{} step outside its build", module.name);
            } else {
                assert!(span.start_ms >= previous_end, "{} overlaps", module.name);
                previous_end = span_end;
            }
        }
    }
}

#[test]
fn a_converge_folds_into_phases_that_nest() {
    let timeline = converge();
    assert_nests(&timeline);
    let tools = timeline.module("tools").unwrap();
    let phases: Vec<Phase> = tools.spans.iter().map(|s| s.phase).collect();
    assert_eq!(
        phases,
        [
            Phase::Queued,
            Phase::Waiting,
            Phase::Decide,
            Phase::Build,
            Phase::Step,
            Phase::Step,
            Phase::Deliver
        ]
    );
    assert_eq!(tools.tier, Some(1));
    assert_eq!(tools.state, ModuleState::Built);
    type StepSeen<'a> = (Option<(u32, u32)>, bool, &'a str);
    let steps: Vec<StepSeen> = tools
        .spans
        .iter()
        .filter(|s| s.phase == Phase::Step)
        .map(|s| (s.step, s.cached, s.label.as_str()))
        .collect();
    assert_eq!(
        steps,
        [
            (Some((1, 2)), true, "FROM scratch"),
            (Some((2, 2)), false, "RUN slow")
        ]
    );
    // Waiting on what it builds on: from the first module's start to its own.
    let waiting = &tools.spans[1];
    assert_eq!((waiting.start_ms, waiting.end_ms), (1_200, Some(1_300)));
    let base = timeline.module("base").unwrap();
    assert_eq!(base.state, ModuleState::Skipped);
    assert_eq!(base.build_ms(0), 0);
}

/// The critical path's module names.
fn path_of(timeline: &Timeline) -> Vec<String> {
    critical_path(timeline, 0)
        .iter()
        .map(|m| m.name.clone())
        .collect()
}

/// api built on `base` and the named contexts' modules `contexts`.
fn api_on(timeline: &mut Timeline, base: &str, contexts: &[&str]) {
    let api = (timeline.modules.iter_mut()).find(|m| m.name == "api");
    let api = api.unwrap();
    api.base = Some(base.into());
    api.contexts = contexts.iter().map(|c| c.to_string()).collect();
}

#[test]
fn a_module_decided_to_build_says_it_waits_for_a_build_slot_until_its_build_begins() {
    let timeline = converge();
    let tools = timeline.module("tools").unwrap();
    let deciding = tools
        .spans
        .iter()
        .find(|s| s.phase == Phase::Decide)
        .unwrap();
    assert_eq!(deciding.label, WAITING_FOR_A_SLOT);
    assert_eq!((deciding.start_ms, deciding.end_ms), (1_300, Some(1_400)));
    let base = timeline.module("base").unwrap();
    let skipped = base
        .spans
        .iter()
        .find(|s| s.phase == Phase::Decide)
        .unwrap();
    assert!(skipped.label.is_empty(), "a skip waits for no slot");
}

#[test]
fn the_critical_path_is_the_chain_each_module_waited_on() {
    // api ended last; it began when its base tools ended; tools began after base.
    assert_eq!(path_of(&converge()), ["base", "tools", "api"]);
}

#[test]
fn a_slower_sibling_of_the_base_is_never_on_the_path() {
    // web is api's base; tools (same tier) ended later, but api builds nothing on it.
    let mut timeline = converge();
    api_on(&mut timeline, "web", &[]);
    assert_eq!(path_of(&timeline), ["base", "web", "api"]);
}

#[test]
fn a_named_context_ready_after_the_base_is_what_the_module_waited_on() {
    let mut timeline = converge();
    api_on(&mut timeline, "web", &["tools"]);
    assert_eq!(path_of(&timeline), ["base", "tools", "api"]);
}

#[test]
fn when_two_it_builds_on_end_at_once_the_base_is_on_the_path() {
    let mut timeline = converge();
    // web's build ends exactly when tools' does; api builds FROM web and on tools by a context.
    let web = (timeline.modules.iter_mut()).find(|m| m.name == "web");
    for span in &mut web.unwrap().spans {
        if span.phase == Phase::Build {
            span.end_ms = Some(9_500);
        }
        if span.phase == Phase::Deliver {
            (span.start_ms, span.end_ms) = (9_500, Some(9_510));
        }
    }
    api_on(&mut timeline, "web", &["tools"]);
    assert_eq!(path_of(&timeline), ["base", "web", "api"]);
}

#[test]
fn an_empty_timeline_has_no_critical_path() {
    assert!(critical_path(&Timeline::default(), 0).is_empty());
}

#[test]
fn the_summary_counts_the_chain_builders_skips_and_meshtops_own_time() {
    let timeline = converge();
    let medians = BTreeMap::from([("base".to_string(), 4_000)]);
    let summary = summarize(&timeline, &medians, 0);
    assert_eq!(summary.critical_path, ["base", "tools", "api"]);
    // base 1200..1210, tools 1300..9500, api 9600..11000 (each to its build's end).
    assert_eq!(summary.critical_ms, 10 + 8_200 + 1_400);
    assert_eq!(summary.total_ms, 10_500);
    // Builds on the local daemon: 1400..9500 and 9700..11000.
    assert_eq!(summary.builders.len(), 1);
    assert_eq!(summary.builders[0].busy_ms, 8_100 + 1_300);
    assert_eq!(summary.builders[0].percent, 90);
    assert_eq!((summary.skips, summary.saved_ms), (1, 4_000));
    // Outside: 1400..9510 and 9700..11010; the rest of 1000..11500 is meshtop's.
    assert_eq!(summary.own_ms, 10_500 - 8_110 - 1_310);
    assert_eq!(
        summary.line(),
        "critical path base → tools → api 9.6 s of 10.5 s · builders local 90% · 1 skip(s) saved ~4.0 s · meshtop 1.1 s"
    );
}

#[test]
fn a_running_operation_is_timed_up_to_now() {
    let mut timeline = converge();
    timeline.ended_ms = None;
    let api = timeline
        .modules
        .iter_mut()
        .find(|m| m.name == "api")
        .unwrap();
    api.spans.retain(|s| s.start_ms < 9_700);
    api.spans.push(Span::open(Phase::Build, 9_700));
    let summary = summarize(&timeline, &BTreeMap::new(), 20_000);
    assert!(summary.running);
    assert_eq!(summary.total_ms, 19_000);
    assert_eq!(summary.critical_path.last().unwrap(), "api");
}

#[test]
fn a_requeued_build_ends_on_its_first_builder_and_starts_again_on_the_next() {
    let timeline = fold(&[
        (0, None, Payload::Started { modules: 1 }, ""),
        (0, Some("api"), queued(), ""),
        (10, None, tier(0, &["api"]), ""),
        (20, Some("api"), decided(Decision::Build), ""),
        (30, Some("api"), build(Some("farm-1")), ""),
        (
            50,
            Some("api"),
            Payload::Requeued {
                from: "farm-1".into(),
                error: "EOF".into(),
            },
            "",
        ),
        (60, Some("api"), build(Some("farm-2")), ""),
        (90, Some("api"), built(), ""),
        (95, Some("api"), on_host(), ""),
        (100, None, finished(), ""),
    ]);
    assert_nests(&timeline);
    let builds: Vec<(Option<&str>, i64, Option<i64>)> = timeline.modules[0]
        .spans
        .iter()
        .filter(|s| s.phase == Phase::Build)
        .map(|s| (s.builder.as_deref(), s.start_ms, s.end_ms))
        .collect();
    assert_eq!(
        builds,
        [
            (Some("farm-1"), 30, Some(50)),
            (Some("farm-2"), 60, Some(90))
        ]
    );
    let busy = crate::timeline_summary::builders_busy(&timeline, 0);
    let names: Vec<(&str, u32)> = busy
        .iter()
        .map(|b| (b.builder.as_str(), b.percent))
        .collect();
    assert_eq!(names, [("farm-1", 20), ("farm-2", 30)]);
}

#[test]
fn compare_names_the_module_that_got_slower_and_its_step() {
    let before = converge();
    let mut after = converge();
    for module in &mut after.modules {
        if module.name == "web" {
            // web's build took 3 s longer; its delivery came 3 s later.
            for span in &mut module.spans {
                match span.phase {
                    Phase::Build => span.end_ms = span.end_ms.map(|e| e + 3_000),
                    Phase::Deliver => {
                        span.start_ms += 3_000;
                        span.end_ms = span.end_ms.map(|e| e + 3_000);
                    }
                    _ => {}
                }
            }
        }
    }
    let changes = compare(&before, &after);
    assert_eq!(changes[0].module, "web");
    assert_eq!(changes[0].delta_ms, 3_000);
    assert!(changes[0].why[0].contains("built both times"));
    assert!(
        changes[0]
            .why
            .iter()
            .any(|w| w.starts_with("build 0.2 s → 3.2 s"))
    );
}

#[test]
fn the_chrome_trace_has_a_process_per_builder_and_a_thread_per_module() {
    let trace = crate::timeline_trace::chrome_trace(&converge(), 0);
    let events = trace["traceEvents"].as_array().unwrap();
    for event in events {
        for key in ["ph", "ts", "pid", "tid", "name"] {
            assert!(event.get(key).is_some(), "{event} lacks {key}");
        }
        if event["ph"] == "X" {
            assert!(event["dur"].as_i64().unwrap() >= 0);
        }
    }
    let names = |what: &str| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == what)
            .map(|e| e["args"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(names("process_name"), ["builder local", "meshtop"]);
    assert_eq!(names("thread_name"), ["base", "tools", "web", "api"]);
}

#[test]
fn a_recording_is_bounded_per_module() {
    let mut timeline = Timeline::new("op", None);
    timeline.fold(0, Some("api"), &queued(), "");
    timeline.fold(1, None, &tier(0, &["api"]), "");
    timeline.fold(2, Some("api"), &build(None), "");
    for n in 1..=500u32 {
        let line = format!("Step {n}/500 : RUN true");
        timeline.fold(
            3 + i64::from(n),
            Some("api"),
            &Payload::output(&line),
            &line,
        );
    }
    let api = timeline.module("api").unwrap();
    assert_eq!(api.spans.len(), MAX_SPANS_PER_MODULE);
    assert_eq!(api.dropped as usize, 3 + 500 - MAX_SPANS_PER_MODULE);
}

#[test]
fn a_tiers_deliveries_follow_its_builds_one_after_another() {
    let timeline = fold(&[
        (0, None, Payload::Started { modules: 2 }, ""),
        (0, Some("a"), queued(), ""),
        (0, Some("b"), queued(), ""),
        (10, None, tier(0, &["a", "b"]), ""),
        (20, Some("a"), build(None), ""),
        (20, Some("b"), build(None), ""),
        (100, Some("a"), built(), ""),
        (500, Some("b"), built(), ""),
        (510, Some("a"), on_host(), ""),
        (520, Some("b"), on_host(), ""),
        (530, None, finished(), ""),
    ]);
    assert_nests(&timeline);
    let deliveries: Vec<(i64, Option<i64>)> = timeline
        .modules
        .iter()
        .map(|m| {
            let span = m.spans.iter().find(|s| s.phase == Phase::Deliver).unwrap();
            (span.start_ms, span.end_ms)
        })
        .collect();
    // a's delivery began once b's build ended; b's once a's delivery ended.
    assert_eq!(deliveries, [(500, Some(510)), (510, Some(520))]);
    // Ready for what waits: at its build's end, whatever the order of the deliveries.
    let ready: Vec<Option<i64>> = timeline.modules.iter().map(|m| m.ready(0)).collect();
    assert_eq!(ready, [Some(100), Some(500)]);
}

fn send(machine: &str) -> Payload {
    Payload::Send {
        machine: machine.into(),
        from: "sha256:0".into(),
        to_reference: "demo/x:1".into(),
        to_digest: "sha256:1".into(),
    }
}

/// api built in 1.2 s, then its two machines moved side by side for 30 s.
fn rolled_out() -> Timeline {
    fold(&[
        (0, None, Payload::Started { modules: 1 }, ""),
        (0, Some("api"), queued(), ""),
        (100, None, tier(0, &["api"]), ""),
        (110, Some("api"), decided(Decision::Build), ""),
        (200, Some("api"), build(None), ""),
        (1_300, Some("api"), built(), ""),
        (1_310, Some("api"), on_host(), ""),
        (1_400, Some("api"), send("api-1"), ""),
        (1_500, Some("api"), send("api-2"), ""),
        (31_000, Some("api"), Payload::sent("api-2", true), ""),
        (31_400, Some("api"), Payload::sent("api-1", true), ""),
        (31_500, None, finished(), ""),
    ])
}

#[test]
fn the_critical_path_ends_in_the_roll_outs_and_says_they_were_most_of_it() {
    let summary = summarize(&rolled_out(), &BTreeMap::new(), 0);
    assert_eq!(summary.critical_path, ["api"]);
    assert_eq!(summary.rolled_out, ["api"]);
    // Two machines moving side by side count once: 1400..31400.
    assert_eq!(summary.rollout_ms, 30_000);
    // api 100..1300 (to its build's end), then the roll-outs.
    assert_eq!(summary.critical_ms, 1_200 + 30_000);
    assert_eq!(
        summary.line(),
        "critical path api → roll-out of api 31.2 s of 31.5 s (roll-outs 30.0 s, most of it) · builders local 3% · 0 skip(s) saved ~0.0 s · meshtop 0.4 s"
    );
}

#[test]
fn a_skipped_module_is_ready_before_its_roll_outs() {
    let timeline = fold(&[
        (0, None, Payload::Started { modules: 1 }, ""),
        (0, Some("api"), queued(), ""),
        (100, None, tier(0, &["api"]), ""),
        (150, Some("api"), decided(Decision::Record), ""),
        (200, Some("api"), send("api-1"), ""),
        (10_200, Some("api"), Payload::sent("api-1", true), ""),
        (10_300, None, finished(), ""),
    ]);
    let summary = summarize(&timeline, &BTreeMap::new(), 0);
    assert_eq!(summary.rollout_ms, 10_000);
    assert_eq!(summary.critical_ms, 50 + 10_000);
    assert!(summary.line().contains("most of it"), "{}", summary.line());
}
