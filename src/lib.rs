//! meshtop: build, record and roll out content-addressed container images across a mesh of modules.
//! The package is the command line (`cli`); the rooms are crates of their own under `crates/`,
//! named here as the folders they were so that the commands, the benches and the tests reach them
//! by one path (docs/architecture.md draws them).

pub mod cli;

pub use meshtop_backends as backends;
pub use meshtop_dashboard::{app, sources, tui, widgets};
pub use meshtop_engine as converge;
pub use meshtop_mesh as mesh;
pub use meshtop_timefmt as timefmt;
pub use meshtop_workspace as workspace;
