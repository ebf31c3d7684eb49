//! Promote: record and send, on one target, the exact artifact another target's record names (no
//! build, nothing pushed). An operation as the others are: a short id, the to-target held with a
//! heartbeat, progress events; the stamp is the seam's (history kind `promote`, naming the source)
//! and the roll-out is a converge's (`rollout::roll_out`: declared machines created, every machine
//! of the module sent whatever its policy, followed as a send is).

const KIND: OperationKind = OperationKind::Promote;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::error::{ConvergeError, TargetError};
use super::progress::{Emitter, LastWord, Payload, ProgressTx};
use super::send::SendOutcome;
use super::targets::{Artifact, Holding, Reach, RecordRead, Target};
use super::vouch;
use crate::backends::daemon::LazyDaemon;
use crate::backends::state::{Poisoned, StateDb, StateError, locked};
use crate::mesh::builds::BuildRow;
use crate::mesh::environments::artifact_text;
use crate::mesh::machine::{Move, moves_for};
use crate::mesh::model::{Mesh, Policy, Record, RecordEntry};
use crate::mesh::operation::OperationKind;
use crate::mesh::pin::{PinChange, StampBy};
use crate::mesh::progress::Stamp;
use crate::mesh::text::short_id;

/// Why a promote was refused or stopped: nothing was promoted unless the message says so.
#[derive(Debug, thiserror::Error)]
pub enum PromoteError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    State(#[from] StateError),
    /// The state database's handle could not be taken.
    #[error(transparent)]
    Handle(#[from] Poisoned),
    /// The to-target could not be held (another operation holds it), or was lost while stamping.
    /// Boxed: a converge error is large.
    #[error(transparent)]
    Hold(Box<ConvergeError>),
    #[error(
        "{record} of target {from} holds nothing for module {module}: nothing to promote (converge it there first: meshtop converge --target {from} {module})"
    )]
    NotRecorded {
        module: String,
        from: String,
        record: String,
    },
    #[error(
        "the record of {module} on target {target} moved since the promote was confirmed (confirmed {confirmed}, now {now}): nothing was promoted; look again and promote again"
    )]
    Moved {
        module: String,
        target: String,
        confirmed: String,
        now: String,
    },
    /// A record that cannot be read as a whole: a promote writes a few of its entries and would
    /// drop the rest, so nothing is stamped until it is mended.
    #[error("target {target}: {warning}; nothing was promoted or stamped")]
    Unreadable { target: String, warning: String },
    /// The to-target requires signed artifacts and one is not (checked at the confirm and again
    /// under the hold).
    #[error(transparent)]
    Unsigned(#[from] vouch::Unsigned),
    #[error(
        "{artifact} (module {module}, as target {from}'s record names it) is no longer held by {place}: target {to} cannot run it without a build; nothing was promoted or stamped. Build it again where it came from: meshtop converge --target {from} --force {module}"
    )]
    Gone {
        module: String,
        /// `ref@short digest`.
        artifact: String,
        place: String,
        from: String,
        to: String,
    },
}

impl From<ConvergeError> for PromoteError {
    fn from(error: ConvergeError) -> PromoteError {
        PromoteError::Hold(Box::new(error))
    }
}

/// The two targets of a promote, connected, and the mesh (as its file says it).
pub struct Promotion<'a> {
    pub mesh: &'a Mesh,
    pub from: &'a dyn Target,
    pub to: &'a dyn Target,
}

impl Promotion<'_> {
    fn source_mesh(&self) -> Mesh {
        self.mesh.on_target(self.from.name())
    }

    /// The mesh as the to-target sees it.
    fn to_mesh(&self) -> Mesh {
        self.mesh.on_target(self.to.name())
    }
}

/// One module of a promote, for the person to confirm.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromotedModule {
    pub module: String,
    /// What the from-target's record names: the artifact promoted.
    pub artifact: RecordEntry,
    /// The build that made it, when this state file knows it.
    pub build: Option<BuildRow>,
    /// Since when the from-target's record has named it (its newest stamp naming it), if known.
    pub since_ms: Option<i64>,
    /// What the to-target's record names now.
    pub current: Option<RecordEntry>,
    /// Every machine of the module on the to-target that does not run the artifact yet.
    pub moves: Vec<Move>,
}

impl PromotedModule {
    /// The to-target already names and runs it: nothing to do.
    pub(crate) fn done(&self) -> bool {
        self.current.as_ref() == Some(&self.artifact) && self.moves.is_empty()
    }
}

/// What a promote would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PromotePlan {
    pub from: String,
    pub to: String,
    pub modules: Vec<PromotedModule>,
}

impl PromotePlan {
    pub fn nothing_to_do(&self) -> bool {
        self.modules.iter().all(PromotedModule::done)
    }

    /// The plan in lines, as the command and the dashboard's confirm show it.
    pub fn lines(&self, now_ms: i64) -> Vec<String> {
        let mut lines = Vec::new();
        for m in &self.modules {
            let since = m
                .since_ms
                .map(|at| {
                    format!(
                        ", {}'s record has named it for {}",
                        self.from,
                        crate::timefmt::age_since(at, now_ms)
                    )
                })
                .unwrap_or_default();
            let build = match &m.build {
                Some(build) => format!("built by {}", build.made_by(now_ms)),
                None => "its build is not in this state file".to_string(),
            };
            lines.push(format!(
                "{}: {} {} ({build}{since})",
                m.module,
                self.from,
                artifact_text(Some(&m.artifact))
            ));
            lines.push(format!(
                "  {} now: {}",
                self.to,
                artifact_text(m.current.as_ref())
            ));
            if m.done() {
                lines.push(format!("  {} names and runs it already", self.to));
            }
            for moved in &m.moves {
                lines.push(format!(
                    "  {} {}: {} → {}@{}",
                    moved.kind,
                    moved.machine,
                    if moved.from.is_empty() {
                        "nothing".to_string()
                    } else {
                        short_id(&moved.from).to_string()
                    },
                    moved.to_reference,
                    short_id(&moved.to_digest)
                ));
            }
        }
        lines
    }
}

/// What a promote did.
#[derive(Debug, Clone, Serialize)]
pub struct PromoteReport {
    pub operation_id: String,
    /// Its short id in the mesh (`#142`).
    pub operation: Option<i64>,
    pub from: String,
    pub to: String,
    /// module → the artifact the to-target's record names now.
    pub stamped: BTreeMap<String, RecordEntry>,
    /// Declared machines created on the to-target.
    pub created: Vec<String>,
    pub sends: Vec<SendOutcome>,
}

impl PromoteReport {
    pub fn ok(&self) -> bool {
        self.sends.iter().all(|s| s.ok)
    }

    pub fn headline(&self) -> String {
        let id = crate::mesh::progress::operation_label(self.operation, &self.operation_id);
        let what: Vec<String> = self
            .stamped
            .iter()
            .map(|(module, entry)| format!("{module} {}", artifact_text(Some(entry))))
            .collect();
        let moved = self.sends.iter().filter(|s| s.ok).count();
        let mut machines = Vec::new();
        if !self.created.is_empty() {
            machines.push(format!("{} machine(s) created", self.created.len()));
        }
        if !self.sends.is_empty() || self.created.is_empty() {
            machines.push(format!("{moved}/{} machine(s) moved", self.sends.len()));
        }
        let mut text = format!(
            "promote {id} from {} to {}: {}; {}",
            self.from,
            self.to,
            if what.is_empty() {
                "the record already named it".to_string()
            } else {
                what.join(", ")
            },
            machines.join(", ")
        );
        for failed in self.sends.iter().filter(|s| !s.ok) {
            text.push_str(&format!("\n  {}: {}", failed.moved.machine, failed.message));
        }
        text
    }
}

/// The record as read, when it was read as a whole (a promote neither trusts nor overwrites a
/// record that reads as silent because it could not be parsed).
fn whole(target: &dyn Target, read: RecordRead) -> Result<RecordRead, PromoteError> {
    match read.warning {
        Some(warning) => Err(PromoteError::Unreadable {
            target: target.name().to_string(),
            warning,
        }),
        None => Ok(read),
    }
}

/// What promoting `modules` from `p.from` to `p.to` would do (nothing is held or changed).
pub async fn prepare(
    p: &Promotion<'_>,
    modules: &[String],
    daemon: &LazyDaemon,
    db: &Mutex<StateDb>,
) -> Result<PromotePlan, PromoteError> {
    let (from_mesh, to_mesh) = (p.source_mesh(), p.to_mesh());
    let source = whole(p.from, p.from.read_record(&from_mesh, db).await?)?;
    let here = whole(p.to, p.to.read_record(&to_mesh, db).await?)?;
    let mut wanted = here.record.clone();
    let mut chosen = Vec::new();
    for module in modules {
        let Some(artifact) = source.record.get(module).cloned() else {
            return Err(PromoteError::NotRecorded {
                module: module.clone(),
                from: p.from.name().to_string(),
                record: source.source.clone(),
            });
        };
        wanted.insert(module.clone(), artifact.clone());
        chosen.push(artifact);
    }
    let machines =
        p.to.machines(
            &rolled_out(&to_mesh, modules),
            &wanted,
            Reach { daemon, db },
        )
        .await?;
    // Said before the confirm; checked again under the hold before anything is stamped.
    let named: Vec<(String, RecordEntry)> = modules
        .iter()
        .cloned()
        .zip(chosen.iter().map(as_claimed))
        .collect();
    vouch::require_signed(p.mesh, p.to.name(), named, db).await?;
    let db = locked(db)?;
    let mut planned = Vec::new();
    for (module, artifact) in modules.iter().zip(chosen) {
        let since_ms = db
            .stamps(&p.mesh.name, p.from.name(), module, 1_000)?
            .into_iter()
            .find(|s| s.to_digest == artifact.digest)
            .map(|s| s.by.at_ms);
        planned.push(PromotedModule {
            module: module.clone(),
            build: db.build_by_digest(&p.mesh.name, &artifact.digest)?,
            since_ms,
            current: here.record.get(module).cloned(),
            moves: moves_for(&wanted, &machines, module),
            artifact,
        });
    }
    Ok(PromotePlan {
        from: p.from.name().to_string(),
        to: p.to.name().to_string(),
        modules: planned,
    })
}

/// The to-target's mesh with the promoted modules under `rollout`: a promote sends every machine of
/// the module whatever its policy, as a rollback does.
fn rolled_out(mesh: &Mesh, modules: &[String]) -> Mesh {
    let mut mesh = mesh.clone();
    for module in mesh
        .modules
        .iter_mut()
        .filter(|m| modules.contains(&m.name))
    {
        module.policy = Policy::Rollout;
    }
    mesh
}

/// Carry out a confirmed promote, holding the to-target: both records must still name what they
/// named at the confirm, the to-target must be able to run each artifact (else nothing is stamped),
/// then the stamp (history kind `promote`, naming the from-target; a pin of the module there ends:
/// a person chose this artifact) and the roll-out.
pub async fn promote(
    p: &Promotion<'_>,
    plan: &PromotePlan,
    daemon: &Arc<LazyDaemon>,
    db: &Arc<Mutex<StateDb>>,
    tx: Option<ProgressTx>,
) -> Result<PromoteReport, PromoteError> {
    super::hold::Operation::new(p.to, db, &p.mesh.name, KIND)
        .progress(tx)
        .run(
            async |running| {
                let emitter = &running.emitter;
                emitter.emit(
                    Payload::Started {
                        modules: plan.modules.len() as u32,
                    },
                    None,
                    format!(
                        "promote of {} module(s) from {} to {}",
                        plan.modules.len(),
                        plan.from,
                        plan.to
                    ),
                );
                let result = stamp_and_send(p, plan, daemon, db, emitter).await;
                if let Err(error) = &result {
                    emitter.emit(Payload::Refused, None, error.to_string());
                }
                result
            },
            |result| match result {
                Ok(report) if report.ok() => LastWord::judged(true, "promote succeeded"),
                Ok(report) => {
                    LastWord::judged(false, format!("promote failed: {}", report.headline()))
                }
                Err(error) => LastWord::failed_saying("promote: nothing promoted", &error),
            },
        )
        .await
}

async fn stamp_and_send(
    p: &Promotion<'_>,
    plan: &PromotePlan,
    daemon: &Arc<LazyDaemon>,
    db: &Arc<Mutex<StateDb>>,
    emitter: &Emitter,
) -> Result<PromoteReport, PromoteError> {
    let (from_mesh, to_mesh) = (p.source_mesh(), p.to_mesh());
    let source = whole(p.from, p.from.read_record(&from_mesh, db).await?)?.record;
    let here = whole(p.to, p.to.read_record(&to_mesh, db).await?)?;
    for m in &plan.modules {
        same(
            &m.module,
            p.from.name(),
            Some(&m.artifact),
            source.get(&m.module),
        )?;
        same(
            &m.module,
            p.to.name(),
            m.current.as_ref(),
            here.record.get(&m.module),
        )?;
    }
    // Under the hold, before anything is stamped: every artifact signed where that is required,
    // verified here in the registry (the source's `signed_by` is its claim, not a verdict)…
    let named = plan
        .modules
        .iter()
        .map(|m| (m.module.clone(), as_claimed(&m.artifact)))
        .collect();
    let verified: Record = vouch::require_signed(p.mesh, p.to.name(), named, db.as_ref())
        .await?
        .into_iter()
        .collect();
    // …and runnable there.
    for m in &plan.modules {
        let Some(entry) = verified.get(&m.module) else {
            continue;
        };
        let artifact = Artifact::of(&m.module, entry);
        let reach = Reach {
            daemon: daemon.as_ref(),
            db: db.as_ref(),
        };
        if let Holding::Gone(place) = p.to.bring(&to_mesh, artifact, reach, emitter).await? {
            return Err(PromoteError::Gone {
                module: m.module.clone(),
                artifact: artifact_text(Some(&m.artifact)),
                place,
                from: plan.from.clone(),
                to: plan.to.clone(),
            });
        }
    }
    let entries: Record = verified
        .into_iter()
        .filter(|(module, entry)| here.record.get(module) != Some(entry))
        .collect();
    let pinned = locked(db)?.pins(&p.mesh.name, p.to.name())?;
    let ended = PinChange {
        set: Vec::new(),
        end: plan
            .modules
            .iter()
            .filter(|m| pinned.contains_key(&m.module))
            .map(|m| m.module.clone())
            .collect(),
    };
    if !entries.is_empty() || !ended.is_empty() {
        let by = StampBy {
            operation_id: &emitter.operation_id,
            kind: KIND,
            from_target: Some(p.from.name()),
        };
        p.to.stamp(&to_mesh, db, by, &entries, &ended).await?;
    }
    say_stamped(emitter, plan, &here.record, &entries, &ended);
    let mut merged = here.record.clone();
    merged.extend(entries.clone());
    let modules: Vec<String> = plan.modules.iter().map(|m| m.module.clone()).collect();
    let scope: BTreeSet<String> = modules.iter().cloned().collect();
    let (created, sends) = super::rollout::roll_out(
        &rolled_out(&to_mesh, &modules),
        &merged,
        Some(&scope),
        p.to,
        daemon,
        db,
        emitter,
    )
    .await?;
    Ok(PromoteReport {
        operation_id: emitter.operation_id.clone(),
        operation: emitter.operation,
        from: plan.from.clone(),
        to: plan.to.clone(),
        stamped: entries,
        created,
        sends,
    })
}

/// Say each module the promote stamped (what its entry named, what it names now) and each pin it
/// ended.
fn say_stamped(
    emitter: &Emitter,
    plan: &PromotePlan,
    before: &Record,
    entries: &Record,
    ended: &PinChange,
) {
    for (module, entry) in entries {
        let was = before.get(module);
        let stamp = Stamp::Module {
            from: was.cloned(),
            to: entry.clone(),
        };
        emitter.emit(
            Payload::Stamped { stamp },
            Some(module),
            format!(
                "record stamped: {module} {} → {} (on {}, from {})",
                artifact_text(was),
                artifact_text(Some(entry)),
                plan.to,
                plan.from
            ),
        );
    }
    for module in &ended.end {
        emitter.emit(
            Payload::Warning,
            Some(module),
            format!(
                "pin of {module} on {} ended: promoted from {}",
                plan.to, plan.from
            ),
        );
    }
}

/// What the source's record names, its `signed_by` dropped: whoever can write the source's
/// record (the dev namespace's annotation, the state file) can write that word, so it is a claim,
/// not a verdict. The destination verifies the signature in the registry against its own trust
/// (`vouch::require_signed`) and keeps a signer only when it found the signature itself.
fn as_claimed(entry: &RecordEntry) -> RecordEntry {
    entry.clone().with_manifest(entry.manifest.clone(), None)
}

/// A record must still name what it named at the confirm.
fn same(
    module: &str,
    target: &str,
    confirmed: Option<&RecordEntry>,
    now: Option<&RecordEntry>,
) -> Result<(), PromoteError> {
    if confirmed == now {
        return Ok(());
    }
    Err(PromoteError::Moved {
        module: module.to_string(),
        target: target.to_string(),
        confirmed: artifact_text(confirmed),
        now: artifact_text(now),
    })
}
