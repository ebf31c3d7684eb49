//! Converge = plan → refuse what must be refused, before any build → build tier by tier →
//! stamp the record once everything succeeded → create declared machines → send what policy rolls out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::lock;
use super::plan::{PlanContext, PlannedModule, Planner, StateManifests};
use super::preflight;
use super::progress::{Emitter, ProgressTx, Step};
use super::rollout::roll_out;
pub use super::summary::{ConvergeSummary, ModuleOutcome};
use super::target::ConnectedTarget;
use super::tiers::TierRun;
use crate::backends::daemon::LazyDaemon;
use crate::backends::state::{Holder, StateDb};
use crate::mesh::Module;
use crate::mesh::builds::BuildStatus;
use crate::mesh::decide::Decision;
use crate::mesh::model::{Mesh, Record, RecordEntry};
use crate::mesh::text::short_id;
use crate::timefmt;

pub struct ConvergeRequest {
    pub mesh: Mesh,
    pub state_path: PathBuf,
    pub force: bool,
    /// Builds of one tier at once.
    pub jobs: usize,
    /// None = every module.
    pub modules: Option<BTreeSet<String>>,
    /// Wait for another converge of the mesh instead of failing.
    pub wait: bool,
    /// The target, connected once for the command.
    pub target: ConnectedTarget,
}

#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    #[error("mesh {mesh} is being converged by {} (host {}, process {}, since {}): wait for it, or pass --wait", .holder.operation_id, .holder.host, .holder.pid, timefmt::local_time(.holder.since_ms))]
    Busy { mesh: String, holder: Holder },
    #[error("meshtop refuses to build: there is nowhere to record builds ({0})")]
    NoRecord(String),
    #[error("refused before any build: {0}")]
    Refused(String),
    #[error("converge cancelled: running builds were marked cancelled, nothing was stamped")]
    Cancelled,
    /// Another converge took the mesh over (this one was frozen past the stale limit): nothing more
    /// is stamped or sent; the message names who took it.
    #[error("{0}")]
    LockLost(String),
    #[error("{0}")]
    Failed(String),
    /// A build ended but its end could not be written (a full disk): its row is marked `stopped`
    /// if it can be, else the next open of the state closes it so.
    #[error("{0}")]
    Unrecorded(String),
}

/// `LockLost` when this converge no longer holds the mesh (checked in the state database now).
pub(super) fn still_holds(
    db: &Mutex<StateDb>,
    mesh: &str,
    operation_id: &str,
) -> Result<(), ConvergeError> {
    let db = crate::backends::state::locked(db).map_err(ConvergeError::Failed)?;
    db.check_holds(mesh, operation_id)
        .map_err(|e| ConvergeError::LockLost(e.to_string()))
}

/// Run one converge. `cancel` flips to true on Ctrl-C.
pub async fn converge(
    request: ConvergeRequest,
    daemon: Arc<LazyDaemon>,
    tx: Option<ProgressTx>,
    mut cancel: watch::Receiver<bool>,
) -> Result<ConvergeSummary, ConvergeError> {
    let db =
        StateDb::open(&request.state_path).map_err(|e| ConvergeError::NoRecord(e.to_string()))?;
    let db = Arc::new(Mutex::new(db));
    let mesh = &request.mesh;
    let operation_id = uuid::Uuid::now_v7().to_string();
    let holder = Holder::here(&operation_id);
    let taken_from = lock::acquire(&db, &mesh.name, &holder, request.wait).await?;
    let (lost_tx, lost_rx) = watch::channel(None);
    let heartbeat = lock::spawn_heartbeat(
        request.state_path.clone(),
        mesh.name.clone(),
        operation_id.clone(),
        lost_tx,
    );
    let kind = if request.force { "force" } else { "converge" };
    let emitter = Emitter::new(db.clone(), &mesh.name, &operation_id, kind, tx);
    if let Some(from) = &taken_from {
        emitter.emit(Step::Warning, None, lock::took_over(&mesh.name, from));
    }
    let result = run(&request, &daemon, &db, &emitter, &mut cancel, lost_rx).await;
    heartbeat.abort();
    let outcome_text = match &result {
        Ok(summary) if summary.ok => "converge succeeded".to_string(),
        Ok(_) => "converge failed".to_string(),
        Err(error) => error.to_string(),
    };
    if result.as_ref().map(|s| !s.ok).unwrap_or(true) {
        let status = match result {
            Err(ConvergeError::Cancelled) => BuildStatus::Cancelled,
            // Built, but its end was not written: not a failed build.
            Err(ConvergeError::Unrecorded(_)) => BuildStatus::Stopped,
            _ => BuildStatus::Failed,
        };
        if let Ok(db) = db.lock() {
            let _ = db.fail_running(&mesh.name, &operation_id, status, &outcome_text);
        }
    }
    emitter.finish(outcome_text);
    result
}

async fn run(
    request: &ConvergeRequest,
    daemon: &Arc<LazyDaemon>,
    db: &Arc<Mutex<StateDb>>,
    emitter: &Emitter,
    cancel: &mut watch::Receiver<bool>,
    lost: watch::Receiver<Option<String>>,
) -> Result<ConvergeSummary, ConvergeError> {
    let mesh = &request.mesh;
    let target = &request.target;
    let record = super::target::read_record(mesh, target, db)
        .await
        .map_err(ConvergeError::Failed)?;
    if let Some(warning) = &record.warning {
        emitter.emit(Step::Warning, None, warning.clone());
    }
    let selected: Vec<&Module> = mesh
        .modules
        .iter()
        .filter(|m| {
            request
                .modules
                .as_ref()
                .is_none_or(|names| names.contains(&m.name))
        })
        .collect();
    // meshtop's own files (the state database, the log) in a context: refused before anything is
    // planned or built.
    let own = crate::workspace::own_files::refusals(
        selected
            .iter()
            .map(|m| (m.name.as_str(), m.context.as_path())),
        &request.state_path,
        crate::workspace::own_files::log_dir()
            .map(|dir| dir.join(crate::workspace::own_files::LOG_FILE))
            .as_deref(),
    );
    if !own.is_empty() {
        for line in &own {
            emitter.emit(Step::Refused, None, line.clone());
        }
        return Err(ConvergeError::Refused(own.join("; ")));
    }
    emitter.emit(
        Step::Started,
        None,
        format!(
            "converge of {} module(s){}",
            selected.len(),
            if request.force { ", forced" } else { "" }
        ),
    );
    // Each module and its tier's place, so that a follower shows the whole converge from its start.
    let mut tiers: Vec<u32> = selected.iter().map(|m| m.tier).collect();
    tiers.sort_unstable();
    tiers.dedup();
    for module in &selected {
        let index = tiers.iter().position(|t| *t == module.tier).unwrap_or(0);
        let place = crate::mesh::live::TierPlace {
            index: index as u32 + 1,
            total: tiers.len() as u32,
        };
        emitter.defer(Step::Queued, Some(&module.name), place.text());
    }
    let ctx = PlanContext {
        mesh,
        record: record.record.clone(),
        record_source: record.source.clone(),
        selected: request.modules.clone(),
        force: request.force,
    };
    let manifests = StateManifests {
        db,
        mesh: &mesh.name,
    };
    let mut planner = Planner::new(ctx, daemon.clone());
    planner.use_registry(super::vouch::RegistryVoucher::for_mesh(mesh).await);
    // First pass: every decision that can be made now, and every refusal, before any build.
    let mut planned = first_pass(&mut planner, &selected, &manifests).await?;
    // An artifact the record vouches for and this converge uses (a dependent builds FROM it, a
    // machine runs it) must be on the target: on Docker the host's listing says (asked only then).
    if planner.host_is_target() && uses_record_artifacts(&planned, mesh) {
        planner.ask_host().await;
    }
    let decided: Vec<&PlannedModule> = planned.values().collect();
    if planner.any_gone(&decided) || planner.any_unselected_base_gone(&decided) {
        planner.reset();
        planned = first_pass(&mut planner, &selected, &manifests).await?;
    }
    // A registry that could not be asked is said once per converge: now, or at the end if it
    // failed only later (a dependent asked once its base was built).
    let early_warning = planner
        .registry()
        .and_then(super::vouch::RegistryVoucher::warning);
    if let Some(warning) = &early_warning {
        emitter.emit(Step::Warning, None, warning.clone());
    }
    let refused = preflight::refusals(&planned, mesh, target);
    if !refused.is_empty() {
        for line in &refused {
            emitter.emit(Step::Refused, None, line.clone());
        }
        return Err(ConvergeError::Refused(refused.join("; ")));
    }
    // Something will be stamped: the target must let us write the record, or nothing is built.
    let modules: Vec<&str> = planned.keys().map(String::as_str).collect();
    if planned.values().any(|p| p.decision != Decision::Record)
        && let Err(why) = super::target::check_converge_access(mesh, target, &modules).await
    {
        emitter.emit(Step::Refused, None, why.clone());
        return Err(ConvergeError::Refused(why));
    }
    let mut walk = TierRun {
        mesh,
        target,
        daemon,
        db,
        emitter,
        planner,
        manifests,
        planned,
        jobs: request.jobs,
        outcomes: Vec::new(),
        stamp: Record::new(),
        all_ok: true,
        lost: lost.clone(),
    };
    let max_tier = selected.iter().map(|m| m.tier).max().unwrap_or(0);
    for tier in 0..=max_tier {
        let in_tier: Vec<&Module> = selected
            .iter()
            .copied()
            .filter(|m| m.tier == tier)
            .collect();
        if !in_tier.is_empty() {
            walk.run_tier(tier, &in_tier, cancel).await?;
        }
    }
    let TierRun {
        outcomes,
        mut stamp,
        all_ok,
        planner,
        ..
    } = walk;
    // A registry that could not be asked is said once per converge.
    let registry_warning = planner
        .registry()
        .and_then(super::vouch::RegistryVoucher::warning);
    if let (Some(warning), None) = (&registry_warning, &early_warning) {
        emitter.emit(Step::Warning, None, warning.clone());
    }
    let summary = |stamped, created, sends, ok| ConvergeSummary {
        operation_id: emitter.operation_id.clone(),
        operation: emitter.operation,
        mesh: mesh.name.clone(),
        warnings: record
            .warning
            .iter()
            .chain(registry_warning.iter())
            .cloned()
            .collect(),
        stamped,
        modules: outcomes.clone(),
        created,
        sends,
        ok,
    };
    // A converge that lost the mesh (frozen, then taken over) stamps nothing and sends nothing.
    if let Some(message) = lost.borrow().clone() {
        return Err(ConvergeError::LockLost(message));
    }
    if !all_ok {
        emitter.defer(Step::Stamped, None, "nothing stamped: a build failed");
        return Ok(summary(false, Vec::new(), Vec::new(), false));
    }
    // Entries the record already holds as they are stay as they were stamped (when, by which converge).
    // The "stamped" step reaches the database with the next one (the roll-out's, or "finished").
    stamp.retain(|module, entry| record.record.get(module) != Some(entry));
    if stamp.is_empty() {
        emitter.defer(
            Step::Stamped,
            None,
            "record unchanged: it already names every artifact",
        );
    } else {
        super::target::stamp(mesh, target, db, &emitter.operation_id, &stamp).await?;
        emitter.defer(
            Step::Stamped,
            None,
            format!("record stamped: {} module(s)", stamp.len()),
        );
    }
    super::rollback::end_pins(mesh, db, emitter, planner.ended_pins());
    let mut merged = record.record.clone();
    merged.extend(stamp);
    still_holds(db, &mesh.name, &emitter.operation_id)?;
    let (created, sends) = roll_out(mesh, &merged, request, daemon, db, emitter).await?;
    let ok = sends.iter().all(|s| s.ok);
    Ok(summary(true, created, sends, ok))
}

async fn first_pass(
    planner: &mut Planner<'_>,
    selected: &[&Module],
    manifests: &StateManifests<'_>,
) -> Result<BTreeMap<String, PlannedModule>, ConvergeError> {
    let decided = planner
        .decide_all(selected, manifests)
        .await
        .map_err(ConvergeError::Failed)?;
    Ok(decided.into_iter().map(|p| (p.name.clone(), p)).collect())
}

/// Whether this converge uses an artifact that only the record vouches for: a module built FROM a
/// `record` base or FROM a base outside the selection (the record names its artifact), or a
/// `record` module with declared machines or under `rollout` (machines may be created or sent to).
/// Nothing used: the host is not asked (the steady state makes no daemon call).
fn uses_record_artifacts(planned: &BTreeMap<String, PlannedModule>, mesh: &Mesh) -> bool {
    let from_record = |name: &str| {
        planned
            .get(name)
            .is_none_or(|p| p.decision == Decision::Record)
    };
    planned.values().any(|p| {
        (p.decision.builds() && p.base.as_deref().is_some_and(from_record))
            || (p.decision == Decision::Record
                && (p.policy == crate::mesh::Policy::Rollout
                    || mesh.machines.iter().any(|m| m.module == p.name)))
    })
}

/// `demo/api:abc-amd64@3f9c2a1b7d4e` for messages.
pub fn describe(entry: &RecordEntry) -> String {
    format!("{}@{}", entry.reference, short_id(&entry.digest))
}
