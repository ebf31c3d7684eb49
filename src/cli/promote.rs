//! `meshtop promote MODULE… --to TARGET [--from TARGET] [--yes] [--json]`: record and send on one
//! target the exact artifacts another target's record names (no build, nothing pushed).

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::backends::daemon::LazyDaemon;
use crate::converge::promote::{self, PromotePlan, PromoteReport, Promotion};
use crate::mesh::environments::promote_source;
use crate::timefmt;

use super::args::{Global, PromoteArgs};
use super::{Failure, Outcome, ended, go_ahead, print_json, setup};

/// `--json`: what was planned and, once confirmed, what was done.
#[derive(Serialize)]
struct Promoted<'a> {
    plan: &'a PromotePlan,
    report: Option<&'a PromoteReport>,
}

pub(crate) async fn run(global: &Global, args: PromoteArgs) -> Outcome {
    let mesh = setup::load_file(global)?;
    setup::select(&mesh, &args.modules)?;
    let from = promote_source(&mesh, &args.to, args.from.as_deref()).map_err(Failure::input)?;
    let db = Arc::new(Mutex::new(setup::open_state(global)?));
    let from_target = setup::connect(global, &mesh, &from).await?;
    let to_target = setup::connect(global, &mesh, &args.to).await?;
    if let Some(place) = to_target.place() {
        eprintln!("meshtop: promoting into {} ({place})", args.to);
    }
    let daemon = Arc::new(LazyDaemon::new());
    let promotion = Promotion {
        mesh: &mesh,
        from: from_target.as_ref(),
        to: to_target.as_ref(),
    };
    let plan = promote::prepare(&promotion, &args.modules, &daemon, &db)
        .await
        .map_err(Failure::failed)?;
    eprintln!("promote from {} to {}:", plan.from, plan.to);
    for line in plan.lines(timefmt::now_ms()) {
        eprintln!("  {line}");
    }
    if plan.nothing_to_do() {
        eprintln!("nothing to promote");
        if args.json {
            print_json(&Promoted {
                plan: &plan,
                report: None,
            })?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let question = format!("promote to {}?", plan.to);
    if !go_ahead(args.yes, &question, "promote", "nothing promoted")? {
        return Ok(ExitCode::SUCCESS);
    }
    let (tx, printer) = super::spawn_progress_printer_before_result();
    let report = promote::promote(&promotion, &plan, &daemon, &db, Some(tx)).await;
    let _ = printer.await;
    let report = report.map_err(Failure::failed)?;
    let promoted = Promoted {
        plan: &plan,
        report: Some(&report),
    };
    ended(
        args.json.then_some(&promoted),
        &report.headline(),
        report.ok(),
    )
}
