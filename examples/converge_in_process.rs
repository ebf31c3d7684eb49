//! Time a converge in-process, as the dashboard runs one (no process start, no argument parsing):
//! the engine from loading the mesh file to its summary, with a new daemon handle every time.
//!
//! `cargo run --release --example converge_in_process -- MESH_FILE STATE_DB RUNS [fresh]`
//! prints the decisions seen and the median wall time in milliseconds. With `fresh`, every run
//! gets a new, empty state database next to STATE_DB (the record removed: the host answers).
//! Used by `scripts/bench-converge.sh`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use meshtop::backends::daemon::LazyDaemon;
use meshtop::converge::engine::{ConvergeRequest, converge};
use meshtop::converge::targets;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mesh_file, state, runs, rest @ ..] = args.as_slice() else {
        return Err("usage: converge_in_process MESH_FILE STATE_DB RUNS [fresh]".into());
    };
    let runs: usize = runs.parse().map_err(|e| format!("RUNS: {e}"))?;
    let fresh = rest.first().is_some_and(|a| a == "fresh");
    // The command's own runtime: one thread.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let mut times = Vec::new();
    let mut decisions = std::collections::BTreeMap::<String, usize>::new();
    for run in 0..runs.max(1) {
        let state_path = if fresh {
            PathBuf::from(format!("{state}.fresh-{run}"))
        } else {
            PathBuf::from(state)
        };
        let start = Instant::now();
        let mesh = meshtop::workspace::file::load(mesh_file.as_ref()).map_err(|e| e.to_string())?;
        let (_cancel, cancel_rx) = tokio::sync::watch::channel(false);
        let request = ConvergeRequest {
            mesh,
            state_path: state_path.clone(),
            force: false,
            jobs: 2,
            modules: None,
            wait: false,
            target: targets::docker(),
        };
        let summary = runtime
            .block_on(converge(
                request,
                Arc::new(LazyDaemon::new()),
                None,
                cancel_rx,
            ))
            .map_err(|e| e.to_string())?;
        times.push(start.elapsed().as_secs_f64() * 1000.0);
        if !summary.ok {
            return Err(format!("converge {} failed", summary.operation_id));
        }
        decisions.clear();
        for module in &summary.modules {
            *decisions.entry(module.decision.to_string()).or_default() += 1;
        }
        if fresh {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", state_path.display()));
            }
        }
    }
    times.sort_by(f64::total_cmp);
    for (decision, count) in &decisions {
        println!("decided {decision} {count}");
    }
    println!("median_ms {:.3}", times[times.len() / 2]);
    Ok(())
}
