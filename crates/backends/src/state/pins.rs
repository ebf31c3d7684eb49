//! Pinned modules (DESIGN.md: "pinned"): one row per pinned module of a target of a mesh.

use std::collections::BTreeMap;

use rusqlite::params;

use super::{StateDb, StateError};
use crate::mesh::pin::{Pin, PinChange, StampsByModule};

impl StateDb {
    /// Pin a module (replaces an older pin of it), durably.
    pub fn pin(&self, mesh: &str, target: &str, pin: &Pin) -> Result<(), StateError> {
        self.durably(|| self.insert_pin(mesh, target, pin))
    }

    /// Unpin a module; whether it was pinned.
    pub fn unpin(&self, mesh: &str, target: &str, module: &str) -> Result<bool, StateError> {
        self.durably(|| self.delete_pin(mesh, target, module))
    }

    /// Inside the caller's transaction: the pins as `change` leaves them.
    pub(super) fn apply_pin_change(
        &self,
        mesh: &str,
        target: &str,
        change: &PinChange,
    ) -> Result<(), StateError> {
        for module in &change.end {
            self.delete_pin(mesh, target, module)?;
        }
        for pin in &change.set {
            self.insert_pin(mesh, target, pin)?;
        }
        Ok(())
    }

    /// Make this file's copy of what lives on the target (its pins and the record's history) what
    /// the target said: the pins replaced, the stamps it kept that this file lacks added. Never the
    /// truth: a copy for speed and for reading offline.
    pub fn mirror_team(
        &self,
        mesh: &str,
        target: &str,
        pins: &BTreeMap<String, Pin>,
        history: &StampsByModule,
    ) -> Result<(), StateError> {
        if self.pins(mesh, target)? == *pins && !self.lacks_any(mesh, target, history)? {
            return Ok(());
        }
        self.durably(|| {
            let tx = self
                .conn
                .unchecked_transaction()
                .map_err(self.err("begin copying the target's pins"))?;
            self.conn
                .execute(
                    "DELETE FROM pins WHERE mesh = ?1 AND target = ?2",
                    [mesh, target],
                )
                .map_err(self.err("copy the target's pins"))?;
            for pin in pins.values() {
                self.insert_pin(mesh, target, pin)?;
            }
            for stamp in history.values().flatten() {
                self.insert_stamp_once(mesh, target, stamp)?;
            }
            tx.commit().map_err(self.err("commit the target's pins"))
        })
    }

    fn insert_pin(&self, mesh: &str, target: &str, pin: &Pin) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO pins (mesh, module, from_ref, from_digest, to_ref, to_digest, \
                 operation_id, host, at_ms, from_inputs, to_inputs, target) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    mesh,
                    pin.module,
                    pin.from_ref,
                    pin.from_digest,
                    pin.to_ref,
                    pin.to_digest,
                    pin.operation_id,
                    pin.host,
                    pin.at_ms,
                    pin.from_inputs,
                    pin.to_inputs,
                    target
                ])
            })
            .map_err(self.err("pin a module"))?;
        Ok(())
    }

    fn delete_pin(&self, mesh: &str, target: &str, module: &str) -> Result<bool, StateError> {
        self.conn
            .execute(
                "DELETE FROM pins WHERE mesh = ?1 AND target = ?2 AND module = ?3",
                params![mesh, target, module],
            )
            .map(|n| n > 0)
            .map_err(self.err("unpin a module"))
    }

    /// The pinned modules of a target of a mesh: module → pin.
    pub fn pins(&self, mesh: &str, target: &str) -> Result<BTreeMap<String, Pin>, StateError> {
        self.conn
            .prepare_cached(
                "SELECT p.module, p.from_ref, p.from_digest, p.to_ref, p.to_digest, p.operation_id, \
                 COALESCE(o.number, 0), p.host, p.at_ms, p.from_inputs, p.to_inputs FROM pins AS p \
                 LEFT JOIN operations AS o ON o.uuid = p.operation_id \
                 WHERE p.mesh = ?1 AND p.target = ?2",
            )
            .and_then(|mut st| {
                st.query_map([mesh, target], |r| {
                    let pin = Pin {
                        module: r.get(0)?,
                        from_ref: r.get(1)?,
                        from_digest: r.get(2)?,
                        to_ref: r.get(3)?,
                        to_digest: r.get(4)?,
                        operation_id: r.get(5)?,
                        short: r.get(6)?,
                        host: r.get(7)?,
                        at_ms: r.get(8)?,
                        from_inputs: r.get(9)?,
                        to_inputs: r.get(10)?,
                    };
                    Ok((pin.module.clone(), pin))
                })?
                .collect()
            })
            .map_err(self.err("read the pinned modules"))
    }
}
