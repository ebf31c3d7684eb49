//! The cluster's record: the annotation `jr2.dev/images` on the mesh's namespace.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::{Cluster, ClusterError, status_code};
use crate::mesh::model::{Record, RecordEntry};

/// The namespace annotation holding the record: JSON object module → `{"ref", "digest"}`.
pub const RECORD_ANNOTATION: &str = "jr2.dev/images";

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
}

/// Why the annotation's text is not a record.
#[derive(Debug, thiserror::Error)]
pub enum RecordTextError {
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
pub fn parse_record(text: &str) -> Result<Record, RecordTextError> {
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

    /// Read the record. An absent namespace or annotation is an empty record; an unreadable annotation is an
    /// empty record with a warning naming the namespace. Only a failing API call is an error.
    pub async fn read_record(&self) -> Result<RecordRead, ClusterError> {
        let namespace = self
            .call(
                format!("get namespace {}", self.namespace),
                self.namespaces().get_opt(&self.namespace),
            )
            .await?;
        let Some(namespace) = namespace else {
            return Ok(RecordRead::default());
        };
        let resource_version = namespace.metadata.resource_version.clone();
        let text = namespace
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(RECORD_ANNOTATION));
        let Some(text) = text else {
            return Ok(RecordRead {
                record: Record::new(),
                warning: None,
                resource_version,
            });
        };
        match parse_record(text) {
            Ok(record) => Ok(RecordRead {
                record,
                warning: None,
                resource_version,
            }),
            Err(reason) => Ok(RecordRead {
                record: Record::new(),
                warning: Some(format!(
                    "the record on namespace {:?} (annotation {RECORD_ANNOTATION}) is unreadable: {reason}; it reads as empty until a converge stamps it again",
                    self.namespace
                )),
                resource_version,
            }),
        }
    }

    /// Merge `entries` into the record and write it with the namespace's resourceVersion as a precondition;
    /// on a conflict re-read, re-merge and retry (bounded). Returns the record as written.
    pub async fn stamp_record(&self, entries: &Record) -> Result<Record, ClusterError> {
        self.stamp_record_over(entries)
            .await
            .map(|(_, written)| written)
    }

    /// As [`Cluster::stamp_record`], returning also the record the write replaced (the record's
    /// history notes from → to without a read of its own).
    pub async fn stamp_record_over(
        &self,
        entries: &Record,
    ) -> Result<(Record, Record), ClusterError> {
        for _ in 0..STAMP_ATTEMPTS {
            let read = self.read_record().await?;
            let before = read.record.clone();
            let Some(resource_version) = read.resource_version else {
                return Err(ClusterError::NamespaceMissing {
                    namespace: self.namespace.clone(),
                    context: self.context.clone(),
                });
            };
            let mut merged = read.record;
            merged.extend(entries.iter().map(|(k, v)| (k.clone(), v.clone())));
            let text = serde_json::to_string(&merged).map_err(|e| ClusterError::Config {
                context: Some(self.context.clone()),
                message: format!("cannot serialise the record: {e}"),
            })?;
            let patch = json!({
                "metadata": {
                    "resourceVersion": resource_version,
                    "annotations": { RECORD_ANNOTATION: text },
                }
            });
            let namespaces = self.namespaces();
            let patched = self
                .timed(namespaces.patch(
                    &self.namespace,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                ))
                .await
                .map_err(|()| self.timeout_error(format!("patch namespace {}", self.namespace)))?;
            match patched {
                Ok(_) => return Ok((before, merged)),
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
}
