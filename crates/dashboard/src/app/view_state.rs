//! The views' state: the gc and stats views' latest answers, and the record's history and pins the
//! history source reads (their update is `views.rs`'s, what they ask and answer `msg.rs`'s).

use std::collections::BTreeMap;

use super::msg::{SourceError, TimelineRead};
use crate::mesh::environments::Grid;
use crate::mesh::gc::GcReport;
use crate::mesh::pin::{Pin, Stamp};
use crate::mesh::stats::Stats;

/// One view's latest answer.
#[derive(Debug, Clone)]
pub struct Loaded<T> {
    /// A read is in flight.
    pub loading: bool,
    /// When the answer held arrived.
    pub at_ms: Option<i64>,
    /// The answer, or why there is none (a root that cannot be read, for gc).
    pub result: Option<Result<T, SourceError>>,
}

impl<T> Default for Loaded<T> {
    fn default() -> Self {
        Loaded {
            loading: false,
            at_ms: None,
            result: None,
        }
    }
}

/// The views' state (gc, stats), and the record's history and pins the history source reads.
#[derive(Debug, Clone, Default)]
pub struct ViewState {
    pub gc: Loaded<GcReport>,
    pub stats: Loaded<Stats>,
    /// The timeline view's operation as the state database kept it.
    pub timeline: Loaded<TimelineRead>,
    /// The environments view: every target read, and the cell selected (module row, target column).
    pub environments: Loaded<Grid>,
    pub cell: (usize, usize),
    /// The record's history of one module (newest first), and of which module.
    pub stamps: Option<(String, Vec<Stamp>)>,
    /// The mesh's pinned modules.
    pub pins: BTreeMap<String, Pin>,
}

impl ViewState {
    /// The record's history of `module`, when the history source has read it.
    pub fn stamps_of(&self, module: &str) -> Option<&[Stamp]> {
        match &self.stamps {
            Some((of, stamps)) if of == module => Some(stamps),
            _ => None,
        }
    }
}
