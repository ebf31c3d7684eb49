//! Walking, hashing and tarring a module's inputs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use meshtop::mesh::Platform;
use meshtop::mesh::manifest::FileEntry;
use meshtop::workspace::inputs::{InputSpec, Inputs, InputsError, hash_inputs, tar_inputs};
use sha2::{Digest, Sha256};
use tempfile::TempDir;

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, bytes).unwrap();
}

/// A small context: a Dockerfile, sources, an executable script, a symlink, an empty dir.
fn sample(root: &Path, reverse: bool) {
    let mut files: Vec<(&str, &[u8])> = vec![
        ("Dockerfile", b"FROM scratch\nCOPY . /app\n"),
        ("src/main.rs", b"fn main() {}\n"),
        ("src/lib/util.rs", b"pub fn x() {}\n"),
        ("run.sh", b"#!/bin/sh\necho hi\n"),
        ("a-b", b"dash sorts before slash"),
    ];
    if reverse {
        files.reverse();
    }
    for (rel, bytes) in files {
        write(root, rel, bytes);
    }
    fs::set_permissions(root.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    symlink("src/main.rs", root.join("link")).unwrap();
    fs::create_dir_all(root.join("empty")).unwrap();
}

fn args() -> BTreeMap<String, String> {
    BTreeMap::from([("A".to_string(), "1".to_string())])
}

fn hash(root: &Path) -> Inputs {
    hash_with(
        root,
        &args(),
        None,
        &[Platform::parse("linux/amd64").unwrap()],
    )
}

fn hash_with(
    root: &Path,
    args: &BTreeMap<String, String>,
    base: Option<&str>,
    platforms: &[Platform],
) -> Inputs {
    let spec = InputSpec {
        context: root,
        dockerfile: "Dockerfile",
        build_args: args,
        base_digest: base,
        platforms,
        upstreams: &meshtop::workspace::inputs::NO_UPSTREAMS,
        contexts: &meshtop::workspace::inputs::NO_CONTEXTS,
        context_images: &meshtop::workspace::inputs::NO_CONTEXTS,
    };
    hash_inputs(&spec).unwrap()
}

fn tar_of(root: &Path, expected: Option<&Inputs>) -> (Result<Inputs, InputsError>, Vec<u8>) {
    let args = args();
    let platforms = [Platform::parse("linux/amd64").unwrap()];
    let spec = InputSpec {
        context: root,
        dockerfile: "Dockerfile",
        build_args: &args,
        base_digest: None,
        platforms: &platforms,
        upstreams: &meshtop::workspace::inputs::NO_UPSTREAMS,
        contexts: &meshtop::workspace::inputs::NO_CONTEXTS,
        context_images: &meshtop::workspace::inputs::NO_CONTEXTS,
    };
    let mut out = Vec::new();
    let result = tar_inputs(&spec, expected, &mut out);
    (result, out)
}

#[test]
fn manifest_lists_what_is_sent() {
    let dir = TempDir::new().unwrap();
    sample(dir.path(), false);
    let inputs = hash(dir.path());
    assert_eq!(inputs.digest.len(), 64);
    assert!(
        inputs
            .digest
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    );
    let files = &inputs.manifest.files;
    let paths: Vec<&str> = files.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "Dockerfile",
            "a-b",
            "empty",
            "link",
            "run.sh",
            "src",
            "src/lib",
            "src/lib/util.rs",
            "src/main.rs"
        ]
    );
    let sha = hex::encode(Sha256::digest(b"fn main() {}\n"));
    assert!(
        matches!(&files["src/main.rs"], FileEntry::File { sha256, mode } if *sha256 == sha && mode & 0o111 == 0),
        "{:?}",
        files["src/main.rs"]
    );
    assert!(matches!(
        files["run.sh"],
        FileEntry::File { mode, .. } if mode & 0o100 != 0
    ));
    assert_eq!(
        files["link"],
        FileEntry::Link {
            target: "src/main.rs".into()
        }
    );
    assert_eq!(files["empty"], FileEntry::Dir { mode: 0o755 });
    assert_eq!(
        inputs.manifest.dockerfile,
        hex::encode(Sha256::digest(b"FROM scratch\nCOPY . /app\n"))
    );
}

#[test]
fn same_tree_same_digest_anywhere() {
    let a = TempDir::new().unwrap();
    let b = TempDir::new().unwrap();
    sample(a.path(), false);
    sample(b.path(), true); // created in another order, elsewhere
    let first = hash(a.path());
    assert_eq!(first, hash(b.path()));

    // Touching mtimes changes nothing.
    let f = fs::File::options()
        .write(true)
        .open(a.path().join("src/main.rs"))
        .unwrap();
    f.set_modified(std::time::SystemTime::UNIX_EPOCH).unwrap();
    assert_eq!(first, hash(a.path()));
    // Permission bits are kept in the image (as `docker build` keeps them), so they are inputs:
    // a file made private moves the address (issue 10: a 0600 file became world-readable).
    fs::set_permissions(
        a.path().join("src/lib/util.rs"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let private = hash(a.path());
    assert_ne!(first, private);
    assert!(matches!(
        private.manifest.files["src/lib/util.rs"],
        FileEntry::File { mode: 0o600, .. }
    ));
}

#[test]
fn every_input_moves_the_digest() {
    let dir = TempDir::new().unwrap();
    sample(dir.path(), false);
    let root = dir.path();
    let amd = [Platform::parse("linux/amd64").unwrap()];
    let base = hash(root).digest;
    let mut seen = vec![base.clone()];
    let mut check = |what: &str, digest: String| {
        assert!(!seen.contains(&digest), "{what} did not move the digest");
        seen.push(digest);
    };
    check(
        "build args",
        hash_with(root, &BTreeMap::new(), None, &amd).digest,
    );
    check(
        "base digest",
        hash_with(root, &args(), Some("sha256:aa"), &amd).digest,
    );
    let both = [
        Platform::parse("linux/arm64").unwrap(),
        Platform::parse("linux/amd64").unwrap(),
    ];
    let both_digest = hash_with(root, &args(), None, &both).digest;
    let mut reversed = both.clone();
    reversed.reverse();
    assert_eq!(
        both_digest,
        hash_with(root, &args(), None, &reversed).digest,
        "platform order matters"
    );
    check("platforms", both_digest);

    write(root, "src/main.rs", b"fn main() {}\n\n");
    check("one byte", hash(root).digest);
    fs::set_permissions(root.join("src/main.rs"), fs::Permissions::from_mode(0o744)).unwrap();
    check("x bit", hash(root).digest);
    fs::set_permissions(root.join("src/main.rs"), fs::Permissions::from_mode(0o700)).unwrap();
    check("group and other bits", hash(root).digest);
    fs::remove_file(root.join("link")).unwrap();
    symlink("src/lib/util.rs", root.join("link")).unwrap();
    check("link target", hash(root).digest);
    fs::create_dir(root.join("empty/more")).unwrap();
    check("empty dir", hash(root).digest);
    // Directories keep their bits in the image too (issue 10: `docker build` keeps them).
    fs::set_permissions(root.join("empty"), fs::Permissions::from_mode(0o700)).unwrap();
    let private = hash(root);
    assert_eq!(
        private.manifest.files["empty"],
        FileEntry::Dir { mode: 0o700 }
    );
    check("directory bits", private.digest);
    write(root, "Dockerfile", b"FROM scratch\n");
    check("Dockerfile", hash(root).digest);
}

#[test]
fn dockerignore_is_applied_and_dockerfile_always_sent() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    write(root, "docker/Dockerfile", b"FROM scratch\n");
    write(root, "docker/notes.txt", b"x");
    write(root, "node_modules/keep/x.js", b"keep");
    write(root, "node_modules/other.js", b"drop");
    write(root, "vendor/a/keep.go", b"keep");
    write(root, "vendor/a/drop.go", b"drop");
    write(root, "main.go", b"package main");
    write(root, "README.md", b"readme");
    write(root, "NOTES.md", b"notes");
    write(root, ".dockerignore", b"# build context\n.dockerignore\ndocker/\nnode_modules\n!node_modules/keep\n*.md\n!README.md\nvendor\n!**/keep.go\n");
    let spec = InputSpec {
        context: root,
        dockerfile: "docker/Dockerfile",
        build_args: &BTreeMap::new(),
        base_digest: None,
        platforms: &[],
        upstreams: &meshtop::workspace::inputs::NO_UPSTREAMS,
        contexts: &meshtop::workspace::inputs::NO_CONTEXTS,
        context_images: &meshtop::workspace::inputs::NO_CONTEXTS,
    };
    let inputs = hash_inputs(&spec).unwrap();
    let paths: Vec<&str> = inputs.manifest.files.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            ".dockerignore",
            "README.md",
            "docker",
            "docker/Dockerfile",
            "main.go",
            "node_modules",
            "node_modules/keep",
            "node_modules/keep/x.js",
            "vendor",
            "vendor/a",
            "vendor/a/keep.go",
        ]
    );
}

#[test]
fn tar_holds_exactly_what_was_hashed() {
    let dir = TempDir::new().unwrap();
    sample(dir.path(), false);
    write(dir.path(), "big.bin", &vec![7u8; 1_000_003]); // several read chunks
    let hashed = hash(dir.path());
    let (tarred, bytes) = tar_of(dir.path(), Some(&hashed));
    assert_eq!(tarred.unwrap(), hashed);

    let mut seen = BTreeMap::new();
    let mut archive = tar::Archive::new(bytes.as_slice());
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let h = entry.header().clone();
        assert_eq!(h.mtime().unwrap(), 0);
        assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0));
        let path = entry
            .path()
            .unwrap()
            .to_str()
            .unwrap()
            .trim_end_matches('/')
            .to_string();
        let got = match h.entry_type() {
            tar::EntryType::Directory => FileEntry::Dir {
                mode: h.mode().unwrap(),
            },
            tar::EntryType::Symlink => FileEntry::Link {
                target: h
                    .link_name()
                    .unwrap()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_string(),
            },
            tar::EntryType::Regular => {
                let mut data = Vec::new();
                entry.read_to_end(&mut data).unwrap();
                FileEntry::File {
                    sha256: hex::encode(Sha256::digest(&data)),
                    mode: h.mode().unwrap() & 0o7777,
                }
            }
            other => panic!("unexpected entry {other:?}"),
        };
        seen.insert(path, got);
    }
    assert_eq!(seen, *hashed.manifest.files);

    // Deterministic bytes: a copy made elsewhere, in another order, tars to the same bytes.
    let other = TempDir::new().unwrap();
    sample(other.path(), true);
    write(other.path(), "big.bin", &vec![7u8; 1_000_003]);
    let (_, again) = tar_of(other.path(), None);
    assert_eq!(bytes, again);
}

#[test]
fn a_file_changed_after_the_plan_stops_the_tar() {
    let dir = TempDir::new().unwrap();
    sample(dir.path(), false);
    let planned = hash(dir.path());
    write(dir.path(), "src/main.rs", b"fn main() { changed() }\n");
    write(dir.path(), "new.txt", b"new");
    let (result, bytes) = tar_of(dir.path(), Some(&planned));
    match result {
        Err(InputsError::Changed { files, detail }) => {
            assert_eq!(files, ["new.txt", "src/main.rs"]);
            assert!(detail.contains("src/main.rs changed"), "{detail}");
            assert!(detail.contains("new.txt added"), "{detail}");
        }
        other => panic!("expected Changed, got {other:?}"),
    }
    // The aborted tar is not finished: no end-of-archive blocks.
    assert!(bytes.len() < 1024 || bytes[bytes.len() - 1024..].iter().any(|b| *b != 0));
}

#[test]
fn clear_errors_name_the_path() {
    let dir = TempDir::new().unwrap();
    let root = dir.path();
    write(root, "Dockerfile", b"FROM scratch\n");
    let args = BTreeMap::new();
    let spec = |dockerfile| InputSpec {
        context: root,
        dockerfile,
        build_args: &args,
        base_digest: None,
        platforms: &[],
        upstreams: &meshtop::workspace::inputs::NO_UPSTREAMS,
        contexts: &meshtop::workspace::inputs::NO_CONTEXTS,
        context_images: &meshtop::workspace::inputs::NO_CONTEXTS,
    };

    let sock = root.join("agent.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let err = hash_inputs(&spec("Dockerfile")).unwrap_err().to_string();
    assert!(
        err.contains("agent.sock") && err.contains("socket") && err.contains(".dockerignore"),
        "{err}"
    );
    write(root, ".dockerignore", b"*.sock\n");
    hash_inputs(&spec("Dockerfile")).unwrap();
    fs::remove_file(&sock).unwrap();

    use std::os::unix::ffi::OsStrExt;
    let bad = root.join(std::ffi::OsStr::from_bytes(b"bad\xffname"));
    fs::write(&bad, b"x").unwrap();
    let err = hash_inputs(&spec("Dockerfile")).unwrap_err();
    assert!(matches!(err, InputsError::NotUtf8 { .. }), "{err}");
    assert!(err.to_string().contains("not valid UTF-8"), "{err}");
    fs::remove_file(&bad).unwrap();

    for dockerfile in ["../Dockerfile", "/etc/passwd", "", "missing/Dockerfile"] {
        let err = hash_inputs(&spec(dockerfile)).unwrap_err();
        assert!(
            matches!(err, InputsError::Dockerfile { .. }),
            "{dockerfile:?}: {err}"
        );
    }
    symlink("/etc/hostname", root.join("Escape")).unwrap();
    let err = hash_inputs(&spec("Escape")).unwrap_err().to_string();
    assert!(err.contains("outside the build context"), "{err}");

    write(root, ".dockerignore", b"ok\n[oops\n");
    let err = hash_inputs(&spec("Dockerfile")).unwrap_err().to_string();
    assert!(err.contains(".dockerignore line 2"), "{err}");
    fs::remove_file(root.join(".dockerignore")).unwrap();

    let secret = root.join("secret.txt");
    fs::write(&secret, b"x").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o000)).unwrap();
    if fs::File::open(&secret).is_err() {
        // Not root: the file really is unreadable.
        let err = hash_inputs(&spec("Dockerfile")).unwrap_err().to_string();
        assert!(err.contains("secret.txt"), "{err}");
    }
}

/// The context streams to the builder in bounded chunks; a context that changed since the plan
/// ends the stream with an error (the builder never takes a truncated tar for a whole one), and an
/// unchanged one streams exactly the bytes of the tar (issue 10, item 5).
#[test]
fn the_streamed_context_is_the_tar_and_a_changed_one_ends_in_an_error() {
    use meshtop::backends::daemon::build::context_pipe;
    let stream = |root: &Path, expected: Option<Inputs>| {
        let (mut writer, mut body) = context_pipe();
        let root = root.to_path_buf();
        let producer = std::thread::spawn(move || {
            let args = args();
            let platforms = [Platform::parse("linux/amd64").unwrap()];
            let spec = InputSpec {
                context: &root,
                dockerfile: "Dockerfile",
                build_args: &args,
                base_digest: None,
                platforms: &platforms,
                upstreams: &meshtop::workspace::inputs::NO_UPSTREAMS,
                contexts: &meshtop::workspace::inputs::NO_CONTEXTS,
                context_images: &meshtop::workspace::inputs::NO_CONTEXTS,
            };
            match tar_inputs(&spec, expected.as_ref(), &mut writer) {
                Ok(_) => writer.finish().unwrap(),
                Err(error) => writer.abort(&error.to_string()),
            }
        });
        let mut items = Vec::new();
        while let Some(item) = body.blocking_recv() {
            items.push(item);
        }
        producer.join().unwrap();
        items
    };
    let dir = TempDir::new().unwrap();
    sample(dir.path(), false);
    write(dir.path(), "big.bin", &vec![7u8; 3_000_001]);
    let planned = hash(dir.path());
    let items = stream(dir.path(), Some(planned.clone()));
    assert!(items.len() > 4, "sent in chunks: {}", items.len());
    let mut sent = Vec::new();
    for item in items {
        let chunk = item.unwrap();
        assert!(chunk.len() <= 256 * 1024);
        sent.extend_from_slice(&chunk);
    }
    let (_, whole) = tar_of(dir.path(), None);
    assert_eq!(sent, whole);

    write(dir.path(), "src/main.rs", b"fn main() { changed() }\n");
    let items = stream(dir.path(), Some(planned));
    let last = items.last().unwrap();
    let error = last.as_ref().unwrap_err().to_string();
    assert!(error.contains("changed since it was planned"), "{error}");
}

/// A manifest saved before `meshtop-inputs/v3` stored a directory as the bare `"Dir"` (sent as
/// 0755): it still reads, so the why of the next address can compare against it.
#[test]
fn a_directory_entry_saved_before_v3_still_reads() {
    let old: FileEntry = serde_json::from_str("\"Dir\"").unwrap();
    assert_eq!(old, FileEntry::Dir { mode: 0o755 });
    let now = FileEntry::Dir { mode: 0o700 };
    let json = serde_json::to_string(&now).unwrap();
    assert_eq!(serde_json::from_str::<FileEntry>(&json).unwrap(), now);
    let file: FileEntry = serde_json::from_str(r#"{"File":{"sha256":"ab"}}"#).unwrap();
    assert_eq!(
        file,
        FileEntry::File {
            sha256: "ab".into(),
            mode: 0
        }
    );
}
