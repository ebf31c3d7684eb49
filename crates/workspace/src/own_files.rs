//! meshtop's own files (the state database and its `-wal`/`-shm`/`-journal`, and the dashboard's
//! log file) must never be part of a build context: they change while meshtop runs, so a context
//! holding them could never keep its address between the plan and the build. Such a mesh is
//! refused before any build, naming the file and the fix. The log's directory and file are made
//! owner-only here too (0700 and 0600, as the state database).

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::ignore::DockerIgnore;

/// The files meshtop writes beside the state database at `state`.
pub(crate) fn state_files(state: &Path) -> Vec<PathBuf> {
    let mut files = vec![state.to_path_buf()];
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = state.as_os_str().to_os_string();
        name.push(suffix);
        files.push(PathBuf::from(name));
    }
    files
}

/// The log file's name inside [`log_dir`].
pub const LOG_FILE: &str = "meshtop.log";

/// Where the dashboard logs: `<state dir>/meshtop` (`$XDG_STATE_HOME`, else `~/.local/state`;
/// the cache dir where there is no state dir). None without a home directory.
pub fn log_dir() -> Option<PathBuf> {
    let dirs = directories::BaseDirs::new()?;
    Some(
        dirs.state_dir()
            .unwrap_or_else(|| dirs.cache_dir())
            .join("meshtop"),
    )
}

/// Create the log directory (0700) and log file (0600), tightening looser modes left by an older
/// meshtop; returns the file's path.
pub fn prepare_log(dir: &Path) -> std::io::Result<PathBuf> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let file = dir.join(LOG_FILE);
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&file)?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

/// Canonical form of a path whose file (or directories) may not exist yet: the nearest existing
/// ancestor made canonical, the rest joined to it as written.
fn canonical(path: &Path) -> Option<PathBuf> {
    let mut rest = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(at) {
            return Some(rest.iter().rev().fold(real, |p, part| p.join(part)));
        }
        rest.push(at.file_name()?.to_os_string());
        at = at.parent().filter(|p| !p.as_os_str().is_empty())?;
    }
}

/// The first of `own` that the context at `context` would send to the builder (inside it and
/// not excluded by its `.dockerignore`), as a path relative to the context.
pub(crate) fn sent_own_file(context: &Path, own: &[PathBuf]) -> Option<String> {
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

/// A refusal for each module whose context would send one of meshtop's files: the state database
/// at `state` (and its sidecars) or the log file at `log`.
pub fn refusals<'a>(
    contexts: impl IntoIterator<Item = (&'a str, &'a Path)>,
    state: &Path,
    log: Option<&Path>,
) -> Vec<String> {
    let own = state_files(state);
    let name = state
        .file_name()
        .map_or_else(|| "state.db".into(), |n| n.to_string_lossy().into_owned());
    let log: Vec<PathBuf> = log.map(Path::to_path_buf).into_iter().collect();
    contexts
        .into_iter()
        .filter_map(|(module, context)| {
            let ignore = context.join(".dockerignore");
            if let Some(rel) = sent_own_file(context, &own) {
                return Some(format!(
                    "module {module}: its build context {} holds meshtop's own state database file {rel} ({}), which changes while meshtop runs and can never be an input: add `{name}*` to {}, or keep the state outside the context (--state PATH / MESHTOP_STATE)",
                    context.display(),
                    state.display(),
                    ignore.display()
                ));
            }
            let rel = sent_own_file(context, &log)?;
            Some(format!(
                "module {module}: its build context {} holds meshtop's own log file {rel} ({}), which changes while meshtop runs and can never be an input: add `{rel}` to {}, or keep the log outside the context (it is written to $XDG_STATE_HOME/meshtop/{LOG_FILE}: set XDG_STATE_HOME to a directory outside it)",
                context.display(),
                log[0].display(),
                ignore.display()
            ))
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_log_directory_is_0700_and_the_log_file_0600_even_when_they_were_looser() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("state").join("meshtop");
        let file = prepare_log(&logs).unwrap();
        assert_eq!(file, logs.join(LOG_FILE));
        assert_eq!(mode(&logs), 0o700);
        assert_eq!(mode(&file), 0o600);
        // Left loose by an older meshtop (0755 / 0644): tightened.
        std::fs::set_permissions(&logs, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        prepare_log(&logs).unwrap();
        assert_eq!(mode(&logs), 0o700);
        assert_eq!(mode(&file), 0o600);
    }

    #[test]
    fn a_log_file_not_yet_written_inside_a_context_is_refused_too() {
        let dir = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap().path().join("state.db");
        let log = dir.path().join(".state/meshtop").join(LOG_FILE);
        let refused = refusals([("app", dir.path())], &state, Some(&log));
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert!(
            refused[0].contains(".state/meshtop/meshtop.log")
                && refused[0].contains(".dockerignore"),
            "{}",
            refused[0]
        );
        std::fs::write(
            dir.path().join(".dockerignore"),
            ".state/meshtop/meshtop.log\n",
        )
        .unwrap();
        assert!(refusals([("app", dir.path())], &state, Some(&log)).is_empty());
        // Outside the context: nothing to refuse.
        let outside = tempfile::tempdir().unwrap().path().join(LOG_FILE);
        assert!(refusals([("app", dir.path())], &state, Some(&outside)).is_empty());
    }
}
