//! The domain, pure: the model, tiers, refs and manifests, the skip decision, behind, machines,
//! build rows, and text helpers. Nothing here reads the disk, starts a thread or talks to an outside
//! system (a test in `tests/layering.rs` holds it to that): `crate::workspace` reads the disk.

pub mod behind;
pub mod builders;
pub mod builds;
pub mod cosign;
pub mod decide;
pub mod environments;
pub mod file_stat;
pub mod gc;
pub mod live;
pub mod logs;
pub mod machine;
pub mod manifest;
pub mod model;
pub mod operation;
pub mod pin;
pub mod plan;
pub mod platform;
pub mod pool;
pub mod progress;
pub mod provenance;
pub mod refs;
pub mod schedule;
pub mod sealed_key;
pub mod stats;
pub mod target;
pub mod text;
pub mod tiers;
pub mod timefmt;
pub mod timeline;
pub mod timeline_summary;
pub mod timeline_trace;
pub mod why;

pub use model::*;
