//! Multi-platform through the pool, no buildx: each platform of a module built on a builder that
//! builds it (the real daemon and the second dockerd, linux/arm64 under Debian's qemu-user-static
//! registered through binfmt_misc), pushed by digest to the real registry (127.0.0.1:5000), and
//! the OCI image index written by meshtop is the artifact: what the record names, what Kubernetes
//! (the API test server) deploys and what is signed. Nothing here skips: a missing registry,
//! second daemon or emulator fails loudly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::kube_api::KubeApi;
use common::kube_mesh::{KubeMesh, REGISTRY, old_id};
use common::local_registry::require_registry;
use common::said;
use common::second_daemon::{SecondDaemonGuard, require_second_daemon};
use common::signing::{keypair, spec_verifies};
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
fn two_platform_base(k: &KubeMesh, platforms: &str, arm64_busybox: &Path) {
    let base = k.mesh.root().join("base");
    std::fs::copy("/bin/busybox", base.join("busybox-amd64")).unwrap();
    std::fs::copy(arm64_busybox, base.join("busybox-arm64")).unwrap();
    std::fs::remove_file(base.join("busybox")).unwrap();
    std::fs::write(
        base.join("Dockerfile"),
        "FROM scratch\nARG TARGETARCH\nCOPY busybox-${TARGETARCH} /bin/busybox\n\
         RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\nENV PATH=/bin\nCMD [\"uname\", \"-m\"]\n",
    )
    .unwrap();
    let file = k.mesh.mesh_file();
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
    two_platform_base(&k, "[\"linux/amd64\", \"linux/arm64\"]", &arm64_busybox);
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
    two_platform_base(&k, "[\"linux/amd64\", \"linux/s390x\"]", &arm64_busybox);
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
