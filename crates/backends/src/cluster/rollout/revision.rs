//! Which pods belong to the revision being rolled out, as each workload kind names it, and what a
//! workload's template says.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;

use super::DEFAULT_PROGRESS_DEADLINE;
use crate::cluster::judge::{self, Verdict};
use crate::cluster::machines::{Kind, Workload};
use crate::cluster::{Cluster, ClusterError};

/// The label of a Deployment's pods naming their ReplicaSet's template (`pod-template-hash`).
pub(super) const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The label of StatefulSet and DaemonSet pods naming their ControllerRevision.
pub(super) const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";
/// The Deployment controller's revision annotation, on the Deployment and its ReplicaSets.
pub(super) const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";

/// Which pods belong to the revision being rolled out, as the workload names it.
pub(super) enum NewRevision {
    /// A Deployment: its ReplicaSet with this revision annotation (None: the newest), owned by this uid.
    ReplicaSet {
        revision: Option<String>,
        uid: Option<String>,
    },
    /// A StatefulSet: pods whose `controller-revision-hash` is `status.updateRevision`.
    Label(String),
    /// A DaemonSet: its newest ControllerRevision, owned by this uid.
    NewestControllerRevision { uid: Option<String> },
}

pub(super) trait Rolls: Kind {
    fn verdict(&self) -> Verdict;
    fn paused(&self) -> bool {
        self.shape().paused
    }
    fn new_revision(&self) -> Option<NewRevision>;
    fn progress_deadline(&self) -> Duration {
        DEFAULT_PROGRESS_DEADLINE
    }
    fn replicas(&self) -> i32 {
        self.shape().replicas
    }
}

pub(super) fn uid(metadata: &ObjectMeta) -> Option<String> {
    metadata.uid.clone()
}

impl Rolls for Deployment {
    fn verdict(&self) -> Verdict {
        judge::deployment(self)
    }
    fn new_revision(&self) -> Option<NewRevision> {
        Some(NewRevision::ReplicaSet {
            revision: self
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION_ANNOTATION))
                .cloned(),
            uid: uid(&self.metadata),
        })
    }
    fn progress_deadline(&self) -> Duration {
        self.spec
            .as_ref()
            .and_then(|s| s.progress_deadline_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(DEFAULT_PROGRESS_DEADLINE, Duration::from_secs)
    }
}

impl Rolls for StatefulSet {
    fn verdict(&self) -> Verdict {
        judge::statefulset(self)
    }
    fn new_revision(&self) -> Option<NewRevision> {
        self.status
            .as_ref()
            .and_then(|s| s.update_revision.clone())
            .filter(|r| !r.is_empty())
            .map(NewRevision::Label)
    }
}

impl Rolls for DaemonSet {
    fn verdict(&self) -> Verdict {
        judge::daemonset(self)
    }
    fn new_revision(&self) -> Option<NewRevision> {
        Some(NewRevision::NewestControllerRevision {
            uid: uid(&self.metadata),
        })
    }
}

/// Is this object controlled by the workload (by uid when known, else by kind and name)?
pub(super) fn owned_by(metadata: &ObjectMeta, kind: &str, name: &str, uid: Option<&str>) -> bool {
    metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| match uid {
            Some(uid) => o.uid == uid,
            None => o.kind == kind && o.name == name,
        })
}

/// The image the workload's template names for `container`.
pub(super) fn template_image<K: Kind>(object: &K, container: &str) -> Option<String> {
    let shape = object.shape();
    let spec = shape.template?.spec.as_ref()?;
    spec.containers
        .iter()
        .find(|c| c.name == container)?
        .image
        .clone()
}

pub(super) fn revision_number(metadata: &ObjectMeta) -> i64 {
    metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION_ANNOTATION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

impl Cluster {
    /// The label selecting the pods of the revision being rolled out, when it exists yet.
    pub(super) async fn new_revision_label(
        &self,
        w: &Workload,
        revision: &NewRevision,
    ) -> Result<Option<(&'static str, String)>, ClusterError> {
        let Some(selector) = &w.selector else {
            return Ok(None);
        };
        let params = ListParams::default().labels(selector);
        match revision {
            NewRevision::Label(value) => Ok(Some((CONTROLLER_REVISION_HASH, value.clone()))),
            NewRevision::ReplicaSet { revision, uid } => {
                let sets = self.list_all::<ReplicaSet>(&params).await?;
                let owned = sets
                    .iter()
                    .filter(|rs| owned_by(&rs.metadata, "Deployment", &w.name, uid.as_deref()));
                let new = match revision {
                    Some(r) => owned
                        .filter(|rs| {
                            rs.metadata
                                .annotations
                                .as_ref()
                                .and_then(|a| a.get(REVISION_ANNOTATION))
                                == Some(r)
                        })
                        .max_by_key(|rs| revision_number(&rs.metadata)),
                    None => owned.max_by_key(|rs| revision_number(&rs.metadata)),
                };
                Ok(new
                    .and_then(|rs| rs.metadata.labels.as_ref()?.get(POD_TEMPLATE_HASH).cloned())
                    .map(|hash| (POD_TEMPLATE_HASH, hash)))
            }
            NewRevision::NewestControllerRevision { uid } => {
                let revisions = self.list_all::<ControllerRevision>(&params).await?;
                let newest = revisions
                    .iter()
                    .filter(|r| owned_by(&r.metadata, "DaemonSet", &w.name, uid.as_deref()))
                    .max_by_key(|r| r.revision);
                Ok(newest.and_then(|r| {
                    let hash = r
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(CONTROLLER_REVISION_HASH).cloned())
                        .or_else(|| {
                            r.metadata
                                .name
                                .as_deref()?
                                .strip_prefix(&format!("{}-", w.name))
                                .map(str::to_string)
                        })?;
                    Some((CONTROLLER_REVISION_HASH, hash))
                }))
            }
        }
    }
}
