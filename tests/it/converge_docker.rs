//! The example mesh end to end on the real Docker daemon (issue 3's "done when").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;

use common::{ExampleMesh, decisions, said};
use serde_json::Value;

fn digest_of(summary: &Value, module: &str) -> String {
    summary["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == module)
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

/// machine name → state from `status --json`.
fn states(mesh: &ExampleMesh) -> BTreeMap<String, String> {
    mesh.json(&["status", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["state"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn build_count(mesh: &ExampleMesh) -> usize {
    mesh.json(&["builds", "--json", "--limit", "1000"])
        .as_array()
        .unwrap()
        .len()
}

#[test]
fn example_mesh_converges_skips_moves_and_sends() {
    let mesh = ExampleMesh::new("conv");
    let all = ["api", "base", "tools", "web", "worker"];

    // 1. First converge builds everything, stamps, creates the declared machines.
    let first = mesh.json(&["converge", "--json"]);
    assert_eq!(first["stamped"], true, "{first}");
    for module in all {
        assert_eq!(decisions(&first)[module], "build", "{first}");
    }
    assert_eq!(first["created"].as_array().unwrap().len(), 3, "{first}");
    assert_eq!(build_count(&mesh), 5);
    let machines = states(&mesh);
    assert_eq!(machines.len(), 3, "{machines:?}");
    assert!(machines.values().all(|s| s == "current"), "{machines:?}");

    // 2. Second converge: the record vouches for every module; no build.
    let second = mesh.json(&["converge", "--json"]);
    assert!(
        decisions(&second).values().all(|d| d == "record"),
        "{second}"
    );
    assert_eq!(build_count(&mesh), 5, "a record skip must not build");

    // 3. Fresh state database: the host vouches for every module; still no build.
    let fresh = mesh.dir.path().join("fresh.db");
    let output = mesh.meshtop_with_state(&fresh, &["converge", "--json"]);
    assert!(output.status.success(), "{}", said(&output));
    let host: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(decisions(&host).values().all(|d| d == "host"), "{host}");
    let builds = mesh.meshtop_with_state(&fresh, &["builds", "--json"]);
    assert_eq!(
        serde_json::from_slice::<Value>(&builds.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .len(),
        0
    );

    // A machine started by hand with the machine mark counts the same; a send keeps its configuration.
    let by_hand = format!("{}-by-hand", mesh.name);
    let web_digest = digest_of(&second, "web");
    let run = std::process::Command::new("docker")
        .args([
            "run",
            "-d",
            "--name",
            &by_hand,
            "--label",
            "jr2.dev/module=web",
            "--label",
            &format!("jr2.dev/machine={by_hand}"),
            "--label",
            "team=blue",
        ])
        .args([
            "-e",
            "FOO=bar",
            "-p",
            "127.0.0.1::8080",
            "--restart",
            "on-failure:3",
        ])
        .args([
            web_digest.as_str(),
            "httpd",
            "-f",
            "-p",
            "8080",
            "-h",
            "/www",
        ])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", said(&run));
    assert_eq!(states(&mesh)[&by_hand], "current");

    // 3b. A comment in the base's Dockerfile moves the base's ref, and with it its artifact: every
    // build writes its full input digest (label jr2.dev/inputs, the registry voucher's proof) into
    // the image config, so the builder's cache cannot give the old image back. Its dependents
    // follow the artifact and build.
    let file = mesh.root().join("base/Dockerfile");
    std::fs::write(
        &file,
        std::fs::read_to_string(&file).unwrap() + "# a comment\n",
    )
    .unwrap();
    let comment = mesh.json(&["converge", "--json"]);
    let decided = decisions(&comment);
    assert_eq!(decided["base"], "build", "{comment}");
    for dependent in ["tools", "web", "api", "worker"] {
        assert_eq!(
            decided[dependent], "build",
            "moves follow the artifact: {comment}"
        );
    }
    assert_ne!(digest_of(&comment, "base"), digest_of(&second, "base"));

    // 4. A byte changed in the base (one that changes its artifact): the plan shows dependents
    // pending, the converge rebuilds all.
    let file = mesh.root().join("base/Dockerfile");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("ENV EXAMPLE_REVISION=2\n");
    std::fs::write(&file, text).unwrap();
    let plan = mesh.json(&["plan", "--json"]);
    let modules = plan["modules"].as_array().unwrap();
    let base = modules.iter().find(|m| m["name"] == "base").unwrap();
    assert_eq!(base["decision"], "build");
    assert!(
        base["why"].as_str().unwrap().contains("Dockerfile"),
        "{base}"
    );
    for dependent in ["tools", "web", "api", "worker"] {
        let m = modules.iter().find(|m| m["name"] == dependent).unwrap();
        assert!(m["ref"].is_null(), "{dependent} should be pending: {m}");
    }
    let moved = mesh.json(&["converge", "--json"]);
    for module in all {
        assert_eq!(decisions(&moved)[module], "build", "{moved}");
    }
    // rollout machines were sent; the record-policy machine is held until someone sends.
    let machines = states(&mesh);
    let api_machine = format!("{}-api-1", mesh.name);
    assert_eq!(machines[&api_machine], "held", "{machines:?}");
    assert!(
        machines
            .iter()
            .filter(|(n, _)| **n != api_machine)
            .all(|(_, s)| s == "current"),
        "{machines:?}"
    );
    let inspect = std::process::Command::new("docker")
        .args(["inspect", &by_hand])
        .output()
        .unwrap();
    let inspect: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let container = &inspect[0];
    assert_eq!(
        container["Image"],
        digest_of(&moved, "web").as_str(),
        "the hand-started machine was sent"
    );
    assert_eq!(container["State"]["Running"], true);
    let env: Vec<&str> = container["Config"]["Env"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e.as_str())
        .collect();
    assert!(env.contains(&"FOO=bar"), "{env:?}");
    assert_eq!(container["Config"]["Labels"]["team"], "blue");
    assert_eq!(
        container["HostConfig"]["RestartPolicy"]["Name"],
        "on-failure"
    );
    assert_eq!(
        container["HostConfig"]["RestartPolicy"]["MaximumRetryCount"],
        3
    );
    assert!(
        container["HostConfig"]["PortBindings"]["8080/tcp"].is_array(),
        "{}",
        container["HostConfig"]
    );
    assert_eq!(
        container["Config"]["Cmd"],
        serde_json::json!(["httpd", "-f", "-p", "8080", "-h", "/www"])
    );
    let leftovers = std::process::Command::new("docker")
        .args([
            "ps",
            "-a",
            "--filter",
            &format!("name={by_hand}.meshtop-previous"),
            "-q",
        ])
        .output()
        .unwrap();
    assert!(
        leftovers.stdout.is_empty(),
        "the old container is removed once the new one runs"
    );
    let exit = mesh.meshtop(&["status", "--exit-code"]);
    assert_eq!(
        exit.status.code(),
        Some(1),
        "a held machine is behind: {}",
        said(&exit)
    );
    let sent = mesh.meshtop(&["send", "api", "--yes"]);
    assert!(sent.status.success(), "{}", said(&sent));
    assert_eq!(states(&mesh)[&api_machine], "current");

    // 5. A forced rebuild: same tag, new digest — the machine is behind and send moves it.
    let before = digest_of(&moved, "api");
    let forced = mesh.json(&["converge", "--json", "--force", "api"]);
    assert_eq!(decisions(&forced)["api"], "forced");
    let after = digest_of(&forced, "api");
    assert_ne!(
        before, after,
        "a forced rebuild must produce a new artifact"
    );
    assert_eq!(states(&mesh)[&api_machine], "held");
    let refused_without_tty = mesh.meshtop(&["send", "api"]);
    assert_eq!(
        refused_without_tty.status.code(),
        Some(2),
        "{}",
        said(&refused_without_tty)
    );
    let sent = mesh.meshtop(&["send", "api", "--yes", "--json"]);
    assert!(sent.status.success(), "{}", said(&sent));
    assert_eq!(states(&mesh)[&api_machine], "current");
    let status = mesh.json(&["status", "--json"]);
    let api = status
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == api_machine.as_str())
        .unwrap();
    assert_eq!(
        api["built_by"]["digest"],
        after.as_str(),
        "status traces the running digest to its build: {api}"
    );
}

#[test]
fn a_failed_build_is_recorded_and_stamps_nothing() {
    let mesh = ExampleMesh::new("fail");
    let file = mesh.root().join("worker/Dockerfile");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("COPY no-such-file /nowhere\n");
    std::fs::write(&file, text).unwrap();
    let output = mesh.meshtop(&["converge", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    let summary: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["stamped"], false);
    // The summary and the event say which module kept the record from being stamped.
    assert_eq!(
        summary["record"], "nothing stamped: worker failed",
        "{summary}"
    );
    let failed = mesh.json(&["builds", "--failed", "--json"]);
    let rows = failed.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{failed}");
    assert_eq!(rows[0]["module"], "worker");
    assert_eq!(rows[0]["status"], "failed");
    assert!(
        rows[0]["error"].as_str().unwrap().contains("no-such-file"),
        "{}",
        rows[0]
    );
    assert!(
        !rows[0]["log_tail"].as_str().unwrap_or("").is_empty(),
        "the log tail is kept: {}",
        rows[0]
    );
    // Nothing was stamped: the next converge skips what was built because the host vouches for it.
    std::fs::write(
        &file,
        std::fs::read_to_string(&file)
            .unwrap()
            .replace("COPY no-such-file /nowhere\n", ""),
    )
    .unwrap();
    let again = mesh.json(&["converge", "--json"]);
    let decided = decisions(&again);
    for module in ["base", "tools", "web", "api"] {
        assert_eq!(decided[module], "host", "{again}");
    }
    assert_eq!(decided["worker"], "build");

    // A new artifact whose container dies at once: the send fails, the old machine runs again.
    let api_machine = format!("{}-api-1", mesh.name);
    let old_digest = digest_of(&again, "api");
    std::fs::write(
        mesh.root().join("api/app.sh"),
        "#!/bin/sh\necho broken >&2\nexit 3\n",
    )
    .unwrap();
    let broken = mesh.json(&["converge", "--json"]);
    assert_eq!(decisions(&broken)["api"], "build");
    assert_eq!(states(&mesh)[&api_machine], "held");
    let sent = mesh.meshtop(&["send", "api", "--yes"]);
    assert_eq!(sent.status.code(), Some(1), "{}", said(&sent));
    // It says how the new container failed its watch: it exited (with its code), or it restarted
    // (its declared machine restarts unless stopped).
    let text = said(&sent);
    assert!(
        text.contains("exit code 3") || text.contains("kept restarting"),
        "{text}"
    );
    let inspect = std::process::Command::new("docker")
        .args(["inspect", &api_machine])
        .output()
        .unwrap();
    let inspect: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(
        inspect[0]["Image"],
        old_digest.as_str(),
        "the old machine is back"
    );
    assert_eq!(inspect[0]["State"]["Running"], true);
}

#[test]
fn a_second_converge_of_the_same_mesh_is_refused_while_the_first_holds_it() {
    use meshtop::backends::state::{Holder, StateDb};
    let mesh = ExampleMesh::new("lock");
    let history = StateDb::open(&mesh.state()).unwrap();
    let holder = Holder {
        operation_id: "other-converge".into(),
        host: gethostname::gethostname().to_string_lossy().into_owned(),
        pid: std::process::id(),
        since_ms: 0,
        heartbeat_ms: meshtop::timefmt::now_ms(),
    };
    history
        .lock_mesh(&mesh.name, "default", &holder)
        .unwrap()
        .unwrap();
    let output = mesh.meshtop(&["converge"]);
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    let text = said(&output);
    assert!(
        text.contains("other-converge") && text.contains(&std::process::id().to_string()),
        "{text}"
    );
    history
        .unlock_mesh(&mesh.name, "default", "other-converge")
        .unwrap();
}
