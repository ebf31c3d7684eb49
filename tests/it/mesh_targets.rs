//! `[[target]]` tables: a mesh names its targets (staging, prod…), each with its kind and settings,
//! where it is promoted from, and whether it holds its machines. Every bad input names the file, the
//! line and the fix; nothing panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::mesh_file::*;
use meshtop::mesh::model::{Policy, Target};
use meshtop::workspace::file;

const TWO: &str = "[[target]]\nname = \"staging\"\nkind = \"kubernetes\"\ncontext = \"ctx-staging\"\n\n\
[[target]]\nname = \"prod\"\nkind = \"kubernetes\"\ncontext = \"ctx-prod\"\nnamespace = \"demo-prod\"\npromote_from = \"staging\"\npolicy = \"record\"\n\n";

#[test]
fn targets_are_named_in_file_order_with_their_settings() {
    let dir = repo();
    let text = format!("{HEAD}{TWO}{ONE}");
    let mesh = file::load(&write(dir.path(), "mesh.toml", &text)).unwrap();
    assert_eq!(mesh.target_names(), ["staging", "prod"]);
    assert_eq!(
        mesh.first_target(),
        "staging",
        "the first declared is the default"
    );
    assert_eq!(
        mesh.target("prod"),
        Some(&Target::Kubernetes {
            namespace: "demo-prod".into(),
            context: Some("ctx-prod".into())
        })
    );
    assert_eq!(
        mesh.target("staging"),
        Some(&Target::Kubernetes {
            namespace: "demo".into(),
            context: Some("ctx-staging".into())
        }),
        "the namespace defaults to the mesh's name"
    );
    let prod = mesh.environment("prod").unwrap();
    assert_eq!(prod.promote_from.as_deref(), Some("staging"));
    assert_eq!(prod.policy, Some(Policy::Record));
    assert!(prod.named);
    assert_eq!(prod.line, line_of(&text, "name = \"prod\"") - 1);
    assert_eq!(mesh.promote_chain("prod"), ["staging", "prod"]);
    // The policy override: every module is held on prod, its own policy elsewhere.
    assert_eq!(mesh.on_target("prod").modules[0].policy, Policy::Record);
    assert_eq!(mesh.on_target("staging").modules[0].policy, Policy::Rollout);
}

#[test]
fn a_single_target_table_is_the_default_as_before() {
    let dir = repo();
    let text = format!("{HEAD}[target]\nkind = \"docker\"\n\n{ONE}");
    let mesh = file::load(&write(dir.path(), "mesh.toml", &text)).unwrap();
    assert_eq!(mesh.target_names(), ["default"]);
    assert!(!mesh.names_targets());
    let mesh = file::load(&write(dir.path(), "mesh.toml", &format!("{HEAD}{ONE}"))).unwrap();
    assert_eq!(mesh.target_names(), ["default"]);
    assert_eq!(mesh.default_target(), &Target::Docker);
}

#[test]
fn machines_run_on_a_docker_target_named_or_the_only_one() {
    let dir = repo();
    let two_docker = "[[target]]\nname = \"dev\"\n\n[[target]]\nname = \"demo\"\nkind = \"docker\"\npromote_from = \"dev\"\n\n";
    let text = format!(
        "{HEAD}{two_docker}{ONE}[[machine]]\nname = \"dev-base\"\nmodule = \"base\"\ntarget = \"dev\"\n\n[[machine]]\nname = \"demo-base\"\nmodule = \"base\"\ntarget = \"demo\"\n"
    );
    let mesh = file::load(&write(dir.path(), "mesh.toml", &text)).unwrap();
    let dev: Vec<String> = mesh
        .on_target("dev")
        .machines
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(dev, ["dev-base"]);
    let demo: Vec<String> = mesh
        .on_target("demo")
        .machines
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(demo, ["demo-base"]);

    // Two docker targets: a machine names which one it runs on.
    let text = format!("{HEAD}{two_docker}{ONE}[[machine]]\nname = \"m\"\nmodule = \"base\"\n");
    refused(
        &text,
        line_of(&text, "[[machine]]"),
        &[
            "machine \"m\" names no target",
            "2 docker targets (dev, demo)",
            "target = \"dev\"",
        ],
    );
    let text = format!(
        "{HEAD}{two_docker}{ONE}[[machine]]\nname = \"m\"\nmodule = \"base\"\ntarget = \"deb\"\n"
    );
    refused(
        &text,
        line_of(&text, "target = \"deb\""),
        &["not a docker target", "did you mean \"dev\""],
    );
    // One docker target beside a kubernetes one: machines are that one's.
    let mixed = "[[target]]\nname = \"dev\"\n\n[[target]]\nname = \"prod\"\nkind = \"kubernetes\"\ncontext = \"c\"\n\n";
    let text = format!("{HEAD}{mixed}{ONE}[[machine]]\nname = \"m\"\nmodule = \"base\"\n");
    let mesh = file::load(&write(dir.path(), "mesh.toml", &text)).unwrap();
    assert_eq!(mesh.machines[0].target, "dev");
    assert!(mesh.on_target("prod").machines.is_empty());
    let text = format!(
        "{HEAD}{mixed}{ONE}[[machine]]\nname = \"m\"\nmodule = \"base\"\ntarget = \"prod\"\n"
    );
    refused(
        &text,
        line_of(&text, "target = \"prod\""),
        &["not a docker target"],
    );
    // Only kubernetes targets: no machine tables at all.
    let text = format!("{HEAD}{TWO}{ONE}[[machine]]\nname = \"m\"\nmodule = \"base\"\n");
    refused(
        &text,
        line_of(&text, "[[machine]]"),
        &["every target of this mesh is kubernetes"],
    );
}

#[test]
fn every_bad_target_names_its_line_and_the_fix() {
    let k8s = |name: &str, extra: &str| {
        format!("[[target]]\nname = \"{name}\"\nkind = \"kubernetes\"\ncontext = \"c\"\n{extra}\n")
    };
    // A named kubernetes target always names its context.
    let text = format!("{HEAD}[[target]]\nname = \"prod\"\nkind = \"kubernetes\"\n\n{ONE}");
    refused(
        &text,
        line_of(&text, "[[target]]"),
        &[
            "target \"prod\" is kubernetes and names no `context`",
            "never the kubeconfig's current one",
        ],
    );
    // No name, a bad name, a name twice.
    let text = format!("{HEAD}[[target]]\nkind = \"docker\"\n\n{ONE}");
    refused(&text, line_of(&text, "[[target]]"), &["no `name`"]);
    let text = format!("{HEAD}[[target]]\nname = \"Prod\"\n\n{ONE}");
    refused(
        &text,
        line_of(&text, "Prod"),
        &["target name \"Prod\"", "e.g. \"prod\""],
    );
    let text = format!(
        "{HEAD}{}{}{ONE}",
        k8s("a", ""),
        k8s("a", "namespace = \"other\"")
    );
    refused(
        &text,
        10,
        &["target \"a\" is declared twice (lines 4 and 9)"],
    );
    // Two targets in one namespace of one context would share one record.
    let text = format!("{HEAD}{}{}{ONE}", k8s("a", ""), k8s("b", ""));
    refused(
        &text,
        9,
        &[
            "targets \"a\" and \"b\" both name context \"c\", namespace \"demo\"",
            "share one record",
        ],
    );
    // promote_from: another target of the mesh, and no cycle.
    let text = format!("{HEAD}{}{ONE}", k8s("a", "promote_from = \"stagin\""));
    refused(
        &text,
        line_of(&text, "promote_from"),
        &["not a target of this mesh", "targets (none)"],
    );
    let text = format!(
        "{HEAD}{}{}{ONE}",
        k8s("staging", ""),
        k8s("prod", "namespace = \"p\"\npromote_from = \"stagin\"")
    );
    refused(
        &text,
        line_of(&text, "promote_from"),
        &["did you mean \"staging\""],
    );
    let text = format!("{HEAD}{}{ONE}", k8s("a", "promote_from = \"a\""));
    refused(&text, line_of(&text, "promote_from"), &["names itself"]);
    let text = format!(
        "{HEAD}{}{}{ONE}",
        k8s("a", "promote_from = \"b\""),
        k8s("b", "namespace = \"p\"\npromote_from = \"a\"")
    );
    refused(&text, 4, &["promote_from cycle: a → b → a"]);
    // policy: only "record".
    let text = format!("{HEAD}{}{ONE}", k8s("a", "policy = \"rollout\""));
    refused(
        &text,
        line_of(&text, "policy"),
        &[
            "unknown policy \"rollout\" for target \"a\"",
            "policy = \"record\"",
        ],
    );
    // Unknown keys, docker settings, kinds: as in [target], naming the target.
    let text = format!("{HEAD}{}{ONE}", k8s("a", "promote_frm = \"b\""));
    refused(
        &text,
        line_of(&text, "promote_frm"),
        &[
            "unknown key `promote_frm` in target \"a\"",
            "did you mean `promote_from`",
        ],
    );
    let text = format!("{HEAD}[[target]]\nname = \"a\"\nnamespace = \"x\"\n\n{ONE}");
    refused(
        &text,
        line_of(&text, "namespace"),
        &["`namespace` in target \"a\" is a kubernetes setting"],
    );
    let text = format!("{HEAD}[[target]]\nname = \"a\"\nkind = \"nomad\"\n\n{ONE}");
    refused(
        &text,
        line_of(&text, "nomad"),
        &["unknown target kind \"nomad\""],
    );
    // An empty list, a list of something else.
    let text = format!("target = []\n{HEAD}{ONE}");
    refused(&text, line_of(&text, "target = []"), &["empty list"]);
    let text = format!("target = [1]\n{HEAD}{ONE}");
    refused(&text, line_of(&text, "target = [1]"), &["must be a table"]);
}

#[test]
fn the_environments_example_names_staging_and_prod() {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/environments/mesh.toml");
    let mesh = file::load(&path).unwrap();
    assert_eq!(mesh.target_names(), ["staging", "prod"]);
    assert_eq!(mesh.promote_chain("prod"), ["staging", "prod"]);
    assert_eq!(
        mesh.on_target("prod")
            .modules
            .iter()
            .filter(|m| m.policy == Policy::Record)
            .count(),
        5
    );
    let prod: Vec<String> = mesh
        .on_target("prod")
        .machines
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(prod, ["envdemo-prod-web-1", "envdemo-prod-api-1"]);
}
