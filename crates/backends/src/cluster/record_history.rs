//! The record's history in shards of its own. Past the annotations the history (ten stamps a
//! module: most of the record's bytes) is kept apart from the entries and the pins, in shards the
//! index names in its `history` list, each naming its first module. What decides (a converge, a
//! plan, status) reads the record's shards alone; `history`, rollback and gc read the history's
//! too. A stamp reads, cuts again and writes only the history's shards that hold the modules it
//! stamps; the others stay as the index names them.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::{StreamExt, TryStreamExt, stream};

use super::record::HISTORY_KEPT;
use super::record_shards::{RecordIndex, ShardRef, ShardText, ShardsRead, holder, split_history};
use super::{Cluster, ClusterError};
use crate::mesh::pin::{Stamp, StampsByModule, add_stamps};

/// History shards read at once by a stamp.
const READS_IN_FLIGHT: usize = 8;

/// The history's shards after a stamp.
pub(super) struct HistoryAfter {
    /// Every history shard the new index names, in module order.
    pub refs: Vec<ShardRef>,
    /// The ones to write (not named by the index before).
    pub written: Vec<ShardText>,
    /// The history of the modules in the shards the stamp read (the stamped ones among them).
    pub touched: StampsByModule,
}

impl Cluster {
    /// The history's shards once `stamps` are added. An index whose history has no shards of its
    /// own (the plain form before, an index written before the history had them, or none yet)
    /// has its whole history in `whole` (the stamps already added): it is cut into shards. Else
    /// only the shards holding ([`holder`]) the stamped modules are read (verified), the stamps added,
    /// and each cut again on its own (so that the shards' module ranges never overlap). None when
    /// one of them is gone (gc took it after a newer index was written: the stamp reads again).
    pub(super) async fn history_after(
        &self,
        index: &RecordIndex,
        whole: StampsByModule,
        stamps: &[Stamp],
    ) -> Result<Option<HistoryAfter>, ClusterError> {
        if index.history.is_empty() {
            let written = split_history(&whole).map_err(|e| self.cut_error(&e))?;
            return Ok(Some(HistoryAfter {
                refs: written.iter().map(|s| s.shard.clone()).collect(),
                written,
                touched: whole,
            }));
        }
        let mut by_shard: BTreeMap<usize, Vec<Stamp>> = BTreeMap::new();
        for stamp in stamps {
            if let Some(at) = holder(&index.history, &stamp.module) {
                by_shard.entry(at).or_default().push(stamp.clone());
            }
        }
        let at: BTreeSet<usize> = by_shard.keys().copied().collect();
        let Some(parts) = self.read_history_shards(index, &at).await? else {
            return Ok(None);
        };
        let mut refs = Vec::with_capacity(index.history.len() + 1);
        let mut written = Vec::new();
        let mut touched = StampsByModule::new();
        let mut parts = parts.into_iter();
        for (position, shard) in index.history.iter().enumerate() {
            if !at.contains(&position) {
                refs.push(shard.clone());
                continue;
            }
            let Some(mut history) = parts.next() else {
                break;
            };
            let mine = by_shard.remove(&position).unwrap_or_default();
            add_stamps(&mut history, &mine, HISTORY_KEPT);
            let cut = split_history(&history).map_err(|e| self.cut_error(&e))?;
            refs.extend(cut.iter().map(|s| s.shard.clone()));
            written.extend(cut);
            touched.extend(history);
        }
        Ok(Some(HistoryAfter {
            refs,
            written,
            touched,
        }))
    }

    /// The history of each shard at the positions `at` of the index's history list, in order.
    async fn read_history_shards(
        &self,
        index: &RecordIndex,
        at: &BTreeSet<usize>,
    ) -> Result<Option<Vec<StampsByModule>>, ClusterError> {
        let shards: Vec<ShardRef> = at.iter().map(|&i| index.history[i].clone()).collect();
        let read: Vec<ShardsRead> = stream::iter(shards)
            .map(|shard| async move { self.read_shards(std::slice::from_ref(&shard)).await })
            .buffered(READS_IN_FLIGHT)
            .try_collect()
            .await?;
        let mut parts = Vec::with_capacity(read.len());
        for shard in read {
            match shard {
                ShardsRead::Whole(content, _, _) => parts.push(content.history),
                ShardsRead::Gone(_) => return Ok(None),
            }
        }
        Ok(Some(parts))
    }

    fn cut_error(&self, e: &serde_json::Error) -> ClusterError {
        ClusterError::Config {
            context: Some(self.context.clone()),
            source: format!("cannot serialise the record's history: {e}").into(),
        }
    }
}
