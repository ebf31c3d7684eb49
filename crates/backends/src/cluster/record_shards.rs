//! The record past one object. While the record, the pins and the history fit in the namespace's
//! annotations they stay there, exactly as before (`record.rs`). Past that they move into shards:
//! ConfigMaps named by the hash of their content, immutable once written, each at most
//! [`SHARD_BYTES`] (half the API server's 1 MiB), and the namespace keeps a small index
//! (`jr2.dev/record-index`: the shards' names and digests) that a stamp switches with one write
//! guarded by the namespace's resourceVersion. Shards are written before the index names them and
//! never change, so a reader that reads the index and then the shards it names sees one stamp
//! whole; a shard gc took in between is read again through the newer index.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use futures_util::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::Api;
use kube::api::{
    DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams, Preconditions,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Cluster, ClusterError, status_code};
use crate::mesh::model::Record;
use crate::mesh::pin::{Pin, StampsByModule};

/// The namespace annotation naming the record's shards, once the record has outgrown the annotations.
pub const INDEX_ANNOTATION: &str = "jr2.dev/record-index";
/// The label every shard carries (how gc lists them).
pub const SHARD_LABEL: &str = "jr2.dev/record-shard";
/// Shard ConfigMaps are named this and the first 40 hex digits of their content's sha256.
pub const SHARD_PREFIX: &str = "meshtop-record-";
/// The key of a shard's one data entry.
pub const SHARD_KEY: &str = "team.json";
/// The most a shard holds: half the 1 MiB the API server allows a ConfigMap's data
/// (`pkg/apis/core/validation/validation.go`, ValidateConfigMap against `core.MaxSecretSize`), so
/// one module's entry, pin and history can never push a shard over.
pub const SHARD_BYTES: usize = 512 * 1024;
/// A shard is cut at a module whose name's hash says so once it holds this much: the cuts depend on
/// the modules' names, not on what came before, so a stamp rewrites only the shards it changed.
pub(super) const SHARD_CUT_AFTER: usize = 64 * 1024;
/// Who wrote (or last reused) a shard, and when (milliseconds since the epoch).
pub const SHARD_WRITTEN_BY: &str = "jr2.dev/written-by";
pub const SHARD_WRITTEN_AT: &str = "jr2.dev/written-at-ms";
/// gc keeps a shard no index names for this long after it was written or reused: a stamp in flight
/// (its shards written, its index not yet) never loses them. Ten minutes: a stamp writes its shards
/// and its index within seconds; the margin covers clocks that disagree between machines.
pub const SHARD_GRACE_MS: i64 = 10 * 60 * 1000;
/// How often a read follows a newer index after a shard it named was taken by gc.
pub(super) const READ_ATTEMPTS: u32 = 3;
/// Shards read at once.
const READS_IN_FLIGHT: usize = 8;

/// One shard as the index names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardRef {
    pub name: String,
    /// `sha256:<hex>` of the shard's data.
    pub digest: String,
    /// A history shard's first module (in name order): it holds the history of the modules from
    /// there to the next history shard's first. Absent on the record's shards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<String>,
}

/// The index on the namespace: the record's shards (entries and pins), and the history's shards
/// apart, so that what decides (converge, plan, status) reads the entries without ten stamps a
/// module. An index written before the history had shards of its own has no `history` (the text
/// is then byte-for-byte as it was): its history is in the record's shards, and reads from there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordIndex {
    /// The index's format ([`INDEX_FORMAT`] when this meshtop writes it; 1 for an index written
    /// before the format was named). A meshtop that meets a newer one reads what it understands and
    /// stamps nothing: a field it does not know would be dropped by its write.
    #[serde(default = "first_format")]
    pub format: u32,
    pub shards: Vec<ShardRef>,
    /// The history's shards, in module order (each names its first module).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<ShardRef>,
}

/// The format this meshtop reads and writes: 2, the history's shards apart (`history`). Format 1
/// (no `format` key) is read and rewritten as 2 by the next stamp. docs/targets-kubernetes.md
/// describes both for other tools.
pub const INDEX_FORMAT: u32 = 2;

fn first_format() -> u32 {
    1
}

impl Default for RecordIndex {
    fn default() -> RecordIndex {
        RecordIndex {
            format: INDEX_FORMAT,
            shards: Vec::new(),
            history: Vec::new(),
        }
    }
}

impl RecordIndex {
    /// The names of every shard the index names: the record's and the history's.
    pub fn names(&self) -> BTreeSet<&str> {
        self.shards
            .iter()
            .chain(&self.history)
            .map(|s| s.name.as_str())
            .collect()
    }

    /// How many shards the index names in all.
    pub fn len(&self) -> usize {
        self.shards.len() + self.history.len()
    }

    /// Whether the index names no shard.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A part of the record, pins and history: the modules of one shard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardContent {
    pub images: Record,
    #[serde(default)]
    pub pins: BTreeMap<String, Pin>,
    #[serde(default)]
    pub history: StampsByModule,
}

/// A shard ready to write: its name, digest and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ShardText {
    pub shard: ShardRef,
    pub text: String,
}

/// What is wrong with a shard the index names.
#[derive(Debug, thiserror::Error)]
pub enum ShardProblem {
    #[error("is missing (an index named it, and a newer index named it too)")]
    Missing,
    #[error("has no data key {SHARD_KEY:?}")]
    NoData,
    #[error(
        "does not match its digest in the index: the index says {expected}, its data hashes to {found}"
    )]
    DigestMismatch { expected: String, found: String },
    #[error("is not a part of a record ({0})")]
    NotJson(serde_json::Error),
}

/// The digest of a shard's text, as the index names it.
pub fn shard_digest(text: &str) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
}

fn shard_of(content: &ShardContent) -> Result<ShardText, serde_json::Error> {
    shard_named(content, None)
}

fn shard_named(
    content: &ShardContent,
    first: Option<String>,
) -> Result<ShardText, serde_json::Error> {
    let text = serde_json::to_string(content)?;
    let digest = shard_digest(&text);
    let name = format!(
        "{SHARD_PREFIX}{}",
        &digest["sha256:".len().."sha256:".len() + 40]
    );
    Ok(ShardText {
        shard: ShardRef {
            name,
            digest,
            first,
        },
        text,
    })
}

/// Whether a shard may end after `module` (about one module in 16, by its name's hash).
fn cut_after(module: &str) -> bool {
    Sha256::digest(module.as_bytes())[0] & 0x0f == 0
}

/// Split the record, the pins and the history into shards by module, in name order.
pub(super) fn split(
    record: &Record,
    pins: &BTreeMap<String, Pin>,
    history: &StampsByModule,
) -> Result<Vec<ShardText>, serde_json::Error> {
    parts(record, pins, history)?
        .iter()
        .map(|(_, content)| shard_of(content))
        .collect()
}

/// Split the history alone into the history's shards, each naming its first module.
pub(super) fn split_history(history: &StampsByModule) -> Result<Vec<ShardText>, serde_json::Error> {
    parts(&Record::new(), &BTreeMap::new(), history)?
        .into_iter()
        .map(|(first, content)| shard_named(&content, Some(first)))
        .collect()
}

/// The parts of a split, each with its first module.
fn parts(
    record: &Record,
    pins: &BTreeMap<String, Pin>,
    history: &StampsByModule,
) -> Result<Vec<(String, ShardContent)>, serde_json::Error> {
    let modules: BTreeSet<&String> = record
        .keys()
        .chain(pins.keys())
        .chain(history.keys())
        .collect();
    let mut parts = Vec::new();
    let mut current = ShardContent::default();
    let mut first = String::new();
    let mut size = 0;
    for module in modules {
        let mut piece = module.len() * 3 + 16;
        if let Some(entry) = record.get(module) {
            piece += serde_json::to_string(entry)?.len();
        }
        if let Some(pin) = pins.get(module) {
            piece += serde_json::to_string(pin)?.len();
        }
        if let Some(stamps) = history.get(module) {
            piece += serde_json::to_string(stamps)?.len();
        }
        if size > 0 && size + piece > SHARD_BYTES {
            parts.push((std::mem::take(&mut first), std::mem::take(&mut current)));
            size = 0;
        }
        if size == 0 {
            first = module.clone();
        }
        if let Some(entry) = record.get(module) {
            current.images.insert(module.clone(), entry.clone());
        }
        if let Some(pin) = pins.get(module) {
            current.pins.insert(module.clone(), pin.clone());
        }
        if let Some(stamps) = history.get(module) {
            current.history.insert(module.clone(), stamps.clone());
        }
        size += piece;
        if size >= SHARD_CUT_AFTER && cut_after(module) {
            parts.push((std::mem::take(&mut first), std::mem::take(&mut current)));
            size = 0;
        }
    }
    if size > 0 {
        parts.push((first, current));
    }
    Ok(parts)
}

/// The position in `refs` (the history's shards, in module order) of the shard that holds, or
/// would take, `module`'s history: the last whose first module is not after it (the first shard
/// for a module before them all). None when there are no shards.
pub(super) fn holder(refs: &[ShardRef], module: &str) -> Option<usize> {
    if refs.is_empty() {
        return None;
    }
    let after = refs.partition_point(|r| r.first.as_deref().unwrap_or_default() <= module);
    Some(after.saturating_sub(1))
}

/// The shards' parts as one record, pins and history (the tests join what a split made).
#[cfg(test)]
pub(crate) fn join(parts: Vec<ShardContent>) -> ShardContent {
    let mut whole = ShardContent::default();
    for part in parts {
        whole.images.extend(part.images);
        whole.pins.extend(part.pins);
        whole.history.extend(part.history);
    }
    whole
}

/// What reading the shards cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadCost {
    /// Objects asked of the API server (the namespace, then every shard not already read: see
    /// [`ShardsSeen`]).
    pub objects: usize,
    /// Bytes of annotations and shard data they answered.
    pub bytes: usize,
}

/// Whether the shards could be read whole: their parts joined, the bytes of their data (read now
/// or before), and what was asked of the API server for them.
pub(super) enum ShardsRead {
    Whole(ShardContent, usize, ReadCost),
    /// A shard the index named is gone (gc took it after a newer index was written): read again.
    Gone(String),
}

/// The shards this connection read and verified, by name. A shard never changes (immutable, named
/// by the hash of its content), so one whose digest an index still names is not asked for again:
/// a dashboard polling an unchanged record asks for the namespace alone, and a changed one for
/// the shards that changed. Only the shards the newest index read names are kept.
#[derive(Default)]
pub(crate) struct ShardsSeen {
    by_name: HashMap<String, SeenShard>,
}

/// The shards a fetch read (each with the bytes of its data), or the one that was gone.
enum Fetched {
    Read(Vec<(Arc<ShardContent>, usize)>),
    Gone(String),
}

struct SeenShard {
    digest: String,
    content: Arc<ShardContent>,
    bytes: usize,
}

impl ShardsSeen {
    fn get(&self, shard: &ShardRef) -> Option<(Arc<ShardContent>, usize)> {
        self.by_name
            .get(&shard.name)
            .filter(|seen| seen.digest == shard.digest)
            .map(|seen| (seen.content.clone(), seen.bytes))
    }

    /// Forget every shard `index` does not name.
    pub(super) fn keep_only(&mut self, index: &RecordIndex) {
        let named = index.names();
        self.by_name.retain(|name, _| named.contains(name.as_str()));
    }
}

impl Cluster {
    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// The shards seen, locked (a poisoned lock only means another read panicked: what it holds
    /// was verified whole before it went in).
    pub(super) fn seen(&self) -> std::sync::MutexGuard<'_, ShardsSeen> {
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Read the shards `refs` names (of one index), verifying each against its digest; a shard
    /// this connection already read under the same digest is not asked for again.
    pub(super) async fn read_shards(&self, refs: &[ShardRef]) -> Result<ShardsRead, ClusterError> {
        let known: Vec<Option<(Arc<ShardContent>, usize)>> = {
            let seen = self.seen();
            refs.iter().map(|shard| seen.get(shard)).collect()
        };
        let wanted: Vec<ShardRef> = refs
            .iter()
            .zip(&known)
            .filter(|(_, known)| known.is_none())
            .map(|(shard, _)| shard.clone())
            .collect();
        let fetched = match self.fetch_shards(wanted).await? {
            Fetched::Read(fetched) => fetched,
            Fetched::Gone(gone) => return Ok(ShardsRead::Gone(gone)),
        };
        let mut cost = ReadCost::default();
        let mut fresh = fetched.into_iter();
        let mut whole = ShardContent::default();
        let mut bytes = 0;
        for known in known {
            let (part, size) = match known {
                Some(known) => known,
                None => {
                    let Some((part, size)) = fresh.next() else {
                        break;
                    };
                    cost.objects += 1;
                    cost.bytes += size;
                    (part, size)
                }
            };
            bytes += size;
            whole.images.extend(part.images.clone());
            whole.pins.extend(part.pins.clone());
            whole.history.extend(part.history.clone());
        }
        Ok(ShardsRead::Whole(whole, bytes, cost))
    }

    /// GET the shards `wanted` names (8 at a time), verify each and keep it as seen.
    async fn fetch_shards(&self, wanted: Vec<ShardRef>) -> Result<Fetched, ClusterError> {
        let api = self.config_maps();
        let got: Vec<(ShardRef, Option<ConfigMap>)> = stream::iter(wanted)
            .map(|shard| {
                let api = api.clone();
                async move {
                    let what = format!(
                        "get configmap {} in namespace {}",
                        shard.name, self.namespace
                    );
                    let map = self.call(what, api.get_opt(&shard.name)).await?;
                    Ok::<_, ClusterError>((shard, map))
                }
            })
            .buffered(READS_IN_FLIGHT)
            .try_collect()
            .await?;
        let mut parts = Vec::with_capacity(got.len());
        for (shard, map) in got {
            let Some(map) = map else {
                return Ok(Fetched::Gone(shard.name));
            };
            let text = map
                .data
                .as_ref()
                .and_then(|d| d.get(SHARD_KEY))
                .ok_or_else(|| self.shard_error(&shard.name, ShardProblem::NoData))?;
            let found = shard_digest(text);
            if found != shard.digest {
                return Err(self.shard_error(
                    &shard.name,
                    ShardProblem::DigestMismatch {
                        expected: shard.digest.clone(),
                        found,
                    },
                ));
            }
            let part: ShardContent = serde_json::from_str(text)
                .map_err(|e| self.shard_error(&shard.name, ShardProblem::NotJson(e)))?;
            let part = Arc::new(part);
            self.seen().by_name.insert(
                shard.name.clone(),
                SeenShard {
                    digest: shard.digest.clone(),
                    content: part.clone(),
                    bytes: text.len(),
                },
            );
            parts.push((part, text.len()));
        }
        Ok(Fetched::Read(parts))
    }

    pub(super) fn shard_error(&self, shard: &str, problem: ShardProblem) -> ClusterError {
        ClusterError::RecordShard {
            namespace: self.namespace.clone(),
            shard: shard.to_string(),
            problem,
        }
    }

    /// Write the shards the index does not name yet (the others are there: their names are their
    /// content), each with the time it was written. A shard already there under its name is the
    /// same content: its time is renewed instead (metadata may change on an immutable ConfigMap,
    /// data may not), and one gc takes in between is created again. `held` is what this stamp
    /// wrote or renewed and when, across its attempts: a shard held within `fresh_ms` is not asked
    /// again (a stamp retried after a conflict rewrites none of its own shards: no renewal, no
    /// `patch` needed). Called again just before the index switches (see
    /// [`Cluster::stamp_team`]): every shard the new index names then carries a time within the
    /// grace, or gc's delete of it fails its precondition ([`Cluster::unnamed_shards`]).
    pub(super) async fn hold_shards(
        &self,
        shards: &[ShardText],
        already: &RecordIndex,
        operation_id: &str,
        held: &mut BTreeMap<String, i64>,
        fresh_ms: i64,
    ) -> Result<(), ClusterError> {
        let named = already.names();
        for shard in shards
            .iter()
            .filter(|s| !named.contains(s.shard.name.as_str()))
        {
            let at = crate::timefmt::now_ms();
            if held
                .get(&shard.shard.name)
                .is_some_and(|then| at.saturating_sub(*then) < fresh_ms)
            {
                continue;
            }
            self.hold_shard(shard, operation_id).await?;
            held.insert(shard.shard.name.clone(), at);
        }
        Ok(())
    }

    /// When the oldest of the shards `already` does not name was last held by this stamp.
    pub(super) fn held_since(
        shards: &[ShardText],
        already: &RecordIndex,
        held: &BTreeMap<String, i64>,
    ) -> i64 {
        let named = already.names();
        shards
            .iter()
            .filter(|s| !named.contains(s.shard.name.as_str()))
            .filter_map(|s| held.get(&s.shard.name).copied())
            .min()
            .unwrap_or_else(crate::timefmt::now_ms)
    }

    /// Create one shard, or renew its time when it is there; `true` when it was created.
    async fn hold_shard(
        &self,
        shard: &ShardText,
        operation_id: &str,
    ) -> Result<bool, ClusterError> {
        let api = self.config_maps();
        let name = &shard.shard.name;
        let mut last = None;
        for _ in 0..READ_ATTEMPTS {
            let now = crate::timefmt::now_ms().to_string();
            let map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    labels: Some(BTreeMap::from([(
                        SHARD_LABEL.to_string(),
                        "true".to_string(),
                    )])),
                    annotations: Some(BTreeMap::from([
                        (SHARD_WRITTEN_BY.to_string(), operation_id.to_string()),
                        (SHARD_WRITTEN_AT.to_string(), now.clone()),
                    ])),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([(
                    SHARD_KEY.to_string(),
                    shard.text.clone(),
                )])),
                immutable: Some(true),
                ..ConfigMap::default()
            };
            let what = format!("create configmap {name} in namespace {}", self.namespace);
            match self.timed(api.create(&PostParams::default(), &map)).await {
                Err(()) => return Err(self.timeout_error(what)),
                Ok(Ok(_)) => return Ok(true),
                Ok(Err(e)) if status_code(&e) == Some(409) => {}
                Ok(Err(e)) => return Err(self.api_error(what, e)),
            }
            // There under its name: the same content. Named by no index, it may be gc's next.
            let renew = serde_json::json!({"metadata": {"annotations": {
                SHARD_WRITTEN_BY: operation_id,
                SHARD_WRITTEN_AT: now,
            }}});
            let what = format!("patch configmap {name} in namespace {}", self.namespace);
            let patched = self
                .timed(api.patch(name, &PatchParams::default(), &Patch::Merge(&renew)))
                .await;
            match patched {
                Err(()) => return Err(self.timeout_error(what)),
                Ok(Ok(_)) => return Ok(false),
                // gc took it between our create and our renewal: create it again.
                Ok(Err(e)) if status_code(&e) == Some(404) => last = Some(self.api_error(what, e)),
                Ok(Err(e)) => return Err(self.api_error(what, e)),
            }
        }
        Err(last.unwrap_or_else(|| self.shard_error(name, ShardProblem::Missing)))
    }

    /// The index the namespace names now (empty when it has none, or no namespace). An index
    /// that cannot be read is an error: nothing is taken by what cannot tell what it keeps.
    async fn current_index(&self) -> Result<RecordIndex, ClusterError> {
        let namespace = self
            .call(
                format!("get namespace {}", self.namespace),
                Api::<Namespace>::all(self.client.clone()).get_opt(&self.namespace),
            )
            .await?;
        let text = namespace
            .as_ref()
            .and_then(|n| n.metadata.annotations.as_ref())
            .and_then(|a| a.get(INDEX_ANNOTATION));
        match text {
            None => Ok(RecordIndex::default()),
            Some(text) => serde_json::from_str(text).map_err(|e| ClusterError::Config {
                context: Some(self.context.clone()),
                source: format!(
                    "the record's index on namespace {:?} (annotation {INDEX_ANNOTATION}) is unreadable ({e}); no shard is removed until it is mended",
                    self.namespace
                )
                .into(),
            }),
        }
    }

    /// The shards no index names (neither `keep` nor the namespace's index, read after the list)
    /// whose time is older than the grace. How the age is measured, and why a shard a stamper
    /// still holds is never among them:
    /// - `now` is taken before the list, so no shard looks older than it was when listed;
    /// - the index is read after the list: a shard an index switched before that read names is
    ///   kept; one an index switches to later was renewed by its stamper just before its switch
    ///   ([`Cluster::hold_shards`]), so either the list shows that fresh time (young: kept), or the
    ///   renewal came after the list and changed the shard's resourceVersion, which the delete's
    ///   precondition then refuses ([`Cluster::remove_shard`]). Only a stamper whose switch lands
    ///   more than the grace after its renewal can lose a shard, and it writes them again then.
    ///
    /// Times are each writer's clock against this reader's: the grace's margin covers clocks
    /// that disagree by minutes.
    pub async fn unnamed_shards(
        &self,
        keep: &RecordIndex,
        grace_ms: i64,
    ) -> Result<Vec<UnnamedShard>, ClusterError> {
        let now = crate::timefmt::now_ms();
        let listed = self
            .call(
                format!("list configmaps in namespace {}", self.namespace),
                self.config_maps()
                    .list_metadata(&ListParams::default().labels(SHARD_LABEL)),
            )
            .await?;
        let current = self.current_index().await?;
        // The record's shards and the history's: gc keeps both lists of both indexes.
        let mut kept = keep.names();
        kept.extend(current.names());
        Ok(listed
            .items
            .into_iter()
            .filter_map(|map| unnamed(map.metadata, now, grace_ms.max(0), &kept))
            .collect())
    }

    /// Delete one shard [`Cluster::unnamed_shards`] found, only while it is as listed (its
    /// resourceVersion the precondition: a renewal since makes the API server refuse, 409).
    pub async fn remove_shard(&self, shard: &UnnamedShard) -> Result<ShardRemoval, ClusterError> {
        let what = format!(
            "delete configmap {} in namespace {}",
            shard.name, self.namespace
        );
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: shard.resource_version.clone(),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self
            .timed(self.config_maps().delete(&shard.name, &params))
            .await
        {
            Err(()) => Err(self.timeout_error(what)),
            Ok(Ok(_)) => Ok(ShardRemoval::Removed),
            Ok(Err(e)) if status_code(&e) == Some(404) => Ok(ShardRemoval::AlreadyGone),
            Ok(Err(e)) if status_code(&e) == Some(409) => Ok(ShardRemoval::Renewed),
            Ok(Err(e)) => Err(self.api_error(what, e)),
        }
    }

    /// Remove every shard no index names (neither `keep` nor the namespace's) but those written or
    /// renewed within the grace ([`SHARD_GRACE_MS`]: a stamp in flight, its index not written
    /// yet). A stamp runs it after its index is written; a shard a reader was about to read is
    /// read again through the newer index. Returns how many were removed.
    pub async fn gc_shards(&self, keep: &RecordIndex) -> Result<usize, ClusterError> {
        let mut removed = 0;
        for shard in self.unnamed_shards(keep, self.shard_grace_ms).await? {
            if self.remove_shard(&shard).await? == ShardRemoval::Removed {
                removed += 1;
            }
        }
        Ok(removed)
    }

    /// The grace gc keeps unnamed shards for, on this cluster.
    pub fn shard_grace_ms(&self) -> i64 {
        self.shard_grace_ms
    }

    /// After the index switched, when the switch landed more than the grace after the shards were
    /// last held: the shards this stamp wrote are there still, or are written again.
    pub(super) async fn reassert_shards(
        &self,
        shards: &[ShardText],
        before: &RecordIndex,
        operation_id: &str,
    ) -> Result<(), ClusterError> {
        let api = self.config_maps();
        let named = before.names();
        let mut gone = Vec::new();
        for shard in shards
            .iter()
            .filter(|s| !named.contains(s.shard.name.as_str()))
        {
            let what = format!(
                "get configmap {} in namespace {}",
                shard.shard.name, self.namespace
            );
            if self
                .call(what, api.get_metadata_opt(&shard.shard.name))
                .await?
                .is_none()
            {
                gone.push(shard.clone());
            }
        }
        if !gone.is_empty() {
            tracing::warn!(
                "{} shard(s) of the record were taken before its index named them; written again",
                gone.len()
            );
            self.hold_shards(
                &gone,
                &RecordIndex::default(),
                operation_id,
                &mut BTreeMap::new(),
                0,
            )
            .await?;
        }
        Ok(())
    }
}

/// A shard no index names, old enough for gc.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnnamedShard {
    pub name: String,
    /// The operation that wrote or last renewed it.
    pub written_by: String,
    /// How old its time was when listed, in milliseconds.
    pub age_ms: i64,
    /// The resourceVersion listed: its delete's precondition.
    resource_version: Option<String>,
}

/// What a shard's delete did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardRemoval {
    Removed,
    AlreadyGone,
    /// A stamper renewed it after it was listed (the delete's precondition failed): kept.
    Renewed,
}

/// The shard a listed ConfigMap's metadata describes, when it is one no index names and older
/// than the grace.
fn unnamed(
    meta: ObjectMeta,
    now: i64,
    grace_ms: i64,
    kept: &BTreeSet<&str>,
) -> Option<UnnamedShard> {
    let name = meta.name?;
    if kept.contains(name.as_str()) || !name.starts_with(SHARD_PREFIX) {
        return None;
    }
    let annotations = meta.annotations.unwrap_or_default();
    let written_at: i64 = annotations
        .get(SHARD_WRITTEN_AT)
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    let age_ms = now.saturating_sub(written_at);
    if age_ms < grace_ms {
        return None;
    }
    Some(UnnamedShard {
        name,
        written_by: annotations
            .get(SHARD_WRITTEN_BY)
            .cloned()
            .unwrap_or_default(),
        age_ms,
        resource_version: meta.resource_version,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::mesh::model::RecordEntry;

    fn record(n: usize) -> Record {
        (0..n)
            .map(|i| {
                (
                    format!("module-{i:05}"),
                    RecordEntry::new(
                        format!("registry.example/m{i}:{:040}", i),
                        format!("sha256:{i:064}"),
                    ),
                )
            })
            .collect()
    }

    #[test]
    fn shards_join_back_to_the_whole_and_stay_under_the_limit() {
        let whole = record(10_000);
        let shards = split(&whole, &BTreeMap::new(), &StampsByModule::new()).unwrap();
        assert!(shards.len() > 1, "{} shards", shards.len());
        assert!(shards.iter().all(|s| s.text.len() <= SHARD_BYTES));
        let parts = shards
            .iter()
            .map(|s| serde_json::from_str(&s.text).unwrap())
            .collect();
        assert_eq!(join(parts).images, whole);
    }

    #[test]
    fn one_changed_module_rewrites_one_shard() {
        let mut whole = record(10_000);
        let before = split(&whole, &BTreeMap::new(), &StampsByModule::new()).unwrap();
        whole.insert(
            "module-05000".into(),
            RecordEntry::new("registry.example/x:y".into(), "sha256:ff".into()),
        );
        let after = split(&whole, &BTreeMap::new(), &StampsByModule::new()).unwrap();
        let old: BTreeSet<_> = before.iter().map(|s| &s.shard.name).collect();
        let new: Vec<_> = after
            .iter()
            .filter(|s| !old.contains(&s.shard.name))
            .collect();
        assert_eq!(
            new.len(),
            1,
            "{} of {} shards changed",
            new.len(),
            after.len()
        );
    }

    #[test]
    fn the_history_of_a_module_is_held_by_the_last_shard_starting_at_or_before_it() {
        let history: StampsByModule = (0..3_000)
            .map(|i| (format!("module-{i:05}"), Vec::new()))
            .collect();
        let mut padded = history.clone();
        // Enough bytes a module for several shards.
        let stamp = crate::mesh::pin::Stamp {
            module: "m".into(),
            from_ref: None,
            from_digest: None,
            to_ref: "r".repeat(200),
            to_digest: "d".into(),
            by: crate::mesh::pin::Stamper {
                operation_id: "op".into(),
                kind: crate::mesh::operation::OperationKind::Converge,
                short: Some(1),
                host: "h".into(),
                pid: 1,
                at_ms: 1,
                from_target: None,
            },
        };
        for stamps in padded.values_mut() {
            *stamps = vec![stamp.clone(); 3];
        }
        let shards = split_history(&padded).unwrap();
        assert!(shards.len() > 2, "{} shards", shards.len());
        let refs: Vec<ShardRef> = shards.iter().map(|s| s.shard.clone()).collect();
        for (at, shard) in shards.iter().enumerate() {
            let content: ShardContent = serde_json::from_str(&shard.text).unwrap();
            assert_eq!(
                refs[at].first.as_deref(),
                content.history.keys().next().map(String::as_str)
            );
            for module in content.history.keys() {
                assert_eq!(holder(&refs, module), Some(at), "{module}");
            }
        }
        // A module before them all goes to the first; after them all, to the last; none without shards.
        assert_eq!(holder(&refs, "a"), Some(0));
        assert_eq!(holder(&refs, "zzz"), Some(refs.len() - 1));
        assert_eq!(holder(&[], "module-00001"), None);
        assert_eq!(history.len(), 3_000);
    }
}
