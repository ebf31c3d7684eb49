//! The record past one object. While the record, the pins and the history fit in the namespace's
//! annotations they stay there, exactly as before (`record.rs`). Past that they move into shards:
//! ConfigMaps named by the hash of their content, immutable once written, each at most
//! [`SHARD_BYTES`] (half the API server's 1 MiB), and the namespace keeps a small index
//! (`jr2.dev/record-index`: the shards' names and digests) that a stamp switches with one write
//! guarded by the namespace's resourceVersion. Shards are written before the index names them and
//! never change, so a reader that reads the index and then the shards it names sees one stamp
//! whole; a shard gc took in between is read again through the newer index.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
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
}

/// The index on the namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordIndex {
    pub shards: Vec<ShardRef>,
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
pub struct ShardText {
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
    let text = serde_json::to_string(content)?;
    let digest = shard_digest(&text);
    let name = format!(
        "{SHARD_PREFIX}{}",
        &digest["sha256:".len().."sha256:".len() + 40]
    );
    Ok(ShardText {
        shard: ShardRef { name, digest },
        text,
    })
}

/// Whether a shard may end after `module` (about one module in 16, by its name's hash).
fn cut_after(module: &str) -> bool {
    Sha256::digest(module.as_bytes())[0] & 0x0f == 0
}

/// Split the record, the pins and the history into shards by module, in name order.
pub fn split(
    record: &Record,
    pins: &BTreeMap<String, Pin>,
    history: &StampsByModule,
) -> Result<Vec<ShardText>, serde_json::Error> {
    let modules: BTreeSet<&String> = record
        .keys()
        .chain(pins.keys())
        .chain(history.keys())
        .collect();
    let mut shards = Vec::new();
    let mut current = ShardContent::default();
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
            shards.push(shard_of(&std::mem::take(&mut current))?);
            size = 0;
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
            shards.push(shard_of(&std::mem::take(&mut current))?);
            size = 0;
        }
    }
    if size > 0 {
        shards.push(shard_of(&current)?);
    }
    Ok(shards)
}

/// The shards' parts as one record, pins and history.
pub fn join(parts: Vec<ShardContent>) -> ShardContent {
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
    /// Objects read (the namespace, then every shard).
    pub objects: usize,
    /// Bytes of annotations and shard data read.
    pub bytes: usize,
}

/// Whether the shards could be read whole.
pub(super) enum ShardsRead {
    Whole(ShardContent, usize),
    /// A shard the index named is gone (gc took it after a newer index was written): read again.
    Gone(String),
}

impl Cluster {
    fn config_maps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Read every shard the index names, verifying each against its digest.
    pub(super) async fn read_shards(
        &self,
        index: &RecordIndex,
    ) -> Result<ShardsRead, ClusterError> {
        let api = self.config_maps();
        let got: Vec<(ShardRef, Option<ConfigMap>)> = stream::iter(index.shards.iter().cloned())
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
        let mut bytes = 0;
        for (shard, map) in got {
            let Some(map) = map else {
                return Ok(ShardsRead::Gone(shard.name));
            };
            let text = map
                .data
                .as_ref()
                .and_then(|d| d.get(SHARD_KEY))
                .ok_or_else(|| self.shard_error(&shard.name, ShardProblem::NoData))?;
            bytes += text.len();
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
            parts.push(part);
        }
        Ok(ShardsRead::Whole(join(parts), bytes))
    }

    pub(super) fn shard_error(&self, shard: &str, problem: ShardProblem) -> ClusterError {
        ClusterError::RecordShard {
            namespace: self.namespace.clone(),
            shard: shard.to_string(),
            problem,
        }
    }

    /// Write the shards the index does not name yet (the others are there: their names are their
    /// content). A shard already there under its name is the same content: taken as written.
    pub(super) async fn write_shards(
        &self,
        shards: &[ShardText],
        already: &RecordIndex,
        operation_id: &str,
    ) -> Result<usize, ClusterError> {
        let api = self.config_maps();
        let named: BTreeSet<&str> = already.shards.iter().map(|s| s.name.as_str()).collect();
        let mut written = 0;
        for shard in shards
            .iter()
            .filter(|s| !named.contains(s.shard.name.as_str()))
        {
            let map = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(shard.shard.name.clone()),
                    labels: Some(BTreeMap::from([(
                        SHARD_LABEL.to_string(),
                        "true".to_string(),
                    )])),
                    annotations: Some(BTreeMap::from([
                        (SHARD_WRITTEN_BY.to_string(), operation_id.to_string()),
                        (
                            SHARD_WRITTEN_AT.to_string(),
                            crate::timefmt::now_ms().to_string(),
                        ),
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
            let what = format!(
                "create configmap {} in namespace {}",
                shard.shard.name, self.namespace
            );
            match self.timed(api.create(&PostParams::default(), &map)).await {
                Err(()) => return Err(self.timeout_error(what)),
                Ok(Ok(_)) => written += 1,
                // There under its name: the same content. Named by no index, it may be gc's next:
                // its time is renewed (metadata may change on an immutable ConfigMap, data may not).
                Ok(Err(e)) if status_code(&e) == Some(409) => {
                    let renew = serde_json::json!({"metadata": {"annotations": {
                        SHARD_WRITTEN_BY: operation_id,
                        SHARD_WRITTEN_AT: crate::timefmt::now_ms().to_string(),
                    }}});
                    let what = format!(
                        "patch configmap {} in namespace {}",
                        shard.shard.name, self.namespace
                    );
                    self.call(
                        what,
                        api.patch(
                            &shard.shard.name,
                            &PatchParams::default(),
                            &Patch::Merge(&renew),
                        ),
                    )
                    .await?;
                }
                Ok(Err(e)) => return Err(self.api_error(what, e)),
            }
        }
        Ok(written)
    }

    /// Remove every shard the index `keep` does not name, but those written or reused within
    /// [`SHARD_GRACE_MS`] (a stamp in flight: its index not written yet). A stamp runs it after its
    /// index is written; a shard a reader was about to read is read again through the newer index, and
    /// a stamper whose new shards were taken all the same writes them again
    /// ([`Cluster::reassert_shards`]). Returns how many were removed.
    pub async fn gc_shards(&self, keep: &RecordIndex) -> Result<usize, ClusterError> {
        let api = self.config_maps();
        let listed = self
            .call(
                format!("list configmaps in namespace {}", self.namespace),
                api.list_metadata(&ListParams::default().labels(SHARD_LABEL)),
            )
            .await?;
        let kept: BTreeSet<&str> = keep.shards.iter().map(|s| s.name.as_str()).collect();
        let now = crate::timefmt::now_ms();
        let mut removed = 0;
        for map in listed.items {
            let Some(name) = map.metadata.name.as_deref() else {
                continue;
            };
            if kept.contains(name) || !name.starts_with(SHARD_PREFIX) {
                continue;
            }
            let written_at: i64 = map
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(SHARD_WRITTEN_AT))
                .and_then(|t| t.parse().ok())
                .unwrap_or(0);
            if now.saturating_sub(written_at) < SHARD_GRACE_MS {
                continue;
            }
            let what = format!("delete configmap {name} in namespace {}", self.namespace);
            match self.timed(api.delete(name, &DeleteParams::default())).await {
                Err(()) => return Err(self.timeout_error(what)),
                Ok(Ok(_)) => removed += 1,
                Ok(Err(e)) if status_code(&e) == Some(404) => {}
                Ok(Err(e)) => return Err(self.api_error(what, e)),
            }
        }
        Ok(removed)
    }

    /// After the index switched: the shards this stamp wrote are there still, or are written again
    /// (another stamper's gc, run between our shards and our index, found them named by no index).
    pub(super) async fn reassert_shards(
        &self,
        shards: &[ShardText],
        before: &RecordIndex,
        operation_id: &str,
    ) -> Result<(), ClusterError> {
        let api = self.config_maps();
        let named: BTreeSet<&str> = before.shards.iter().map(|s| s.name.as_str()).collect();
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
            self.write_shards(&gone, &RecordIndex::default(), operation_id)
                .await?;
        }
        Ok(())
    }
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
}
