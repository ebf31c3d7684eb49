//! Remote builders with the whole of BuildKit (issue 38), on real daemons: a dockerd that serves TCP
//! with TLS only (`scripts/start-tls-daemon.sh tls`: a test CA, a server and client certificates),
//! and the machine's daemon reached over a real sshd (`ssh … docker system dial-stdio`). Each builds
//! a module whose RUN mounts a secret, a cache and the ssh agent, with BuildKit (the image's history
//! says `buildkit.dockerfile.v0`), and the secret is in no layer of the image nor its history. A TLS
//! builder whose certificate does not verify, or that refuses the client's, is left out saying
//! which. A builder's dockerd SIGKILLed while a step runs (`start-tls-daemon.sh fault`, a daemon no
//! other test uses, started again afterwards): the build is retried once on the other builder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::ssh_agent::Agent;
use common::local_registry::LOCAL;
use common::second_daemon::{SECOND, SecondDaemonGuard, require_second_daemon};
use common::{ExampleMesh, builds, read_in_image, said, wait_exit};
use meshtop::backends::state::StateDb;
use meshtop::mesh::builds::BuildStatus;
use meshtop::mesh::progress::Payload;
use meshtop::mesh::schedule::rendezvous;

/// A TLS daemon `scripts/start-tls-daemon.sh <instance>` runs.
struct TlsDaemon {
    instance: &'static str,
    port: u16,
}

const TLS: TlsDaemon = TlsDaemon {
    instance: "tls",
    port: 23760,
};
const FAULT: TlsDaemon = TlsDaemon {
    instance: "fault",
    port: 23761,
};

impl TlsDaemon {
    fn endpoint(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.port)
    }
    fn dir(&self) -> PathBuf {
        PathBuf::from(format!("/run/meshtop-test-dockerd-{}", self.instance))
    }
    /// A tls_dir the script made: `client` (works), `wrong-ca`, `refused`.
    fn certs(&self, which: &str) -> PathBuf {
        self.dir().join("certs").join(which)
    }
    /// The docker CLI on this daemon, with the working client certificates.
    fn docker(&self) -> Command {
        let mut command = Command::new("docker");
        command
            .env("DOCKER_HOST", self.endpoint())
            .env("DOCKER_TLS_VERIFY", "1")
            .env("DOCKER_CERT_PATH", self.certs("client"));
        command
    }
    fn answers(&self) -> bool {
        self.docker()
            .args(["version", "--format", "{{.Server.Version}}"])
            .output()
            .is_ok_and(|o| o.status.success())
    }
    /// These tests never skip: the daemon must answer.
    fn require(&self) {
        assert!(
            self.answers(),
            "no TLS Docker daemon answers at {}: start it with `bash scripts/start-tls-daemon.sh {}`",
            self.endpoint(),
            self.instance
        );
    }
    /// Start it (again), as scripts/test.sh does.
    fn start(&self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/start-tls-daemon.sh");
        let out = Command::new("bash")
            .arg(script)
            .arg(self.instance)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", said(&out));
    }
    fn pid(&self) -> i32 {
        std::fs::read_to_string(self.dir().join("dockerd.pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

/// Removes mesh `.1`'s images from a TLS daemon when the test ends.
struct TlsGuard(&'static TlsDaemon, String);

impl Drop for TlsGuard {
    fn drop(&mut self) {
        if !self.0.answers() {
            return;
        }
        let out = self
            .0
            .docker()
            .args(["images", "-q", "--filter"])
            .arg(format!("label=jr2.dev/mesh={}", self.1))
            .output()
            .unwrap();
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_string)
            .collect();
        if !ids.is_empty() {
            let _ = self.0.docker().args(["rmi", "-f"]).args(&ids).output();
        }
    }
}

/// The example mesh handing over through the registry on loopback, with `builders` (name,
/// endpoint, tls_dir; each takes secrets) and one more module, `extra`, whose RUN mounts a secret, a cache and the ssh
/// agent: it records the secret's digest, how often the cache was seen, and the agent's keys.
fn buildkit_mesh(tag: &str, builders: &[(&str, String, Option<PathBuf>)]) -> ExampleMesh {
    let mesh = ExampleMesh::new(tag);
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let mut text = text.replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!("name = \"{}\"\nregistry = \"{LOCAL}\"\n", mesh.name),
        1,
    );
    for (name, endpoint, tls_dir) in builders {
        text.push_str(&format!(
            "\n[[builder]]\nname = \"{name}\"\nendpoint = \"{endpoint}\"\nmax_builds = 2\ntakes_secrets = true\n"
        ));
        if let Some(dir) = tls_dir {
            text.push_str(&format!("tls_dir = \"{}\"\n", dir.display()));
        }
    }
    let dir = mesh.root().join("extra");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy("/bin/busybox", dir.join("busybox")).unwrap();
    // Its own context, so that no earlier run's cached step answers for this one.
    std::fs::write(dir.join("input.txt"), common::run_id()).unwrap();
    let cc = Command::new("gcc")
        .args(["-static", "-O1", "-o"])
        .arg(dir.join("probe"))
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent_probe.c"))
        .output()
        .expect("gcc is needed for the agent probe");
    assert!(cc.status.success(), "gcc: {}", said(&cc));
    let cache = common::run_id();
    std::fs::write(
        dir.join("Dockerfile"),
        format!(
            "FROM scratch\nCOPY busybox /bin/busybox\nCOPY probe /probe\nCOPY input.txt /input.txt\n\
             RUN --mount=type=secret,id=token --mount=type=cache,target=/cache,id={cache} --mount=type=ssh \
             [\"/bin/busybox\", \"sh\", \"-c\", \"/bin/busybox sha256sum /run/secrets/token | /bin/busybox cut -d' ' -f1 > /sum \
             && echo seen >> /cache/seen && /bin/busybox wc -l < /cache/seen > /cached && /probe /agent.txt\"]\n"
        ),
    )
    .unwrap();
    text.push_str(
        "\n[[module]]\nname = \"extra\"\ncontext = \"extra\"\nssh = true\n\
         secrets = [{ id = \"token\", env = \"MESHTOP_TEST_TOKEN\" }]\n",
    );
    std::fs::write(&file, text).unwrap();
    mesh
}

/// Per module, the builders its builds went to (in order), as the converge's steps say.
fn built_on(mesh: &ExampleMesh) -> std::collections::BTreeMap<String, Vec<String>> {
    let db = StateDb::open(&mesh.state()).unwrap();
    let mut on: std::collections::BTreeMap<String, Vec<String>> = Default::default();
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

fn extra_ref(mesh: &ExampleMesh) -> String {
    builds(mesh)
        .into_iter()
        .find(|b| b.module.as_deref() == Some("extra") && b.status == BuildStatus::Succeeded)
        .and_then(|b| b.reference)
        .expect("a successful build of extra")
}

fn docker_bytes(args: &[&str]) -> Vec<u8> {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(out.status.success(), "docker {args:?}: {}", said(&out));
    out.stdout
}

fn holds(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// Converge `mesh` (its builders remote) with a secret and the agent, and check the whole of
/// BuildKit ran there: the secret, the cache and the agent were mounted; the image's history is
/// BuildKit's; the secret is in no layer (`docker save`: every layer tar), history or config.
fn converge_with_buildkit(mesh: &ExampleMesh, builder: &str, env: &[(&str, &str)]) -> String {
    let secret = format!("remote-secret-{}-9b1e", common::run_id());
    let agent = Agent::start(mesh.dir.path());
    let socket = agent.socket.to_string_lossy().into_owned();
    let log = mesh.dir.path().join("converge.log");
    let mut envs = vec![
        ("MESHTOP_TEST_TOKEN", secret.as_str()),
        ("SSH_AUTH_SOCK", socket.as_str()),
    ];
    envs.extend_from_slice(env);
    let mut child = mesh.spawn_converge(&log, &envs);
    let status = wait_exit(&mut child, Duration::from_secs(400), "the converge");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains("legacy builder"),
        "built with BuildKit:\n{stderr}"
    );
    let on = built_on(mesh);
    assert_eq!(on["extra"], [builder], "{on:?}");
    let reference = extra_ref(mesh);
    let sha = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(secret.as_bytes()))
    };
    assert_eq!(read_in_image(&reference, "/sum"), sha);
    assert_eq!(read_in_image(&reference, "/cached"), "1");
    assert_eq!(
        read_in_image(&reference, "/agent.txt"),
        format!("keys=1 comment={}", agent.comment)
    );
    let comments = String::from_utf8(docker_bytes(&[
        "history",
        "--no-trunc",
        "--format",
        "{{.Comment}}",
        &reference,
    ]))
    .unwrap();
    assert!(
        comments.contains("buildkit.dockerfile.v0"),
        "the image's history is BuildKit's: {comments}"
    );
    // Layers are stored uncompressed in `docker save`'s tar: every byte of every layer is read.
    let saved = docker_bytes(&["save", &reference]);
    assert!(
        saved.len() > 1000,
        "docker save wrote {} bytes",
        saved.len()
    );
    assert!(
        holds(&saved, &sha),
        "the digest of the secret is in a layer"
    );
    assert!(!holds(&saved, &secret), "the secret is in a layer");
    let history = docker_bytes(&["history", "--no-trunc", &reference]);
    let inspect = docker_bytes(&["image", "inspect", &reference]);
    assert!(!holds(&history, &secret) && !holds(&inspect, &secret));
    assert!(!stderr.contains(&secret));
    stderr
}

#[test]
fn a_builder_over_tls_builds_secret_cache_and_ssh_mounts_with_buildkit() {
    TLS.require();
    let mesh = buildkit_mesh(
        "tlsbk",
        &[("farm", TLS.endpoint(), Some(TLS.certs("client")))],
    );
    let _guard = TlsGuard(&TLS, mesh.name.clone());
    let stderr = converge_with_buildkit(&mesh, "farm", &[]);
    assert!(
        stderr.contains(&format!("builder farm ({}) ready", TLS.endpoint())),
        "{stderr}"
    );
}

/// Over ssh to the second daemon (sshd's `SetEnv DOCKER_HOST`): not the target's daemon, so every
/// build of the module goes through ssh, the BuildKit session included.
#[test]
fn a_builder_over_ssh_builds_secret_cache_and_ssh_mounts_with_buildkit() {
    require_second_daemon();
    let sshd = common::sshd::Sshd::start_with_env(&[("DOCKER_HOST", SECOND)]);
    let mesh = buildkit_mesh("sshbk", &[("far", sshd.endpoint(), None)]);
    let _second = SecondDaemonGuard(mesh.name.clone());
    let path = sshd.path();
    let stderr = converge_with_buildkit(&mesh, "far", &[("PATH", path.as_str())]);
    assert!(
        stderr.contains(&format!("builder far ({}) ready", sshd.endpoint())),
        "{stderr}"
    );
    assert!(sshd.connections() >= 2, "{}", sshd.connections());
}

/// A TLS builder whose certificate does not verify against `ca.pem`, and one that refuses the
/// client's certificate, are each left out naming the builder, the file and why; the local daemon
/// builds.
#[test]
fn a_tls_builder_that_does_not_verify_or_refuses_the_client_is_left_out_saying_which() {
    TLS.require();
    for (which, words) in [
        ("wrong-ca", "does not verify against"),
        ("refused", "refused the client certificate"),
    ] {
        let mesh = ExampleMesh::new(&format!("tls{}", &which[..3]));
        let file = mesh.mesh_file();
        let text = std::fs::read_to_string(&file).unwrap().replacen(
            &format!("name = \"{}\"\n", mesh.name),
            &format!("name = \"{}\"\nregistry = \"{LOCAL}\"\n", mesh.name),
            1,
        );
        let dir = TLS.certs(which);
        std::fs::write(
            &file,
            format!(
                "{text}\n[[builder]]\nname = \"here\"\nendpoint = \"unix:///var/run/docker.sock\"\nmax_builds = 2\n\
                 \n[[builder]]\nname = \"bad\"\nendpoint = \"{}\"\ntls_dir = \"{}\"\n",
                TLS.endpoint(),
                dir.display()
            ),
        )
        .unwrap();
        let out = mesh.meshtop(&["converge"]);
        let text = said(&out);
        assert_eq!(out.status.code(), Some(0), "{text}");
        let expected_file = match which {
            "wrong-ca" => dir.join("ca.pem"),
            _ => dir.join("cert.pem"),
        };
        let line = text
            .lines()
            .find(|l| l.contains("builder bad ("))
            .unwrap_or_default();
        assert!(
            line.contains(&format!(
                "builder bad ({}) is left out of this converge",
                TLS.endpoint()
            )) && line.contains(words)
                && line.contains(&expected_file.display().to_string()),
            "{which}: {text}"
        );
        let on = built_on(&mesh);
        assert!(
            !on.is_empty() && on.values().all(|b| b == &["here"]),
            "{on:?}"
        );
    }
}

/// When the test ends, passed or failed: ends the step the killed daemon left running (runc's
/// processes outlive their dockerd; the step is this test's own, named by its marker), and starts
/// the fault daemon again so that later tests have it.
struct Restart(String);

impl Drop for Restart {
    fn drop(&mut self) {
        for process in common::processes_saying(&self.0) {
            if let Some(pid) = process.split(':').next() {
                let _ = Command::new("kill").args(["-9", pid]).status();
            }
        }
        if !FAULT.answers() {
            FAULT.start();
        }
    }
}

/// A builder's real dockerd SIGKILLed while its step runs: the step waits for as long as it runs on
/// that daemon's bridge (10.213.79.0/24), so the kill lands mid-step with no timing guess, and the
/// same step ends at once on the other builder. The converge ends 0, the module is built once
/// elsewhere, the row says which builder died and how, and nothing is built or stamped twice.
#[test]
fn a_builder_whose_dockerd_is_killed_mid_step_is_left_and_the_build_retried_once() {
    FAULT.require();
    let marker = format!("meshtop-step-{}", common::run_id());
    let _restart = Restart(marker.clone());
    let (dying, kept) = match rendezvous("base", &["one", "two"])[0] {
        "one" => ("one", "two"),
        _ => ("two", "one"),
    };
    let mesh = ExampleMesh::new("killd");
    let _guard = TlsGuard(&FAULT, mesh.name.clone());
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!("name = \"{}\"\nregistry = \"{LOCAL}\"\n", mesh.name),
        1,
    );
    std::fs::write(
        &file,
        format!(
            "{text}\n[[builder]]\nname = \"{dying}\"\nendpoint = \"{}\"\ntls_dir = \"{}\"\n\
             \n[[builder]]\nname = \"{kept}\"\nendpoint = \"unix:///var/run/docker.sock\"\n",
            FAULT.endpoint(),
            FAULT.certs("client").display()
        ),
    )
    .unwrap();
    let base = mesh.root().join("base/Dockerfile");
    let original = std::fs::read_to_string(&base).unwrap();
    std::fs::write(
        &base,
        format!(
            "{original}RUN [\"/bin/busybox\", \"sh\", \"-c\", \"while /bin/busybox ip -4 addr | /bin/busybox grep -v 'inet 10.213.79.1/' | /bin/busybox grep -q 'inet 10.213.79.'; do /bin/busybox sleep 0.2; done; echo {marker}\"]\n"
        ),
    )
    .unwrap();
    let log = mesh.dir.path().join("converge.log");
    let mut child = mesh.spawn_converge(&log, &[]);
    let deadline = Instant::now() + Duration::from_secs(180);
    while common::processes_saying(&marker).is_empty() {
        assert!(
            Instant::now() < deadline && child.try_wait().unwrap().is_none(),
            "the step never ran on builder {dying}:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let pid = FAULT.pid();
    let killed = Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = wait_exit(&mut child, Duration::from_secs(300), "the converge");
    let stderr = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(
        !stderr.contains("legacy builder"),
        "BuildKit over TLS:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!("builder {dying} failed the build"))
            && stderr.contains(&format!("retrying once on builder {kept}")),
        "{stderr}"
    );
    let on = built_on(&mesh);
    assert_eq!(on["base"], [dying, kept], "{on:?}");
    let rows = builds(&mesh);
    let base_rows: Vec<_> = rows
        .iter()
        .filter(|r| r.module.as_deref() == Some("base"))
        .collect();
    assert_eq!(base_rows.len(), 2, "{base_rows:#?}");
    assert_eq!(
        base_rows[0].status,
        BuildStatus::Succeeded,
        "{base_rows:#?}"
    );
    assert_eq!(base_rows[1].status, BuildStatus::Failed, "{base_rows:#?}");
    let error = base_rows[1].error.as_deref().unwrap_or_default();
    assert!(
        error.contains(&FAULT.endpoint()) && error.contains("failed to build"),
        "the row names the builder's daemon and how it went: {error}"
    );
    // One successful build per module: nothing built (nor stamped) twice.
    let mut succeeded: Vec<&str> = rows
        .iter()
        .filter(|r| r.status == BuildStatus::Succeeded)
        .filter_map(|r| r.module.as_deref())
        .collect();
    let all = succeeded.len();
    succeeded.sort_unstable();
    succeeded.dedup();
    assert_eq!(all, succeeded.len(), "{rows:#?}");
    let out = mesh.meshtop(&["status", "--json", "--exit-code"]);
    assert_eq!(out.status.code(), Some(0), "{}", said(&out));
}
