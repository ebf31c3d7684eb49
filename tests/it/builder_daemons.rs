//! A pool of builders on two real Docker daemons (issue 32): the machine's own, and the second one
//! `scripts/start-second-daemon.sh` runs on its own socket, data-root and bridge. The second daemon is
//! reached through a proxy on a socket of the test's own (crates/testkit/src/daemon_proxy.rs), so that a
//! test can cut it mid-build without stopping a daemon other tests use. Every mesh carries a random
//! run id; what a test leaves on either daemon is removed when it ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::second_daemon::{SECOND, SECOND_SOCKET, SecondDaemonGuard, require_second_daemon};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::daemon_proxy::{DOCKER_SOCKET, DaemonProxy};
use common::local_registry::LOCAL;
use common::{ExampleMesh, builds, json_of, said, wait_exit};
use meshtop::backends::state::StateDb;
use meshtop::mesh::builds::BuildStatus;
use meshtop::mesh::progress::{EventRow, Payload};

/// The example mesh with the registry on loopback and `builders` (name, endpoint, max_builds);
/// its images are removed from the second daemon when the guard drops (the example mesh cleans
/// the first one).
struct PoolMesh {
    mesh: ExampleMesh,
    _second: SecondDaemonGuard,
}

fn pool_mesh(tag: &str, builders: &[(&str, &str, u32)]) -> PoolMesh {
    pool_mesh_at(tag, LOCAL, builders)
}

/// [`pool_mesh`] handing over through the registry at `registry` (a proxy in front of the real one).
fn pool_mesh_at(tag: &str, registry: &str, builders: &[(&str, &str, u32)]) -> PoolMesh {
    require_second_daemon();
    let mesh = ExampleMesh::new(tag);
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let mut text = text.replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!("name = \"{}\"\nregistry = \"{registry}\"\n", mesh.name),
        1,
    );
    for (name, endpoint, max_builds) in builders {
        text.push_str(&format!(
            "\n[[builder]]\nname = \"{name}\"\nendpoint = \"{endpoint}\"\nmax_builds = {max_builds}\n"
        ));
    }
    std::fs::write(&file, text).unwrap();
    let guard = SecondDaemonGuard(mesh.name.clone());
    PoolMesh {
        mesh,
        _second: guard,
    }
}

/// The pool most tests use: `one` the machine's daemon, `two` the second daemon behind a proxy on a
/// socket of the test's own (so a test can count or cut it), one build at once each.
struct ProxiedPool {
    pool: PoolMesh,
    /// Kept open while the test runs: `two` is reached through it.
    _proxy: DaemonProxy,
    _dir: tempfile::TempDir,
    /// The proxy's tasks run on it.
    _runtime: tokio::runtime::Runtime,
}

fn proxied_pool(tag: &str) -> ProxiedPool {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let proxy = {
        let _entered = runtime.enter();
        DaemonProxy::start(&dir.path().join("two.sock"), Path::new(SECOND_SOCKET))
    };
    let pool = pool_mesh(
        tag,
        &[
            ("one", &format!("unix://{DOCKER_SOCKET}"), 1),
            ("two", &proxy.docker_host(), 1),
        ],
    );
    ProxiedPool {
        pool,
        _proxy: proxy,
        _dir: dir,
        _runtime: runtime,
    }
}

/// Append `line` to the base's Dockerfile.
fn add_to_base(mesh: &ExampleMesh, line: &str) {
    let file = mesh.root().join("base/Dockerfile");
    let original = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{original}{line}")).unwrap();
}

/// Per module, the builders its builds went to (in order), as the converge's steps say.
fn built_on(mesh: &ExampleMesh) -> BTreeMap<String, Vec<String>> {
    let db = StateDb::open(&mesh.state()).unwrap();
    let mut on: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for event in db.events_after(&mesh.name, 0, usize::MAX).unwrap() {
        if let (Some(module), Some(Payload::Build { builder, .. })) =
            (&event.module, &event.payload)
        {
            on.entry(module.clone())
                .or_default()
                .push(builder.clone().unwrap_or_default());
        }
    }
    on
}

/// Every machine of the mesh runs the artifact the record names for its module.
fn machines_run_the_record(mesh: &ExampleMesh) {
    let output = mesh.meshtop(&["status", "--json", "--exit-code"]);
    let (rows, text) = json_of(&["status"], &output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    let record = StateDb::open(&mesh.state())
        .unwrap()
        .record(&mesh.name, "default")
        .unwrap();
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{text}");
    for row in rows {
        let module = row["module"].as_str().unwrap();
        let running: Vec<&str> = row["running"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(running, [record[module].digest.as_str()], "{row}");
    }
}

#[test]
fn two_builders_spread_a_tier_and_hand_bases_over_through_the_registry() {
    let pooled = proxied_pool("pool");
    let mesh = &pooled.pool.mesh;
    let output = mesh.meshtop(&["converge", "--jobs", "2", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("builder one (unix:///var/run/docker.sock) ready")
            && stderr.contains("the target's daemon"),
        "{stderr}"
    );
    assert!(stderr.contains("builder two ("), "{stderr}");

    let on = built_on(mesh);
    assert_eq!(on.len(), 5, "every module built once: {on:?}");
    let count = |builder: &str| on.values().filter(|b| b[0] == builder).count();
    assert!(
        count("one") >= 1 && count("two") >= 1,
        "both builders built: {on:?}"
    );
    // Tier 1 (tools, web) shares base's builder at one build at once: one of them spilled to the
    // other builder and took the base from the registry, by digest.
    let base_on = on["base"][0].clone();
    let moved: Vec<&str> = ["tools", "web", "api", "worker"]
        .into_iter()
        .filter(|m| {
            let base = if *m == "tools" || *m == "web" {
                base_on.as_str()
            } else {
                on["tools"][0].as_str()
            };
            on[*m][0] != base
        })
        .collect();
    assert!(
        !moved.is_empty(),
        "no dependent left its base's builder: {on:?}"
    );
    let rows = builds(mesh);
    for module in &moved {
        let row = rows
            .iter()
            .find(|r| r.module.as_deref() == Some(*module))
            .unwrap();
        let base = row.base_module.clone().unwrap();
        let base_row = rows
            .iter()
            .find(|r| r.module.as_deref() == Some(base.as_str()))
            .unwrap();
        // Built FROM the base's very artifact: its layers start with the base's. The builder never
        // built the base and the daemons share nothing but the registry, where the base was pushed.
        let layers = |id: &str| {
            common::local_registry::docker(&[
                "image",
                "inspect",
                "--format",
                "{{json .RootFS.Layers}}",
                id,
            ])
            .trim()
            .trim_end_matches(']')
            .to_string()
        };
        let (mine, base_layers) = (
            layers(row.digest.as_deref().unwrap()),
            layers(base_row.digest.as_deref().unwrap()),
        );
        assert!(
            mine.starts_with(&base_layers),
            "{module} (on {}) is built FROM {base} (on {}): {mine} / {base_layers}",
            on[*module][0],
            on[base.as_str()][0]
        );
        assert!(base_row.published_digest.is_some(), "{base_row:?}");
    }
    // Every build another daemon needs was pushed by its builder (what two built, for the target
    // to pull; a base, for a dependent elsewhere); a leaf the target's own daemon built stays
    // there. The target holds every artifact.
    for row in &rows {
        assert_eq!(row.status, BuildStatus::Succeeded, "{row:?}");
        let module = row.module.as_deref().unwrap();
        let stays = on[module][0] == "one" && !["base", "tools"].contains(&module);
        assert_eq!(row.published_digest.is_none(), stays, "{on:?}: {row:?}");
    }
    machines_run_the_record(mesh);
}

/// Whether the registry holds `module`'s ref of `mesh` (its tag as the build row names it).
fn tagged(row: &meshtop::mesh::builds::BuildRow) -> bool {
    let reference = row.reference.clone().unwrap();
    let (repository, tag) = meshtop::backends::registry::repository_in(LOCAL, &reference);
    common::signing::get(
        &format!("/v2/{repository}/manifests/{tag}"),
        "application/vnd.docker.distribution.manifest.v2+json",
    )
    .is_some()
}

/// A build of the builder that is the target's daemon stays there when nothing needs it
/// elsewhere: no hand-over push of a module no other builds FROM (with one build at once every
/// module lands on `one`, the host, its base's builder); its bases are handed over.
#[test]
fn a_host_build_nothing_needs_elsewhere_is_not_handed_over() {
    let pooled = proxied_pool("stay");
    let mesh = &pooled.pool.mesh;
    let output = mesh.meshtop(&["converge", "--jobs", "1"]);
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    let on = built_on(mesh);
    assert!(on.values().all(|b| b == &["one"]), "{on:?}");
    let rows = builds(mesh);
    assert_eq!(rows.len(), 5, "{rows:#?}");
    for row in &rows {
        let module = row.module.as_deref().unwrap();
        let base = ["base", "tools"].contains(&module);
        assert_eq!(row.published_digest.is_some(), base, "{row:#?}");
        assert_eq!(tagged(row), base, "{module} in the registry: {row:#?}");
    }
    machines_run_the_record(mesh);
}

/// A module's hand-over push runs after its build gave the builder's slot back: while `web`'s push
/// (built on `two`, `tools` holding `one` with a slow step) hangs on the registry, `two` builds
/// the tier's next module (`zeta`, queued after `web` by name); the hung push fails `web` at its
/// deadline, as before.
#[test]
fn a_hand_over_push_holds_no_build_slot() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let registry = runtime.block_on(common::registry_proxy::RegistryProxy::stalling(
        "/web/manifests/",
    ));
    let pool = pool_mesh_at(
        "slot",
        &registry.host,
        &[
            ("one", &format!("unix://{DOCKER_SOCKET}"), 1),
            ("two", SECOND, 1),
        ],
    );
    let mesh = &pool.mesh;
    // tools (first of its tier: two wait on it) on base's builder `one`, slow; web spills to two.
    let tools = mesh.root().join("tools/Dockerfile");
    let text = std::fs::read_to_string(&tools).unwrap();
    std::fs::write(&tools, format!("{text}{}", common::fresh_run("sleep 10"))).unwrap();
    // A third module of the tier, FROM base, waiting for a slot.
    let extra = mesh.root().join("zeta");
    std::fs::create_dir_all(&extra).unwrap();
    std::fs::write(
        extra.join("Dockerfile"),
        format!("ARG BASE\nFROM ${{BASE}}\n{}", common::fresh_run("true")),
    )
    .unwrap();
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let (head, machines) = text.split_once("[[machine]]").unwrap();
    std::fs::write(
        &file,
        format!(
            "{head}[[module]]\nname = \"zeta\"\ncontext = \"zeta\"\nbase = \"base\"\n\n[[machine]]{machines}"
        ),
    )
    .unwrap();
    let log = mesh.dir.path().join("converge.log");
    let mut child = mesh.spawn_converge(&log, &[("MESHTOP_BUILD_DEADLINE", "30")]);
    let status = wait_exit(&mut child, Duration::from_secs(180), "the push's deadline");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "web's push hangs: {stderr}");
    let on = built_on(mesh);
    assert_eq!(on["tools"], ["one"], "{on:?}\n{stderr}");
    assert_eq!(on["web"], ["two"], "{on:?}\n{stderr}");
    assert_eq!(
        on["zeta"],
        ["two"],
        "two built the next module while web's push hung: {on:?}\n{stderr}"
    );
    let rows = builds(mesh);
    let extra = rows
        .iter()
        .find(|r| r.module.as_deref() == Some("zeta"))
        .unwrap();
    assert_eq!(extra.status, BuildStatus::Succeeded, "{extra:#?}");
    assert!(
        stderr.contains("the push did not end within 30 s (MESHTOP_BUILD_DEADLINE)"),
        "{stderr}"
    );
}

/// What another builder built is brought to the target as its build ends, while the tier's other
/// builds go on: `web` (spilled to `two`) is pulled onto the host while `tools` (on `one`, a slow
/// step) still builds, not once the whole tier ended.
#[test]
fn a_build_of_another_builder_is_delivered_while_its_tier_still_builds() {
    let pooled = proxied_pool("early");
    let mesh = &pooled.pool.mesh;
    // tools' step waits for the test, not a guessed number of seconds: it is let go once web
    // was pulled, so web's pull cannot race tools' end.
    let (held, gate) = common::held_run("true");
    let tools = mesh.root().join("tools/Dockerfile");
    let text = std::fs::read_to_string(&tools).unwrap();
    std::fs::write(&tools, format!("{text}{held}")).unwrap();
    let log = mesh.dir.path().join("converge.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .args(["converge", "--jobs", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let said_so_far = || std::fs::read_to_string(&log).unwrap_or_default();
    let steps = || {
        StateDb::open(&mesh.state())
            .unwrap()
            .events_after(&mesh.name, 0, usize::MAX)
            .unwrap()
    };
    let at = |steps: &[EventRow], module: &str, what: &dyn Fn(&Payload) -> bool| {
        steps
            .iter()
            .find(|s| s.module.as_deref() == Some(module) && s.payload.as_ref().is_some_and(what))
            .map(|s| s.at_ms)
    };
    let pulled = |p: &Payload| {
        matches!(
            p,
            Payload::Delivered {
                by: meshtop::mesh::progress::DeliveredBy::Pulled { .. },
                ..
            }
        )
    };
    let built = |p: &Payload| matches!(p, Payload::Built { .. });
    // While tools' step is held: web is built on two and pulled onto the host (and tools' step
    // reached its hold, to be let go).
    common::wait_for(
        "web pulled onto the host while tools' step still ran",
        Duration::from_secs(180),
        || {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("the converge ended ({status}) first:\n{}", said_so_far());
            }
            let steps = steps();
            assert_eq!(
                at(&steps, "tools", &built),
                None,
                "tools built while its step was held:\n{}",
                said_so_far()
            );
            at(&steps, "web", &pulled).ok_or_else(said_so_far)?;
            if common::processes_saying(&gate).is_empty() {
                return Err(format!(
                    "tools' step not at its hold yet:\n{}",
                    said_so_far()
                ));
            }
            Ok(())
        },
    );
    common::let_go(&gate);
    let status = wait_exit(&mut child, Duration::from_secs(180), "tools' step let go");
    assert_eq!(status.code(), Some(0), "{}", said_so_far());
    let on = built_on(mesh);
    assert_eq!(
        (&on["tools"][..], &on["web"][..]),
        (&["one".to_string()][..], &["two".to_string()][..]),
        "{on:?}"
    );
    let steps = steps();
    let web_pulled = at(&steps, "web", &pulled).unwrap();
    let tools_built = at(&steps, "tools", &built)
        .unwrap_or_else(|| panic!("tools never built: {}", said_so_far()));
    assert!(
        web_pulled < tools_built,
        "web was pulled at {web_pulled}, after tools built at {tools_built}: {}",
        said_so_far()
    );
    machines_run_the_record(mesh);
}

#[test]
fn a_failing_step_is_not_retried_on_another_builder() {
    let pooled = proxied_pool("fstep");
    let mesh = &pooled.pool.mesh;
    add_to_base(mesh, &common::fresh_run("exit 3"));
    let output = mesh.meshtop(&["converge"]);
    let text = said(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(!text.contains("retrying once"), "{text}");
    let rows = builds(mesh);
    assert_eq!(rows.len(), 1, "one attempt, no retry: {rows:#?}");
    assert_eq!(rows[0].status, BuildStatus::Failed);
    assert_eq!(built_on(mesh)["base"].len(), 1);
}

#[test]
fn an_unreachable_builder_is_said_and_left_out_and_the_others_build() {
    let pool = pool_mesh(
        "gone",
        &[
            ("one", &format!("unix://{DOCKER_SOCKET}"), 2),
            ("gone", "unix:///nonexistent/meshtop-test/docker.sock", 1),
        ],
    );
    let mesh = &pool.mesh;
    let output = mesh.meshtop(&["converge"]);
    let text = said(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains("builder gone (unix:///nonexistent/meshtop-test/docker.sock) is left out of this converge")
            && text.contains("/nonexistent/meshtop-test/docker.sock"),
        "{text}"
    );
    let on = built_on(mesh);
    assert!(on.values().all(|b| b == &["one"]), "{on:?}");
    machines_run_the_record(mesh);

    // `meshtop builders` says the same, and exits 1 while a builder is out.
    let output = mesh.meshtop(&["builders", "--json"]);
    let text = said(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        json["queued"],
        serde_json::Value::Null,
        "no converge runs: {text}"
    );
    let by_name: BTreeMap<&str, &serde_json::Value> = json["builders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["name"].as_str().unwrap(), b))
        .collect();
    assert_eq!(by_name["one"]["state"], "ready", "{text}");
    assert_eq!(by_name["one"]["target_daemon"], true, "{text}");
    assert_eq!(by_name["one"]["max_builds"], 2, "{text}");
    assert!(by_name["one"]["version"].as_str().is_some(), "{text}");
    assert_eq!(by_name["gone"]["state"], "out", "{text}");
    assert!(
        by_name["gone"]["error"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/meshtop-test/docker.sock"),
        "{text}"
    );
    let table = mesh.meshtop(&["builders"]);
    let table_text = String::from_utf8_lossy(&table.stdout);
    assert_eq!(table.status.code(), Some(1), "{}", said(&table));
    assert!(
        table_text
            .lines()
            .any(|l| l.starts_with("gone") && l.contains(" out ")),
        "{table_text}"
    );
}

#[test]
fn a_builder_that_is_not_the_targets_daemon_needs_the_registry() {
    require_second_daemon();
    let mesh = ExampleMesh::new("noreg");
    let file = mesh.mesh_file();
    let mut text = std::fs::read_to_string(&file).unwrap();
    // One builder at the default socket passes the mesh file's check; the target's daemon is the
    // second one here (DOCKER_HOST), so the builder is not the target's daemon.
    text.push_str("\n[[builder]]\nname = \"here\"\nendpoint = \"unix:///var/run/docker.sock\"\n");
    std::fs::write(&file, text).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env("DOCKER_HOST", SECOND)
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .arg("converge")
        .output()
        .unwrap();
    let text = said(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains("has no registry")
            && text
                .contains("builder here (unix:///var/run/docker.sock) is not the target's daemon")
            && text.contains("registry = \"host:port\""),
        "{text}"
    );
    assert!(builds(&mesh).is_empty(), "nothing was built");
}

#[test]
fn a_build_past_its_deadline_is_stopped_retried_once_and_fails_the_converge() {
    let pooled = proxied_pool("late");
    let mesh = &pooled.pool.mesh;
    let step = common::run_id();
    add_to_base(mesh, &format!("RUN sleep 120; true # step {step}\n"));
    let log = mesh.dir.path().join("converge.log");
    let started = Instant::now();
    let mut child = mesh.spawn_converge(&log, &[("MESHTOP_BUILD_DEADLINE", "6")]);
    // Two attempts of 6 s each and the converge's own work: far from the step's 120 s.
    let status = wait_exit(&mut child, Duration::from_secs(90), "the build's deadline");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(90),
        "the converge waited for the step: {:?}",
        started.elapsed()
    );
    assert!(
        stderr.contains("did not end the build within 6 s (MESHTOP_BUILD_DEADLINE)")
            && stderr.contains("retrying once on builder"),
        "the deadline and the retry are said:\n{stderr}"
    );
    let on = built_on(mesh);
    let mut tried = on["base"].clone();
    tried.sort();
    assert_eq!(tried, ["one", "two"], "once on each builder: {on:?}");
    let rows: Vec<_> = builds(mesh)
        .into_iter()
        .filter(|r| r.module.as_deref() == Some("base"))
        .collect();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    for row in &rows {
        assert_eq!(
            row.status,
            BuildStatus::Failed,
            "nothing stays running: {row:#?}"
        );
        assert!(row.ended_ms.is_some(), "{row:#?}");
        assert!(
            row.error
                .as_deref()
                .unwrap_or_default()
                .contains("within 6 s"),
            "{row:#?}"
        );
    }
    let record = StateDb::open(&mesh.state())
        .unwrap()
        .record(&mesh.name, "default")
        .unwrap();
    assert!(
        record.is_empty(),
        "a failed converge stamps nothing: {record:?}"
    );
    // The builders stopped the step when meshtop dropped the build: no 120 s sleep goes on.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !common::processes_saying(&step).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the step still runs after the deadline: {:?}",
            common::processes_saying(&step)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_hand_over_push_past_its_deadline_fails_the_module_and_stamps_nothing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    // Every builder passes its check (its push to meshtop-check is answered); base's manifest
    // PUT is held open by the registry, as a registry whose storage hangs holds it.
    let registry = runtime.block_on(common::registry_proxy::RegistryProxy::stalling(
        "/base/manifests/",
    ));
    let pool = pool_mesh_at(
        "hang",
        &registry.host,
        &[
            ("one", &format!("unix://{DOCKER_SOCKET}"), 1),
            ("two", SECOND, 1),
        ],
    );
    let mesh = &pool.mesh;
    let log = mesh.dir.path().join("converge.log");
    let started = Instant::now();
    // Room for base's build (seconds) on a busy machine; the push then waits for ever.
    let mut child = mesh.spawn_converge(&log, &[("MESHTOP_BUILD_DEADLINE", "20")]);
    let status = wait_exit(&mut child, Duration::from_secs(120), "the push's deadline");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "could not push {}/{}/base:",
            registry.host, mesh.name
        )) && stderr.contains("the push did not end within 20 s (MESHTOP_BUILD_DEADLINE)"),
        "the push's deadline is said:\n{stderr}"
    );
    assert!(started.elapsed() < Duration::from_secs(120));
    let db = StateDb::open(&mesh.state()).unwrap();
    assert!(
        db.record(&mesh.name, "default").unwrap().is_empty(),
        "nothing is stamped while an artifact is not in the registry"
    );
    let rows = builds(mesh);
    assert!(
        rows.iter().all(|r| r.status != BuildStatus::Running),
        "{rows:#?}"
    );
    assert!(
        rows.iter()
            .filter(|r| r.module.as_deref() == Some("base"))
            .all(|r| r.published_digest.is_none()),
        "{rows:#?}"
    );
}

/// A builder at `ssh://` is dialled as the docker CLI dials it: each connection one
/// `ssh … docker system dial-stdio`, through a real sshd on loopback. Its daemon there is the
/// machine's own, so the check finds it is the target's daemon and it builds everything.
#[test]
fn a_builder_over_ssh_is_dialled_as_the_docker_cli_does_and_builds() {
    let sshd = common::sshd::Sshd::start();
    let pool = pool_mesh("ssh", &[("far", &sshd.endpoint(), 2)]);
    let mesh = &pool.mesh;
    let log = mesh.dir.path().join("converge.log");
    let path = sshd.path();
    let mut child = mesh.spawn_converge(&log, &[("PATH", path.as_str())]);
    let status = wait_exit(
        &mut child,
        Duration::from_secs(240),
        "the converge over ssh",
    );
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}\nsshd:\n{}", sshd.log());
    assert!(
        stderr.contains(&format!("builder far ({}) ready", sshd.endpoint()))
            && stderr.contains("the target's daemon"),
        "{stderr}"
    );
    assert!(
        sshd.connections() >= 2,
        "meshtop's calls went through ssh: {} connection(s)",
        sshd.connections()
    );
    let on = built_on(mesh);
    assert_eq!(on.len(), 5, "{on:?}");
    assert!(on.values().all(|b| b == &["far"]), "{on:?}");
    machines_run_the_record(mesh);
}

/// An ssh that cannot log in says why (ssh's own words), the builder is left out, the others build.
#[test]
fn a_builder_whose_ssh_is_refused_is_left_out_with_sshs_reason() {
    let sshd = common::sshd::Sshd::start();
    // Another key: the server knows only the first one.
    std::fs::remove_file(sshd.client_key()).unwrap();
    std::fs::remove_file(sshd.client_key().with_extension("pub")).unwrap();
    let ok = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(sshd.client_key())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let pool = pool_mesh(
        "sshno",
        &[
            ("one", &format!("unix://{DOCKER_SOCKET}"), 2),
            ("far", &sshd.endpoint(), 1),
        ],
    );
    let mesh = &pool.mesh;
    let log = mesh.dir.path().join("converge.log");
    let path = sshd.path();
    let mut child = mesh.spawn_converge(&log, &[("PATH", path.as_str())]);
    let status = wait_exit(&mut child, Duration::from_secs(240), "the converge");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "builder far ({}) is left out of this converge",
            sshd.endpoint()
        )) && stderr.contains("ssh could not reach its daemon")
            && stderr.contains("Permission denied"),
        "{stderr}"
    );
    let on = built_on(mesh);
    assert!(on.values().all(|b| b == &["one"]), "{on:?}");
}
