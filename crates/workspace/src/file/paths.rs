//! Where a mesh's files may come from: the repository root, and contexts and Dockerfiles confined to it.
//!
//! A mesh file must never make meshtop send files from elsewhere on the host to a daemon, so every
//! path is checked twice: lexically (no `..` above the root) and after resolving symlinks.

use std::io;
use std::path::{Component, Path, PathBuf};

use super::MeshError;
use super::read::RawModule;
use super::table::{Source, show};
use crate::mesh::model::{Module, Platform};
use crate::realpath::{Resolved, resolve_below};

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
    let Resolved { path: real, meta } = match resolve_below(dir, Path::new(relative)) {
        Ok(resolved) => resolved,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            // A dangling symlink is reported as missing too.
            return Err(PathProblem::Missing(joined));
        }
        Err(e) => return Err(PathProblem::Unreadable(joined, e)),
    };
    if want_dir != meta.is_dir() || (!want_dir && !meta.is_file()) {
        return Err(PathProblem::WrongKind(joined));
    }
    if !real.starts_with(root) {
        return Err(PathProblem::Symlink { real });
    }
    Ok(real)
}

/// Resolve a module's context and Dockerfile inside the repository and fill in its defaults.
pub(super) fn resolve_module(
    src: &Source<'_>,
    root: &Path,
    dir: &Path,
    raw: RawModule,
    tier: u32,
    mesh_platforms: &[Platform],
) -> Result<Module, MeshError> {
    let who = format!("module {}", show(raw.name.get_ref()));
    let ctx = raw.context.get_ref();
    let context = confine(root, dir, ctx, true).map_err(|problem| {
        let (what, fix) = match problem {
            PathProblem::Empty => ("has an empty `context`".to_string(), "write context = \".\" for the mesh file's directory".to_string()),
            PathProblem::Absolute => (
                format!("has an absolute `context` {}", show(ctx)),
                "write the context relative to the mesh file".to_string(),
            ),
            PathProblem::DotDot => (
                format!("has a `context` {} that escapes the repository {} through `..`", show(ctx), root.display()),
                "a context must lie inside the repository holding the mesh file: move it there".to_string(),
            ),
            PathProblem::Missing(p) => (
                format!("has a `context` directory that does not exist: {}", p.display()),
                "create the directory or fix the path (it is relative to the mesh file)".to_string(),
            ),
            PathProblem::WrongKind(p) => (
                format!("has a `context` that is not a directory: {}", p.display()),
                "name the directory holding the module's files".to_string(),
            ),
            PathProblem::Symlink { real } => (
                format!(
                    "has a `context` {} that escapes the repository {} through a symlink (it resolves to {})",
                    show(ctx),
                    root.display(),
                    real.display()
                ),
                "a context must lie inside the repository holding the mesh file: copy the files in, do not link".to_string(),
            ),
            PathProblem::Unreadable(p, e) => (
                format!("has a `context` that cannot be read: {}: {e}", p.display()),
                "check its permissions".to_string(),
            ),
        };
        src.err(&raw.context.span(), format!("{who} {what}"), fix)
    })?;

    let dockerfile = raw
        .dockerfile
        .as_ref()
        .map_or("Dockerfile", |d| d.get_ref().as_str())
        .to_string();
    let df_span = raw
        .dockerfile
        .as_ref()
        .map_or(raw.context.span(), |d| d.span());
    confine(&context, &context, &dockerfile, false).map_err(|problem| {
        let (what, fix) = match problem {
            PathProblem::Empty => ("has an empty `dockerfile`".to_string(), "remove the key to use Dockerfile".to_string()),
            PathProblem::Absolute => (
                format!("has an absolute `dockerfile` {}", show(&dockerfile)),
                "write the Dockerfile's path relative to the context".to_string(),
            ),
            PathProblem::DotDot => (
                format!("has a `dockerfile` {} that escapes its context through `..`", show(&dockerfile)),
                "the Dockerfile must lie inside the module's context: move it there".to_string(),
            ),
            PathProblem::Missing(p) => (
                format!("has no Dockerfile: {} does not exist", p.display()),
                "create it, or set `dockerfile` to its path relative to the context".to_string(),
            ),
            PathProblem::WrongKind(p) => (
                format!("has a `dockerfile` that is not a file: {}", p.display()),
                "set `dockerfile` to the Dockerfile's path relative to the context".to_string(),
            ),
            PathProblem::Symlink { real } => (
                format!("has a `dockerfile` that escapes its context through a symlink (it resolves to {})", real.display()),
                "the Dockerfile must lie inside the module's context: copy it in, do not link".to_string(),
            ),
            PathProblem::Unreadable(p, e) => (
                format!("has a `dockerfile` that cannot be read: {}: {e}", p.display()),
                "check its permissions".to_string(),
            ),
        };
        src.err(&df_span, format!("{who} {what}"), fix)
    })?;

    Ok(Module {
        name: raw.name.into_inner(),
        context,
        dockerfile,
        base: raw.base.map(|b| b.into_inner()),
        contexts: raw
            .contexts
            .into_iter()
            .map(|(name, module)| (name.into_inner(), module.into_inner()))
            .collect(),
        policy: raw.policy,
        platforms: raw.platforms.unwrap_or_else(|| mesh_platforms.to_vec()),
        build_args: raw.args,
        secrets: raw.secrets,
        ssh: raw.ssh,
        tier,
        line: raw.line,
        backoff: raw.backoff,
    })
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
