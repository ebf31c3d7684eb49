//! Roll back: stamp a module's record with an earlier artifact, send every machine of the module
//! there whatever its policy, and pin the module (DESIGN.md: "pinned").

const KIND: OperationKind = OperationKind::Rollback;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::error::RollbackError;
use super::progress::{Emitter, LastWord, Payload, ProgressTx};
use super::send::{SendOutcome, send};
use super::targets::{Holding, Reach, Target};
use crate::backends::daemon::LazyDaemon;
use crate::backends::state::{BuildQuery, StateDb, locked, this_host};
use crate::mesh::builds::{BuildRow, BuildStatus};
use crate::mesh::machine::{Move, moves_for};
use crate::mesh::manifest::{Manifest, own_digest};
use crate::mesh::model::{Mesh, Record, RecordEntry};
use crate::mesh::operation::OperationKind;
use crate::mesh::progress::Stamp;
// Aliased: a rollback's destination is no target kind (tests/target_seam.rs looks for those).
use crate::mesh::pin::{Pin, PinChange, RollbackTarget as GoBack, StampBy, rollback_target};
use crate::mesh::text::short_id;
use crate::timefmt;

/// What a rollback of one module would do, for the person to confirm.
#[derive(Debug, Clone, Serialize)]
pub struct RollbackPlan {
    pub module: String,
    /// What the record names now.
    pub from: RecordEntry,
    /// The artifact it goes back to.
    pub to: RecordEntry,
    /// The build that made `to`, when the history knows it.
    pub build: Option<BuildRow>,
    /// Every machine of the module that does not run `to` yet, `digest → ref@digest`.
    pub moves: Vec<Move>,
}

/// What a rollback did.
#[derive(Debug, Clone, Serialize)]
pub struct RollbackReport {
    pub operation_id: String,
    pub short: i64,
    pub module: String,
    pub from: RecordEntry,
    pub to: RecordEntry,
    pub pinned: bool,
    pub outcomes: Vec<SendOutcome>,
}

impl RollbackReport {
    pub fn ok(&self) -> bool {
        self.outcomes.iter().all(|o| o.ok)
    }

    pub fn headline(&self) -> String {
        let moved = self.outcomes.iter().filter(|o| o.ok).count();
        let mut text = format!(
            "rolled back {} to {}@{} (#{}): {moved}/{} machine(s) moved; pinned {}",
            self.module,
            self.to.reference,
            short_id(&self.to.digest),
            self.short,
            self.outcomes.len(),
            crate::mesh::pin::ends_when(&self.module)
        );
        for failed in self.outcomes.iter().filter(|o| !o.ok) {
            text.push_str(&format!("\n  {}: {}", failed.moved.machine, failed.message));
        }
        text
    }
}

/// Find the artifact `--to` names: a build (correlation id or its prefix) or an artifact digest
/// (full or a prefix of at least 6 hex digits), among the module's builds and the record's history.
fn resolve_to(
    db: &StateDb,
    (mesh, target): (&str, &str),
    module: &str,
    to: &str,
) -> Result<(RecordEntry, Option<BuildRow>), RollbackError> {
    let builds = db.builds(&BuildQuery {
        mesh: mesh.to_string(),
        module: Some(module.to_string()),
        limit: 100_000,
        ..BuildQuery::default()
    })?;
    let wanted = to.strip_prefix("sha256:").unwrap_or(to);
    if wanted.len() < 6 {
        return Err(RollbackError::TooShort {
            to: to.to_string(),
            module: module.to_string(),
        });
    }
    let digest_matches = |digest: &str| short_matches(digest, wanted);
    let mut found: BTreeMap<String, (RecordEntry, Option<BuildRow>)> = BTreeMap::new();
    for build in builds
        .into_iter()
        .filter(|b| b.status == BuildStatus::Succeeded)
    {
        let (Some(reference), Some(digest)) = (build.reference.clone(), build.digest.clone())
        else {
            continue;
        };
        if build.id.starts_with(to) || digest_matches(&digest) {
            found
                .entry(digest.clone())
                .or_insert((RecordEntry::new(reference, digest), Some(build)));
        }
    }
    for stamp in db.stamps(mesh, target, module, 10_000)? {
        if digest_matches(&stamp.to_digest) && !found.contains_key(&stamp.to_digest) {
            found.insert(
                stamp.to_digest.clone(),
                (RecordEntry::new(stamp.to_ref, stamp.to_digest), None),
            );
        }
    }
    let mut found: Vec<_> = found.into_values().collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(RollbackError::NoMatch {
            to: to.to_string(),
            module: module.to_string(),
        }),
        count => Err(RollbackError::Ambiguous {
            to: to.to_string(),
            count,
            module: module.to_string(),
        }),
    }
}

fn short_matches(digest: &str, wanted: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .unwrap_or(digest)
        .starts_with(wanted)
}

/// The artifact the record named before the current one (the one rule: `mesh::pin::rollback_target`).
fn previous(
    db: &StateDb,
    (mesh, target): (&str, &str),
    module: &str,
    current: &RecordEntry,
) -> Result<RecordEntry, RollbackError> {
    let stamps = db.stamps(mesh, target, module, 10_000)?;
    match rollback_target(&stamps, current) {
        GoBack::To(entry) => Ok(entry),
        GoBack::NothingBefore => Err(RollbackError::NothingBefore {
            module: module.to_string(),
            reference: current.reference.clone(),
            short: short_id(&current.digest).to_string(),
        }),
        GoBack::Unknown => Err(RollbackError::NoStamp {
            module: module.to_string(),
            reference: current.reference.clone(),
            short: short_id(&current.digest).to_string(),
        }),
    }
}

/// What a rollback of `module` (to `to`, or to what the record named before) would move. Refused,
/// with the rebuild offered, when the target no longer holds the artifact.
pub async fn prepare(
    mesh: &Mesh,
    module: &str,
    to: Option<&str>,
    daemon: &LazyDaemon,
    target: &dyn Target,
    db: &Mutex<StateDb>,
) -> Result<RollbackPlan, RollbackError> {
    let record = target.read_record(mesh, db).await?;
    let Some(current) = record.record.get(module).cloned() else {
        return Err(RollbackError::NothingRecorded {
            record: record.source,
            module: module.to_string(),
        });
    };
    let (wanted, mut build) = {
        let db = locked(db).map_err(RollbackError::Handle)?;
        match to {
            Some(to) => resolve_to(&db, (&mesh.name, target.name()), module, to)?,
            None => (
                previous(&db, (&mesh.name, target.name()), module, &current)?,
                None,
            ),
        }
    };
    if wanted == current {
        return Err(RollbackError::AlreadyNamed {
            module: module.to_string(),
            reference: wanted.reference,
            short: short_id(&wanted.digest).to_string(),
        });
    }
    if build.is_none() {
        build = locked(db)
            .map_err(RollbackError::Handle)?
            .build_by_digest(&mesh.name, &wanted.digest)?;
    }
    held(
        mesh,
        module,
        &wanted,
        build.as_ref(),
        target,
        Reach { daemon, db },
    )
    .await?;
    let mut wanted_record = record.record.clone();
    wanted_record.insert(module.to_string(), wanted.clone());
    let machines = target
        .machines(mesh, &wanted_record, Reach { daemon, db })
        .await?;
    Ok(RollbackPlan {
        module: module.to_string(),
        from: current,
        to: wanted.clone(),
        build,
        moves: moves_for(&wanted_record, &machines, module),
    })
}

/// The target must still hold the artifact: the daemon (Docker, kind) or the registry (a push).
async fn held(
    mesh: &Mesh,
    module: &str,
    wanted: &RecordEntry,
    build: Option<&BuildRow>,
    target: &dyn Target,
    reach: Reach<'_>,
) -> Result<(), RollbackError> {
    match target.holds(mesh, wanted, reach).await? {
        Holding::Held => Ok(()),
        Holding::Gone(place) => Err(RollbackError::Gone {
            reference: wanted.reference.clone(),
            short: short_id(&wanted.digest).to_string(),
            place,
            offer: rebuild_offer(mesh, module, build),
        }),
    }
}

/// The exact commands that rebuild an artifact from its recorded inputs (its build's commit).
pub(crate) fn rebuild_offer(mesh: &Mesh, module: &str, build: Option<&BuildRow>) -> String {
    let Some(build) = build else {
        return format!(
            "No build record of it is known, so its inputs cannot be recovered: converge the module from the sources that made it (`meshtop converge --force {module}`)."
        );
    };
    match (&build.commit, build.dirty) {
        (Some(commit), false) => {
            let short = crate::mesh::text::short_commit(commit);
            let file = mesh
                .file
                .strip_prefix(&mesh.root)
                .ok()
                .and_then(|f| f.to_str())
                .unwrap_or("mesh.toml");
            format!(
                "Rebuild it from its recorded inputs (build {}, commit {short}): \
                 git -C {root} worktree add /tmp/meshtop-rebuild-{short} {commit} && \
                 meshtop --mesh /tmp/meshtop-rebuild-{short}/<path of {file} in the repository> converge --force {module}",
                crate::mesh::text::first_chars(&build.id, 8),
                root = mesh.root.display(),
            )
        }
        (Some(commit), true) => format!(
            "Its build {} ran on a dirty tree of commit {}: its inputs are not all in git; converge the module from those sources (`meshtop converge --force {module}`).",
            crate::mesh::text::first_chars(&build.id, 8),
            crate::mesh::text::short_commit(commit)
        ),
        (None, _) => format!(
            "Its build {} ran outside a git repository: converge the module from those sources (`meshtop converge --force {module}`).",
            crate::mesh::text::first_chars(&build.id, 8)
        ),
    }
}

/// The pin a rollback sets: both sides' own inputs where this state file kept their manifests.
fn pin_of(
    mesh: &Mesh,
    plan: &RollbackPlan,
    db: &Mutex<StateDb>,
    operation_id: &str,
    short: i64,
) -> Result<Pin, RollbackError> {
    let db = locked(db).map_err(RollbackError::Handle)?;
    let own = |reference: &str| -> Result<Option<String>, RollbackError> {
        let json = db.manifest(&mesh.name, &plan.module, reference)?;
        Ok(json
            .and_then(|json| serde_json::from_str::<Manifest>(&json).ok())
            .map(|manifest| own_digest(&manifest)))
    };
    Ok(Pin {
        module: plan.module.clone(),
        from_ref: plan.from.reference.clone(),
        from_digest: plan.from.digest.clone(),
        to_ref: plan.to.reference.clone(),
        to_digest: plan.to.digest.clone(),
        operation_id: operation_id.to_string(),
        short,
        host: this_host(),
        at_ms: timefmt::now_ms(),
        from_inputs: own(&plan.from.reference)?,
        to_inputs: own(&plan.to.reference)?,
    })
}

/// Carry out a confirmed rollback, holding the mesh: the record must still name what it named at
/// the confirm; stamp it with the rolled-back artifact, pin the module, send every machine.
pub async fn rollback(
    mesh: &Mesh,
    plan: &RollbackPlan,
    daemon: &LazyDaemon,
    target: &dyn Target,
    db: &Arc<Mutex<StateDb>>,
    tx: Option<ProgressTx>,
) -> Result<RollbackReport, RollbackError> {
    super::hold::Operation::new(target, db, &mesh.name, KIND)
        .progress(tx)
        .run(
            async |running| stamp_pin_send(mesh, plan, daemon, target, db, &running.emitter).await,
            // Judged by what it did, never by how its last line ends.
            |result| match result {
                Ok(report) => {
                    LastWord::judged(report.ok(), format!("rollback: {}", report.headline()))
                }
                Err(error) => LastWord::failed_saying("rollback: nothing rolled back", &error),
            },
        )
        .await
}

async fn stamp_pin_send(
    mesh: &Mesh,
    plan: &RollbackPlan,
    daemon: &LazyDaemon,
    target: &dyn Target,
    db: &Arc<Mutex<StateDb>>,
    emitter: &Emitter,
) -> Result<RollbackReport, RollbackError> {
    let module = &plan.module;
    let record = target.read_record(mesh, db).await?;
    if record.record.get(module) != Some(&plan.from) {
        return Err(RollbackError::Moved {
            module: module.clone(),
            reference: plan.from.reference.clone(),
            short: short_id(&plan.from.digest).to_string(),
        });
    }
    // Again under the lock, just before the stamp: a gc between the confirm and now may have
    // swept the artifact (the record must never name what the target no longer holds).
    let reach = Reach {
        daemon,
        db: db.as_ref(),
    };
    held(mesh, module, &plan.to, plan.build.as_ref(), target, reach).await?;
    // On a `require_signed` target the artifact rolled back to must be signed, as any other.
    let named = vec![(module.clone(), plan.to.clone())];
    let to = super::vouch::require_signed(mesh, target.name(), named, db.as_ref())
        .await?
        .into_iter()
        .next()
        .map_or_else(|| plan.to.clone(), |(_, entry)| entry);
    let short = locked(db).map_err(RollbackError::Handle)?.operation_short(
        &mesh.name,
        target.name(),
        &emitter.operation_id,
        KIND,
    )?;
    let pin = pin_of(mesh, plan, db, &emitter.operation_id, short)?;
    let entries: Record = BTreeMap::from([(module.clone(), to)]);
    let change = PinChange {
        set: vec![pin],
        end: Vec::new(),
    };
    target
        .stamp(
            mesh,
            db,
            StampBy::new(&emitter.operation_id, KIND),
            &entries,
            &change,
        )
        .await?;
    let stamp = Stamp::Module {
        from: Some(plan.from.clone()),
        to: plan.to.clone(),
    };
    emitter.emit(
        Payload::Stamped { stamp },
        Some(module),
        format!(
            "record stamped: {module} {}@{} → {}@{}",
            plan.from.reference,
            short_id(&plan.from.digest),
            plan.to.reference,
            short_id(&plan.to.digest)
        ),
    );
    let mut merged = record.record.clone();
    merged.extend(entries);
    let machines = target
        .machines(
            mesh,
            &merged,
            Reach {
                daemon,
                db: db.as_ref(),
            },
        )
        .await?;
    let moves = moves_for(&merged, &machines, module);
    let outcomes = send(mesh, &moves, daemon, target, db, emitter).await;
    Ok(RollbackReport {
        operation_id: emitter.operation_id.clone(),
        short,
        module: module.clone(),
        from: plan.from.clone(),
        to: plan.to.clone(),
        pinned: true,
        outcomes,
    })
}

/// Unpin a module, holding the mesh: the pin lives with the record, so the unpin is a write there.
/// Whether it was pinned.
pub async fn unpin(
    mesh: &Mesh,
    module: &str,
    target: &dyn Target,
    db: &Arc<Mutex<StateDb>>,
) -> Result<bool, RollbackError> {
    super::hold::Operation::new(target, db, &mesh.name, OperationKind::Unpin)
        .run(
            async |running| {
                unpin_held(mesh, module, target, db, &running.emitter.operation_id).await
            },
            |result| match result {
                Ok(true) => LastWord::judged(true, format!("unpin: unpinned {module}")),
                Ok(false) => LastWord::judged(true, format!("unpin: {module} was not pinned")),
                Err(error) => LastWord::failed_saying("unpin: nothing changed", &error),
            },
        )
        .await
}

async fn unpin_held(
    mesh: &Mesh,
    module: &str,
    target: &dyn Target,
    db: &Mutex<StateDb>,
    operation_id: &str,
) -> Result<bool, RollbackError> {
    // Read the target first: its pins are the ones to end (the state database holds a copy).
    let read = target.read_record(mesh, db).await?;
    if let Some(warning) = read.team_warning {
        return Err(RollbackError::KeptUnreadable(warning));
    }
    let pinned = locked(db)
        .map_err(RollbackError::Handle)?
        .pins(&mesh.name, target.name())?
        .contains_key(module);
    if !pinned {
        return Ok(false);
    }
    let change = PinChange {
        set: Vec::new(),
        end: vec![module.to_string()],
    };
    target
        .stamp(
            mesh,
            db,
            StampBy::new(operation_id, OperationKind::Unpin),
            &Record::new(),
            &change,
        )
        .await?;
    Ok(true)
}
