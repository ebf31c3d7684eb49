//! `[[builder]]` tables: the daemons that build for a mesh, their endpoints, caps and platforms. Bad
//! input names the file, the line and the fix; more than one builder, or one that is not the local
//! daemon, is refused without the registry that hands artifacts over.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::mesh_file::*;
use meshtop::mesh::builders::{Endpoint, LOCAL_BUILDER};
use meshtop::mesh::model::Platform;
use meshtop::workspace::file;

const WITH_REGISTRY: &str = "[mesh]\nname = \"demo\"\nregistry = \"127.0.0.1:5000\"\n\n";

#[test]
fn builders_are_read_in_file_order_with_their_settings() {
    let dir = repo();
    for f in ["ca.pem", "cert.pem", "key.pem"] {
        write(dir.path(), &format!("certs/farm/{f}"), "x");
    }
    let text = format!(
        "{WITH_REGISTRY}{ONE}\n[[builder]]\nname = \"here\"\nendpoint = \"unix:///var/run/docker.sock\"\nmax_builds = 3\n\n\
[[builder]]\nname = \"farm\"\nendpoint = \"tcp://10.0.0.5:2376\"\ntls_dir = \"certs/farm\"\nplatforms = [\"linux/arm64\", \"linux/amd64\"]\n\n\
[[builder]]\nname = \"laptop\"\nendpoint = \"ssh://ci@farm-2:2222\"\n"
    );
    let mesh = file::load(&write(dir.path(), "mesh.toml", &text)).unwrap();
    let names: Vec<&str> = mesh.builders.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["here", "farm", "laptop"]);
    assert_eq!(mesh.builders[0].max_builds, 3);
    assert_eq!(mesh.builders[0].line, line_of(&text, "name = \"here\"") - 1);
    assert_eq!(mesh.builders[1].max_builds, 1, "max_builds defaults to one");
    assert_eq!(
        mesh.builders[1].endpoint,
        Endpoint::Tcp {
            host: "10.0.0.5".into(),
            port: 2376,
            tls_dir: Some(dir.path().join("certs/farm")),
        },
        "tls_dir resolves from the mesh file's directory"
    );
    assert_eq!(
        mesh.builders[1].platforms,
        [
            Platform::parse("linux/amd64").unwrap(),
            Platform::parse("linux/arm64").unwrap()
        ]
    );
    assert_eq!(
        mesh.builders[2].endpoint,
        Endpoint::Ssh {
            user: Some("ci".into()),
            host: "farm-2".into(),
            port: Some(2222)
        }
    );
    assert_eq!(mesh.builders().len(), 3);
}

#[test]
fn without_builders_the_local_daemon_is_the_one_builder() {
    let dir = repo();
    let mesh = file::load(&write(dir.path(), "mesh.toml", &format!("{HEAD}{ONE}"))).unwrap();
    assert!(mesh.builders.is_empty());
    let builders = mesh.builders();
    assert_eq!(builders.len(), 1);
    assert_eq!(builders[0].name, LOCAL_BUILDER);
    assert!(builders[0].endpoint.is_local_daemon());
    // One builder that is the local daemon needs no registry.
    let text = format!(
        "{HEAD}{ONE}\n[[builder]]\nname = \"here\"\nendpoint = \"unix:///var/run/docker.sock\"\nmax_builds = 2\n"
    );
    let mesh = file::load(&write(dir.path(), "mesh.toml", &text)).unwrap();
    assert_eq!(mesh.builders[0].max_builds, 2);
}

#[test]
fn builders_without_a_registry_are_refused_naming_the_fix() {
    let two = format!(
        "{HEAD}{ONE}\n[[builder]]\nname = \"a\"\nendpoint = \"unix:///var/run/docker.sock\"\n\n[[builder]]\nname = \"b\"\nendpoint = \"unix:///run/b/docker.sock\"\n"
    );
    let line = line_of(&two, "name = \"b\"") - 1;
    let err = refused(
        &two,
        line,
        &["more than one builder", "registry = \"host:port\""],
    );
    assert!(err.fix.contains("[mesh]"), "{err}");
    let remote =
        format!("{HEAD}{ONE}\n[[builder]]\nname = \"farm\"\nendpoint = \"tcp://farm:2375\"\n");
    let line = line_of(&remote, "name = \"farm\"") - 1;
    refused(&remote, line, &["not the local daemon", "registry"]);
}

#[test]
fn bad_builder_tables_name_the_line_and_the_fix() {
    let cases: Vec<(String, &str, Vec<&str>)> = vec![
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"http://farm:2375\"\n".into(),
            "endpoint",
            vec!["builder \"a\"", "neither unix://", "tcp://"],
        ),
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"tcp://farm\"\n".into(),
            "endpoint",
            vec!["names its port"],
        ),
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"unix://docker.sock\"\n".into(),
            "endpoint",
            vec!["absolute path"],
        ),
        (
            "[[builder]]\nname = \"a\"\n".into(),
            "[[builder]]",
            vec!["has no `endpoint`"],
        ),
        (
            "[[builder]]\nendpoint = \"unix:///run/a.sock\"\n".into(),
            "[[builder]]",
            vec!["has no `name`"],
        ),
        (
            "[[builder]]\nname = \"Farm 1\"\nendpoint = \"unix:///run/a.sock\"\n".into(),
            "name",
            vec!["builder name", "\"farm-1\""],
        ),
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"unix:///run/a.sock\"\nmax_builds = 0\n".into(),
            "max_builds",
            vec!["max_builds", "from 1"],
        ),
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"unix:///run/a.sock\"\nmax_builds = \"2\"\n".into(),
            "max_builds",
            vec!["whole number"],
        ),
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"unix:///run/a.sock\"\nplatforms = [\"linux/z80\"]\n".into(),
            "platforms",
            vec!["unknown platform", "builder \"a\""],
        ),
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"unix:///run/a.sock\"\ntls_dir = \"certs\"\n".into(),
            "tls_dir",
            vec!["is for a tcp:// endpoint"],
        ),
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"tcp://farm:2376\"\ntls_dir = \"nowhere\"\n".into(),
            "tls_dir",
            vec!["holds no ca.pem, cert.pem, key.pem", "DOCKER_CERT_PATH"],
        ),
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"unix:///run/a.sock\"\ncap = 2\n".into(),
            "cap",
            vec!["cap"],
        ),
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"unix:///run/a.sock\"\n\n[[builder]]\nname = \"a\"\nendpoint = \"unix:///run/b.sock\"\n".into(),
            "name = \"a\"\nendpoint = \"unix:///run/b",
            vec!["declared twice"],
        ),
        ("[builder]\nname = \"a\"\n".into(), "[builder]", vec!["array of tables", "[[builder]]"]),
        (
            "[[builder]]\nname = \"a\"\nendpoint = \"tcp://farm:2375\"\ntakes_secrets = true\n".into(),
            "takes_secrets",
            vec!["plain tcp://", "in the clear", "tls_dir"],
        ),
    ];
    for (tail, needle, names) in cases {
        let text = format!("{WITH_REGISTRY}{ONE}\n{tail}");
        // The line of the first line of `needle` (a multi-line needle finds its first line).
        let first = needle.lines().next().unwrap();
        let line = if needle.contains('\n') {
            let at = text.find(needle).expect(needle);
            text[..at].lines().count() + 1
        } else {
            text.lines()
                .enumerate()
                .filter(|(_, l)| l.contains(first))
                .map(|(i, _)| i + 1)
                .last()
                .expect(first)
        };
        // The duplicate is named at its table's header, the line before its name.
        let line = if names == ["declared twice"] {
            line - 1
        } else {
            line
        };
        refused(&text, line, &names);
    }
}
