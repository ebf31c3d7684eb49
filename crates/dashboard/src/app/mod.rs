//! The dashboard's state, its key table, and the pure update that turns messages into state.
//! Data flows one way: sources and actions send [`msg::Msg`] → [`update::update`] changes
//! [`state::AppState`] → the widgets draw it. Nothing here does I/O or draws.

pub(crate) mod ask;
mod cursor;
mod environments;
pub(crate) mod follow;
pub mod keys;
pub(crate) mod log_view;
pub(crate) mod logs;
pub mod msg;
mod polled;
mod provenance;
pub mod quit;
pub mod state;
pub(crate) mod timeline;
pub mod update;
pub(crate) mod view_state;
pub mod views;
pub mod window;
