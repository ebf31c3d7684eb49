//! What the cluster must allow before anything is written: the namespace's annotations for a stamp,
//! a patch of each workload kind sent to, the pods listed to follow it; and a send refused before any
//! write when a workload's module container cannot be told.

use crate::backends::cluster::{Needed, WorkloadKind};
use crate::error::TargetError;
use crate::mesh::machine::Move;
use crate::mesh::model::{Mesh, Policy};

use super::{Kube, KubeError};

impl Kube {
    pub(super) async fn access(
        &self,
        stamps: bool,
        sends: &[WorkloadKind],
    ) -> Result<(), TargetError> {
        let mut needed = Vec::new();
        if stamps {
            needed.push(Needed::on_namespace("get", &self.cluster.namespace));
            needed.push(Needed::on_namespace("patch", &self.cluster.namespace));
        }
        let mut kinds = sends.to_vec();
        kinds.sort();
        kinds.dedup();
        for kind in kinds {
            let resource = match kind {
                WorkloadKind::Deployment => "deployments",
                WorkloadKind::StatefulSet => "statefulsets",
                WorkloadKind::DaemonSet => "daemonsets",
            };
            needed.push(Needed::namespaced("patch", "apps", resource));
        }
        if !sends.is_empty() {
            needed.push(Needed::namespaced("list", "", "pods"));
        }
        self.cluster
            .check_access(&needed)
            .await
            .map_err(TargetError::from)
    }

    pub(super) async fn converge_access(
        &self,
        mesh: &Mesh,
        modules: &[&str],
    ) -> Result<(), TargetError> {
        let rolls_out = |m: &str| {
            mesh.module(m)
                .is_some_and(|module| module.policy == Policy::Rollout)
        };
        let kinds: Vec<WorkloadKind> = if modules.iter().any(|m| rolls_out(m)) {
            self.cluster
                .machines()
                .await?
                .into_iter()
                .filter(|w| modules.contains(&w.module.as_str()) && rolls_out(&w.module))
                .map(|w| w.kind)
                .collect()
        } else {
            Vec::new()
        };
        self.access(true, &kinds).await
    }

    /// A send is refused before any write when a workload's module container cannot be told: naming
    /// its containers and the annotation to set.
    /// What a stamp and these sends need, asked before any write.
    pub(super) async fn write_access(
        &self,
        stamps: bool,
        sends: &[Move],
    ) -> Result<(), TargetError> {
        self.access(stamps, &workload_kinds(sends)).await?;
        self.refuse_unknown_containers(sends)
    }

    pub(super) fn refuse_unknown_containers(&self, moves: &[Move]) -> Result<(), TargetError> {
        let workloads = self.workloads.lock().map(|w| w.clone()).unwrap_or_default();
        let refused: Vec<String> = moves
            .iter()
            .filter_map(|m| {
                let w = workloads
                    .iter()
                    .find(|w| w.kind.as_str() == m.kind.as_str() && w.name == m.machine)?;
                let why = w.unknown_container.as_deref()?;
                Some(self.cluster.unknown_container(w, why).to_string())
            })
            .collect();
        match refused.as_slice() {
            [] => Ok(()),
            _ => Err(KubeError::UnknownContainers(refused.join("; ")).into()),
        }
    }
}

/// The workload kinds of `moves` (a container is no workload).
pub(super) fn workload_kinds(moves: &[Move]) -> Vec<WorkloadKind> {
    moves
        .iter()
        .filter_map(|m| WorkloadKind::named(&m.kind))
        .collect()
}
