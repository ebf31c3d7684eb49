//! Helpers shared by the mesh-file tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};

use meshtop::workspace::file::{self, MeshError};
use tempfile::TempDir;

/// A directory with contexts `base`, `tools`, `api`, `web` (each with a Dockerfile) and a `plain.txt` file.
pub(crate) fn repo() -> TempDir {
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

pub(crate) fn write(dir: &Path, rel: &str, content: &str) -> PathBuf {
    let path = dir.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, content).unwrap();
    path
}

/// 1-based line of the first line containing `needle`.
pub(crate) fn line_of(text: &str, needle: &str) -> usize {
    text.lines().position(|l| l.contains(needle)).expect(needle) + 1
}

pub(crate) const HEAD: &str = "[mesh]\nname = \"demo\"\n\n";

/// Load `text` as `<dir>/mesh.toml`, expecting an error; check it names the line and every `names` word.
pub(crate) fn refused_in(dir: &Path, text: &str, line: usize, names: &[&str]) -> MeshError {
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

pub(crate) fn refused(text: &str, line: usize, names: &[&str]) -> MeshError {
    let dir = repo();
    refused_in(dir.path(), text, line, names)
}

/// One valid module (context `base`).
pub(crate) const ONE: &str = "[[module]]\nname = \"base\"\ncontext = \"base\"\n";

/// The binary on `<dir>/mesh.toml` and `<dir>/state.db` with `envs` (the caller's signing key
/// and its password left out first).
pub(crate) fn meshtop_in(dir: &Path, envs: &[(&str, &str)], args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env_remove("MESHTOP_SIGNING_KEY")
        .env_remove("COSIGN_PASSWORD")
        .envs(envs.iter().copied())
        .arg("--mesh")
        .arg(dir.join("mesh.toml"))
        .arg("--state")
        .arg(dir.join("state.db"))
        .args(args)
        .output()
        .unwrap()
}
