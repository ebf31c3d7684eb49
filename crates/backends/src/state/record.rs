//! The docker target's record (per mesh and target: module → ref and digest, when, which converge)
//! and the input manifests (opaque JSON per mesh, module and ref).

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{StateDb, StateError, now_ms};
use crate::mesh::model::{Record, RecordEntry};
use crate::mesh::operation::OperationKind;
use crate::mesh::pin::{PinChange, StampBy};

impl StateDb {
    /// The record of a docker target of a mesh (empty when nothing was stamped).
    pub fn record(&self, mesh: &str, target: &str) -> Result<Record, StateError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT module, ref, digest, manifest, signed_by FROM records WHERE mesh = ?1 AND target = ?2",
            )
            .map_err(self.err("read the record"))?;
        let rows = st
            .query_map([mesh, target], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    RecordEntry::new(r.get(1)?, r.get(2)?).with_manifest(r.get(3)?, r.get(4)?),
                ))
            })
            .and_then(|rows| rows.collect::<Result<Record, _>>())
            .map_err(self.err("read the record"))?;
        Ok(rows)
    }

    /// Stamp the record: upsert `entries`, keep the other modules, in one transaction,
    /// noting when and by which converge. Only the converge holding the mesh's lock stamps: the
    /// check is inside the same transaction, else `LockLost` and nothing is written.
    pub fn stamp_record(
        &self,
        mesh: &str,
        target: &str,
        operation_id: &str,
        entries: &Record,
    ) -> Result<(), StateError> {
        self.stamp_record_as(
            mesh,
            target,
            StampBy::new(operation_id, OperationKind::Converge),
            entries,
            &PinChange::default(),
        )
    }

    /// As [`StateDb::stamp_record`] by an operation of any kind (converge, rollback, unpin,
    /// promote); each changed entry is noted in the record's history, and the pins changed, in the
    /// same transaction.
    pub fn stamp_record_as(
        &self,
        mesh: &str,
        target: &str,
        by: StampBy<'_>,
        entries: &Record,
        pins: &PinChange,
    ) -> Result<(), StateError> {
        self.durably(|| self.upsert_record(mesh, target, by, entries, pins))
    }

    fn upsert_record(
        &self,
        mesh: &str,
        target: &str,
        by: StampBy<'_>,
        entries: &Record,
        pins: &PinChange,
    ) -> Result<(), StateError> {
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(self.err("begin stamping the record"))?;
        self.check_holds(mesh, target, by.operation_id)?;
        self.note_stamps_of_stored_record(mesh, target, by, entries)?;
        self.apply_pin_change(mesh, target, pins)?;
        let at = now_ms();
        {
            let mut st = tx
                .prepare_cached(
                    "INSERT INTO records (mesh, target, module, ref, digest, stamped_ms, operation_id, manifest, signed_by) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
                     ON CONFLICT(mesh, target, module) DO UPDATE SET ref = excluded.ref, digest = excluded.digest, \
                     stamped_ms = excluded.stamped_ms, operation_id = excluded.operation_id, \
                     manifest = excluded.manifest, signed_by = excluded.signed_by",
                )
                .map_err(self.err("stamp the record"))?;
            for (module, entry) in entries {
                st.execute(params![
                    mesh,
                    target,
                    module,
                    entry.reference,
                    entry.digest,
                    at,
                    by.operation_id,
                    entry.manifest,
                    entry.signed_by
                ])
                .map_err(self.err("stamp the record"))?;
            }
        }
        tx.commit().map_err(self.err("commit the stamped record"))
    }

    /// When and by which converge each module of the record was stamped: module → (stamped_ms, converge id).
    pub fn record_stamps(
        &self,
        mesh: &str,
        target: &str,
    ) -> Result<std::collections::BTreeMap<String, (i64, String)>, StateError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT module, stamped_ms, operation_id FROM records WHERE mesh = ?1 AND target = ?2",
            )
            .map_err(self.err("read the record"))?;
        st.query_map([mesh, target], |r| {
            Ok((r.get::<_, String>(0)?, (r.get(1)?, r.get(2)?)))
        })
        .and_then(|rows| rows.collect())
        .map_err(self.err("read the record"))
    }

    /// Forget the whole record of a target of a mesh.
    pub fn clear_record(&self, mesh: &str, target: &str) -> Result<(), StateError> {
        self.durably(|| {
            self.conn
                .execute(
                    "DELETE FROM records WHERE mesh = ?1 AND target = ?2",
                    [mesh, target],
                )
                .map_err(self.err("clear the record"))
        })?;
        Ok(())
    }

    /// Keep the input manifest of a build (replaces the manifest saved for the same ref,
    /// which then counts as the latest).
    pub fn save_manifest(
        &self,
        mesh: &str,
        module: &str,
        reference: &str,
        manifest_json: &str,
    ) -> Result<(), StateError> {
        self.durably(|| self.insert_manifest(mesh, module, reference, manifest_json))
    }

    fn insert_manifest(
        &self,
        mesh: &str,
        module: &str,
        reference: &str,
        manifest_json: &str,
    ) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO manifests (mesh, module, ref, manifest, saved_ms) VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut st| st.execute(params![mesh, module, reference, manifest_json, now_ms()]))
            .map_err(self.err("save an input manifest"))?;
        Ok(())
    }

    /// The input manifest saved for one ref of a module.
    pub fn manifest(
        &self,
        mesh: &str,
        module: &str,
        reference: &str,
    ) -> Result<Option<String>, StateError> {
        self.conn
            .prepare_cached(
                "SELECT manifest FROM manifests WHERE mesh = ?1 AND module = ?2 AND ref = ?3",
            )
            .and_then(|mut st| {
                st.query_row(params![mesh, module, reference], |r| r.get(0))
                    .optional()
            })
            .map_err(self.err("read an input manifest"))
    }

    /// The most recently saved input manifest of a module: (ref, manifest JSON).
    pub fn latest_manifest(
        &self,
        mesh: &str,
        module: &str,
    ) -> Result<Option<(String, String)>, StateError> {
        self.conn
            .prepare_cached(
                "SELECT ref, manifest FROM manifests WHERE mesh = ?1 AND module = ?2 ORDER BY rowid DESC LIMIT 1",
            )
            .and_then(|mut st| st.query_row(params![mesh, module], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(self.err("read the latest input manifest"))
    }
}
