//! Converge progress events (another process follows a converge live) and sends (roll-outs).

use rusqlite::{OptionalExtension, Row, params};
use serde::{Deserialize, Serialize};

use super::words::KindWord;
use super::{StateDb, StateError, now_ms};
pub use crate::mesh::progress::EventRow;
use crate::mesh::progress::{Payload, Step};

/// The oldest and newest event ids. Two subqueries: SQLite reads one end of the rowid tree for
/// a lone min() or max(), but scans the whole table for both in one select.
pub const EVENT_ID_RANGE_SQL: &str =
    "SELECT (SELECT min(id) FROM events), (SELECT max(id) FROM events)";

/// Progress events kept in the state database (about a thousand converges of a 50-module mesh).
pub const KEEP_EVENTS: i64 = 50_000;
/// Old events are forgotten this many at a time.
pub const PRUNE_BATCH: i64 = 5_000;

/// A progress event as a converge emits it; its time is taken when it is appended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    pub mesh: String,
    pub operation_id: String,
    /// What happened, e.g. `tier`, `decided`, `build`, `output`, `built`, `failed`, `stamped`, `send`.
    pub kind: String,
    pub module: Option<String>,
    pub text: String,
    /// The step's data, stored as JSON beside its text (schema 11); what followers fold.
    pub payload: Option<Payload>,
}

/// One send: a machine moved (or failed to move) to an artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendRow {
    pub mesh: String,
    /// The target of the mesh the machine runs on.
    #[serde(default = "default_target")]
    pub target: String,
    pub module: String,
    pub machine: String,
    pub from_digest: String,
    pub to_ref: String,
    pub to_digest: String,
    /// `moved`, or `failed: <why>`.
    pub outcome: String,
    pub at_ms: i64,
    pub operation_id: Option<String>,
}

fn default_target() -> String {
    crate::mesh::model::DEFAULT_TARGET.to_string()
}

pub(super) fn row_to_event(r: &Row<'_>) -> rusqlite::Result<EventRow> {
    Ok(EventRow {
        id: r.get(0)?,
        at_ms: r.get(1)?,
        mesh: r.get(2)?,
        operation_id: r.get(3)?,
        step: Step::parse(&r.get::<_, String>(4)?),
        module: r.get(5)?,
        text: r.get(6)?,
        operation: r.get(7)?,
        operation_kind: r.get::<_, Option<KindWord>>(8)?.map(|k| k.0),
        payload: payload_of(r.get::<_, Option<String>>(9)?.as_deref()),
    })
}

/// A stored payload read back; None for a row without one (written before schema 11) or one this
/// meshtop cannot read (a newer one wrote a kind it does not know): the row is still shown.
fn payload_of(json: Option<&str>) -> Option<Payload> {
    serde_json::from_str(json?).ok()
}

fn row_to_send(r: &Row<'_>) -> rusqlite::Result<SendRow> {
    Ok(SendRow {
        mesh: r.get(0)?,
        module: r.get(1)?,
        machine: r.get(2)?,
        from_digest: r.get(3)?,
        to_ref: r.get(4)?,
        to_digest: r.get(5)?,
        outcome: r.get(6)?,
        at_ms: r.get(7)?,
        operation_id: r.get(8)?,
        target: r.get(9)?,
    })
}

impl StateDb {
    /// Append a progress event; returns its id.
    pub fn append_event(&self, e: &NewEvent) -> Result<i64, StateError> {
        self.insert_events(std::slice::from_ref(e))?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Several events in one transaction (a tier's decisions: one write, not one per module).
    pub fn append_events(&self, events: &[NewEvent]) -> Result<(), StateError> {
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(self.err("begin writing converge events"))?;
        self.insert_events(events)?;
        tx.commit().map_err(self.err("commit converge events"))
    }

    /// Forget the oldest progress events once more than [`KEEP_EVENTS`] + [`PRUNE_BATCH`] are
    /// kept: the newest `KEEP_EVENTS` stay. Deleting in batches keeps a converge that finishes
    /// without pruning (nearly all of them) as cheap as before. Build records, the record and sends
    /// are never pruned. Runs inside the caller's transaction; returns how many events went.
    pub(super) fn prune_events(&self) -> Result<usize, StateError> {
        let (oldest, newest): (Option<i64>, Option<i64>) = self
            .conn
            .prepare_cached(EVENT_ID_RANGE_SQL)
            .and_then(|mut st| st.query_row([], |r| Ok((r.get(0)?, r.get(1)?))))
            .map_err(self.err("count the progress events"))?;
        let (Some(oldest), Some(newest)) = (oldest, newest) else {
            return Ok(0);
        };
        // Ids only grow, so the ids below `newest - KEEP_EVENTS` are the oldest events.
        let cutoff = newest.saturating_sub(KEEP_EVENTS);
        if cutoff.saturating_sub(oldest) < PRUNE_BATCH {
            return Ok(0);
        }
        let pruned = self
            .conn
            .prepare_cached("DELETE FROM events WHERE id <= ?1")
            .and_then(|mut st| st.execute([cutoff]))
            .map_err(self.err("forget old progress events"))?;
        // An operation's timeline goes with its events.
        self.prune_timelines()?;
        Ok(pruned)
    }

    /// Insert events inside the caller's transaction.
    pub(super) fn insert_events(&self, events: &[NewEvent]) -> Result<(), StateError> {
        for e in events {
            self.conn
                .prepare_cached(
                    "INSERT INTO events (at_ms, mesh, operation_id, kind, module, text, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .and_then(|mut st| {
                    let payload = e.payload.as_ref().and_then(|p| serde_json::to_string(p).ok());
                    st.execute(params![now_ms(), e.mesh, e.operation_id, e.kind, e.module, e.text, payload])
                })
                .map_err(self.err("append a converge event"))?;
        }
        Ok(())
    }

    /// Events of a mesh with an id above `after_id`, oldest first, at most `limit`.
    pub fn events_after(
        &self,
        mesh: &str,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StateError> {
        self.events_after_on(mesh, None, after_id, limit)
    }

    /// As [`StateDb::events_after`], of the operations on one target of the mesh when `target`
    /// says which (an operation's target is its row's in `operations`).
    pub fn events_after_on(
        &self,
        mesh: &str,
        target: Option<&str>,
        after_id: i64,
        limit: usize,
    ) -> Result<Vec<EventRow>, StateError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn
            .prepare_cached(
                "SELECT e.id, e.at_ms, e.mesh, e.operation_id, e.kind, e.module, e.text, o.number, o.kind, e.payload \
                 FROM events e LEFT JOIN operations o ON o.uuid = e.operation_id \
                 WHERE e.mesh = ?1 AND e.id > ?2 AND (?4 IS NULL OR COALESCE(o.target, 'default') = ?4) \
                 ORDER BY e.id LIMIT ?3",
            )
            .and_then(|mut st| {
                st.query_map(params![mesh, after_id, limit, target], row_to_event)?
                    .collect()
            })
            .map_err(self.err("read converge events"))
    }

    /// The newest `limit` events of a mesh, oldest first (where a follower starts).
    pub fn events_tail(&self, mesh: &str, limit: usize) -> Result<Vec<EventRow>, StateError> {
        self.events_tail_on(mesh, None, limit)
    }

    /// As [`StateDb::events_tail`], of the operations on one target when `target` says which.
    pub fn events_tail_on(
        &self,
        mesh: &str,
        target: Option<&str>,
        limit: usize,
    ) -> Result<Vec<EventRow>, StateError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut rows: Vec<EventRow> = self
            .conn
            .prepare_cached(
                "SELECT e.id, e.at_ms, e.mesh, e.operation_id, e.kind, e.module, e.text, o.number, o.kind, e.payload \
                 FROM events e LEFT JOIN operations o ON o.uuid = e.operation_id \
                 WHERE e.mesh = ?1 AND (?3 IS NULL OR COALESCE(o.target, 'default') = ?3) \
                 ORDER BY e.id DESC LIMIT ?2",
            )
            .and_then(|mut st| {
                st.query_map(params![mesh, limit, target], row_to_event)?
                    .collect()
            })
            .map_err(self.err("read converge events"))?;
        rows.reverse();
        Ok(rows)
    }

    /// The converge that emitted the mesh's newest event.
    pub fn latest_operation(&self, mesh: &str) -> Result<Option<String>, StateError> {
        self.latest_operation_on(mesh, None)
    }

    /// As [`StateDb::latest_operation`], of the operations on one target when `target` says which.
    pub fn latest_operation_on(
        &self,
        mesh: &str,
        target: Option<&str>,
    ) -> Result<Option<String>, StateError> {
        self.conn
            .prepare_cached(
                "SELECT e.operation_id FROM events e LEFT JOIN operations o ON o.uuid = e.operation_id \
                 WHERE e.mesh = ?1 AND (?2 IS NULL OR COALESCE(o.target, 'default') = ?2) \
                 ORDER BY e.id DESC LIMIT 1",
            )
            .and_then(|mut st| st.query_row(params![mesh, target], |r| r.get(0)).optional())
            .map_err(self.err("read the latest converge"))
    }

    /// Record one send. A send made by a converge (or a send operation) holding the mesh is
    /// recorded only while it still holds it (checked in the same transaction), else `LockLost`.
    pub fn record_send(&self, s: &SendRow) -> Result<(), StateError> {
        self.durably(|| {
            let tx = rusqlite::Transaction::new_unchecked(
                &self.conn,
                rusqlite::TransactionBehavior::Immediate,
            )
            .map_err(self.err("begin recording a send"))?;
            if let Some(operation_id) = &s.operation_id {
                self.check_holds(&s.mesh, &s.target, operation_id)?;
            }
            self.insert_send(s)?;
            tx.commit().map_err(self.err("commit a send"))
        })
    }

    fn insert_send(&self, s: &SendRow) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT INTO sends (mesh, module, machine, from_digest, to_ref, to_digest, outcome, at_ms, operation_id, target) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    s.mesh,
                    s.module,
                    s.machine,
                    s.from_digest,
                    s.to_ref,
                    s.to_digest,
                    s.outcome,
                    s.at_ms,
                    s.operation_id,
                    s.target
                ])
            })
            .map_err(self.err("record a send"))?;
        Ok(())
    }

    /// Sends of a mesh (or one module of it), newest first, at most `limit`.
    pub fn sends(
        &self,
        mesh: &str,
        module: Option<&str>,
        limit: usize,
    ) -> Result<Vec<SendRow>, StateError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let columns = "mesh, module, machine, from_digest, to_ref, to_digest, outcome, at_ms, operation_id, target";
        let sql = match module {
            Some(_) => format!(
                "SELECT {columns} FROM sends WHERE mesh = ?1 AND module = ?2 ORDER BY at_ms DESC, id DESC LIMIT ?3"
            ),
            None => format!(
                "SELECT {columns} FROM sends WHERE mesh = ?1 ORDER BY at_ms DESC, id DESC LIMIT ?3"
            ),
        };
        self.conn
            .prepare_cached(&sql)
            .and_then(|mut st| {
                st.query_map(params![mesh, module, limit], row_to_send)?
                    .collect()
            })
            .map_err(self.err("read sends"))
    }
}
