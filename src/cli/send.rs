//! `meshtop send MODULE`: move the module's behind machines to the record's artifact.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use crate::backends::daemon::LazyDaemon;
use crate::converge::send;
use crate::mesh::text::short_id;

use super::args::{Global, SendArgs};
use super::{Failure, Outcome, print_json, print_out, setup};

pub async fn run(global: &Global, args: SendArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    super::known_module(&mesh, &args.module)?;
    let db = Arc::new(Mutex::new(setup::open_state(global)?));
    let target = setup::target(global, &mesh).await?;
    if let Some(acting_on) = target.acting_on() {
        eprintln!("meshtop: {acting_on}");
    }
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
        eprintln!(
            "  {}  {} → {}@{}",
            moved.machine,
            short_id(&moved.from),
            moved.to_reference,
            short_id(&moved.to_digest)
        );
        if let Some(note) = &moved.before_send {
            eprintln!("    {note}");
        }
    }
    if !args.yes && !super::confirm(&format!("move {} machine(s)?", moves.len()), "send")? {
        eprintln!("nothing sent");
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
    let ok = report.ok();
    if args.json {
        print_json(&report.outcomes)?;
    } else {
        print_out(&format!("{}\n", report.headline()))?;
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
