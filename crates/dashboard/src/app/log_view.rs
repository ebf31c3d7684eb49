//! What the logs view holds (at the bottom of the app: the state names it, `logs.rs` changes it).

use crate::mesh::logs::LogBook;
use crate::mesh::machine::Machine;

/// What the logs view shows and where it stands.
#[derive(Debug, Clone)]
pub struct LogView {
    /// `module api` or `machine api-1 of api`.
    pub title: String,
    pub machines: Vec<Machine>,
    pub book: LogBook,
    /// The container before the last restart (`p`), not the current one.
    pub previous: bool,
    /// Lines up from the newest (0: at the bottom, following).
    pub scroll: usize,
    pub wrap: bool,
    /// The search (`/`); empty: none.
    pub query: String,
    /// The match the view went to (an index into the book's shown lines).
    pub at_match: Option<usize>,
    /// The batches of this stream are this view's.
    pub stream: u64,
    /// The streams ended, and the machines that could not be read.
    pub ended: Option<Vec<(String, String)>>,
}

impl LogView {
    pub fn following(&self) -> bool {
        self.scroll == 0
    }
}
