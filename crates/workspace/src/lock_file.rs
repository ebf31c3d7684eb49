//! `mesh.lock` on disk, beside the mesh file: read whole (a missing file is an empty lock), written
//! whole through a temporary file and a rename, so that a reader never sees half of one. And the
//! upstream images each module's Dockerfile names (and whether the stage it builds is FROM its
//! base), read from the disk.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::mesh::model::Module;
use crate::mesh::upstream::{self, BASE_ARG, Upstream};
use crate::mesh::upstream_lock::{LOCK_FILE, Lock, LockError};

#[derive(Debug, thiserror::Error)]
pub enum LockFileError {
    #[error(transparent)]
    Parse(#[from] LockError),
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}; the lock was left as it was", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("module {module}: cannot read its Dockerfile {}: {source}", path.display())]
    Dockerfile {
        module: String,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Where the lock of the mesh whose file is in `root` lives.
pub(crate) fn lock_path(root: &Path) -> PathBuf {
    root.join(LOCK_FILE)
}

/// The lock beside the mesh file; an empty one when there is none yet.
pub fn read_lock(root: &Path) -> Result<Lock, LockFileError> {
    let path = lock_path(root);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(Lock::parse(&path.display().to_string(), &text)?),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Lock::default()),
        Err(source) => Err(LockFileError::Read { path, source }),
    }
}

/// Write `lock` beside the mesh file, whole or not at all.
pub fn write_lock(root: &Path, lock: &Lock) -> Result<(), LockFileError> {
    let path = lock_path(root);
    let failed = |source| LockFileError::Write {
        path: path.clone(),
        source,
    };
    let mut file = tempfile_in(root).map_err(failed)?;
    file.1.write_all(lock.text().as_bytes()).map_err(failed)?;
    file.1.sync_all().map_err(failed)?;
    std::fs::rename(&file.0, &path).map_err(failed)
}

/// Add `entries` to the lock as it is on disk now (read again, so that what another process
/// added since this one read it is kept; an image already there keeps its entry), and write it.
/// The lock as written.
pub fn add_to_lock(
    root: &Path,
    entries: BTreeMap<String, crate::mesh::upstream_lock::LockEntry>,
) -> Result<Lock, LockFileError> {
    let mut lock = read_lock(root)?;
    let before = lock.entries.len();
    for (image, entry) in entries {
        lock.entries.entry(image).or_insert(entry);
    }
    if lock.entries.len() != before {
        write_lock(root, &lock)?;
    }
    Ok(lock)
}

/// A new file beside the lock, named for this moment and write (created new: two writers that
/// met on a name would fail, never share a file).
fn tempfile_in(root: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let write = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = root.join(format!(".{LOCK_FILE}.{nanos}.{write}"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)?;
    Ok((path, file))
}

/// The upstream images `module`'s Dockerfile names (with its build args, and `BASE` when it has a
/// base), in file order.
pub fn module_upstreams(module: &Module) -> Result<Vec<Upstream>, LockFileError> {
    let path = module.context.join(&module.dockerfile);
    let text = std::fs::read_to_string(&path).map_err(|source| LockFileError::Dockerfile {
        module: module.name.clone(),
        path: path.clone(),
        source,
    })?;
    let mut args: BTreeMap<String, String> = module.build_args.clone();
    if module.base.is_some() {
        args.insert(BASE_ARG.into(), String::new());
    }
    Ok(upstream::upstreams(&text, &args, &module.contexts))
}

/// Whether the stage `module` builds is FROM its base (directly or through the stages it is
/// FROM): its image then begins with the base's layers, which a builder given the base by a tag
/// checks when the build ends. A Dockerfile that cannot be read is not (the tar's walk fails the
/// build on it).
pub fn module_built_on_base(module: &Module) -> bool {
    if module.base.is_none() {
        return false;
    }
    let Ok(text) = std::fs::read_to_string(module.context.join(&module.dockerfile)) else {
        return false;
    };
    let mut args: BTreeMap<String, String> = module.build_args.clone();
    args.insert(BASE_ARG.into(), String::new());
    upstream::built_on_base(&text, &args, &module.contexts, module.target.as_deref())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::mesh::upstream_lock::{LockEntry, ResolvedFrom};

    fn entry(c: char) -> LockEntry {
        LockEntry {
            digest: format!("sha256:{}", c.to_string().repeat(64)),
            from: ResolvedFrom::Registry,
            platforms: BTreeMap::new(),
        }
    }

    /// Two plans read the lock empty, each locks another image: neither entry is lost, and an
    /// image the other locked first keeps the other's digest.
    #[test]
    fn an_entry_another_plan_wrote_meanwhile_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let first = BTreeMap::from([("a:1".to_string(), entry('a'))]);
        add_to_lock(dir.path(), first).unwrap();
        let second = BTreeMap::from([
            ("b:1".to_string(), entry('b')),
            ("a:1".to_string(), entry('c')),
        ]);
        let lock = add_to_lock(dir.path(), second).unwrap();
        assert_eq!(lock, read_lock(dir.path()).unwrap());
        assert_eq!(lock.digest_of("a:1"), Some(entry('a').digest.as_str()));
        assert_eq!(lock.digest_of("b:1"), Some(entry('b').digest.as_str()));
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != LOCK_FILE)
            .collect();
        assert!(
            leftovers.is_empty(),
            "no temporary file left: {leftovers:?}"
        );
    }
}
