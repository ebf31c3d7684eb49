//! `meshtop trace [#N] [--format chrome|json] [--compare #M]`: where an operation's time went.

use std::process::ExitCode;

use serde_json::json;

use crate::backends::state::StateDb;
use crate::mesh::model::Mesh;
use crate::mesh::progress::OperationId;
use crate::mesh::timeline::Timeline;
use crate::mesh::timeline_summary::{TimelineSummary, compare, summarize};
use crate::mesh::timeline_trace::chrome_trace;
use crate::timefmt;

use super::args::{Global, TraceArgs, TraceFormat};
use super::{Failure, Outcome, print_json, print_out, setup};

pub(crate) async fn run(global: &Global, args: TraceArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    let db = setup::open_state_for_reading(global)?;
    let now = timefmt::now_ms();
    let operation = resolve(&db, &mesh, args.operation.as_deref())?;
    let timeline = load(&db, &mesh, &operation)?;
    if let Some(other) = args.compare.as_deref() {
        let before = resolve(&db, &mesh, Some(other))?;
        let before = load(&db, &mesh, &before)?;
        let changes = compare(&before, &timeline);
        if args.format == TraceFormat::Json {
            print_json(&changes)?;
            return Ok(ExitCode::SUCCESS);
        }
        let mut out = String::new();
        outln!(
            out,
            "{operation} against {other}: per module, the most slowed first"
        );
        for change in &changes {
            outln!(out, "{}", change.line());
        }
        print_out(&out)?;
        return Ok(ExitCode::SUCCESS);
    }
    match args.format {
        TraceFormat::Chrome => print_json(&chrome_trace(&timeline, now))?,
        TraceFormat::Json => {
            let summary = summary(&db, &mesh, &timeline, now);
            print_json(&json!({ "summary": summary, "timeline": timeline }))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The operation `#N` (or `N`) of the mesh, or its newest.
fn resolve(db: &StateDb, mesh: &Mesh, named: Option<&str>) -> Result<OperationId, Failure> {
    let Some(named) = named else {
        let newest = db
            .latest_operation(&mesh.name)
            .map_err(Failure::failed)?
            .ok_or_else(|| {
                Failure::input(format!(
                    "mesh {} has no operation yet: run `meshtop converge` first",
                    mesh.name
                ))
            })?;
        return db
            .operation(&newest)
            .map_err(Failure::failed)?
            .ok_or_else(|| Failure::failed(format!("operation {newest} has no number")));
    };
    let number: i64 = named
        .trim()
        .trim_start_matches('#')
        .parse()
        .map_err(|_| {
            Failure::input(format!(
                "{named:?} is not an operation: give its number, e.g. #142 (the dashboard's operation pane and `meshtop converge` say it)"
            ))
        })?;
    db.operation_numbered(&mesh.name, number)
        .map_err(Failure::failed)?
        .ok_or_else(|| {
            Failure::input(format!(
                "mesh {} has no operation #{number}: its operations are numbered from #1 up",
                mesh.name
            ))
        })
}

/// The operation's timeline: as kept when it ended, else folded from its steps (it still runs, or
/// it ended before timelines were kept).
pub(crate) fn load(
    db: &StateDb,
    mesh: &Mesh,
    operation: &OperationId,
) -> Result<Timeline, Failure> {
    if let Some(kept) = db.timeline(&operation.uuid).map_err(Failure::failed)? {
        return Ok(kept.with_bases(mesh));
    }
    let events = db
        .operation_events(&operation.uuid)
        .map_err(Failure::failed)?;
    if events.is_empty() {
        return Err(Failure::failed(format!(
            "operation {operation} has no timeline: its steps were forgotten (only the newest {} are kept)",
            crate::backends::state::KEEP_EVENTS
        )));
    }
    Ok(Timeline::from_events(&events).with_bases(mesh))
}

/// The timeline's one-line account, each skip counted at its module's median build.
pub(crate) fn summary(db: &StateDb, mesh: &Mesh, timeline: &Timeline, now: i64) -> TimelineSummary {
    let medians = db.median_builds(&mesh.name).unwrap_or_default();
    summarize(timeline, &medians, now)
}
