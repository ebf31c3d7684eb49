//! The build context served through the build's BuildKit session (issue 56), against the real
//! daemon: BuildKit keeps what it received and asks only for what changed, counted by the
//! session's own tally (the line each build says); a file that changed between the plan and the
//! build is refused — before anything is served, or as its bytes are served — and no image is made.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use common::{ExampleMesh, read_in_image, said};
use meshtop::backends::daemon::build::{BuildContext, BuildRequest, ContextBody};
use meshtop::backends::daemon::session::SecretValues;
use meshtop::backends::daemon::{BuildEnd, Daemon};
use meshtop::backends::state::StateDb;
use meshtop::mesh::model::Platform;
use meshtop::mesh::sent::SentContext;
use meshtop::workspace::inputs::{
    InputSpec, Inputs, NO_CONTEXTS, NO_UPSTREAMS, hash_inputs, sent_context,
};
use meshtop::workspace::stat_cache::NoCache;

/// What the session's tally said of one build: (sent, offered, bytes).
fn sent_line(line: &str) -> Option<(u64, u64, u64)> {
    let rest = line.split("meshtop: context: sent ").nth(1)?;
    let mut words = rest.split_whitespace();
    let sent = words.next()?.parse().ok()?;
    let offered = words.nth(1)?.parse().ok()?;
    let bytes = words.nth(1)?.trim_start_matches('(').parse().ok()?;
    Some((sent, offered, bytes))
}

/// The tally lines `module`'s builds said, in order.
fn tallies(mesh: &ExampleMesh, module: &str) -> Vec<(u64, u64, u64)> {
    StateDb::open(&mesh.state())
        .unwrap()
        .events_tail(&mesh.name, 100_000)
        .unwrap()
        .iter()
        .filter(|e| e.module.as_deref() == Some(module))
        .filter_map(|e| sent_line(&e.text))
        .collect()
}

/// The example mesh with one more module, `extra`: busybox, `files` and `dockerfile`; converged once.
fn with_extra(tag: &str, files: &[(&str, &str)], dockerfile: &str) -> ExampleMesh {
    let mesh = ExampleMesh::new(tag);
    let dir = mesh.root().join("extra");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy("/bin/busybox", dir.join("busybox")).unwrap();
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    std::fs::write(dir.join("Dockerfile"), dockerfile).unwrap();
    let file = mesh.mesh_file();
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("\n[[module]]\nname = \"extra\"\ncontext = \"extra\"\n");
    std::fs::write(&file, text).unwrap();
    mesh
}

#[test]
fn a_second_build_after_a_one_file_change_sends_only_that_file() {
    let notes: Vec<(String, String)> = (0..6)
        .map(|n| (format!("notes/{n}.txt"), format!("note {n}\n")))
        .collect();
    let mut files: Vec<(&str, &str)> = notes
        .iter()
        .map(|(n, t)| (n.as_str(), t.as_str()))
        .collect();
    files.push(("input.txt", "one\n"));
    let dockerfile =
        "FROM scratch\nCOPY busybox /bin/busybox\nCOPY notes /notes\nCOPY input.txt /input.txt\n";
    let mesh = with_extra("ctxsent", &files, dockerfile);
    let dir = mesh.root().join("extra");

    let first = mesh.converge_with(&[], &[]);
    assert!(first.status.success(), "{}", said(&first));
    let after_first = tallies(&mesh, "extra");
    let &[(sent, offered, bytes)] = after_first.as_slice() else {
        panic!("one tally for the first build: {after_first:?}");
    };
    // Nothing was kept from before: busybox, six notes, input.txt, the Dockerfile.
    assert_eq!((sent, offered), (9, 9), "{after_first:?}");
    let busybox = std::fs::metadata("/bin/busybox").unwrap().len();
    assert!(bytes > busybox, "busybox went: {bytes} B");

    std::fs::write(dir.join("input.txt"), "two!\n").unwrap();
    let second = mesh.converge_with(&[], &[]);
    assert!(second.status.success(), "{}", said(&second));
    let all = tallies(&mesh, "extra");
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1], (1, 9, 5), "one file of 5 bytes went: {all:?}");

    let reference = common::builds(&mesh)
        .into_iter()
        .find(|b| b.module.as_deref() == Some("extra"))
        .and_then(|b| b.reference)
        .unwrap();
    assert_eq!(read_in_image(&reference, "/input.txt"), "two!");
    assert_eq!(read_in_image(&reference, "/notes/5.txt"), "note 5");
}

fn platforms() -> [Platform; 1] {
    [Platform::parse(&format!("linux/{}", docker_arch())).unwrap()]
}

fn docker_arch() -> &'static str {
    match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    }
}

fn spec<'a>(
    root: &'a Path,
    args: &'a BTreeMap<String, String>,
    p: &'a [Platform],
) -> InputSpec<'a> {
    InputSpec {
        context: root,
        dockerfile: "Dockerfile",
        build_args: args,
        base_digest: None,
        platforms: p,
        upstreams: &NO_UPSTREAMS,
        target: None,
        contexts: &NO_CONTEXTS,
        context_images: &NO_CONTEXTS,
    }
}

/// A tar the test never wants: a daemon that fell back to its legacy builder fails the build.
fn no_tar() -> ContextBody {
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let _ = tx.try_send(Err(std::io::Error::other(
        "this test serves the context: the daemon fell back to its legacy builder",
    )));
    rx
}

/// A build of `sent` under `tag`, with nothing else asked.
fn served_request(sent: SentContext, tag: &str) -> BuildRequest {
    BuildRequest {
        context: BuildContext::Served {
            context: Arc::new(sent),
            tar: Box::new(no_tar),
        },
        dockerfile: "Dockerfile".into(),
        target: None,
        tag: tag.into(),
        build_args: HashMap::new(),
        labels: HashMap::new(),
        no_cache: false,
        platforms: vec![],
        secrets: SecretValues::default(),
        ssh_agent: None,
        on_base: false,
    }
}

async fn build_served(
    daemon: &Daemon,
    root: &Path,
    planned: &Inputs,
    tag: &str,
) -> (BuildEnd, Vec<String>) {
    let args = BTreeMap::new();
    let p = platforms();
    let key = format!("{tag}-key");
    let sent = sent_context(&spec(root, &args, &p), Some(planned), &NoCache, key).unwrap();
    let request = served_request(sent, tag);
    let mut lines = Vec::new();
    let end = daemon
        .build(request, |line| lines.push(line.to_string()))
        .await
        .unwrap();
    (end, lines)
}

#[tokio::test]
async fn a_file_changed_between_the_plan_and_the_build_is_refused_and_nothing_is_made() {
    let daemon = Daemon::connect().await.unwrap();
    assert!(
        daemon.builds_with_buildkit(),
        "the test daemon builds with BuildKit"
    );
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(
        root.join("Dockerfile"),
        "FROM scratch\nCOPY data.txt /data.txt\n",
    )
    .unwrap();
    std::fs::write(root.join("data.txt"), "planned\n").unwrap();
    let args = BTreeMap::new();
    let p = platforms();
    let planned = hash_inputs(&spec(root, &args, &p)).unwrap();

    // Changed before anything is served: refused by the walk that checks the plan.
    std::fs::write(root.join("data.txt"), "changed\n").unwrap();
    let refused = sent_context(&spec(root, &args, &p), Some(&planned), &NoCache, "k".into())
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("changed since it was planned"),
        "{refused}"
    );
    assert!(refused.contains("data.txt"), "{refused}");

    // Changed after the check, before BuildKit asks for its bytes: refused as they are served.
    std::fs::write(root.join("data.txt"), "planned\n").unwrap();
    let tag = format!("{}:1", common::test_name("ctxchanged"));
    let args_owned = BTreeMap::new();
    let sent = sent_context(
        &spec(root, &args_owned, &p),
        Some(&planned),
        &NoCache,
        tag.clone(),
    )
    .unwrap();
    std::fs::write(root.join("data.txt"), "CHANGED\n").unwrap();
    let request = served_request(sent, &tag);
    let end = daemon.build(request, |_| {}).await.unwrap();
    match end {
        BuildEnd::Failed(why) => {
            assert!(why.contains("changed since it was planned"), "{why}");
            assert!(why.contains("data.txt"), "{why}");
        }
        BuildEnd::Built(id) => panic!("built {id} from a changed file"),
    }
    assert_eq!(
        daemon.image_id(&tag).await.unwrap(),
        None,
        "no image under {tag}"
    );

    // Back as planned: it builds, and the image holds the planned bytes.
    std::fs::write(root.join("data.txt"), "planned\n").unwrap();
    let (end, lines) = build_served(&daemon, root, &planned, &tag).await;
    assert!(matches!(end, BuildEnd::Built(_)), "{end:?}\n{lines:#?}");
    let saved = std::process::Command::new("docker")
        .args(["save", &tag])
        .output()
        .unwrap();
    assert!(saved.status.success());
    let needle = b"planned\n";
    assert!(
        saved.stdout.windows(needle.len()).any(|w| w == needle),
        "the image holds the planned bytes"
    );
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", &tag])
        .output();
}

/// The key meshtop kept a context under before the state file's secret went into it: the machine
/// and the directory, which anyone who can reach the daemon can compute.
fn key_without_the_secret(dir: &Path) -> String {
    use sha2::{Digest, Sha256};
    let dir = std::fs::canonicalize(dir).unwrap();
    let mut hash = Sha256::new();
    hash.update(b"meshtop context\0");
    hash.update(gethostname::gethostname().as_encoded_bytes());
    hash.update(b"\0");
    hash.update(dir.as_os_str().as_encoded_bytes());
    hex::encode(hash.finalize())
}

/// Someone else on the same builder daemon sends a look-alike of a module's context under the key
/// they can compute — other bytes, then the same sizes, mtimes and modes — so that BuildKit keeps
/// it. The module's next build must not take those files unasked: its key carries its state file's
/// secret. (With the key of machine and directory alone, the forced build took "POISON!".)
#[tokio::test]
async fn a_look_alike_context_left_on_the_daemon_by_someone_else_is_never_built_from() {
    use meshtop::mesh::sent::{SentDockerfile, SentEntry, SentKind};
    let dockerfile = "FROM scratch\nCOPY busybox /bin/busybox\nCOPY data.txt /data.txt\n";
    let mesh = with_extra("ctxlook", &[("data.txt", "planned\n")], dockerfile);
    let dir = mesh.root().join("extra");
    let first = mesh.converge_with(&[], &[]);
    assert!(first.status.success(), "{}", said(&first));

    // The look-alike: data.txt's stat data, other bytes of the same length.
    let elsewhere = tempfile::tempdir().unwrap();
    let poison = elsewhere.path().join("data.txt");
    std::fs::write(&poison, "POISON!\n").unwrap();
    let entry = |name: &str, source: &Path, later_ns: i64| {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(dir.join(name)).unwrap();
        let bytes = std::fs::read(source).unwrap();
        SentEntry {
            path: name.into(),
            kind: SentKind::File {
                mode: meta.mode() & 0o7777,
                size: meta.len(),
                mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec() + later_ns,
                source: source.to_path_buf(),
                sha256: hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&bytes)),
            },
        }
    };
    // Sent twice: BuildKit asks only for a file whose stat data differ from what it kept, so the
    // bytes go first under another mtime, then again under the module's own.
    let tag = format!("{}:1", common::test_name("ctxlook"));
    let daemon = Daemon::connect().await.unwrap();
    for later_ns in [1, 0] {
        let look_alike = SentContext {
            entries: vec![
                entry("busybox", &dir.join("busybox"), 0),
                entry("data.txt", &poison, later_ns),
            ],
            dockerfile: SentDockerfile::new("Dockerfile", dockerfile.as_bytes().to_vec(), 0o644),
            cache_key: key_without_the_secret(&dir),
        };
        let mut lines = Vec::new();
        let end = daemon
            .build(served_request(look_alike, &tag), |l| {
                lines.push(l.to_string())
            })
            .await
            .unwrap();
        assert!(matches!(end, BuildEnd::Built(_)), "{end:?} {lines:#?}");
        // data.txt went each time (with busybox and the Dockerfile too where nothing was kept).
        let sent = lines.iter().find_map(|l| sent_line(l));
        assert!(sent.is_some_and(|(sent, _, _)| sent >= 1), "{lines:#?}");
    }
    let _ = std::process::Command::new("docker")
        .args(["rmi", "-f", &tag])
        .output();

    let forced = mesh.converge_with(&["--force", "extra"], &[]);
    assert!(forced.status.success(), "{}", said(&forced));
    let reference = common::builds(&mesh)
        .into_iter()
        .find(|b| b.module.as_deref() == Some("extra"))
        .and_then(|b| b.reference)
        .unwrap();
    assert_eq!(read_in_image(&reference, "/data.txt"), "planned");
}
