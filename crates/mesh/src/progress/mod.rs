//! Progress of an operation (converge, send), step by step: what the engine emits, what the state
//! database keeps, and what the dashboard and the command line show. One idea a file: the steps'
//! words ([`step`]), their data ([`payload`]), the builder's own lines read once ([`builder_output`]),
//! the text a terminal shows ([`line`]), and the stored rows a follower reads ([`events`]).

mod builder_output;
mod events;
mod line;
mod payload;
mod step;

pub use builder_output::builder_step;
pub use events::{EventRow, unseen};
pub use line::{Progress, said_once};
pub use payload::{DeliveredBy, LastWord, Outcome, Payload, Stamp, TierPlace};
pub use step::Step;

pub use super::operation::{OperationId, operation_label};
