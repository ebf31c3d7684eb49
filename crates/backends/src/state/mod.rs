//! The state database (SQLite): build records, the docker target's record, input manifests,
//! converge progress events, sends, and the one-converge-per-mesh lock.
//!
//! One database serves every mesh of the user, so every row names its mesh. Times are
//! milliseconds since the Unix epoch. See DESIGN.md, "Build records".

mod builds;
mod context_secret;
mod error;
mod events;
mod holder;
mod input_stats;
mod lock;
mod operations;
mod pins;
mod read_only;
mod record;
mod record_history;
mod schema;
mod stats;
mod timeline;
mod upstreams;
mod verified;
mod words;

use std::path::{Path, PathBuf};

use rusqlite::Connection;

pub use builds::{
    BUILD_BY_DIGEST_SQL, BuildEnd, BuildQuery, BuildRow, BuildStatus, LAST_BUILDS_SQL, NewBuild,
    builds_sql,
};
pub use error::StateError;
pub use events::{EVENT_ID_RANGE_SQL, EventRow, KEEP_EVENTS, NewEvent, PRUNE_BATCH, SendRow};
pub use holder::{Holder, LOCK_STALE_MS, TEST_STALE_ENV, lock_stale_ms, this_host};
pub use input_stats::decode as decode_input_stats;
pub use operations::OperationId;
pub use schema::SCHEMA_VERSION;
pub use upstreams::UpstreamSeen;

/// The state database of this user: `<data dir>/meshtop/state.db`
/// (on Linux `~/.local/share/meshtop/state.db`). The CLI handles `--state` / `MESHTOP_STATE` itself.
pub fn default_path() -> Result<PathBuf, StateError> {
    let base = directories::BaseDirs::new().ok_or(StateError::NoDataDir)?;
    Ok(base.data_dir().join("meshtop").join("state.db"))
}

/// How long a statement waits on another process's lock before it gives up.
pub(crate) const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// An open state database. One handle is one SQLite connection: `Send`, not `Sync`;
/// open one handle per thread (they share the file safely, WAL + busy timeout).
pub struct StateDb {
    conn: Connection,
    path: PathBuf,
    /// A private copy read instead of a file whose log this user cannot index (`read_only.rs`);
    /// declared after `conn` so that the connection closes before the copy is removed.
    _snapshot: Option<read_only::Snapshot>,
}

impl std::fmt::Debug for StateDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateDb")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl StateDb {
    /// Open (creating it and its directories if needed) and migrate the state database at `path`.
    /// The file is made owner-only (0600). A schema newer than this binary knows is refused untouched.
    /// Build rows left `running` by a converge that is certainly gone (it holds no lock, or its
    /// process no longer exists on this host: killed, or its end could not be written) are closed
    /// here as `stopped`, saying so: a row never stays running without a live holder.
    pub fn open(path: &Path) -> Result<StateDb, StateError> {
        let conn = schema::open(path)?;
        let db = StateDb {
            conn,
            path: path.to_path_buf(),
            _snapshot: None,
        };
        db.close_orphans()?;
        Ok(db)
    }

    /// For commands that only read (plan, builds, status): [`StateDb::open`], or, when the file
    /// cannot be written by this user, the same file read-only (nothing is written to it).
    pub fn open_for_reading(path: &Path) -> Result<StateDb, StateError> {
        match StateDb::open(path) {
            Err(StateError::ReadOnly { .. }) if path.exists() => {
                let (conn, snapshot) = schema::open_read_only(path)?;
                Ok(StateDb {
                    conn,
                    path: path.to_path_buf(),
                    _snapshot: snapshot,
                })
            }
            other => other,
        }
    }

    /// Where the database lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Map a SQLite error met while doing `op` to an error naming this database.
    fn err(&self, op: &'static str) -> impl FnOnce(rusqlite::Error) -> StateError + '_ {
        move |e| StateError::sqlite(&self.path, op, e)
    }

    /// Run several reads on one snapshot of the database (one read transaction: under WAL, writes
    /// committed meanwhile by other processes are not seen half), e.g. the events and the lock
    /// holder that must agree on whether an operation still runs.
    pub fn on_one_snapshot<T>(
        &self,
        read: impl FnOnce(&StateDb) -> Result<T, StateError>,
    ) -> Result<T, StateError> {
        self.conn
            .execute_batch("BEGIN DEFERRED")
            .map_err(self.err("begin a read"))?;
        let result = read(self);
        // A read transaction has nothing to keep: end it whatever the reads said.
        let ended = self
            .conn
            .execute_batch("COMMIT")
            .map_err(self.err("end a read"));
        let value = result?;
        ended?;
        Ok(value)
    }

    /// Run `write` so that its commit is on disk when this returns (`synchronous = FULL` for it).
    /// Build records, stamps, manifests and sends go through here; progress events and the
    /// converge lock commit with `synchronous = NORMAL` and may roll back after a power loss,
    /// which is why closing a handle need not checkpoint (see `schema::open`).
    fn durably<T>(&self, write: impl FnOnce() -> Result<T, StateError>) -> Result<T, StateError> {
        let set = |level: &str| {
            self.conn
                .pragma_update(None, "synchronous", level)
                .map_err(self.err("set synchronous"))
        };
        set("FULL")?;
        let written = write();
        let restored = set("NORMAL");
        let value = written?;
        restored?;
        Ok(value)
    }

    fn invalid(&self, what: impl Into<String>) -> StateError {
        StateError::Invalid {
            path: self.path.clone(),
            what: what.into(),
        }
    }
}

pub use crate::timefmt::now_ms;

/// A panic happened while the shared handle was held: the handle is not trusted again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the state database handle is poisoned")]
pub struct Poisoned;

/// The shared handle, locked; a poisoned lock (a panic while it was held) is an error, not a panic.
pub fn locked(
    db: &std::sync::Mutex<StateDb>,
) -> Result<std::sync::MutexGuard<'_, StateDb>, Poisoned> {
    db.lock().map_err(|_| Poisoned)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::mesh::model::{Record, RecordEntry};

    fn synchronous(db: &StateDb) -> i64 {
        db.conn
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn durable_writes_commit_with_full_sync_and_leave_normal_behind() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(&dir.path().join("state.db")).unwrap();
        assert_eq!(synchronous(&db), 1, "NORMAL between durable writes");
        let seen = db.durably(|| Ok(synchronous(&db))).unwrap();
        assert_eq!(seen, 2, "FULL inside a durable write");
        let failed: Result<(), StateError> = db.durably(|| Err(db.invalid("a write that failed")));
        assert!(failed.is_err());
        assert_eq!(synchronous(&db), 1, "NORMAL again after a failed write");
    }

    #[test]
    fn closing_keeps_the_wal_and_the_next_handle_reads_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let mut record = Record::new();
        record.insert(
            "api".into(),
            RecordEntry::new("demo/api:abc-amd64".into(), "sha256:1".into()),
        );
        let db = StateDb::open(&path).unwrap();
        db.lock_mesh("demo", "default", &Holder::here("c1"))
            .unwrap()
            .unwrap();
        db.stamp_record("demo", "default", "c1", &record).unwrap();
        drop(db);
        // No checkpoint on close: the stamp is still in the WAL, which the next handle recovers.
        assert!(dir.path().join("state.db-wal").exists());
        assert_eq!(
            StateDb::open(&path)
                .unwrap()
                .record("demo", "default")
                .unwrap(),
            record
        );
    }
}
