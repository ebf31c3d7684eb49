//! Converge = plan → refuse what must be refused, before any build → build by the graph →
//! stamp the record once everything succeeded → create declared machines → send what policy rolls out.

use crate::error::HoldLost;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::converging::Converging;
pub use super::error::ConvergeError;
use super::plan::{PlanContext, PlannedModule, Planner, StateManifests};
use super::preflight;
use super::progress::{Emitter, LastWord, Payload, ProgressTx};
use super::rollout::roll_out;
pub use super::summary::{ConvergeSummary, ModuleEnd, ModuleOutcome};
use super::targets::{Connected, RecordRead};
use super::vouch::RegistryVoucher;
use super::walk::Walk;
use crate::backends::daemon::LazyDaemon;
use crate::backends::state::StateDb;
use crate::mesh::Module;
use crate::mesh::builds::BuildStatus;
use crate::mesh::decide::Decision;
use crate::mesh::model::{Mesh, Record};
use crate::mesh::operation::OperationKind;
use crate::mesh::pin::StampBy;
use crate::mesh::progress::{Outcome, Stamp};

pub struct ConvergeRequest {
    pub mesh: Mesh,
    pub state_path: PathBuf,
    pub force: bool,
    /// Builds at once.
    pub jobs: usize,
    /// None = every module.
    pub modules: Option<BTreeSet<String>>,
    /// Wait for another converge of the mesh instead of failing.
    pub wait: bool,
    /// The target, connected once for the command.
    pub target: Connected,
}

/// Builds at once when nobody says: twice the cores, and at least 4. A build mostly waits on its
/// daemon (a build on a base spends about a second in the daemon here, most of it exporting the
/// image, with this machine's cores near idle), so one per core left the cores idle: 300 modules
/// from nothing took 150 s with 2 at once, 75 s with 4, 69 s with 8 (docs/scale.md). Each
/// builder's own `max_builds` still holds.
pub fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(4, |n| (2 * n.get()).max(4))
}

/// Run one converge. `cancel` flips to true on Ctrl-C.
pub async fn converge(
    request: ConvergeRequest,
    daemon: Arc<LazyDaemon>,
    tx: Option<ProgressTx>,
    mut cancel: watch::Receiver<bool>,
) -> Result<ConvergeSummary, ConvergeError> {
    let db = StateDb::open(&request.state_path).map_err(|e| ConvergeError::NoRecord(e.into()))?;
    let db = Arc::new(Mutex::new(db));
    let mesh = &request.mesh;
    let target = &request.target;
    let kind = if request.force {
        OperationKind::Force
    } else {
        OperationKind::Converge
    };
    super::hold::Operation::new(target.as_ref(), &db, &mesh.name, kind)
        .waiting(request.wait)
        .progress(tx)
        .run(
            async |running| {
                let (emitter, lost) = (&running.emitter, running.lost.clone());
                let result = run(&request, &daemon, &db, emitter, &mut cancel, lost).await;
                if result.as_ref().map(|s| !s.ok).unwrap_or(true) {
                    // The builds it left running end with it, as what it ended with.
                    let status = match &result {
                        Err(ConvergeError::Cancelled) => BuildStatus::Cancelled,
                        // Built, but its end was not written: not a failed build.
                        Err(ConvergeError::Unrecorded(_)) => BuildStatus::Stopped,
                        _ => BuildStatus::Failed,
                    };
                    if let Ok(db) = db.lock() {
                        let text = last_word(&result).text;
                        let _ = db.fail_running(&mesh.name, &emitter.operation_id, status, &text);
                    }
                }
                result
            },
            last_word,
        )
        .await
}

/// A converge's last word: how it ended, and what it says.
fn last_word(result: &Result<ConvergeSummary, ConvergeError>) -> LastWord {
    match result {
        Ok(summary) if summary.ok => LastWord::judged(true, "converge succeeded"),
        Ok(_) => LastWord::judged(false, "converge failed"),
        Err(ConvergeError::Cancelled) => LastWord {
            outcome: Outcome::Cancelled,
            error: Some(ConvergeError::Cancelled.to_string()),
            text: ConvergeError::Cancelled.to_string(),
        },
        Err(error) => LastWord::failed(&error),
    }
}

/// What every step of one converge reaches: the request, and the context the walk, the placer
/// and the deliveries share (made here, once).
struct Run<'a> {
    request: &'a ConvergeRequest,
    cx: Converging<'a>,
}

async fn run(
    request: &ConvergeRequest,
    daemon: &Arc<LazyDaemon>,
    db: &Arc<Mutex<StateDb>>,
    emitter: &Emitter,
    cancel: &mut watch::Receiver<bool>,
    lost: watch::Receiver<Option<HoldLost>>,
) -> Result<ConvergeSummary, ConvergeError> {
    let at = Run {
        request,
        cx: Converging {
            mesh: &request.mesh,
            target: request.target.as_ref(),
            host: daemon,
            db,
            emitter,
        },
    };
    let mesh = &request.mesh;
    let target = &request.target;
    let record = target.read_entries(mesh, db).await?;
    if let Some(warning) = &record.warning {
        emitter.emit(Payload::Warning, None, warning.clone());
    }
    // Pins (and the history) that cannot be read stop the converge before any build, push or
    // signature: deciding without them would send a rolled-back module forward again.
    if let Some(warning) = &record.team_warning {
        let refused = format!("{warning}; nothing was built or pushed");
        emitter.emit(Payload::Refused, None, refused.clone());
        return Err(ConvergeError::Refused(refused));
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
    // A stamp the record cannot take in any form is refused now, not after building and pushing.
    let new_modules = selected
        .iter()
        .filter(|m| !record.record.contains_key(&m.name))
        .count();
    if let Some(refused) = record
        .room
        .as_ref()
        .and_then(|room| room.refuses(&record.source, new_modules))
    {
        emitter.emit(Payload::Refused, None, refused.clone());
        return Err(ConvergeError::Refused(refused));
    }
    refuse_own_files(&at, &selected)?;
    announce(&at, &selected);
    let mut pool = super::builders::check_pool(mesh, daemon, request.jobs, Some(emitter))
        .await
        .map_err(|e| {
            emitter.emit(Payload::Refused, None, e.to_string());
            ConvergeError::BadInput(e.to_string())
        })?;
    let manifests = StateManifests {
        db,
        mesh: &mesh.name,
        target: target.name(),
    };
    let (planner, planned) = plan(&at, &record, &selected, &manifests).await?;
    // A platform no builder builds is refused before any build, naming it and the builders.
    let unbuildable =
        super::builders::unbuildable_platforms(&mut pool, &planned, mesh, daemon).await;
    if !unbuildable.is_empty() {
        for line in &unbuildable {
            emitter.emit(Payload::Refused, None, line.clone());
        }
        return Err(ConvergeError::Refused(unbuildable.join("; ")));
    }
    let mut walk = Walk {
        cx: at.cx,
        planner,
        manifests,
        planned,
        outcomes: Vec::new(),
        stamp: Record::new(),
        all_ok: true,
        lost: lost.clone(),
        building: BTreeMap::new(),
    };
    let mut placer = super::place::Placer::new(at.cx, pool, request.jobs);
    walk.run_all(&selected, &mut placer, cancel).await?;
    // A converge that lost the mesh (frozen, then taken over) stamps nothing and sends nothing.
    if let Some(message) = lost.borrow().clone() {
        return Err(ConvergeError::LockLost(message));
    }
    stamp_and_roll_out(&at, &record, walk).await
}

/// meshtop's own files (the state database, the log) in a context: refused before anything is
/// planned or built.
fn refuse_own_files(at: &Run<'_>, selected: &[&Module]) -> Result<(), ConvergeError> {
    let own = crate::workspace::own_files::refusals(
        selected
            .iter()
            .map(|m| (m.name.as_str(), m.context.as_path())),
        &at.request.state_path,
        crate::workspace::own_files::log_dir()
            .map(|dir| dir.join(crate::workspace::own_files::LOG_FILE))
            .as_deref(),
    );
    if own.is_empty() {
        return Ok(());
    }
    for line in &own {
        at.cx.emitter.emit(Payload::Refused, None, line.clone());
    }
    Err(ConvergeError::Refused(own.join("; ")))
}

/// `started`, then each module and its tier's place, so that a follower shows the whole converge
/// from its start.
fn announce(at: &Run<'_>, selected: &[&Module]) {
    at.cx.emitter.emit(
        Payload::Started {
            modules: selected.len() as u32,
        },
        None,
        format!(
            "converge of {} module(s){}",
            selected.len(),
            if at.request.force { ", forced" } else { "" }
        ),
    );
    let mut tiers: Vec<u32> = selected.iter().map(|m| m.tier).collect();
    tiers.sort_unstable();
    tiers.dedup();
    for module in selected {
        let index = tiers.iter().position(|t| *t == module.tier).unwrap_or(0);
        let place = crate::mesh::progress::TierPlace {
            index: index as u32 + 1,
            total: tiers.len() as u32,
        };
        at.cx
            .emitter
            .defer(Payload::Queued { place }, Some(&module.name), place.text());
    }
}

/// Every decision that can be made before any build, and every refusal: nothing is built when
/// something is refused or the target would not let us write what we will write.
async fn plan<'a>(
    at: &Run<'a>,
    record: &RecordRead,
    selected: &[&Module],
    manifests: &StateManifests<'_>,
) -> Result<(Planner<'a>, BTreeMap<String, PlannedModule>), ConvergeError> {
    let (mesh, target, emitter) = (&at.request.mesh, &at.request.target, at.cx.emitter);
    let ctx = PlanContext::new(
        mesh,
        target.as_ref(),
        record,
        at.request.modules.clone(),
        at.request.force,
    );
    let mut planner = Planner::new(ctx, at.cx.host.clone());
    planner.use_registry(super::vouch::RegistryVoucher::for_mesh(mesh, target.name()).await);
    // Every upstream locked before any address is computed (resolved now only if mesh.lock lacks it).
    planner.lock_upstreams(selected).await?;
    for note in planner.upstreams_locked() {
        emitter.emit(Payload::Warning, None, note.clone());
    }
    // First pass: every decision that can be made now, and every refusal, before any build.
    let mut planned = first_pass(&mut planner, selected, manifests).await?;
    // An artifact the record vouches for and this converge uses (a dependent builds FROM it, a
    // machine runs it) must be on the target: on Docker the host's listing says (asked only then).
    if planner.host_images_answer() && uses_record_artifacts(&planned, mesh) {
        planner.ask_host(manifests).await;
    }
    let decided: Vec<&PlannedModule> = planned.values().collect();
    if planner.any_gone(&decided) || planner.any_unselected_base_gone(&decided) {
        planner.reset();
        planned = first_pass(&mut planner, selected, manifests).await?;
    }
    // A registry that could not be asked is said once per converge: now, or at the end if it
    // failed only later (a dependent asked once its base was built).
    if let Some(warning) = planner.registry_mut().and_then(RegistryVoucher::warn_once) {
        emitter.emit(Payload::Warning, None, warning);
    }
    let refused = preflight::refusals(&planned, mesh, target.as_ref());
    if !refused.is_empty() {
        for line in &refused {
            emitter.emit(Payload::Refused, None, line.clone());
        }
        return Err(ConvergeError::Refused(refused.join("; ")));
    }
    // Something will be stamped: the target must let us write the record, or nothing is built.
    let modules: Vec<&str> = planned.keys().map(String::as_str).collect();
    if planned.values().any(|p| p.decision != Decision::Record)
        && let Err(why) = target.check_converge_access(mesh, &modules).await
    {
        let why = why.to_string();
        emitter.emit(Payload::Refused, None, why.clone());
        return Err(ConvergeError::Refused(why));
    }
    Ok((planner, planned))
}

/// After every module: stamp what succeeded (only when everything did), end the pins the plan ended,
/// then create and send what policy rolls out.
async fn stamp_and_roll_out(
    at: &Run<'_>,
    record: &RecordRead,
    walk: Walk<'_>,
) -> Result<ConvergeSummary, ConvergeError> {
    let (mesh, target, db, emitter) = (
        &at.request.mesh,
        &at.request.target,
        at.cx.db,
        at.cx.emitter,
    );
    let Walk {
        outcomes,
        mut stamp,
        all_ok,
        mut planner,
        ..
    } = walk;
    // A registry that could not be asked is said once per converge.
    let registry_warning = planner.registry().and_then(RegistryVoucher::warning);
    if let Some(warning) = planner.registry_mut().and_then(RegistryVoucher::warn_once) {
        emitter.emit(Payload::Warning, None, warning);
    }
    // The summary says of the record what its step said: one word, in the events and the summary.
    let summary = |stamped, record_word: &str, created, sends, ok| ConvergeSummary {
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
        record: record_word.to_string(),
        modules: outcomes.clone(),
        created,
        sends,
        ok,
    };
    if !all_ok {
        let (word, stamp) = nothing_stamped(&outcomes);
        emitter.defer(Payload::Stamped { stamp }, None, word.clone());
        return Ok(summary(false, &word, Vec::new(), Vec::new(), false));
    }
    // Entries the record already holds as they are stay as they were stamped (when, by which converge).
    // The "stamped" step reaches the database with the next one (the roll-out's, or "finished").
    stamp.retain(|module, entry| record.record.get(module) != Some(entry));
    let stamp = signed_only(at, stamp).await?;
    let stamped = !stamp.is_empty();
    // The pins this converge ends go in the same write as its stamp (the team reads both there).
    let ended = super::pin_ends::ended_pins(mesh, target.name(), db, planner.ended_pins());
    if stamped || !ended.is_empty() {
        target
            .stamp(
                mesh,
                db,
                StampBy::new(&emitter.operation_id, OperationKind::Converge),
                &stamp,
                &ended,
            )
            .await?;
    }
    let (word, said) = record_word(&stamp);
    emitter.defer(Payload::Stamped { stamp: said }, None, word.clone());
    super::pin_ends::say_ended(emitter, planner.ended_pins(), &ended);
    let mut merged = record.record.clone();
    merged.extend(stamp);
    target
        .still_holds(db, &mesh.name, &emitter.operation_id)
        .await?;
    let (created, sends) = roll_out(
        mesh,
        &merged,
        at.request.modules.as_ref(),
        target.as_ref(),
        at.cx.host,
        db,
        emitter,
    )
    .await?;
    let ok = sends.iter().all(|s| s.ok);
    Ok(summary(stamped, &word, created, sends, ok))
}

/// What a converge that did not all succeed says of the record: nothing stamped, and which modules
/// missed (not only a build: a refused module or a failed delivery stamps nothing too).
fn nothing_stamped(outcomes: &[ModuleOutcome]) -> (String, Stamp) {
    let failed = outcomes.iter().filter(|o| !o.ok);
    let missed: Vec<String> = failed
        .clone()
        .map(|o| format!("{} {}", o.name, o.outcome.word()))
        .collect();
    let word = format!("nothing stamped: {}", missed.join(", "));
    let stamp = Stamp::Nothing {
        missed: failed.map(|o| o.name.clone()).collect(),
    };
    (word, stamp)
}

/// On a `require_signed` target nothing unsigned is stamped (refused, said); what the record held
/// already is checked by the send that would move a machine to it.
async fn signed_only(at: &Run<'_>, stamp: Record) -> Result<Record, ConvergeError> {
    let (mesh, target) = (&at.request.mesh, &at.request.target);
    let verified =
        super::vouch::require_signed(mesh, target.name(), stamp.into_iter().collect(), at.cx.db)
            .await
            .map_err(|unsigned| {
                let said = unsigned.to_string();
                at.cx.emitter.emit(Payload::Refused, None, said.clone());
                ConvergeError::Refused(said)
            })?;
    Ok(verified.into_iter().collect())
}

/// The record's word once the stamp is written (or found unchanged), and the step's data.
fn record_word(stamp: &Record) -> (String, Stamp) {
    if stamp.is_empty() {
        (
            "record unchanged: it already names every artifact".to_string(),
            Stamp::Unchanged,
        )
    } else {
        (
            format!("record stamped: {} module(s)", stamp.len()),
            Stamp::Stamped {
                modules: stamp.len() as u32,
            },
        )
    }
}

async fn first_pass(
    planner: &mut Planner<'_>,
    selected: &[&Module],
    manifests: &StateManifests<'_>,
) -> Result<BTreeMap<String, PlannedModule>, ConvergeError> {
    let decided = planner.decide_all(selected, manifests).await?;
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
        (p.decision.builds() && p.builds_on.iter().any(|on| from_record(on)))
            || (p.decision == Decision::Record
                && (p.policy == crate::mesh::Policy::Rollout
                    || mesh.machines.iter().any(|m| m.module == p.name)))
    })
}
