//! Every malformed mesh file: the message names the module or key, the line, and a fix.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::fs;

use common::mesh_file::*;
use meshtop::mesh::Registry;
use meshtop::workspace::file;

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
            .contains("name, context, dockerfile, base, contexts, policy, platforms, args"),
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

#[test]
fn of_many_bad_contexts_the_first_in_the_file_is_said() {
    // Modules are resolved side by side: which one is said must not depend on which thread ran first.
    let mut text = HEAD.to_string();
    for i in 0..64 {
        text.push_str(&format!(
            "[[module]]\nname = \"m{i:02}\"\ncontext = \"missing-{i:02}\"\n"
        ));
    }
    for _ in 0..8 {
        refused(
            &text,
            line_of(&text, "missing-00"),
            &["module \"m00\"", "missing-00", "does not exist"],
        );
    }
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
fn multi_platform_names_pool_or_buildx() {
    let text = format!("[mesh]\nname = \"demo\"\nmulti_platform = \"qemu\"\n\n{ONE}");
    let err = refused(
        &text,
        line_of(&text, "multi_platform"),
        &["multi_platform", "\"qemu\"", "[mesh]"],
    );
    assert!(
        err.fix.contains("\"pool\"") && err.fix.contains("\"buildx\""),
        "{}",
        err.fix
    );
    for (word, expected) in [
        ("pool", meshtop::mesh::model::MultiPlatform::Pool),
        ("buildx", meshtop::mesh::model::MultiPlatform::Buildx),
    ] {
        let dir = repo();
        let text = format!("[mesh]\nname = \"demo\"\nmulti_platform = \"{word}\"\n\n{ONE}");
        let file = write(dir.path(), "mesh.toml", &text);
        let mesh = file::load(&file).unwrap();
        assert_eq!(mesh.multi_platform, expected);
    }
}
