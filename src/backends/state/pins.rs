//! Pinned modules (DESIGN.md: "pinned"): one row per pinned module of a mesh.

use std::collections::BTreeMap;

use rusqlite::params;

use super::{StateDb, StateError};
use crate::mesh::pin::Pin;

impl StateDb {
    /// Pin a module (replaces an older pin of it), durably.
    pub fn pin(&self, mesh: &str, pin: &Pin) -> Result<(), StateError> {
        self.durably(|| {
            self.conn
                .prepare_cached(
                    "INSERT OR REPLACE INTO pins (mesh, module, from_ref, from_digest, to_ref, to_digest, \
                     operation_id, host, at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
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
                        pin.at_ms
                    ])
                })
                .map_err(self.err("pin a module"))?;
            Ok(())
        })
    }

    /// Unpin a module; whether it was pinned.
    pub fn unpin(&self, mesh: &str, module: &str) -> Result<bool, StateError> {
        self.durably(|| {
            self.conn
                .execute(
                    "DELETE FROM pins WHERE mesh = ?1 AND module = ?2",
                    params![mesh, module],
                )
                .map(|n| n > 0)
                .map_err(self.err("unpin a module"))
        })
    }

    /// The pinned modules of a mesh: module → pin.
    pub fn pins(&self, mesh: &str) -> Result<BTreeMap<String, Pin>, StateError> {
        self.conn
            .prepare_cached(
                "SELECT p.module, p.from_ref, p.from_digest, p.to_ref, p.to_digest, p.operation_id, \
                 COALESCE(o.number, 0), p.host, p.at_ms FROM pins AS p \
                 LEFT JOIN operations AS o ON o.uuid = p.operation_id WHERE p.mesh = ?1",
            )
            .and_then(|mut st| {
                st.query_map([mesh], |r| {
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
                    };
                    Ok((pin.module.clone(), pin))
                })?
                .collect()
            })
            .map_err(self.err("read the pinned modules"))
    }
}
