//! Each operation's timeline (schema 15): written once when the operation ends, read by `trace`,
//! the dashboard's timeline view and `converge`'s summary; forgotten with the operation's events.

use std::collections::BTreeMap;

use rusqlite::{OptionalExtension, params};

use super::words::KindWord;
use super::{EventRow, StateDb, StateError, now_ms};
use crate::mesh::progress::OperationId;
use crate::mesh::stats::median;
use crate::mesh::timeline::Timeline;

impl StateDb {
    /// Keep `timeline` as the operation's (written again: the newer one stands).
    pub fn save_timeline(&self, mesh: &str, timeline: &Timeline) -> Result<(), StateError> {
        let json = serde_json::to_string(timeline)
            .map_err(|e| self.invalid(format!("cannot write a timeline as JSON: {e}")))?;
        self.conn
            .prepare_cached(
                "INSERT INTO timelines (operation_id, mesh, saved_ms, timeline) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (operation_id) DO UPDATE SET saved_ms = ?3, timeline = ?4",
            )
            .and_then(|mut st| {
                st.execute(params![timeline.operation_id, mesh, now_ms(), json])
            })
            .map_err(self.err("keep an operation's timeline"))?;
        Ok(())
    }

    /// The timeline kept for the operation `operation_id`, if one was. A row this meshtop cannot
    /// read (a newer one wrote it) is an error naming the operation.
    pub fn timeline(&self, operation_id: &str) -> Result<Option<Timeline>, StateError> {
        let json: Option<String> = self
            .conn
            .prepare_cached("SELECT timeline FROM timelines WHERE operation_id = ?1")
            .and_then(|mut st| st.query_row([operation_id], |r| r.get(0)).optional())
            .map_err(self.err("read an operation's timeline"))?;
        json.map(|json| {
            serde_json::from_str(&json).map_err(|e| {
                self.invalid(format!(
                    "the timeline of operation {operation_id} cannot be read ({e}); a newer meshtop may have written it"
                ))
            })
        })
        .transpose()
    }

    /// The operation `#number` of a mesh.
    pub fn operation_numbered(
        &self,
        mesh: &str,
        number: i64,
    ) -> Result<Option<OperationId>, StateError> {
        self.conn
            .prepare_cached(
                "SELECT number, uuid, kind FROM operations WHERE mesh = ?1 AND number = ?2",
            )
            .and_then(|mut st| {
                st.query_row(params![mesh, number], |r| {
                    Ok(OperationId {
                        number: r.get(0)?,
                        uuid: r.get(1)?,
                        kind: r.get::<_, KindWord>(2)?.0,
                    })
                })
                .optional()
            })
            .map_err(self.err("read an operation by its number"))
    }

    /// Every stored step of one operation, oldest first (what a running operation's timeline is
    /// folded from, and an operation's from before schema 15).
    pub fn operation_events(&self, operation_id: &str) -> Result<Vec<EventRow>, StateError> {
        self.conn
            .prepare_cached(
                "SELECT e.id, e.at_ms, e.mesh, e.operation_id, e.kind, e.module, e.text, o.number, o.kind, e.payload \
                 FROM events e LEFT JOIN operations o ON o.uuid = e.operation_id \
                 WHERE e.operation_id = ?1 ORDER BY e.id",
            )
            .and_then(|mut st| {
                st.query_map([operation_id], super::events::row_to_event)?
                    .collect()
            })
            .map_err(self.err("read an operation's events"))
    }

    /// Each module's median successful build of a mesh (as `stats` counts it over everything
    /// kept): what a skip saved.
    pub fn median_builds(&self, mesh: &str) -> Result<BTreeMap<String, i64>, StateError> {
        let rows: Vec<(String, i64)> = self
            .conn
            .prepare_cached(
                "SELECT module, ended_ms - started_ms FROM builds \
                 WHERE mesh = ?1 AND module IS NOT NULL AND status = 'succeeded' AND ended_ms IS NOT NULL",
            )
            .and_then(|mut st| {
                st.query_map([mesh], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(self.err("read the builds' times"))?;
        let mut times: BTreeMap<String, Vec<i64>> = BTreeMap::new();
        for (module, ms) in rows {
            times.entry(module).or_default().push(ms);
        }
        Ok(times
            .into_iter()
            .filter_map(|(module, values)| Some((module, median(values)?)))
            .collect())
    }

    /// Forget the timelines whose operation has no event left (run after events were pruned).
    pub(super) fn prune_timelines(&self) -> Result<usize, StateError> {
        self.conn
            .prepare_cached(
                "DELETE FROM timelines WHERE operation_id NOT IN (SELECT DISTINCT operation_id FROM events)",
            )
            .and_then(|mut st| st.execute([]))
            .map_err(self.err("forget old timelines"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::super::{Holder, NewEvent};
    use super::*;
    use crate::mesh::progress::Payload;

    #[test]
    fn a_timeline_reads_back_and_goes_with_its_operations_events() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(&dir.path().join("state.db")).unwrap();
        let mut timeline = Timeline::new("op-old", Some(1));
        timeline.fold(5, None, &Payload::Started { modules: 0 }, "");
        db.save_timeline("demo", &timeline).unwrap();
        assert_eq!(db.timeline("op-old").unwrap(), Some(timeline.clone()));
        assert_eq!(db.timeline("op-none").unwrap(), None);
        let event = |operation: &str| NewEvent {
            mesh: "demo".into(),
            operation_id: operation.into(),
            kind: "warning".into(),
            module: None,
            text: "w".into(),
            payload: None,
        };
        db.append_event(&event("op-old")).unwrap();
        // Enough newer events that the oldest batch (op-old's) is pruned when an operation ends.
        let newer: Vec<NewEvent> = (0..super::super::events::KEEP_EVENTS
            + super::super::events::PRUNE_BATCH)
            .map(|_| event("op-new"))
            .collect();
        db.append_events(&newer).unwrap();
        let mut kept = Timeline::new("op-new", Some(2));
        kept.fold(9, None, &Payload::Started { modules: 0 }, "");
        db.lock_mesh("demo", "default", &Holder::here("op-new"))
            .unwrap()
            .unwrap();
        // Kept by the operation's last write, with its last events.
        db.finish_operation(&[event("op-new")], "demo", "default", "op-new", Some(&kept))
            .unwrap();
        assert!(db.operation_events("op-old").unwrap().is_empty());
        assert_eq!(
            db.timeline("op-old").unwrap(),
            None,
            "pruned with its events"
        );
        assert_eq!(db.timeline("op-new").unwrap(), Some(kept));
    }
}
