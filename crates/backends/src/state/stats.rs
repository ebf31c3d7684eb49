//! The stats of a mesh (`meshtop stats` and the dashboard's stats view) from its build records and
//! its newest progress events: one read, computed by `crate::mesh::stats`.

use super::{BuildQuery, StateDb, StateError};
use crate::mesh::stats::{self, EVENTS_READ, Stats};

impl StateDb {
    /// Per module builds, failures, median build time, decisions and the time the skips saved, over
    /// the last `since_ms` before `now_ms` (None: everything kept).
    pub fn stats(
        &self,
        mesh: &str,
        modules: &[String],
        since_ms: Option<i64>,
        now_ms: i64,
    ) -> Result<Stats, StateError> {
        let rows = self.builds(&BuildQuery {
            mesh: mesh.to_string(),
            limit: 1_000_000,
            ..BuildQuery::default()
        })?;
        let events = self.events_tail(mesh, EVENTS_READ)?;
        Ok(stats::compute(
            mesh, modules, &rows, &events, since_ms, now_ms,
        ))
    }
}
