//! meshtop's own files (the state database and its `-wal`/`-shm`/`-journal`) must never be part of
//! a build context: they change while meshtop runs, so a context holding them could never keep its
//! address between the plan and the build. Such a mesh is refused before any build, naming the file
//! and the fix.

use std::path::{Path, PathBuf};

use super::ignore::DockerIgnore;

/// The files meshtop writes beside the state database at `state`.
pub fn state_files(state: &Path) -> Vec<PathBuf> {
    let mut files = vec![state.to_path_buf()];
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = state.as_os_str().to_os_string();
        name.push(suffix);
        files.push(PathBuf::from(name));
    }
    files
}

/// Canonical form of a path whose file may not exist yet (its directory must).
fn canonical(path: &Path) -> Option<PathBuf> {
    if let Ok(path) = std::fs::canonicalize(path) {
        return Some(path);
    }
    let parent = path.parent().filter(|p| !p.as_os_str().is_empty())?;
    Some(std::fs::canonicalize(parent).ok()?.join(path.file_name()?))
}

/// The first of `own` that the context at `context` would send to the builder (inside it and
/// not excluded by its `.dockerignore`), as a path relative to the context.
pub fn sent_own_file(context: &Path, own: &[PathBuf]) -> Option<String> {
    let root = std::fs::canonicalize(context).ok()?;
    let ignore = DockerIgnore::load(context).ok();
    own.iter().find_map(|file| {
        let rel = canonical(file)?
            .strip_prefix(&root)
            .ok()?
            .to_str()?
            .to_string();
        let excluded = ignore.as_ref().is_some_and(|i| i.is_excluded(&rel));
        (!excluded).then_some(rel)
    })
}

/// A refusal for each module whose context would send one of meshtop's files.
pub fn refusals<'a>(
    contexts: impl IntoIterator<Item = (&'a str, &'a Path)>,
    state: &Path,
) -> Vec<String> {
    let own = state_files(state);
    let name = state
        .file_name()
        .map_or_else(|| "state.db".into(), |n| n.to_string_lossy().into_owned());
    contexts
        .into_iter()
        .filter_map(|(module, context)| {
            let rel = sent_own_file(context, &own)?;
            Some(format!(
                "module {module}: its build context {} holds meshtop's own state database file {rel} ({}), which changes while meshtop runs and can never be an input: add `{name}*` to {}, or keep the state outside the context (--state PATH / MESHTOP_STATE)",
                context.display(),
                state.display(),
                context.join(".dockerignore").display()
            ))
        })
        .collect()
}
