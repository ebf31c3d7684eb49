//! `meshtop send MODULE`: move the module's behind machines to the record's artifact.

use std::process::ExitCode;
use std::sync::Arc;

use crate::backends::daemon::LazyDaemon;
use crate::converge::send;

use super::args::{Global, SendArgs};
use super::setup::ActingOn;
use super::{Failure, Outcome, print_json, print_out};

pub(crate) async fn run(global: &Global, args: SendArgs) -> Outcome {
    let acting = ActingOn::module(global, &args.module).await?;
    acting.say_where();
    let ActingOn { mesh, db, target } = acting;
    let daemon = Arc::new(LazyDaemon::new());
    let moves = send::prepare(&mesh, &args.module, &daemon, target.as_ref(), &db)
        .await
        .map_err(Failure::failed)?;
    if moves.is_empty() {
        if args.json {
            print_json(&Vec::<send::SendOutcome>::new())?;
        } else {
            print_out(&format!(
                "nothing to send: every machine of {} runs the record's artifact\n",
                args.module
            ))?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("send {} on target {}:", args.module, target.name());
    for moved in &moves {
        eprintln!("{}", super::move_line(moved));
        if let Some(note) = &moved.before_send {
            eprintln!("    {note}");
        }
    }
    let question = format!("move {} machine(s)?", moves.len());
    if !super::go_ahead(args.yes, &question, "send", "nothing sent")? {
        return Ok(ExitCode::SUCCESS);
    }
    let (tx, printer) = super::spawn_progress_printer_before_result();
    let report = send::send_confirmed(
        &mesh,
        &args.module,
        &moves,
        &daemon,
        target.as_ref(),
        &db,
        Some(tx),
    )
    .await;
    let _ = printer.await;
    let report = report.map_err(Failure::failed)?;
    super::ended(
        args.json.then_some(&report.outcomes),
        &report.headline(),
        report.ok(),
    )
}
