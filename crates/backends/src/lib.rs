//! meshtop-backends: one module per outside system (the Docker daemon, registries, the
//! Kubernetes API, the state database, git, buildx). Each speaks the domain's types and knows
//! nothing of the disk reader, the engine or the screen; only here is an outside client named.

// The rooms below, named as the folders they were (`crate::mesh::…`).
use meshtop_mesh as mesh;
use meshtop_timefmt as timefmt;

pub mod buildx;
pub mod cluster;
pub mod credentials;
pub mod daemon;
pub mod git;
pub mod registry;
pub mod state;
