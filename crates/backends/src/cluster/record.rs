//! The cluster's record: the annotation `jr2.dev/images` on the mesh's namespace, and beside it
//! what lives with the record for the whole team: the pins (`jr2.dev/pins`) and the record's
//! history (`jr2.dev/history`, the newest [`HISTORY_KEPT`] stamps of each module). All three are
//! written by one patch guarded by the namespace's resourceVersion.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::record_shards::{
    INDEX_ANNOTATION, INDEX_FORMAT, READ_ATTEMPTS, ReadCost, RecordIndex, SHARD_CUT_AFTER,
    ShardProblem, ShardRef, ShardsRead, holder, split,
};
use super::{Cluster, ClusterError, status_code};
use crate::mesh::model::{Record, RecordEntry};
use crate::mesh::operation::OperationKind;
use crate::mesh::pin::{
    Pin, PinChange, Stamp, Stamper, StampsByModule, add_stamps, stamps_between,
};

/// The namespace annotation holding the record: JSON object module → `{"ref", "digest"}`.
pub const RECORD_ANNOTATION: &str = "jr2.dev/images";
/// The pins: JSON object module → pin.
pub const PINS_ANNOTATION: &str = "jr2.dev/pins";
/// The record's history: JSON object module → stamps, newest first.
pub const HISTORY_ANNOTATION: &str = "jr2.dev/history";
/// Stamps kept per module on the namespace (the state files keep every one they saw).
pub const HISTORY_KEPT: usize = 10;
/// The apiserver refuses an object whose annotations (keys and values) exceed this many bytes in all
/// (`staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go`, `TotalAnnotationSizeLimitB`,
/// 422 `metadata.annotations: Too long`). The record, the pins and the history share it with whatever
/// else annotates the namespace: the history gets what the rest leaves, its oldest stamps going first.
pub const ANNOTATIONS_LIMIT_BYTES: usize = 256 * 1024;

/// The least an entry and a stamp are taken to be when the record has none to measure.
const ENTRY_BYTES_AT_LEAST: usize = 120;
const STAMP_BYTES_AT_LEAST: usize = 200;
/// `{"shards":[]}`, and one shard in the index (`{"name":"meshtop-record-<40 hex>","digest":"sha256:<64 hex>"},`).
const INDEX_BYTES_EMPTY: usize = 13;
const SHARD_REF_BYTES: usize = 150;

/// How many times a stamp re-reads and retries after a resourceVersion conflict.
const STAMP_ATTEMPTS: u32 = 5;

/// What reading the record found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecordRead {
    pub record: Record,
    /// Set when the annotation was unreadable (the record then reads as empty).
    pub warning: Option<String>,
    /// The namespace's resourceVersion when read (None when the namespace does not exist).
    pub resource_version: Option<String>,
    /// The pins kept with the record.
    pub pins: BTreeMap<String, Pin>,
    /// The record's history kept with it (only what the read asked for: see `history_apart`).
    pub history: StampsByModule,
    /// The history is in shards of its own that this read left unread ([`Cluster::read_entries`]):
    /// `history` is then empty.
    pub history_apart: bool,
    /// Set when the pins or the history were unreadable: a stamp is refused (it would drop them).
    pub team_warning: Option<String>,
    /// The bytes of the namespace's other annotations (neither the record, the pins nor the history):
    /// what the limit leaves for meshtop's three is [`ANNOTATIONS_LIMIT_BYTES`] less this.
    pub others_bytes: usize,
    /// The bytes of meshtop's own annotations on the namespace (the three, or the index).
    pub ours_bytes: usize,
    /// Which form the record has.
    pub form: RecordForm,
    /// The index read (empty in the plain form).
    pub index: RecordIndex,
    /// What the read cost.
    pub cost: ReadCost,
}

/// The record's form on the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordForm {
    /// The namespace's annotations (`jr2.dev/images`, `jr2.dev/pins`, `jr2.dev/history`).
    #[default]
    Plain,
    /// Shards named by the index annotation (`jr2.dev/record-index`).
    Shards { shards: usize, bytes: usize },
}

impl RecordForm {
    /// The form's name, as status and `--json` give it.
    pub fn word(&self) -> &'static str {
        match self {
            RecordForm::Plain => "annotations",
            RecordForm::Shards { .. } => "shards",
        }
    }
}

/// meshtop's annotations on the namespace: the plain form's three and the index.
const OURS: [&str; 4] = [
    RECORD_ANNOTATION,
    PINS_ANNOTATION,
    HISTORY_ANNOTATION,
    INDEX_ANNOTATION,
];

/// What one stamp writes: the record's entries, the pins' change, and who stamps.
pub struct TeamWrite<'a> {
    pub entries: &'a Record,
    pub pins: &'a PinChange,
    pub by: &'a Stamper,
}

/// What a stamp wrote: the record it replaced, the stamps it added, the pins and history after.
#[derive(Debug, Clone, Default)]
pub struct Stamped {
    pub before: Record,
    pub stamps: Vec<Stamp>,
    pub pins: BTreeMap<String, Pin>,
    pub history: StampsByModule,
}

/// Why the annotation's text is not a record.
#[derive(Debug, thiserror::Error)]
pub(super) enum RecordTextError {
    #[error("not valid JSON ({0})")]
    NotJson(serde_json::Error),
    #[error("not a JSON object of module → {{ref, digest}}")]
    NotAnObject,
    #[error("the entry for module {module:?} is not {{\"ref\", \"digest\"}} ({source})")]
    Entry {
        module: String,
        source: serde_json::Error,
    },
}

/// Parse the annotation's text: `Err(reason)` when it is not a JSON object of `{ref, digest}` entries.
pub(super) fn parse_record(text: &str) -> Result<Record, RecordTextError> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(RecordTextError::NotJson)?;
    let object = value.as_object().ok_or(RecordTextError::NotAnObject)?;
    let mut record = BTreeMap::new();
    for (module, entry) in object {
        let entry: RecordEntry =
            serde_json::from_value(entry.clone()).map_err(|source| RecordTextError::Entry {
                module: module.clone(),
                source,
            })?;
        record.insert(module.clone(), entry);
    }
    Ok(record)
}

impl Cluster {
    fn namespaces(&self) -> Api<Namespace> {
        Api::all(self.client.clone())
    }

    /// Read the record, its pins and its whole history. An absent namespace or annotation is an
    /// empty record; an unreadable annotation is an empty record with a warning naming the
    /// namespace. A shard that does not match the index is an error naming it; a shard gc took is
    /// read again through the newer index.
    pub async fn read_record(&self) -> Result<RecordRead, ClusterError> {
        self.read_with(History::Whole).await
    }

    /// Read the record and its pins, as [`Cluster::read_record`], but not the history where it is
    /// kept in shards of its own (what a converge, plan or status decides by: the history is ten
    /// stamps a module, most of the record's bytes). In the plain form, and in shards written
    /// before the history had its own, the history comes with the rest and is read all the same.
    pub async fn read_entries(&self) -> Result<RecordRead, ClusterError> {
        self.read_with(History::Apart).await
    }

    /// What a screen shows: the record and its pins as [`Cluster::read_entries`] reads them, and of
    /// a history kept in shards of its own only `history_of`'s stamps, from the one shard that
    /// holds them (`history_apart` stays set: the history read is not the whole). Shards this
    /// connection read before are not asked for again, so an unchanged record costs one GET.
    pub async fn read_shown(&self, history_of: Option<&str>) -> Result<RecordRead, ClusterError> {
        match history_of {
            Some(module) => self.read_with(History::Of(module)).await,
            None => self.read_with(History::Apart).await,
        }
    }

    async fn read_with(&self, history: History<'_>) -> Result<RecordRead, ClusterError> {
        let mut gone = String::new();
        for _ in 0..READ_ATTEMPTS {
            match self.read_record_once(history).await? {
                Attempt::Read(read) => return Ok(*read),
                Attempt::ShardGone(shard) => gone = shard,
            }
        }
        Err(self.shard_error(&gone, ShardProblem::Missing))
    }

    /// One read: [`Attempt::ShardGone`] when a shard the index names is gone.
    async fn read_record_once(&self, history: History<'_>) -> Result<Attempt, ClusterError> {
        let namespace = self
            .call(
                format!("get namespace {}", self.namespace),
                self.namespaces().get_opt(&self.namespace),
            )
            .await?;
        let Some(namespace) = namespace else {
            return Ok(Attempt::Read(Box::default()));
        };
        let empty = BTreeMap::new();
        let annotations = namespace.metadata.annotations.as_ref().unwrap_or(&empty);
        let bytes_of = |ours: bool| -> usize {
            annotations
                .iter()
                .filter(|(k, _)| OURS.contains(&k.as_str()) == ours)
                .map(|(k, v)| k.len() + v.len())
                .sum()
        };
        let mut read = RecordRead {
            resource_version: namespace.metadata.resource_version.clone(),
            others_bytes: bytes_of(false),
            ours_bytes: bytes_of(true),
            ..RecordRead::default()
        };
        read.cost = ReadCost {
            objects: 1,
            bytes: read.ours_bytes,
        };
        if let Some(text) = annotations.get(INDEX_ANNOTATION) {
            return self.read_sharded(read, text, history).await;
        }
        if let Some(text) = annotations.get(RECORD_ANNOTATION) {
            match parse_record(text) {
                Ok(record) => read.record = record,
                Err(reason) => {
                    read.warning = Some(format!(
                        "the record on namespace {:?} (annotation {RECORD_ANNOTATION}) is unreadable: {reason}; it reads as empty until a converge stamps it again",
                        self.namespace
                    ));
                }
            }
        }
        let mut unreadable = Vec::new();
        if let Some(text) = annotations.get(PINS_ANNOTATION) {
            match serde_json::from_str(text) {
                Ok(pins) => read.pins = pins,
                Err(e) => unreadable.push(format!("{PINS_ANNOTATION} ({e})")),
            }
        }
        if let Some(text) = annotations.get(HISTORY_ANNOTATION) {
            match serde_json::from_str(text) {
                Ok(history) => read.history = history,
                Err(e) => unreadable.push(format!("{HISTORY_ANNOTATION} ({e})")),
            }
        }
        if !unreadable.is_empty() {
            read.team_warning = Some(format!(
                "namespace {:?}: unreadable annotation {}; nothing is stamped until it is mended or removed (kubectl annotate namespace {} {}-)",
                self.namespace,
                unreadable.join(", "),
                self.namespace,
                if unreadable.len() == 1 && unreadable[0].starts_with(PINS_ANNOTATION) {
                    PINS_ANNOTATION
                } else {
                    HISTORY_ANNOTATION
                }
            ));
        }
        Ok(Attempt::Read(Box::new(read)))
    }

    /// The sharded form: the index, then the record's shards it names and, for a whole read, the
    /// history's (each verified against its digest).
    async fn read_sharded(
        &self,
        mut read: RecordRead,
        text: &str,
        history: History<'_>,
    ) -> Result<Attempt, ClusterError> {
        let index: RecordIndex = match serde_json::from_str(text) {
            Ok(index) => index,
            Err(e) => {
                let warning = format!(
                    "the record's index on namespace {:?} (annotation {INDEX_ANNOTATION}) is unreadable ({e}); the record reads as empty and nothing is stamped until it is mended or removed (kubectl annotate namespace {} {INDEX_ANNOTATION}-)",
                    self.namespace, self.namespace
                );
                read.warning = Some(warning.clone());
                read.team_warning = Some(warning);
                return Ok(Attempt::Read(Box::new(read)));
            }
        };
        if index.format > INDEX_FORMAT {
            let warning = format!(
                "the record's index on namespace {:?} (annotation {INDEX_ANNOTATION}) is format {}, newer than this meshtop's {INDEX_FORMAT}: it reads what it understands and stamps nothing (its write would drop what it does not know); use a newer meshtop to converge",
                self.namespace, index.format
            );
            read.warning = Some(warning.clone());
            read.team_warning = Some(warning);
        }
        let (whole, mut bytes, cost) = match self.read_shards(&index.shards).await? {
            ShardsRead::Whole(whole, bytes, cost) => (whole, bytes, cost),
            ShardsRead::Gone(shard) => return Ok(Attempt::ShardGone(shard)),
        };
        read.add_cost(cost);
        read.record = whole.images;
        read.pins = whole.pins;
        read.history = whole.history;
        if !index.history.is_empty() {
            read.history_apart = history != History::Whole;
            let wanted: &[ShardRef] = match history {
                History::Apart => &[],
                History::Whole => &index.history,
                // Its shard alone: the one that holds the module's stamps.
                History::Of(module) => holder(&index.history, module)
                    .map_or(&[][..], |at| std::slice::from_ref(&index.history[at])),
            };
            match self.read_shards(wanted).await? {
                ShardsRead::Whole(kept, more, cost) => {
                    read.add_cost(cost);
                    match history {
                        History::Of(module) => read.history.extend(
                            kept.history
                                .into_iter()
                                .filter(|(of, _)| of.as_str() == module),
                        ),
                        _ => {
                            read.history.extend(kept.history);
                            bytes += more;
                        }
                    }
                }
                ShardsRead::Gone(shard) => return Ok(Attempt::ShardGone(shard)),
            }
        }
        read.form = RecordForm::Shards {
            shards: index.len(),
            bytes,
        };
        // What the newest index no longer names is not asked for again: forget it.
        self.seen().keep_only(&index);
        read.index = index;
        Ok(Attempt::Read(Box::new(read)))
    }

    /// Merge `entries` into the record alone (no pin changed, no stamp noted), guarded as
    /// [`Cluster::stamp_team`] is. Returns the record as written.
    pub async fn stamp_record(&self, entries: &Record) -> Result<Record, ClusterError> {
        let by = Stamper {
            operation_id: String::new(),
            // Never read: a record-only write notes no stamp (`false` below).
            kind: OperationKind::Converge,
            short: None,
            host: String::new(),
            pid: 0,
            at_ms: 0,
            from_target: None,
        };
        let write = TeamWrite {
            entries,
            pins: &PinChange::default(),
            by: &by,
        };
        let stamped = self.stamp_team(&write, false).await?;
        let mut written = stamped.before;
        written.extend(entries.iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(written)
    }

    /// Merge the entries into the record, change the pins and add the stamps to the record's
    /// history, in one patch with the namespace's resourceVersion as a precondition; on a conflict
    /// re-read, re-merge and retry (bounded). `noted`: whether the stamps go to the history. A record
    /// that no longer fits the annotations goes to shards, written before the one guarded patch
    /// that switches the index to them. In shards the stamp reads the record's shards and, of the
    /// history's, only those that hold the modules it stamps ([`Cluster::history_after`]).
    pub async fn stamp_team(
        &self,
        write: &TeamWrite<'_>,
        noted: bool,
    ) -> Result<Stamped, ClusterError> {
        // The shards this stamp wrote or renewed, and when, across its attempts.
        let mut held = BTreeMap::new();
        let mut history = History::Apart;
        for _ in 0..STAMP_ATTEMPTS {
            let read = self.read_with(history).await?;
            if let Some(warning) = read.team_warning.clone() {
                return Err(ClusterError::Config {
                    context: Some(self.context.clone()),
                    source: warning.into(),
                });
            }
            let Some(resource_version) = read.resource_version.clone() else {
                return Err(ClusterError::NamespaceMissing {
                    namespace: self.namespace.clone(),
                    context: self.context.clone(),
                });
            };
            let was_sharded = read.form != RecordForm::Plain;
            let index_before = read.index.clone();
            let others = read.others_bytes;
            let Some(mut after) = team_after(read, write, noted)
                .map_err(|e| self.serialise_error("record's shards", &e))?
            else {
                // Back to the annotations, with the history its shards keep: read it whole.
                history = History::Whole;
                continue;
            };
            let (patch, index) = if after.sharded {
                let Some(switch) = self
                    .shards_for(
                        &mut after,
                        &index_before,
                        &resource_version,
                        others,
                        &mut held,
                    )
                    .await?
                else {
                    continue;
                };
                switch
            } else {
                let patch = self.team_patch(&resource_version, &after, was_sharded)?;
                (patch, None)
            };
            let patched = self
                .timed(self.namespaces().patch(
                    &self.namespace,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                ))
                .await
                .map_err(|()| self.timeout_error(format!("patch namespace {}", self.namespace)))?;
            match patched {
                Ok(_) => {
                    self.after_switch(
                        &after,
                        &index_before,
                        index,
                        was_sharded,
                        &held,
                        &write.by.operation_id,
                    )
                    .await?;
                    return Ok(after.stamped);
                }
                Err(e) if status_code(&e) == Some(409) => {
                    tracing::debug!(namespace = %self.namespace, "record stamp conflicted; re-reading");
                    continue;
                }
                Err(e) => {
                    return Err(self.api_error(format!("patch namespace {}", self.namespace), e));
                }
            }
        }
        Err(ClusterError::RecordContention {
            namespace: self.namespace.clone(),
            attempts: STAMP_ATTEMPTS,
        })
    }

    /// The shards a sharded stamp switches to, written (or held) before the switch, and the
    /// switch's patch and index. None when a history shard the index named was gone meanwhile (a
    /// newer index: the stamp reads again).
    async fn shards_for(
        &self,
        after: &mut TeamAfter,
        index_before: &RecordIndex,
        resource_version: &str,
        others: usize,
        held: &mut BTreeMap<String, i64>,
    ) -> Result<Option<(serde_json::Value, Option<RecordIndex>)>, ClusterError> {
        let whole = std::mem::take(&mut after.stamped.history);
        let Some(kept) = self
            .history_after(index_before, whole, &after.stamped.stamps)
            .await?
        else {
            return Ok(None);
        };
        after.stamped.history = kept.touched;
        after.history = kept.refs;
        after.shards.extend(kept.written);
        let (patch, index) = self.sharded_patch(resource_version, after, others)?;
        let operation = &after.operation_id;
        let half = self.shard_grace_ms / 2;
        self.hold_shards(&after.shards, index_before, operation, held, half)
            .await?;
        // Right before the switch, the same again: shards held longer ago than half the
        // grace are held again (renewed, or created again where gc took them). A stamper
        // slowed between its shards and its switch (a loaded machine, a slow API server, a
        // stopped process) would otherwise switch the index to shards gc took as unnamed
        // and old. Renewing is what makes the switch safe, not checking: a renewal changes
        // the shard's resourceVersion, so a gc that listed it before fails its guarded
        // delete, and a gc that lists it after sees it young (`Cluster::unnamed_shards`).
        // Half the grace: the switch itself (one request) must land within the other half;
        // a switch later than the whole grace is repaired after it (`after_switch`).
        self.hold_shards(&after.shards, index_before, operation, held, half)
            .await?;
        Ok(Some((patch, Some(index))))
    }

    /// After the switch: a switch that landed more than the grace after the shards were held may
    /// name shards gc took meanwhile: they are written again (repair, after the fact); then the
    /// shards no index names are removed.
    async fn after_switch(
        &self,
        after: &TeamAfter,
        index_before: &RecordIndex,
        index: Option<RecordIndex>,
        was_sharded: bool,
        held: &BTreeMap<String, i64>,
        operation: &str,
    ) -> Result<(), ClusterError> {
        let held_at = Self::held_since(&after.shards, index_before, held);
        let late = crate::timefmt::now_ms().saturating_sub(held_at) >= self.shard_grace_ms;
        if index.is_some() && late {
            self.reassert_shards(&after.shards, index_before, operation)
                .await?;
        }
        if was_sharded || index.is_some() {
            let keep = index.unwrap_or_default();
            if let Err(error) = self.gc_shards(&keep).await {
                tracing::warn!("the record was stamped; its old shards were not removed: {error}");
            }
        }
        Ok(())
    }

    fn serialise_error(&self, what: &str, e: &serde_json::Error) -> ClusterError {
        ClusterError::Config {
            context: Some(self.context.clone()),
            source: format!("cannot serialise the {what}: {e}").into(),
        }
    }

    fn team_patch(
        &self,
        resource_version: &str,
        after: &TeamAfter,
        was_sharded: bool,
    ) -> Result<serde_json::Value, ClusterError> {
        let text = |what: &str, value: Result<String, serde_json::Error>| {
            value.map_err(|e| self.serialise_error(what, &e))
        };
        let record = text("record", serde_json::to_string(&after.record))?;
        let pins = text("pins", serde_json::to_string(&after.stamped.pins))?;
        let history = text(
            "record's history",
            serde_json::to_string(&after.stamped.history),
        )?;
        let mut patch = json!({
            "metadata": {
                "resourceVersion": resource_version,
                "annotations": {
                    RECORD_ANNOTATION: record,
                    PINS_ANNOTATION: pins,
                    HISTORY_ANNOTATION: history,
                },
            }
        });
        // Back from shards: the index goes in the same write (a plain record's patch is as before).
        if was_sharded {
            patch["metadata"]["annotations"][INDEX_ANNOTATION] = serde_json::Value::Null;
        }
        Ok(patch)
    }

    /// The patch that switches the index to the shards (the plain form's three removed), refused
    /// when even the index does not fit beside the namespace's other annotations.
    fn sharded_patch(
        &self,
        resource_version: &str,
        after: &TeamAfter,
        others: usize,
    ) -> Result<(serde_json::Value, RecordIndex), ClusterError> {
        let index = RecordIndex {
            format: INDEX_FORMAT,
            shards: after
                .shards
                .iter()
                .filter(|s| s.shard.first.is_none())
                .map(|s| s.shard.clone())
                .collect(),
            history: after.history.clone(),
        };
        let text = serde_json::to_string(&index)
            .map_err(|e| self.serialise_error("record's index", &e))?;
        let bytes = others + INDEX_ANNOTATION.len() + text.len();
        if bytes > ANNOTATIONS_LIMIT_BYTES {
            return Err(ClusterError::RecordTooLarge {
                namespace: self.namespace.clone(),
                bytes,
                limit: ANNOTATIONS_LIMIT_BYTES,
            });
        }
        let patch = json!({
            "metadata": {
                "resourceVersion": resource_version,
                "annotations": {
                    INDEX_ANNOTATION: text,
                    RECORD_ANNOTATION: null,
                    PINS_ANNOTATION: null,
                    HISTORY_ANNOTATION: null,
                },
            }
        });
        Ok((patch, index))
    }
}

/// The record, pins and history as a write leaves them, and the form they take.
struct TeamAfter {
    record: Record,
    /// In shards, `stamped.history` is the history of the modules stamped (what the stamp read of
    /// it), not the whole.
    stamped: Stamped,
    /// Past the annotations: the shards to write (empty in the plain form): the record's, then
    /// the history's new ones (those name their first module).
    sharded: bool,
    shards: Vec<super::record_shards::ShardText>,
    /// The history's shards the new index names.
    history: Vec<super::record_shards::ShardRef>,
    operation_id: String,
}

/// The bytes of the plain form's annotations with an empty history (`{}`), beside `others`.
fn plain_fixed(others: usize, record: &Record, pins: &BTreeMap<String, Pin>) -> usize {
    let json_len = |value: Result<String, serde_json::Error>| value.map_or(0, |t| t.len());
    others
        + RECORD_ANNOTATION.len()
        + json_len(serde_json::to_string(record))
        + PINS_ANNOTATION.len()
        + json_len(serde_json::to_string(pins))
        + HISTORY_ANNOTATION.len()
}

/// The record, pins and history after the write. While the record and the pins fit the
/// annotations (the history trimmed to what they leave, its oldest stamps first) the form is the
/// plain one, exactly as before shards existed; past that, shards: the record's (entries and
/// pins) from here, the history's from [`Cluster::history_after`] (kept whole, 10 stamps a
/// module). None when the record goes back to the annotations and the read left the history's
/// shards unread (read it whole, then again).
fn team_after(
    read: RecordRead,
    write: &TeamWrite<'_>,
    noted: bool,
) -> Result<Option<TeamAfter>, serde_json::Error> {
    let others = read.others_bytes;
    let before = read.record;
    let mut record = before.clone();
    record.extend(write.entries.iter().map(|(k, v)| (k.clone(), v.clone())));
    let stamps = if noted {
        stamps_between(&before, write.entries, write.by)
    } else {
        Vec::new()
    };
    let mut pins = read.pins;
    write.pins.apply(&mut pins);
    let fixed = plain_fixed(others, &record, &pins);
    // An empty history is `{}`: without room for it the record itself does not fit.
    let sharded = fixed + 2 > ANNOTATIONS_LIMIT_BYTES;
    if !sharded && read.history_apart {
        return Ok(None);
    }
    let mut history = read.history;
    add_stamps(&mut history, &stamps, HISTORY_KEPT);
    let shards = if sharded {
        split(&record, &pins, &StampsByModule::new())?
    } else {
        trim_history(&mut history, ANNOTATIONS_LIMIT_BYTES - fixed);
        Vec::new()
    };
    Ok(Some(TeamAfter {
        record,
        stamped: Stamped {
            before,
            stamps,
            pins,
            history,
        },
        sharded,
        shards,
        history: Vec::new(),
        operation_id: write.by.operation_id.clone(),
    }))
}

/// About how many more modules the record can take in any form: in the annotations, each as
/// large as the record's entries are on average; in shards, as many as the index can still name
/// beside the namespace's other annotations. Each module takes its part of both of the index's
/// lists — the record's shards (its entry) and the history's (ten stamps, each ref naming its first
/// module) — as the index holds them now when it names shards, and never less than an entry and a
/// full history take by construction (each shard at least [`SHARD_CUT_AFTER`] bytes but the last).
pub fn modules_left(read: &RecordRead) -> usize {
    let json_len = |value: Result<String, serde_json::Error>| value.map_or(0, |t| t.len());
    let modules = read.record.len().max(1);
    let entry = (json_len(serde_json::to_string(&read.record)) / modules).max(ENTRY_BYTES_AT_LEAST);
    let stamps: usize = read.history.values().map(Vec::len).sum();
    let stamp = json_len(serde_json::to_string(&read.history))
        .checked_div(stamps)
        .unwrap_or(0)
        .max(STAMP_BYTES_AT_LEAST);
    let limit = ANNOTATIONS_LIMIT_BYTES;
    let plain = plain_fixed(read.others_bytes, &read.record, &read.pins) + 2;
    let plain_left = limit.saturating_sub(plain) / entry;
    plain_left.max(sharded_left(read, entry, stamp))
}

/// [`modules_left`] in shards: the index's room left, over what a module takes of it.
fn sharded_left(read: &RecordRead, entry: usize, stamp: usize) -> usize {
    let sharded = matches!(read.form, RecordForm::Shards { .. });
    let index_now = if sharded {
        read.ours_bytes
    } else {
        INDEX_ANNOTATION.len() + INDEX_BYTES_EMPTY
    };
    let room = ANNOTATIONS_LIMIT_BYTES.saturating_sub(read.others_bytes + index_now);
    // A ref's bytes in each list, with its comma: measured where the index names some.
    let ref_bytes = |refs: &[ShardRef], otherwise: usize| -> usize {
        let all: usize = refs
            .iter()
            .map(|r| serde_json::to_string(r).map_or(SHARD_REF_BYTES, |t| t.len() + 1))
            .sum();
        all.checked_div(refs.len()).unwrap_or(otherwise)
    };
    let name = read.record.keys().map(String::len).sum::<usize>() / read.record.len().max(1);
    let record_ref = ref_bytes(&read.index.shards, SHARD_REF_BYTES);
    let history_ref = ref_bytes(
        &read.index.history,
        SHARD_REF_BYTES + r#","first":"""#.len() + name,
    );
    // No room for one more shard of either list: no module more (one may fit a shard's rest, but
    // a stamp cannot count on it).
    if room < record_ref.max(history_ref) {
        return 0;
    }
    let cut = SHARD_CUT_AFTER as f64;
    let by_construction = record_ref as f64 * entry as f64 / cut
        + history_ref as f64 * (HISTORY_KEPT * stamp) as f64 / cut;
    let as_it_stands = if sharded && !read.record.is_empty() {
        let named = record_ref * read.index.shards.len() + history_ref * read.index.history.len();
        named as f64 / read.record.len() as f64
    } else {
        0.0
    };
    let per_module = by_construction.max(as_it_stands).max(f64::MIN_POSITIVE);
    // An estimate, rounded down.
    let fit = (room as f64 / per_module) as usize;
    // An index written from the annotations names the modules there now too.
    if sharded {
        fit
    } else {
        fit.saturating_sub(read.record.len())
    }
}

/// Drop the oldest stamp of the module with the most until the history's JSON fits `budget` bytes.
pub fn trim_history(history: &mut StampsByModule, budget: usize) {
    let size = |h: &StampsByModule| serde_json::to_string(h).map_or(0, |t| t.len());
    while size(history) > budget {
        let longest = history
            .iter()
            .max_by_key(|(_, stamps)| stamps.len())
            .map(|(module, _)| module.clone());
        let Some(module) = longest else { return };
        let stamps = history.entry(module.clone()).or_default();
        stamps.pop();
        if stamps.is_empty() {
            history.remove(&module);
        }
    }
}

/// What a read takes of the history kept in shards of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum History<'a> {
    Whole,
    Apart,
    /// One module's stamps: the one shard that holds them.
    Of(&'a str),
}

impl RecordRead {
    fn add_cost(&mut self, cost: ReadCost) {
        self.cost.objects += cost.objects;
        self.cost.bytes += cost.bytes;
    }
}

/// One read of the record: whole, or a shard the index names was gone (gc took it: read again).
enum Attempt {
    Read(Box<RecordRead>),
    /// The shard's name.
    ShardGone(String),
}

#[cfg(test)]
#[path = "record_tests.rs"]
mod tests;
