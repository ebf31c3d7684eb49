//! How a target is described to a person: what the screen and the CLI say about it, without asking
//! it anything. The target seam (`converge::target`) makes one per connected target; the app keeps it.

/// A target as words: its name in the mesh, its kind, where it is, and what a send does there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetDescription {
    /// The target's name in the mesh (`default` for a mesh file's single `[target]`).
    pub name: String,
    /// The kind, as the header shows it: `docker`, `kubernetes`.
    pub kind: String,
    /// Where it is, for a changing command's first line: `context X, namespace Y`; None for the host.
    pub place: Option<String>,
    /// The namespace a person's own `kubectl` commands for it name (Kubernetes only).
    pub namespace: Option<String>,
    /// What a send does to each machine there, in words (the send and rollback confirms say it).
    pub send_does: String,
}
