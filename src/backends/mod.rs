//! One file per outside system. A backend never knows about the screen.

pub mod buildx;
pub mod cluster;
pub mod credentials;
pub mod daemon;
pub mod git;
pub mod registry;
pub mod state;
