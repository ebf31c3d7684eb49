//! The mesh file: a valid mesh, contexts confined to the repository, syntax errors, junk, and how the
//! file is found. Every malformed case is in `mesh_file_errors.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::fs;
use std::path::Path;

use common::mesh_file::*;
use meshtop::mesh::{Platform, Policy, Registry, Target};
use meshtop::workspace::file;

#[test]
fn a_valid_mesh_with_three_tiers() {
    let dir = repo();
    let text = r#"
[mesh]
name = "demo"
registry = "localhost:5000"
platforms = ["linux/arm64", "linux/amd64"]

[target]
kind = "docker"

[[module]]
name = "web"
context = "web"
base = "base"

[[module]]
name = "api"
context = "./api"
dockerfile = "build/Api.Dockerfile"
base = "tools"
policy = "record"
platforms = ["linux/amd64"]
args = { GREETING = "hello", B_2 = "x" }

[[module]]
name = "tools"
context = "tools"
base = "base"

[[module]]
name = "base"
context = "base"
policy = "rollout"

[[machine]]
name = "demo-api-1"
module = "api"
command = ["sh", "-c", "sleep 3600"]
env = { MODE = "test" }

[[machine]]
name = "demo-web-1"
module = "web"
"#;
    let path = write(dir.path(), "mesh.toml", text);
    let mesh = file::load(&path).unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();

    assert_eq!(mesh.name, "demo");
    assert_eq!(mesh.root, root);
    assert_eq!(mesh.file, root.join("mesh.toml"));
    // One [target] table: the mesh's one target, named `default`.
    assert_eq!(mesh.targets.len(), 1);
    assert_eq!(mesh.target("default"), Some(&Target::Docker));
    assert_eq!(
        mesh.registry,
        Some(Registry {
            host: "localhost:5000".into(),
            insecure: false
        })
    );
    assert_eq!(
        mesh.tiers(),
        vec![
            vec!["base".to_string()],
            vec!["tools".into(), "web".into()],
            vec!["api".into()]
        ]
    );
    let order: Vec<(&str, u32)> = mesh
        .modules
        .iter()
        .map(|m| (m.name.as_str(), m.tier))
        .collect();
    assert_eq!(
        order,
        vec![("base", 0), ("tools", 1), ("web", 1), ("api", 2)]
    );

    let api = mesh.module("api").unwrap();
    assert_eq!(api.context, root.join("api"));
    assert!(api.context.is_absolute());
    assert_eq!(api.dockerfile, "build/Api.Dockerfile");
    assert_eq!(api.base.as_deref(), Some("tools"));
    assert_eq!(api.policy, Policy::Record);
    assert_eq!(api.platforms, vec![Platform::parse("linux/amd64").unwrap()]);
    assert_eq!(
        api.build_args
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect::<Vec<_>>(),
        [("B_2", "x"), ("GREETING", "hello")]
    );
    assert_eq!(api.line, line_of(text, "name = \"api\"") - 1);

    let base = mesh.module("base").unwrap();
    assert_eq!(base.context, root.join("base"));
    assert_eq!(base.dockerfile, "Dockerfile");
    assert_eq!(base.policy, Policy::Rollout);
    assert_eq!(base.base, None);
    // The mesh's platforms, sorted, fill a module that sets none.
    assert_eq!(
        base.platforms,
        vec![
            Platform::parse("linux/amd64").unwrap(),
            Platform::parse("linux/arm64").unwrap()
        ]
    );
    assert!(base.build_args.is_empty());
    assert_eq!(mesh.module("web").unwrap().policy, Policy::Rollout);

    assert_eq!(mesh.machines.len(), 2);
    assert_eq!(mesh.machines[0].name, "demo-api-1");
    assert_eq!(mesh.machines[0].module, "api");
    assert_eq!(mesh.machines[0].command, ["sh", "-c", "sleep 3600"]);
    assert_eq!(
        mesh.machines[0].env.get("MODE").map(String::as_str),
        Some("test")
    );
    assert!(mesh.machines[1].command.is_empty() && mesh.machines[1].env.is_empty());

    // parse() on the same text agrees with load().
    let parsed = file::parse(text, &path).unwrap();
    assert_eq!(parsed.tiers(), mesh.tiers());
}

#[test]
fn platforms_stay_empty_when_nobody_sets_them_and_kubernetes_defaults() {
    let dir = repo();
    let text = format!(
        "{HEAD}[target]\nkind = \"kubernetes\"\ncontext = \"kind-demo\"\n\n[[module]]\nname = \"base\"\ncontext = \"base\"\n"
    );
    let mesh = file::load(&write(dir.path(), "mesh.toml", &text)).unwrap();
    assert!(mesh.modules[0].platforms.is_empty());
    assert_eq!(
        mesh.target("default"),
        Some(&Target::Kubernetes {
            namespace: "demo".into(),
            context: Some("kind-demo".into())
        })
    );
    assert_eq!(mesh.registry, None);
}

const ONE: &str = "[[module]]\nname = \"base\"\ncontext = \"base\"\n";

#[cfg(unix)]
#[test]
fn a_symlinked_context_pointing_outside_is_refused() {
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "Dockerfile", "FROM scratch\n");
    let dir = repo();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("linked")).unwrap();
    let text = format!("{HEAD}[[module]]\nname = \"api\"\ncontext = \"linked\"\n");
    refused_in(
        dir.path(),
        &text,
        line_of(&text, "linked"),
        &["module \"api\"", "through a symlink"],
    );

    // A symlink that stays inside the repository is fine, and resolves to its real place.
    std::os::unix::fs::symlink(dir.path().join("api"), dir.path().join("api-link")).unwrap();
    let text = format!("{HEAD}[[module]]\nname = \"api\"\ncontext = \"api-link\"\n");
    let mesh = file::load(&write(dir.path(), "mesh.toml", &text)).unwrap();
    assert_eq!(
        mesh.modules[0].context,
        fs::canonicalize(dir.path().join("api")).unwrap()
    );

    // A Dockerfile symlinked out of the context is refused too.
    std::os::unix::fs::symlink(
        outside.path().join("Dockerfile"),
        dir.path().join("web/Out.Dockerfile"),
    )
    .unwrap();
    let text = format!(
        "{HEAD}[[module]]\nname = \"web\"\ncontext = \"web\"\ndockerfile = \"Out.Dockerfile\"\n"
    );
    refused_in(
        dir.path(),
        &text,
        line_of(&text, "Out.Dockerfile"),
        &["module \"web\"", "`dockerfile`", "symlink"],
    );
}

#[test]
fn a_git_work_tree_above_the_mesh_file_is_the_repository() {
    let dir = repo();
    fs::create_dir(dir.path().join(".git")).unwrap();
    write(dir.path(), "shared/Dockerfile", "FROM scratch\n");
    let sub = dir.path().join("meshes/demo");
    let text = format!("{HEAD}[[module]]\nname = \"shared\"\ncontext = \"../../shared\"\n");
    let mesh = file::load(&write(&sub, "mesh.toml", &text)).unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    assert_eq!(mesh.root, root);
    assert_eq!(mesh.modules[0].context, root.join("shared"));

    // Still nothing above the work tree.
    let text = format!("{HEAD}[[module]]\nname = \"shared\"\ncontext = \"../../../shared\"\n");
    refused_in(
        &sub,
        &text,
        line_of(&text, "../../../shared"),
        &["escapes the repository", "`..`"],
    );

    // Without the .git entry, the mesh file's directory is the root and `..` is refused.
    fs::remove_dir(dir.path().join(".git")).unwrap();
    let text = format!("{HEAD}[[module]]\nname = \"shared\"\ncontext = \"../../shared\"\n");
    refused_in(
        &sub,
        &text,
        line_of(&text, "../../shared"),
        &["escapes the repository"],
    );

    // A `.git` file (worktrees, submodules) counts as well.
    fs::write(dir.path().join(".git"), "gitdir: /somewhere\n").unwrap();
    let mesh = file::load(&sub.join("mesh.toml")).unwrap();
    assert_eq!(mesh.root, root);
}

#[test]
fn invalid_toml_names_line_and_column() {
    let dir = repo();
    let text = format!("{HEAD}[[module]]\nname = \"base\ncontext = \"base\"\n");
    let path = write(dir.path(), "mesh.toml", &text);
    let err = file::load(&path).unwrap_err();
    assert_eq!(err.line, Some(5));
    assert!(err.column.is_some());
    assert!(
        err.to_string()
            .starts_with(&format!("{}:5:", path.display())),
        "{err}"
    );
    assert!(err.to_string().contains("not valid TOML"), "{err}");

    let text = format!("{HEAD}{ONE}name = \"again\"\n");
    let err = file::parse(&text, &path).unwrap_err();
    assert_eq!(err.line, Some(7), "{err}");
    assert!(err.what.contains("duplicate key"), "{err}");
}

#[test]
fn empty_junk_and_non_utf8_files_are_errors() {
    let dir = repo();
    let empty = write(dir.path(), "mesh.toml", "");
    assert!(file::load(&empty).unwrap_err().what.contains("no [mesh]"));

    let path = dir.path().join("junk.toml");
    fs::write(&path, [b'[', b'm', 0xff, 0xfe, 0x00, b'\n']).unwrap();
    let err = file::load(&path).unwrap_err();
    assert!(err.what.contains("not UTF-8"), "{err}");
    assert_eq!(err.line, Some(1));

    let junk: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 % 128)
        .collect();
    fs::write(&path, &junk).unwrap();
    assert!(file::load(&path).is_err());

    let missing = file::load(&dir.path().join("nope.toml")).unwrap_err();
    assert!(
        missing.to_string().contains("cannot read the mesh file"),
        "{missing}"
    );
}

/// Every prefix and many single-byte mutations of a valid file: errors or meshes, never a panic.

#[test]
fn mutations_never_panic() {
    let dir = repo();
    let text = format!(
        "[mesh]\nname = \"demo\"\nregistry = \"localhost:5000\"\n[target]\nkind = \"docker\"\n{ONE}platforms = [\"linux/amd64\"]\nargs = {{ A = \"b\" }}\n[[module]]\nname = \"api\"\ncontext = \"api\"\nbase = \"base\"\n[[machine]]\nname = \"m\"\nmodule = \"api\"\nenv = {{ K = \"v\" }}\n"
    );
    let path = dir.path().join("mesh.toml");
    assert!(file::parse(&text, &path).is_ok());
    let bytes = text.as_bytes();
    for cut in 0..bytes.len() {
        let _ = file::parse(&String::from_utf8_lossy(&bytes[..cut]), &path);
    }
    let replacements = b"\"[]{}=.,\n\\/-_ aZ0\x00#";
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..3000 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let mut mutated = bytes.to_vec();
        let at = (seed % mutated.len() as u64) as usize;
        mutated[at] = replacements[((seed >> 32) % replacements.len() as u64) as usize];
        let _ = file::parse(&String::from_utf8_lossy(&mutated), &path);
    }
}

#[test]
fn finding_the_mesh_file() {
    let dir = repo();
    let cwd = dir.path();
    // Nothing given, nothing there.
    let err = file::find_mesh_file_in(None, cwd).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("--mesh was not given") && message.contains("mesh.toml"),
        "{message}"
    );
    assert!(message.contains("--mesh PATH"), "{message}");

    let here = write(cwd, "mesh.toml", HEAD);
    assert_eq!(file::find_mesh_file_in(None, cwd).unwrap(), here);

    // --mesh wins over ./mesh.toml, relative to the current directory.
    let other = write(cwd, "meshes/other.toml", HEAD);
    assert_eq!(
        file::find_mesh_file_in(Some(Path::new("meshes/other.toml")), cwd).unwrap(),
        other
    );
    assert_eq!(
        file::find_mesh_file_in(Some(&other), Path::new("/")).unwrap(),
        other
    );

    // A directory means the mesh.toml inside it.
    let inside = write(cwd, "meshes/mesh.toml", HEAD);
    assert_eq!(
        file::find_mesh_file_in(Some(Path::new("meshes")), cwd).unwrap(),
        inside
    );
    let err = file::find_mesh_file_in(Some(Path::new("api")), cwd).unwrap_err();
    assert!(err.to_string().contains("holds no mesh.toml"), "{err}");

    // A --mesh that does not exist is an error even when ./mesh.toml exists.
    let err = file::find_mesh_file_in(Some(Path::new("missing.toml")), cwd).unwrap_err();
    assert!(
        err.to_string().contains("missing.toml") && err.to_string().contains("does not exist"),
        "{err}"
    );

    // The process-wide variant finds an explicit absolute path.
    assert_eq!(file::find_mesh_file(Some(&other)).unwrap(), other);
}
