//! Reading a state database this user cannot write, in a directory this user cannot write either.
//!
//! Under WAL, SQLite needs the `-shm` index beside the file even to read; a reader that cannot create
//! it fails ("attempt to write a readonly database"). When nothing waits in the `-wal` (its owner's
//! last writer checkpointed), the file alone is the whole truth and opens `immutable`. When the
//! `-wal` holds recent commits, the file and its log are copied to a private directory and read
//! there: a snapshot as of the copy, never a view that misses the log.

use std::fs;
use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rusqlite::{Connection, OpenFlags};

use super::StateError;

/// A private copy of a database and its log, removed with the handle that reads it.
#[derive(Debug)]
pub(super) struct Snapshot {
    dir: PathBuf,
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// `path` with its `-wal`/`-shm` suffix.
fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// A `file:` URI for `path` with `query`, the characters a URI gives meaning escaped.
fn file_uri(path: &Path, query: &str) -> String {
    let mut uri = String::from("file:");
    for byte in path.as_os_str().as_encoded_bytes() {
        match byte {
            b'%' | b'?' | b'#' | b' ' => uri.push_str(&format!("%{byte:02X}")),
            _ => uri.push(char::from(*byte)),
        }
    }
    uri.push('?');
    uri.push_str(query);
    uri
}

/// Open `path` for reading when SQLite cannot make its `-shm`; the snapshot, if one was made,
/// must live as long as the connection.
pub(super) fn open_without_shm(path: &Path) -> Result<(Connection, Option<Snapshot>), StateError> {
    let wal = sidecar(path, "-wal");
    let log_is_empty = fs::metadata(&wal).map_or(true, |m| m.len() == 0);
    if log_is_empty {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Connection::open_with_flags(file_uri(path, "immutable=1"), flags)
            .map_err(|e| StateError::sqlite(path, "open for reading (immutable)", e))?;
        return Ok((conn, None));
    }
    let snapshot = copy_with_log(path, &wal)?;
    let copy = snapshot.dir.join("state.db");
    let conn = Connection::open_with_flags(
        &copy,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| StateError::sqlite(path, "open a copy for reading", e))?;
    Ok((conn, Some(snapshot)))
}

/// The first 32 bytes of a WAL: its salts and checkpoint sequence change when a writer restarts
/// the log, which is the one moment a copy of the file and its log could disagree.
fn log_header(wal: &Path) -> std::io::Result<Vec<u8>> {
    let mut header = vec![0; 32];
    let read = fs::File::open(wal)?.read(&mut header)?;
    header.truncate(read);
    Ok(header)
}

fn copy_with_log(path: &Path, wal: &Path) -> Result<Snapshot, StateError> {
    let io = |what: &'static str| {
        move |source| StateError::Io {
            path: path.to_path_buf(),
            what,
            source,
        }
    };
    let dir = std::env::temp_dir().join(format!(
        "meshtop-read-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    ));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(io("make a private directory to read a copy in"))?;
    let snapshot = Snapshot { dir };
    for _ in 0..5 {
        let before = log_header(wal).map_err(io("read its write-ahead log"))?;
        fs::copy(wal, snapshot.dir.join("state.db-wal")).map_err(io("copy its write-ahead log"))?;
        fs::copy(path, snapshot.dir.join("state.db")).map_err(io("copy it to read"))?;
        if log_header(wal).map_err(io("read its write-ahead log"))? == before {
            return Ok(snapshot);
        }
    }
    Err(StateError::ReadOnly {
        path: path.to_path_buf(),
        detail: "its write-ahead log kept restarting while it was copied to be read; retry".into(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_escapes_what_would_end_the_path() {
        assert_eq!(
            file_uri(Path::new("/tmp/a b/x?y#z%.db"), "immutable=1"),
            "file:/tmp/a%20b/x%3Fy%23z%25.db?immutable=1"
        );
    }
}
