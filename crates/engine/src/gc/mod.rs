//! gc: remove this mesh's images nothing needs, and nothing a teammate may need. Reachability
//! first: the keep set is the record's artifacts ∪ what machines run (read, not assumed; a manifest
//! digest a pod reports is mapped to its artifact through the builds' published digests and the
//! registry) ∪ each module's newest N successful builds ∪ pinned artifacts ∪ the bases they were
//! built from (gc holds the mesh itself, so no operation runs beside it). Then the team: nothing
//! built or published within the grace is taken, and a registry manifest that a tag outside this
//! mesh's unreachable set names is kept (a delete by digest would untag it); both are listed as
//! spared, saying why. A root that cannot be read makes gc take nothing and say which. The weighing
//! itself (the keep set, the candidates) is pure and lives in `crate::mesh::gc`; here it is read and taken.

const KIND: OperationKind = OperationKind::Gc;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::error::{GcError, TargetError};
use super::progress::{Emitter, LastWord, Payload, ProgressTx};
use super::targets::{KeepsRecord, LeftoverRemoval, Reach, Target};
use crate::backends::daemon::{Daemon, LazyDaemon};
use crate::backends::registry::{Deleted, RegistryClient, repository_in};
use crate::backends::state::{BuildQuery, StateDb, StateError, locked};
use crate::mesh::gc::roots::{keep_bases, keep_newest, keep_young};
use crate::mesh::gc::{
    CandidateKind, GcOutcome, Roots, candidates, is_this_mesh, manifest_candidates, short_name,
};
use crate::mesh::model::Mesh;
use crate::mesh::operation::OperationKind;
use crate::timefmt;

pub use crate::mesh::gc::{Candidate, GcReport, GcRules};

mod registry;
mod targets;

use registry::{Pulled, keep_running, spare_tagged};
pub use targets::{GcTargets, Other};

/// Every root of every target, read (`mesh` as its file says it); the other targets an operation
/// holds now, in words.
async fn read_roots(
    mesh: &Mesh,
    rules: &GcRules,
    daemon: &LazyDaemon,
    targets: GcTargets<'_>,
    db: &Mutex<StateDb>,
    registry: Option<&Pulled<'_>>,
) -> Result<(Roots, Vec<String>), GcError> {
    let state = |e: StateError| GcError::unreadable("the state database", e);
    let target = targets.acting;
    let file = mesh;
    let mesh = &file.on_target(target.name());
    let record = target
        .read_record(mesh, db)
        .await
        .map_err(|e| GcError::unreadable("the target's record", e))?;
    if let Some(warning) = record.warning {
        return Err(GcError::unreadable("the target's record", warning));
    }
    if let Some(warning) = record.team_warning {
        // The pins live with the record there: unread, a pinned artifact could be taken.
        return Err(GcError::unreadable("the target's pins", warning));
    }
    let mut roots = Roots {
        keep: BTreeMap::new(),
        running_manifests: BTreeSet::new(),
        kept_refs: BTreeSet::new(),
        builds: BTreeMap::new(),
    };
    for (module, entry) in &record.record {
        roots.keep.insert(
            entry.digest.clone(),
            ("record", format!("the record's artifact of {module}")),
        );
        roots.kept_refs.insert(entry.reference.clone());
    }
    let pins = {
        let db = locked(db).map_err(|e| state(e.into()))?;
        let rows = db
            .builds(&BuildQuery {
                mesh: mesh.name.clone(),
                limit: 1_000_000,
                ..BuildQuery::default()
            })
            .map_err(state)?;
        for row in rows {
            if let Some(module) = row.module.clone() {
                roots.builds.entry(module).or_default().push(row);
            }
        }
        db.pins(&mesh.name, target.name()).map_err(state)?
    };
    let root = target.machines_root();
    let machines = target
        .machines(mesh, &record.record, Reach { daemon, db })
        .await
        .map_err(|e| GcError::unreadable(root, e))?;
    keep_running(mesh, &machines, &mut roots, registry).await?;
    for (module, pin) in pins {
        roots.keep.insert(
            pin.to_digest.clone(),
            ("pinned", format!("{module} is pinned to it")),
        );
        roots.kept_refs.insert(pin.to_ref);
    }
    let held = targets::keep_others(file, targets.others, daemon, db, &mut roots, registry).await?;
    keep_newest(&mut roots, rules.keep_newest);
    keep_young(&mut roots, rules.grace_ms, timefmt::now_ms());
    keep_bases(&mut roots);
    Ok((roots, held))
}

/// Read every root of every target and list the candidates (nothing is taken). `mesh` as its
/// file says it.
pub async fn plan(
    mesh: &Mesh,
    rules: &GcRules,
    daemon: &LazyDaemon,
    targets: GcTargets<'_>,
    db: &Mutex<StateDb>,
) -> Result<GcReport, GcError> {
    let target = targets.acting;
    let registry = target.pushes_to();
    let client = match &registry {
        Some(registry) => Some(
            target
                .registry_client(registry)
                .await
                .map_err(|e| GcError::unreadable("the registry", e))?,
        ),
        None => None,
    };
    let pulled = registry
        .as_ref()
        .zip(client.as_ref())
        .map(|(registry, client)| Pulled {
            client,
            host: &registry.host,
        });
    let (roots, held_elsewhere) =
        read_roots(mesh, rules, daemon, targets, db, pulled.as_ref()).await?;
    let host = daemon
        .get()
        .await
        .map_err(|e| GcError::unreadable("the host daemon", e))?;
    let images = host
        .sized_images()
        .await
        .map_err(|e| GcError::unreadable("the host daemon", e))?;
    let (mut found, mut spared) = candidates(mesh, &roots, rules, &images, timefmt::now_ms());
    if let Some(pulled) = &pulled {
        // The registry must answer before anything is taken from it.
        for entry in target
            .read_record(&mesh.on_target(target.name()), db)
            .await
            .map_err(|e| GcError::unreadable("the target's record", e))?
            .record
            .values()
            .take(1)
        {
            let (path, tag) = repository_in(pulled.host, &entry.reference);
            pulled
                .client
                .manifest(path, tag)
                .await
                .map_err(|e| GcError::unreadable("the registry", e))?;
        }
        let manifests = manifest_candidates(&roots, rules.keep_newest, pulled.host);
        let (manifests, tagged) = spare_tagged(pulled, manifests, &roots.kept_refs).await?;
        found.extend(manifests);
        spared.extend(tagged);
    }
    found.extend(shard_candidates(target, rules.grace_ms).await?);
    let mut kept_by = BTreeMap::new();
    for (root, _) in roots.keep.values() {
        *kept_by.entry(root.to_string()).or_default() += 1;
    }
    let kept_bytes = images
        .iter()
        .filter(|i| is_this_mesh(mesh, i) && roots.keep.contains_key(&i.id))
        .map(|i| i.size)
        .sum();
    Ok(GcReport {
        mesh: mesh.name.clone(),
        dry_run: true,
        keep_newest: rules.keep_newest,
        kept: roots.keep.len(),
        kept_by,
        kept_bytes,
        grace_ms: rules.grace_ms,
        candidates: found,
        spared,
        bytes_freed: 0,
        warnings: held_elsewhere.clone(),
        held_elsewhere,
    })
}

/// The parts of the record the target keeps apart that no index names, past the grace (the
/// target never takes one younger than its own grace: a stamp in flight holds it).
async fn shard_candidates(
    target: &dyn KeepsRecord,
    grace_ms: i64,
) -> Result<Vec<Candidate>, GcError> {
    let leftovers = target
        .record_leftovers(grace_ms)
        .await
        .map_err(|e| GcError::unreadable("the target's record shards", e))?;
    Ok(leftovers
        .into_iter()
        .map(|shard| Candidate {
            kind: CandidateKind::Shard,
            why: format!(
                "no index of the record names it; written by operation {} {}, past the grace",
                shard.written_by,
                crate::mesh::gc::ago_words(shard.age_ms)
            ),
            name: shard.name,
            module: String::new(),
            artifact: String::new(),
            bytes: 0,
            outcome: None,
        })
        .collect())
}

/// Sweep, holding the mesh: the roots are read again under the lock and only what is still a
/// candidate (and was confirmed, when `confirmed` is given) is taken.
pub async fn sweep(
    mesh: &Mesh,
    rules: &GcRules,
    confirmed: Option<&[Candidate]>,
    daemon: &LazyDaemon,
    targets: GcTargets<'_>,
    db: &Arc<Mutex<StateDb>>,
    tx: Option<ProgressTx>,
) -> Result<GcReport, GcError> {
    let target = targets.acting;
    super::hold::Operation::new(target, db, &mesh.name, KIND)
        .progress(tx)
        .run(
            async |running| {
                take(
                    mesh,
                    rules,
                    confirmed,
                    daemon,
                    targets,
                    db,
                    &running.emitter,
                )
                .await
            },
            // Judged by what it did (no candidate failed), never by how its last line ends.
            |result| match result {
                Ok(report) => LastWord::judged(
                    !report.candidates.iter().any(Candidate::failed),
                    format!(
                        "gc: {} taken, {} bytes freed",
                        report.candidates.iter().filter(|c| c.taken()).count(),
                        report.bytes_freed
                    ),
                ),
                Err(error) => LastWord::failed_saying("gc: nothing taken", &error),
            },
        )
        .await
}

/// What takes a candidate: the host daemon (images, tags) and the registry (manifests), once it
/// said it allows no deletes (nothing more is asked of it then).
struct Taker<'a> {
    target: &'a dyn Target,
    grace_ms: i64,
    host: &'a Daemon,
    registry: Option<&'a RegistryClient>,
    unsupported: bool,
}

impl Taker<'_> {
    /// Take one candidate; a registry that allows no deletes says so once in `warnings`.
    async fn take(&mut self, candidate: &Candidate, warnings: &mut Vec<String>) -> GcOutcome {
        match candidate.kind {
            CandidateKind::Manifest => match self.registry {
                _ if self.unsupported => {
                    GcOutcome::Skipped("the registry does not allow deletes".into())
                }
                Some(client) => {
                    let (repository, digest) = candidate
                        .name
                        .split_once('@')
                        .unwrap_or((candidate.name.as_str(), ""));
                    match client.delete_manifest(repository, digest).await {
                        Ok(Deleted::Deleted) => GcOutcome::Deleted,
                        Ok(Deleted::Absent) => GcOutcome::AlreadyGone,
                        Ok(Deleted::Unsupported(message)) => {
                            self.unsupported = true;
                            warnings.push(message.clone());
                            GcOutcome::Skipped(message)
                        }
                        Err(error) => GcOutcome::Failed(error.to_string()),
                    }
                }
                None => GcOutcome::Skipped("no registry".into()),
            },
            CandidateKind::Shard => {
                match self
                    .target
                    .remove_leftover(&candidate.name, self.grace_ms)
                    .await
                {
                    Ok(LeftoverRemoval::Removed) => GcOutcome::Deleted,
                    Ok(LeftoverRemoval::AlreadyGone) => GcOutcome::AlreadyGone,
                    Ok(LeftoverRemoval::Kept(why)) => GcOutcome::Skipped(why),
                    Err(error) => GcOutcome::Failed(error.to_string()),
                }
            }
            kind @ (CandidateKind::Image | CandidateKind::Tag) => {
                match self.host.remove(&candidate.name).await {
                    Ok(()) if kind == CandidateKind::Image => GcOutcome::Removed,
                    Ok(()) => GcOutcome::Untagged,
                    Err(error) => GcOutcome::Failed(error.to_string()),
                }
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn take(
    mesh: &Mesh,
    rules: &GcRules,
    confirmed: Option<&[Candidate]>,
    daemon: &LazyDaemon,
    targets: GcTargets<'_>,
    db: &Arc<Mutex<StateDb>>,
    emitter: &Emitter,
) -> Result<GcReport, GcError> {
    let target = targets.acting;
    let _ = locked(db).map_err(GcError::Handle)?.operation_short(
        &mesh.name,
        target.name(),
        &emitter.operation_id,
        KIND,
    );
    let mut report = plan(mesh, rules, daemon, targets, db).await?;
    report.dry_run = false;
    // Another target's operation may be about to stamp what would be taken.
    if !report.held_elsewhere.is_empty() {
        return Err(GcError::HeldElsewhere(report.held_elsewhere.join("; ")));
    }
    if let Some(confirmed) = confirmed {
        report.candidates.retain(|c| {
            confirmed
                .iter()
                .any(|k| k.kind == c.kind && k.name == c.name)
        });
    }
    let host = daemon.get().await.map_err(TargetError::Unreachable)?;
    let registry = match target.pushes_to() {
        Some(registry) => Some(target.registry_client(&registry).await?),
        None => None,
    };
    let mut taker = Taker {
        target,
        grace_ms: rules.grace_ms,
        host,
        registry: registry.as_ref(),
        unsupported: false,
    };
    let mut lost: Option<String> = None;
    for candidate in &mut report.candidates {
        // Each delete is made only while this gc still holds the mesh (checked, and on Kubernetes
        // the Lease renewed, just before it); once lost, nothing more is taken.
        if lost.is_none()
            && let Err(error) = target
                .still_holds(db, &mesh.name, &emitter.operation_id)
                .await
        {
            // Said once, where it is shown: the event, the report's warning and each candidate.
            let said = error.to_string();
            emitter.emit(
                Payload::Failed {
                    error: said.clone(),
                },
                None,
                said.clone(),
            );
            report.warnings.push(said.clone());
            lost = Some(said);
        }
        if let Some(why) = &lost {
            candidate.outcome = Some(GcOutcome::Failed(format!("not taken: {why}")));
            continue;
        }
        let outcome = taker.take(candidate, &mut report.warnings).await;
        if outcome == GcOutcome::Removed {
            report.bytes_freed += candidate.bytes;
        }
        // gc's word on one candidate: its data is the report's.
        emitter.emit(
            Payload::Other,
            Some(&candidate.module),
            format!(
                "gc {} {}: {outcome}",
                candidate.kind,
                short_name(&candidate.name)
            ),
        );
        candidate.outcome = Some(outcome);
    }
    Ok(report)
}
