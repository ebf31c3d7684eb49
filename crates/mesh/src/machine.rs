//! A machine: something that runs a module on the target (a container, a workload).

use serde::Serialize;

use super::behind::MachineState;
use super::model::Record;

/// Something that runs a module: a container on the host daemon, a workload in a namespace. Every
/// word of it is the target's own (its kind, how a person names it, what to know before a send):
/// nothing outside the target seam tells one kind of machine from another.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Machine {
    pub name: String,
    pub module: String,
    /// What it is, in the target's word (`container`, `Deployment`, …).
    pub kind: String,
    /// How a person names it there: a container by its name, a workload as kubectl names it
    /// (`deployment/api`).
    #[serde(skip)]
    pub display_name: String,
    /// The image it was created from, as its spec names it.
    pub image: String,
    /// The artifacts it runs (a container's image id; each pod's image id).
    pub running: Vec<String>,
    pub state: MachineState,
    /// How it runs: `running`, `exited (1)`, `2/3 ready`…
    pub health: String,
    /// What a person must know before a send moves it, beyond `from → to` (a paused workload is
    /// patched but rolls nothing out until it is resumed, and how to resume it).
    #[serde(skip)]
    pub before_send: Option<String>,
}

/// One machine to move: from the artifact it runs to the record's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub module: String,
    pub machine: String,
    /// The machine's kind, in the target's word (as [`Machine::kind`]).
    pub kind: String,
    pub from: String,
    #[serde(rename = "to_ref")]
    pub to_reference: String,
    pub to_digest: String,
    /// The manifest the record names for the artifact (what a send deploys on a target that pulls
    /// from a registry); None when the record knows none.
    #[serde(rename = "to_manifest", skip_serializing_if = "Option::is_none")]
    pub to_manifest: Option<String>,
    /// The trusted key the record says signed that manifest.
    #[serde(skip)]
    pub to_signed_by: Option<String>,
    /// How the machine stands before the move (behind, held, paused, unknown container).
    pub state: MachineState,
    /// What a person must know of this move before confirming it (the machine's
    /// [`Machine::before_send`]).
    #[serde(skip)]
    pub before_send: Option<String>,
    /// How many machines its module has on the target, the missing ones not counted: what a
    /// roll-out's cap is taken of ([`side_by_side`]).
    #[serde(skip)]
    pub of_module: usize,
    /// How the target names the machine ([`Machine::display_name`]): a container's name, where a
    /// compose service's machine is named after the service.
    #[serde(skip)]
    pub display_name: String,
}

impl Move {
    /// The container (or workload) the target moves: its display name, else the machine's name.
    pub fn container(&self) -> &str {
        if self.display_name.is_empty() {
            &self.machine
        } else {
            &self.display_name
        }
    }
}

/// How many machines of a module a roll-out moves at once: its `max_unavailable`, else all but one
/// of its `machines` (and at least one), so that while the others move one still serves, as
/// Kubernetes' `maxUnavailable` keeps pods ready during a roll-out.
pub fn side_by_side(max_unavailable: Option<u32>, machines: usize) -> usize {
    match max_unavailable {
        Some(cap) => (cap as usize).max(1),
        None => machines.saturating_sub(1).max(1),
    }
}

/// The behind (or held) machines of `module`, and where each goes. A workload whose container meshtop
/// cannot tell is one too: its send is refused, naming its containers, never skipped in silence.
pub fn moves_for(record: &Record, machines: &[Machine], module: &str) -> Vec<Move> {
    let Some(entry) = record.get(module) else {
        return Vec::new();
    };
    let of_module = machines
        .iter()
        .filter(|m| m.module == module && m.state != MachineState::Missing)
        .count();
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
            to_manifest: entry.manifest.clone(),
            to_signed_by: entry.signed_by.clone(),
            state: m.state,
            before_send: m.before_send.clone(),
            of_module,
            display_name: m.display_name.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::side_by_side;

    #[test]
    fn a_roll_out_keeps_one_machine_serving_unless_told_otherwise() {
        assert_eq!(side_by_side(None, 0), 1);
        assert_eq!(side_by_side(None, 1), 1);
        assert_eq!(side_by_side(None, 2), 1);
        assert_eq!(side_by_side(None, 4), 3);
        assert_eq!(side_by_side(Some(1), 4), 1);
        assert_eq!(side_by_side(Some(4), 2), 4);
    }
}
