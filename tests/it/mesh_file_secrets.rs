//! A module's `secrets` and `ssh` keys (issue 22): read into the model, every malformed one named
//! with its line and a fix. The values are never read when the mesh file is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::mesh_file::*;
use meshtop::mesh::model::{BuildSecret, SecretSource};
use meshtop::workspace::file;

#[test]
fn secrets_and_ssh_are_read_with_their_sources() {
    let dir = repo();
    let text = format!(
        "{HEAD}{ONE}secrets = [{{ id = \"npmrc\", src = \"~/.npmrc\" }}, {{ id = \"tok\", env = \"NPM_TOKEN\" }}, {{ id = \"k.1\", src = \"keys/k\" }}]\nssh = true\n"
    );
    let path = write(dir.path(), "mesh.toml", &text);
    let mesh = file::load(&path).unwrap();
    let module = &mesh.modules[0];
    assert!(module.ssh);
    let home = std::path::PathBuf::from(std::env::var_os("HOME").unwrap());
    assert_eq!(
        module.secrets,
        vec![
            BuildSecret {
                id: "npmrc".into(),
                source: SecretSource::File {
                    written: "~/.npmrc".into(),
                    path: home.join(".npmrc"),
                },
            },
            BuildSecret {
                id: "tok".into(),
                source: SecretSource::Env("NPM_TOKEN".into()),
            },
            BuildSecret {
                id: "k.1".into(),
                source: SecretSource::File {
                    written: "keys/k".into(),
                    path: dir.path().join("keys/k"),
                },
            },
        ]
    );
    // No `secrets`, no `ssh`: nothing served.
    let path = write(dir.path(), "mesh.toml", &format!("{HEAD}{ONE}"));
    let mesh = file::load(&path).unwrap();
    assert!(mesh.modules[0].secrets.is_empty() && !mesh.modules[0].ssh);
}

#[test]
fn malformed_secrets_are_named_with_a_fix() {
    let cases: [(&str, &str, &[&str]); 7] = [
        (
            "secrets = \"npmrc\"",
            "secrets",
            &["`secrets`", "array of tables"],
        ),
        (
            "secrets = [\"npmrc\"]",
            "secrets",
            &["secret", "must be a table"],
        ),
        (
            "secrets = [{ src = \"~/.npmrc\" }]",
            "secrets",
            &["has no `id`"],
        ),
        (
            "secrets = [{ id = \"a b\", env = \"X\" }]",
            "secrets",
            &["\"a b\"", "not a valid id"],
        ),
        (
            "secrets = [{ id = \"a\", env = \"X\" }, { id = \"a\", env = \"Y\" }]",
            "secrets",
            &["declared twice"],
        ),
        (
            "secrets = [{ id = \"a\", src = \"f\", env = \"X\" }]",
            "secrets",
            &["both `src` and `env`"],
        ),
        (
            "secrets = [{ id = \"a\" }]",
            "secrets",
            &["neither `src` nor `env`"],
        ),
    ];
    for (line, needle, names) in cases {
        let text = format!("{HEAD}{ONE}{line}\n");
        refused(&text, line_of(&text, needle), names);
    }
    let text = format!("{HEAD}{ONE}secrets = [{{ id = \"a\", env = \"1X\" }}]\n");
    refused(&text, line_of(&text, "secrets"), &["environment variable"]);
    let text = format!("{HEAD}{ONE}ssh = \"yes\"\n");
    refused(&text, line_of(&text, "ssh"), &["`ssh`", "true or false"]);
}
