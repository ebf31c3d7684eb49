//! meshtop-engine: plan → build/deliver tier by tier → stamp → send, emitting progress events;
//! the targets behind one seam (`targets`). It joins the domain, the disk reader and the backends,
//! and never knows the screen: the dashboard and the commands both drive it.
//! The modules they call are `pub`; the walk, the placer, delivery, rollout, holds, pins, the lock,
//! attestation and the summary are the engine's own (`unreachable_pub` keeps each `pub` reachable).

// The rooms below, named as the folders they were (`crate::mesh::…`).
use meshtop_backends as backends;
use meshtop_mesh as mesh;
use meshtop_timefmt as timefmt;
use meshtop_workspace as workspace;

mod attest;
pub mod build;
pub mod builders;
mod converging;
mod deliver;
pub mod engine;
pub mod environments;
pub mod error;
pub mod gc;
mod handover;
mod hold;
mod lock;
mod manifests;
mod pin_ends;
mod place;
pub mod plan;
pub mod preflight;
pub mod progress;
pub mod promote;
pub mod rollback;
mod rollout;
pub mod send;
mod sending;
mod summary;
pub mod targets;
pub mod vouch;
mod walk;
