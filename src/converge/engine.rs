//! Converge = plan → refuse what must be refused, before any build → build tier by tier →
//! stamp the record once everything succeeded → create declared machines → send what policy rolls out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use serde::Serialize;
use tokio::sync::watch;

use super::build::{BuildJob, build_module};
use super::plan::{HistoryManifests, PlanContext, PlannedModule, Planner};
use super::progress::{Emitter, ProgressTx};
use super::target::TargetBackend;
use super::{machines, send};
use crate::backends::daemon::LazyDaemon;
use crate::backends::history::{BuildStatus, History, Holder};
use crate::mesh::decide::{Decision, short_id};
use crate::mesh::model::{Mesh, Record, RecordEntry};
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
    pub target: TargetBackend,
}

#[derive(Debug, Clone, Serialize)]
pub struct ModuleOutcome {
    pub name: String,
    pub tier: u32,
    pub decision: Decision,
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub digest: Option<String>,
    pub correlation_id: Option<String>,
    /// `skipped (record)`, `held by host`, `built`, `failed: …`, `refused: …`, `not reached: …`
    pub outcome: String,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConvergeSummary {
    pub converge_id: String,
    pub mesh: String,
    /// Warnings about the target's record (e.g. an unreadable annotation).
    pub warnings: Vec<String>,
    pub stamped: bool,
    pub modules: Vec<ModuleOutcome>,
    pub created: Vec<String>,
    pub sends: Vec<send::SendOutcome>,
    pub ok: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    #[error("mesh {mesh} is being converged by {} (host {}, process {}, since {}): wait for it, or pass --wait", .holder.converge_id, .holder.host, .holder.pid, timefmt::local_time(.holder.since_ms))]
    Busy { mesh: String, holder: Holder },
    #[error("meshtop refuses to build: there is nowhere to record builds ({0})")]
    NoRecord(String),
    #[error("refused before any build: {0}")]
    Refused(String),
    #[error("converge cancelled: running builds were marked cancelled, nothing was stamped")]
    Cancelled,
    #[error("{0}")]
    Failed(String),
}

fn lock(history: &Mutex<History>) -> Result<std::sync::MutexGuard<'_, History>, ConvergeError> {
    history
        .lock()
        .map_err(|_| ConvergeError::Failed("the state database handle is poisoned".into()))
}

/// Hold the mesh for this converge (or wait for it); a dead holder does not hold it forever.
pub async fn acquire(
    history: &Mutex<History>,
    mesh: &str,
    holder: &Holder,
    wait: bool,
) -> Result<(), ConvergeError> {
    loop {
        let held = lock(history)?
            .lock_converge(mesh, holder)
            .map_err(|e| ConvergeError::NoRecord(e.to_string()))?;
        match held {
            Ok(()) => return Ok(()),
            Err(current) if !wait => {
                return Err(ConvergeError::Busy {
                    mesh: mesh.to_string(),
                    holder: current,
                });
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
}

/// Run one converge. `cancel` flips to true on Ctrl-C.
pub async fn converge(
    request: ConvergeRequest,
    daemon: Arc<LazyDaemon>,
    tx: Option<ProgressTx>,
    mut cancel: watch::Receiver<bool>,
) -> Result<ConvergeSummary, ConvergeError> {
    let history =
        History::open(&request.state_path).map_err(|e| ConvergeError::NoRecord(e.to_string()))?;
    let history = Arc::new(Mutex::new(history));
    let mesh = &request.mesh;
    let converge_id = uuid::Uuid::now_v7().to_string();
    let holder = Holder::here(&converge_id);
    acquire(&history, &mesh.name, &holder, request.wait).await?;
    let heartbeat = spawn_heartbeat(
        request.state_path.clone(),
        mesh.name.clone(),
        converge_id.clone(),
    );
    let emitter = Emitter::new(history.clone(), &mesh.name, &converge_id, tx);
    let result = run(&request, &daemon, &history, &emitter, &mut cancel).await;
    heartbeat.abort();
    let outcome_text = match &result {
        Ok(summary) if summary.ok => "converge succeeded".to_string(),
        Ok(_) => "converge failed".to_string(),
        Err(error) => error.to_string(),
    };
    if result.as_ref().map(|s| !s.ok).unwrap_or(true) {
        let status = if matches!(result, Err(ConvergeError::Cancelled)) {
            BuildStatus::Cancelled
        } else {
            BuildStatus::Failed
        };
        if let Ok(history) = history.lock() {
            let _ = history.fail_running(&mesh.name, &converge_id, status, &outcome_text);
        }
    }
    emitter.finish(outcome_text);
    result
}

fn spawn_heartbeat(
    path: PathBuf,
    mesh: String,
    converge_id: String,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // Opened at the first beat, not before: a converge the record answers ends long before.
        let mut history: Option<History> = None;
        loop {
            tokio::time::sleep(Duration::from_secs(20)).await;
            if history.is_none() {
                history = History::open(&path).ok();
            }
            if let Some(history) = &history {
                let _ = history.heartbeat(&mesh, &converge_id);
            }
        }
    })
}

async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    while !*cancel.borrow() {
        if cancel.changed().await.is_err() {
            // Nobody can cancel any more: never resolve.
            std::future::pending::<()>().await;
        }
    }
}

fn outcome_of(planned: &PlannedModule, outcome: impl Into<String>, ok: bool) -> ModuleOutcome {
    ModuleOutcome {
        name: planned.name.clone(),
        tier: planned.tier,
        decision: planned.decision,
        reference: planned.reference.clone(),
        digest: planned.artifact.clone(),
        correlation_id: None,
        outcome: outcome.into(),
        ok,
    }
}

async fn run(
    request: &ConvergeRequest,
    daemon: &Arc<LazyDaemon>,
    history: &Arc<Mutex<History>>,
    emitter: &Emitter,
    cancel: &mut watch::Receiver<bool>,
) -> Result<ConvergeSummary, ConvergeError> {
    let mesh = &request.mesh;
    let target = &request.target;
    let record = super::target::read_record(mesh, target, history)
        .await
        .map_err(ConvergeError::Failed)?;
    if let Some(warning) = &record.warning {
        emitter.emit("warning", None, warning.clone());
    }
    let selected: Vec<&crate::mesh::Module> = mesh
        .modules
        .iter()
        .filter(|m| {
            request
                .modules
                .as_ref()
                .is_none_or(|names| names.contains(&m.name))
        })
        .collect();
    emitter.emit(
        "started",
        None,
        format!(
            "converge of {} module(s){}",
            selected.len(),
            if request.force { ", forced" } else { "" }
        ),
    );
    let ctx = PlanContext {
        mesh,
        record: record.record.clone(),
        record_source: record.source.clone(),
        selected: request.modules.clone(),
        force: request.force,
    };
    let manifests = HistoryManifests {
        history,
        mesh: &mesh.name,
    };
    let mut planner = Planner::new(ctx, daemon.clone());
    // First pass: every decision that can be made now, and every refusal, before any build.
    let mut planned: BTreeMap<String, PlannedModule> = BTreeMap::new();
    for module in &selected {
        let decided = planner
            .decide(module, &manifests)
            .await
            .map_err(ConvergeError::Failed)?;
        planned.insert(module.name.clone(), decided);
    }
    let refused: Vec<String> = planned
        .values()
        .filter(|p| p.decision == Decision::Refused)
        .map(|p| format!("{}: {}", p.name, p.reason))
        .collect();
    if !refused.is_empty() {
        for line in &refused {
            emitter.emit("refused", None, line.clone());
        }
        return Err(ConvergeError::Refused(refused.join("; ")));
    }
    // A build for several platforms can only be pushed, never loaded into a daemon.
    let pushes = matches!(target, TargetBackend::Kubernetes(_)) && mesh.registry.is_some();
    let unbuildable: Vec<String> = planned
        .values()
        .filter(|p| p.multi_platform && !pushes)
        .filter(|p| matches!(p.decision, Decision::Build | Decision::Forced))
        .filter_map(|p| Some((p, mesh.modules.iter().find(|m| m.name == p.name)?)))
        .map(|(p, m)| {
            format!(
                "module {} ({}:{}) builds for {} platforms, which needs a Kubernetes target and `registry` in [mesh] to push to: give it one platform for the docker target",
                m.name,
                mesh.file.display(),
                m.line,
                p.platforms.len()
            )
        })
        .collect();
    if !unbuildable.is_empty() {
        for line in &unbuildable {
            emitter.emit("refused", None, line.clone());
        }
        return Err(ConvergeError::Refused(unbuildable.join("; ")));
    }
    // Something will be delivered: the target must be able to take it, or nothing is built.
    if planned.values().any(|p| p.decision != Decision::Record)
        && let Err(why) = target.delivery()
    {
        emitter.emit("refused", None, why.clone());
        return Err(ConvergeError::Refused(why));
    }
    // Something will be stamped: the target must let us write the record, or nothing is built.
    let modules: Vec<&str> = planned.keys().map(String::as_str).collect();
    if planned.values().any(|p| p.decision != Decision::Record)
        && let Err(why) = super::target::check_converge_access(mesh, target, &modules).await
    {
        emitter.emit("refused", None, why.clone());
        return Err(ConvergeError::Refused(why));
    }
    let mut outcomes: Vec<ModuleOutcome> = Vec::new();
    let mut stamp: Record = Record::new();
    let mut all_ok = true;
    let max_tier = selected.iter().map(|m| m.tier).max().unwrap_or(0);
    for tier in 0..=max_tier {
        let in_tier: Vec<&crate::mesh::Module> = selected
            .iter()
            .copied()
            .filter(|m| m.tier == tier)
            .collect();
        if in_tier.is_empty() {
            continue;
        }
        let names: Vec<&str> = in_tier.iter().map(|m| m.name.as_str()).collect();
        emitter.defer("tier", None, format!("tier {tier}: {}", names.join(", ")));
        let mut jobs = Vec::new();
        for module in &in_tier {
            let mut decided = planned.remove(&module.name).ok_or_else(|| {
                ConvergeError::Failed(format!("module {} was not planned", module.name))
            })?;
            if decided.reference.is_none() {
                // Its base was built in an earlier tier: now its ref is known.
                decided = planner
                    .decide(module, &manifests)
                    .await
                    .map_err(ConvergeError::Failed)?;
            }
            emitter.defer(
                "decided",
                Some(&module.name),
                format!(
                    "{} {} — {}",
                    decided.decision,
                    decided.reference.as_deref().unwrap_or("(no ref)"),
                    decided.reason
                ),
            );
            match decided.decision {
                Decision::Refused => {
                    all_ok = false;
                    planner.failed(&module.name);
                    outcomes.push(outcome_of(
                        &decided,
                        format!("not reached: {}", decided.reason),
                        false,
                    ));
                }
                Decision::Record | Decision::Host => {
                    let (Some(reference), Some(artifact)) =
                        (decided.reference.clone(), decided.artifact.clone())
                    else {
                        return Err(ConvergeError::Failed(format!(
                            "module {}: a skip without ref or artifact",
                            module.name
                        )));
                    };
                    if decided.decision == Decision::Host
                        && let Err(error) = super::target::deliver(
                            mesh,
                            target,
                            daemon,
                            history,
                            &module.name,
                            &reference,
                            &artifact,
                            None,
                            emitter,
                        )
                        .await
                    {
                        all_ok = false;
                        planner.failed(&module.name);
                        emitter.emit("failed", Some(&module.name), error.clone());
                        outcomes.push(outcome_of(
                            &decided,
                            format!("failed: delivery: {error}"),
                            false,
                        ));
                        continue;
                    }
                    stamp.insert(
                        module.name.clone(),
                        RecordEntry {
                            reference,
                            digest: artifact,
                        },
                    );
                    let text = if decided.decision == Decision::Record {
                        "skipped (record)"
                    } else {
                        "skipped build (host), delivered"
                    };
                    outcomes.push(outcome_of(&decided, text, true));
                }
                Decision::Build | Decision::Forced => jobs.push(BuildJob {
                    module: (*module).clone(),
                    planned: decided,
                }),
            }
        }
        if jobs.is_empty() {
            continue;
        }
        let daemon_ref = daemon
            .get()
            .await
            .map_err(|e| ConvergeError::Failed(format!("cannot build: {e}")))?;
        let builds = futures_util::stream::iter(
            jobs.into_iter()
                .map(|job| build_module(job, mesh, daemon_ref, history, emitter)),
        )
        .buffer_unordered(request.jobs.max(1))
        .collect::<Vec<_>>();
        let results = tokio::select! {
            results = builds => results,
            () = cancelled(cancel) => return Err(ConvergeError::Cancelled),
        };
        for result in results {
            let built = result.map_err(|e| match e {
                super::build::BuildError::NoRecord(message) => ConvergeError::NoRecord(message),
                super::build::BuildError::Daemon(message) => ConvergeError::Failed(message),
            })?;
            match &built.artifact {
                Some(artifact) => {
                    let reference = built.planned.reference.clone().unwrap_or_default();
                    // A multi-platform build pushed itself (buildx --push).
                    let delivered = if built.published.is_some() {
                        Ok(())
                    } else {
                        super::target::deliver(
                            mesh,
                            target,
                            daemon,
                            history,
                            &built.planned.name,
                            &reference,
                            artifact,
                            Some(&built.correlation_id),
                            emitter,
                        )
                        .await
                    };
                    if let Err(error) = delivered {
                        all_ok = false;
                        planner.failed(&built.planned.name);
                        emitter.emit("failed", Some(&built.planned.name), error.clone());
                        let mut outcome =
                            outcome_of(&built.planned, format!("failed: delivery: {error}"), false);
                        outcome.digest = Some(artifact.clone());
                        outcome.correlation_id = Some(built.correlation_id.clone());
                        outcomes.push(outcome);
                        continue;
                    }
                    planner.built(&built.planned.name, artifact);
                    stamp.insert(
                        built.planned.name.clone(),
                        RecordEntry {
                            reference,
                            digest: artifact.clone(),
                        },
                    );
                    let mut outcome = outcome_of(&built.planned, "built", true);
                    outcome.digest = Some(artifact.clone());
                    outcome.correlation_id = Some(built.correlation_id.clone());
                    outcomes.push(outcome);
                }
                None => {
                    all_ok = false;
                    planner.failed(&built.planned.name);
                    let mut outcome = outcome_of(
                        &built.planned,
                        format!("failed: {}", built.error.clone().unwrap_or_default()),
                        false,
                    );
                    outcome.correlation_id = Some(built.correlation_id.clone());
                    outcomes.push(outcome);
                }
            }
        }
    }
    let summary = |stamped, created, sends, ok| ConvergeSummary {
        converge_id: emitter.converge_id.clone(),
        mesh: mesh.name.clone(),
        warnings: record.warning.iter().cloned().collect(),
        stamped,
        modules: outcomes.clone(),
        created,
        sends,
        ok,
    };
    if !all_ok {
        emitter.defer("stamped", None, "nothing stamped: a build failed");
        return Ok(summary(false, Vec::new(), Vec::new(), false));
    }
    // Entries the record already holds as they are stay as they were stamped (when, by which converge).
    // The "stamped" step reaches the database with the next one (the roll-out's, or "finished").
    stamp.retain(|module, entry| record.record.get(module) != Some(entry));
    if stamp.is_empty() {
        emitter.defer(
            "stamped",
            None,
            "record unchanged: it already names every artifact",
        );
    } else {
        super::target::stamp(mesh, target, history, &emitter.converge_id, &stamp)
            .await
            .map_err(ConvergeError::Failed)?;
        emitter.defer(
            "stamped",
            None,
            format!("record stamped: {} module(s)", stamp.len()),
        );
    }
    let mut merged = record.record.clone();
    merged.extend(stamp);
    let (created, sends) = roll_out(mesh, &merged, request, daemon, history, emitter).await?;
    let ok = sends.iter().all(|s| s.ok);
    Ok(summary(true, created, sends, ok))
}

/// After the stamp: create declared machines that do not exist yet, then send the behind machines
/// of every `rollout` module, in tier order. Under `record` policy nothing here touches the target.
async fn roll_out(
    mesh: &Mesh,
    record: &Record,
    request: &ConvergeRequest,
    daemon: &Arc<LazyDaemon>,
    history: &Arc<Mutex<History>>,
    emitter: &Emitter,
) -> Result<(Vec<String>, Vec<send::SendOutcome>), ConvergeError> {
    let in_scope = |module: &str| {
        request
            .modules
            .as_ref()
            .is_none_or(|names| names.contains(module))
    };
    let rolls_out = mesh
        .modules
        .iter()
        .any(|m| in_scope(&m.name) && m.policy == crate::mesh::Policy::Rollout);
    let declares = mesh.machines.iter().any(|m| in_scope(&m.module));
    if !rolls_out && !declares {
        return Ok((Vec::new(), Vec::new()));
    }
    let target = &request.target;
    let existing = machines::list(mesh, record, daemon, target, history)
        .await
        .map_err(ConvergeError::Failed)?;
    let created = machines::create_declared(mesh, record, &existing, &in_scope, daemon, emitter)
        .await
        .map_err(ConvergeError::Failed)?;
    let machines = if created.is_empty() {
        existing
    } else {
        machines::list(mesh, record, daemon, target, history)
            .await
            .map_err(ConvergeError::Failed)?
    };
    let mut sends = Vec::new();
    for module in mesh
        .modules
        .iter()
        .filter(|m| in_scope(&m.name) && m.policy == crate::mesh::Policy::Rollout)
    {
        let moves = send::moves_for(record, &machines, &module.name);
        for outcome in send::send(mesh, &moves, daemon, target, history, emitter).await {
            sends.push(outcome);
        }
    }
    if !sends.is_empty() {
        let moved = sends.iter().filter(|s| s.ok).count();
        emitter.emit(
            "sent",
            None,
            format!("{moved}/{} machine(s) moved", sends.len()),
        );
    }
    Ok((created, sends))
}

/// `demo/api:abc-amd64@3f9c2a1b7d4e` for messages.
pub fn describe(entry: &RecordEntry) -> String {
    format!("{}@{}", entry.reference, short_id(&entry.digest))
}
