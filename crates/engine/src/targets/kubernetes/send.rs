//! A send on Kubernetes: the workload's container image patched to `ref@digest` (guarded by the
//! image it was listed with), then its roll-out followed to done or to a diagnosed failure.

use std::sync::Mutex;

use crate::backends::cluster::{FollowRules, Workload};
use crate::backends::state::StateDb;
use crate::error::TargetError;
use crate::mesh::machine::Move;
use crate::mesh::model::{Mesh, RecordEntry};
use crate::progress::{Emitter, Payload};
use crate::targets::Delivery;

use super::{Kube, KubeError};

impl Kube {
    /// Patch the workload (guarded by the image it was listed with), then follow its roll-out.
    pub(super) async fn send_one(
        &self,
        mesh: &Mesh,
        db: &Mutex<StateDb>,
        moved: &Move,
        emitter: &Emitter,
    ) -> Result<(), TargetError> {
        let find = |workloads: &[Workload]| {
            workloads
                .iter()
                .find(|w| w.kind.as_str() == moved.kind.as_str() && w.name == moved.machine)
                .cloned()
        };
        let seen = self.workloads.lock().ok().and_then(|w| find(&w));
        let workload = match seen {
            Some(w) => w,
            None => {
                let listed = self.cluster.machines().await?;
                find(&listed).ok_or_else(|| KubeError::MachineGone {
                    kind: moved.kind.clone(),
                    machine: moved.machine.clone(),
                    place: self.cluster.place(),
                })?
            }
        };
        let entry = RecordEntry::new(moved.to_reference.clone(), moved.to_digest.clone())
            .with_manifest(moved.to_manifest.clone(), None);
        let (to_image, artifact) = match self.delivery_here()? {
            Delivery::Push(registry) => {
                match self.manifest_of(mesh, db, &moved.module, &entry).await? {
                    Some(digest) => (format!("{}@{digest}", entry.reference), None),
                    None => {
                        return Err(KubeError::NotPublished {
                            reference: entry.reference,
                            registry: registry.host,
                            module: moved.module.clone(),
                        }
                        .into());
                    }
                }
            }
            Delivery::KindLoad(_) | Delivery::Host => {
                (entry.reference.clone(), Some(entry.digest.as_str()))
            }
        };
        self.cluster.send(&workload, &to_image, artifact).await?;
        let rollout = || Payload::Rollout {
            machine: workload.to_string(),
        };
        emitter.emit(
            rollout(),
            Some(&moved.module),
            format!("{workload}: image {to_image}; following the roll-out"),
        );
        // kubectl's own words as progress; a failure carries its evidence in its message.
        let said = |message: &str| {
            emitter.emit(
                rollout(),
                Some(&moved.module),
                format!("{workload}: {message}"),
            );
        };
        let rules = match mesh.module(&moved.module) {
            Some(module) => FollowRules {
                restarts: module.backoff.restarts,
                backoff: module.backoff.persists,
                ..self.rollout
            },
            None => self.rollout,
        };
        let done = self.cluster.follow_rollout(&workload, rules, &said).await?;
        // kubectl says done for whatever the template names now: the machine is judged by what runs.
        match done.image {
            Some(image) if image != to_image => Err(KubeError::Reverted {
                image,
                workload: workload.to_string(),
                sent: to_image,
            }
            .into()),
            _ => Ok(()),
        }
    }
}
