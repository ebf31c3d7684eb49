//! The record's history: every stamp of a module's entry (from which artifact to which, by whom,
//! by which operation), and the operations' short ids, unique in a mesh (`#142`).

use rusqlite::{OptionalExtension, params};

use super::words::KindWord;
use super::{StateDb, StateError, now_ms, this_host};
use crate::mesh::model::{Record, RecordEntry};
use crate::mesh::operation::OperationKind;
use crate::mesh::pin::{Stamp, StampBy, Stamper};

const STAMP_COLUMNS: &str = "h.module, h.from_ref, h.from_digest, h.to_ref, h.to_digest, h.operation_id, \
     h.kind, o.number, h.host, h.pid, h.at_ms, h.from_target";

fn row_to_stamp(r: &rusqlite::Row<'_>) -> rusqlite::Result<Stamp> {
    Ok(Stamp {
        module: r.get(0)?,
        from_ref: r.get(1)?,
        from_digest: r.get(2)?,
        to_ref: r.get(3)?,
        to_digest: r.get(4)?,
        by: Stamper {
            operation_id: r.get(5)?,
            kind: r.get::<_, KindWord>(6)?.0,
            short: r.get(7)?,
            host: r.get(8)?,
            pid: r.get(9)?,
            at_ms: r.get(10)?,
            from_target: r.get(11)?,
        },
    })
}

impl StateDb {
    /// The short id of an operation in its mesh (`#142`), given one on first sight (on `target`).
    pub fn operation_short(
        &self,
        mesh: &str,
        target: &str,
        id: &str,
        kind: OperationKind,
    ) -> Result<i64, StateError> {
        self.begin_operation(mesh, target, kind, id)
            .map(|op| op.number)
    }

    /// Note stamps of a record kept in the state database inside the stamping transaction: the
    /// previous entry is the records table's own, read before it is overwritten.
    pub(super) fn note_stamps_of_stored_record(
        &self,
        mesh: &str,
        target: &str,
        by: StampBy<'_>,
        entries: &Record,
    ) -> Result<(), StateError> {
        let mut previous = Record::new();
        for module in entries.keys() {
            let entry = self
                .conn
                .prepare_cached(
                    "SELECT ref, digest FROM records WHERE mesh = ?1 AND target = ?2 AND module = ?3",
                )
                .and_then(|mut st| {
                    st.query_row(params![mesh, target, module], |r| {
                        Ok(RecordEntry::new(r.get(0)?, r.get(1)?))
                    })
                    .optional()
                })
                .map_err(self.err("read the record before stamping"))?;
            if let Some(entry) = entry {
                previous.insert(module.clone(), entry);
            }
        }
        self.insert_stamps(mesh, target, by, &previous, entries)
    }

    fn insert_stamps(
        &self,
        mesh: &str,
        target: &str,
        by: StampBy<'_>,
        previous: &Record,
        entries: &Record,
    ) -> Result<(), StateError> {
        self.operation_short(mesh, target, by.operation_id, by.kind)?;
        let (host, pid, at) = (this_host(), std::process::id(), now_ms());
        let mut st = self
            .conn
            .prepare_cached(
                "INSERT INTO record_history (mesh, target, module, from_ref, from_digest, to_ref, to_digest, \
                 operation_id, kind, host, pid, at_ms, from_target) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            )
            .map_err(self.err("note a stamp"))?;
        for (module, entry) in entries {
            let before = previous.get(module);
            if before == Some(entry) {
                continue;
            }
            st.execute(params![
                mesh,
                target,
                module,
                before.map(|e| e.reference.as_str()),
                before.map(|e| e.digest.as_str()),
                entry.reference,
                entry.digest,
                by.operation_id,
                KindWord(by.kind),
                host,
                pid,
                at,
                by.from_target
            ])
            .map_err(self.err("note a stamp"))?;
        }
        Ok(())
    }

    /// Add a stamp made elsewhere (copied from the target) unless this file has it already.
    pub(super) fn insert_stamp_once(
        &self,
        mesh: &str,
        target: &str,
        stamp: &Stamp,
    ) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT INTO record_history (mesh, module, from_ref, from_digest, to_ref, to_digest, \
                 operation_id, kind, host, pid, at_ms, target, from_target) \
                 SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13 WHERE NOT EXISTS \
                 (SELECT 1 FROM record_history WHERE mesh = ?1 AND target = ?12 AND module = ?2 \
                  AND operation_id = ?7 AND to_digest = ?6)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    mesh,
                    stamp.module,
                    stamp.from_ref,
                    stamp.from_digest,
                    stamp.to_ref,
                    stamp.to_digest,
                    stamp.by.operation_id,
                    KindWord(stamp.by.kind),
                    stamp.by.host,
                    stamp.by.pid,
                    stamp.by.at_ms,
                    target,
                    stamp.by.from_target
                ])
            })
            .map_err(self.err("copy a stamp of the target's history"))?;
        Ok(())
    }

    /// Whether the target's history holds a stamp this file lacks.
    pub(super) fn lacks_any(
        &self,
        mesh: &str,
        target: &str,
        history: &crate::mesh::pin::StampsByModule,
    ) -> Result<bool, StateError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT 1 FROM record_history WHERE mesh = ?1 AND target = ?5 AND module = ?2 \
                 AND operation_id = ?3 AND to_digest = ?4",
            )
            .map_err(self.err("read the record's history"))?;
        for stamp in history.values().flatten() {
            let found = st
                .exists(params![
                    mesh,
                    stamp.module,
                    stamp.by.operation_id,
                    stamp.to_digest,
                    target
                ])
                .map_err(self.err("read the record's history"))?;
            if !found {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// A module's stamps on a target, newest first (at most `limit`).
    pub fn stamps(
        &self,
        mesh: &str,
        target: &str,
        module: &str,
        limit: usize,
    ) -> Result<Vec<Stamp>, StateError> {
        let sql = format!(
            "SELECT {STAMP_COLUMNS} FROM record_history AS h \
             LEFT JOIN operations AS o ON o.uuid = h.operation_id \
             WHERE h.mesh = ?1 AND h.target = ?2 AND h.module = ?3 \
             ORDER BY h.at_ms DESC, h.id DESC LIMIT ?4"
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn
            .prepare_cached(&sql)
            .and_then(|mut st| {
                st.query_map(params![mesh, target, module, limit], row_to_stamp)?
                    .collect()
            })
            .map_err(self.err("read the record's history"))
    }

    /// Every artifact any stamp of a target of the mesh named (from or to), for the record's
    /// history view.
    pub fn stamped_digests(&self, mesh: &str, target: &str) -> Result<Vec<String>, StateError> {
        self.conn
            .prepare_cached(
                "SELECT to_digest FROM record_history WHERE mesh = ?1 AND target = ?2 UNION \
                 SELECT from_digest FROM record_history WHERE mesh = ?1 AND target = ?2 \
                 AND from_digest IS NOT NULL",
            )
            .and_then(|mut st| st.query_map([mesh, target], |r| r.get(0))?.collect())
            .map_err(self.err("read the record's history"))
    }
}
