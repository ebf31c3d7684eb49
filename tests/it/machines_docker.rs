//! Machines on the real Docker daemon are exactly the mesh's machines: declared ones that do not
//! exist are `missing`, and a builder's container (which inherits `jr2.dev/module` from its base
//! image), running or left behind by a failed step, is never one (issue 14).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{ExampleMesh, said, wait_exit};

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

/// Names of the containers on the daemon carrying `jr2.dev/module=<module>` of this mesh.
fn module_containers(mesh: &ExampleMesh, module: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args(["ps", "-a", "--format", "{{.Names}}"])
        .args(["--filter", &format!("label=jr2.dev/module={module}")])
        .args(["--filter", &format!("label=jr2.dev/mesh={}", mesh.name)])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", said(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn declared_machines_that_do_not_exist_are_missing_and_count() {
    let mesh = ExampleMesh::new("miss");
    let machines = states(&mesh);
    assert_eq!(machines.len(), 3, "{machines:?}");
    assert!(machines.values().all(|s| s == "missing"), "{machines:?}");
    let text = mesh.meshtop(&["status"]);
    assert!(text.status.success(), "{}", said(&text));
    assert!(
        String::from_utf8_lossy(&text.stdout).contains("3 missing"),
        "{}",
        said(&text)
    );
    let exit = mesh.meshtop(&["status", "--exit-code"]);
    assert_eq!(exit.status.code(), Some(1), "{}", said(&exit));
}

#[test]
fn builder_containers_are_never_machines() {
    let mesh = ExampleMesh::new("bldr");
    let first = mesh.json(&["converge", "--json", "base"]);
    assert_eq!(first["stamped"], true, "{first}");
    assert_eq!(
        first["operation"], 1,
        "the first operation of the mesh is #1: {first}"
    );

    // web's build runs a step in a container made from base's image: it wears base's labels.
    let file = mesh.root().join("web/Dockerfile");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace(
            "COPY www/ /www/",
            "COPY www/ /www/\nRUN echo building; sleep 8; echo 'the step broke' >&2; exit 3",
        ),
    )
    .unwrap();
    let log = mesh.dir.path().join("converge.log");
    // Only the legacy builder (meshtop's fallback) runs a step in a daemon container; BuildKit's
    // steps run in its own executor and never appear in the daemon's container list.
    let mut child = mesh.spawn_converge(&log, &[("DOCKER_BUILDKIT", "0")]);

    // During the build: the step's container exists and is no machine.
    let deadline = Instant::now() + Duration::from_secs(60);
    let during = loop {
        let found = module_containers(&mesh, "base");
        if !found.is_empty() {
            break found;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the converge ended before the step's container was seen:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        assert!(Instant::now() < deadline, "no builder container appeared");
        std::thread::sleep(Duration::from_millis(100));
    };
    let listed = states(&mesh);
    for name in &during {
        assert!(
            !listed.contains_key(name),
            "builder container {name} listed as a machine: {listed:?}"
        );
    }

    // After the failed step: the builder removes its container (forcerm), but one left behind
    // (a daemon restart, a killed build) looks like this one: made from base's image with no
    // labels of its own, exited with the step's code. It inherits jr2.dev/module=base.
    let status = wait_exit(&mut child, Duration::from_secs(120), "the failing step");
    assert!(!status.success(), "the broken step must fail the converge");
    let base_digest = first["modules"][0]["digest"].as_str().unwrap().to_string();
    let leftover = format!("{}-leftover-step", mesh.name);
    let run = Command::new("docker")
        .args([
            "run",
            "--name",
            &leftover,
            &base_digest,
            "sh",
            "-c",
            "exit 3",
        ])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(3), "{}", said(&run));
    let left = module_containers(&mesh, "base");
    assert!(left.contains(&leftover), "{left:?}");
    let listed = states(&mesh);
    for name in &left {
        assert!(
            !listed.contains_key(name),
            "left-behind builder container {name} listed as a machine: {listed:?}"
        );
    }
    let web: Vec<_> = listed.keys().filter(|n| n.contains("-web-")).collect();
    assert_eq!(web.len(), 1, "{listed:?}");
    assert_eq!(listed[web[0]], "missing", "{listed:?}");
}
