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
                line: 7,
            },
            BuildSecret {
                id: "tok".into(),
                source: SecretSource::Env("NPM_TOKEN".into()),
                line: 7,
            },
            BuildSecret {
                id: "k.1".into(),
                source: SecretSource::File {
                    written: "keys/k".into(),
                    path: dir.path().join("keys/k"),
                },
                line: 7,
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

#[test]
fn a_secret_that_would_hand_a_build_meshtops_own_credentials_is_refused_at_its_line() {
    let dir = repo();
    let (key, _) = common::signing::keypair(&dir.path().join("keys"), "ci");
    let docker_config = write(dir.path(), "dockercfg/config.json", "{\"auths\":{}}");
    let key_text = key.to_str().unwrap();
    let config_dir = docker_config.parent().unwrap().to_str().unwrap();
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a [&'a str]);
    let cases: [Case<'_>; 3] = [
        (
            "secrets = [{ id = \"k\", src = \"keys/ci.key\" }]",
            vec![("MESHTOP_SIGNING_KEY", key_text)],
            &["secret k", "signing key", "MESHTOP_SIGNING_KEY"],
        ),
        (
            "secrets = [{ id = \"d\", src = \"dockercfg/config.json\" }]",
            vec![("DOCKER_CONFIG", config_dir)],
            &["secret d", "Docker config", "registry logins"],
        ),
        (
            "secrets = [{ id = \"p\", env = \"COSIGN_PASSWORD\" }]",
            vec![],
            &["secret p", "COSIGN_PASSWORD", "signing key"],
        ),
    ];
    for (line, envs, names) in cases {
        let text = format!("{HEAD}{ONE}{line}\n");
        write(dir.path(), "mesh.toml", &text);
        let out = meshtop_in(dir.path(), &envs, &["plan"]);
        let said = common::example::said(&out);
        assert_eq!(out.status.code(), Some(2), "{line}: {said}");
        let at = format!("mesh.toml:{}", line_of(&text, "secrets"));
        assert!(said.contains(&at), "{line}: not at {at}: {said}");
        for name in names {
            assert!(said.contains(name), "{line}: no {name:?} in {said}");
        }
    }
    // The key given as --sign-key: the converge is refused before anything, naming the module's line.
    let text = format!("{HEAD}{ONE}secrets = [{{ id = \"k\", src = \"keys/ci.key\" }}]\n");
    write(dir.path(), "mesh.toml", &text);
    let out = meshtop_in(dir.path(), &[], &["converge", "--sign-key", key_text]);
    let said = common::example::said(&out);
    assert_eq!(out.status.code(), Some(2), "{said}");
    for name in [
        "mesh.toml:7",
        "module base",
        "secret k",
        "signing key",
        "--sign-key",
    ] {
        assert!(said.contains(name), "no {name:?} in {said}");
    }
}
