//! Files and directories keep their permission bits in the image, as `docker build` keeps them: a
//! 0600 file is 0600 inside the built image, a 0700 directory 0700, not world-readable (issue 10,
//! item 8 of the issue; directories since `meshtop-inputs/v3`). Real daemon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use common::{example::require_docker, said};

#[test]
fn a_private_file_stays_private_in_the_image() {
    require_docker();
    let dir = tempfile::tempdir().unwrap();
    let name = common::test_name("modes");
    let _guard = common::DaemonGuard(name.clone());
    let context = dir.path().join("app");
    std::fs::create_dir_all(&context).unwrap();
    std::fs::write(
        dir.path().join("mesh.toml"),
        format!(
            "[mesh]\nname = \"{name}\"\n\n[target]\nkind = \"docker\"\n\n[[module]]\nname = \"app\"\ncontext = \"app\"\npolicy = \"record\"\n"
        ),
    )
    .unwrap();
    std::fs::write(
        context.join("Dockerfile"),
        "FROM scratch\nCOPY secret tool /\nCOPY nest /nest\nCMD [\"/tool\"]\n",
    )
    .unwrap();
    for (file, mode) in [("secret", 0o600), ("tool", 0o750)] {
        std::fs::write(context.join(file), file).unwrap();
        std::fs::set_permissions(context.join(file), std::fs::Permissions::from_mode(mode))
            .unwrap();
    }
    let private = context.join("nest/private");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("key"), "key").unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let converge = Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .arg("--mesh")
        .arg(dir.path().join("mesh.toml"))
        .arg("--state")
        .arg(dir.path().join("state.db"))
        .args(["converge", "--json"])
        .output()
        .unwrap();
    assert!(converge.status.success(), "{}", said(&converge));
    let summary: serde_json::Value = serde_json::from_slice(&converge.stdout).unwrap();
    let image = summary["modules"][0]["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let created = Command::new("docker")
        .args(["create", "--label", &format!("meshtop-test={name}"), &image])
        .output()
        .unwrap();
    assert!(created.status.success(), "{}", said(&created));
    let container = String::from_utf8_lossy(&created.stdout).trim().to_string();
    let mut modes = Vec::new();
    for file in ["secret", "tool"] {
        let copied = Command::new("docker")
            .args(["cp", &format!("{container}:/{file}"), "-"])
            .output()
            .unwrap();
        assert!(copied.status.success(), "{}", said(&copied));
        let mut archive = tar::Archive::new(copied.stdout.as_slice());
        let mut entry = archive.entries().unwrap().next().unwrap().unwrap();
        let mut text = String::new();
        entry.read_to_string(&mut text).unwrap();
        assert_eq!(text, file);
        modes.push(entry.header().mode().unwrap() & 0o7777);
    }
    // The directory: `docker cp` of it starts with its own entry.
    let copied = Command::new("docker")
        .args(["cp", &format!("{container}:/nest/private"), "-"])
        .output()
        .unwrap();
    assert!(copied.status.success(), "{}", said(&copied));
    let mut archive = tar::Archive::new(copied.stdout.as_slice());
    let entry = archive.entries().unwrap().next().unwrap().unwrap();
    let dir_mode = entry.header().mode().unwrap() & 0o7777;
    assert_eq!(
        entry.header().entry_type(),
        tar::EntryType::Directory,
        "{:?}",
        entry.path()
    );
    assert_eq!(modes, [0o600, 0o750], "modes inside the image");
    assert_eq!(dir_mode, 0o700, "a 0700 directory inside the image");
}
