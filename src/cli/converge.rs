//! `meshtop converge`: the engine, from a terminal. Progress goes to stderr as it happens.

use std::process::ExitCode;
use std::sync::Arc;

use crate::backends::daemon::LazyDaemon;
use crate::backends::state::StateDb;
use crate::converge::engine::{self, ConvergeError, ConvergeRequest, ConvergeSummary};
use crate::converge::targets::Connected;
use crate::mesh::model::Mesh;
use crate::mesh::timeline_summary::TimelineSummary;

use super::args::{ConvergeArgs, Global};
use super::{Failure, Outcome, print_json, print_out, setup, spawn_progress_printer};

pub(crate) async fn run(global: &Global, args: ConvergeArgs) -> Outcome {
    let setup::ConvergeSetup {
        mesh,
        modules,
        state_path,
        jobs,
        target,
    } = setup::converge_setup(
        global,
        &args.modules,
        args.jobs,
        args.publish,
        args.sign_key.as_deref(),
    )
    .await?;
    if let Some(why) = signs_nothing(&mesh, &target) {
        return Err(Failure::input(why));
    }
    if let Some(acting_on) = target.acting_on() {
        eprintln!("meshtop: {acting_on}");
    }
    let (mesh_for_timeline, state_for_timeline) = (mesh.clone(), state_path.clone());
    let request = ConvergeRequest {
        target,
        mesh,
        state_path,
        force: args.force,
        jobs,
        modules,
        wait: args.wait,
    };
    let (tx, printer) = spawn_progress_printer();
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = cancel_tx.send(true);
        }
    });
    let result = engine::converge(request, Arc::new(LazyDaemon::new()), Some(tx), cancel_rx).await;
    ctrl_c.abort();
    let _ = printer.await;
    match result {
        Ok(summary) => {
            let timeline = timeline_summary(&state_for_timeline, &mesh_for_timeline, &summary);
            if args.json {
                print_json(&with_timeline(&summary, timeline.as_ref())?)?;
            } else {
                let mut text = summary.text();
                if let Some(timeline) = &timeline {
                    text.push_str(&timeline.line());
                    text.push('\n');
                }
                print_out(&text)?;
            }
            Ok(if summary.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
        Err(ConvergeError::Cancelled) => {
            eprintln!("meshtop: {}", ConvergeError::Cancelled);
            Ok(ExitCode::from(130))
        }
        Err(error @ ConvergeError::BadInput(_)) => Err(Failure::input(error.to_string())),
        Err(error) => Err(Failure::failed(error.to_string())),
    }
}

/// The converge's timeline account, read back as it was kept (none when `MESHTOP_TIMELINE=off`
/// or the database cannot be read: the converge itself stands).
fn timeline_summary(
    state_path: &std::path::Path,
    mesh: &Mesh,
    summary: &ConvergeSummary,
) -> Option<TimelineSummary> {
    let db = StateDb::open_for_reading(state_path).ok()?;
    let timeline = db.timeline(&summary.operation_id).ok()??.with_bases(mesh);
    Some(super::trace::summary(
        &db,
        mesh,
        &timeline,
        crate::timefmt::now_ms(),
    ))
}

/// `converge --json`: the summary's words as they were, and a `timeline` object beside them.
fn with_timeline(
    summary: &ConvergeSummary,
    timeline: Option<&TimelineSummary>,
) -> Result<serde_json::Value, Failure> {
    let mut value = serde_json::to_value(summary)
        .map_err(|e| Failure::failed(format!("cannot write JSON: {e}")))?;
    if let (Some(object), Some(timeline)) = (value.as_object_mut(), timeline) {
        let timeline = serde_json::to_value(timeline)
            .map_err(|e| Failure::failed(format!("cannot write JSON: {e}")))?;
        object.insert("timeline".into(), timeline);
    }
    Ok(value)
}

/// Why a signing key (`--sign-key`, `MESHTOP_SIGNING_KEY`) is bad input for this converge: it
/// pushes nothing, so nothing would be signed, and a key that signs nothing says nothing. A
/// converge pushes when the target is delivered to by a push (Kubernetes with a registry), when it
/// publishes (`--publish` with a registry), or when a pool of builders hands builds over through
/// the registry.
fn signs_nothing(mesh: &Mesh, target: &Connected) -> Option<String> {
    mesh.signing.key.as_ref()?;
    let has_registry = mesh.registry.is_some();
    let pushes = target.pushes_to().is_some()
        || (mesh.publish && has_registry)
        || (!mesh.builders.is_empty() && has_registry);
    if pushes {
        return None;
    }
    let described = target.describe();
    let add_registry = if has_registry {
        String::new()
    } else {
        format!(
            " and registry = \"host:port\" under [mesh] in {}",
            mesh.file.display()
        )
    };
    Some(format!(
        "--sign-key (or MESHTOP_SIGNING_KEY): this converge pushes nothing to sign: target {} ({}) is not delivered through a registry and the converge does not publish; add --publish{add_registry} to push and sign each build, or drop the key",
        described.name, described.kind
    ))
}
