//! The engine: plan → build/deliver tier by tier → stamp → send, emitting progress events.

pub mod plan;
