//! meshtop-engine: plan → build/deliver tier by tier → stamp → send, emitting progress events;
//! the targets behind one seam (`targets`). It joins the domain, the disk reader and the backends,
//! and never knows the screen: the dashboard and the commands both drive it.

// The rooms below, named as the folders they were (`crate::mesh::…`).
use meshtop_backends as backends;
use meshtop_mesh as mesh;
use meshtop_timefmt as timefmt;
use meshtop_workspace as workspace;

pub mod attest;
pub mod build;
pub mod builders;
pub mod deliver;
pub mod engine;
pub mod environments;
pub mod error;
pub mod gc;
pub mod hold;
pub mod lock;
pub mod manifests;
pub mod pin_ends;
pub mod place;
pub mod plan;
pub mod preflight;
pub mod progress;
pub mod promote;
pub mod rollback;
pub mod rollout;
pub mod send;
mod sending;
pub mod summary;
pub mod targets;
pub mod vouch;
pub mod walk;
