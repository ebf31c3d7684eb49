//! The dashboard: what it polls and the actions it runs (`sources`), its state, key table and pure
//! update (`app`), drawing only (`widgets`), and the terminal loop that joins them (`tui`). Data
//! flows one way: sources → messages → the app's state → widgets. Inside, `app` and `widgets` name
//! neither the engine nor the backends (held by `tests/it/layering.rs`: one crate cannot say it).
//! Each room shows the commands and the tests only the modules they name (`app::state`,
//! `widgets::header`…); the rest is `pub(crate)`, and `unreachable_pub` keeps it so.

pub mod app;
pub mod sources;
pub mod tui;
pub mod widgets;

// The rooms below, named as the folders they were (`crate::mesh::…`).
use meshtop_backends as backends;
use meshtop_engine as converge;
use meshtop_mesh as mesh;
use meshtop_timefmt as timefmt;
use meshtop_workspace as workspace;
