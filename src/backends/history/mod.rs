//! The state database (SQLite): build records, the docker target's record, input manifests,
//! converge progress events, sends, and the one-converge-per-mesh lock.
//!
//! One database serves every mesh of the user, so every row names its mesh. Times are
//! milliseconds since the Unix epoch. See DESIGN.md, "Build records".

mod builds;
mod error;
mod events;
mod lock;
mod record;
mod schema;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

pub use builds::{
    BUILD_BY_DIGEST_SQL, BuildEnd, BuildQuery, BuildRow, BuildStatus, LAST_BUILDS_SQL, NewBuild,
    builds_sql,
};
pub use error::HistoryError;
pub use events::{EventRow, NewEvent, SendRow};
pub use lock::{Holder, LOCK_STALE_MS, this_host};
pub use schema::SCHEMA_VERSION;

/// The state database of this user: `<data dir>/meshtop/state.db`
/// (on Linux `~/.local/share/meshtop/state.db`). The CLI handles `--state` / `MESHTOP_STATE` itself.
pub fn default_path() -> Result<PathBuf, HistoryError> {
    let base = directories::BaseDirs::new().ok_or(HistoryError::NoDataDir)?;
    Ok(base.data_dir().join("meshtop").join("state.db"))
}

/// An open state database. One handle is one SQLite connection: `Send`, not `Sync`;
/// open one handle per thread (they share the file safely, WAL + busy timeout).
pub struct History {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for History {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("History")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl History {
    /// Open (creating it and its directories if needed) and migrate the state database at `path`.
    /// The file is made owner-only (0600). A schema newer than this binary knows is refused untouched.
    pub fn open(path: &Path) -> Result<History, HistoryError> {
        let conn = schema::open(path)?;
        Ok(History {
            conn,
            path: path.to_path_buf(),
        })
    }

    /// Where the database lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Map a SQLite error met while doing `op` to an error naming this database.
    fn err(&self, op: &'static str) -> impl FnOnce(rusqlite::Error) -> HistoryError + '_ {
        move |e| HistoryError::sqlite(&self.path, op, e)
    }

    fn invalid(&self, what: impl Into<String>) -> HistoryError {
        HistoryError::Invalid {
            path: self.path.clone(),
            what: what.into(),
        }
    }
}

/// Now, in milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}
