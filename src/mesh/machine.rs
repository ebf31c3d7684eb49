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

/// What kind of machine a move moves: a container (Docker) or a workload (Kubernetes). Written as
/// before it was typed (`container`, `Deployment`, …) in JSON and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum MachineKind {
    #[serde(rename = "container")]
    Container,
    Deployment,
    StatefulSet,
    DaemonSet,
}

impl MachineKind {
    /// The kind a machine's listing names; None for a word meshtop never lists.
    pub fn of(word: &str) -> Option<MachineKind> {
        match word {
            "container" => Some(MachineKind::Container),
            "Deployment" => Some(MachineKind::Deployment),
            "StatefulSet" => Some(MachineKind::StatefulSet),
            "DaemonSet" => Some(MachineKind::DaemonSet),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MachineKind::Container => "container",
            MachineKind::Deployment => "Deployment",
            MachineKind::StatefulSet => "StatefulSet",
            MachineKind::DaemonSet => "DaemonSet",
        }
    }
}

impl std::fmt::Display for MachineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// One machine to move: from the artifact it runs to the record's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub module: String,
    pub machine: String,
    pub kind: MachineKind,
    pub from: String,
    #[serde(rename = "to_ref")]
    pub to_reference: String,
    pub to_digest: String,
    /// How the machine stands before the move (behind, held, paused, unknown container).
    pub state: MachineState,
}

impl Move {
    /// What a person must know of this move before confirming it, beyond `from → to`: a paused
    /// Deployment is patched but rolls nothing out until someone resumes it.
    pub fn before_confirm(&self, namespace: Option<&str>) -> Option<String> {
        (self.state == MachineState::Paused).then(|| {
            format!(
                "paused: its image is patched, but nothing rolls out until it is resumed (kubectl rollout resume {}/{}{})",
                self.kind.as_str().to_lowercase(),
                self.machine,
                namespace.map(|ns| format!(" -n {ns}")).unwrap_or_default()
            )
        })
    }
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
        // Every listed machine has a kind meshtop moves; a word it does not know is no move.
        .filter_map(|m| {
            Some(Move {
                module: module.to_string(),
                machine: m.name.clone(),
                kind: MachineKind::of(&m.kind)?,
                from: m.running.first().cloned().unwrap_or_default(),
                to_reference: entry.reference.clone(),
                to_digest: entry.digest.clone(),
                state: m.state,
            })
        })
        .collect()
}
