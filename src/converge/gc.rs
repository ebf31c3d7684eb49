//! gc: remove this mesh's images nothing needs. Reachability, never age or count: the keep set is
//! the record's artifacts ∪ what machines run (read, not assumed) ∪ each module's newest N
//! successful builds ∪ pinned artifacts ∪ what a running converge holds (gc holds the mesh itself,
//! so none runs beside it). A root that cannot be read makes gc take nothing and say which.

const KIND: &str = "gc";

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use super::error::{GcError, TargetError};
use super::progress::{Emitter, ProgressTx, Step};
use super::target::{Reach, Target};
use crate::backends::daemon::LazyDaemon;
use crate::backends::daemon::images::SizedImage;
use crate::backends::registry::{Deleted, repository_in, split_reference};
use crate::backends::state::{BuildQuery, StateDb, locked};
use crate::mesh::builds::{BuildRow, BuildStatus};
use crate::mesh::model::{MESH_LABEL, MODULE_LABEL, Mesh};
use crate::mesh::text::short_id;

pub use crate::mesh::gc::{Candidate, GcReport};

/// Every root, read; an unreadable one is an error naming it.
struct Roots {
    /// artifact → (which root keeps it, why).
    keep: BTreeMap<String, (&'static str, String)>,
    /// refs the keep set names.
    kept_refs: BTreeSet<String>,
    /// module → its builds, newest first.
    builds: BTreeMap<String, Vec<BuildRow>>,
}

async fn read_roots(
    mesh: &Mesh,
    keep_newest: usize,
    daemon: &LazyDaemon,
    target: &dyn Target,
    db: &Mutex<StateDb>,
) -> Result<Roots, GcError> {
    let state = |e: String| GcError::unreadable("the state database", e);
    let record = target
        .read_record(mesh, db)
        .await
        .map_err(|e| GcError::unreadable("the target's record", e))?;
    if let Some(warning) = record.warning {
        return Err(GcError::unreadable("the target's record", warning));
    }
    // The pins live with the record there: unread, a pinned artifact could be taken.
    if let Some(warning) = record.team_warning {
        return Err(GcError::unreadable(
            "the target's pins and history",
            warning,
        ));
    }
    let mut keep = BTreeMap::new();
    let mut kept_refs = BTreeSet::new();
    for (module, entry) in &record.record {
        keep.insert(
            entry.digest.clone(),
            ("record", format!("the record's artifact of {module}")),
        );
        kept_refs.insert(entry.reference.clone());
    }
    let root = target.machines_root();
    let machines = target
        .machines(mesh, &record.record, Reach { daemon, db })
        .await
        .map_err(|e| GcError::unreadable(root, e))?;
    for machine in &machines {
        for running in &machine.running {
            keep.entry(running.clone())
                .or_insert_with(|| ("running", format!("machine {} runs it", machine.name)));
        }
    }
    let db = locked(db).map_err(state)?;
    for (module, pin) in db.pins(&mesh.name).map_err(|e| state(e.to_string()))? {
        keep.insert(
            pin.to_digest.clone(),
            ("pinned", format!("{module} is pinned to it")),
        );
        kept_refs.insert(pin.to_ref);
    }
    let mut builds: BTreeMap<String, Vec<BuildRow>> = BTreeMap::new();
    let rows = db
        .builds(&BuildQuery {
            mesh: mesh.name.clone(),
            limit: 1_000_000,
            ..BuildQuery::default()
        })
        .map_err(|e| state(e.to_string()))?;
    for row in rows {
        if let Some(module) = row.module.clone() {
            builds.entry(module).or_default().push(row);
        }
    }
    for (module, rows) in &builds {
        let newest = rows
            .iter()
            .filter(|b| b.status == BuildStatus::Succeeded)
            .filter(|b| b.digest.is_some())
            .take(keep_newest);
        for (index, build) in newest.enumerate() {
            if let Some(digest) = &build.digest {
                keep.entry(digest.clone()).or_insert_with(|| {
                    (
                        "newest",
                        format!("newest successful build #{} of {module}", index + 1),
                    )
                });
                kept_refs.extend(build.reference.clone());
            }
        }
    }
    // A kept artifact needs the base it was built FROM (its layers, its parent on the daemon).
    let bases: BTreeMap<&str, (&str, &str)> = builds
        .values()
        .flatten()
        .filter_map(|b| {
            let digest = b.digest.as_deref()?;
            Some((
                digest,
                (b.base_digest.as_deref()?, b.base_module.as_deref()?),
            ))
        })
        .collect();
    let mut walk: Vec<String> = keep.keys().cloned().collect();
    while let Some(digest) = walk.pop() {
        if let Some((base, module)) = bases.get(digest.as_str())
            && !keep.contains_key(*base)
        {
            keep.insert(
                base.to_string(),
                (
                    "base",
                    format!("the base ({module}) a kept artifact was built from"),
                ),
            );
            walk.push(base.to_string());
        }
    }
    Ok(Roots {
        keep,
        kept_refs,
        builds,
    })
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

/// What the host (and the registry) hold that nothing needs.
fn candidates(
    mesh: &Mesh,
    roots: &Roots,
    keep_newest: usize,
    images: &[SizedImage],
) -> Vec<Candidate> {
    let mut out = Vec::new();
    for image in images.iter().filter(|i| is_this_mesh(mesh, i)) {
        if roots.keep.contains_key(&image.id) {
            continue;
        }
        let module = image.labels.get(MODULE_LABEL).cloned().unwrap_or_default();
        let why = unreachable_why(roots, keep_newest, &module, &image.id);
        let ours: Vec<&String> = image
            .tags
            .iter()
            .filter(|t| is_mesh_tag(mesh, t) && !roots.kept_refs.contains(*t))
            .collect();
        let candidate = |kind: &str, name: &str, bytes| Candidate {
            kind: kind.into(),
            name: name.into(),
            module: module.clone(),
            artifact: image.id.clone(),
            why: why.clone(),
            bytes,
            outcome: None,
        };
        if ours.len() == image.tags.len() {
            out.push(candidate("image", &image.id, image.size));
        } else {
            // A kept or foreign tag keeps the image: only this mesh's unreachable tags go.
            out.extend(ours.iter().map(|t| candidate("tag", t, 0)));
        }
    }
    // Dependents before their bases: the daemon refuses to remove an image a child is built on.
    let tier = |c: &Candidate| mesh.module(&c.module).map_or(0, |m| m.tier);
    out.sort_by(|a, b| tier(b).cmp(&tier(a)).then_with(|| a.name.cmp(&b.name)));
    out
}

/// Published manifests of builds nothing needs (Kubernetes with a registry).
fn manifest_candidates(
    mesh: &Mesh,
    roots: &Roots,
    keep_newest: usize,
    registry_host: &str,
) -> Vec<Candidate> {
    let kept_published: BTreeSet<&str> = roots
        .builds
        .values()
        .flatten()
        .filter(|b| {
            b.digest
                .as_ref()
                .is_some_and(|d| roots.keep.contains_key(d))
        })
        .filter_map(|b| b.published_digest.as_deref())
        .collect();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (module, rows) in &roots.builds {
        for build in rows {
            let (Some(digest), Some(published), Some(reference)) =
                (&build.digest, &build.published_digest, &build.published_ref)
            else {
                continue;
            };
            if roots.keep.contains_key(digest)
                || kept_published.contains(published.as_str())
                || !seen.insert(published.clone())
            {
                continue;
            }
            let (repository, _) = repository_in(registry_host, reference);
            out.push(Candidate {
                kind: "manifest".into(),
                name: format!("{repository}@{published}"),
                module: module.clone(),
                artifact: digest.clone(),
                why: unreachable_why(roots, keep_newest, module, digest),
                bytes: 0,
                outcome: None,
            });
        }
    }
    let _ = mesh;
    out
}

/// Read every root and list the candidates (nothing is taken).
pub async fn plan(
    mesh: &Mesh,
    keep_newest: usize,
    daemon: &LazyDaemon,
    target: &dyn Target,
    db: &Mutex<StateDb>,
) -> Result<GcReport, GcError> {
    let roots = read_roots(mesh, keep_newest, daemon, target, db).await?;
    let docker = daemon
        .get()
        .await
        .map_err(|e| GcError::unreadable("the host daemon", e))?;
    let images = docker
        .sized_images()
        .await
        .map_err(|e| GcError::unreadable("the host daemon", e))?;
    let mut found = candidates(mesh, &roots, keep_newest, &images);
    if let Some(registry) = target.pushes_to() {
        let client = target
            .registry_client(&registry)
            .await
            .map_err(|e| GcError::unreadable("the registry", e))?;
        // The registry must answer before anything is taken from it.
        for entry in target
            .read_record(mesh, db)
            .await
            .map_err(|e| GcError::unreadable("the target's record", e))?
            .record
            .values()
            .take(1)
        {
            let (path, tag) = repository_in(&registry.host, &entry.reference);
            client
                .manifest(path, tag)
                .await
                .map_err(|e| GcError::unreadable("the registry", e))?;
        }
        found.extend(manifest_candidates(
            mesh,
            &roots,
            keep_newest,
            &registry.host,
        ));
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
        keep_newest,
        kept: roots.keep.len(),
        kept_by,
        kept_bytes,
        candidates: found,
        bytes_freed: 0,
        warnings: Vec::new(),
    })
}

/// Sweep, holding the mesh: the roots are read again under the lock and only what is still a
/// candidate (and was confirmed, when `confirmed` is given) is taken.
pub async fn sweep(
    mesh: &Mesh,
    keep_newest: usize,
    confirmed: Option<&[Candidate]>,
    daemon: &LazyDaemon,
    target: &dyn Target,
    db: &Arc<Mutex<StateDb>>,
    tx: Option<ProgressTx>,
) -> Result<GcReport, GcError> {
    let operation_id = uuid::Uuid::now_v7().to_string();
    let (emitter, held) =
        super::hold::start(target, db, &mesh.name, &operation_id, KIND, false, tx)
            .await
            .map_err(GcError::Held)?;
    let result = take(mesh, keep_newest, confirmed, daemon, target, db, &emitter).await;
    let text = match &result {
        Ok(report) => format!(
            "gc: {} taken, {} bytes freed",
            report.candidates.iter().filter(|c| c.taken()).count(),
            report.bytes_freed
        ),
        Err(error) => format!("gc: nothing taken: {error}"),
    };
    held.finish(target, &emitter, text).await;
    result
}

#[allow(clippy::too_many_arguments)]
async fn take(
    mesh: &Mesh,
    keep_newest: usize,
    confirmed: Option<&[Candidate]>,
    daemon: &LazyDaemon,
    target: &dyn Target,
    db: &Arc<Mutex<StateDb>>,
    emitter: &Emitter,
) -> Result<GcReport, GcError> {
    let _ = locked(db).map_err(GcError::Handle)?.operation_short(
        &mesh.name,
        &emitter.operation_id,
        "gc",
    );
    let mut report = plan(mesh, keep_newest, daemon, target, db).await?;
    report.dry_run = false;
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
            emitter.emit(Step::Failed, None, error.to_string());
            report.warnings.push(error.to_string());
            lost = Some(error.to_string());
        }
        if let Some(why) = &lost {
            candidate.outcome = Some(format!("failed: not taken: {why}"));
            continue;
        }
        let outcome = match candidate.kind.as_str() {
            "manifest" => match &registry {
                _ if unsupported => "skipped: the registry does not allow deletes".to_string(),
                Some(client) => {
                    let (repository, digest) = candidate
                        .name
                        .split_once('@')
                        .unwrap_or((candidate.name.as_str(), ""));
                    match client.delete_manifest(repository, digest).await {
                        Ok(Deleted::Deleted) => "deleted".into(),
                        Ok(Deleted::Absent) => "already gone".into(),
                        Ok(Deleted::Unsupported(message)) => {
                            unsupported = true;
                            report.warnings.push(message.clone());
                            format!("skipped: {message}")
                        }
                        Err(error) => format!("failed: {error}"),
                    }
                }
                None => "skipped: no registry".into(),
            },
            kind => match docker.remove(&candidate.name).await {
                Ok(()) if kind == "image" => {
                    report.bytes_freed += candidate.bytes;
                    "removed".into()
                }
                Ok(()) => "untagged".into(),
                Err(error) => format!("failed: {error}"),
            },
        };
        emitter.emit(
            Step::Other,
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
