//! One loading ladder for the panes that show a read's answer (gc, stats, environments, a running
//! artifact's signed provenance in the machines pane and its detail): a read in
//! flight, none asked yet, the error that came back, or the answer. Each pane says its own words
//! on each rung; the order of the rungs is said once, here.

use ratatui::style::Style;

use super::lines::Palette;
use crate::app::msg::SourceError;
use crate::app::view_state::Loaded;

type Line = (String, Style);

/// A pane's words while it has no answer to draw.
pub(crate) struct Waiting<'w> {
    /// Said while a read is in flight.
    pub reading: &'w str,
    /// Said before the first read was asked.
    pub unread: &'w str,
    /// Whether a read in flight hides the answer held (gc, stats: a sweep offered from a stale
    /// report would mislead), or leaves it on screen while it is read again (environments).
    pub reread_hides_answer: bool,
}

/// What `gc` and `stats` say before their first read.
pub(crate) const NOT_READ: &str = "not read yet";

/// Where a pane's read stands.
pub(crate) enum Rung<'v, T> {
    /// The answer to draw.
    Answer(&'v T),
    /// The read failed: the pane says why, and what follows from it.
    Failed(&'v SourceError),
    /// Nothing to draw yet: this line says why.
    Waiting(Line),
}

/// The rung `view` stands on.
pub(crate) fn rung<'v, T>(
    view: &'v Loaded<T>,
    waiting: &Waiting<'_>,
    palette: Palette,
) -> Rung<'v, T> {
    let say = |words: &str| Rung::Waiting((words.to_string(), palette.dim()));
    match (&view.result, view.loading) {
        (_, true) if waiting.reread_hides_answer => say(waiting.reading),
        (None, true) => say(waiting.reading),
        (None, false) => say(waiting.unread),
        (Some(Err(error)), _) => Rung::Failed(error),
        (Some(Ok(answer)), _) => Rung::Answer(answer),
    }
}
