//! Git, asked through its CLI: which commit a build context comes from and whether it is dirty.
//! A context outside git, or a machine without git, reads as "no commit" — never an error.

use std::path::Path;
use std::process::Command;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Revision {
    pub commit: Option<String>,
    /// The context has changes git does not have committed.
    pub dirty: bool,
    /// `remote.origin.url`, for the OCI source label.
    pub source: Option<String>,
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// The revision of the work tree holding `context`, and whether `context` itself is dirty.
pub fn revision(context: &Path) -> Revision {
    let Some(commit) = git(context, &["rev-parse", "HEAD"]).filter(|c| !c.is_empty()) else {
        return Revision::default();
    };
    let dirty = git(context, &["status", "--porcelain", "--", "."]).is_some_and(|s| !s.is_empty());
    let source = git(context, &["config", "--get", "remote.origin.url"]).filter(|s| !s.is_empty());
    Revision {
        commit: Some(commit),
        dirty,
        source,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn outside_git_there_is_no_commit() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(revision(dir.path()), Revision::default());
    }

    #[test]
    fn commit_and_dirty_flag_of_the_context() {
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let ok = Command::new("git")
                .arg("-C")
                .arg(dir.path())
                .args(args)
                .output()
                .unwrap()
                .status
                .success();
            assert!(ok, "git {args:?}");
        };
        run(&["init", "-q"]);
        std::fs::create_dir(dir.path().join("ctx")).unwrap();
        std::fs::write(dir.path().join("ctx/a"), "1").unwrap();
        run(&["add", "."]);
        run(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "c",
        ]);
        let clean = revision(&dir.path().join("ctx"));
        assert_eq!(clean.commit.as_ref().map(String::len), Some(40));
        assert!(!clean.dirty);
        std::fs::write(dir.path().join("ctx/a"), "2").unwrap();
        assert!(revision(&dir.path().join("ctx")).dirty);
    }
}
