//! Resolving a path below a directory that is already canonical, without a `realpath` of the whole
//! absolute path: `fs::canonicalize` reads every component from `/` down (one `readlink` each),
//! and a mesh resolves a context and a Dockerfile per module on every load and every hash.

use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

/// A path resolved as `fs::canonicalize` would, with the metadata of what it names.
#[derive(Debug)]
pub(crate) struct Resolved {
    pub path: PathBuf,
    pub meta: fs::Metadata,
}

/// `dir.join(relative)` resolved for a canonical `dir`. Only the components below `dir` are looked
/// at (one `lstat` each, which also gives the metadata); the full resolution runs only when one of
/// them is a symlink or `relative` is not plainly downward (`..`, an absolute path).
pub(crate) fn resolve_below(dir: &Path, relative: &Path) -> io::Result<Resolved> {
    let plain = relative
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    let full = || {
        let path = fs::canonicalize(dir.join(relative))?;
        let meta = fs::metadata(&path)?;
        Ok(Resolved { path, meta })
    };
    if !plain {
        return full();
    }
    let mut path = dir.to_path_buf();
    let mut last = None;
    for component in relative.components() {
        if let Component::Normal(name) = component {
            path.push(name);
            let meta = fs::symlink_metadata(&path)?;
            if meta.file_type().is_symlink() {
                return full();
            }
            last = Some(meta);
        }
    }
    let meta = match last {
        Some(meta) => meta,
        None => fs::metadata(&path)?, // `relative` is `.`: `dir` itself
    };
    Ok(Resolved { path, meta })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn agrees_with_canonicalize() {
        let root = tempfile::tempdir().unwrap();
        let dir = fs::canonicalize(root.path()).unwrap();
        fs::create_dir_all(dir.join("a/b")).unwrap();
        fs::write(dir.join("a/b/Dockerfile"), "FROM scratch\n").unwrap();
        fs::create_dir(dir.join("elsewhere")).unwrap();
        fs::write(dir.join("elsewhere/Dockerfile"), "FROM scratch\nRUN true\n").unwrap();
        std::os::unix::fs::symlink(dir.join("elsewhere"), dir.join("a/link")).unwrap();
        for relative in [
            "a",
            "./a/b",
            "a/b/Dockerfile",
            "a/link",
            "a/link/Dockerfile",
            "a/b/../b/Dockerfile",
            "a/link/../a/b",
            ".",
        ] {
            let resolved = resolve_below(&dir, Path::new(relative)).unwrap();
            let real = fs::canonicalize(dir.join(relative)).unwrap();
            assert_eq!(resolved.path, real, "{relative}");
            let meta = fs::metadata(&real).unwrap();
            assert_eq!(resolved.meta.is_dir(), meta.is_dir(), "{relative}");
            assert_eq!(resolved.meta.len(), meta.len(), "{relative}");
        }
    }

    #[test]
    fn a_missing_component_is_not_found() {
        let root = tempfile::tempdir().unwrap();
        let dir = fs::canonicalize(root.path()).unwrap();
        let error = resolve_below(&dir, Path::new("nope/Dockerfile")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn a_dangling_symlink_is_not_found() {
        let root = tempfile::tempdir().unwrap();
        let dir = fs::canonicalize(root.path()).unwrap();
        std::os::unix::fs::symlink(dir.join("gone"), dir.join("Dockerfile")).unwrap();
        let error = resolve_below(&dir, Path::new("Dockerfile")).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::NotFound);
    }
}
