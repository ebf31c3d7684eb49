//! `meshtop builders`: the mesh's builders as a converge's check finds them (reachable, version,
//! platforms, can push to the registry), with the builds a running converge has on each and the
//! builds still waiting for one. Exit 1 when a builder is out.

use std::sync::Arc;

use serde::Serialize;

use crate::backends::daemon::LazyDaemon;
use crate::converge::builders::{Member, Pool, check_pool};
use crate::mesh::pool::{PoolState, folds};

use super::args::{BuildersArgs, Global};
use super::{Failure, Outcome, print_json, print_out, setup};

/// One builder as shown.
#[derive(Debug, Serialize)]
struct Shown {
    name: String,
    endpoint: String,
    /// `ready` or `out`.
    state: &'static str,
    /// Why it is out (its last error).
    error: Option<String>,
    version: Option<String>,
    /// Every platform it builds: its own (`native`), then those it emulates (`emulated`), as its
    /// daemon's BuildKit says; the mesh file's `platforms` when it gives them.
    platforms: Vec<String>,
    native: Vec<String>,
    emulated: Vec<String>,
    /// The target's daemon: what it builds needs no hand-over.
    target_daemon: bool,
    running: usize,
    max_builds: u32,
}

/// What the command prints as JSON.
#[derive(Debug, Serialize)]
struct Answer {
    builders: Vec<Shown>,
    /// Builds a running converge has not placed yet (None: no converge runs).
    queued: Option<usize>,
    /// The running converge's short id (`#142`).
    operation: Option<i64>,
}

pub(crate) async fn run(global: &Global, args: BuildersArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    let host = Arc::new(LazyDaemon::new());
    let pool = check_pool(&mesh, &host, 1, None)
        .await
        .map_err(|e| Failure::input(e.to_string()))?;
    let (running, operation) = running_converge(global, &mesh.name);
    let mut builders = Vec::new();
    for member in &pool.members {
        builders.push(shown(member, &pool, &host, running.as_ref()).await);
    }
    let any_out = builders.iter().any(|b| b.state == "out");
    let answer = Answer {
        queued: running.as_ref().map(|r| r.queued.len()),
        operation,
        builders,
    };
    if args.json {
        print_json(&answer)?;
    } else {
        print_out(&text(&answer))?;
    }
    Ok(if any_out {
        std::process::ExitCode::from(1)
    } else {
        std::process::ExitCode::SUCCESS
    })
}

/// A member as shown; the local daemon of a mesh without builders is asked here (the converge's
/// check never asks it).
async fn shown(
    member: &Member,
    pool: &Pool,
    host: &LazyDaemon,
    running: Option<&PoolState>,
) -> Shown {
    let mut described = member.described.clone();
    let mut error = member.out.clone();
    if pool.handover.is_none() && described.is_none() && error.is_none() {
        match host.get().await {
            Ok(daemon) => match daemon.describe().await {
                Ok(d) => described = Some(d),
                Err(e) => error = Some(e.to_string()),
            },
            Err(e) => error = Some(e.to_string()),
        }
    }
    let texts = |list: &[crate::mesh::model::Platform]| -> Vec<String> {
        list.iter().map(ToString::to_string).collect()
    };
    let (native, emulated) = match &described {
        Some(d) if member.builder.platforms.is_empty() => {
            (vec![d.platform.to_string()], texts(&d.emulated()))
        }
        _ => (texts(&member.builder.platforms), Vec::new()),
    };
    let platforms: Vec<String> = native.iter().chain(&emulated).cloned().collect();
    let name = member.builder.name.clone();
    Shown {
        state: if error.is_some() { "out" } else { "ready" },
        endpoint: member.builder.endpoint.to_string(),
        error,
        version: described.map(|d| d.version),
        platforms,
        native,
        emulated,
        target_daemon: member.is_host,
        running: running
            .and_then(|r| r.builders.iter().find(|b| b.name == name))
            .map_or(0, |b| b.running.len()),
        max_builds: member.builder.max_builds,
        name,
    }
}

/// The pool of the converge that holds the mesh now, as its steps tell it, and its short id.
fn running_converge(global: &Global, mesh: &str) -> (Option<PoolState>, Option<i64>) {
    let Ok(db) = setup::open_state_for_reading(global) else {
        return (None, None);
    };
    let Ok(Some(latest)) = db.latest_operation(mesh) else {
        return (None, None);
    };
    let Ok(events) = db.events_after(mesh, 0, usize::MAX) else {
        return (None, None);
    };
    let mine: Vec<_> = events
        .iter()
        .filter(|e| e.operation_id == latest && folds(e.step))
        .collect();
    let operation = mine.first().and_then(|e| e.operation);
    let state = PoolState::of(
        mine.iter()
            .filter_map(|e| e.payload.as_ref().map(|p| (e.module.as_deref(), p))),
    );
    if state.finished {
        return (None, None);
    }
    (Some(state), operation)
}

fn text(answer: &Answer) -> String {
    let mut out = String::new();
    outln!(
        out,
        "{:<14} {:<8} {:<10} {:<34} {:<28} {:>7}  ERROR",
        "BUILDER",
        "STATE",
        "VERSION",
        "ENDPOINT",
        "PLATFORMS",
        "RUNNING"
    );
    for b in &answer.builders {
        let endpoint = if b.target_daemon {
            format!("{} (target)", b.endpoint)
        } else {
            b.endpoint.clone()
        };
        outln!(
            out,
            "{:<14} {:<8} {:<10} {:<34} {:<28} {:>7}  {}",
            b.name,
            b.state,
            b.version.as_deref().unwrap_or("-"),
            endpoint,
            platforms_cell(b),
            format!("{}/{}", b.running, b.max_builds),
            b.error.as_deref().unwrap_or("")
        );
    }
    match (answer.queued, answer.operation) {
        (Some(queued), Some(op)) => outln!(out, "converge #{op} runs: {queued} build(s) queued"),
        (Some(queued), None) => outln!(out, "a converge runs: {queued} build(s) queued"),
        _ => outln!(out, "no converge runs: 0 queued"),
    }
    out
}

/// `linux/amd64 +linux/arm64`: its own platforms, then `+` each it emulates.
fn platforms_cell(b: &Shown) -> String {
    let mut cells: Vec<String> = b.native.clone();
    cells.extend(b.emulated.iter().map(|p| format!("+{p}")));
    cells.join(" ")
}
