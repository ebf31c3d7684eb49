//! The dashboard: its state, its key table, and the loop that turns events into state.
//! Data flows one way: pollers and actions send [`msg::Msg`] → [`update::update`] changes
//! [`state::AppState`] → the widgets draw it.

pub mod ask;
pub mod key;
pub mod keys;
pub mod msg;
pub mod real;
pub mod run;
pub mod sources;
pub mod state;
pub mod update;
pub mod window;

pub use run::{DashboardOptions, run_dashboard};
