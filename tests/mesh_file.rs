//! The mesh file: a valid mesh, every malformed case (message names the module/key and the line),
//! contexts confined to the repository, and how the file is found.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use meshtop::mesh::file::{self, MeshError};
use meshtop::mesh::{Platform, Policy, Registry, Target};
use tempfile::TempDir;

/// A directory with contexts `base`, `tools`, `api`, `web` (each with a Dockerfile) and a `plain.txt` file.
fn repo() -> TempDir {
    let dir = tempfile::tempdir().unwrap();
    for module in ["base", "tools", "api", "web"] {
        write(
            dir.path(),
            &format!("{module}/Dockerfile"),
            "FROM scratch\n",
        );
    }
    write(dir.path(), "api/build/Api.Dockerfile", "FROM scratch\n");
    write(dir.path(), "plain.txt", "not a directory\n");
    dir
}

fn write(dir: &Path, rel: &str, content: &str) -> PathBuf {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, content).unwrap();
    path
}

/// 1-based line of the first line containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).expect(needle) + 1
}

const HEAD: &str = "[mesh]\nname = \"demo\"\n\n";

/// Load `text` as `<dir>/mesh.toml`, expecting an error; check it names the line and every `names` word.
fn refused_in(dir: &Path, text: &str, line: usize, names: &[&str]) -> MeshError {
    let path = write(dir, "mesh.toml", text);
    let err = file::load(&path).expect_err("the mesh must be refused");
    let message = err.to_string();
    assert_eq!(err.line, Some(line), "wrong line in: {message}");
    let prefix = format!("{}:{line}", path.display());
    assert!(
        message.starts_with(&prefix),
        "{message:?} does not start with {prefix:?}"
    );
    assert!(message.contains(" — "), "no fix in: {message}");
    for name in names {
        assert!(message.contains(name), "{message:?} does not name {name:?}");
    }
    err
}

fn refused(text: &str, line: usize, names: &[&str]) -> MeshError {
    let dir = repo();
    refused_in(dir.path(), text, line, names)
}

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
    assert_eq!(mesh.target, Target::Docker);
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
        mesh.target,
        Target::Kubernetes {
            namespace: "demo".into(),
            context: Some("kind-demo".into())
        }
    );
    assert_eq!(mesh.registry, None);
}

const ONE: &str = "[[module]]\nname = \"base\"\ncontext = \"base\"\n";

#[test]
fn unknown_keys_are_named_with_the_allowed_ones() {
    let text = format!("{HEAD}{ONE}platfroms = [\"linux/amd64\"]\n");
    let err = refused(
        &text,
        line_of(&text, "platfroms"),
        &["platfroms", "module \"base\"", "did you mean `platforms`"],
    );
    assert!(
        err.fix
            .contains("name, context, dockerfile, base, policy, platforms, args"),
        "{}",
        err.fix
    );

    let text = format!("{HEAD}colour = \"red\"\n{ONE}");
    refused(
        &text,
        line_of(&text, "colour"),
        &["colour", "[mesh]", "allowed keys: name, registry"],
    );

    let text = format!("{HEAD}{ONE}[extra]\nx = 1\n");
    refused(
        &text,
        line_of(&text, "[extra]"),
        &["extra", "mesh, target, module, machine"],
    );

    let text =
        format!("{HEAD}{ONE}[[machine]]\nname = \"m\"\nmodule = \"base\"\nenvironment = {{}}\n");
    refused(
        &text,
        line_of(&text, "environment"),
        &["environment", "machine \"m\"", "command, env"],
    );

    let text = format!("{HEAD}[target]\nkind = \"docker\"\nnamespce = \"x\"\n{ONE}");
    refused(
        &text,
        line_of(&text, "namespce"),
        &["namespce", "[target]", "kind, namespace, context"],
    );
}

#[test]
fn missing_required_keys() {
    let text = format!("{HEAD}[[module]]\nname = \"api\"\n");
    refused(
        &text,
        line_of(&text, "[[module]]"),
        &["module \"api\"", "no `context`", "context ="],
    );

    let text = format!("{HEAD}[[module]]\ncontext = \"api\"\n");
    refused(
        &text,
        line_of(&text, "[[module]]"),
        &["[[module]]", "no `name`"],
    );

    let text = format!("[mesh]\nregistry = \"localhost:5000\"\n{ONE}");
    refused(&text, 1, &["[mesh]", "no `name`"]);

    let text = ONE.to_string();
    refused(&text, 1, &["no [mesh]"]);

    refused(HEAD, 1, &["no module", "[[module]]"]);

    let text = format!("{HEAD}{ONE}[[machine]]\nname = \"m\"\n");
    refused(
        &text,
        line_of(&text, "[[machine]]"),
        &["machine \"m\"", "no `module`"],
    );
}

#[test]
fn module_names_follow_the_rule() {
    for (name, why) in [
        ("Api", "other than a-z"),
        ("my_api", "other than a-z"),
        ("-api", "starts with '-'"),
        ("api-", "ends with '-'"),
        ("", "is empty"),
    ] {
        let text = format!("{HEAD}[[module]]\nname = \"{name}\"\ncontext = \"api\"\n");
        refused(
            &text,
            5,
            &[
                &format!("module name \"{name}\""),
                why,
                "[a-z0-9][a-z0-9-]*",
            ],
        );
    }
    let long = "a".repeat(64);
    let text = format!("{HEAD}[[module]]\nname = \"{long}\"\ncontext = \"api\"\n");
    refused(&text, 5, &["64 characters long", "at most 63"]);
    // 63 is fine as a name (the context check comes next).
    let ok = "a".repeat(63);
    let text = format!("{HEAD}[[module]]\nname = \"{ok}\"\ncontext = \"api\"\n");
    assert!(file::parse(&text, &repo().path().join("mesh.toml")).is_ok());

    let text = "[mesh]\nname = \"Demo\"\n";
    refused(text, 2, &["mesh name \"Demo\"", "e.g. \"demo\""]);
}

#[test]
fn a_huge_name_gives_a_short_message() {
    let huge = "X".repeat(1_000_000);
    let text = format!("{HEAD}[[module]]\nname = \"{huge}\"\ncontext = \"api\"\n");
    let err = refused(&text, 5, &["module name", "1000000 characters"]);
    assert!(
        err.to_string().len() < 1000,
        "message is {} bytes",
        err.to_string().len()
    );
    // A huge unknown key too.
    let text = format!("{HEAD}{ONE}{huge} = 1\n");
    let err = refused(&text, 7, &["unknown key"]);
    assert!(err.to_string().len() < 1000);
}

#[test]
fn duplicates_name_both_lines() {
    let text = format!("{HEAD}{ONE}\n{ONE}");
    let first = line_of(&text, "name = \"base\"");
    let second = text
        .lines()
        .collect::<Vec<_>>()
        .iter()
        .rposition(|l| l.contains("name = \"base\""))
        .unwrap()
        + 1;
    refused(
        &text,
        second,
        &[
            "module \"base\" is declared twice",
            &format!("lines {first} and {second}"),
        ],
    );

    let machine = "[[machine]]\nname = \"m-1\"\nmodule = \"base\"\n";
    let text = format!("{HEAD}{ONE}{machine}{machine}");
    refused(
        &text,
        11,
        &["machine \"m-1\" is declared twice", "lines 8 and 11"],
    );
}

#[test]
fn bases_must_exist_and_not_cycle() {
    let text =
        format!("{HEAD}{ONE}[[module]]\nname = \"api\"\ncontext = \"api\"\nbase = \"bse\"\n");
    refused(
        &text,
        line_of(&text, "bse"),
        &["module \"api\"", "base \"bse\"", "did you mean \"base\""],
    );

    let text =
        format!("{HEAD}{ONE}[[module]]\nname = \"api\"\ncontext = \"api\"\nbase = \"zzzzzz\"\n");
    refused(
        &text,
        line_of(&text, "zzzzzz"),
        &["module \"api\"", "\"zzzzzz\"", "modules (base)"],
    );

    let text = format!("{HEAD}{ONE}base = \"base\"\n");
    refused(
        &text,
        line_of(&text, "base = \"base\""),
        &["module \"base\" names itself as its base"],
    );

    let text = format!(
        "{HEAD}[[module]]\nname = \"a\"\ncontext = \"api\"\nbase = \"b\"\n\n[[module]]\nname = \"b\"\ncontext = \"web\"\nbase = \"a\"\n{ONE}"
    );
    refused(
        &text,
        line_of(&text, "base = \"b\""),
        &["base cycle: a → b → a"],
    );

    let text = format!(
        "{HEAD}{ONE}[[module]]\nname = \"x\"\ncontext = \"api\"\nbase = \"y\"\n[[module]]\nname = \"y\"\ncontext = \"api\"\nbase = \"z\"\n[[module]]\nname = \"z\"\ncontext = \"api\"\nbase = \"x\"\n"
    );
    refused(
        &text,
        line_of(&text, "base = \"y\""),
        &["base cycle: x → y → z → x"],
    );
}

#[test]
fn contexts_must_be_directories_inside_the_repository() {
    let text = format!("{HEAD}[[module]]\nname = \"api\"\ncontext = \"nowhere\"\n");
    refused(
        &text,
        line_of(&text, "nowhere"),
        &["module \"api\"", "does not exist", "nowhere"],
    );

    let text = format!("{HEAD}[[module]]\nname = \"api\"\ncontext = \"plain.txt\"\n");
    refused(
        &text,
        line_of(&text, "plain.txt"),
        &["module \"api\"", "not a directory"],
    );

    let text = format!("{HEAD}[[module]]\nname = \"api\"\ncontext = \"../elsewhere\"\n");
    refused(
        &text,
        line_of(&text, "elsewhere"),
        &["module \"api\"", "escapes the repository", "`..`"],
    );

    let text = format!("{HEAD}[[module]]\nname = \"api\"\ncontext = \"api/../..\"\n");
    refused(
        &text,
        line_of(&text, "api/../.."),
        &["module \"api\"", "`..`"],
    );

    let text = format!("{HEAD}[[module]]\nname = \"api\"\ncontext = \"/etc\"\n");
    refused(
        &text,
        line_of(&text, "/etc"),
        &["module \"api\"", "absolute"],
    );
}

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
fn dockerfiles_must_exist_inside_the_context() {
    let text = format!(
        "{HEAD}[[module]]\nname = \"api\"\ncontext = \"api\"\ndockerfile = \"../web/Dockerfile\"\n"
    );
    refused(
        &text,
        line_of(&text, "dockerfile ="),
        &["module \"api\"", "`dockerfile`", "escapes its context"],
    );

    let text = format!(
        "{HEAD}[[module]]\nname = \"api\"\ncontext = \"api\"\ndockerfile = \"Nope.Dockerfile\"\n"
    );
    refused(
        &text,
        line_of(&text, "Nope"),
        &["module \"api\"", "Nope.Dockerfile does not exist"],
    );

    let dir = repo();
    fs::remove_file(dir.path().join("web/Dockerfile")).unwrap();
    let text = format!("{HEAD}[[module]]\nname = \"web\"\ncontext = \"web\"\n");
    refused_in(
        dir.path(),
        &text,
        line_of(&text, "context"),
        &["module \"web\"", "has no Dockerfile"],
    );

    let text =
        format!("{HEAD}[[module]]\nname = \"api\"\ncontext = \"api\"\ndockerfile = \"build\"\n");
    refused(
        &text,
        line_of(&text, "dockerfile ="),
        &["module \"api\"", "not a file"],
    );
}

#[test]
fn policies_platforms_and_args_are_checked() {
    let text = format!("{HEAD}{ONE}policy = \"sometimes\"\n");
    refused(
        &text,
        line_of(&text, "policy"),
        &[
            "unknown policy \"sometimes\"",
            "module \"base\"",
            "\"rollout\" or",
        ],
    );

    let text = format!("{HEAD}{ONE}platforms = [\"linux/amd64\", \"windows/amd64\"]\n");
    refused(
        &text,
        line_of(&text, "platforms"),
        &[
            "unknown platform \"windows/amd64\"",
            "module \"base\"",
            "os/arch",
        ],
    );

    let text = format!("[mesh]\nname = \"demo\"\nplatforms = [\"linux/sparc\"]\n{ONE}");
    refused(&text, 3, &["unknown platform \"linux/sparc\"", "[mesh]"]);

    let text = format!("{HEAD}{ONE}platforms = []\n");
    refused(
        &text,
        line_of(&text, "platforms"),
        &["`platforms` of module \"base\" is empty"],
    );

    let text = format!("{HEAD}{ONE}platforms = [\"linux/amd64\", \"linux/amd64\"]\n");
    refused(&text, line_of(&text, "platforms"), &["listed twice"]);

    let text = format!("{HEAD}{ONE}args = {{ X = \"1\", BASE = \"busybox\" }}\n");
    refused(
        &text,
        line_of(&text, "args"),
        &["module \"base\"", "BASE", "reserves"],
    );

    let text = format!("{HEAD}{ONE}[module.args]\nBASE = \"x\"\n");
    refused(&text, line_of(&text, "BASE"), &["module \"base\"", "BASE"]);

    let text = format!("{HEAD}{ONE}args = {{ N = 3 }}\n");
    refused(
        &text,
        line_of(&text, "args"),
        &["`args.N`", "module \"base\"", "must be a string"],
    );

    let text = format!("{HEAD}{ONE}policy = 1\n");
    refused(
        &text,
        line_of(&text, "policy"),
        &["`policy`", "must be a string", "found an integer"],
    );
}

#[test]
fn machines_must_run_a_module_of_the_mesh() {
    let text = format!("{HEAD}{ONE}[[machine]]\nname = \"m-1\"\nmodule = \"bsae\"\n");
    refused(
        &text,
        line_of(&text, "bsae"),
        &[
            "machine \"m-1\"",
            "module \"bsae\"",
            "did you mean \"base\"",
        ],
    );

    let text = format!("{HEAD}{ONE}[[machine]]\nname = \"bad name\"\nmodule = \"base\"\n");
    refused(
        &text,
        line_of(&text, "bad name"),
        &["machine name \"bad name\"", "container name"],
    );

    let text = format!(
        "{HEAD}[target]\nkind = \"kubernetes\"\n{ONE}[[machine]]\nname = \"m\"\nmodule = \"base\"\n"
    );
    refused(
        &text,
        line_of(&text, "[[machine]]"),
        &["[[machine]]", "kubernetes"],
    );
}

#[test]
fn targets_and_registries_are_checked() {
    let text = format!("{HEAD}[target]\nkind = \"docker\"\nnamespace = \"demo\"\n{ONE}");
    refused(
        &text,
        line_of(&text, "namespace"),
        &["`namespace`", "kubernetes setting", "target is docker"],
    );

    let text = format!("{HEAD}[target]\ncontext = \"kind-demo\"\n{ONE}");
    refused(
        &text,
        line_of(&text, "kind-demo"),
        &["`context` in [target]", "kind = \"kubernetes\""],
    );

    let text = format!("{HEAD}[target]\nkind = \"nomad\"\n{ONE}");
    refused(
        &text,
        line_of(&text, "nomad"),
        &["unknown target kind \"nomad\""],
    );

    let text = format!("{HEAD}[target]\nkind = \"kubernetes\"\nnamespace = \"Bad_NS\"\n{ONE}");
    refused(
        &text,
        line_of(&text, "Bad_NS"),
        &["kubernetes namespace \"Bad_NS\""],
    );

    for bad in [
        "http://localhost:5000",
        "localhost:99999",
        "a b",
        "host/path",
    ] {
        let text = format!("[mesh]\nname = \"demo\"\nregistry = \"{bad}\"\n{ONE}");
        refused(&text, 3, &["invalid registry", bad, "host[:port]"]);
    }
    let text = format!("[mesh]\nname = \"demo\"\ninsecure_registry = true\n{ONE}");
    refused(&text, 3, &["insecure_registry", "no `registry`"]);

    let dir = repo();
    let text = format!(
        "[mesh]\nname = \"demo\"\nregistry = \"reg.lan:5000\"\ninsecure_registry = true\n{ONE}"
    );
    let mesh = file::load(&write(dir.path(), "mesh.toml", &text)).unwrap();
    assert_eq!(
        mesh.registry,
        Some(Registry {
            host: "reg.lan:5000".into(),
            insecure: true
        })
    );
}

#[test]
fn tables_of_the_wrong_shape() {
    let text = format!("{HEAD}[module]\nname = \"base\"\ncontext = \"base\"\n");
    refused(
        &text,
        line_of(&text, "[module]"),
        &["`module` must be an array of tables", "[[module]]"],
    );

    let text = "mesh = 3\n";
    refused(text, 1, &["[mesh] must be a table"]);
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
