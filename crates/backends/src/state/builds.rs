//! Build records: one row per build attempt, keyed by its correlation id.
//! Idempotent on the id; a finished row never returns to running.

use std::collections::BTreeMap;

use rusqlite::types::ToSql;
use rusqlite::{OptionalExtension, Row, params};

use super::words::StatusWord;
use super::{StateDb, StateError, now_ms};
pub use crate::mesh::builds::{BuildRow, BuildStatus};

/// A build attempt as it starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBuild {
    /// The correlation id (a UUID v7 is a good one: it sorts by time).
    pub id: String,
    pub mesh: String,
    /// None when the build never learned its module; `repository` then says what was built.
    pub module: Option<String>,
    pub repository: String,
    pub commit: Option<String>,
    pub dirty: bool,
    pub base_module: Option<String>,
    pub base_digest: Option<String>,
    /// The ref (tag) the build produces.
    pub reference: Option<String>,
    /// The platform set, e.g. `linux/amd64,linux/arm64` (empty = the daemon's own).
    pub platforms: String,
    pub forced: bool,
    pub why: String,
    /// The host that ran the build.
    pub host: String,
    pub started_ms: i64,
    pub operation_id: Option<String>,
    /// The pool's builder it runs on (None: the local daemon of a mesh without builders).
    pub builder: Option<String>,
}

/// How a build attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildEnd {
    /// Succeeded, Failed, Cancelled or Stopped.
    pub status: BuildStatus,
    /// The artifact (image id) of a succeeded build.
    pub digest: Option<String>,
    pub error: Option<String>,
    /// The last lines of the build output.
    pub log_tail: Option<String>,
    pub ended_ms: i64,
}

/// Which builds to list: newest first, `limit` of them, strictly older than the `before` cursor.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BuildQuery {
    pub mesh: String,
    pub module: Option<String>,
    /// Only `failed` builds.
    pub failed_only: bool,
    pub limit: usize,
    /// Keyset cursor: `(started_ms, id)` of the last row of the previous page.
    pub before: Option<(i64, String)>,
}

impl BuildQuery {
    /// The cursor that continues after `page` (None when the page was not full, i.e. the end).
    pub fn next_cursor(&self, page: &[BuildRow]) -> Option<(i64, String)> {
        if page.len() < self.limit {
            return None;
        }
        page.last().map(|row| (row.started_ms, row.id.clone()))
    }
}

/// The columns of `builds` in the order [`row_to_build`] reads them.
macro_rules! columns {
    () => {
        "id, mesh, module, repository, git_commit, dirty, base_module, base_digest, ref, digest, \
         platforms, status, forced, why, host, started_ms, ended_ms, error, log_tail, published_ref, \
         published_digest, operation_id, published_ms, \
         (SELECT number FROM operations WHERE operations.uuid = builds.operation_id) AS operation, \
         builder, push_ms, daemon_ms"
    };
}
const COLUMNS: &str = columns!();

fn row_to_build(row: &Row<'_>) -> rusqlite::Result<BuildRow> {
    Ok(BuildRow {
        id: row.get(0)?,
        mesh: row.get(1)?,
        module: row.get(2)?,
        repository: row.get(3)?,
        commit: row.get(4)?,
        dirty: row.get(5)?,
        base_module: row.get(6)?,
        base_digest: row.get(7)?,
        reference: row.get(8)?,
        digest: row.get(9)?,
        platforms: row.get(10)?,
        status: row.get::<_, StatusWord>(11)?.0,
        forced: row.get(12)?,
        why: row.get(13)?,
        host: row.get(14)?,
        started_ms: row.get(15)?,
        ended_ms: row.get(16)?,
        error: row.get(17)?,
        log_tail: row.get(18)?,
        published_ref: row.get(19)?,
        published_digest: row.get(20)?,
        operation_id: row.get(21)?,
        published_ms: row.get(22)?,
        operation: row.get(23)?,
        builder: row.get(24)?,
        push_ms: row.get(25)?,
        daemon_ms: row.get(26)?,
        process_gone: false,
    })
}

/// The SQL of [`StateDb::builds`] for a query's shape (public for EXPLAIN QUERY PLAN in tests).
/// Parameters: ?1 mesh, ?2 module, ?3 cursor started_ms, ?4 cursor id, ?5 limit.
pub fn builds_sql(with_module: bool, failed_only: bool, with_cursor: bool) -> String {
    let mut sql = format!("SELECT {COLUMNS} FROM builds WHERE mesh = ?1");
    if with_module {
        sql.push_str(" AND module = ?2");
    }
    if failed_only {
        // A literal, so that the partial `failed` indexes apply.
        sql.push_str(" AND status = 'failed'");
    }
    if with_cursor {
        sql.push_str(" AND (started_ms, id) < (?3, ?4)");
    }
    sql.push_str(" ORDER BY started_ms DESC, id DESC LIMIT ?5");
    sql
}

/// The SQL of [`StateDb::build_by_digest`]. Parameters: ?1 mesh, ?2 digest.
pub const BUILD_BY_DIGEST_SQL: &str = concat!(
    "SELECT * FROM (SELECT ",
    columns!(),
    " FROM builds WHERE digest = ?2 AND mesh = ?1 UNION SELECT ",
    columns!(),
    " FROM builds WHERE published_digest = ?2 AND mesh = ?1) \
     ORDER BY status = 'succeeded' DESC, started_ms DESC, id DESC LIMIT 1"
);

/// The SQL of [`StateDb::last_builds`]: hops from module to module along the index, then takes
/// each module's newest row — O(modules · log rows). Parameter: ?1 mesh.
pub const LAST_BUILDS_SQL: &str = concat!(
    "WITH RECURSIVE mods(m) AS (\
       SELECT (SELECT min(module) FROM builds WHERE mesh = ?1 AND module IS NOT NULL) \
       UNION ALL \
       SELECT (SELECT min(module) FROM builds WHERE mesh = ?1 AND module > mods.m) FROM mods WHERE mods.m IS NOT NULL) \
     SELECT ",
    columns!(),
    " FROM mods JOIN builds ON builds.id = (\
       SELECT b2.id FROM builds AS b2 WHERE b2.mesh = ?1 AND b2.module = mods.m \
       ORDER BY b2.started_ms DESC, b2.id DESC LIMIT 1) \
     WHERE mods.m IS NOT NULL"
);

impl StateDb {
    /// Record that a build started. Idempotent: a second start with the same id changes nothing.
    pub fn start_build(&self, b: &NewBuild) -> Result<(), StateError> {
        self.durably(|| self.insert_build(b))
    }

    fn insert_build(&self, b: &NewBuild) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT INTO builds (id, mesh, module, repository, git_commit, dirty, base_module, base_digest, ref, \
                 platforms, status, forced, why, host, started_ms, operation_id, builder) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, 'running', ?11, ?12, ?13, ?14, ?15, ?16) \
                 ON CONFLICT(id) DO NOTHING",
            )
            .and_then(|mut st| {
                st.execute(params![
                    b.id,
                    b.mesh,
                    b.module,
                    b.repository,
                    b.commit,
                    b.dirty,
                    b.base_module,
                    b.base_digest,
                    b.reference,
                    b.platforms,
                    b.forced,
                    b.why,
                    b.host,
                    b.started_ms,
                    b.operation_id,
                    b.builder
                ])
            })
            .map_err(self.err("record the start of a build"))?;
        Ok(())
    }

    /// Record how a build ended. Only a `running` row changes; returns whether this call changed it
    /// (false: already finished — the first result stands — or never started).
    pub fn finish_build(&self, id: &str, end: &BuildEnd) -> Result<bool, StateError> {
        if !end.status.is_finished() {
            return Err(self.invalid(format!(
                "build {id} cannot finish as `running`; finish it as succeeded, failed, cancelled or stopped"
            )));
        }
        let changed = self.durably(|| {
            self.conn
                .prepare_cached(
                    "UPDATE builds SET status = ?2, digest = coalesce(?3, digest), error = ?4, log_tail = ?5, ended_ms = ?6 \
                     WHERE id = ?1 AND status = 'running'",
                )
                .and_then(|mut st| st.execute(params![id, StatusWord(end.status), end.digest, end.error, end.log_tail, end.ended_ms]))
                .map_err(self.err("record the end of a build"))
        })?;
        Ok(changed == 1)
    }

    /// Record what was published for a build (pushed ref and registry digest), and when.
    pub fn set_published(
        &self,
        id: &str,
        published_ref: &str,
        published_digest: &str,
    ) -> Result<(), StateError> {
        self.update_build(
            id,
            "UPDATE builds SET published_ref = ?2, published_digest = ?3, published_ms = ?4 \
             WHERE id = ?1",
            params![id, published_ref, published_digest, now_ms()],
            "record what a build published",
        )
    }

    /// Record how long a build's hand-over push to the registry took (kept apart from its build time).
    pub fn set_push_time(&self, id: &str, push_ms: i64) -> Result<(), StateError> {
        self.update_build(
            id,
            "UPDATE builds SET push_ms = ?2 WHERE id = ?1",
            params![id, push_ms],
            "record how long a build's push took",
        )
    }

    /// Record how long the builder's daemon worked on a build: the rest of its time is meshtop's.
    pub fn set_daemon_time(&self, id: &str, daemon_ms: i64) -> Result<(), StateError> {
        self.update_build(
            id,
            "UPDATE builds SET daemon_ms = ?2 WHERE id = ?1",
            params![id, daemon_ms],
            "record how long a build's daemon worked",
        )
    }

    /// Name the builder(s) build `id` runs on, once known (a multi-platform build's platforms are
    /// each given a builder when one has a slot for it).
    pub fn set_builder(&self, id: &str, builder: &str) -> Result<(), StateError> {
        self.update_build(
            id,
            "UPDATE builds SET builder = ?2 WHERE id = ?1",
            params![id, builder],
            "record a build's builders",
        )
    }

    /// One durable UPDATE of build `id`'s row; a build nobody recorded is an error, not a no-op.
    fn update_build(
        &self,
        id: &str,
        sql: &str,
        values: &[&dyn ToSql],
        what: &'static str,
    ) -> Result<(), StateError> {
        let changed = self.durably(|| self.conn.execute(sql, values).map_err(self.err(what)))?;
        if changed == 0 {
            return Err(StateError::UnknownBuild {
                path: self.path.clone(),
                id: id.to_string(),
            });
        }
        Ok(())
    }

    /// Mark every still-running build of one converge `Failed`, `Cancelled` or `Stopped` with `error`;
    /// returns how many rows changed.
    pub fn fail_running(
        &self,
        mesh: &str,
        operation_id: &str,
        status: BuildStatus,
        error: &str,
    ) -> Result<usize, StateError> {
        if !matches!(
            status,
            BuildStatus::Failed | BuildStatus::Cancelled | BuildStatus::Stopped
        ) {
            return Err(self.invalid(format!(
                "running builds of converge {operation_id} can only be marked failed, cancelled or stopped, not {status}"
            )));
        }
        self.durably(|| self.end_running(mesh, operation_id, status, error))
    }

    /// End every still-running build of one converge as `status` with `error`, inside the
    /// caller's transaction (if any); returns how many rows changed.
    pub(super) fn end_running(
        &self,
        mesh: &str,
        operation_id: &str,
        status: BuildStatus,
        error: &str,
    ) -> Result<usize, StateError> {
        self.conn
            .prepare_cached(
                "UPDATE builds SET status = ?3, error = ?4, ended_ms = ?5 \
                 WHERE mesh = ?1 AND operation_id = ?2 AND status = 'running'",
            )
            .and_then(|mut st| {
                st.execute(params![
                    mesh,
                    operation_id,
                    StatusWord(status),
                    error,
                    now_ms()
                ])
            })
            .map_err(self.err("mark the running builds of a converge"))
    }

    /// Close the build rows left `running` by a converge that is certainly gone — it holds no
    /// lock, or its lock says it ran on this host and its process no longer exists (killed, or it
    /// exited unable to write their end: a full disk) — as `stopped`, saying why; returns how many.
    /// A read first: the usual open, with nothing running, writes nothing. A holder whose heartbeat
    /// is only stale is left to the take-over (which moves the lock in the same transaction): it
    /// may be frozen and wake up to write the build's real end. Reads show such rows as
    /// `stopped (process gone)` meanwhile ([`BuildRow::process_gone`]).
    pub fn close_orphans(&self) -> Result<usize, StateError> {
        let running: Vec<(String, Option<String>)> = self
            .conn
            .prepare_cached(
                "SELECT DISTINCT mesh, operation_id FROM builds WHERE status = 'running'",
            )
            .and_then(|mut st| {
                st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<Result<_, _>>()
            })
            .map_err(self.err("look for builds left running"))?;
        let mut gone = Vec::new();
        for (mesh, operation_id) in running {
            let holder = match &operation_id {
                Some(id) => self.operation_holder(&mesh, id)?,
                None => None,
            };
            let held = holder.is_some_and(|h| !h.process_gone());
            if !held {
                gone.push((mesh, operation_id));
            }
        }
        if gone.is_empty() {
            return Ok(0);
        }
        self.durably(|| {
            let tx = self
                .conn
                .unchecked_transaction()
                .map_err(self.err("close builds left running"))?;
            let mut closed = 0;
            for (mesh, operation_id) in &gone {
                closed += tx
                    .execute(
                        "UPDATE builds SET status = 'stopped', ended_ms = ?3, error = 'process gone: converge ' || \
                         coalesce(operation_id, '?') || ' ended without recording the end of this build \
                         (its process was killed, or its record could not be written, e.g. a full disk); \
                         nothing was stamped for it' \
                         WHERE mesh = ?1 AND operation_id IS ?2 AND status = 'running'",
                        params![mesh, operation_id, now_ms()],
                    )
                    .map_err(self.err("close builds left running"))?;
            }
            tx.commit().map_err(self.err("close builds left running"))?;
            Ok(closed)
        })
    }

    /// One build by correlation id.
    pub fn build(&self, id: &str) -> Result<Option<BuildRow>, StateError> {
        let row = self
            .conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM builds WHERE id = ?1"),
                [id],
                row_to_build,
            )
            .optional()
            .map_err(self.err("read a build"))?;
        Ok(self.with_gone(row.into_iter().collect())?.pop())
    }

    /// Mark the `running` rows whose converge is gone (derived, nothing is written): it holds no
    /// lock of its mesh, or it does and [`super::Holder::is_dead`] (stale heartbeat, or its
    /// process gone on this host). Asks the lock only when a row is running.
    fn with_gone(&self, mut rows: Vec<BuildRow>) -> Result<Vec<BuildRow>, StateError> {
        let now = now_ms();
        let mut holders = BTreeMap::new();
        for row in rows.iter_mut().filter(|r| r.status == BuildStatus::Running) {
            let Some(operation_id) = row.operation_id.clone() else {
                row.process_gone = true;
                continue;
            };
            let key = (row.mesh.clone(), operation_id);
            if !holders.contains_key(&key) {
                let holder = self.operation_holder(&key.0, &key.1)?;
                holders.insert(key.clone(), holder);
            }
            let alive = holders
                .get(&key)
                .and_then(Option::as_ref)
                .is_some_and(|h| !h.is_dead(now));
            row.process_gone = !alive;
        }
        Ok(rows)
    }

    /// Builds of a mesh (or of one module), newest first, one page.
    pub fn builds(&self, q: &BuildQuery) -> Result<Vec<BuildRow>, StateError> {
        let sql = builds_sql(q.module.is_some(), q.failed_only, q.before.is_some());
        let (cursor_ms, cursor_id) = match &q.before {
            Some((ms, id)) => (Some(*ms), Some(id.as_str())),
            None => (None, None),
        };
        let limit = i64::try_from(q.limit).unwrap_or(i64::MAX);
        let mut st = self
            .conn
            .prepare_cached(&sql)
            .map_err(self.err("list builds"))?;
        let rows = st
            .query_map(
                params![q.mesh, q.module, cursor_ms, cursor_id, limit],
                row_to_build,
            )
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(self.err("list builds"))?;
        self.with_gone(rows)
    }

    /// How many builds a mesh (or one module of it) has.
    pub fn count_builds(&self, mesh: &str, module: Option<&str>) -> Result<u64, StateError> {
        let count: i64 = match module {
            Some(module) => self.conn.query_row(
                "SELECT count(*) FROM builds WHERE mesh = ?1 AND module = ?2",
                params![mesh, module],
                |r| r.get(0),
            ),
            None => {
                self.conn
                    .query_row("SELECT count(*) FROM builds WHERE mesh = ?1", [mesh], |r| {
                        r.get(0)
                    })
            }
        }
        .map_err(self.err("count builds"))?;
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// The build that made an artifact: matches the artifact digest or the published digest;
    /// a succeeded build first, then the newest.
    pub fn build_by_digest(
        &self,
        mesh: &str,
        digest: &str,
    ) -> Result<Option<BuildRow>, StateError> {
        let mut st = self
            .conn
            .prepare_cached(BUILD_BY_DIGEST_SQL)
            .map_err(self.err("find a build by digest"))?;
        let row = st
            .query_row(params![mesh, digest], row_to_build)
            .optional()
            .map_err(self.err("find a build by digest"))?;
        Ok(self.with_gone(row.into_iter().collect())?.pop())
    }

    /// The newest build of every module of a mesh (builds without a module are left out).
    pub fn last_builds(&self, mesh: &str) -> Result<BTreeMap<String, BuildRow>, StateError> {
        let mut st = self
            .conn
            .prepare_cached(LAST_BUILDS_SQL)
            .map_err(self.err("read the last builds"))?;
        let rows = st
            .query_map([mesh], row_to_build)
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(self.err("read the last builds"))?;
        Ok(self
            .with_gone(rows)?
            .into_iter()
            .filter_map(|row| row.module.clone().map(|m| (m, row)))
            .collect())
    }
}
