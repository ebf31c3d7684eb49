//! Where a mesh's files may come from: the repository root, and contexts and Dockerfiles confined to it.
//!
//! A mesh file must never make meshtop send files from elsewhere on the host to a daemon, so every
//! path is checked twice: lexically (no `..` above the root) and after resolving symlinks.

use std::io;
use std::path::{Component, Path, PathBuf};

/// The repository holding a mesh file: the nearest ancestor of `dir` (itself included) holding a
/// `.git` entry (directory, or file for worktrees and submodules), else `dir`. `dir` must be canonical.
pub(super) fn find_root(dir: &Path) -> PathBuf {
    for ancestor in dir.ancestors() {
        if std::fs::symlink_metadata(ancestor.join(".git")).is_ok() {
            return ancestor.to_path_buf();
        }
    }
    dir.to_path_buf()
}

/// Why a path given in the mesh file is refused.
#[derive(Debug)]
pub(super) enum PathProblem {
    Empty,
    Absolute,
    /// `..` climbs above the allowed root (lexically).
    DotDot,
    Missing(PathBuf),
    /// Exists but has the wrong kind (file where a directory is expected, or the reverse).
    WrongKind(PathBuf),
    /// Resolves (through a symlink) to a place outside the allowed root.
    Symlink {
        real: PathBuf,
    },
    Unreadable(PathBuf, io::Error),
}

/// Lexically join `relative` to `start`, a path relative to the allowed root given as components.
/// Fails with `DotDot` when `..` climbs above the root.
fn lexical(start: &[String], relative: &str) -> Result<Vec<String>, PathProblem> {
    if relative.is_empty() {
        return Err(PathProblem::Empty);
    }
    let mut parts: Vec<String> = start.to_vec();
    for component in Path::new(relative).components() {
        match component {
            Component::Normal(name) => parts.push(name.to_string_lossy().into_owned()),
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(PathProblem::DotDot);
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(PathProblem::Absolute),
        }
    }
    Ok(parts)
}

fn components_below(root: &Path, dir: &Path) -> Vec<String> {
    dir.strip_prefix(root)
        .map(|rel| {
            rel.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Resolve `relative` from `dir` (canonical, inside the canonical `root`) to a canonical path inside
/// `root`, which must be a directory (`want_dir`) or a regular file.
pub(super) fn confine(
    root: &Path,
    dir: &Path,
    relative: &str,
    want_dir: bool,
) -> Result<PathBuf, PathProblem> {
    lexical(&components_below(root, dir), relative)?;
    let joined = dir.join(relative);
    let meta = match std::fs::metadata(&joined) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // A dangling symlink is reported as missing too; where it points is never followed.
            return Err(PathProblem::Missing(joined));
        }
        Err(e) => return Err(PathProblem::Unreadable(joined, e)),
    };
    if want_dir != meta.is_dir() || (!want_dir && !meta.is_file()) {
        return Err(PathProblem::WrongKind(joined));
    }
    let real =
        std::fs::canonicalize(&joined).map_err(|e| PathProblem::Unreadable(joined.clone(), e))?;
    if !real.starts_with(root) {
        return Err(PathProblem::Symlink { real });
    }
    Ok(real)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn lexical_walks_within_the_root() {
        let start = vec!["sub".to_string()];
        assert_eq!(
            lexical(&start, "../shared").unwrap(),
            vec!["shared".to_string()]
        );
        assert_eq!(
            lexical(&start, "./a/./b/..").unwrap(),
            vec!["sub".to_string(), "a".to_string()]
        );
        assert!(matches!(lexical(&start, "../.."), Err(PathProblem::DotDot)));
        assert!(matches!(lexical(&[], ".."), Err(PathProblem::DotDot)));
        assert!(matches!(lexical(&[], "/etc"), Err(PathProblem::Absolute)));
        assert!(matches!(lexical(&[], ""), Err(PathProblem::Empty)));
    }
}
