//! A machine: something that runs a module on the target (a container, a workload).

use serde::Serialize;

use super::behind::MachineState;
use super::model::Record;

/// Something that runs a module: a container on Docker, a workload on Kubernetes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Machine {
    pub name: String,
    pub module: String,
    /// `container`, `Deployment`, `StatefulSet` or `DaemonSet`.
    pub kind: String,
    /// The image it was created from, as its spec names it.
    pub image: String,
    /// The artifacts it runs (a container's image id; each pod's image id).
    pub running: Vec<String>,
    pub state: MachineState,
    /// How it runs: `running`, `exited (1)`, `2/3 ready`…
    pub health: String,
}

/// One machine to move: from the artifact it runs to the record's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub module: String,
    pub machine: String,
    /// `container`, `Deployment`, `StatefulSet` or `DaemonSet`.
    pub kind: String,
    pub from: String,
    #[serde(rename = "to_ref")]
    pub to_reference: String,
    pub to_digest: String,
}

/// The behind (or held) machines of `module`, and where each goes. A workload whose container meshtop
/// cannot tell is one too: its send is refused, naming its containers, never skipped in silence.
pub fn moves_for(record: &Record, machines: &[Machine], module: &str) -> Vec<Move> {
    let Some(entry) = record.get(module) else {
        return Vec::new();
    };
    machines
        .iter()
        .filter(|m| {
            m.module == module && (m.state.is_behind() || m.state == MachineState::UnknownContainer)
        })
        .map(|m| Move {
            module: module.to_string(),
            machine: m.name.clone(),
            kind: m.kind.clone(),
            from: m.running.first().cloned().unwrap_or_default(),
            to_reference: entry.reference.clone(),
            to_digest: entry.digest.clone(),
        })
        .collect()
}
