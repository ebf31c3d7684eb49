//! Roll back: stamp a module's record with an earlier artifact, send every machine of the module
//! there whatever its policy, and pin the module (DESIGN.md: "pinned").

const KIND: &str = "rollback";

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::progress::{Emitter, ProgressTx, Step};
use super::send::{SendOutcome, send};
use super::target::{ConnectedTarget, Delivery};
use crate::backends::daemon::LazyDaemon;
use crate::backends::registry::{Published, repository_in};
use crate::backends::state::{BuildQuery, Holder, StateDb, locked, this_host};
use crate::mesh::builds::{BuildRow, BuildStatus};
use crate::mesh::machine::{Move, moves_for};
use crate::mesh::model::{Mesh, Record, RecordEntry};
use crate::mesh::pin::Pin;
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
            "rolled back {} to {}@{} (#{}): {moved}/{} machine(s) moved; pinned until its address moves to a third one, `meshtop unpin {}` or `converge --force {}`",
            self.module,
            self.to.reference,
            short_id(&self.to.digest),
            self.short,
            self.outcomes.len(),
            self.module,
            self.module
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
    mesh: &str,
    module: &str,
    to: &str,
) -> Result<(RecordEntry, Option<BuildRow>), String> {
    let builds = db
        .builds(&BuildQuery {
            mesh: mesh.to_string(),
            module: Some(module.to_string()),
            limit: 100_000,
            ..BuildQuery::default()
        })
        .map_err(|e| e.to_string())?;
    let wanted = to.strip_prefix("sha256:").unwrap_or(to);
    if wanted.len() < 6 {
        return Err(format!(
            "--to {to:?} is too short: give a build id or an artifact digest of at least 6 characters (see `meshtop builds {module}`)"
        ));
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
                .or_insert((RecordEntry { reference, digest }, Some(build)));
        }
    }
    for stamp in db.stamps(mesh, module, 10_000).map_err(|e| e.to_string())? {
        if digest_matches(&stamp.to_digest) && !found.contains_key(&stamp.to_digest) {
            found.insert(
                stamp.to_digest.clone(),
                (
                    RecordEntry {
                        reference: stamp.to_ref,
                        digest: stamp.to_digest,
                    },
                    None,
                ),
            );
        }
    }
    let mut found: Vec<_> = found.into_values().collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(format!(
            "no build or recorded artifact of module {module} matches {to:?}: see `meshtop builds {module}` and `meshtop history {module}`"
        )),
        n => Err(format!(
            "{to:?} matches {n} artifacts of module {module}: give more characters"
        )),
    }
}

fn short_matches(digest: &str, wanted: &str) -> bool {
    digest
        .strip_prefix("sha256:")
        .unwrap_or(digest)
        .starts_with(wanted)
}

/// The artifact the record named before the current one.
fn previous(
    db: &StateDb,
    mesh: &str,
    module: &str,
    current: &RecordEntry,
) -> Result<RecordEntry, String> {
    let stamps = db.stamps(mesh, module, 10_000).map_err(|e| e.to_string())?;
    let last = stamps
        .iter()
        .find(|s| s.to_digest == current.digest && s.to_ref == current.reference);
    match last {
        Some(stamp) => match (&stamp.from_ref, &stamp.from_digest) {
            (Some(reference), Some(digest)) => Ok(RecordEntry {
                reference: reference.clone(),
                digest: digest.clone(),
            }),
            _ => Err(format!(
                "the record named nothing for module {module} before {}@{}: nothing to roll back to; name an artifact with --to BUILD|DIGEST (see `meshtop builds {module}`)",
                current.reference,
                short_id(&current.digest)
            )),
        },
        None => Err(format!(
            "the state database holds no stamp of module {module} naming {}@{} (stamped before meshtop kept the record's history, or by another host): name an artifact with --to BUILD|DIGEST (see `meshtop builds {module}`)",
            current.reference,
            short_id(&current.digest)
        )),
    }
}

/// What a rollback of `module` (to `to`, or to what the record named before) would move. Refused,
/// with the rebuild offered, when the target no longer holds the artifact.
pub async fn prepare(
    mesh: &Mesh,
    module: &str,
    to: Option<&str>,
    daemon: &LazyDaemon,
    target: &ConnectedTarget,
    db: &Mutex<StateDb>,
) -> Result<RollbackPlan, String> {
    let record = super::target::read_record(mesh, target, db).await?;
    let Some(current) = record.record.get(module).cloned() else {
        return Err(format!(
            "{} holds nothing for module {module}: there is nothing to roll back",
            record.source
        ));
    };
    let (wanted, mut build) = {
        let db = locked(db)?;
        match to {
            Some(to) => resolve_to(&db, &mesh.name, module, to)?,
            None => (previous(&db, &mesh.name, module, &current)?, None),
        }
    };
    if wanted == current {
        return Err(format!(
            "the record already names {}@{} for module {module}: nothing to roll back",
            wanted.reference,
            short_id(&wanted.digest)
        ));
    }
    if build.is_none() {
        build = locked(db)?
            .build_by_digest(&mesh.name, &wanted.digest)
            .map_err(|e| e.to_string())?;
    }
    held(mesh, module, &wanted, build.as_ref(), daemon, target, db).await?;
    let mut wanted_record = record.record.clone();
    wanted_record.insert(module.to_string(), wanted.clone());
    let machines = super::machines::list(mesh, &wanted_record, daemon, target, db).await?;
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
    daemon: &LazyDaemon,
    target: &ConnectedTarget,
    db: &Mutex<StateDb>,
) -> Result<(), String> {
    let gone = |place: String| {
        format!(
            "{}@{} is no longer held by {place} (swept?): nothing was rolled back. {}",
            wanted.reference,
            short_id(&wanted.digest),
            rebuild_offer(mesh, module, build)
        )
    };
    match target.delivery() {
        Ok(Delivery::Push(registry)) => {
            let ConnectedTarget::Kubernetes(kube) = target else {
                return Ok(());
            };
            let published = super::target::published_digest(mesh, target, db, wanted).await;
            let client = super::target::registry_client(target, &registry).await?;
            let (path, tag) = repository_in(&registry.host, &wanted.reference);
            let answer = match &published {
                Some(digest) => client.manifest(path, digest).await,
                None => client.manifest(path, tag).await,
            };
            match answer.map_err(|e| e.to_string())? {
                Published::Present { .. } => Ok(()),
                Published::Absent => Err(gone(format!(
                    "registry {} (namespace {})",
                    registry.host, kube.cluster.namespace
                ))),
            }
        }
        _ => {
            let docker = daemon.get().await?;
            if !docker
                .has_image(&wanted.digest)
                .await
                .map_err(|e| e.to_string())?
            {
                return Err(gone("the host daemon".into()));
            }
            // gc may have untagged the ref while the image stayed (another tag kept it).
            if !docker
                .has_image(&wanted.reference)
                .await
                .map_err(|e| e.to_string())?
            {
                docker
                    .tag(&wanted.digest, &wanted.reference)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
    }
}

/// The exact commands that rebuild an artifact from its recorded inputs (its build's commit).
pub fn rebuild_offer(mesh: &Mesh, module: &str, build: Option<&BuildRow>) -> String {
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

/// Carry out a confirmed rollback, holding the mesh: the record must still name what it named at
/// the confirm; stamp it with the rolled-back artifact, pin the module, send every machine.
pub async fn rollback(
    mesh: &Mesh,
    plan: &RollbackPlan,
    daemon: &LazyDaemon,
    target: &ConnectedTarget,
    db: &Arc<Mutex<StateDb>>,
    tx: Option<ProgressTx>,
) -> Result<RollbackReport, String> {
    let operation_id = uuid::Uuid::now_v7().to_string();
    let holder = Holder::here(&operation_id);
    super::lock::acquire(db, &mesh.name, &holder, false)
        .await
        .map_err(|e| e.to_string())?;
    let emitter = Emitter::new(db.clone(), &mesh.name, &operation_id, KIND, tx);
    let result = stamp_pin_send(mesh, plan, daemon, target, db, &emitter).await;
    match &result {
        Ok(report) => emitter.finish(format!("rollback: {}", report.headline())),
        Err(error) => emitter.finish(format!("rollback: nothing rolled back: {error}")),
    }
    result
}

async fn stamp_pin_send(
    mesh: &Mesh,
    plan: &RollbackPlan,
    daemon: &LazyDaemon,
    target: &ConnectedTarget,
    db: &Arc<Mutex<StateDb>>,
    emitter: &Emitter,
) -> Result<RollbackReport, String> {
    let module = &plan.module;
    let record = super::target::read_record(mesh, target, db).await?;
    if record.record.get(module) != Some(&plan.from) {
        return Err(format!(
            "the record of {module} moved since the rollback was confirmed (confirmed from {}@{}); look again and roll back again",
            plan.from.reference,
            short_id(&plan.from.digest)
        ));
    }
    let entries: Record = BTreeMap::from([(module.clone(), plan.to.clone())]);
    super::target::stamp_as(
        mesh,
        target,
        db,
        &emitter.operation_id,
        "rollback",
        &entries,
    )
    .await
    .map_err(|e| e.to_string())?;
    emitter.emit(
        Step::Stamped,
        Some(module),
        format!(
            "record stamped: {module} {}@{} → {}@{}",
            plan.from.reference,
            short_id(&plan.from.digest),
            plan.to.reference,
            short_id(&plan.to.digest)
        ),
    );
    let short = {
        let db = locked(db)?;
        let short = db
            .operation_short(&mesh.name, &emitter.operation_id, "rollback")
            .map_err(|e| e.to_string())?;
        let pin = Pin {
            module: module.clone(),
            from_ref: plan.from.reference.clone(),
            from_digest: plan.from.digest.clone(),
            to_ref: plan.to.reference.clone(),
            to_digest: plan.to.digest.clone(),
            operation_id: emitter.operation_id.clone(),
            short,
            host: this_host(),
            at_ms: timefmt::now_ms(),
        };
        db.pin(&mesh.name, &pin).map_err(|e| e.to_string())?;
        short
    };
    let mut merged = record.record.clone();
    merged.extend(entries);
    let machines = super::machines::list(mesh, &merged, daemon, target, db).await?;
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

/// A converge that stamped ends the pins its plan ended (a third address, or forced).
pub fn end_pins(
    mesh: &Mesh,
    db: &Mutex<StateDb>,
    emitter: &Emitter,
    ended: &BTreeMap<String, String>,
) {
    for (module, why) in ended {
        match locked(db)
            .map_err(String::from)
            .and_then(|h| h.unpin(&mesh.name, module).map_err(|e| e.to_string()))
        {
            Ok(true) => emitter.emit(Step::Warning, Some(module), why.clone()),
            Ok(false) => {}
            Err(error) => emitter.emit(
                Step::Warning,
                Some(module),
                format!("{why}, but the pin could not be removed: {error}"),
            ),
        }
    }
}
