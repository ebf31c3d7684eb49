//! The environments view (`e`): modules down, targets across, each cell the target's recorded
//! artifact, its machines, a mark where it differs from its source (`promote_from`) and how long
//! ago it moved. `←`/`→`, `↑`/`↓` select a cell; `p` promotes into it from its source (through a
//! confirm, Cancel first); `t` shows its target in the main view. `t` in the main view shows the
//! next target. Pure update: what it reads is `ViewRequest::Environments`, drawn by
//! `widgets/environments.rs`.

use crate::mesh::environments::{Cell, Grid, artifact_text};
use crate::mesh::text::short_id;

use super::ask::NotAsked;
use super::keys::{Action, Mode};
use super::msg::{ActionRequest, Effect, SourceError, SourceId, ViewData, ViewRequest};
use super::state::{AppState, Confirm, ConfirmThen, Detail, OperationView};
use super::view_state::Loaded;

/// While the view is open it is read again this often (an operation on any target shows).
pub(super) const REREAD_MS: i64 = 3_000;

/// `Action::Environments`: open the view and read every target.
pub(super) fn open(state: &mut AppState) -> Vec<Effect> {
    state.views.environments.loading = true;
    state.detail = Some(Detail::Environments);
    state.detail_scroll = 0;
    state.mode = Mode::Detail;
    state.dirty = true;
    vec![Effect::FetchView(ViewRequest::Environments)]
}

/// Every target was read.
pub(super) fn loaded(state: &mut AppState, at_ms: i64, result: Result<ViewData, SourceError>) {
    let result = result.and_then(|data| match data {
        ViewData::Environments(grid) => Ok(*grid),
        _ => Err(SourceError::OtherView {
            view: "environments",
        }),
    });
    if let Ok(grid) = &result {
        let (row, column) = state.views.cell;
        state.views.cell = (
            row.min(grid.rows.len().saturating_sub(1)),
            column.min(grid.targets.len().saturating_sub(1)),
        );
    }
    state.views.environments = Loaded {
        loading: false,
        at_ms: Some(at_ms),
        result: Some(result),
    };
}

/// The clock moved: while the view is open, read it again every [`REREAD_MS`].
pub(super) fn tick(state: &mut AppState) -> Vec<Effect> {
    let view = &state.views.environments;
    let stale = view
        .at_ms
        .is_none_or(|at| state.now_ms.saturating_sub(at) >= REREAD_MS);
    if state.detail != Some(Detail::Environments) || view.loading || !stale {
        return Vec::new();
    }
    state.views.environments.loading = true;
    vec![Effect::FetchView(ViewRequest::Environments)]
}

/// After an action ended: the view (when open) reads every target again at once.
pub(super) fn after_action(state: &mut AppState) -> Vec<Effect> {
    if state.detail != Some(Detail::Environments) {
        return Vec::new();
    }
    state.views.environments.loading = true;
    vec![Effect::FetchView(ViewRequest::Environments)]
}

/// A key in the view; None: not the view's (the detail's own handling goes on).
pub(super) fn key(state: &mut AppState, action: Action) -> Option<Vec<Effect>> {
    let (rows, columns) = match &state.views.environments.result {
        Some(Ok(grid)) => (grid.rows.len(), grid.targets.len()),
        _ => (0, 0),
    };
    let (row, column) = &mut state.views.cell;
    let step = |at: &mut usize, by: isize, count: usize| {
        *at = at.saturating_add_signed(by).min(count.saturating_sub(1));
    };
    match action {
        Action::Up => step(row, -1, rows),
        Action::Down => step(row, 1, rows),
        Action::Top => *row = 0,
        Action::Bottom => *row = rows.saturating_sub(1),
        Action::Left => step(column, -1, columns),
        Action::Right => step(column, 1, columns),
        Action::Promote => return Some(promote(state)),
        Action::NextTarget => return Some(show_selected(state)),
        _ => return None,
    }
    Some(Vec::new())
}

/// The grid and the selected cell, when the view has read every target.
fn selected(state: &AppState) -> Option<(&Grid, &Cell, &str)> {
    let Some(Ok(grid)) = &state.views.environments.result else {
        return None;
    };
    let (row, column) = state.views.cell;
    let row = grid.rows.get(row)?;
    Some((grid, row.cells.get(column)?, row.module.as_str()))
}

/// `p`: confirm promoting the selected module into the selected target from its source.
fn promote(state: &mut AppState) -> Vec<Effect> {
    let built = promote_confirm(state);
    match built {
        Ok(confirm) => {
            state.confirm = Some(confirm);
            state.detail = None;
            state.mode = Mode::Confirm;
        }
        Err(why) => state.notify(why.to_string(), true),
    }
    Vec::new()
}

fn promote_confirm(state: &AppState) -> Result<Confirm, NotAsked> {
    let Some((grid, cell, module)) = selected(state) else {
        return Err(NotAsked::StillReading);
    };
    let to = &cell.target;
    let Some(from) = &cell.source else {
        return Err(NotAsked::NoPromoteFrom {
            to: to.clone(),
            module: module.to_string(),
        });
    };
    let Some(artifact) = grid.cell(module, from).and_then(|c| c.artifact.clone()) else {
        return Err(NotAsked::NothingToPromote {
            from: from.clone(),
            module: module.to_string(),
            to: to.clone(),
        });
    };
    if cell.differs == Some(false) && cell.machines.current == cell.machines.total {
        return Err(NotAsked::AlreadyThere {
            to: to.clone(),
            from: from.clone(),
            module: module.to_string(),
            short: short_id(&artifact.digest).to_string(),
        });
    }
    let mut lines = vec![
        format!("{module}: {from} {}", artifact_text(Some(&artifact))),
        format!("  {to} now: {}", artifact_text(cell.artifact.as_ref())),
    ];
    for run in cell
        .runs
        .iter()
        .filter(|r| r.running.as_deref() != Some(&artifact.digest))
    {
        lines.push(format!(
            "  {} {}: {} → {}@{}",
            run.kind,
            run.name,
            run.running.as_deref().map_or("nothing", short_id),
            artifact.reference,
            short_id(&artifact.digest)
        ));
    }
    lines.push(format!(
        "no build: {to}'s record is stamped with this artifact (history: promote from {from}) and every machine of {module} there is sent to it, whatever its policy"
    ));
    Ok(Confirm {
        title: format!("Promote {module} from {from} to {to}?"),
        lines,
        verb: "Promote".into(),
        then: ConfirmThen::Start(ActionRequest::Promote {
            module: module.to_string(),
            from: from.clone(),
            to: to.clone(),
            artifact,
            current: cell.artifact.clone(),
        }),
        go: false,
    })
}

/// `t` in the view: the main view shows the selected column's target.
fn show_selected(state: &mut AppState) -> Vec<Effect> {
    let Some((_, cell, _)) = selected(state) else {
        return Vec::new();
    };
    let name = cell.target.clone();
    state.detail = None;
    state.mode = Mode::Normal;
    show(state, &name)
}

/// `t` in the main view: the next target of the mesh.
pub(super) fn next_target(state: &mut AppState) -> Vec<Effect> {
    let names: Vec<String> = state.targets.iter().map(|t| t.name.clone()).collect();
    if names.len() < 2 {
        state.notify(
            format!(
                "mesh {} has one target ({})",
                state.context.mesh, state.target.name
            ),
            false,
        );
        return Vec::new();
    }
    let at = names
        .iter()
        .position(|n| *n == state.target.name)
        .unwrap_or(0);
    let next = names[(at + 1) % names.len()].clone();
    show(state, &next)
}

/// Show target `name` in the main view: what was shown of the other is dropped (its record,
/// machines, plan, operation), every source polled for this one.
fn show(state: &mut AppState, name: &str) -> Vec<Effect> {
    let Some(description) = state.targets.iter().find(|t| t.name == name).cloned() else {
        return Vec::new();
    };
    if description.name == state.target.name {
        return Vec::new();
    }
    state.target = description;
    state.record = None;
    state.held_by = None;
    state.machines_record = None;
    state.set_machines(Vec::new());
    state.clear_plan();
    state.operation = OperationView::default();
    state.views.stamps = None;
    state.views.pins.clear();
    for id in [
        SourceId::Plan,
        SourceId::Record,
        SourceId::State,
        SourceId::Machines,
    ] {
        state.sources[id.index()] = Default::default();
    }
    state.notify(format!("showing target {name}"), false);
    state.dirty = true;
    vec![Effect::PollNow(SourceId::ALL.to_vec())]
}
