//! The machines on Kubernetes: the mesh's labelled workloads, each judged against the record by
//! what its pods run (a pulled image's manifest digest counts as the artifact it was published as).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::backends::state::StateDb;
use crate::error::TargetError;
use crate::mesh::behind::{MachineState, machine_state};
use crate::mesh::machine::Machine;
use crate::mesh::model::{Mesh, Record};

use super::Kube;

impl Kube {
    /// The mesh's labelled workloads (≤ 5 API calls), each against the record; remembered for send.
    pub(super) async fn list(
        &self,
        mesh: &Mesh,
        record: &Record,
        db: &Mutex<StateDb>,
    ) -> Result<Vec<Machine>, TargetError> {
        let workloads = self.cluster.machines().await?;
        let workloads: Vec<_> = workloads
            .into_iter()
            .filter(|w| mesh.module(&w.module).is_some())
            .collect();
        let mut aliases: HashMap<&str, Vec<String>> = HashMap::new();
        for w in &workloads {
            if aliases.contains_key(w.module.as_str()) {
                continue;
            }
            // A pod pulled from the registry reports the manifest digest: the record's manifest
            // is the artifact too (a manifest that cannot be told reads as none: behind).
            let published = match record.get(&w.module) {
                Some(entry) => self
                    .manifest_of(mesh, db, &w.module, entry)
                    .await
                    .ok()
                    .flatten(),
                None => None,
            };
            aliases.insert(w.module.as_str(), published.into_iter().collect());
        }
        let mut machines: Vec<Machine> = workloads
            .iter()
            .filter_map(|w| {
                let module = mesh.module(&w.module)?;
                let state = machine_state(
                    &w.running_digests,
                    record.get(&w.module),
                    aliases
                        .get(w.module.as_str())
                        .map_or(&[][..], Vec::as_slice),
                    module.policy,
                );
                let state = workload_state(state, w.unknown_container.is_none(), w.paused);
                let called = format!("{}/{}", w.kind.as_str().to_lowercase(), w.name);
                Some(Machine {
                    name: w.name.clone(),
                    module: w.module.clone(),
                    kind: w.kind.as_str().to_string(),
                    before_send: (state == MachineState::Paused).then(|| self.paused_note(&called)),
                    display_name: called,
                    image: w.image.clone(),
                    running: w.running_digests.clone(),
                    state,
                    health: format!("{}/{} ready", w.ready, w.replicas),
                })
            })
            .collect();
        machines.sort_by(|a, b| (&a.module, &a.name, &a.kind).cmp(&(&b.module, &b.name, &b.kind)));
        if let Ok(mut seen) = self.workloads.lock() {
            *seen = workloads;
        }
        Ok(machines)
    }

    /// A paused workload is patched by a send but rolls nothing out until someone resumes it:
    /// what a person must know before confirming, and the command that resumes it.
    fn paused_note(&self, called: &str) -> String {
        format!(
            "paused: its image is patched, but nothing rolls out until it is resumed (kubectl rollout resume {called} -n {})",
            self.cluster.namespace
        )
    }
}

/// The state of a Kubernetes workload: `machine_state`, unless meshtop cannot tell its module's container
/// (then nothing it runs can be judged), or it is paused while behind (a send would not move it).
fn workload_state(state: MachineState, container_known: bool, paused: bool) -> MachineState {
    if !container_known {
        MachineState::UnknownContainer
    } else if paused && state.is_behind() {
        MachineState::Paused
    } else {
        state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_paused_or_unknown_container_workload_reads_so() {
        use MachineState::*;
        assert_eq!(workload_state(Behind, true, true), Paused);
        assert_eq!(workload_state(Held, true, true), Paused);
        assert_eq!(workload_state(Current, true, true), Current);
        assert_eq!(workload_state(Behind, true, false), Behind);
        assert_eq!(workload_state(Current, false, false), UnknownContainer);
        assert_eq!(Paused.to_string(), "held (paused)");
        assert!(!UnknownContainer.is_behind() && UnknownContainer.needs_attention());
    }
}
