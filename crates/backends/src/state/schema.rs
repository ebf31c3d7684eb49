//! Opening the state database: the file, its mode, its pragmas, and the versioned migrations.
//!
//! The schema version lives in SQLite's `user_version`. Migration `n` (1-based) brings a database
//! from version `n - 1` to `n`; they run in one IMMEDIATE transaction, so two processes opening a
//! fresh file at once migrate it once. A database newer than [`SCHEMA_VERSION`] is refused before
//! anything is written to it.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::StateError;
use super::read_only;

/// The migrations, oldest first. Never edit one that shipped: append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: build records, the docker target's record, input manifests, converge events, sends, locks.
    r#"
CREATE TABLE builds (
    id               TEXT PRIMARY KEY NOT NULL,
    mesh             TEXT NOT NULL,
    module           TEXT,
    repository       TEXT NOT NULL,
    git_commit       TEXT,
    dirty            INTEGER NOT NULL,
    base_module      TEXT,
    base_digest      TEXT,
    ref              TEXT,
    digest           TEXT,
    platforms        TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    forced           INTEGER NOT NULL,
    why              TEXT NOT NULL,
    host             TEXT NOT NULL,
    started_ms       INTEGER NOT NULL,
    ended_ms         INTEGER,
    error            TEXT,
    log_tail         TEXT,
    published_ref    TEXT,
    published_digest TEXT,
    converge_id      TEXT
);
CREATE INDEX builds_by_module ON builds (mesh, module, started_ms, id);
CREATE INDEX builds_by_time ON builds (mesh, started_ms, id);
CREATE INDEX builds_failed_by_module ON builds (mesh, module, started_ms, id) WHERE status = 'failed';
CREATE INDEX builds_failed_by_time ON builds (mesh, started_ms, id) WHERE status = 'failed';
CREATE INDEX builds_by_digest ON builds (digest) WHERE digest IS NOT NULL;
CREATE INDEX builds_by_published_digest ON builds (published_digest) WHERE published_digest IS NOT NULL;
CREATE INDEX builds_running ON builds (mesh, converge_id) WHERE status = 'running';

CREATE TABLE records (
    mesh        TEXT NOT NULL,
    module      TEXT NOT NULL,
    ref         TEXT NOT NULL,
    digest      TEXT NOT NULL,
    stamped_ms  INTEGER NOT NULL,
    converge_id TEXT NOT NULL,
    PRIMARY KEY (mesh, module)
) WITHOUT ROWID;

CREATE TABLE manifests (
    mesh     TEXT NOT NULL,
    module   TEXT NOT NULL,
    ref      TEXT NOT NULL,
    manifest TEXT NOT NULL,
    saved_ms INTEGER NOT NULL,
    UNIQUE (mesh, module, ref)
);
CREATE INDEX manifests_by_module ON manifests (mesh, module);

CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms       INTEGER NOT NULL,
    mesh        TEXT NOT NULL,
    converge_id TEXT NOT NULL,
    kind        TEXT NOT NULL,
    module      TEXT,
    text        TEXT NOT NULL
);
CREATE INDEX events_by_mesh ON events (mesh, id);

CREATE TABLE sends (
    id          INTEGER PRIMARY KEY,
    mesh        TEXT NOT NULL,
    module      TEXT NOT NULL,
    machine     TEXT NOT NULL,
    from_digest TEXT NOT NULL,
    to_ref      TEXT NOT NULL,
    to_digest   TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    at_ms       INTEGER NOT NULL,
    converge_id TEXT
);
CREATE INDEX sends_by_mesh ON sends (mesh, at_ms);
CREATE INDEX sends_by_module ON sends (mesh, module, at_ms);

CREATE TABLE converge_locks (
    mesh         TEXT PRIMARY KEY NOT NULL,
    converge_id  TEXT NOT NULL,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    since_ms     INTEGER NOT NULL,
    heartbeat_ms INTEGER NOT NULL
) WITHOUT ROWID;
"#,
    // 2: operations: a short id per mesh (`#142`) for each converge, send, force, rollback, gc.
    r#"
CREATE TABLE operations (
    mesh       TEXT NOT NULL,
    number     INTEGER NOT NULL,
    uuid       TEXT NOT NULL UNIQUE,
    kind       TEXT NOT NULL,
    started_ms INTEGER NOT NULL,
    PRIMARY KEY (mesh, number)
) WITHOUT ROWID;
"#,
    // 3: the record's history (every stamp of a module's entry: from which artifact to which, by whom,
    // by which operation; operations are migration 2's), and the pinned modules.
    r#"
CREATE TABLE record_history (
    id           INTEGER PRIMARY KEY,
    mesh         TEXT NOT NULL,
    module       TEXT NOT NULL,
    from_ref     TEXT,
    from_digest  TEXT,
    to_ref       TEXT NOT NULL,
    to_digest    TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    kind         TEXT NOT NULL,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    at_ms        INTEGER NOT NULL
);
CREATE INDEX record_history_by_module ON record_history (mesh, module, id);

CREATE TABLE pins (
    mesh         TEXT NOT NULL,
    module       TEXT NOT NULL,
    from_ref     TEXT NOT NULL,
    from_digest  TEXT NOT NULL,
    to_ref       TEXT NOT NULL,
    to_digest    TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    host         TEXT NOT NULL,
    at_ms        INTEGER NOT NULL,
    PRIMARY KEY (mesh, module)
) WITHOUT ROWID;
"#,
    // 4: the stat cache of input hashing (see workspace::stat_cache), keyed by absolute path.
    r#"
CREATE TABLE input_stats (
    path         TEXT PRIMARY KEY NOT NULL,
    size         INTEGER NOT NULL,
    mtime_ns     INTEGER NOT NULL,
    ctime_ns     INTEGER NOT NULL,
    ino          INTEGER NOT NULL,
    dev          INTEGER NOT NULL,
    mode         INTEGER NOT NULL,
    sha256       TEXT NOT NULL,
    hashed_at_ns INTEGER NOT NULL
) WITHOUT ROWID;
"#,
    // 5: who took a mesh over from whom, so that a converge frozen past the stale limit learns,
    // when it wakes, who holds the mesh now (and never stamps over it).
    r#"
CREATE TABLE takeovers (
    lost_converge_id TEXT PRIMARY KEY NOT NULL,
    mesh             TEXT NOT NULL,
    converge_id      TEXT NOT NULL,
    host             TEXT NOT NULL,
    pid              INTEGER NOT NULL,
    since_ms         INTEGER NOT NULL,
    heartbeat_ms     INTEGER NOT NULL
) WITHOUT ROWID;
"#,
    // 6: the `stopped` build status (a build whose process ended without writing its end: killed,
    // taken over, or its record could not be written). SQLite cannot alter a CHECK: the table is
    // made again with every column and index as migration 1 made them, and the rows copied. Rows
    // closed as `failed` before, with the reasons that meant stopped, become `stopped` (their
    // reason stays in `error`).
    r#"
CREATE TABLE builds_v6 (
    id               TEXT PRIMARY KEY NOT NULL,
    mesh             TEXT NOT NULL,
    module           TEXT,
    repository       TEXT NOT NULL,
    git_commit       TEXT,
    dirty            INTEGER NOT NULL,
    base_module      TEXT,
    base_digest      TEXT,
    ref              TEXT,
    digest           TEXT,
    platforms        TEXT NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled', 'stopped')),
    forced           INTEGER NOT NULL,
    why              TEXT NOT NULL,
    host             TEXT NOT NULL,
    started_ms       INTEGER NOT NULL,
    ended_ms         INTEGER,
    error            TEXT,
    log_tail         TEXT,
    published_ref    TEXT,
    published_digest TEXT,
    converge_id      TEXT
);
INSERT INTO builds_v6 (id, mesh, module, repository, git_commit, dirty, base_module, base_digest, ref,
    digest, platforms, status, forced, why, host, started_ms, ended_ms, error, log_tail, published_ref,
    published_digest, converge_id)
SELECT id, mesh, module, repository, git_commit, dirty, base_module, base_digest, ref,
    digest, platforms,
    CASE WHEN status = 'failed' AND (error LIKE 'stopped: %'
              OR error LIKE 'converge % stopped without finishing this build') THEN 'stopped'
         ELSE status END,
    forced, why, host, started_ms, ended_ms, error, log_tail, published_ref,
    published_digest, converge_id
FROM builds;
DROP TABLE builds;
ALTER TABLE builds_v6 RENAME TO builds;
CREATE INDEX builds_by_module ON builds (mesh, module, started_ms, id);
CREATE INDEX builds_by_time ON builds (mesh, started_ms, id);
CREATE INDEX builds_failed_by_module ON builds (mesh, module, started_ms, id) WHERE status = 'failed';
CREATE INDEX builds_failed_by_time ON builds (mesh, started_ms, id) WHERE status = 'failed';
CREATE INDEX builds_by_digest ON builds (digest) WHERE digest IS NOT NULL;
CREATE INDEX builds_by_published_digest ON builds (published_digest) WHERE published_digest IS NOT NULL;
CREATE INDEX builds_running ON builds (mesh, converge_id) WHERE status = 'running';
"#,
    // 7: the stat cache as one row per build context (as git's index is one file): a steady plan
    // reads 40 rows instead of 12,000. The entries are an encoded list (`input_stats.rs`); the
    // per-file table of migration 4 is dropped (a cache: the first plan after this fills it again).
    r#"
DROP TABLE input_stats;
CREATE TABLE input_stat_sets (
    context TEXT PRIMARY KEY NOT NULL,
    entries BLOB NOT NULL
);
"#,
    // 8: when a build was published (pushed): gc takes nothing published within its grace, since
    // a teammate's converge may be about to stamp it.
    r#"
ALTER TABLE builds ADD COLUMN published_ms INTEGER;
"#,
    // 9: a pin keeps the own inputs of both sides (a base that moved keeps it: mesh::pin), and the
    // record's history may hold stamps copied from the target (a teammate's): they sort by time.
    r#"
ALTER TABLE pins ADD COLUMN from_inputs TEXT;
ALTER TABLE pins ADD COLUMN to_inputs TEXT;
CREATE INDEX record_history_by_time ON record_history (mesh, module, at_ms, id);
"#,
    // 10: every target of a mesh keeps its own record, lock, pins and record history (a mesh may
    // name several: staging, prod); the rows made before are the single target's, `default`. The
    // keys grow a target: the tables are made again with every column, and the rows copied. An
    // operation knows its target, a send too, and a stamp made by a promote the target it came from.
    r#"
CREATE TABLE records_v10 (
    mesh        TEXT NOT NULL,
    target      TEXT NOT NULL,
    module      TEXT NOT NULL,
    ref         TEXT NOT NULL,
    digest      TEXT NOT NULL,
    stamped_ms  INTEGER NOT NULL,
    converge_id TEXT NOT NULL,
    PRIMARY KEY (mesh, target, module)
) WITHOUT ROWID;
INSERT INTO records_v10 (mesh, target, module, ref, digest, stamped_ms, converge_id)
SELECT mesh, 'default', module, ref, digest, stamped_ms, converge_id FROM records;
DROP TABLE records;
ALTER TABLE records_v10 RENAME TO records;

CREATE TABLE pins_v10 (
    mesh         TEXT NOT NULL,
    target       TEXT NOT NULL,
    module       TEXT NOT NULL,
    from_ref     TEXT NOT NULL,
    from_digest  TEXT NOT NULL,
    to_ref       TEXT NOT NULL,
    to_digest    TEXT NOT NULL,
    operation_id TEXT NOT NULL,
    host         TEXT NOT NULL,
    at_ms        INTEGER NOT NULL,
    from_inputs  TEXT,
    to_inputs    TEXT,
    PRIMARY KEY (mesh, target, module)
) WITHOUT ROWID;
INSERT INTO pins_v10 (mesh, target, module, from_ref, from_digest, to_ref, to_digest, operation_id,
    host, at_ms, from_inputs, to_inputs)
SELECT mesh, 'default', module, from_ref, from_digest, to_ref, to_digest, operation_id, host, at_ms,
    from_inputs, to_inputs FROM pins;
DROP TABLE pins;
ALTER TABLE pins_v10 RENAME TO pins;

CREATE TABLE converge_locks_v10 (
    mesh         TEXT NOT NULL,
    target       TEXT NOT NULL,
    converge_id  TEXT NOT NULL,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    since_ms     INTEGER NOT NULL,
    heartbeat_ms INTEGER NOT NULL,
    PRIMARY KEY (mesh, target)
) WITHOUT ROWID;
INSERT INTO converge_locks_v10 (mesh, target, converge_id, host, pid, since_ms, heartbeat_ms)
SELECT mesh, 'default', converge_id, host, pid, since_ms, heartbeat_ms FROM converge_locks;
DROP TABLE converge_locks;
ALTER TABLE converge_locks_v10 RENAME TO converge_locks;

ALTER TABLE record_history ADD COLUMN target TEXT NOT NULL DEFAULT 'default';
ALTER TABLE record_history ADD COLUMN from_target TEXT;
DROP INDEX record_history_by_module;
DROP INDEX record_history_by_time;
CREATE INDEX record_history_by_module ON record_history (mesh, target, module, id);
CREATE INDEX record_history_by_time ON record_history (mesh, target, module, at_ms, id);

ALTER TABLE takeovers ADD COLUMN target TEXT NOT NULL DEFAULT 'default';
ALTER TABLE operations ADD COLUMN target TEXT NOT NULL DEFAULT 'default';
ALTER TABLE sends ADD COLUMN target TEXT NOT NULL DEFAULT 'default';
"#,
    // 11: the names say operation where any operation is meant (a lock, an event, a stamp, a send,
    // a take-over is a converge's, a send's, a rollback's, a promote's or a gc's). Renames only:
    // SQLite carries the rows and rewrites the indexes that name a renamed column.
    r#"
ALTER TABLE converge_locks RENAME TO operation_locks;
ALTER TABLE operation_locks RENAME COLUMN converge_id TO operation_id;
ALTER TABLE records RENAME COLUMN converge_id TO operation_id;
ALTER TABLE events RENAME COLUMN converge_id TO operation_id;
ALTER TABLE sends RENAME COLUMN converge_id TO operation_id;
ALTER TABLE builds RENAME COLUMN converge_id TO operation_id;
ALTER TABLE takeovers RENAME COLUMN converge_id TO operation_id;
ALTER TABLE takeovers RENAME COLUMN lost_converge_id TO lost_operation_id;
"#,
    // 12: each progress step keeps its data (`mesh::progress::Payload`, JSON) beside its text:
    // followers fold the data, never the words. Rows written before have none (NULL) and are
    // folded by their step's kind.
    r#"
ALTER TABLE events ADD COLUMN payload TEXT;
"#,
    // 13: a build keeps the pool's builder it ran on (NULL: the local daemon of a mesh without
    // builders, or a row from before) and how long its hand-over push took, apart from the build's
    // own time (started_ms .. ended_ms).
    r#"
ALTER TABLE builds ADD COLUMN builder TEXT;
ALTER TABLE builds ADD COLUMN push_ms INTEGER;
"#,
    // 14: the record keeps the manifest digest each artifact was pushed or verified as (what a send
    // deploys) and the trusted key that signed it (NULL: rows from before, or nothing pushed); the
    // host daemon's images meshtop pulled after verifying them, so that with `trust` the host
    // vouches only for what this machine built or verified.
    r#"
ALTER TABLE records ADD COLUMN manifest TEXT;
ALTER TABLE records ADD COLUMN signed_by TEXT;
CREATE TABLE verified_pulls (
    mesh       TEXT NOT NULL,
    image_id   TEXT NOT NULL,
    manifest   TEXT NOT NULL,
    signed_by  TEXT,
    pulled_ms  INTEGER NOT NULL,
    PRIMARY KEY (mesh, image_id)
) WITHOUT ROWID;
"#,
    // 15: a build keeps how long its builder's daemon worked on it (the build call, from the
    // session to the daemon's last answer): the rest of started_ms .. ended_ms is meshtop's own.
    r#"
ALTER TABLE builds ADD COLUMN daemon_ms INTEGER;
"#,
    // 16: each operation keeps its timeline (`mesh::timeline::Timeline`, JSON): per module its
    // phases with their times and builders, written when it ends; forgotten with its events.
    r#"
CREATE TABLE timelines (
    operation_id TEXT PRIMARY KEY NOT NULL,
    mesh         TEXT NOT NULL,
    saved_ms     INTEGER NOT NULL,
    timeline     TEXT NOT NULL
);
"#,
    // 17: the image a host daemon runs out of a multi-platform artifact (an index): the index's
    // manifest for the daemon's platform, found in the index fetched by its digest, and that
    // manifest's config (the image id the containers report), noted when it was pulled.
    r#"
CREATE TABLE index_images (
    mesh          TEXT NOT NULL,
    index_digest  TEXT NOT NULL,
    platform      TEXT NOT NULL,
    manifest      TEXT NOT NULL,
    image_id      TEXT NOT NULL,
    pulled_ms     INTEGER NOT NULL,
    PRIMARY KEY (mesh, index_digest, platform)
) WITHOUT ROWID;
"#,
    // 18: a verified pull keeps the ref it was pulled under: with `trust`, the host vouches for an
    // image only as the ref a build row or a verified pull names (NULL: rows from before, which
    // vouch for nothing; a pull or a build answers again).
    r#"
ALTER TABLE verified_pulls ADD COLUMN reference TEXT;
"#,
    // 19: what each upstream image's registry served under its tag when last asked (`outdated`,
    // `plan --refresh`, the dashboard's poller): `status` and the dashboard say which machines run
    // an artifact built on an upstream that has since moved, without asking a registry themselves.
    r#"
CREATE TABLE upstreams_seen (
    image     TEXT PRIMARY KEY NOT NULL,
    digest    TEXT,
    error     TEXT,
    asked_ms  INTEGER NOT NULL
) WITHOUT ROWID;
"#,
];

/// Checkpoint the WAL once it holds this many pages (1 MiB of 4 KiB pages; SQLite's default is 1000).
const WAL_AUTOCHECKPOINT_PAGES: i64 = 256;

/// The schema version this binary knows.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Create the file (mode 0600) or tighten its mode, then open, check and migrate it.
pub(super) fn open(path: &Path) -> Result<Connection, StateError> {
    prepare_file(path)?;
    let sql = |op: &str| {
        let op = op.to_string();
        move |e: rusqlite::Error| StateError::sqlite(path, op, e)
    };
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let conn = Connection::open_with_flags(path, flags).map_err(sql("open"))?;
    conn.busy_timeout(super::BUSY_TIMEOUT)
        .map_err(sql("set the busy timeout"))?;

    // Read before writing anything: a newer schema must be left exactly as it is.
    let found = known_version(&conn, path)?;
    if conn
        .is_readonly(rusqlite::MAIN_DB)
        .map_err(sql("check that the file is writable"))?
    {
        return Err(StateError::ReadOnly {
            path: path.to_path_buf(),
            detail: "SQLite could open it only for reading".into(),
        });
    }

    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(sql("switch to WAL journaling"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StateError::Invalid {
            path: path.to_path_buf(),
            what: format!(
                "journal mode stayed {mode:?} instead of WAL; put the file on a local filesystem, or choose another file with --state PATH / MESHTOP_STATE"
            ),
        });
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .map_err(sql("set synchronous"))?;
    // What must survive a power loss commits durably (`StateDb::durably`); the rest (progress
    // events, the converge lock) need not, so closing a handle does not checkpoint: a command
    // the record answers would otherwise spend most of its time in the checkpoint's two fsyncs.
    // The WAL is checkpointed as it grows instead, kept small so that reading it back when the
    // next process opens the file stays cheap.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(sql("keep the WAL on close"))?;
    conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)
        .map_err(sql("set the WAL checkpoint size"))?;
    conn.pragma_update(None, "foreign_keys", true)
        .map_err(sql("enable foreign keys"))?;
    // Up to date (the usual case): no write transaction just to look again.
    if found != SCHEMA_VERSION {
        migrate(&conn, path)?;
    }
    // Only now is the file known to be a state database: tighten it (never a file SQLite refused).
    tighten(path).map_err(|source| StateError::Io {
        path: path.to_path_buf(),
        what: "set its mode to 0600",
        source,
    })?;
    tighten_sidecars(path)?;
    Ok(conn)
}

/// Open an existing state database for reading only (a user who cannot write it): nothing is
/// created, migrated, tightened or written. A schema other than this binary's is refused.
/// In a directory this user cannot write either, SQLite cannot make the `-shm` a WAL reader needs:
/// then the file is read immutable, or a copy of it with its log (`read_only.rs`).
pub(super) fn open_read_only(
    path: &Path,
) -> Result<(Connection, Option<read_only::Snapshot>), StateError> {
    let sql = |op: &'static str| move |e: rusqlite::Error| StateError::sqlite(path, op, e);
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    let in_place = Connection::open_with_flags(path, flags)
        .map_err(sql("open for reading"))
        .and_then(|conn| known_version(&conn, path).map(|found| (conn, found)));
    let (conn, snapshot, found) = match in_place {
        Ok((conn, found)) => (conn, None, found),
        Err(StateError::ReadOnly { .. }) => {
            let (conn, snapshot) = read_only::open_without_shm(path)?;
            let found = known_version(&conn, path)?;
            (conn, snapshot, found)
        }
        Err(other) => return Err(other),
    };
    conn.busy_timeout(super::BUSY_TIMEOUT)
        .map_err(sql("set the busy timeout"))?;
    if found != SCHEMA_VERSION {
        return Err(StateError::ReadOnly {
            path: path.to_path_buf(),
            detail: format!(
                "it has schema version {found} and needs migrating to {SCHEMA_VERSION}, which takes writing"
            ),
        });
    }
    Ok((conn, snapshot))
}

/// The schema version of the file; one newer than this binary knows is refused, untouched.
fn known_version(conn: &Connection, path: &Path) -> Result<i64, StateError> {
    let found: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| StateError::sqlite(path, "read the schema version", e))?;
    if found > SCHEMA_VERSION {
        return Err(StateError::TooNew {
            path: path.to_path_buf(),
            found,
            known: SCHEMA_VERSION,
        });
    }
    Ok(found)
}

fn migrate(conn: &Connection, path: &Path) -> Result<(), StateError> {
    let sql = |op: &'static str| move |e: rusqlite::Error| StateError::sqlite(path, op, e);
    let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
        .map_err(sql("begin the migration"))?;
    // Another process may have migrated between our first look and this transaction.
    let found = known_version(&tx, path)?;
    let from = usize::try_from(found).map_err(|_| StateError::Invalid {
        path: path.to_path_buf(),
        what: format!("schema version {found} is negative; move the file away, or choose another file with --state PATH"),
    })?;
    if from == MIGRATIONS.len() {
        return Ok(()); // dropping the transaction rolls back nothing
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(from) {
        tx.execute_batch(migration).map_err(|e| {
            StateError::sqlite(path, format!("migrate to schema version {}", index + 1), e)
        })?;
    }
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)
        .map_err(sql("store the schema version"))?;
    tx.commit().map_err(sql("commit the migration"))
}

/// Create the parent directories and the file with mode 0600; tighten a looser mode.
fn prepare_file(path: &Path) -> Result<(), StateError> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs::create_dir_all(parent).map_err(|source| StateError::Dir {
            path: path.to_path_buf(),
            source,
        })?;
    }
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Err(StateError::Invalid {
            path: path.to_path_buf(),
            what: "is a directory, not a database file; choose a file path with --state PATH / MESHTOP_STATE".into(),
        }),
        // An existing file is tightened once SQLite has verified it as a database (see `open`):
        // a refused `--state mesh.toml` (or a symlink to a system file) keeps its mode.
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            match OpenOptions::new().write(true).create_new(true).mode(0o600).open(path) {
                Ok(_) => Ok(()),
                // Another process created it first: fine, it is verified and tightened as any other.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
                Err(source) if source.kind() == std::io::ErrorKind::PermissionDenied => Err(StateError::ReadOnly {
                    path: path.to_path_buf(),
                    detail: format!("cannot create the file: {source}"),
                }),
                Err(source) => Err(StateError::Io { path: path.to_path_buf(), what: "create the file", source }),
            }
        }
        Err(source) => Err(StateError::Io { path: path.to_path_buf(), what: "look at the file", source }),
    }
}

/// Make a file owner-only (0600) when it is looser; follows symlinks like SQLite does.
fn tighten(path: &Path) -> std::io::Result<()> {
    let meta = fs::metadata(path)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(mode & 0o700))?;
    }
    Ok(())
}

/// SQLite gives `-wal` and `-shm` the database's mode when it creates them; tighten leftovers of an older, looser file.
fn tighten_sidecars(path: &Path) -> Result<(), StateError> {
    for suffix in ["-wal", "-shm"] {
        let mut name = path.as_os_str().to_os_string();
        name.push(suffix);
        let sidecar = Path::new(&name);
        if sidecar.exists() {
            tighten(sidecar).map_err(|source| StateError::Io {
                path: path.to_path_buf(),
                what: "set the mode of its -wal/-shm file to 0600",
                source,
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
