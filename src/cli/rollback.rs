//! `meshtop rollback MODULE [--to BUILD|DIGEST]` and `meshtop unpin MODULE`.

use std::process::ExitCode;
use std::sync::Arc;

use crate::backends::daemon::LazyDaemon;
use crate::converge::rollback;
use crate::mesh::text::short_id;
use crate::timefmt;

use super::args::{Global, RollbackArgs, UnpinArgs};
use super::setup::ActingOn;
use super::{Failure, Outcome, ended, go_ahead, move_line, print_out};

pub(crate) async fn run(global: &Global, args: RollbackArgs) -> Outcome {
    let acting = ActingOn::module(global, &args.module).await?;
    acting.say_where();
    let ActingOn { mesh, db, target } = acting;
    let daemon = Arc::new(LazyDaemon::new());
    let plan = rollback::prepare(
        &mesh,
        &args.module,
        args.to.as_deref(),
        &daemon,
        target.as_ref(),
        &db,
    )
    .await
    .map_err(Failure::failed)?;
    let now = timefmt::now_ms();
    eprintln!(
        "roll back {} on target {}: {}@{} → {}@{}",
        plan.module,
        target.name(),
        plan.from.reference,
        short_id(&plan.from.digest),
        plan.to.reference,
        short_id(&plan.to.digest)
    );
    match &plan.build {
        Some(build) => eprintln!(
            "  built by build {} ({}), commit {}, {} ago",
            build.id,
            build.host,
            build.short_commit(),
            timefmt::age_since(build.ended_ms.unwrap_or(build.started_ms), now)
        ),
        None => eprintln!("  no build record of this artifact is known"),
    }
    if plan.moves.is_empty() {
        eprintln!("  no machine moves (none runs another artifact)");
    }
    for moved in &plan.moves {
        eprintln!("{}", move_line(moved));
    }
    eprintln!(
        "  the module stays pinned {}",
        crate::mesh::pin::ends_when(&plan.module)
    );
    if !go_ahead(args.yes, "roll back?", "roll back", "nothing rolled back")? {
        return Ok(ExitCode::SUCCESS);
    }
    let (tx, printer) = super::spawn_progress_printer_before_result();
    let report = rollback::rollback(&mesh, &plan, &daemon, target.as_ref(), &db, Some(tx)).await;
    let _ = printer.await;
    let report = report.map_err(Failure::failed)?;
    ended(
        args.json.then_some(&report),
        &report.headline(),
        report.ok(),
    )
}

pub(crate) async fn unpin(global: &Global, args: UnpinArgs) -> Outcome {
    let ActingOn { mesh, db, target } = ActingOn::module(global, &args.module).await?;
    let was = rollback::unpin(&mesh, &args.module, target.as_ref(), &db)
        .await
        .map_err(|e| Failure::failed(format!("nothing unpinned: {e}")))?;
    if was {
        print_out(&format!(
            "unpinned {}: the next converge decides for it as usual\n",
            args.module
        ))?;
    } else {
        print_out(&format!("{} was not pinned\n", args.module))?;
    }
    Ok(ExitCode::SUCCESS)
}
