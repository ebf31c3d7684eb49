//! The one error type of the state database. Every message names the database file and says what to do.

use std::fmt;
use std::path::PathBuf;

use rusqlite::ErrorCode;

/// What can go wrong with the state database.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(
        "cannot find the user's data directory for the state database (is HOME set?): pass --state PATH or set MESHTOP_STATE"
    )]
    NoDataDir,

    #[error(
        "cannot create the directory of the state database {}: {source}; create it, or choose another file with --state PATH / MESHTOP_STATE",
        path.display()
    )]
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "cannot prepare the state database {}: {what}: {source}; check the file's owner and permissions, or choose another file with --state PATH / MESHTOP_STATE",
        path.display()
    )]
    Io {
        path: PathBuf,
        what: &'static str,
        source: std::io::Error,
    },

    #[error(
        "{} is not a SQLite database, so it cannot be meshtop's state database; move it away, or choose another file with --state PATH / MESHTOP_STATE",
        path.display()
    )]
    NotADatabase { path: PathBuf },

    #[error(
        "the state database {} has schema version {found}, newer than this meshtop knows ({known}); it was left untouched: upgrade meshtop, or choose another file with --state PATH / MESHTOP_STATE",
        path.display()
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },

    #[error(
        "the state database {} cannot be written ({detail}); meshtop refuses to build without a record: make the file and its directory writable, or choose another file with --state PATH / MESHTOP_STATE",
        path.display()
    )]
    ReadOnly { path: PathBuf, detail: String },

    #[error(
        "the state database {} stayed locked by another process for more than 5 s while trying to {op}; retry, or find the process holding it (fuser {})",
        path.display(), path.display()
    )]
    Busy { path: PathBuf, op: String },

    #[error(
        "the state database {}: cannot {op}: {source}; if the file is damaged, move it away (builds history is lost) or choose another file with --state PATH / MESHTOP_STATE",
        path.display()
    )]
    Sqlite {
        path: PathBuf,
        op: String,
        source: rusqlite::Error,
    },

    #[error(
        "the state database {}: cannot {op}: disk full; free space on its filesystem, then run any meshtop command (builds left running are closed as stopped)",
        path.display()
    )]
    Full { path: PathBuf, op: String },

    #[error("the state database {}: {what}", path.display())]
    Invalid { path: PathBuf, what: String },

    /// The shared handle was poisoned (a panic while it was held): not trusted again.
    #[error(transparent)]
    Handle(#[from] super::Poisoned),

    #[error(
        "the state database {}: no build with correlation id {id}; record its start (start_build) before completing it",
        path.display()
    )]
    UnknownBuild { path: PathBuf, id: String },

    #[error(
        "converge {operation_id} lost mesh {mesh}: {}; it stopped before stamping or sending anything more (state database {}): see what that converge did (meshtop builds), then converge again if needed",
        taken_by_text(taken_by.as_deref()), path.display()
    )]
    LockLost {
        path: PathBuf,
        mesh: String,
        operation_id: String,
        /// Who took the mesh over, when known.
        taken_by: Option<Box<super::holder::Holder>>,
    },
}

fn taken_by_text(holder: Option<&super::holder::Holder>) -> String {
    match holder {
        Some(h) => format!(
            "converge {} (host {}, process {}) took it over at {}, its heartbeat having gone stale",
            h.operation_id,
            h.host,
            h.pid,
            crate::timefmt::local_time(h.since_ms)
        ),
        None => "its lock was taken over or released (who took it is not known)".into(),
    }
}

impl StateError {
    /// Classify a SQLite error met while doing `op` on the database at `path`.
    pub(crate) fn sqlite(
        path: &std::path::Path,
        op: impl fmt::Display,
        source: rusqlite::Error,
    ) -> Self {
        let path = path.to_path_buf();
        match source.sqlite_error_code() {
            Some(ErrorCode::NotADatabase) => StateError::NotADatabase { path },
            Some(ErrorCode::ReadOnly)
            | Some(ErrorCode::PermissionDenied)
            | Some(ErrorCode::CannotOpen) => StateError::ReadOnly {
                path,
                detail: format!("{op}: {source}"),
            },
            Some(ErrorCode::DiskFull) => StateError::Full {
                path,
                op: op.to_string(),
            },
            Some(ErrorCode::DatabaseBusy) | Some(ErrorCode::DatabaseLocked) => StateError::Busy {
                path,
                op: op.to_string(),
            },
            _ => StateError::Sqlite {
                path,
                op: op.to_string(),
                source,
            },
        }
    }
}
