//! The record vouches for an image the daemon lost (`docker rmi -f` by hand): a converge that uses
//! it (machines to create, a dependent to build FROM it) finds it gone, rebuilds it with that reason,
//! its dependents follow, and the machines run (issue 10, item 2). Real daemon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;

use common::{ExampleMesh, decisions, said};
use serde_json::Value;

fn digests(summary: &Value) -> BTreeMap<String, String> {
    summary["modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["digest"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn docker(args: &[&str]) {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(out.status.success(), "docker {args:?}: {}", said(&out));
}

#[test]
fn an_image_removed_by_hand_is_rebuilt_and_its_machines_run() {
    let mesh = ExampleMesh::new("gone");
    let first = mesh.json(&["converge", "--json"]);
    let built = digests(&first);
    let machines: Vec<String> = ["web", "api", "worker"]
        .iter()
        .map(|m| format!("{}-{m}-1", mesh.name))
        .collect();
    // Machines gone (they would otherwise keep the images), then the images of tools and of its
    // dependents api and worker (children first: the daemon keeps a parent that has children).
    let mut rm = vec!["rm", "-f"];
    rm.extend(machines.iter().map(String::as_str));
    docker(&rm);
    docker(&[
        "rmi",
        "-f",
        &built["api"],
        &built["worker"],
        &built["tools"],
    ]);

    let second = mesh.meshtop(&["converge", "--json"]);
    let stderr = String::from_utf8_lossy(&second.stderr).into_owned();
    assert!(second.status.success(), "{}", said(&second));
    let summary: Value = serde_json::from_slice(&second.stdout).unwrap();
    let decided = decisions(&summary);
    assert_eq!(decided["base"], "record", "{summary}");
    assert_eq!(decided["web"], "record", "{summary}");
    for module in ["tools", "api", "worker"] {
        assert_eq!(decided[module], "build", "{module}: {summary}");
    }
    assert!(
        stderr.contains("the record's artifact is gone from the target"),
        "the reason is said: {stderr}"
    );
    // The record is stamped only where a rebuild made another artifact: BuildKit rebuilds the
    // same inputs into the same image id, and then the record already names it (`stamped` is
    // true only for a real write).
    let rebuilt = digests(&summary);
    let moved = ["tools", "api", "worker"]
        .iter()
        .any(|m| rebuilt[*m] != built[*m]);
    assert_eq!(summary["stamped"], moved, "{summary}");
    assert_eq!(summary["created"].as_array().unwrap().len(), 3, "{summary}");
    let status = mesh.json(&["status", "--json"]);
    let states: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["current"; 3], "{status}");
    let running = Command::new("docker")
        .args(["inspect", "-f", "{{.State.Running}}"])
        .args(&machines)
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&running.stdout).trim(),
        "true\ntrue\ntrue",
        "{}",
        said(&running)
    );

    // The plan, once the host is asked, says the same of an artifact gone again.
    let again = digests(&summary);
    docker(&["rm", "-f", &machines[1]]);
    docker(&["rmi", "-f", &again["api"]]);
    std::fs::write(mesh.root().join("web/extra.txt"), "moves web's address\n").unwrap();
    let plan = mesh.json(&["plan", "--json"]);
    let api = plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "api")
        .unwrap()
        .clone();
    assert_eq!(api["decision"], "build", "{plan}");
    assert!(
        api["reason"]
            .as_str()
            .unwrap()
            .starts_with("the record's artifact is gone from the target"),
        "{api}"
    );
}

/// The base is outside the converge's selection (`meshtop converge tools`) and its recorded
/// artifact is gone from the daemon: building tools `FROM sha256:…` would make the daemon look
/// for it on Docker Hub. Refused before any build, naming the base and the fix; the fix works.
#[test]
fn a_gone_base_outside_the_selection_is_refused_naming_it_and_the_fix() {
    let mesh = ExampleMesh::new("gonebase");
    let first = mesh.json(&["converge", "--json"]);
    let built = digests(&first);
    let machines: Vec<String> = ["web", "api", "worker"]
        .iter()
        .map(|m| format!("{}-{m}-1", mesh.name))
        .collect();
    let mut rm = vec!["rm", "-f"];
    rm.extend(machines.iter().map(String::as_str));
    docker(&rm);
    // Children first: the daemon keeps a parent that has children.
    docker(&[
        "rmi",
        "-f",
        &built["api"],
        &built["worker"],
        &built["tools"],
        &built["web"],
        &built["base"],
    ]);
    std::fs::write(
        mesh.root().join("tools/extra.txt"),
        "moves tools' address\n",
    )
    .unwrap();
    let before = common::builds(&mesh).len();

    let refused = mesh.meshtop(&["converge", "tools"]);
    let text = said(&refused);
    assert!(!refused.status.success(), "{text}");
    assert!(
        text.contains("base base's artifact")
            && text.contains("gone from the host daemon")
            && text.contains("meshtop converge base tools"),
        "names the base and the fix: {text}"
    );
    assert!(!text.contains("pull access"), "{text}");
    assert_eq!(common::builds(&mesh).len(), before, "nothing was built");
    // The plan says the same once the host is asked (tools builds FROM an unselected base).
    let plan = mesh.meshtop(&["plan", "tools", "--json"]);
    let plan_text = said(&plan);
    if plan.status.success() {
        let plan: Value = serde_json::from_slice(&plan.stdout).unwrap();
        let tools = &plan["modules"][0];
        assert_eq!(tools["decision"], "refused", "{plan}");
        assert!(
            tools["reason"]
                .as_str()
                .unwrap()
                .contains("gone from the host daemon"),
            "{plan}"
        );
    } else {
        assert!(
            plan_text.contains("gone from the host daemon"),
            "{plan_text}"
        );
    }

    // The fix given works: the base is rebuilt (its artifact is gone), then tools FROM it.
    let fixed = mesh.meshtop(&["converge", "base", "tools", "--json"]);
    assert!(fixed.status.success(), "{}", said(&fixed));
    let summary: Value = serde_json::from_slice(&fixed.stdout).unwrap();
    let decided = decisions(&summary);
    assert_eq!(decided["base"], "build", "{summary}");
    assert_eq!(decided["tools"], "build", "{summary}");
}
