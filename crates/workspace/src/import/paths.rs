//! Paths as another tool's file writes them, made absolute and written again relative to the mesh file.

use std::path::{Component, Path, PathBuf};

/// `relative` from `dir` (absolute), with `.` and `..` resolved without asking the disk.
pub(super) fn join(dir: &Path, relative: &str) -> PathBuf {
    let mut out = PathBuf::new();
    for component in dir.join(relative).components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// `to` as a path relative to `from` (both absolute and resolved), `/`-separated; `"."` for the same.
pub(super) fn relative(from: &Path, to: &Path) -> String {
    let from: Vec<Component> = from.components().collect();
    let to: Vec<Component> = to.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut parts: Vec<String> = vec!["..".to_string(); from.len() - common];
    parts.extend(
        to[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

/// A context that is no directory on this disk: a URL (git, http) or another tool's scheme.
pub(super) fn is_remote(context: &str) -> bool {
    context.contains("://") || context.starts_with("git@") || context.ends_with(".git")
}

/// Whether `dockerfile` (relative to its context) stays inside it, written as meshtop takes it.
pub(super) fn inside(dockerfile: &str) -> bool {
    let mut depth = 0usize;
    for component in Path::new(dockerfile).components() {
        match component {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir => match depth.checked_sub(1) {
                Some(d) => depth = d,
                None => return false,
            },
            Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    depth > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_climb_and_descend() {
        let a = Path::new("/r/app");
        assert_eq!(relative(a, Path::new("/r/app")), ".");
        assert_eq!(relative(a, Path::new("/r/app/src/x")), "src/x");
        assert_eq!(relative(a, Path::new("/r/lib")), "../lib");
        assert_eq!(join(a, "./src/../web/"), Path::new("/r/app/web"));
        assert_eq!(join(a, ".."), Path::new("/r"));
    }

    #[test]
    fn a_dockerfile_is_inside_its_context_or_not() {
        assert!(inside("Dockerfile"));
        assert!(inside("build/../docker/Api.Dockerfile"));
        assert!(!inside("../Dockerfile"));
        assert!(!inside("/abs/Dockerfile"));
        assert!(is_remote("https://github.com/a/b.git#main"));
        assert!(!is_remote("./web"));
    }
}
