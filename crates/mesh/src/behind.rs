//! Machines behind: a machine's running artifact compared with the record's artifact for its
//! module — digests only, never commits or tags (DESIGN.md, "Moves follow the artifact").

use std::fmt;

use serde::Serialize;

use super::model::{Policy, RecordEntry};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MachineState {
    /// Runs the record's artifact.
    Current,
    /// Runs another artifact; a converge sends it (policy `rollout`).
    Behind,
    /// Runs another artifact and stays so until someone sends (policy `record`).
    Held,
    /// The record holds nothing for its module: nothing to be behind of.
    Unrecorded,
    /// A declared machine that does not exist on the target: not current.
    Missing,
    /// Runs another artifact on a paused Kubernetes Deployment: a send patches it, but nothing rolls out
    /// until someone resumes it (`kubectl rollout resume`).
    #[serde(rename = "paused")]
    Paused,
    /// A workload whose module container meshtop cannot tell (several containers, no annotation): neither
    /// behind nor current, and never sent to.
    #[serde(rename = "unknown_container")]
    UnknownContainer,
}

impl MachineState {
    pub fn as_str(self) -> &'static str {
        match self {
            MachineState::Current => "current",
            MachineState::Behind => "behind",
            MachineState::Held => "held",
            MachineState::Unrecorded => "unrecorded",
            MachineState::Missing => "missing",
            MachineState::Paused => "held (paused)",
            MachineState::UnknownContainer => "unknown container",
        }
    }

    /// Behind the record, whatever the policy (or a pause) says about sending.
    pub fn is_behind(self) -> bool {
        matches!(
            self,
            MachineState::Behind | MachineState::Held | MachineState::Paused
        )
    }

    /// Counted against the mesh by `status --exit-code`: behind, held, missing, or not knowable.
    pub fn needs_attention(self) -> bool {
        self.is_behind() || matches!(self, MachineState::Missing | MachineState::UnknownContainer)
    }
}

impl fmt::Display for MachineState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// The state of one machine. `running` holds the digests the machine reports (a container's image
/// id; on Kubernetes, every pod's image id). `aliases` are other digests naming the record's artifact
/// (the manifest digest its push published), since a pod reports what it pulled.
pub fn machine_state(
    running: &[String],
    record: Option<&RecordEntry>,
    aliases: &[String],
    policy: Policy,
) -> MachineState {
    let Some(entry) = record else {
        return MachineState::Unrecorded;
    };
    let names_artifact = |digest: &String| digest == &entry.digest || aliases.contains(digest);
    if !running.is_empty() && running.iter().all(names_artifact) {
        return MachineState::Current;
    }
    match policy {
        Policy::Rollout => MachineState::Behind,
        Policy::Record => MachineState::Held,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(digest: &str) -> RecordEntry {
        RecordEntry::new("demo/api:aaa-amd64".into(), digest.into())
    }

    #[test]
    fn digests_decide_never_tags() {
        let record = entry("sha256:new");
        let running = |d: &str| vec![d.to_string()];
        assert_eq!(
            machine_state(&running("sha256:new"), Some(&record), &[], Policy::Rollout),
            MachineState::Current
        );
        assert_eq!(
            machine_state(&running("sha256:old"), Some(&record), &[], Policy::Rollout),
            MachineState::Behind
        );
        assert_eq!(
            machine_state(&running("sha256:old"), Some(&record), &[], Policy::Record),
            MachineState::Held
        );
        assert_eq!(
            machine_state(&running("sha256:old"), None, &[], Policy::Record),
            MachineState::Unrecorded
        );
    }

    #[test]
    fn pods_all_on_the_artifact_or_its_published_digest() {
        let record = entry("sha256:config");
        let aliases = vec!["sha256:manifest".to_string()];
        let pods = vec!["sha256:manifest".to_string(), "sha256:config".to_string()];
        assert_eq!(
            machine_state(&pods, Some(&record), &aliases, Policy::Rollout),
            MachineState::Current
        );
        let mixed = vec!["sha256:manifest".to_string(), "sha256:old".to_string()];
        assert_eq!(
            machine_state(&mixed, Some(&record), &aliases, Policy::Rollout),
            MachineState::Behind
        );
        assert_eq!(
            machine_state(&[], Some(&record), &aliases, Policy::Rollout),
            MachineState::Behind
        );
        assert!(MachineState::Held.is_behind() && !MachineState::Current.is_behind());
    }
}
