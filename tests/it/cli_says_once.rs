//! The command line says each thing once, and truly (issue 23): a converge that changed nothing
//! says `record unchanged`, never `record stamped`; a rollback and a send print their result once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::{ExampleMesh, decisions, said};

fn times(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

#[test]
fn a_converge_that_changed_nothing_says_so_and_a_rollback_and_a_send_say_their_result_once() {
    let mesh = ExampleMesh::new("say1");
    let first = mesh.meshtop(&["converge"]);
    assert!(first.status.success(), "{}", said(&first));
    let out = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(out.contains("record stamped: 5 module(s)"), "{out}");

    // Nothing changed: the event line and the summary say the same thing.
    let second = mesh.meshtop(&["converge"]);
    assert!(second.status.success(), "{}", said(&second));
    let out = String::from_utf8_lossy(&second.stdout).into_owned();
    let err = String::from_utf8_lossy(&second.stderr).into_owned();
    assert!(err.contains("record unchanged"), "{err}");
    assert!(out.contains("record unchanged"), "{out}");
    assert!(!out.contains("record stamped"), "{out}");
    let json = mesh.json(&["converge", "--json"]);
    assert!(decisions(&json).values().all(|d| d == "record"), "{json}");
    assert_eq!(json["stamped"], false, "nothing was written: {json}");
    assert_eq!(
        json["record"], "record unchanged: it already names every artifact",
        "{json}"
    );

    // Five builds, none failed: `builds --failed` says that, not that nothing was ever built.
    let none_failed = mesh.meshtop(&["builds", "--failed"]);
    assert!(none_failed.status.success(), "{}", said(&none_failed));
    let out = String::from_utf8_lossy(&none_failed.stdout).into_owned();
    assert!(
        out.starts_with("no failed builds recorded for mesh"),
        "{out}"
    );
    let of_web = mesh.meshtop(&["builds", "web", "--failed"]);
    let out = String::from_utf8_lossy(&of_web.stdout).into_owned();
    assert!(out.starts_with("no failed builds of web recorded"), "{out}");

    // A second artifact of web, then back to the first: the result is printed once.
    std::fs::write(mesh.root().join("web/www/version.txt"), "two").unwrap();
    let moved = mesh.json(&["converge", "--json"]);
    assert_eq!(decisions(&moved)["web"], "build", "{moved}");
    let rollback = mesh.meshtop(&["rollback", "web", "--yes"]);
    assert!(rollback.status.success(), "{}", said(&rollback));
    let all = said(&rollback);
    assert_eq!(times(&all, "rolled back web to"), 1, "{all}");
    assert_eq!(times(&all, ": 1/1 machine(s) moved; pinned"), 1, "{all}");
    // It says the pin rule as it is: a base that moves keeps the pin, only web's own inputs end it.
    assert_eq!(
        times(
            &all,
            "until its own inputs (files, Dockerfile, args, platforms; not its base)"
        ),
        2,
        "before the confirm and in the result: {all}"
    );
    assert!(!all.contains("third"), "{all}");

    // web is pinned at v1 and its machine runs v1: a send of web has nothing to move, so `api`
    // (record policy, held behind by a forced rebuild) is the one sent.
    let forced = mesh.json(&["converge", "--json", "--force", "api"]);
    assert_eq!(decisions(&forced)["api"], "forced", "{forced}");
    let sent = mesh.meshtop(&["send", "api", "--yes"]);
    assert!(sent.status.success(), "{}", said(&sent));
    let all = said(&sent);
    // Its one machine moved, said once: not `0/1`, not a count of other words.
    assert_eq!(times(&all, "machine(s) moved"), 1, "{all}");
    assert_eq!(times(&all, " of api: 1 machine(s) moved"), 1, "{all}");
}

#[test]
fn dashboard_options_are_on_the_dashboards_help_only() {
    let help = |args: &[&str]| {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_meshtop"))
            .args(args)
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", said(&output));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let dashboard = help(&["--help"]);
    assert!(dashboard.contains("--readonly"), "{dashboard}");
    assert!(dashboard.contains("--no-bell"), "{dashboard}");
    for command in ["converge", "plan", "send", "status", "watch", "rollback"] {
        let text = help(&[command, "--help"]);
        assert!(!text.contains("--readonly"), "{command}: {text}");
        assert!(!text.contains("--no-bell"), "{command}: {text}");
        // The options every command shares stay.
        assert!(text.contains("--mesh"), "{command}: {text}");
        // The target seam's flags (declared in converge/targets/kubernetes/flags.rs, flattened
        // through targets::Overrides) stay global, worded and placed as they were.
        let at = |flag: &str| {
            text.find(flag)
                .unwrap_or_else(|| panic!("{command}: no {flag}: {text}"))
        };
        assert!(
            at("--state <PATH>") < at("--context <NAME>")
                && at("--context <NAME>") < at("--namespace <NAME>")
                && at("--namespace <NAME>") < at("--target <NAME>"),
            "{command}: {text}"
        );
        assert!(
            text.contains(
                "Kubernetes context (default: the mesh file's, else kubeconfig's current one)"
            ) && text
                .contains("Kubernetes namespace (default: the mesh file's, else the mesh name)"),
            "{command}: {text}"
        );
    }
}

#[test]
fn why_never_calls_a_module_the_record_names_new() {
    // Issue 23: `watch` said `why: new module` for a module that exists, when its state file held
    // no earlier inputs of it (the host or the record vouched; nothing was built with this file).
    let mesh = ExampleMesh::new("say2");
    mesh.json(&["converge", "--json"]);
    let fresh = mesh.dir.path().join("fresh.db");
    let stamped = mesh.meshtop_with_state(&fresh, &["converge", "--json"]);
    assert!(stamped.status.success(), "{}", said(&stamped));
    let summary: serde_json::Value = serde_json::from_slice(&stamped.stdout).unwrap();
    assert!(
        decisions(&summary).values().all(|d| d == "host"),
        "{summary}"
    );
    std::fs::write(mesh.root().join("web/www/version.txt"), "two").unwrap();
    let plan = mesh.meshtop_with_state(&fresh, &["plan", "--json"]);
    assert!(plan.status.success(), "{}", said(&plan));
    let plan: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let web = plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "web")
        .unwrap_or_else(|| panic!("no web in {plan}"));
    let why = web["why"].as_str().unwrap();
    assert!(!why.contains("new module"), "{why}");
    assert!(
        why.contains("inputs differ from the record's")
            && why.contains("this state file holds no earlier inputs"),
        "{why}"
    );
}
