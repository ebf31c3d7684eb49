//! `meshtop gc [--dry-run] [--keep N] [--grace DURATION] [--yes] [--json]`: remove this mesh's
//! images nothing needs (and nothing a teammate may need).

use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use crate::backends::daemon::LazyDaemon;
use crate::converge::error::GcError;
use crate::converge::gc::{self, GcReport, GcRules, GcTargets, Other};
use crate::mesh::gc::grace_words;
use crate::timefmt;

use super::args::{GcArgs, Global};
use super::{Failure, Outcome, go_ahead, print_json, print_out, setup};

pub(crate) async fn run(global: &Global, args: GcArgs) -> Outcome {
    let mesh = setup::load_file(global)?;
    let db = Arc::new(Mutex::new(setup::open_state(global)?));
    let target = setup::target(global, &mesh).await?;
    // Every other target's keep set counts: each is read before anything is taken.
    let mut others = Vec::new();
    for name in mesh.target_names() {
        if name != target.name() {
            let connected = setup::connect_target(global, &mesh, name).await;
            others.push(Other {
                name: name.to_string(),
                target: connected.map_err(Into::into),
            });
        }
    }
    let targets = GcTargets {
        acting: target.as_ref(),
        others: &others,
    };
    if let Some(acting_on) = target.acting_on() {
        eprintln!("meshtop: {acting_on}");
    }
    let daemon = Arc::new(LazyDaemon::new());
    let rules = GcRules {
        keep_newest: args.keep as usize,
        grace_ms: args.grace,
    };
    let nothing = |e: GcError| Failure::failed(format!("gc took nothing: {e}"));
    let mut report = gc::plan(&mesh, &rules, &daemon, targets, &db)
        .await
        .map_err(nothing)?;
    let holder = crate::backends::state::locked(&db)
        .map_err(Failure::failed)?
        .mesh_holder(&mesh.name, target.name())
        .map_err(|e| Failure::failed(format!("gc took nothing: {e}")))?;
    if let Some(holder) = holder.filter(|h| !h.is_dead(timefmt::now_ms())) {
        let busy = format!(
            "mesh {} is held by operation {} (host {}, process {}): gc takes nothing while it runs",
            mesh.name, holder.operation_id, holder.host, holder.pid
        );
        if !args.dry_run {
            return Err(Failure::failed(busy));
        }
        report.warnings.push(busy);
    }
    if args.dry_run || report.candidates.is_empty() {
        return show(&report, args.json);
    }
    if !args.yes {
        eprint!("{}", text(&report));
        let question = format!(
            "take these {} from mesh {}?",
            report.candidates.len(),
            mesh.name
        );
        if !go_ahead(false, &question, "sweep", "nothing taken")? {
            return Ok(ExitCode::SUCCESS);
        }
    }
    let confirmed = report.candidates.clone();
    let (tx, printer) = super::spawn_progress_printer();
    let swept = gc::sweep(
        &mesh,
        &rules,
        Some(&confirmed),
        &daemon,
        targets,
        &db,
        Some(tx),
    )
    .await;
    let _ = printer.await;
    let swept = swept.map_err(nothing)?;
    let failed = swept.candidates.iter().any(|c| c.failed());
    show(&swept, args.json)?;
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn show(report: &GcReport, json: bool) -> Outcome {
    if json {
        print_json(report)?;
    } else {
        print_out(&text(report))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn text(report: &GcReport) -> String {
    let mut out = String::new();
    for warning in &report.warnings {
        outln!(out, "warning: {warning}");
    }
    for c in &report.spared {
        outln!(
            out,
            "{:<8} {} [{}]: kept: {}",
            c.kind,
            c.name,
            c.module,
            c.why
        );
    }
    let verb = if report.dry_run { "would take" } else { "took" };
    for c in &report.candidates {
        let outcome = c
            .outcome
            .as_ref()
            .map(|o| format!(" → {o}"))
            .unwrap_or_default();
        let size = if c.bytes > 0 {
            format!(" ({} bytes)", c.bytes)
        } else {
            String::new()
        };
        // A shard holds many modules: it names none.
        let module = if c.module.is_empty() {
            String::new()
        } else {
            format!(" [{}]", c.module)
        };
        outln!(
            out,
            "{:<8} {}{module}{size}: {}{outcome}",
            c.kind,
            c.name,
            c.why
        );
    }
    let bytes = if report.dry_run {
        report.candidates.iter().map(|c| c.bytes).sum::<i64>()
    } else {
        report.bytes_freed
    };
    outln!(
        out,
        "gc of mesh {}: {verb} {} ({} bytes; kept {} artifact(s): the record's, the running, the pinned, each module's newest {} and what is younger than the grace of {}; spared {} a teammate may need)",
        report.mesh,
        report.candidates.len(),
        bytes,
        report.kept,
        report.keep_newest,
        grace_words(report.grace_ms),
        report.spared.len()
    );
    out
}
