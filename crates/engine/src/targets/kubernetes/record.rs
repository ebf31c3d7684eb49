//! The record on Kubernetes: the namespace's annotation (`jr2.dev/images`), with the pins and the
//! record's history beside it, copied into the state database for every reader there.

use std::sync::Mutex;

use crate::backends::cluster::{
    ANNOTATIONS_LIMIT_BYTES, INDEX_ANNOTATION, RECORD_ANNOTATION, RecordForm as ClusterForm,
    RecordIndex, ShardRemoval, TeamWrite, modules_left,
};
use crate::backends::state::{Holder, StateDb, StateError, locked};
use crate::error::{ConvergeError, TargetError};
use crate::mesh::model::{Mesh, Record};
use crate::mesh::pin::{KeptWithRecord, PinChange, StampBy, Stamper};
use crate::targets::{HoldsTheMesh, LeftoverRemoval, RecordLeftover, RecordRead, RecordRoom};

use super::Kube;

/// How much of a history kept in shards of its own a read takes.
#[derive(Debug, Clone, Copy)]
pub(super) enum Stamps<'a> {
    Whole,
    Apart,
    /// One module's stamps (its shard alone), or none.
    Shown(Option<&'a str>),
}

impl Kube {
    /// The shards no index names, older than `grace_ms` (never less than the shards' own grace).
    pub(super) async fn unnamed_shards(
        &self,
        grace_ms: i64,
    ) -> Result<Vec<RecordLeftover>, TargetError> {
        let grace = grace_ms.max(self.cluster.shard_grace_ms());
        let found = self
            .cluster
            .unnamed_shards(&RecordIndex::default(), grace)
            .await?;
        Ok(found
            .into_iter()
            .map(|shard| RecordLeftover {
                name: shard.name,
                written_by: shard.written_by,
                age_ms: shard.age_ms,
            })
            .collect())
    }

    /// Remove the shard `name` while it is still one no index names and as old as it was listed
    /// (listed again now: its resourceVersion then guards the delete).
    pub(super) async fn remove_unnamed_shard(
        &self,
        name: &str,
        grace_ms: i64,
    ) -> Result<LeftoverRemoval, TargetError> {
        let grace = grace_ms.max(self.cluster.shard_grace_ms());
        let found = self
            .cluster
            .unnamed_shards(&RecordIndex::default(), grace)
            .await?;
        let Some(shard) = found.into_iter().find(|s| s.name == name) else {
            return Ok(LeftoverRemoval::Kept(
                "an index names it now, it was renewed, or it is gone".into(),
            ));
        };
        Ok(match self.cluster.remove_shard(&shard).await? {
            ShardRemoval::Removed => LeftoverRemoval::Removed,
            ShardRemoval::AlreadyGone => LeftoverRemoval::AlreadyGone,
            ShardRemoval::Renewed => {
                LeftoverRemoval::Kept("a stamp renewed it after it was listed".into())
            }
        })
    }

    /// The record, and what lives with it (pins, the record's history) copied into the state
    /// database: every reader of those (history, R, the detail, gc, the planner) reads the team's.
    /// `stamps`: how much of a history kept in shards of its own is read too (the copy is added
    /// to, never cut: a read without it leaves the copy as it was).
    pub(super) async fn read(
        &self,
        mesh: &Mesh,
        db: &Mutex<StateDb>,
        stamps: Stamps<'_>,
    ) -> Result<RecordRead, TargetError> {
        let read = match stamps {
            Stamps::Whole => self.cluster.read_record().await?,
            Stamps::Apart => self.cluster.read_entries().await?,
            Stamps::Shown(history_of) => self.cluster.read_shown(history_of).await?,
        };
        match &read.team_warning {
            Some(warning) => tracing::warn!("{warning}"),
            None => {
                let copied = locked(db)
                    .map_err(StateError::from)
                    .and_then(|h| h.mirror_team(&mesh.name, &self.name, &read.pins, &read.history));
                if let Err(error) = copied {
                    tracing::warn!("the target's pins and history were not copied: {error}");
                }
            }
        }
        let used_bytes = read.others_bytes + read.ours_bytes;
        let modules_left = modules_left(&read);
        let percent = used_bytes * 100 / ANNOTATIONS_LIMIT_BYTES.max(1);
        let (form, said, source) = match read.form {
            ClusterForm::Plain => (
                form_fields("annotations", 0, 0),
                format!(
                    "record: in the namespace's annotations, {used_bytes} of {ANNOTATIONS_LIMIT_BYTES} bytes ({percent}%); room for about {modules_left} more module(s) in any form (past the annotations it moves to shards)"
                ),
                format!(
                    "annotation {RECORD_ANNOTATION} on namespace {}",
                    self.cluster.namespace
                ),
            ),
            ClusterForm::Shards { shards, bytes } => (
                form_fields("shards", shards, bytes),
                format!(
                    "record: in {shards} shard(s) ({bytes} bytes), their index {used_bytes} of {ANNOTATIONS_LIMIT_BYTES} bytes of the namespace's annotations ({percent}%); room for about {modules_left} more module(s)"
                ),
                format!(
                    "{shards} shard(s) indexed by annotation {INDEX_ANNOTATION} on namespace {}",
                    self.cluster.namespace
                ),
            ),
        };
        let room = RecordRoom {
            said,
            form,
            used_bytes,
            limit_bytes: ANNOTATIONS_LIMIT_BYTES,
            modules_left,
            read_objects: read.cost.objects,
            read_bytes: read.cost.bytes,
        };
        Ok(RecordRead {
            record: read.record,
            source,
            warning: read.warning,
            kept: read.team_warning.is_none().then_some(KeptWithRecord {
                pins: read.pins,
                history: read.history,
            }),
            team_warning: read.team_warning,
            room: Some(room),
        })
    }

    /// The lock is checked just before the annotations are written (two systems: no common
    /// transaction). The record, its pins and its history go in one guarded patch; the state
    /// database's copy follows, and a copy that cannot be written is a warning: the stamp stands.
    pub(super) async fn stamp_over(
        &self,
        mesh: &Mesh,
        db: &Mutex<StateDb>,
        how: StampBy<'_>,
        entries: &Record,
        pins: &PinChange,
    ) -> Result<(), ConvergeError> {
        let short = locked(db).ok().and_then(|h| {
            h.operation_short(&mesh.name, &self.name, how.operation_id, how.kind)
                .ok()
        });
        // Who stamps is who would hold the mesh: this process on this host, now.
        let here = Holder::here(how.operation_id);
        let by = Stamper {
            operation_id: here.operation_id,
            kind: how.kind,
            short,
            host: here.host,
            pid: here.pid,
            at_ms: here.since_ms,
            from_target: how.from_target.map(str::to_string),
        };
        self.still_holds(db, &mesh.name, how.operation_id).await?;
        let write = TeamWrite {
            entries,
            pins,
            by: &by,
        };
        let stamped = self
            .cluster
            .stamp_team(&write, true)
            .await
            .map_err(|e| ConvergeError::Failed(e.to_string()))?;
        let copied = locked(db)
            .map_err(StateError::from)
            .and_then(|h| h.mirror_team(&mesh.name, &self.name, &stamped.pins, &stamped.history));
        if let Err(error) = copied {
            tracing::warn!("the record was stamped, the state database's copy not: {error}");
        }
        Ok(())
    }
}

/// The record's form in `status --json`, as it always read: `form` (`annotations` or `shards`),
/// the shards the index names and the bytes of their data.
fn form_fields(
    form: &str,
    shards: usize,
    bytes: usize,
) -> serde_json::Map<String, serde_json::Value> {
    let mut fields = serde_json::Map::new();
    fields.insert("form".into(), form.into());
    fields.insert("shards".into(), shards.into());
    fields.insert("shard_bytes".into(), bytes.into());
    fields
}
