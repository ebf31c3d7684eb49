//! Builds on the daemon's BuildKit (issue 22), against the real daemon: cache mounts that a second
//! build finds again, secrets served through the build's session and found nowhere afterwards, a
//! missing secret refused before anything builds, the ssh agent forwarded to a RUN that mounts it
//! (the real ssh-agent, asked by a static client in the build), a failed RUN that names its
//! instruction and output, meshtop's labels as image metadata, and the legacy builder as a fallback
//! of its own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::Command;

use crate::common::ssh_agent::Agent;
use common::{ExampleMesh, builds, read_in_image, said};
use meshtop::backends::state::StateDb;
use meshtop::mesh::builds::BuildStatus;
use meshtop::mesh::live::{LiveOperation, ModuleRun};

/// The example mesh with one more module, `extra`: busybox, `input.txt` and `dockerfile`. Its
/// mesh-file table gets `keys` (e.g. `secrets = …`).
fn with_extra(tag: &str, dockerfile: &str, keys: &str) -> ExampleMesh {
    let mesh = ExampleMesh::new(tag);
    let dir = mesh.root().join("extra");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy("/bin/busybox", dir.join("busybox")).unwrap();
    std::fs::write(dir.join("input.txt"), "one\n").unwrap();
    std::fs::write(dir.join("Dockerfile"), dockerfile).unwrap();
    let file = mesh.mesh_file();
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&format!(
        "\n[[module]]\nname = \"extra\"\ncontext = \"extra\"\n{keys}\n"
    ));
    std::fs::write(&file, text).unwrap();
    mesh
}

fn converge(mesh: &ExampleMesh, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    mesh.converge_with(args, env)
}

/// The ref `extra` was built as, from the newest successful build row.
fn extra_ref(mesh: &ExampleMesh) -> String {
    builds(mesh)
        .into_iter()
        .find(|b| b.module.as_deref() == Some("extra") && b.status == BuildStatus::Succeeded)
        .and_then(|b| b.reference)
        .expect("a successful build of extra")
}

fn docker_text(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(out.status.success(), "docker {args:?}: {}", said(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_cache_mount_builds_and_the_next_build_finds_it_again() {
    let id = format!("meshtop-test-cache-{}", common::run_id());
    let dockerfile = format!(
        "FROM scratch\nCOPY busybox /bin/busybox\nCOPY input.txt /input.txt\n\
         RUN --mount=type=cache,target=/cache,id={id} [\"/bin/busybox\", \"sh\", \"-c\", \
         \"/bin/busybox cat /cache/stamp > /seen 2>/dev/null || echo none > /seen; /bin/busybox cp /input.txt /cache/stamp\"]\n"
    );
    let mesh = with_extra("bkcache", &dockerfile, "");
    let first = converge(&mesh, &[], &[]);
    assert!(first.status.success(), "{}", said(&first));
    let first_ref = extra_ref(&mesh);
    assert_eq!(read_in_image(&first_ref, "/seen"), "none");

    // A new input reruns the RUN step, which finds what the first build left in the cache.
    std::fs::write(mesh.root().join("extra/input.txt"), "two\n").unwrap();
    let second = converge(&mesh, &[], &[]);
    assert!(second.status.success(), "{}", said(&second));
    let second_ref = extra_ref(&mesh);
    assert_ne!(first_ref, second_ref, "the input moved the address");
    assert_eq!(read_in_image(&second_ref, "/seen"), "one");

    // meshtop's labels are image metadata, the full input digest among them; no step sets them.
    let labels: serde_json::Value = serde_json::from_str(&docker_text(&[
        "image",
        "inspect",
        "--format",
        "{{json .Config.Labels}}",
        &second_ref,
    ]))
    .unwrap();
    assert_eq!(labels["jr2.dev/module"], "extra");
    assert_eq!(labels["jr2.dev/mesh"], mesh.name.as_str());
    let inputs = labels["jr2.dev/inputs"].as_str().unwrap();
    let hash12 = second_ref
        .rsplit(':')
        .next()
        .unwrap()
        .split('-')
        .next()
        .unwrap();
    assert!(
        inputs.len() == 64 && inputs.starts_with(hash12),
        "the full digest of {second_ref}: {inputs}"
    );
    let history = docker_text(&[
        "history",
        "--no-trunc",
        "--format",
        "{{.CreatedBy}}",
        &second_ref,
    ]);
    assert!(!history.contains("LABEL"), "no label step:\n{history}");
    let _ = Command::new("docker")
        .args(["builder", "prune", "-f", "--filter", &format!("id={id}")])
        .output();
}

/// Every byte of the state database (and its journal) that could hold a value.
fn state_bytes(state: &Path) -> Vec<u8> {
    let mut all = Vec::new();
    for suffix in ["", "-wal", "-journal"] {
        let path = format!("{}{suffix}", state.display());
        all.extend(std::fs::read(path).unwrap_or_default());
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[test]
fn secrets_are_served_to_the_build_and_kept_nowhere() {
    let file_secret = format!("file-secret-{}-7f3a9", common::run_id());
    let env_secret = format!("env-secret-{}-c41d2", common::run_id());
    let dockerfile = "FROM scratch\nCOPY busybox /bin/busybox\nCOPY input.txt /input.txt\n\
         RUN --mount=type=secret,id=npmrc --mount=type=secret,id=token [\"/bin/busybox\", \"sh\", \"-c\", \
         \"/bin/busybox sha256sum /run/secrets/npmrc /run/secrets/token | /bin/busybox cut -d' ' -f1 > /sums\"]\n";
    let keys = "secrets = [{ id = \"npmrc\", src = \"../npmrc\" }, { id = \"token\", env = \"MESHTOP_TEST_TOKEN\" }]";
    let mesh = with_extra("bksecret", dockerfile, keys);
    // BuildKit's cache key of a RUN step leaves its secrets out (a new value alone reruns nothing,
    // as the docs say): a context of this run's own keeps an earlier run's cached step away.
    let nonce = format!("{:?}", std::time::SystemTime::now());
    std::fs::write(mesh.root().join("extra/input.txt"), nonce).unwrap();
    std::fs::write(mesh.dir.path().join("npmrc"), &file_secret).unwrap();
    let out = converge(&mesh, &[], &[("MESHTOP_TEST_TOKEN", &env_secret)]);
    assert!(out.status.success(), "{}", said(&out));

    // The build saw both values: their digests are in the image, the values are not.
    let reference = extra_ref(&mesh);
    let sums = read_in_image(&reference, "/sums");
    let sha = |v: &str| {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(v.as_bytes()))
    };
    assert_eq!(sums, format!("{}\n{}", sha(&file_secret), sha(&env_secret)));

    let history = docker_text(&["history", "--no-trunc", &reference]);
    let inspect = docker_text(&["image", "inspect", &reference]);
    let rows = builds(&mesh);
    let record = format!("{rows:?}");
    let listing = said(&mesh.meshtop(&["builds", "--json"]));
    let events = StateDb::open(&mesh.state())
        .unwrap()
        .events_tail(&mesh.name, 10_000)
        .unwrap();
    let events = format!("{events:?}");
    let state = state_bytes(&mesh.state());
    for secret in [&file_secret, &env_secret] {
        assert!(
            !history.contains(secret.as_str()),
            "image history: {history}"
        );
        assert!(
            !inspect.contains(secret.as_str()),
            "image config: {inspect}"
        );
        assert!(!record.contains(secret.as_str()), "build record: {record}");
        assert!(!listing.contains(secret.as_str()), "builds: {listing}");
        assert!(
            !said(&out).contains(secret.as_str()),
            "the converge's output"
        );
        assert!(!events.contains(secret.as_str()), "the log of the converge");
        assert!(!contains(&state, secret), "the state database's bytes");
    }

    // Secrets are not inputs: another value builds nothing new.
    std::fs::write(mesh.dir.path().join("npmrc"), "another value").unwrap();
    let plan = mesh.json(&["plan", "--json"]);
    let extra = plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "extra")
        .unwrap()
        .clone();
    assert_eq!(extra["ref"].as_str(), Some(reference.as_str()), "{extra}");
    assert_ne!(extra["decision"], "build", "{extra}");
}

#[test]
fn a_missing_secret_is_refused_before_anything_builds() {
    let dockerfile = "FROM scratch\nCOPY busybox /bin/busybox\n\
         RUN --mount=type=secret,id=npmrc [\"/bin/busybox\", \"true\"]\n";
    let keys = "secrets = [{ id = \"npmrc\", src = \"~/.meshtop-test-no-such-npmrc\" }, { id = \"token\", env = \"MESHTOP_TEST_UNSET_TOKEN\" }]";
    let mesh = with_extra("bknosecret", dockerfile, keys);
    let out = converge(&mesh, &[], &[]);
    assert!(!out.status.success(), "{}", said(&out));
    let text = said(&out);
    assert!(
        text.contains("module extra: secret npmrc (src = \"~/.meshtop-test-no-such-npmrc\")"),
        "module, id and source: {text}"
    );
    assert!(
        builds(&mesh).is_empty(),
        "nothing was built: {:?}",
        builds(&mesh)
    );
    let images = docker_text(&[
        "images",
        "-q",
        "--filter",
        &format!("label=jr2.dev/mesh={}", mesh.name),
    ]);
    assert!(images.trim().is_empty(), "no image: {images}");
}

#[test]
fn a_failed_run_names_its_instruction_and_its_output() {
    let dockerfile = "FROM scratch\nCOPY busybox /bin/busybox\n\
         RUN [\"/bin/busybox\", \"sh\", \"-c\", \"echo making-the-thing; echo it-broke-badly; exit 3\"]\n";
    let mesh = with_extra("bkfail", dockerfile, "");
    let out = converge(&mesh, &[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));

    let rows = mesh.json(&["builds", "--failed", "--json"]);
    let row = &rows.as_array().unwrap()[0];
    assert_eq!(row["module"], "extra", "{row}");
    let error = row["error"].as_str().unwrap();
    let first = error.lines().next().unwrap();
    assert!(
        first.contains("RUN") && first.contains("exit 3") && first.contains("2/2"),
        "the first line names the instruction: {error}"
    );
    assert!(error.contains("it-broke-badly"), "and its output: {error}");
    let tail = row["log_tail"].as_str().unwrap();
    assert!(tail.contains("it-broke-badly"), "the log tail: {tail}");

    // What the dashboard's detail shows: the module's state folded from the converge's steps.
    let events = StateDb::open(&mesh.state())
        .unwrap()
        .events_tail(&mesh.name, 10_000)
        .unwrap();
    let mut live = LiveOperation::new(&events[0]);
    for event in &events {
        live.apply(event);
    }
    match &live.modules["extra"].run {
        ModuleRun::Failed(text) => {
            assert!(
                text.contains("RUN") && text.contains("it-broke-badly"),
                "{text}"
            );
        }
        other => panic!("extra should have failed: {other:?}"),
    }
    let listing = said(&mesh.meshtop(&["builds", "--failed"]));
    assert!(listing.contains("RUN"), "{listing}");
}

#[test]
fn a_buildkit_build_reports_its_steps_as_n_of_m() {
    let dockerfile = "FROM scratch\nCOPY busybox /bin/busybox\nCOPY input.txt /input.txt\n\
         RUN [\"/bin/busybox\", \"true\"]\n";
    let mesh = with_extra("bksteps", dockerfile, "");
    let out = converge(&mesh, &[], &[]);
    assert!(out.status.success(), "{}", said(&out));
    let events = StateDb::open(&mesh.state())
        .unwrap()
        .events_tail(&mesh.name, 10_000)
        .unwrap();
    let output: Vec<&str> = events
        .iter()
        .filter(|e| e.module.as_deref() == Some("extra"))
        .map(|e| e.text.as_str())
        .collect();
    // The live state reads `building n/m` from these steps' data (the builder's place, read
    // where the line arrived: mesh::progress::builder_step).
    let steps: Vec<(u32, u32)> = events
        .iter()
        .filter(|e| e.module.as_deref() == Some("extra"))
        .filter_map(|e| match e.payload {
            Some(meshtop::mesh::progress::Payload::Output { builder_step }) => builder_step,
            _ => None,
        })
        .collect();
    assert!(steps.contains(&(3, 3)), "{output:#?}");
    let mut live = LiveOperation::new(&events[0]);
    let build_at = events
        .iter()
        .position(|e| e.module.as_deref() == Some("extra") && e.text.contains("[3/3] RUN"))
        .expect("the RUN step's line");
    for event in &events[..=build_at] {
        live.apply(event);
    }
    match &live.modules["extra"].run {
        ModuleRun::Building { step, .. } => assert_eq!(*step, Some((3, 3))),
        other => panic!("extra is building at that line: {other:?}"),
    }
    assert!(
        !output.iter().any(|l| l.contains("legacy builder")),
        "BuildKit built: {output:#?}"
    );
}

#[test]
fn the_legacy_builder_is_a_fallback_said_once_with_why() {
    let mesh = ExampleMesh::new("bklegacy");
    // `--force` builds with the cache off: the legacy builder's cached intermediate images are
    // shared by every build of the same steps, and another test removing its images took one
    // from under this build once ("unable to find image").
    let out = converge(&mesh, &["--force"], &[("DOCKER_BUILDKIT", "0")]);
    assert!(out.status.success(), "{}", said(&out));
    let events = format!(
        "{:?}",
        StateDb::open(&mesh.state())
            .unwrap()
            .events_tail(&mesh.name, 10_000)
            .unwrap()
    );
    assert_eq!(
        events.matches("legacy builder: DOCKER_BUILDKIT=0").count(),
        1,
        "said once, with why: {events}"
    );
    // The legacy builder's own steps: `Step n/m`.
    assert!(events.contains("Step 1/"), "{events}");

    // A module whose build needs the session cannot be built there: it fails, saying why.
    let mesh = with_extra(
        "bklegacysecret",
        "FROM scratch\nCOPY busybox /bin/busybox\n",
        "secrets = [{ id = \"token\", env = \"MESHTOP_TEST_TOKEN\" }]",
    );
    let out = converge(
        &mesh,
        &[],
        &[("DOCKER_BUILDKIT", "0"), ("MESHTOP_TEST_TOKEN", "x")],
    );
    assert!(!out.status.success(), "{}", said(&out));
    let rows = mesh.json(&["builds", "--failed", "--json"]);
    let error = rows[0]["error"].as_str().unwrap();
    assert!(
        error.contains("BuildKit") && error.contains("DOCKER_BUILDKIT=0"),
        "{error}"
    );
}

/// The layers of an image, bottom first.
fn layers(reference: &str) -> Vec<String> {
    serde_json::from_str(&docker_text(&[
        "image",
        "inspect",
        "--format",
        "{{json .RootFS.Layers}}",
        reference,
    ]))
    .unwrap()
}

/// The newest successful build row of `module`.
fn built(mesh: &ExampleMesh, module: &str) -> meshtop::mesh::builds::BuildRow {
    builds(mesh)
        .into_iter()
        .find(|b| b.module.as_deref() == Some(module) && b.status == BuildStatus::Succeeded)
        .unwrap_or_else(|| panic!("a successful build of {module}"))
}

/// BuildKit finds `FROM ${BASE}` by name only (an image id reads as `docker.io/library/sha256`, to
/// pull): a dependent is built FROM a tag naming its base's artifact, and a base artifact that lost its tag is
/// rebuilt (found gone from the target), never pulled.
#[test]
fn dependents_build_from_their_base_artifact_under_buildkit() {
    let mesh = ExampleMesh::new("bktiers");
    let out = converge(&mesh, &[], &[]);
    assert!(out.status.success(), "{}", said(&out));
    let text = said(&out);
    assert!(!text.contains("legacy builder"), "BuildKit built: {text}");
    let (tools, api) = (built(&mesh, "tools"), built(&mesh, "api"));
    let tools_ref = tools.reference.clone().unwrap();
    assert_eq!(
        api.base_digest, tools.digest,
        "api was built FROM tools' artifact"
    );
    let (base_layers, api_layers) = (layers(&tools_ref), layers(api.reference.as_ref().unwrap()));
    assert!(
        api_layers.starts_with(&base_layers) && api_layers.len() > base_layers.len(),
        "api's layers sit on tools' layers: {base_layers:?} / {api_layers:?}"
    );
    // The build's output names the base by its tag, never by an id to pull.
    assert!(
        text.contains(&format!("FROM docker.io/{tools_ref}"))
            || text.contains(&format!("FROM {tools_ref}")),
        "{text}"
    );

    // tools' artifact loses its only tag (a container keeps the image): the converge finds the
    // record's artifact gone from the target and rebuilds it (the engine's rule), and api, whose
    // input moved, is built FROM the new one — by its tag, nothing pulled.
    let holder = format!("{}-holder", mesh.name);
    docker_text(&["create", "--name", &holder, &tools_ref]);
    docker_text(&["rmi", "-f", &tools_ref]);
    std::fs::write(mesh.root().join("api/app.sh"), "#!/bin/sh\necho moved\n").unwrap();
    let out = converge(&mesh, &[], &[]);
    let _ = Command::new("docker").args(["rm", "-f", &holder]).output();
    let text = said(&out);
    assert!(out.status.success(), "{text}");
    assert!(
        !text.contains("registry-1.docker.io"),
        "nothing pulled: {text}"
    );
    let (tools, api) = (built(&mesh, "tools"), built(&mesh, "api"));
    assert_eq!(
        api.base_digest, tools.digest,
        "api was built FROM tools' new artifact"
    );
    assert!(
        layers(api.reference.as_ref().unwrap())
            .starts_with(&layers(tools.reference.as_ref().unwrap())),
        "api's layers sit on tools' layers"
    );
}

#[test]
fn ssh_true_forwards_the_agent_to_a_run_that_mounts_it() {
    // A static agent client (tests/fixtures/agent_probe.c) asks the forwarded agent for its keys.
    let dockerfile = "FROM scratch\nCOPY busybox /bin/busybox\nCOPY probe /probe\nCOPY input.txt /input.txt\n\
         RUN --mount=type=ssh [\"/probe\", \"/agent.txt\"]\n";
    let mesh = with_extra("bkssh", dockerfile, "ssh = true");
    let probe = mesh.root().join("extra/probe");
    let cc = Command::new("gcc")
        .args(["-static", "-O1", "-o"])
        .arg(&probe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent_probe.c"))
        .output()
        .expect("gcc is needed for the agent probe");
    assert!(cc.status.success(), "gcc: {}", said(&cc));
    // Its own context, so that no earlier run's cached step answers for this one.
    let nonce = format!("{:?}", std::time::SystemTime::now());
    std::fs::write(mesh.root().join("extra/input.txt"), nonce).unwrap();

    // ssh = true and no agent: refused before anything builds, naming the fix.
    let out = converge(&mesh, &[], &[("SSH_AUTH_SOCK", "")]);
    assert!(!out.status.success(), "{}", said(&out));
    assert!(
        said(&out).contains("SSH_AUTH_SOCK is not set"),
        "{}",
        said(&out)
    );
    assert!(builds(&mesh).is_empty(), "{:?}", builds(&mesh));

    // With the agent: the step reaches it through the build's session and lists its key.
    let agent = Agent::start(mesh.dir.path());
    let socket = agent.socket.to_string_lossy().into_owned();
    let out = converge(&mesh, &[], &[("SSH_AUTH_SOCK", &socket)]);
    assert!(out.status.success(), "{}", said(&out));
    let seen = read_in_image(&extra_ref(&mesh), "/agent.txt");
    assert_eq!(seen, format!("keys=1 comment={}", agent.comment));
}

#[test]
fn secrets_go_only_to_a_builder_that_took_them_on() {
    let dockerfile = "FROM scratch\nCOPY busybox /bin/busybox\nCOPY input.txt /input.txt\n\
         RUN --mount=type=secret,id=token [\"/bin/busybox\", \"sh\", \"-c\", \
         \"/bin/busybox wc -c /run/secrets/token > /size\"]\n";
    let keys = "secrets = [{ id = \"token\", env = \"MESHTOP_TEST_TOKEN\" }]";
    let mesh = with_extra("bkoptin", dockerfile, keys);
    let nonce = format!("{:?}", std::time::SystemTime::now());
    std::fs::write(mesh.root().join("extra/input.txt"), nonce).unwrap();
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let builder = "\n[[builder]]\nname = \"here\"\nendpoint = \"unix:///var/run/docker.sock\"\n";
    std::fs::write(&file, format!("{text}{builder}")).unwrap();
    let env = [("MESHTOP_TEST_TOKEN", "t0ken")];

    // The one builder did not take secrets on: extra is not built, the rest is.
    let out = converge(&mesh, &[], &env);
    let text_out = said(&out);
    assert!(!out.status.success(), "{text_out}");
    assert!(
        text_out.contains("extra") && text_out.contains("takes_secrets = true"),
        "{text_out}"
    );
    let rows = builds(&mesh);
    assert!(
        !rows
            .iter()
            .any(|b| b.module.as_deref() == Some("extra") && b.status == BuildStatus::Succeeded),
        "extra was built with its secret: {rows:?}"
    );

    // Taken on: built.
    std::fs::write(&file, format!("{text}{builder}takes_secrets = true\n")).unwrap();
    let out = converge(&mesh, &[], &env);
    assert!(out.status.success(), "{}", said(&out));
    assert_eq!(
        read_in_image(&extra_ref(&mesh), "/size").trim(),
        "5 /run/secrets/token"
    );
}
