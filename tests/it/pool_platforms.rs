//! Multi-platform through the pool, no buildx: each platform of a module built on a builder that
//! builds it (the real daemon and the second dockerd, linux/arm64 under Debian's qemu-user-static
//! registered through binfmt_misc), pushed by digest to the real registry (127.0.0.1:5000), and
//! the OCI image index written by meshtop is the artifact: what the record names, what Kubernetes
//! (the API test server) deploys and what is signed. Nothing here skips: a missing registry,
//! second daemon or emulator fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::kube_api::KubeApi;
use common::kube_mesh::{KubeMesh, REGISTRY, old_id};
use common::local_registry::LOCAL;
use common::local_registry::require_registry;
use common::second_daemon::{SecondDaemonGuard, require_second_daemon};
use common::signing::trust_ci_key;
use common::signing::{keypair, spec_verifies};
use common::{ExampleMesh, said};
use serde_json::Value;

const POOL: &str = "\n[[builder]]\nname = \"one\"\nendpoint = \"unix:///var/run/docker.sock\"\nmax_builds = 1\n\
                    \n[[builder]]\nname = \"two\"\nendpoint = \"unix:///run/meshtop-test-dockerd2/docker.sock\"\nmax_builds = 1\n";

/// arm64 emulation and an arm64 busybox, set up by the script test.sh runs (idempotent): the
/// busybox's path. Fails loudly when the kernel refuses.
fn require_emulation() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/setup-emulation.sh");
    let output = Command::new("bash").arg(&script).output().unwrap();
    assert!(
        output.status.success(),
        "arm64 emulation is not set up ({}): {}",
        script.display(),
        said(&output)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let path = text
        .rsplit("arm64 busybox at ")
        .next()
        .map(str::trim)
        .unwrap();
    PathBuf::from(path)
}

/// The base module of `k` built for `platforms`, each platform copying its own busybox
/// (`busybox-<arch>`, BuildKit's TARGETARCH) and running it (`RUN … --install`: the arm64 one
/// under emulation, in the build).
fn two_platform_base(mesh: &ExampleMesh, platforms: &str, arm64_busybox: &Path) {
    let base = mesh.root().join("base");
    std::fs::copy("/bin/busybox", base.join("busybox-amd64")).unwrap();
    std::fs::copy(arm64_busybox, base.join("busybox-arm64")).unwrap();
    std::fs::remove_file(base.join("busybox")).unwrap();
    std::fs::write(
        base.join("Dockerfile"),
        "FROM scratch\nARG TARGETARCH\nCOPY busybox-${TARGETARCH} /bin/busybox\n\
         RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\nENV PATH=/bin\nCMD [\"uname\", \"-m\"]\n",
    )
    .unwrap();
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        "context = \"base\"\n",
        &format!("context = \"base\"\nplatforms = {platforms}\n"),
        1,
    );
    std::fs::write(&file, text).unwrap();
}

/// A `docker` first on PATH that only leaves a mark: the pool's path never runs the docker CLI
/// (buildx would be `docker buildx …`), so a mark means the build went elsewhere.
fn no_docker_cli(dir: &Path) -> (String, PathBuf) {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let mark = dir.join("docker-cli-ran");
    let stand_in = bin.join("docker");
    std::fs::write(
        &stand_in,
        format!(
            "#!/bin/sh\necho \"$@\" >> {}\necho 'docker: unknown command: docker buildx' >&2\nexit 1\n",
            mark.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    (path, mark)
}

fn meshtop(k: &KubeMesh, path: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env_remove("MESHTOP_SIGNING_KEY")
        .env("PATH", path)
        .env("KUBECONFIG", &k.kubeconfig)
        .arg("--mesh")
        .arg(k.mesh.mesh_file())
        .arg("--state")
        .arg(k.mesh.state())
        .args(args)
        .output()
        .unwrap()
}

/// The real docker CLI on the machine's own daemon.
fn docker(args: &[&str]) -> Output {
    Command::new("docker").args(args).output().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_platform_module_builds_through_the_pool_into_one_signed_index() {
    require_registry().await;
    require_second_daemon();
    let arm64_busybox = require_emulation();
    let api = KubeApi::start().await;
    let k = KubeMesh::new("ppidx", &api, true, "test-ctx", POOL);
    let _second = SecondDaemonGuard(k.name().to_string());
    two_platform_base(
        &k.mesh,
        "[\"linux/amd64\", \"linux/arm64\"]",
        &arm64_busybox,
    );
    let repo = format!("{REGISTRY}/{}/base", k.name());
    k.deploy(&api, "base", &format!("{repo}:old"), &old_id(1));
    let (key, public) = keypair(&k.mesh.dir.path().join("keys"), "ci");
    let (path, mark) = no_docker_cli(k.mesh.dir.path());

    let output = meshtop(
        &k,
        &path,
        &[
            "converge",
            "--json",
            "base",
            "--sign-key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    assert!(
        !mark.exists(),
        "the docker CLI (buildx) ran: {}",
        std::fs::read_to_string(&mark).unwrap_or_default()
    );

    // One build row, naming each platform's builder (not buildx), its artifact the index.
    let rows = common::builds(&k.mesh);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    let builder = row.builder.clone().unwrap_or_default();
    assert!(
        builder.contains("linux/amd64 on ") && builder.contains("linux/arm64 on "),
        "the row names each platform's builder: {row:#?}"
    );
    assert_ne!(builder, meshtop::converge::build::BUILDX_BUILDER);
    let (Some(reference), Some(index)) = (&row.published_ref, &row.published_digest) else {
        panic!("the index is kept with the build: {row:#?}");
    };
    assert_eq!(row.digest.as_ref(), Some(index), "{row:#?}");

    // The registry holds one index under the ref, naming both platforms' manifests.
    let (repository, tag) = meshtop::backends::registry::repository_in(REGISTRY, reference);
    let bytes = common::signing::get(
        &format!("/v2/{repository}/manifests/{tag}"),
        "application/vnd.oci.image.index.v1+json",
    )
    .unwrap();
    use sha2::Digest;
    let under_tag = format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)));
    assert_eq!(under_tag, *index, "the ref's tag names the index");
    let pushed: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        pushed["mediaType"], "application/vnd.oci.image.index.v1+json",
        "{pushed}"
    );
    let manifests = pushed["manifests"].as_array().unwrap();
    let arches: Vec<&str> = manifests
        .iter()
        .map(|m| m["platform"]["architecture"].as_str().unwrap())
        .collect();
    assert_eq!(arches, ["amd64", "arm64"], "{pushed}");

    // Each runs its own platform's busybox (arm64 under emulation).
    for (manifest, platform, machine) in [
        (&manifests[0], "linux/amd64", "x86_64"),
        (&manifests[1], "linux/arm64", "aarch64"),
    ] {
        let pinned = format!("{repo}@{}", manifest["digest"].as_str().unwrap());
        let pull = docker(&["pull", "--platform", platform, &pinned]);
        assert!(pull.status.success(), "{}", said(&pull));
        let run = docker(&["run", "--rm", "--platform", platform, &pinned]);
        assert!(run.status.success(), "{}", said(&run));
        assert_eq!(
            String::from_utf8_lossy(&run.stdout).trim(),
            machine,
            "{platform}: {}",
            said(&run)
        );
    }

    // The record names the index; Kubernetes deploys it; it is signed by the converge's key.
    assert_eq!(
        k.annotation(&api)["base"]["digest"],
        Value::from(index.clone())
    );
    assert_eq!(k.image(&api, "base"), format!("{reference}@{index}"));
    let work = tempfile::tempdir().unwrap();
    assert!(
        spec_verifies(work.path(), repository, index, &public),
        "the index {index} carries no signature by the key:\n{}",
        said(&output)
    );

    // `meshtop builders` shows each builder's platforms, native and emulated, as the daemons say.
    let (shown, _) = k.json(&["builders", "--json"]).await;
    for b in shown["builders"].as_array().unwrap() {
        assert_eq!(b["native"], serde_json::json!(["linux/amd64"]), "{shown}");
        let emulated = b["emulated"].as_array().unwrap();
        assert!(emulated.contains(&Value::from("linux/arm64")), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platform_no_builder_builds_is_refused_before_any_build() {
    require_registry().await;
    require_second_daemon();
    let arm64_busybox = require_emulation();
    assert!(
        !Path::new("/proc/sys/fs/binfmt_misc/qemu-s390x").exists(),
        "this test needs a machine that does not emulate linux/s390x"
    );
    let api = KubeApi::start().await;
    let k = KubeMesh::new("ppnone", &api, true, "test-ctx", POOL);
    let _second = SecondDaemonGuard(k.name().to_string());
    two_platform_base(
        &k.mesh,
        "[\"linux/amd64\", \"linux/s390x\"]",
        &arm64_busybox,
    );
    let (path, mark) = no_docker_cli(k.mesh.dir.path());

    let output = meshtop(&k, &path, &["converge", "base"]);
    let text = said(&output);
    assert_ne!(output.status.code(), Some(0), "{text}");
    assert!(
        text.contains("refused before any build")
            && text.contains("builds for linux/s390x, which no builder builds")
            && text.contains("one (linux/amd64, emulating")
            && text.contains("two (linux/amd64, emulating"),
        "the refusal names the platform and the builders: {text}"
    );
    assert!(!mark.exists(), "nothing ran buildx");
    assert!(
        common::builds(&k.mesh).is_empty(),
        "nothing was built: {:#?}",
        common::builds(&k.mesh)
    );
}

/// The manifest and config the index `index` of `repository` names for `arch` (read from the
/// registry by digest).
fn platform_of(repository: &str, index: &str, arch: &str) -> (String, String) {
    let bytes = common::signing::get(
        &format!("/v2/{repository}/manifests/{index}"),
        "application/vnd.oci.image.index.v1+json",
    )
    .unwrap();
    let index: Value = serde_json::from_slice(&bytes).unwrap();
    let manifest = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["platform"]["architecture"] == arch)
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let bytes = common::signing::get(
        &format!("/v2/{repository}/manifests/{manifest}"),
        "application/vnd.docker.distribution.manifest.v2+json",
    )
    .unwrap();
    let image: Value = serde_json::from_slice(&bytes).unwrap();
    let config = image["config"]["digest"].as_str().unwrap().to_string();
    (manifest, config)
}

/// The base machine's state and image as `status --json` says, and the exit of `--exit-code`.
fn base_machine(mesh: &ExampleMesh, machine: &str) -> (String, Vec<String>, Option<i32>) {
    let output = mesh.meshtop(&["status", "--json", "--exit-code"]);
    let rows: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("status: not JSON ({e}): {}", said(&output)));
    let text = said(&output);
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == machine)
        .unwrap_or_else(|| panic!("no row for {machine}: {text}"))
        .clone();
    let running = row["running"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    (
        row["state"].as_str().unwrap().to_string(),
        running,
        output.status.code(),
    )
}

/// The Docker target runs its own platform out of the index: the record names the index (signed),
/// the machine runs the daemon's platform's image, pulled by the manifest the verified index names
/// for it (its config checked), and `status`, `verify`, `send` read it as the record's artifact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docker_target_runs_its_own_platform_out_of_the_index() {
    require_registry().await;
    require_second_daemon();
    let arm64_busybox = require_emulation();
    let mesh = ExampleMesh::new("ppdock");
    let _second = SecondDaemonGuard(mesh.name.clone());
    let (key, _public) = trust_ci_key(&mesh);
    two_platform_base(&mesh, "[\"linux/amd64\", \"linux/arm64\"]", &arm64_busybox);
    let machine = format!("{}-base-1", mesh.name);
    let file = mesh.mesh_file();
    // The base's policy is `record`: a new artifact leaves its machine held until a send. Its
    // machine is the mesh's only one (the example's others would be missing: not converged here).
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        "policy = \"rollout\"",
        "policy = \"record\"",
        1,
    );
    let text = text.split("[[machine]]").next().unwrap().to_string();
    std::fs::write(
        &file,
        format!(
            "{text}\n[[machine]]\nname = \"{machine}\"\nmodule = \"base\"\ncommand = [\"sleep\", \"3600\"]\n{POOL}"
        ),
    )
    .unwrap();
    let key = key.to_str().unwrap();

    let output = mesh.meshtop(&["converge", "base", "--sign-key", key]);
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    let rows = common::builds(&mesh);
    let index = rows[0].published_digest.clone().unwrap();
    let record = meshtop::backends::state::StateDb::open(&mesh.state())
        .unwrap()
        .record(&mesh.name, "default")
        .unwrap();
    assert_eq!(record["base"].digest, index, "the record names the index");
    assert_eq!(record["base"].manifest.as_deref(), Some(index.as_str()));
    let repository = format!("{}/base", mesh.name);
    let (_, config) = platform_of(&repository, &index, "amd64");

    // The machine runs this daemon's platform out of the index.
    let image = common::local_registry::docker(&["inspect", "-f", "{{.Image}}", &machine]);
    assert_eq!(image.trim(), config, "{}", said(&output));
    let uname = docker(&["exec", &machine, "uname", "-m"]);
    assert_eq!(String::from_utf8_lossy(&uname.stdout).trim(), "x86_64");
    let (state, running, code) = base_machine(&mesh, &machine);
    assert_eq!((state.as_str(), code), ("current", Some(0)), "{running:?}");

    // verify: the machine runs what the record's (signed) index names: one row, signed.
    let verified = mesh.meshtop(&["verify", "--json", "base"]);
    let (checked, text) = common::json_of(&["verify"], &verified);
    assert_eq!(verified.status.code(), Some(0), "{text}");
    let checked = checked.as_array().unwrap();
    assert_eq!(checked.len(), 1, "{text}");
    assert_eq!(checked[0]["artifact"], Value::from(index.clone()), "{text}");

    // A new artifact: the machine is behind (held, by policy) until a send moves it.
    let dockerfile = mesh.root().join("base/Dockerfile");
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    std::fs::write(&dockerfile, format!("{text}LABEL second=\"yes\"\n")).unwrap();
    let output = mesh.meshtop(&["converge", "base", "--sign-key", key]);
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    let record = meshtop::backends::state::StateDb::open(&mesh.state())
        .unwrap()
        .record(&mesh.name, "default")
        .unwrap();
    let second = record["base"].digest.clone();
    assert_ne!(second, index);
    let (state, running, code) = base_machine(&mesh, &machine);
    assert_eq!((state.as_str(), code), ("held", Some(1)), "{running:?}");
    assert_eq!(running, [config]);

    let sent = mesh.meshtop(&["send", "base", "--yes"]);
    assert_eq!(sent.status.code(), Some(0), "{}", said(&sent));
    let (_, second_config) = platform_of(&repository, &second, "amd64");
    let (state, running, code) = base_machine(&mesh, &machine);
    assert_eq!((state.as_str(), code), ("current", Some(0)), "{running:?}");
    assert_eq!(running, std::slice::from_ref(&second_config));

    // gc keeps the image the host runs out of the record's index with no machine on it (it is
    // tagged with the record's ref).
    let removed = docker(&["rm", "-f", &machine]);
    assert!(removed.status.success(), "{}", said(&removed));
    let gc = mesh.meshtop(&["gc", "--yes", "--grace", "0s", "--keep", "1"]);
    assert_eq!(gc.status.code(), Some(0), "{}", said(&gc));
    let kept = docker(&["image", "inspect", &second_config]);
    assert!(
        kept.status.success(),
        "gc took the record's platform image {second_config}:\n{}",
        said(&gc)
    );
}

/// The example mesh on the Docker target with the registry and `builders` (name, endpoint,
/// platforms as the mesh file writes them), one build at once each; its base built for amd64
/// and arm64 (its `RUN` under emulation for arm64).
fn docker_pool(tag: &str, builders: &[(&str, &str, &str)], arm64_busybox: &Path) -> ExampleMesh {
    let mesh = ExampleMesh::new(tag);
    let file = mesh.mesh_file();
    let mut text = std::fs::read_to_string(&file).unwrap().replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!("name = \"{}\"\nregistry = \"{LOCAL}\"\n", mesh.name),
        1,
    );
    for (name, endpoint, platforms) in builders {
        text.push_str(&format!(
            "\n[[builder]]\nname = \"{name}\"\nendpoint = \"{endpoint}\"\nmax_builds = 1\n{platforms}"
        ));
    }
    std::fs::write(&file, text).unwrap();
    two_platform_base(&mesh, "[\"linux/amd64\", \"linux/arm64\"]", arm64_busybox);
    mesh
}

/// Every step of the mesh's converges so far (none while its state is not there yet).
fn steps(mesh: &ExampleMesh) -> Vec<meshtop::mesh::progress::EventRow> {
    meshtop::backends::state::StateDb::open(&mesh.state())
        .and_then(|db| db.events_after(&mesh.name, 0, usize::MAX))
        .unwrap_or_default()
}

/// Per builder, when each build on it ran (from its first step to its last), from the steps: a
/// module's build from `building … on builder X` to its `built`/`failed`, a platform's from
/// `<platform>: building on builder X` to `<platform> on X … pushed it`.
fn builds_per_builder(
    mesh: &ExampleMesh,
) -> std::collections::BTreeMap<String, Vec<(String, i64, i64)>> {
    use meshtop::mesh::progress::Payload;
    let mut open: std::collections::BTreeMap<String, (String, i64)> = Default::default();
    let mut out: std::collections::BTreeMap<String, Vec<(String, i64, i64)>> = Default::default();
    for step in steps(mesh) {
        let module = step.module.clone().unwrap_or_default();
        let text = step.text.as_str();
        match &step.payload {
            Some(Payload::Build {
                builder: Some(builder),
                ..
            }) if !builder.starts_with("the pool") => {
                open.insert(module.clone(), (builder.clone(), step.at_ms));
            }
            Some(Payload::Built { .. } | Payload::Failed { .. }) => {
                if let Some((builder, start)) = open.remove(&module) {
                    out.entry(builder)
                        .or_default()
                        .push((module, start, step.at_ms));
                }
            }
            Some(Payload::Output { .. }) => {
                if let Some((platform, rest)) = text.split_once(": building on builder ") {
                    let builder = rest.split_whitespace().next().unwrap_or_default();
                    open.insert(
                        format!("{module} {platform}"),
                        (builder.to_string(), step.at_ms),
                    );
                } else if let Some((platform, _)) = text.split_once(" on ")
                    && text.contains(" and pushed it as ")
                    && let Some((builder, start)) = open.remove(&format!("{module} {platform}"))
                {
                    out.entry(builder).or_default().push((
                        format!("{module} {platform}"),
                        start,
                        step.at_ms,
                    ));
                }
            }
            _ => {}
        }
    }
    out
}

/// The platforms of a module are built at once across the pool, each taking a slot of the
/// builder it runs on: with `max_builds = 1`, no builder ever runs two builds at once (another
/// module's build waits for the slot), and with two builders both platforms run together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modules_platforms_run_at_once_each_in_a_slot_of_its_builder() {
    require_registry().await;
    require_second_daemon();
    let arm64_busybox = require_emulation();
    let pool = [
        ("one", "unix:///var/run/docker.sock", ""),
        ("two", common::second_daemon::SECOND, ""),
    ];
    let mesh = docker_pool("ppslot", &pool, &arm64_busybox);
    let _second = SecondDaemonGuard(mesh.name.clone());
    // A second module of the base's tier, wanting a slot while the base's platforms build.
    let side = mesh.root().join("side");
    std::fs::create_dir_all(&side).unwrap();
    std::fs::copy("/bin/busybox", side.join("busybox")).unwrap();
    std::fs::write(
        side.join("Dockerfile"),
        "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"true\"]\n",
    )
    .unwrap();
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        format!("{text}\n[[module]]\nname = \"side\"\ncontext = \"side\"\n"),
    )
    .unwrap();

    let output = mesh.meshtop(&["converge", "base", "side", "--jobs", "4"]);
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    let runs = builds_per_builder(&mesh);
    let all: Vec<&(String, i64, i64)> = runs.values().flatten().collect();
    assert_eq!(all.len(), 3, "two platforms and side: {runs:#?}");
    // One build at a time on each builder.
    for (builder, list) in &runs {
        let mut list = list.clone();
        list.sort_by_key(|(_, start, _)| *start);
        for pair in list.windows(2) {
            assert!(
                pair[1].1 >= pair[0].2,
                "builder {builder} ran two builds at once (max_builds = 1): {pair:?}"
            );
        }
    }
    // Both platforms at once, one on each builder.
    let platform = |p: &str| {
        all.iter()
            .find(|(what, _, _)| what == &format!("base {p}"))
            .copied()
            .unwrap_or_else(|| panic!("no build of base {p}: {runs:#?}"))
    };
    let (amd, arm) = (platform("linux/amd64"), platform("linux/arm64"));
    assert!(
        amd.1 < arm.2 && arm.1 < amd.2,
        "the platforms ran one after another: {runs:#?}"
    );
    let rows = common::builds(&mesh);
    let base = rows
        .iter()
        .find(|r| r.module.as_deref() == Some("base"))
        .unwrap();
    let builder = base.builder.clone().unwrap_or_default();
    assert!(
        builder.contains("linux/amd64 on ") && builder.contains("linux/arm64 on "),
        "the row names each platform's builder: {base:#?}"
    );
}

/// The builder of one platform goes away mid-build: the row, the retry's line and the builder
/// taken out of rotation name that builder, and the retry builds without it. The pool is laid out
/// so that every wrong answer names another builder: `two` (the one that goes away, building
/// arm64) is neither the host, nor the other platform's builder (`one`), nor the module's own
/// rendezvous choice (`one` of all three, `three` of those not the host), nor the last declared
/// (`three`); and a retry that avoided any builder but `two` fails (amd64 has only `one`; arm64
/// without `three` has only `two`, gone), while avoiding `two` builds arm64 on `three`. The blame is
/// checked before the converge's exit, so a wrong one fails here saying so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_platforms_builder_that_goes_away_is_the_one_blamed_and_avoided() {
    require_registry().await;
    require_second_daemon();
    let arm64_busybox = require_emulation();
    let dir = tempfile::tempdir().unwrap();
    let proxy = common::daemon_proxy::DaemonProxy::start(
        &dir.path().join("two.sock"),
        Path::new(common::second_daemon::SECOND_SOCKET),
    );
    // `one` builds amd64 only, `two` and `three` arm64 only: arm64 goes to `two` first (the
    // part's rendezvous order of the two), amd64 to `one`.
    let two = proxy.docker_host();
    let pool = [
        (
            "one",
            "unix:///var/run/docker.sock",
            "platforms = [\"linux/amd64\"]\n",
        ),
        ("two", two.as_str(), "platforms = [\"linux/arm64\"]\n"),
        (
            "three",
            common::second_daemon::SECOND,
            "platforms = [\"linux/arm64\"]\n",
        ),
    ];
    let names = ["one", "two", "three"];
    assert_eq!(
        meshtop::mesh::schedule::rendezvous("base", &names)[0],
        "one",
        "the layout above"
    );
    assert_eq!(
        meshtop::mesh::schedule::rendezvous("base", &names[1..])[0],
        "three",
        "the layout above"
    );
    assert_eq!(
        meshtop::mesh::schedule::rendezvous("base linux/arm64", &names[1..])[0],
        "two",
        "the layout above"
    );
    let mesh = docker_pool("ppgone", &pool, &arm64_busybox);
    let _second = SecondDaemonGuard(mesh.name.clone());
    // The arm64 build stays in a step (fresh: never answered from a cache) while it loses its
    // builder: the builder is cut once the step's process is seen running, not after a guess.
    let dockerfile = mesh.root().join("base/Dockerfile");
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    let step = common::run_id();
    std::fs::write(
        &dockerfile,
        format!(
            // Only arm64's inner shell is named `step-{step}` ($0): amd64's script never says it.
            "{text}RUN if [ \"$TARGETARCH\" = arm64 ]; then w=step; sh -c 'sleep 8; true' \"$w-{step}\"; fi\n"
        ),
    )
    .unwrap();
    let log = dir.path().join("converge.log");
    let mut child = mesh.spawn_converge(&log, &[]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !steps(&mesh)
        .iter()
        .any(|s| s.text.starts_with("linux/arm64: building on builder two"))
    {
        assert!(
            std::time::Instant::now() < deadline && child.try_wait().unwrap().is_none(),
            "arm64 never started on builder two:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    common::wait_until(
        "the arm64 step's process running on builder two",
        std::time::Duration::from_secs(120),
        || {
            !common::processes_saying(&format!("step-{step}")).is_empty()
                || child.try_wait().unwrap().is_some()
        },
    );
    assert!(
        child.try_wait().unwrap().is_none(),
        "the converge ended before the arm64 step ran:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    proxy.shut();
    let status = common::wait_exit(&mut child, std::time::Duration::from_secs(240), "the retry");
    let stderr = std::fs::read_to_string(&log).unwrap();
    let requeued: Vec<(String, String)> = steps(&mesh)
        .into_iter()
        .filter_map(|s| match s.payload {
            Some(meshtop::mesh::progress::Payload::Requeued { from, error }) => Some((from, error)),
            _ => None,
        })
        .collect();
    assert_eq!(requeued.len(), 1, "{requeued:?}\n{stderr}");
    assert_eq!(
        requeued[0].0, "two",
        "the builder that built arm64 is blamed: {requeued:?}\n{stderr}"
    );
    assert!(
        requeued[0].1.contains("builder two (linux/arm64)"),
        "{requeued:?}"
    );
    assert!(
        stderr.contains("builder two failed the build")
            && stderr.contains("retrying once without it"),
        "{stderr}"
    );
    let rows: Vec<_> = common::builds(&mesh)
        .into_iter()
        .filter(|r| r.module.as_deref() == Some("base"))
        .collect();
    let failed = rows
        .iter()
        .find(|r| r.status == meshtop::mesh::builds::BuildStatus::Failed)
        .unwrap_or_else(|| panic!("no failed row: {rows:#?}\n{stderr}"));
    assert!(
        failed
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("builder two (linux/arm64)"),
        "the row names the builder that went away: {failed:#?}"
    );
    // Only now the retry: it avoided `two` (and only `two`), so it built.
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let retried = rows
        .iter()
        .find(|r| r.status == meshtop::mesh::builds::BuildStatus::Succeeded)
        .unwrap();
    assert_eq!(
        retried.builder.as_deref(),
        Some("linux/amd64 on one, linux/arm64 on three"),
        "the retry avoids two: {retried:#?}"
    );
}

/// The machine `machine`'s image id, as the daemon says.
fn image_of(machine: &str) -> String {
    common::local_registry::docker(&["inspect", "-f", "{{.Image}}", machine])
        .trim()
        .to_string()
}

/// A multi-platform module on two Docker targets (staging, prod ← staging) of the host daemon,
/// built through the pool: a promote brings the index to a daemon that no longer holds its image
/// (the daemon's platform pulled out of the index by the manifest's digest, never a tag), and a
/// rollback goes back to an earlier index; each time the machine runs the config the index's
/// manifest for the daemon's platform names, and the record names the index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_promote_and_a_rollback_of_an_index_run_its_platform_on_the_docker_target() {
    require_registry().await;
    require_second_daemon();
    let arm64_busybox = require_emulation();
    let pool = [
        ("one", "unix:///var/run/docker.sock", ""),
        ("two", common::second_daemon::SECOND, ""),
    ];
    let mesh = docker_pool("ppback", &pool, &arm64_busybox);
    let _second = SecondDaemonGuard(mesh.name.clone());
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let (head, rest) = text.split_once("[[machine]]").unwrap();
    let builders = &rest[rest.find("[[builder]]").unwrap()..];
    let head = head.replace(
        "[target]\nkind = \"docker\"\n",
        "[[target]]\nname = \"staging\"\n\n[[target]]\nname = \"prod\"\npromote_from = \"staging\"\n",
    );
    let (staging, prod) = (
        format!("{}-stg-base-1", mesh.name),
        format!("{}-prod-base-1", mesh.name),
    );
    let mut machines = String::new();
    for (machine, target) in [(&staging, "staging"), (&prod, "prod")] {
        machines.push_str(&format!(
            "[[machine]]\nname = \"{machine}\"\nmodule = \"base\"\ntarget = \"{target}\"\ncommand = [\"sleep\", \"3600\"]\n\n"
        ));
    }
    std::fs::write(&file, format!("{head}{machines}{builders}")).unwrap();
    let repository = format!("{}/base", mesh.name);
    let index_of = |target: &str| {
        meshtop::backends::state::StateDb::open(&mesh.state())
            .unwrap()
            .record(&mesh.name, target)
            .unwrap()["base"]
            .clone()
    };
    let ok = |args: &[&str]| {
        let output = mesh.meshtop(args);
        assert_eq!(output.status.code(), Some(0), "{args:?}: {}", said(&output));
        output
    };

    ok(&["converge", "--target", "staging", "base"]);
    let first = index_of("staging");
    assert_eq!(first.manifest.as_deref(), Some(first.digest.as_str()));
    let (manifest1, config1) = platform_of(&repository, &first.digest, "amd64");
    assert_eq!(
        image_of(&staging),
        config1,
        "staging runs amd64 out of the index"
    );

    // The daemon loses the image (no container on it): the promote must bring it back.
    let removed = docker(&["rm", "-f", &staging]);
    assert!(removed.status.success(), "{}", said(&removed));
    let removed = docker(&["image", "rm", "-f", &config1]);
    assert!(removed.status.success(), "{}", said(&removed));
    assert!(!docker(&["image", "inspect", &config1]).status.success());

    let promoted = ok(&["promote", "base", "--to", "prod", "--yes"]);
    assert_eq!(
        index_of("prod").digest,
        first.digest,
        "prod's record names the index"
    );
    assert_eq!(
        image_of(&prod),
        config1,
        "prod runs the index's amd64 config: {}",
        said(&promoted)
    );
    // Pulled by the manifest's digest out of the index.
    let pinned = format!("{LOCAL}/{repository}@{manifest1}");
    let digests = common::local_registry::docker(&[
        "image",
        "inspect",
        "-f",
        "{{json .RepoDigests}}",
        &config1,
    ]);
    assert!(
        digests.contains(&pinned),
        "the image came by {pinned}: {digests}"
    );
    let pulled = steps(&mesh).into_iter().any(|s| {
        s.text
            .starts_with("pulled linux/amd64 out of the image index")
            && s.text.contains(meshtop::mesh::text::short_id(&manifest1))
    });
    assert!(pulled, "the promote says it pulled amd64 out of the index");

    // A second artifact on staging, then a rollback to the first index.
    let dockerfile = mesh.root().join("base/Dockerfile");
    let text = std::fs::read_to_string(&dockerfile).unwrap();
    std::fs::write(&dockerfile, format!("{text}LABEL second=\"yes\"\n")).unwrap();
    ok(&["converge", "--target", "staging", "base"]);
    let second = index_of("staging");
    assert_ne!(second.digest, first.digest);
    let (_, config2) = platform_of(&repository, &second.digest, "amd64");
    assert_eq!(image_of(&staging), config2, "staging runs the second index");

    let rolled = ok(&["--target", "staging", "rollback", "base", "--yes"]);
    assert_eq!(
        index_of("staging").digest,
        first.digest,
        "the record names the first index"
    );
    assert_eq!(
        image_of(&staging),
        config1,
        "staging runs the first index's amd64 config again: {}",
        said(&rolled)
    );
    let (state, running, code) = base_machine(&mesh, &staging);
    assert_eq!((state.as_str(), code), ("current", Some(0)), "{running:?}");
    assert_eq!(running, std::slice::from_ref(&config1));
}
