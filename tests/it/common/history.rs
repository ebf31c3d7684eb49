//! Shared by the state-database tests: a temporary database path and a build row to start.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use meshtop::backends::state::NewBuild;

pub(crate) fn temp_db() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("state.db");
    (dir, path)
}

pub(crate) fn new_build(id: &str, module: Option<&str>, started_ms: i64) -> NewBuild {
    NewBuild {
        id: id.to_string(),
        mesh: "demo".into(),
        module: module.map(str::to_string),
        repository: "/src/demo".into(),
        commit: Some("abc123".into()),
        dirty: false,
        base_module: None,
        base_digest: None,
        reference: Some(format!("{id}-amd64")),
        platforms: "linux/amd64".into(),
        forced: false,
        why: "new module".into(),
        host: "builder".into(),
        started_ms,
        operation_id: Some("c1".into()),
        builder: None,
    }
}
