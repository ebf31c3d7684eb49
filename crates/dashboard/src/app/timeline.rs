//! The timeline view's update: opened (`T`) from the operation pane (its operation) or from a
//! build's detail (that build's operation); the operation pane's own timeline folded from each
//! step it follows, so the view of a running converge is live. No I/O: the kept timeline is asked
//! of the sources (`ViewRequest::Timeline`).

use crate::mesh::progress::EventRow;
use crate::mesh::timeline::Timeline;

use super::keys::Mode;
use super::msg::{Effect, SourceError, ViewData, ViewRequest};
use super::state::{AppState, Detail, OperationView};
use super::view_state::Loaded;

/// Fold one step the operation pane follows into its timeline.
pub(crate) fn fold(view: &mut OperationView, event: &EventRow) {
    let Some(payload) = &event.payload else {
        return;
    };
    view.timeline
        .get_or_insert_with(|| Timeline::new(&event.operation_id, event.operation))
        .fold(event.at_ms, event.module.as_deref(), payload, &event.text);
}

/// `T`: the timeline of the shown build's operation (in a build's detail), else of the operation
/// pane's.
pub(crate) fn open(state: &mut AppState) -> Vec<Effect> {
    let of_build = match &state.detail {
        Some(Detail::Build(id)) => Some(
            state
                .builds
                .rows(0, state.builds.len())
                .find(|b| &b.id == id)
                .and_then(|b| b.operation_id.clone()),
        ),
        _ => None,
    };
    let operation_id = match of_build {
        Some(Some(id)) => id,
        Some(None) => {
            state.notify(
                "this build was made outside an operation: it has no timeline".into(),
                true,
            );
            return Vec::new();
        }
        None => match &state.operation.operation_id {
            Some(id) => id.clone(),
            None => {
                state.notify("no operation recorded yet: nothing to time".into(), true);
                return Vec::new();
            }
        },
    };
    state.views.timeline = Loaded {
        loading: true,
        ..Loaded::default()
    };
    state.detail = Some(Detail::Timeline(operation_id.clone()));
    state.detail_scroll = 0;
    state.mode = Mode::Detail;
    state.dirty = true;
    vec![Effect::FetchView(ViewRequest::Timeline { operation_id })]
}

/// The sources read the timeline asked for.
pub(crate) fn loaded(
    state: &mut AppState,
    operation_id: &str,
    at_ms: i64,
    result: Result<ViewData, SourceError>,
) {
    // An answer for a view closed or moved on since is dropped.
    if state.detail.as_ref() != Some(&Detail::Timeline(operation_id.to_string())) {
        return;
    }
    state.views.timeline = Loaded {
        loading: false,
        at_ms: Some(at_ms),
        result: Some(result.and_then(|data| match data {
            ViewData::Timeline(read) => Ok(*read),
            _ => Err(SourceError::OtherView { view: "timeline" }),
        })),
    };
}

/// What the view draws for `operation_id`: the operation pane's own timeline while it follows
/// that operation (live), else the one read; with each module's base from the mesh.
pub(crate) fn shown(state: &AppState, operation_id: &str) -> Option<Timeline> {
    let live = state
        .operation
        .timeline
        .as_ref()
        .filter(|t| t.operation_id == operation_id);
    let read = match &state.views.timeline.result {
        Some(Ok(read)) if read.timeline.operation_id == operation_id => Some(&read.timeline),
        _ => None,
    };
    // The read one is whole as of its read; the pane's grows with each step but may have begun
    // mid-operation (a dashboard opened late reads a tail): it is drawn when it saw the start.
    let whole_live = live.filter(|l| read.is_none_or(|r| l.started_ms <= r.started_ms));
    let chosen = match (whole_live, read) {
        (_, Some(read)) if read.ended_ms.is_some() => read,
        (Some(live), _) => live,
        (None, Some(read)) => read,
        (None, None) => live?,
    };
    let mut timeline = chosen.clone();
    for module in &mut timeline.modules {
        let info = state.modules.iter().find(|m| m.name == module.name);
        module.base = info.and_then(|m| m.base.clone());
        // Its named contexts' modules: what it builds on beside its base.
        module.contexts = info.map_or_else(Vec::new, |m| {
            (m.builds_on.iter())
                .filter(|on| m.base.as_ref() != Some(*on))
                .cloned()
                .collect()
        });
    }
    Some(timeline)
}
