//! gc: remove this mesh's images nothing needs, and nothing a teammate may need. Reachability
//! first: the keep set is the record's artifacts ∪ what machines run (read, not assumed; a manifest
//! digest a pod reports is mapped to its artifact through the builds' published digests and the
//! registry) ∪ each module's newest N successful builds ∪ pinned artifacts ∪ the bases they were
//! built from (gc holds the mesh itself, so no operation runs beside it). Then the team: nothing
//! built or published within the grace is taken, and a registry manifest that a tag outside this
//! mesh's unreachable set names is kept (a delete by digest would untag it); both are listed as
//! spared, saying why. A root that cannot be read makes gc take nothing and say which.

const KIND: OperationKind = OperationKind::Gc;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::error::{GcError, TargetError};
use super::progress::{Emitter, LastWord, Payload, ProgressTx};
use super::targets::Reach;
use crate::backends::daemon::LazyDaemon;
use crate::backends::daemon::images::SizedImage;
use crate::backends::registry::{Deleted, repository_in, split_reference};
use crate::backends::state::{BuildQuery, StateDb, locked};
use crate::mesh::builds::{BuildRow, BuildStatus};
use crate::mesh::gc::{CandidateKind, GcOutcome, within_grace};
use crate::mesh::model::{MESH_LABEL, MODULE_LABEL, Mesh};
use crate::mesh::operation::OperationKind;
use crate::mesh::text::short_id;
use crate::timefmt;

pub use crate::mesh::gc::{Candidate, GcReport, GcRules};

mod keep;
mod registry;
mod targets;

use keep::{keep_bases, keep_newest, keep_young};

use registry::{Pulled, keep_running, manifest_candidates, spare_tagged};
pub use targets::{GcTargets, Other};

/// The root a build within the grace is kept by.
const GRACE: &str = "grace";

/// Every root, read; an unreadable one is an error naming it.
struct Roots {
    /// artifact → (which root keeps it, why).
    keep: BTreeMap<String, (&'static str, String)>,
    /// Manifest digests machines run (their artifacts are in `keep`): never deleted.
    running_manifests: BTreeSet<String>,
    /// refs the keep set names.
    kept_refs: BTreeSet<String>,
    /// module → its builds, newest first.
    builds: BTreeMap<String, Vec<BuildRow>>,
}

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
    let state = |e: String| GcError::unreadable("the state database", e);
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
        let db = locked(db).map_err(|e| state(e.to_string()))?;
        let rows = db
            .builds(&BuildQuery {
                mesh: mesh.name.clone(),
                limit: 1_000_000,
                ..BuildQuery::default()
            })
            .map_err(|e| state(e.to_string()))?;
        for row in rows {
            if let Some(module) = row.module.clone() {
                roots.builds.entry(module).or_default().push(row);
            }
        }
        db.pins(&mesh.name, target.name())
            .map_err(|e| state(e.to_string()))?
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

/// `[registry/]<mesh>/` — the repositories of this mesh's modules start with it.
fn mesh_prefix(mesh: &Mesh) -> String {
    match &mesh.registry {
        Some(registry) => format!("{}/{}/", registry.host, mesh.name),
        None => format!("{}/", mesh.name),
    }
}

fn is_mesh_tag(mesh: &Mesh, tag: &str) -> bool {
    let (repository, _) = split_reference(tag);
    repository
        .strip_prefix(&mesh_prefix(mesh))
        .is_some_and(|module| mesh.module(module).is_some())
}

/// This mesh's image: labelled with its name, or (no mesh label) labelled with one of its modules
/// and tagged into one of its repositories. Never another mesh's, never unlabelled.
fn is_this_mesh(mesh: &Mesh, image: &SizedImage) -> bool {
    match image.labels.get(MESH_LABEL) {
        Some(name) => *name == mesh.name,
        None => {
            image.labels.contains_key(MODULE_LABEL)
                && image.tags.iter().any(|tag| is_mesh_tag(mesh, tag))
        }
    }
}

fn unreachable_why(roots: &Roots, keep_newest: usize, module: &str, artifact: &str) -> String {
    let built = roots
        .builds
        .get(module)
        .map(|rows| {
            let ok: Vec<&BuildRow> = rows
                .iter()
                .filter(|b| b.status == BuildStatus::Succeeded && b.digest.is_some())
                .collect();
            match ok
                .iter()
                .position(|b| b.digest.as_deref() == Some(artifact))
            {
                Some(at) => format!(
                    "successful build #{} of {module} (keep {keep_newest})",
                    at + 1
                ),
                None => "no successful build of this mesh made it".into(),
            }
        })
        .unwrap_or_else(|| format!("no build of {module} is recorded"));
    format!("not the record's, run by no machine, not pinned; {built}")
}

/// What the host holds that nothing needs (candidates), and what it would take but for the grace
/// (spared).
fn candidates(
    mesh: &Mesh,
    roots: &Roots,
    rules: &GcRules,
    images: &[SizedImage],
    now_ms: i64,
) -> (Vec<Candidate>, Vec<Candidate>) {
    let mut out = Vec::new();
    let mut spared = Vec::new();
    for image in images.iter().filter(|i| is_this_mesh(mesh, i)) {
        let module = image.labels.get(MODULE_LABEL).cloned().unwrap_or_default();
        let candidate = |kind: CandidateKind, name: &str, why: String, bytes| Candidate {
            kind,
            name: name.into(),
            module: module.clone(),
            artifact: image.id.clone(),
            why,
            bytes,
            outcome: None,
        };
        let young = match roots.keep.get(&image.id) {
            Some((GRACE, why)) => Some(why.clone()),
            Some(_) => continue,
            None => within_grace("built", image.created_ms, now_ms, rules.grace_ms),
        };
        if let Some(why) = young {
            spared.push(candidate(CandidateKind::Image, &image.id, why, image.size));
            continue;
        }
        let why = unreachable_why(roots, rules.keep_newest, &module, &image.id);
        let ours: Vec<&String> = image
            .tags
            .iter()
            .filter(|t| is_mesh_tag(mesh, t) && !roots.kept_refs.contains(*t))
            .collect();
        if ours.len() == image.tags.len() {
            out.push(candidate(CandidateKind::Image, &image.id, why, image.size));
        } else {
            // A kept or foreign tag keeps the image: only this mesh's unreachable tags go.
            out.extend(
                ours.iter()
                    .map(|t| candidate(CandidateKind::Tag, t, why.clone(), 0)),
            );
        }
    }
    // Dependents before their bases: the daemon refuses to remove an image a child is built on.
    let tier = |c: &Candidate| mesh.module(&c.module).map_or(0, |m| m.tier);
    out.sort_by(|a, b| tier(b).cmp(&tier(a)).then_with(|| a.name.cmp(&b.name)));
    (out, spared)
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
    let docker = daemon
        .get()
        .await
        .map_err(|e| GcError::unreadable("the host daemon", e))?;
    let images = docker
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
                Err(error) => {
                    LastWord::failed_on(error.to_string(), format!("gc: nothing taken: {error}"))
                }
            },
        )
        .await
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
    let docker = daemon.get().await.map_err(TargetError::Unreachable)?;
    let registry = match target.pushes_to() {
        Some(registry) => Some(target.registry_client(&registry).await?),
        None => None,
    };
    let mut unsupported = false;
    let mut lost: Option<String> = None;
    for candidate in &mut report.candidates {
        // Each delete is made only while this gc still holds the mesh (checked, and on Kubernetes
        // the Lease renewed, just before it); once lost, nothing more is taken.
        if lost.is_none()
            && let Err(error) = target
                .still_holds(db, &mesh.name, &emitter.operation_id)
                .await
        {
            emitter.emit(
                Payload::Failed {
                    error: error.to_string(),
                },
                None,
                error.to_string(),
            );
            report.warnings.push(error.to_string());
            lost = Some(error.to_string());
        }
        if let Some(why) = &lost {
            candidate.outcome = Some(GcOutcome::Failed(format!("not taken: {why}")));
            continue;
        }
        let outcome = match candidate.kind {
            CandidateKind::Manifest => match &registry {
                _ if unsupported => {
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
                            unsupported = true;
                            report.warnings.push(message.clone());
                            GcOutcome::Skipped(message)
                        }
                        Err(error) => GcOutcome::Failed(error.to_string()),
                    }
                }
                None => GcOutcome::Skipped("no registry".into()),
            },
            kind @ (CandidateKind::Image | CandidateKind::Tag) => {
                match docker.remove(&candidate.name).await {
                    Ok(()) if kind == CandidateKind::Image => {
                        report.bytes_freed += candidate.bytes;
                        GcOutcome::Removed
                    }
                    Ok(()) => GcOutcome::Untagged,
                    Err(error) => GcOutcome::Failed(error.to_string()),
                }
            }
        };
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

fn short_name(name: &str) -> String {
    if name.starts_with("sha256:") {
        format!("sha256:{}", short_id(name))
    } else {
        name.to_string()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn build(id: &str, digest: &str, ended_ms: i64, published_ms: Option<i64>) -> BuildRow {
        BuildRow {
            id: id.into(),
            mesh: "demo".into(),
            module: Some("web".into()),
            repository: "demo/web".into(),
            commit: None,
            dirty: false,
            base_module: None,
            base_digest: None,
            reference: Some(format!("demo/web:{id}-amd64")),
            digest: Some(digest.into()),
            platforms: String::new(),
            status: BuildStatus::Succeeded,
            forced: false,
            why: String::new(),
            host: "h".into(),
            started_ms: ended_ms - 1_000,
            ended_ms: Some(ended_ms),
            error: None,
            log_tail: None,
            published_ref: Some(format!("r/demo/web:{id}-amd64")),
            published_digest: Some(format!("sha256:m{id}")),
            operation_id: None,
            published_ms,
            operation: None,
            builder: None,
            push_ms: None,
            daemon_ms: None,
            process_gone: false,
        }
    }

    #[test]
    fn built_or_published_within_the_grace_is_kept_saying_which() {
        let hour = 3_600_000;
        let now = 100 * hour;
        let mut roots = Roots {
            keep: BTreeMap::from([(
                "sha256:kept".to_string(),
                ("record", "the record's".to_string()),
            )]),
            running_manifests: BTreeSet::new(),
            kept_refs: BTreeSet::new(),
            builds: BTreeMap::from([(
                "web".to_string(),
                vec![
                    build("young", "sha256:young", now - 12 * 60_000, None),
                    build(
                        "pushed",
                        "sha256:pushed",
                        now - 5 * hour,
                        Some(now - 30_000),
                    ),
                    build("old", "sha256:old", now - 5 * hour, Some(now - 4 * hour)),
                    build("kept", "sha256:kept", now - 60_000, None),
                ],
            )]),
        };
        keep_young(&mut roots, hour, now);
        assert_eq!(
            roots.keep["sha256:young"],
            (
                GRACE,
                "built 12 min ago, within the grace of 1h".to_string()
            )
        );
        assert_eq!(
            roots.keep["sha256:pushed"],
            (
                GRACE,
                "published 30 s ago, within the grace of 1h".to_string()
            )
        );
        assert!(!roots.keep.contains_key("sha256:old"));
        assert_eq!(
            roots.keep["sha256:kept"].0, "record",
            "kept by its root first"
        );
        assert!(roots.kept_refs.contains("r/demo/web:pushed-amd64"));
        // A grace of 0s keeps nothing young.
        let mut none = Roots {
            keep: BTreeMap::new(),
            running_manifests: BTreeSet::new(),
            kept_refs: BTreeSet::new(),
            builds: roots.builds.clone(),
        };
        keep_young(&mut none, 0, now);
        assert!(none.keep.is_empty());
        // Their manifests are spared with that reason, never candidates.
        let found = manifest_candidates(&roots, 1, "r");
        let spared: Vec<&str> = found.spared.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            spared,
            vec!["demo/web@sha256:myoung", "demo/web@sha256:mpushed"]
        );
        let taken: Vec<&str> = found.candidates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(taken, vec!["demo/web@sha256:mold"]);
        assert_eq!(
            found.ours["demo/web"],
            BTreeSet::from(["old-amd64".to_string()])
        );
    }
}
