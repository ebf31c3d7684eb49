//! The views beside the panes, opened from the key table and drawn in the detail overlay: the gc
//! view (what a sweep would take and why, the keep set; the sweep behind a confirm) and the stats
//! view (what the skip decision saves). Also the record's history and the pins the history source
//! reads, for the module detail and the footer. Their update only (their state is
//! `view_state.rs`'s, what they ask and answer `msg.rs`'s): no I/O.

use crate::mesh::gc::human_bytes;
use crate::mesh::pin::{RollbackTarget, rollback_target};
use crate::mesh::text::short_id;

use super::keys::{Action, Mode};
use super::msg::{ActionRequest, Effect, SourceError, StateSnapshot};
use super::state::{AppState, Confirm, ConfirmThen, Detail};
use super::view_state::Loaded;
// The sources read what a view asks: its request and answer are messages (`msg.rs`).
pub use super::msg::{TimelineRead, ViewData, ViewRequest};

/// Each module's newest successful builds the dashboard's gc keeps (the command's default).
pub const GC_KEEP_NEWEST: usize = 3;
/// The grace the dashboard's gc keeps (the command's default).
pub const GC_GRACE_MS: i64 = crate::mesh::gc::DEFAULT_GRACE_MS;

/// Keep what a history poll read of the record's history and the pins; whether it differs.
pub(crate) fn note_history(state: &mut AppState, snapshot: &mut StateSnapshot) -> bool {
    let stamps = snapshot.stamps.take();
    let pins = std::mem::take(&mut snapshot.pins);
    let changed = state.views.stamps != stamps || state.views.pins != pins;
    state.views.stamps = stamps;
    state.views.pins = pins;
    changed
}

/// `Action::Gc` / `Action::Stats`: open the view and read what it shows (again).
pub(crate) fn open(state: &mut AppState, action: Action) -> Vec<Effect> {
    let (detail, request) = match action {
        Action::Gc => {
            state.views.gc.loading = true;
            (
                Detail::Gc,
                ViewRequest::Gc {
                    keep_newest: GC_KEEP_NEWEST,
                    grace_ms: GC_GRACE_MS,
                    target: Some(state.target.name.clone()),
                },
            )
        }
        Action::Stats => {
            state.views.stats.loading = true;
            (Detail::Stats, ViewRequest::Stats { since_ms: None })
        }
        _ => return Vec::new(),
    };
    state.detail = Some(detail);
    state.detail_scroll = 0;
    state.mode = Mode::Detail;
    state.dirty = true;
    vec![Effect::FetchView(request)]
}

/// A view's read answered.
pub(crate) fn loaded(
    state: &mut AppState,
    request: ViewRequest,
    at_ms: i64,
    result: Result<ViewData, SourceError>,
) -> Vec<Effect> {
    state.now_ms = state.now_ms.max(at_ms);
    state.dirty = true;
    match request {
        ViewRequest::Gc { .. } => {
            state.views.gc = Loaded {
                loading: false,
                at_ms: Some(at_ms),
                result: Some(result.and_then(|data| match data {
                    ViewData::Gc(report) => Ok(*report),
                    _ => Err(SourceError::OtherView { view: "gc" }),
                })),
            }
        }
        ViewRequest::Stats { .. } => {
            state.views.stats = Loaded {
                loading: false,
                at_ms: Some(at_ms),
                result: Some(result.and_then(|data| match data {
                    ViewData::Stats(stats) => Ok(*stats),
                    _ => Err(SourceError::OtherView { view: "stats" }),
                })),
            }
        }
        ViewRequest::Environments => {
            super::environments::loaded(state, at_ms, result);
        }
        ViewRequest::Timeline { operation_id } => {
            super::timeline::loaded(state, &operation_id, at_ms, result);
        }
    }
    Vec::new()
}

/// `Action::Sweep` in the gc view: confirm taking exactly what the view lists. Nothing is offered
/// while the list is being read or when a root could not be read.
pub(crate) fn sweep(state: &mut AppState) -> Vec<Effect> {
    if state.detail != Some(Detail::Gc) {
        let open = state.keys.hint_line(Mode::Normal, &[Action::Gc]);
        state.notify(format!("sweeping starts from the gc view ({open})"), true);
        return Vec::new();
    }
    let report = match (&state.views.gc.result, state.views.gc.loading) {
        (_, true) | (None, _) => {
            state.notify("the gc view is still reading; wait for it".into(), true);
            return Vec::new();
        }
        (Some(Err(error)), _) => {
            let text = format!("gc takes nothing: {error}");
            state.notify(text, true);
            return Vec::new();
        }
        (Some(Ok(report)), _) => report.clone(),
    };
    if report.candidates.is_empty() {
        state.notify(
            format!(
                "nothing to sweep: mesh {} holds nothing unreachable",
                report.mesh
            ),
            false,
        );
        return Vec::new();
    }
    let mut lines = vec![format!(
        "take {} from mesh {} (about {}):",
        report.candidates.len(),
        report.mesh,
        human_bytes(report.bytes())
    )];
    for candidate in &report.candidates {
        let name = if candidate.name.starts_with("sha256:") {
            format!("sha256:{}", short_id(&candidate.name))
        } else {
            candidate.name.clone()
        };
        lines.push(format!(
            "  {} {name} [{}]",
            candidate.kind, candidate.module
        ));
    }
    lines.push(
        "each only if still unreachable when the sweep reads every root again, holding the mesh"
            .into(),
    );
    lines.push(report.keep_line());
    state.confirm = Some(Confirm {
        title: format!("Sweep mesh {}?", report.mesh),
        lines,
        verb: "Sweep".into(),
        then: ConfirmThen::Start(ActionRequest::Gc {
            keep_newest: report.keep_newest,
            grace_ms: report.grace_ms,
            confirmed: report.candidates.clone(),
        }),
        go: false,
    });
    state.detail = None;
    state.mode = Mode::Confirm;
    Vec::new()
}

/// Whether `R` applies to the selected module: the record names an artifact for it and, when
/// its record history is known, the record named another before it (something to go back to).
pub(crate) fn rollback_applies(state: &AppState) -> bool {
    let Some(module) = state.selected_module() else {
        return false;
    };
    let Some(entry) = state.record.as_ref().and_then(|r| r.get(&module.name)) else {
        return false;
    };
    // Until the record's history is read, the rollback itself finds out (and says why not).
    match state.views.stamps_of(&module.name) {
        Some(stamps) => matches!(rollback_target(stamps, entry), RollbackTarget::To(_)),
        None => true,
    }
}
