//! The Kubernetes target: one namespace of one context. The record is the namespace's annotation,
//! delivery a push or `kind load`, machines the labelled workloads, and a send patches a workload's
//! container image to `ref@digest` and follows its roll-out.
//! Long: one implementation of the seam for Kubernetes (record, delivery, machines, the Lease, send); the
//! Lease and the roll-out judgement themselves are apart (backends/cluster/lease.rs, rollout.rs).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::Sender;
use tokio::sync::watch;

use crate::backends::cluster::{
    Cluster, FollowRules, Needed, RECORD_ANNOTATION, TeamWrite, Workload, WorkloadKind, kind_load,
};
use crate::backends::credentials::{self, Credentials};
use crate::backends::daemon::LazyDaemon;
use crate::backends::registry::{Published, RegistryClient, push_image, repository_in};
use crate::backends::state::{Holder, StateDb, locked};
use crate::converge::error::{ConvergeError, TargetError, still_holds};
use crate::converge::lease::{self, LeaseClaims};
use crate::converge::lock;
use crate::converge::progress::{Emitter, Step};
use crate::mesh::behind::{machine_state, workload_state};
use crate::mesh::live::HeldBy;
use crate::mesh::logs::{LogAsk, LogItem};
use crate::mesh::machine::{Machine, MachineKind, Move};
use crate::mesh::model::{Mesh, Policy, Record, RecordEntry, Registry};
use crate::mesh::pin::{KeptWithRecord, PinChange, StampBy, Stamper};
use crate::mesh::target::TargetDescription;

use super::host;
use super::seam::{Artifact, Delivery, Fut, Holding, Reach, RecordRead, Target};

/// One Kubernetes namespace of one context, and how modules get there.
pub struct Kube {
    /// The target's name in the mesh.
    pub name: String,
    pub cluster: Cluster,
    pub registry: Option<Registry>,
    /// How roll-outs are followed: the deadline follows each workload (`progressDeadlineSeconds`, else
    /// 600 s) unless the mesh file sets `rollout_deadline` in [target].
    pub rollout: FollowRules,
    /// Docker's credentials for the registry, looked up at most once.
    creds: tokio::sync::OnceCell<Result<Option<Credentials>, String>>,
    /// The workloads as last listed: a send guards against the image seen here.
    workloads: Mutex<Vec<Workload>>,
    /// The operations of this process holding the mesh's Lease.
    claims: Arc<LeaseClaims>,
}

impl Kube {
    pub fn new(
        name: &str,
        cluster: Cluster,
        registry: Option<Registry>,
        rollout: FollowRules,
    ) -> Kube {
        Kube {
            name: name.to_string(),
            cluster,
            registry,
            rollout,
            creds: tokio::sync::OnceCell::new(),
            workloads: Mutex::new(Vec::new()),
            claims: Arc::new(LeaseClaims::default()),
        }
    }

    async fn credentials(&self, host: &str) -> Result<Option<Credentials>, TargetError> {
        self.creds
            .get_or_init(|| async {
                credentials::for_registry(host)
                    .await
                    .map_err(|e| e.to_string())
            })
            .await
            .clone()
            .map_err(TargetError::Credentials)
    }

    async fn access(&self, stamps: bool, sends: &[WorkloadKind]) -> Result<(), TargetError> {
        let mut needed = Vec::new();
        if stamps {
            needed.push(Needed::on_namespace("get", &self.cluster.namespace));
            needed.push(Needed::on_namespace("patch", &self.cluster.namespace));
        }
        let mut kinds = sends.to_vec();
        kinds.sort();
        kinds.dedup();
        for kind in kinds {
            let resource = match kind {
                WorkloadKind::Deployment => "deployments",
                WorkloadKind::StatefulSet => "statefulsets",
                WorkloadKind::DaemonSet => "daemonsets",
            };
            needed.push(Needed::namespaced("patch", "apps", resource));
        }
        if !sends.is_empty() {
            needed.push(Needed::namespaced("list", "", "pods"));
        }
        self.cluster
            .check_access(&needed)
            .await
            .map_err(TargetError::from)
    }

    async fn converge_access(&self, mesh: &Mesh, modules: &[&str]) -> Result<(), TargetError> {
        let rolls_out = |m: &str| {
            mesh.module(m)
                .is_some_and(|module| module.policy == Policy::Rollout)
        };
        let kinds: Vec<WorkloadKind> = if modules.iter().any(|m| rolls_out(m)) {
            self.cluster
                .machines()
                .await?
                .into_iter()
                .filter(|w| modules.contains(&w.module.as_str()) && rolls_out(&w.module))
                .map(|w| w.kind)
                .collect()
        } else {
            Vec::new()
        };
        self.access(true, &kinds).await
    }

    /// The record, and what lives with it (pins, the record's history) copied into the state
    /// database: every reader of those (history, R, the detail, gc, the planner) reads the team's.
    async fn read(&self, mesh: &Mesh, db: &Mutex<StateDb>) -> Result<RecordRead, TargetError> {
        let read = self.cluster.read_record().await?;
        match &read.team_warning {
            Some(warning) => tracing::warn!("{warning}"),
            None => {
                let copied = locked(db).map_err(String::from).and_then(|h| {
                    h.mirror_team(&mesh.name, &self.name, &read.pins, &read.history)
                        .map_err(|e| e.to_string())
                });
                if let Err(error) = copied {
                    tracing::warn!("the target's pins and history were not copied: {error}");
                }
            }
        }
        Ok(RecordRead {
            record: read.record,
            source: format!(
                "annotation {RECORD_ANNOTATION} on namespace {}",
                self.cluster.namespace
            ),
            warning: read.warning,
            kept: read.team_warning.is_none().then_some(KeptWithRecord {
                pins: read.pins,
                history: read.history,
            }),
            team_warning: read.team_warning,
        })
    }

    /// The lock is checked just before the annotations are written (two systems: no common
    /// transaction). The record, its pins and its history go in one guarded patch; the state
    /// database's copy follows, and a copy that cannot be written is a warning: the stamp stands.
    async fn stamp_over(
        &self,
        mesh: &Mesh,
        db: &Mutex<StateDb>,
        how: StampBy<'_>,
        entries: &Record,
        pins: &PinChange,
    ) -> Result<(), ConvergeError> {
        let short = locked(db).ok().and_then(|h| {
            h.operation_short(&mesh.name, &self.name, how.operation_id, how.kind)
                .ok()
        });
        // Who stamps is who would hold the mesh: this process on this host, now.
        let here = Holder::here(how.operation_id);
        let by = Stamper {
            operation_id: here.operation_id,
            kind: how.kind.to_string(),
            short,
            host: here.host,
            pid: here.pid,
            at_ms: here.since_ms,
            from_target: how.from_target.map(str::to_string),
        };
        self.still_holds(db, &mesh.name, how.operation_id).await?;
        let write = TeamWrite {
            entries,
            pins,
            by: &by,
        };
        let stamped = self
            .cluster
            .stamp_team(&write, true)
            .await
            .map_err(|e| ConvergeError::Failed(e.to_string()))?;
        let copied = locked(db).map_err(String::from).and_then(|h| {
            h.mirror_team(&mesh.name, &self.name, &stamped.pins, &stamped.history)
                .map_err(|e| e.to_string())
        });
        if let Err(error) = copied {
            tracing::warn!("the record was stamped, the state database's copy not: {error}");
        }
        Ok(())
    }

    async fn deliver_now(
        &self,
        mesh: &Mesh,
        artifact: Artifact<'_>,
        reach: Reach<'_>,
        emitter: &Emitter,
    ) -> Result<(), TargetError> {
        let (module, reference) = (artifact.module, artifact.reference);
        match self.delivery()? {
            Delivery::Host => Ok(()),
            Delivery::KindLoad(name) => {
                kind_load(&name, reference).await?;
                emitter.emit(
                    Step::Delivered,
                    Some(module),
                    format!("kind load {reference} into kind cluster {name}"),
                );
                Ok(())
            }
            Delivery::Push(registry) => {
                let creds = self.credentials(&registry.host).await?;
                let docker = reach
                    .daemon
                    .get()
                    .await
                    .map_err(|e| TargetError::Unreachable(e.to_string()))?;
                let digest = push_image(docker.docker(), reference, creds.as_ref()).await?;
                let db = locked(reach.db).map_err(TargetError::Handle)?;
                let build = match artifact.build_id {
                    Some(id) => Some(id.to_string()),
                    None => db
                        .build_by_digest(&mesh.name, artifact.digest)?
                        .map(|b| b.id),
                };
                if let Some(id) = build {
                    db.set_published(&id, reference, &digest)?;
                }
                drop(db);
                emitter.emit(
                    Step::Delivered,
                    Some(module),
                    format!("pushed {reference} → {digest}"),
                );
                Ok(())
            }
        }
    }

    /// The history's word for the published digest, else the registry's answer for its ref (a
    /// push from another host).
    async fn published(
        &self,
        mesh: &Mesh,
        db: &Mutex<StateDb>,
        entry: &RecordEntry,
    ) -> Option<String> {
        let known = locked(db)
            .ok()?
            .build_by_digest(&mesh.name, &entry.digest)
            .ok()
            .flatten()
            .and_then(|b| b.published_digest);
        if known.is_some() {
            return known;
        }
        let registry = self.registry.as_ref()?;
        let creds = self.credentials(&registry.host).await.ok().flatten();
        let client = RegistryClient::new(registry, creds).ok()?;
        let (path, tag) = repository_in(&registry.host, &entry.reference);
        match client.manifest(path, tag).await {
            Ok(Published::Present { digest }) => Some(digest),
            _ => None,
        }
    }

    /// The mesh's labelled workloads (≤ 5 API calls), each against the record; remembered for send.
    async fn list(
        &self,
        mesh: &Mesh,
        record: &Record,
        db: &Mutex<StateDb>,
    ) -> Result<Vec<Machine>, TargetError> {
        let workloads = self.cluster.machines().await?;
        let workloads: Vec<_> = workloads
            .into_iter()
            .filter(|w| mesh.module(&w.module).is_some())
            .collect();
        let mut aliases: HashMap<&str, Vec<String>> = HashMap::new();
        for w in &workloads {
            if aliases.contains_key(w.module.as_str()) {
                continue;
            }
            let published = match record.get(&w.module) {
                Some(entry) => self.published(mesh, db, entry).await,
                None => None,
            };
            aliases.insert(w.module.as_str(), published.into_iter().collect());
        }
        let mut machines: Vec<Machine> = workloads
            .iter()
            .filter_map(|w| {
                let module = mesh.module(&w.module)?;
                let state = machine_state(
                    &w.running_digests,
                    record.get(&w.module),
                    aliases
                        .get(w.module.as_str())
                        .map_or(&[][..], Vec::as_slice),
                    module.policy,
                );
                let state = workload_state(state, w.unknown_container.is_none(), w.paused);
                Some(Machine {
                    name: w.name.clone(),
                    module: w.module.clone(),
                    kind: w.kind.as_str().to_string(),
                    image: w.image.clone(),
                    running: w.running_digests.clone(),
                    state,
                    health: format!("{}/{} ready", w.ready, w.replicas),
                })
            })
            .collect();
        machines.sort_by(|a, b| (&a.module, &a.name, &a.kind).cmp(&(&b.module, &b.name, &b.kind)));
        if let Ok(mut seen) = self.workloads.lock() {
            *seen = workloads;
        }
        Ok(machines)
    }

    /// Patch the workload (guarded by the image it was listed with), then follow its roll-out.
    async fn send_one(
        &self,
        mesh: &Mesh,
        db: &Mutex<StateDb>,
        moved: &Move,
        emitter: &Emitter,
    ) -> Result<(), TargetError> {
        let find = |workloads: &[Workload]| {
            workloads
                .iter()
                .find(|w| w.kind.as_str() == moved.kind.as_str() && w.name == moved.machine)
                .cloned()
        };
        let seen = self.workloads.lock().ok().and_then(|w| find(&w));
        let workload = match seen {
            Some(w) => w,
            None => {
                let listed = self.cluster.machines().await?;
                find(&listed).ok_or_else(|| TargetError::MachineGone {
                    kind: moved.kind,
                    machine: moved.machine.clone(),
                    place: self.cluster.place(),
                })?
            }
        };
        let entry = RecordEntry {
            reference: moved.to_reference.clone(),
            digest: moved.to_digest.clone(),
        };
        let (to_image, artifact) = match self.delivery()? {
            Delivery::Push(registry) => match self.published(mesh, db, &entry).await {
                Some(digest) => (format!("{}@{digest}", entry.reference), None),
                None => {
                    return Err(TargetError::NotPublished {
                        reference: entry.reference,
                        registry: registry.host,
                        module: moved.module.clone(),
                    });
                }
            },
            Delivery::KindLoad(_) | Delivery::Host => {
                (entry.reference.clone(), Some(entry.digest.as_str()))
            }
        };
        self.cluster.send(&workload, &to_image, artifact).await?;
        emitter.emit(
            Step::Rollout,
            Some(&moved.module),
            format!("{workload}: image {to_image}; following the roll-out"),
        );
        // kubectl's own words as progress; a failure carries its evidence in its message.
        let said = |message: &str| {
            emitter.emit(
                Step::Rollout,
                Some(&moved.module),
                format!("{workload}: {message}"),
            );
        };
        let rules = match mesh.module(&moved.module) {
            Some(module) => FollowRules {
                restarts: module.backoff.restarts,
                backoff: module.backoff.persists,
                ..self.rollout
            },
            None => self.rollout,
        };
        let done = self.cluster.follow_rollout(&workload, rules, &said).await?;
        // kubectl says done for whatever the template names now: the machine is judged by what runs.
        match done.image {
            Some(image) if image != to_image => Err(TargetError::Reverted {
                image,
                workload: workload.to_string(),
                sent: to_image,
            }),
            _ => Ok(()),
        }
    }

    /// A send is refused before any write when a workload's module container cannot be told: naming
    /// its containers and the annotation to set.
    fn refuse_unknown_containers(&self, moves: &[Move]) -> Result<(), TargetError> {
        let workloads = self.workloads.lock().map(|w| w.clone()).unwrap_or_default();
        let refused: Vec<String> = moves
            .iter()
            .filter_map(|m| {
                let w = workloads
                    .iter()
                    .find(|w| w.kind.as_str() == m.kind.as_str() && w.name == m.machine)?;
                let why = w.unknown_container.as_deref()?;
                Some(self.cluster.unknown_container(w, why).to_string())
            })
            .collect();
        match refused.as_slice() {
            [] => Ok(()),
            _ => Err(TargetError::UnknownContainers(refused.join("; "))),
        }
    }

    /// A pushed artifact must still be in the registry; a loaded one on the host daemon.
    async fn holds_now(
        &self,
        mesh: &Mesh,
        wanted: &RecordEntry,
        reach: Reach<'_>,
    ) -> Result<Holding, TargetError> {
        let Ok(Delivery::Push(registry)) = self.delivery() else {
            return host::holds(reach.daemon, wanted).await;
        };
        let published = self.published(mesh, reach.db, wanted).await;
        let creds = self.credentials(&registry.host).await?;
        let client = RegistryClient::new(&registry, creds)?;
        let (path, tag) = repository_in(&registry.host, &wanted.reference);
        let answer = match &published {
            Some(digest) => client.manifest(path, digest).await,
            None => client.manifest(path, tag).await,
        };
        match answer? {
            Published::Present { .. } => Ok(Holding::Held),
            Published::Absent => Ok(Holding::Gone(format!(
                "registry {} (namespace {})",
                registry.host, self.cluster.namespace
            ))),
        }
    }
}

/// A namespace in words (`context X, namespace Y`; the context unsaid when it is the kubeconfig's
/// current one and not yet read), and what a send really does there.
pub fn description(name: &str, context: Option<&str>, namespace: &str) -> TargetDescription {
    let place = match context {
        Some(context) => format!("context {context}, namespace {namespace}"),
        None => format!("namespace {namespace}"),
    };
    TargetDescription {
        name: name.to_string(),
        kind: "kubernetes".into(),
        place: Some(place),
        namespace: Some(namespace.to_string()),
        send_does:
            "each workload's container image is patched to ref@digest and its roll-out followed"
                .into(),
    }
}

/// The workload kinds of `moves` (a container is no workload).
fn workload_kinds(moves: &[Move]) -> Vec<WorkloadKind> {
    moves
        .iter()
        .filter_map(|m| match m.kind {
            MachineKind::Deployment => Some(WorkloadKind::Deployment),
            MachineKind::StatefulSet => Some(WorkloadKind::StatefulSet),
            MachineKind::DaemonSet => Some(WorkloadKind::DaemonSet),
            MachineKind::Container => None,
        })
        .collect()
}

impl Target for Kube {
    /// The state database's lock, then the namespace's Lease (the team's); a Lease held by someone
    /// else gives the state database's lock back at once.
    fn hold<'a>(
        &'a self,
        db: &'a Mutex<StateDb>,
        mesh: &'a str,
        holder: &'a Holder,
        kind: &'a str,
        wait: bool,
    ) -> Fut<'a, Result<Option<String>, ConvergeError>> {
        Box::pin(async move {
            let from_db = lock::acquire(db, mesh, &self.name, holder, wait).await?;
            let claim = lease::claim(holder, kind);
            match lease::take(&self.cluster, &self.claims, mesh, claim, wait).await {
                Ok(Some(from)) => Ok(Some(lease::took_over(mesh, &from))),
                Ok(None) => Ok(from_db.map(|from| lock::took_over(db, mesh, &self.name, &from))),
                Err(error) => {
                    if let Ok(db) = locked(db) {
                        let _ = db.unlock_mesh(mesh, &self.name, &holder.operation_id);
                    }
                    Err(error.into())
                }
            }
        })
    }

    fn named<'a>(
        &'a self,
        mesh: &'a str,
        operation_id: &'a str,
        short: Option<i64>,
    ) -> Fut<'a, ()> {
        Box::pin(async move {
            self.claims.set_short(operation_id, short);
            // Said at once (a refused teammate reads it); a failure here is the heartbeat's to judge.
            let _ = lease::check(&self.cluster, &self.claims, mesh, operation_id).await;
        })
    }

    fn heartbeat(
        &self,
        state_path: PathBuf,
        mesh: String,
        operation_id: String,
        lost: watch::Sender<Option<String>>,
    ) -> tokio::task::JoinHandle<()> {
        let (cluster, claims) = (self.cluster.clone(), self.claims.clone());
        let target = self.name.clone();
        tokio::spawn(async move {
            let beat = lock::beat(
                state_path,
                mesh.clone(),
                target,
                operation_id.clone(),
                &lost,
            );
            let renew = lease::renew_while_running(cluster, claims, mesh, operation_id, &lost);
            tokio::join!(beat, renew);
        })
    }

    fn held_by<'a>(&'a self, mesh: &'a str) -> Fut<'a, Result<Option<HeldBy>, TargetError>> {
        Box::pin(async move {
            let holder = self.cluster.lease_holder(mesh).await?;
            let now = crate::timefmt::now_ms();
            Ok(holder.filter(|h| !h.expired_at(now)).map(|h| HeldBy {
                operation: h.operation_label(),
                operation_id: h.operation_id,
                host: h.host,
                pid: h.pid,
                since_ms: h.acquired_ms,
            }))
        })
    }

    fn still_holds<'a>(
        &'a self,
        db: &'a Mutex<StateDb>,
        mesh: &'a str,
        operation_id: &'a str,
    ) -> Fut<'a, Result<(), ConvergeError>> {
        Box::pin(async move {
            still_holds(db, mesh, &self.name, operation_id)?;
            Ok(lease::check(&self.cluster, &self.claims, mesh, operation_id).await?)
        })
    }

    fn release<'a>(&'a self, mesh: &'a str, operation_id: &'a str) -> Fut<'a, ()> {
        Box::pin(lease::release(
            &self.cluster,
            &self.claims,
            mesh,
            operation_id,
        ))
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> TargetDescription {
        description(
            &self.name,
            Some(&self.cluster.context),
            &self.cluster.namespace,
        )
    }

    fn host_is_target(&self) -> bool {
        false
    }

    fn machines_root(&self) -> &'static str {
        "the cluster's workloads"
    }

    fn delivery(&self) -> Result<Delivery, TargetError> {
        if let Some(registry) = &self.registry {
            return Ok(Delivery::Push(registry.clone()));
        }
        match self.cluster.kind_cluster() {
            Some(name) => Ok(Delivery::KindLoad(name.to_string())),
            None => Err(TargetError::NoDelivery {
                context: self.cluster.context.clone(),
                namespace: self.cluster.namespace.clone(),
            }),
        }
    }

    fn read_record<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
    ) -> Fut<'a, Result<RecordRead, TargetError>> {
        Box::pin(self.read(mesh, db))
    }

    fn stamp<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
        by: StampBy<'a>,
        entries: &'a Record,
        pins: &'a PinChange,
    ) -> Fut<'a, Result<(), ConvergeError>> {
        Box::pin(self.stamp_over(mesh, db, by, entries, pins))
    }

    fn machines<'a>(
        &'a self,
        mesh: &'a Mesh,
        record: &'a Record,
        reach: Reach<'a>,
    ) -> Fut<'a, Result<Vec<Machine>, TargetError>> {
        Box::pin(self.list(mesh, record, reach.db))
    }

    /// Workloads are declared by their own manifests: none is created here.
    fn create_declared<'a>(
        &'a self,
        _mesh: &'a Mesh,
        _record: &'a Record,
        _existing: &'a [Machine],
        _in_scope: &'a (dyn Fn(&str) -> bool + Sync),
        _daemon: &'a LazyDaemon,
        _emitter: &'a Emitter,
    ) -> Fut<'a, Result<Vec<String>, TargetError>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn deliver<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Fut<'a, Result<(), TargetError>> {
        Box::pin(self.deliver_now(mesh, artifact, reach, emitter))
    }

    /// The cluster pulls from the registry that vouched: nothing to push. The host daemon needs the
    /// artifact only when a module of this converge builds FROM it (then it is pulled there).
    fn fetch_vouched<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        manifest: &'a str,
        on_host: bool,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Fut<'a, Result<(), TargetError>> {
        Box::pin(async move {
            if on_host && let Some(registry) = &mesh.registry {
                let creds = self.credentials(&registry.host).await?;
                host::pull_vouched(
                    reach.daemon,
                    &artifact,
                    manifest,
                    registry,
                    creds.as_ref(),
                    emitter,
                )
                .await?;
            }
            emitter.emit(
                Step::Delivered,
                Some(artifact.module),
                format!(
                    "{} is in the registry as {manifest}: nothing to push",
                    artifact.reference
                ),
            );
            Ok(())
        })
    }

    /// Delivery pushes every build to the registry already: nothing more to publish.
    fn publish<'a>(
        &'a self,
        _mesh: &'a Mesh,
        _artifact: Artifact<'a>,
        _reach: Reach<'a>,
        _emitter: &'a Emitter,
    ) -> Fut<'a, Result<Option<String>, TargetError>> {
        Box::pin(async { Ok(None) })
    }

    fn send<'a>(
        &'a self,
        mesh: &'a Mesh,
        moved: &'a Move,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Fut<'a, Result<(), TargetError>> {
        Box::pin(self.send_one(mesh, reach.db, moved, emitter))
    }

    fn logs<'a>(
        &'a self,
        _mesh: &'a Mesh,
        machine: &'a Machine,
        ask: &'a LogAsk,
        _daemon: &'a LazyDaemon,
        out: Sender<LogItem>,
    ) -> Fut<'a, Result<(), TargetError>> {
        Box::pin(async move {
            let workloads = self.cluster.machines().await?;
            let Some(workload) = workloads
                .iter()
                .find(|w| w.name == machine.name && w.kind.as_str() == machine.kind)
            else {
                return Err(TargetError::MachineGone {
                    kind: MachineKind::of(&machine.kind).unwrap_or(MachineKind::Deployment),
                    machine: machine.name.clone(),
                    place: self.cluster.place(),
                });
            };
            Ok(self.cluster.workload_logs(workload, ask, &out).await?)
        })
    }

    fn check_write_access<'a>(
        &'a self,
        stamps: bool,
        sends: &'a [Move],
    ) -> Fut<'a, Result<(), TargetError>> {
        Box::pin(async move {
            self.access(stamps, &workload_kinds(sends)).await?;
            self.refuse_unknown_containers(sends)
        })
    }

    fn check_converge_access<'a>(
        &'a self,
        mesh: &'a Mesh,
        modules: &'a [&'a str],
    ) -> Fut<'a, Result<(), TargetError>> {
        Box::pin(self.converge_access(mesh, modules))
    }

    fn holds<'a>(
        &'a self,
        mesh: &'a Mesh,
        wanted: &'a RecordEntry,
        reach: Reach<'a>,
    ) -> Fut<'a, Result<Holding, TargetError>> {
        Box::pin(self.holds_now(mesh, wanted, reach))
    }

    /// Pushed: the registry must hold it (nothing is pushed; the cluster pulls it). Loaded: the
    /// host must hold it, and it is loaded into this kind cluster.
    fn bring<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Fut<'a, Result<Holding, TargetError>> {
        Box::pin(async move {
            let wanted = artifact.entry();
            match self.delivery()? {
                Delivery::KindLoad(name) => {
                    let held = host::holds(reach.daemon, &wanted).await?;
                    if held == Holding::Held {
                        kind_load(&name, artifact.reference).await?;
                        emitter.emit(
                            Step::Delivered,
                            Some(artifact.module),
                            format!("kind load {} into kind cluster {name}", artifact.reference),
                        );
                    }
                    Ok(held)
                }
                Delivery::Push(_) | Delivery::Host => self.holds_now(mesh, &wanted, reach).await,
            }
        })
    }

    fn published_digest<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
        entry: &'a RecordEntry,
    ) -> Fut<'a, Option<String>> {
        Box::pin(self.published(mesh, db, entry))
    }

    /// The credentials a push uses (the Docker config's, read once per connection).
    fn registry_client<'a>(
        &'a self,
        registry: &'a Registry,
    ) -> Fut<'a, Result<RegistryClient, TargetError>> {
        Box::pin(async move {
            let creds = self.credentials(&registry.host).await?;
            RegistryClient::new(registry, creds).map_err(TargetError::from)
        })
    }
}
