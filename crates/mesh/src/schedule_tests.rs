use super::*;
use crate::builders::{Builder, Endpoint};

fn builder(name: &str, max_builds: u32) -> Builder {
    Builder {
        name: name.into(),
        endpoint: Endpoint::Unix(format!("/run/{name}.sock").into()),
        max_builds,
        platforms: Vec::new(),
        line: 1,
        takes_secrets: false,
    }
}

fn job(module: &str, tier: u32, base: Option<&str>) -> Job {
    Job {
        module: module.into(),
        tier,
        waiting: 0,
        chain_ms: 0,
        base: base.map(str::to_string),
        platforms: Vec::new(),
        attempt: 0,
        avoid: Vec::new(),
        part: None,
        secrets: false,
    }
}

fn place(s: &mut Scheduler, now: u64) -> Placement {
    match s.next(now) {
        Next::Place(p) => p,
        other => panic!("expected a placement, got {other:?}"),
    }
}

/// The builder the hash puts `module` on first among `names`.
fn first_choice<'a>(module: &str, names: &[&'a str]) -> &'a str {
    rendezvous(module, names)[0]
}

/// A module name whose hash's first choice among a, b is `want`.
fn module_hashed_to(want: &str, prefix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|m| first_choice(m, &["a", "b"]) == want)
        .unwrap_or_default()
}

#[test]
fn a_module_goes_to_its_bases_builder() {
    let mut s = Scheduler::new(&[builder("a", 2), builder("b", 2)], 8);
    // A dependent the hash would put on b goes to a, where its base was built.
    let dependent = module_hashed_to("b", "dep");
    s.note_built("base", "a");
    s.enqueue(job(&dependent, 1, Some("base")));
    let p = place(&mut s, 0);
    assert_eq!((p.builder.as_str(), p.why), ("a", Why::Base));
}

#[test]
fn the_base_builder_learned_from_a_finished_build() {
    let mut s = Scheduler::new(&[builder("a", 1), builder("b", 1)], 8);
    let base = module_hashed_to("b", "base");
    s.enqueue(job(&base, 0, None));
    let p = place(&mut s, 0);
    assert_eq!((p.builder.as_str(), p.why), ("b", Why::Hash));
    assert_eq!(s.done(&p, Outcome::Built, 1), AfterDone::Finished);
    assert_eq!(s.built_on(&base), Some("b"));
    let dependent = module_hashed_to("a", "dep");
    s.enqueue(job(&dependent, 1, Some(&base)));
    assert_eq!(place(&mut s, 2).builder, "b");
}

#[test]
fn rendezvous_is_stable_and_moves_only_what_a_leaving_builder_held() {
    let three = ["a", "b", "c"];
    let two = ["a", "c"];
    for i in 0..200 {
        let module = format!("m{i}");
        assert_eq!(
            rendezvous(&module, &three),
            rendezvous(&module, &["c", "b", "a"])
        );
        let before = first_choice(&module, &three);
        if before != "b" {
            assert_eq!(first_choice(&module, &two), before, "{module} moved");
        }
    }
}

#[test]
fn a_full_builder_spills_to_the_next_choice_and_the_jobs_cap_holds() {
    let mut s = Scheduler::new(&[builder("a", 1), builder("b", 1)], 8);
    let on_a: Vec<String> = (0..3)
        .map(|i| module_hashed_to("a", &format!("x{i}-")))
        .collect();
    for m in &on_a {
        s.enqueue(job(m, 0, None));
    }
    let first = place(&mut s, 0);
    assert_eq!((first.builder.as_str(), first.why), ("a", Why::Hash));
    let second = place(&mut s, 0);
    assert_eq!((second.builder.as_str(), second.why), ("b", Why::Spill));
    assert_eq!(
        s.next(0),
        Next::Wait { until_ms: None },
        "both at their cap"
    );
    s.done(&first, Outcome::Built, 1);
    assert_eq!(place(&mut s, 1).builder, "a");

    let mut capped = Scheduler::new(&[builder("a", 4), builder("b", 4)], 3);
    for i in 0..6 {
        capped.enqueue(job(&format!("m{i}"), 0, None));
    }
    for _ in 0..3 {
        place(&mut capped, 0);
    }
    assert_eq!(capped.next(0), Next::Wait { until_ms: None }, "--jobs 3");
    assert_eq!(capped.running(), 3);
    assert_eq!(capped.queued(), 3);
}

/// Place and end every queued build one by one: the modules in the order they were placed.
fn drain(s: &mut Scheduler) -> Vec<String> {
    let mut order = Vec::new();
    while let Next::Place(p) = s.next(0) {
        order.push(p.module.clone());
        s.done(&p, Outcome::Built, 0);
    }
    order
}

#[test]
fn the_longest_remaining_chain_goes_first_whatever_its_tier() {
    let mut s = Scheduler::new(&[builder("a", 1)], 1);
    let mut short = job("aaa-short", 1, None);
    short.chain_ms = 1_000;
    let mut long = job("zzz-long", 3, None);
    long.chain_ms = 9_000;
    s.enqueue(short);
    s.enqueue(long);
    s.enqueue(job("mmm-none", 0, None));
    assert_eq!(drain(&mut s), ["zzz-long", "aaa-short", "mmm-none"]);
}

#[test]
fn the_queue_runs_by_tier_then_by_how_many_wait() {
    let mut s = Scheduler::new(&[builder("a", 1)], 1);
    let mut lonely = job("aaa-lonely", 0, None);
    lonely.waiting = 0;
    let mut popular = job("zzz-popular", 0, None);
    popular.waiting = 5;
    s.enqueue(job("deep", 2, None));
    s.enqueue(lonely);
    s.enqueue(job("mid", 1, None));
    s.enqueue(popular);
    assert_eq!(drain(&mut s), ["zzz-popular", "aaa-lonely", "mid", "deep"]);
}

#[test]
fn a_transport_fault_requeues_once_elsewhere_and_takes_the_builder_out() {
    let mut s = Scheduler::new(&[builder("a", 1), builder("b", 1)], 8);
    let m = module_hashed_to("b", "m");
    s.enqueue(job(&m, 0, None));
    let first = place(&mut s, 0);
    assert_eq!(first.builder, "b");
    let fault = Outcome::Transport {
        error: "connection reset".into(),
    };
    assert_eq!(s.done(&first, fault.clone(), 100), AfterDone::Requeued);
    let b = &s.slots()[1];
    assert_eq!(b.out_until_ms, Some(100 + OUT_OF_ROTATION_MS));
    assert_eq!(b.last_error.as_deref(), Some("connection reset"));
    let retry = place(&mut s, 200);
    assert_eq!((retry.builder.as_str(), retry.attempt), ("a", 1));
    // A second fault gives up: one retry only.
    assert_eq!(s.done(&retry, fault, 300), AfterDone::GaveUp);
    assert_eq!(s.next(400), Next::Idle);
}

#[test]
fn a_failed_step_is_never_retried() {
    let mut s = Scheduler::new(&[builder("a", 1), builder("b", 1)], 8);
    s.enqueue(job("m", 0, None));
    let p = place(&mut s, 0);
    assert_eq!(s.done(&p, Outcome::Failed, 1), AfterDone::Finished);
    assert_eq!(s.next(2), Next::Idle);
    assert!(s.slots().iter().all(|slot| slot.out_until_ms.is_none()));
}

#[test]
fn a_builder_out_of_rotation_comes_back_after_a_while() {
    let mut s = Scheduler::new(&[builder("a", 1)], 8);
    s.enqueue(job("m", 0, None));
    let p = place(&mut s, 0);
    let fault = Outcome::Transport {
        error: "EOF".into(),
    };
    // Its only builder is out: the retry waits for it (avoid holds "a": it cannot go there).
    assert_eq!(s.done(&p, fault, 0), AfterDone::Requeued);
    match s.next(1) {
        Next::Unplaceable { module, reason, .. } => {
            assert_eq!(module, "m");
            assert!(reason.contains("a failed it"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Another module waits for the builder to come back, then goes there.
    s.enqueue(job("n", 0, None));
    assert_eq!(
        s.next(1),
        Next::Wait {
            until_ms: Some(OUT_OF_ROTATION_MS)
        }
    );
    assert_eq!(place(&mut s, OUT_OF_ROTATION_MS).builder, "a");
}

#[test]
fn platforms_filter_builders_and_a_left_out_builder_gets_nothing() {
    let arm = Platform::parse("linux/arm64").unwrap_or_else(|e| panic!("{e}"));
    let mut a = builder("a", 2);
    a.platforms = vec![Platform::parse("linux/amd64").unwrap_or_else(|e| panic!("{e}"))];
    let mut b = builder("b", 2);
    b.platforms = vec![arm.clone()];
    let mut s = Scheduler::new(&[a, b, builder("c", 2)], 8);
    s.leave_out("c", "cannot reach it");
    for i in 0..20 {
        let mut j = job(&format!("m{i}"), 0, None);
        j.platforms = vec![arm.clone()];
        s.enqueue(j);
    }
    let mut riscv = job("riscv", 0, None);
    riscv.platforms = vec![Platform::parse("linux/riscv64").unwrap_or_else(|e| panic!("{e}"))];
    s.enqueue(riscv);
    let mut seen = BTreeSet::new();
    loop {
        match s.next(0) {
            Next::Place(p) => {
                seen.insert(p.builder.clone());
                s.done(&p, Outcome::Built, 0);
            }
            Next::Unplaceable { module, reason, .. } => {
                assert_eq!(module, "riscv");
                // Only c (of any platform) could build it, and c is left out.
                assert!(reason.contains("c is out (cannot reach it)"), "{reason}");
            }
            Next::Idle => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen, BTreeSet::from(["b".to_string()]));
}

#[test]
fn three_hundred_modules_spread_over_two_builders() {
    let names: Vec<String> = (0..300).map(|i| format!("mod-{i:03}")).collect();
    let on_a = names
        .iter()
        .filter(|m| first_choice(m, &["b1", "b2"]) == "b1")
        .count();
    assert!(
        (120..=180).contains(&on_a),
        "the hash puts {on_a} of 300 on the first builder"
    );
    // Scheduled with caps of 2 each and --jobs 4: every module placed, both builders busy.
    let mut s = Scheduler::new(&[builder("b1", 2), builder("b2", 2)], 4);
    for m in &names {
        s.enqueue(job(m, 1, Some("base")));
    }
    let mut running: Vec<Placement> = Vec::new();
    let mut placed = 0;
    let mut now = 0;
    loop {
        match s.next(now) {
            Next::Place(p) => {
                placed += 1;
                running.push(p);
            }
            Next::Wait { .. } => {
                let p = running.remove(0);
                s.done(&p, Outcome::Built, now);
                now += 1;
            }
            Next::Idle => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(placed, 300);
    for p in running.drain(..) {
        s.done(&p, Outcome::Built, now);
    }
    let built: Vec<u32> = s.slots().iter().map(|slot| slot.built).collect();
    assert_eq!(built.iter().sum::<u32>(), 300);
    assert!(built.iter().all(|n| *n >= 120), "spread {built:?}");
}

fn graph_mesh(modules: &[(&str, u32, Option<&str>, &[&str])]) -> crate::model::Mesh {
    use crate::model::{Mesh, Module, Policy};
    let module = |(name, tier, base, contexts): &(&str, u32, Option<&str>, &[&str])| Module {
        name: (*name).into(),
        context: "/m".into(),
        dockerfile: "Dockerfile".into(),
        target: None,
        base: base.map(str::to_string),
        policy: Policy::Rollout,
        platforms: Vec::new(),
        build_args: Default::default(),
        secrets: Vec::new(),
        ssh: false,
        tier: *tier,
        line: 1,
        backoff: Default::default(),
        contexts: contexts
            .iter()
            .map(|c| (format!("ctx-{c}"), (*c).to_string()))
            .collect(),
        max_unavailable: None,
    };
    Mesh {
        name: "demo".into(),
        file: "/m/mesh.toml".into(),
        root: "/m".into(),
        registry: None,
        publish: false,
        multi_platform: Default::default(),
        signing: Default::default(),
        targets: Default::default(),
        environments: Vec::new(),
        modules: modules.iter().map(module).collect(),
        machines: Vec::new(),
        rollout_deadline: None,
        builders: Vec::new(),
    }
}

#[test]
fn waiting_counts_follow_bases_and_named_contexts_all_the_way_down() {
    let mesh = graph_mesh(&[
        ("base", 0, None, &[]),
        ("solo", 0, None, &[]),
        ("lib", 0, None, &[]),
        ("api", 1, Some("base"), &[]),
        ("tools", 1, Some("base"), &["lib"]),
        ("web", 2, Some("api"), &[]),
    ]);
    let counts = waiting_counts(&mesh);
    assert_eq!(counts["base"], 3);
    assert_eq!(counts["api"], 1);
    assert_eq!(counts["lib"], 1, "tools builds on lib by a named context");
    assert_eq!(counts["solo"], 0);
    assert_eq!(counts["web"], 0);
}

#[test]
fn a_chain_is_its_own_median_plus_its_longest_chain_of_dependents() {
    // base → api (slow) and base → web; lib → tools by a named context.
    let mesh = graph_mesh(&[
        ("base", 0, None, &[]),
        ("lib", 0, None, &[]),
        ("api", 1, Some("base"), &[]),
        ("web", 1, Some("base"), &[]),
        ("tools", 1, None, &["lib"]),
    ]);
    let medians: BTreeMap<String, i64> = [("base", 100), ("api", 3_000), ("web", 200), ("lib", 50)]
        .into_iter()
        .map(|(m, ms)| (m.to_string(), ms))
        .collect();
    let chain = chain_lengths(&mesh, &medians);
    assert_eq!(chain["api"], 3_000);
    assert_eq!(chain["web"], 200);
    assert_eq!(
        chain["base"], 3_100,
        "its own and api's, the longer dependent"
    );
    // tools has no history: it counts as the median of the mesh's medians (50, 100, 200, 3000).
    assert_eq!(chain["tools"], 150);
    assert_eq!(chain["lib"], 200);
    let none = chain_lengths(&mesh, &BTreeMap::new());
    assert_eq!(
        none["base"],
        2 * UNKNOWN_BUILD_MS,
        "no history at all: each counts the same"
    );
}

fn platform(text: &str) -> Platform {
    Platform::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

/// The two parts (amd64, arm64) of multi-platform module `module`.
fn parts(module: &str) -> Vec<Job> {
    ["linux/amd64", "linux/arm64"]
        .into_iter()
        .map(|p| {
            let mut j = job(module, 0, None);
            j.platforms = vec![platform(p)];
            j.part = Some(platform(p));
            j
        })
        .collect()
}

/// Two amd64 builders that emulate arm64, one build at once each.
fn two_emulating(jobs: usize) -> Scheduler {
    let both = vec![platform("linux/amd64"), platform("linux/arm64")];
    let mut a = builder("a", 1);
    a.platforms = both.clone();
    let mut b = builder("b", 1);
    b.platforms = both;
    let mut s = Scheduler::new(&[a, b], jobs);
    s.set_native("a", vec![platform("linux/amd64")]);
    s.set_native("b", vec![platform("linux/amd64")]);
    s
}

#[test]
fn the_parts_of_a_module_take_a_slot_each_and_run_at_once_on_two_builders() {
    let mut s = two_emulating(8);
    for part in parts("base") {
        s.enqueue(part);
    }
    s.enqueue(job("side", 0, None));
    let first = place(&mut s, 0);
    let second = place(&mut s, 0);
    assert_ne!(first.builder, second.builder, "one slot each: they spread");
    assert!(first.part.is_some() && second.part.is_some());
    assert_ne!(first.part, second.part);
    // Every slot is taken: another module's build waits for one.
    assert_eq!(s.next(0), Next::Wait { until_ms: None });
    assert_eq!(s.running(), 2);
    assert_eq!(s.done(&first, Outcome::Built, 1), AfterDone::Finished);
    let side = place(&mut s, 1);
    assert_eq!((side.module.as_str(), side.part.clone()), ("side", None));
    assert_eq!(side.builder, first.builder, "the slot given back");
    // A part's module is not where its base is: a part's end names no built_on.
    s.done(&second, Outcome::Built, 2);
    assert_eq!(s.built_on("base"), None);
}

#[test]
fn a_part_goes_to_a_native_builder_first_and_the_jobs_cap_holds_parts_too() {
    let mut a = builder("a", 1);
    a.platforms = vec![platform("linux/amd64"), platform("linux/arm64")];
    let mut arm = builder("arm", 1);
    arm.platforms = vec![platform("linux/arm64")];
    let mut s = Scheduler::new(&[a, arm], 1);
    s.set_native("a", vec![platform("linux/amd64")]);
    for part in parts("m") {
        s.enqueue(part);
    }
    let amd = place(&mut s, 0);
    assert_eq!(amd.builder, "a");
    // --jobs 1: the other part waits, parts count as builds.
    assert_eq!(s.next(0), Next::Wait { until_ms: None });
    s.done(&amd, Outcome::Built, 1);
    let arm = place(&mut s, 1);
    assert_eq!(
        (
            arm.builder.as_str(),
            arm.part.as_ref().map(ToString::to_string)
        ),
        ("arm", Some("linux/arm64".to_string())),
        "the arm64 builder before the one that emulates it"
    );
}

#[test]
fn a_parts_transport_fault_takes_its_builder_out_and_is_not_put_back_alone() {
    let mut s = two_emulating(8);
    for part in parts("base") {
        s.enqueue(part);
    }
    let first = place(&mut s, 0);
    let second = place(&mut s, 0);
    let fault = Outcome::Transport {
        error: "EOF".into(),
    };
    assert_eq!(s.done(&second, fault, 5), AfterDone::Finished);
    let out = s.slots().iter().find(|slot| slot.name == second.builder);
    assert_eq!(
        out.and_then(|o| o.out_until_ms),
        Some(5 + OUT_OF_ROTATION_MS)
    );
    assert_eq!(
        s.queued(),
        0,
        "the module is retried as a whole, not its part"
    );
    s.done(&first, Outcome::Failed, 6);
    assert_eq!(s.running(), 0);
    // Forgetting a module's queued parts leaves the others.
    for part in parts("again") {
        s.enqueue(part);
    }
    s.enqueue(job("other", 0, None));
    s.drop_parts("again");
    assert_eq!(s.queued(), 1);
}

#[test]
fn secrets_go_only_to_a_builder_that_may_take_them() {
    let plain = Builder {
        endpoint: Endpoint::Tcp {
            host: "farm".into(),
            port: 2375,
            tls_dir: None,
        },
        takes_secrets: true,
        ..builder("plain", 2)
    };
    let shy = builder("shy", 2);
    let taker = Builder {
        takes_secrets: true,
        ..builder("taker", 2)
    };
    let secret = |module: &str| Job {
        secrets: true,
        ..job(module, 0, None)
    };
    let mut s = Scheduler::new(&[plain.clone(), shy.clone(), taker], 8);
    for module in ["a", "b", "c", "d"] {
        s.enqueue(secret(module));
    }
    for _ in 0..2 {
        assert_eq!(place(&mut s, 0).builder, "taker");
    }
    // None of the others may: a plain tcp:// builder, and one that did not opt in.
    let mut s = Scheduler::new(&[plain, shy], 8);
    s.enqueue(secret("a"));
    let Next::Unplaceable { reason, .. } = s.next(0) else {
        panic!("placed a module with secrets on a builder that may not take them");
    };
    assert!(reason.contains("takes_secrets = true"), "{reason}");
}
