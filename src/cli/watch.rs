//! `meshtop watch`: a dev loop like Tilt's or Skaffold's, but the plan is printed before anything
//! is spent. After a quiet period following a change in a watched context: the plan, then — when
//! it would build or deliver anything — one converge of the watched modules. Ctrl-C stops it.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::backends::daemon::LazyDaemon;
use crate::converge::engine::{self, ConvergeError, ConvergeRequest};
use crate::converge::plan::{self, Plan, PlanContext, StateManifests};
use crate::mesh::decide::Decision;
use crate::workspace::walks::WalkMemo;
use crate::workspace::watch::{ContextWatcher, own_files};

use super::args::{Global, WatchArgs};
use super::plan::plan_text;
use super::{Failure, Outcome, print_out, setup, spawn_progress_printer};

pub(crate) async fn run(global: &Global, args: WatchArgs) -> Outcome {
    let setup::ConvergeSetup {
        mesh,
        modules,
        state_path,
        jobs,
        target,
    } = setup::converge_setup(global, &args.modules, args.jobs, false, None).await?;
    let mut watcher = ContextWatcher::start(&mesh, modules.as_ref(), own_files(&state_path))
        .map_err(Failure::failed)?;
    // A change re-walks only the contexts it touched.
    let walks = Arc::new(WalkMemo::new());
    watcher.remember_walks(walks.clone());
    if let Some(fallback) = &watcher.fallback {
        eprintln!("meshtop: {fallback}");
    }
    let quiet = Duration::from_millis(args.quiet_ms);
    eprintln!(
        "meshtop: watching {} context(s) of mesh {}; a change converges after {} ms of quiet (Ctrl-C stops)",
        mesh.modules
            .iter()
            .filter(|m| modules.as_ref().is_none_or(|n| n.contains(&m.name)))
            .count(),
        mesh.name,
        args.quiet_ms
    );
    let plan_now = async |global: &Global| -> Result<Plan, Failure> {
        let db = Mutex::new(setup::open_state(global)?);
        let record = target
            .read_record(&mesh, &db)
            .await
            .map_err(Failure::failed)?;
        let ctx = PlanContext::new(&mesh, target.as_ref(), &record, modules.clone(), false);
        let manifests = StateManifests {
            db: &db,
            mesh: &mesh.name,
            target: target.name(),
        };
        plan::dry_run_watched(ctx, Arc::new(LazyDaemon::new()), &manifests, Some(&walks))
            .await
            .map_err(Failure::failed)
    };
    print_out(&plan_text(&plan_now(global).await?))?;
    loop {
        let touched = tokio::select! {
            burst = watcher.next_burst(quiet) => match burst {
                Some(touched) => touched,
                None => return Err(Failure::failed("the context watcher stopped")),
            },
            _ = tokio::signal::ctrl_c() => return Ok(ExitCode::SUCCESS),
        };
        eprintln!(
            "meshtop: inputs changed: {}",
            touched.iter().cloned().collect::<Vec<_>>().join(", ")
        );
        let plan = match plan_now(global).await {
            Ok(plan) => plan,
            // A context mid-edit (a file that vanished between walk and read) plans again next time.
            Err(failure) => {
                eprintln!("meshtop: plan failed: {}", failure.message);
                continue;
            }
        };
        print_out(&plan_text(&plan))?;
        if plan.modules.iter().all(|m| m.decision == Decision::Record) {
            eprintln!("meshtop: nothing to build or deliver: the record names every address");
            continue;
        }
        let request = ConvergeRequest {
            target: target.clone(),
            mesh: mesh.clone(),
            state_path: state_path.clone(),
            force: false,
            jobs,
            modules: modules.clone(),
            wait: true,
        };
        let (tx, printer) = spawn_progress_printer();
        let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
        let ctrl_c = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                let _ = cancel_tx.send(true);
            }
        });
        let result =
            engine::converge(request, Arc::new(LazyDaemon::new()), Some(tx), cancel_rx).await;
        ctrl_c.abort();
        let _ = printer.await;
        match result {
            Ok(summary) => print_out(&format!("{}\n", summary.headline()))?,
            Err(ConvergeError::Cancelled) => {
                eprintln!("meshtop: {}", ConvergeError::Cancelled);
                return Ok(ExitCode::from(130));
            }
            // The loop goes on: the next save may fix what failed.
            Err(error) => eprintln!("meshtop: converge failed: {error}"),
        }
    }
}
