//! meshtop: build, record and roll out content-addressed container images across a mesh of modules.

pub mod app;
pub mod backends;
pub mod cli;
pub mod converge;
pub mod mesh;
pub mod sources;
pub mod timefmt;
pub mod tui;
pub mod widgets;
pub mod workspace;
