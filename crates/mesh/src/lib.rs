//! meshtop-mesh, the domain, pure: the model, tiers, refs and manifests, the skip decision,
//! behind, machines, build rows, timelines, the cosign and provenance formats, and text helpers.
//! It may not read the disk, start a thread, read the clock or talk to an outside system: it has
//! no runtime or client among its dependencies (`tests/it/architecture.rs` holds that to
//! `cargo metadata`), and `tests/it/layering.rs` keeps the standard library's disk, process and
//! network out. The disk is `meshtop-workspace`'s, the outside systems `meshtop-backends`'.

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
mod sealed_key;
pub mod sent;
pub mod service;
pub mod stats;
pub mod target;
pub mod text;
pub mod tiers;
pub mod timefmt;
pub mod timeline;
pub mod timeline_summary;
pub mod timeline_trace;
pub mod upstream;
pub mod upstream_lock;
pub mod why;

pub use model::*;
