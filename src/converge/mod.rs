//! The engine: plan → build/deliver tier by tier → stamp → send, emitting progress events.

pub mod build;
pub mod buildx;
pub mod engine;
pub mod machines;
pub mod plan;
pub mod progress;
pub mod send;
pub mod target;
