//! Every push is signed, on every path, or the key is refused (issue 36, case 5): a signing key
//! where the converge pushes nothing is bad input (exit 2, saying why); the pool's hand-over pushes
//! are signed on both targets. Signatures are checked as sigstore/cosign `specs/SIGNATURE_SPEC.md`
//! says, with openssl and curl (tests/common/signing.rs), never with meshtop's code. The real
//! daemon, the real registry (127.0.0.1:5000), the second daemon for the pool
//! (scripts/start-second-daemon.sh) and, for Kubernetes, the API test server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::second_daemon::{SecondDaemonGuard, require_second_daemon};

use std::path::Path;
use std::process::{Command, Output};

use common::kube_api::KubeApi;
use common::kube_mesh::KubeMesh;
use common::local_registry::{LOCAL, require_registry};
use common::signing::{keypair, spec_verifies};
use common::{ExampleMesh, builds, said};
use meshtop::backends::registry::repository_in;
use meshtop::mesh::builds::BuildStatus;

/// Two builders: the machine's daemon and the second one, one build at once each.
const POOL: &str = "\n[[builder]]\nname = \"one\"\nendpoint = \"unix:///var/run/docker.sock\"\nmax_builds = 1\n\
                    \n[[builder]]\nname = \"two\"\nendpoint = \"unix:///run/meshtop-test-dockerd2/docker.sock\"\nmax_builds = 1\n";

/// Run meshtop on `mesh` with `envs`, MESHTOP_SIGNING_KEY of the caller's environment removed.
fn meshtop_env(mesh: &ExampleMesh, envs: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env_remove("MESHTOP_SIGNING_KEY")
        .env_remove("MESHTOP_PUBLISH")
        .envs(envs.iter().copied())
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .args(args)
        .output()
        .unwrap()
}

/// `[mesh]` of `mesh`'s file gets `line`.
fn add_to_mesh(mesh: &ExampleMesh, line: &str) {
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!("name = \"{}\"\n{line}\n", mesh.name),
        1,
    );
    std::fs::write(&file, text).unwrap();
}

/// Every build of `mesh` succeeded and was pushed, and each pushed manifest carries a signature
/// that verifies with `public`, per the spec.
fn every_push_is_signed(mesh: &ExampleMesh, public: &Path) {
    let rows = builds(mesh);
    assert_eq!(rows.len(), 5, "{rows:#?}");
    let work = tempfile::tempdir().unwrap();
    for row in &rows {
        assert_eq!(row.status, BuildStatus::Succeeded, "{row:#?}");
        let (Some(reference), Some(digest)) = (&row.published_ref, &row.published_digest) else {
            panic!("a build of the pool was not pushed: {row:#?}");
        };
        let (repository, _) = repository_in(LOCAL, reference);
        assert!(
            spec_verifies(work.path(), repository, digest, public),
            "{reference} ({digest}, built on {:?}) carries no signature by the key",
            row.builder
        );
    }
}

#[test]
fn a_signing_key_where_the_docker_target_pushes_nothing_is_refused_saying_why() {
    let mesh = ExampleMesh::new("signnop");
    let (key, _) = keypair(&mesh.dir.path().join("keys"), "ci");
    let key = key.to_str().unwrap();

    // No registry at all: the key is refused, with the registry and --publish to add.
    let output = meshtop_env(&mesh, &[], &["converge", "--sign-key", key]);
    let text = said(&output);
    assert_eq!(output.status.code(), Some(2), "{text}");
    assert!(
        text.contains("--sign-key")
            && text.contains("pushes nothing to sign")
            && text.contains("--publish")
            && text.contains("registry = \"host:port\""),
        "{text}"
    );

    // A registry, but no --publish: the same, from the environment too.
    add_to_mesh(&mesh, &format!("registry = \"{LOCAL}\""));
    for (envs, args) in [
        (vec![], vec!["converge", "--sign-key", key]),
        (vec![("MESHTOP_SIGNING_KEY", key)], vec!["converge"]),
    ] {
        let output = meshtop_env(&mesh, &envs, &args);
        let text = said(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?} {envs:?}: {text}");
        assert!(
            text.contains("pushes nothing to sign")
                && text.contains("add --publish")
                && !text.contains("registry = \"host:port\""),
            "{text}"
        );
    }
    assert!(builds(&mesh).is_empty(), "nothing was built");
}

#[test]
fn a_pools_hand_overs_on_the_docker_target_are_signed_without_publish() {
    require_second_daemon();
    let mesh = ExampleMesh::new("signpd");
    let _second = SecondDaemonGuard(mesh.name.clone());
    let (key, public) = keypair(&mesh.dir.path().join("keys"), "ci");
    add_to_mesh(&mesh, &format!("registry = \"{LOCAL}\""));
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, format!("{text}{POOL}")).unwrap();
    // The pool hands every build over through the registry: those pushes are signed.
    let output = meshtop_env(
        &mesh,
        &[],
        &[
            "converge",
            "--jobs",
            "2",
            "--sign-key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    every_push_is_signed(&mesh, &public);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pools_hand_overs_on_kubernetes_are_signed() {
    require_registry().await;
    require_second_daemon();
    let api = KubeApi::start().await;
    let k = KubeMesh::new("signpk", &api, true, "test-ctx", POOL);
    let _second = SecondDaemonGuard(k.name().to_string());
    let (key, public) = keypair(&k.mesh.dir.path().join("keys"), "ci");
    let output = k
        .run(&[
            "converge",
            "--jobs",
            "2",
            "--sign-key",
            key.to_str().unwrap(),
        ])
        .await;
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    every_push_is_signed(&k.mesh, &public);
}

/// A stand-in for `docker buildx`, which this machine lacks, first on PATH: `buildx version`
/// answers, `buildx build --push` does what docker/buildx `commands/build.go` with BuildKit's
/// image exporter (`exporter/containerimage/export.go`, `containerimage.digest`) does for meshtop's
/// call, for this daemon's platform only (no emulator here for the others): the context read from
/// stdin is built, pushed, and an OCI index naming that manifest is pushed under the same tag; the
/// index's digest goes to `--metadata-file` as `containerimage.digest`. Every other command is the
/// real docker CLI's. Its build (the legacy builder) runs with `--no-cache`: cached intermediate
/// images are shared by every build of the same steps, and another test removing its images took
/// one from under this build once ("unable to find image"; tests/it/converge_buildkit.rs).
const BUILDX_STAND_IN: &str = r#"#!/bin/bash
set -e
REAL=@REAL@
[ "$1" = buildx ] || exec "$REAL" "$@"
case "$2" in
  version) echo "github.com/docker/buildx (stand-in for this daemon's platform)"; exit 0 ;;
  build) ;;
  *) echo "the buildx stand-in does not do $2" >&2; exit 1 ;;
esac
shift 2
build=(build -q --no-cache)
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag=$2; build+=(-t "$2"); shift ;;
    --file) build+=(-f "$2"); shift ;;
    --metadata-file) metadata=$2; shift ;;
    --label|--build-arg) build+=("$1" "$2"); shift ;;
    --platform|--progress|--secret|--ssh) shift ;;
  esac
  shift
done
"$REAL" "${build[@]}" - >&2
read -r manifest size < <("$REAL" push "$tag" | sed -n 's/.*digest: \(sha256:[0-9a-f]*\) size: \([0-9]*\).*/\1 \2/p')
host=${tag%%/*}; path=${tag#*/}; repository=${path%:*}; reference=${path##*:}
arch=$("$REAL" version --format '{{.Server.Arch}}')
index='{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","digest":"'$manifest'","size":'$size',"platform":{"architecture":"'$arch'","os":"linux"}}]}'
printf '%s' "$index" | curl -sf -X PUT -H "Content-Type: application/vnd.oci.image.index.v1+json" \
  --data-binary @- "http://$host/v2/$repository/manifests/$reference" >&2
printf '{"containerimage.digest":"sha256:%s"}' "$(printf '%s' "$index" | sha256sum | cut -d' ' -f1)" > "$metadata"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_index_a_multi_platform_build_pushed_is_signed() {
    require_registry().await;
    let api = KubeApi::start().await;
    let k = KubeMesh::new("signmp", &api, true, "test-ctx", "");
    let file = k.mesh.mesh_file();
    // The user asks for buildx (`multi_platform = "buildx"`); the pool's own path is
    // tests/pool_platforms.rs.
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replacen(
            "context = \"base\"\n",
            "context = \"base\"\nplatforms = [\"linux/amd64\", \"linux/arm64\"]\n",
            1,
        )
        .replacen("[mesh]\n", "[mesh]\nmulti_platform = \"buildx\"\n", 1);
    std::fs::write(&file, text).unwrap();
    let (key, public) = keypair(&k.mesh.dir.path().join("keys"), "ci");
    let bin = k.mesh.dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v docker"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let stand_in = bin.join("docker");
    std::fs::write(&stand_in, BUILDX_STAND_IN.replace("@REAL@", real.trim())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&stand_in, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env_remove("MESHTOP_SIGNING_KEY")
        .env("PATH", path)
        .env("KUBECONFIG", &k.kubeconfig)
        .arg("--mesh")
        .arg(k.mesh.mesh_file())
        .arg("--state")
        .arg(k.mesh.state())
        .args(["converge", "base", "--sign-key", key.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", said(&output));
    let rows = builds(&k.mesh);
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    assert_eq!(
        row.builder.as_deref(),
        None,
        "the local daemon's buildx, no pool: {row:#?}"
    );
    let (Some(reference), Some(index)) = (&row.published_ref, &row.published_digest) else {
        panic!("buildx's push is kept with the build: {row:#?}");
    };
    assert_eq!(row.digest.as_ref(), Some(index), "{row:#?}");
    let (repository, tag) = repository_in(LOCAL, reference);
    let pushed = common::signing::get(
        &format!("/v2/{repository}/manifests/{tag}"),
        "application/vnd.oci.image.index.v1+json",
    )
    .unwrap();
    let pushed: serde_json::Value = serde_json::from_slice(&pushed).unwrap();
    assert!(pushed["manifests"].is_array(), "an index: {pushed}");
    let work = tempfile::tempdir().unwrap();
    assert!(
        spec_verifies(work.path(), repository, index, &public),
        "the index {index} of {reference} carries no signature by the key:\n{}",
        said(&output)
    );
}
