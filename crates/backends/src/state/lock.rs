//! One operation per target of a mesh at a time: a lock row per mesh and target, taken in an
//! IMMEDIATE transaction so two processes cannot both win (operations on two targets of one mesh
//! hold two locks, and run at once). A holder that died does not lock the mesh forever: its lock is taken
//! over when it ran on this host and its process is gone, or when its heartbeat is older than
//! [`LOCK_STALE_MS`] (a converge heartbeats well within that, e.g. every 20 s). Taking over marks
//! the dead converge's running builds `stopped` and notes who took over from whom, so that a holder
//! that was only frozen learns, when it wakes, who has the mesh now. The stamp and every send are
//! conditional on still holding the mesh ([`StateDb::check_holds`], inside their transaction).

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::holder::Holder;
use super::{BuildStatus, NewEvent, StateDb, StateError, now_ms};
use crate::mesh::timeline::Timeline;

impl StateDb {
    /// Take the lock of `target` of `mesh` for `holder`. `Ok(Err(current))` when another live
    /// operation holds it. Taking it again with the same operation id refreshes the heartbeat.
    pub fn lock_mesh(
        &self,
        mesh: &str,
        target: &str,
        holder: &Holder,
    ) -> Result<Result<(), Holder>, StateError> {
        Ok(self.take_mesh(mesh, target, holder)?.map(|_| ()))
    }

    /// As [`StateDb::lock_mesh`]; `Ok(Ok(Some(dead)))` when the lock was taken over from a
    /// holder that is gone (or frozen past the stale limit).
    pub fn take_mesh(
        &self,
        mesh: &str,
        target: &str,
        holder: &Holder,
    ) -> Result<Result<Option<Holder>, Holder>, StateError> {
        let tx = rusqlite::Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate)
            .map_err(self.err("take the converge lock"))?;
        let current = tx
            .query_row(HOLDER_SQL, [mesh, target], row_to_holder)
            .optional()
            .map_err(self.err("read the converge lock"))?;
        let now = now_ms();
        let mut taken_from = None;
        if let Some(current) = current {
            if current.operation_id == holder.operation_id {
                tx.execute(
                    "UPDATE operation_locks SET heartbeat_ms = ?2 WHERE mesh = ?1 AND target = ?3",
                    params![mesh, now.max(holder.heartbeat_ms), target],
                )
                .map_err(self.err("refresh the converge lock"))?;
                tx.commit().map_err(self.err("refresh the converge lock"))?;
                return Ok(Ok(None));
            }
            if !current.is_dead(now) {
                return Ok(Err(current)); // the transaction rolls back on drop
            }
            // Its builds will never finish: say so rather than leave them running forever.
            self.end_running(
                mesh,
                &current.operation_id,
                BuildStatus::Stopped,
                &format!(
                    "converge {} (host {}, pid {}) was taken over before it finished this build: its process is gone or its heartbeat stale; nothing was stamped for it",
                    current.operation_id, current.host, current.pid
                ),
            )?;
            tx.execute(
                "INSERT OR REPLACE INTO takeovers (lost_operation_id, mesh, operation_id, host, pid, since_ms, heartbeat_ms, target) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![current.operation_id, mesh, holder.operation_id, holder.host, holder.pid, now, now, target],
            )
            .map_err(self.err("note the take-over of the converge lock"))?;
            tracing::warn!(
                mesh,
                dead = %current.operation_id,
                host = %current.host,
                pid = current.pid,
                "taking over the converge lock of a holder that is gone"
            );
            taken_from = Some(current);
        }
        tx.execute(
            "INSERT OR REPLACE INTO operation_locks (mesh, target, operation_id, host, pid, since_ms, heartbeat_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![mesh, target, holder.operation_id, holder.host, holder.pid, holder.since_ms, holder.heartbeat_ms],
        )
        .map_err(self.err("take the converge lock"))?;
        tx.commit().map_err(self.err("take the converge lock"))?;
        Ok(Ok(taken_from))
    }

    /// Tell others the converge holding `mesh` is alive. Fails with `LockLost` when `operation_id`
    /// no longer holds it (it was taken over): that converge must stop.
    pub fn heartbeat(
        &self,
        mesh: &str,
        target: &str,
        operation_id: &str,
    ) -> Result<(), StateError> {
        let changed = self
            .conn
            .execute(
                "UPDATE operation_locks SET heartbeat_ms = ?3 \
                 WHERE mesh = ?1 AND operation_id = ?2 AND target = ?4",
                params![mesh, operation_id, now_ms(), target],
            )
            .map_err(self.err("refresh the converge lock"))?;
        if changed == 0 {
            return Err(self.lock_lost(mesh, target, operation_id));
        }
        Ok(())
    }

    /// Fails with `LockLost` unless `operation_id` holds `mesh` now. Call it inside the transaction
    /// of the write it guards (the stamp, a send): the check and the write are then one.
    pub fn check_holds(
        &self,
        mesh: &str,
        target: &str,
        operation_id: &str,
    ) -> Result<(), StateError> {
        let current = self
            .conn
            .query_row(HOLDER_SQL, [mesh, target], row_to_holder)
            .optional()
            .map_err(self.err("read the converge lock"))?;
        match current {
            Some(current) if current.operation_id == operation_id => Ok(()),
            _ => Err(self.lock_lost(mesh, target, operation_id)),
        }
    }

    /// The `LockLost` error of `operation_id`, naming who took the mesh over when that is known
    /// (the take-over note, else whoever holds it now).
    pub fn lock_lost(&self, mesh: &str, target: &str, operation_id: &str) -> StateError {
        let noted = self
            .conn
            .query_row(
                "SELECT operation_id, host, pid, since_ms, heartbeat_ms FROM takeovers \
                 WHERE lost_operation_id = ?1 AND mesh = ?2",
                params![operation_id, mesh],
                row_to_holder,
            )
            .optional()
            .ok()
            .flatten();
        let taken_by = noted.or_else(|| {
            self.mesh_holder(mesh, target)
                .ok()
                .flatten()
                .filter(|h| h.operation_id != operation_id)
        });
        StateError::LockLost {
            path: self.path.clone(),
            mesh: mesh.to_string(),
            operation_id: operation_id.to_string(),
            taken_by: taken_by.map(Box::new),
        }
    }

    /// Release the lock if `operation_id` holds it (otherwise nothing happens).
    pub fn unlock_mesh(
        &self,
        mesh: &str,
        target: &str,
        operation_id: &str,
    ) -> Result<(), StateError> {
        self.conn
            .execute(
                "DELETE FROM operation_locks WHERE mesh = ?1 AND operation_id = ?2 AND target = ?3",
                params![mesh, operation_id, target],
            )
            .map_err(self.err("release the converge lock"))?;
        Ok(())
    }

    /// The last events of a converge (or send), its timeline (when kept) and the release of its
    /// lock, in one transaction (one commit: what keeping a timeline costs a converge is its
    /// bytes, not a write of its own); the oldest progress events beyond [`super::KEEP_EVENTS`]
    /// go with it. A timeline that cannot be kept is logged, never fatal.
    pub fn finish_operation(
        &self,
        events: &[NewEvent],
        mesh: &str,
        target: &str,
        operation_id: &str,
        timeline: Option<&Timeline>,
    ) -> Result<(), StateError> {
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(self.err("begin finishing a converge"))?;
        if let Some(timeline) = timeline
            && let Err(error) = self.save_timeline(mesh, timeline)
        {
            tracing::warn!("cannot keep the operation's timeline: {error}");
        }
        self.insert_events(events)?;
        self.unlock_mesh(mesh, target, operation_id)?;
        self.prune_events()?;
        tx.commit()
            .map_err(self.err("commit the end of a converge"))
    }

    /// Who holds the lock of a target of a mesh, if anyone (dead or alive).
    pub fn mesh_holder(&self, mesh: &str, target: &str) -> Result<Option<Holder>, StateError> {
        self.conn
            .query_row(HOLDER_SQL, [mesh, target], row_to_holder)
            .optional()
            .map_err(self.err("read the converge lock"))
    }

    /// The lock operation `operation_id` holds of a target of `mesh`, if it holds one (dead or
    /// alive): a build row's operation still running is one holding some target of its mesh.
    pub fn operation_holder(
        &self,
        mesh: &str,
        operation_id: &str,
    ) -> Result<Option<Holder>, StateError> {
        self.conn
            .query_row(
                "SELECT operation_id, host, pid, since_ms, heartbeat_ms FROM operation_locks \
                 WHERE mesh = ?1 AND operation_id = ?2",
                [mesh, operation_id],
                row_to_holder,
            )
            .optional()
            .map_err(self.err("read the converge lock"))
    }
}

const HOLDER_SQL: &str = "SELECT operation_id, host, pid, since_ms, heartbeat_ms FROM operation_locks \
     WHERE mesh = ?1 AND target = ?2";

fn row_to_holder(r: &rusqlite::Row<'_>) -> rusqlite::Result<Holder> {
    Ok(Holder {
        operation_id: r.get(0)?,
        host: r.get(1)?,
        pid: r.get(2)?,
        since_ms: r.get(3)?,
        heartbeat_ms: r.get(4)?,
    })
}
