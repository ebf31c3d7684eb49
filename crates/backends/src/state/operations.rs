//! Operations (converge, send, force, rollback, gc…): each gets a short id unique within its mesh,
//! a number a person can say aloud (`#142`), beside the full uuid kept for correlation.
//!
//! ```text
//! let id = history.begin_operation("demo", "default", OperationKind::Converge, &uuid)?; // OperationId { number: 142, .. }
//! println!("{id}"); // #142
//! ```

use rusqlite::{OptionalExtension, params};

use super::words::KindWord;
use super::{StateDb, StateError, now_ms};
use crate::mesh::operation::OperationKind;
pub use crate::mesh::progress::OperationId;

impl StateDb {
    /// Give the operation `uuid` of `mesh`, acting on `target`, the next short id of the mesh (1,
    /// 2, …: one count for every target of the mesh, so `#142` names one operation). Idempotent on
    /// the uuid: beginning it again answers the number it already has. One statement, so two
    /// processes beginning operations at once never share a number.
    pub fn begin_operation(
        &self,
        mesh: &str,
        target: &str,
        kind: OperationKind,
        uuid: &str,
    ) -> Result<OperationId, StateError> {
        self.conn
            .prepare_cached(
                "INSERT INTO operations (mesh, number, uuid, kind, started_ms, target) \
                 SELECT ?1, COALESCE(MAX(number), 0) + 1, ?2, ?3, ?4, ?5 FROM operations WHERE mesh = ?1 \
                 ON CONFLICT (uuid) DO NOTHING",
            )
            .and_then(|mut st| st.execute(params![mesh, uuid, KindWord(kind), now_ms(), target]))
            .map_err(self.err("begin an operation"))?;
        self.operation(uuid)?.ok_or_else(|| StateError::Invalid {
            path: self.path.clone(),
            what: format!("operation {uuid} was not recorded"),
        })
    }

    /// The short id of an operation, when it was begun.
    pub fn operation(&self, uuid: &str) -> Result<Option<OperationId>, StateError> {
        self.conn
            .prepare_cached("SELECT number, uuid, kind FROM operations WHERE uuid = ?1")
            .and_then(|mut st| {
                st.query_row([uuid], |r| {
                    Ok(OperationId {
                        number: r.get(0)?,
                        uuid: r.get(1)?,
                        kind: r.get::<_, KindWord>(2)?.0,
                    })
                })
                .optional()
            })
            .map_err(self.err("read an operation"))
    }
}
