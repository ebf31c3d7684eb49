//! One file per outside system. A backend never knows about the screen.

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
