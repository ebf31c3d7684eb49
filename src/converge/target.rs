//! The target's side of a converge: its record (read, stamp) and delivery.
//! Docker: the record is a table in the state database and the daemon is the target, so delivery
//! is nothing. Kubernetes: the namespace's annotation, and a push or `kind load`.
//!
//! A [`ConnectedTarget`] is made once per command (one cluster connection), then handed to every step.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::engine::ConvergeError;
use super::progress::{Emitter, Step};
use crate::backends::cluster::{
    Cluster, FollowRules, Needed, RECORD_ANNOTATION, Workload, WorkloadKind, kind_load,
};
use crate::backends::credentials::{self, Credentials};
use crate::backends::daemon::LazyDaemon;
use crate::backends::registry::{Published, RegistryClient, push_image, repository_in};
use crate::backends::state::{StateDb, StateError, locked};
use crate::mesh::model::{Mesh, Record, RecordEntry, Registry, Target};

/// How often a roll-out is polled.
pub const ROLLOUT_POLL: Duration = Duration::from_secs(1);

/// The target a command acts on, connected once.
#[derive(Clone)]
pub enum ConnectedTarget {
    Docker,
    Kubernetes(Arc<Kube>),
}

/// One Kubernetes namespace of one context, and how modules get there.
pub struct Kube {
    pub cluster: Cluster,
    pub registry: Option<Registry>,
    /// How roll-outs are followed: the deadline follows each workload (`progressDeadlineSeconds`, else
    /// 600 s) unless the mesh file sets `rollout_deadline` in [target].
    pub rollout: FollowRules,
    /// Docker's credentials for the registry, looked up at most once.
    creds: tokio::sync::OnceCell<Result<Option<Credentials>, String>>,
    /// The workloads as last listed: a send guards against the image seen here.
    pub(crate) workloads: Mutex<Vec<Workload>>,
}

/// How a module's artifact reaches the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The host daemon is the target.
    Host,
    /// Push to the registry.
    Push(Registry),
    /// `kind load docker-image --name <cluster>`.
    KindLoad(String),
}

impl ConnectedTarget {
    /// Connect to the mesh's target. Kubernetes: `--context`/`--namespace` override the mesh file's;
    /// the context defaults to the kubeconfig's current one.
    pub async fn connect(
        mesh: &Mesh,
        context: Option<&str>,
        namespace: Option<&str>,
    ) -> Result<ConnectedTarget, String> {
        match &mesh.target {
            Target::Docker => Ok(ConnectedTarget::Docker),
            Target::Kubernetes {
                namespace: file_namespace,
                context: file_context,
            } => {
                let context = context.or(file_context.as_deref());
                let namespace = namespace.unwrap_or(file_namespace);
                let cluster = Cluster::connect(context, namespace)
                    .await
                    .map_err(|e| e.to_string())?;
                let rules = FollowRules {
                    deadline: mesh.rollout_deadline,
                    ..FollowRules::default()
                };
                Ok(ConnectedTarget::kubernetes_with_rollout(
                    cluster,
                    mesh.registry.clone(),
                    rules,
                ))
            }
        }
    }

    /// A Kubernetes target over a ready cluster connection (tests point it at the API test server).
    pub fn kubernetes(cluster: Cluster, registry: Option<Registry>) -> ConnectedTarget {
        let rules = FollowRules {
            poll: ROLLOUT_POLL,
            ..FollowRules::default()
        };
        ConnectedTarget::kubernetes_with_rollout(cluster, registry, rules)
    }

    /// As [`ConnectedTarget::kubernetes`] with other roll-out rules.
    pub fn kubernetes_with_rollout(
        cluster: Cluster,
        registry: Option<Registry>,
        rollout: FollowRules,
    ) -> ConnectedTarget {
        ConnectedTarget::Kubernetes(Arc::new(Kube {
            cluster,
            registry,
            rollout,
            creds: tokio::sync::OnceCell::new(),
            workloads: Mutex::new(Vec::new()),
        }))
    }

    /// `context X, namespace Y` for a Kubernetes target (what a changing command names first).
    pub fn place(&self) -> Option<String> {
        match self {
            ConnectedTarget::Docker => None,
            ConnectedTarget::Kubernetes(kube) => Some(format!(
                "context {}, namespace {}",
                kube.cluster.context, kube.cluster.namespace
            )),
        }
    }

    /// How modules are delivered, or why they cannot be (then a converge is refused before any build).
    pub fn delivery(&self) -> Result<Delivery, String> {
        match self {
            ConnectedTarget::Docker => Ok(Delivery::Host),
            ConnectedTarget::Kubernetes(kube) => {
                if let Some(registry) = &kube.registry {
                    return Ok(Delivery::Push(registry.clone()));
                }
                match kube.cluster.kind_cluster() {
                    Some(name) => Ok(Delivery::KindLoad(name.to_string())),
                    None => Err(format!(
                        "nothing can deliver to Kubernetes context {:?} (namespace {}): set `registry = \"host:port\"` in [mesh] to push there, or use a kind-* context (kind load)",
                        kube.cluster.context, kube.cluster.namespace
                    )),
                }
            }
        }
    }
}

/// Check, before anything is built or changed, that the target lets us write what we will write: the
/// record (patch of the namespace) when `stamps`, and each workload kind in `sends`. The Docker target
/// always may.
pub async fn check_write_access(
    target: &ConnectedTarget,
    stamps: bool,
    sends: &[WorkloadKind],
) -> Result<(), String> {
    let ConnectedTarget::Kubernetes(kube) = target else {
        return Ok(());
    };
    let mut needed = Vec::new();
    if stamps {
        needed.push(Needed::on_namespace("get", &kube.cluster.namespace));
        needed.push(Needed::on_namespace("patch", &kube.cluster.namespace));
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
    kube.cluster
        .check_access(&needed)
        .await
        .map_err(|e| e.to_string())
}

/// What a converge of `modules` will write, checked before any build: the record, and the workloads of
/// the modules whose policy rolls out (their kinds, from one listing of the machines).
pub async fn check_converge_access(
    mesh: &Mesh,
    target: &ConnectedTarget,
    modules: &[&str],
) -> Result<(), String> {
    let ConnectedTarget::Kubernetes(kube) = target else {
        return Ok(());
    };
    let rolls_out = |m: &str| {
        mesh.module(m)
            .is_some_and(|module| module.policy == crate::mesh::model::Policy::Rollout)
    };
    let kinds: Vec<WorkloadKind> = if modules.iter().any(|m| rolls_out(m)) {
        kube.cluster
            .machines()
            .await
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|w| modules.contains(&w.module.as_str()) && rolls_out(&w.module))
            .map(|w| w.kind)
            .collect()
    } else {
        Vec::new()
    };
    check_write_access(target, true, &kinds).await
}

impl Kube {
    async fn credentials(&self, host: &str) -> Result<Option<Credentials>, String> {
        self.creds
            .get_or_init(|| async {
                credentials::for_registry(host)
                    .await
                    .map_err(|e| e.to_string())
            })
            .await
            .clone()
    }
}

/// A client for the registry the target pushes to, with the credentials a push uses (the Docker
/// config's, read once per connection): a registry that wants a login answers every question so.
pub async fn registry_client(
    target: &ConnectedTarget,
    registry: &crate::mesh::model::Registry,
) -> Result<RegistryClient, String> {
    let creds = match target {
        ConnectedTarget::Kubernetes(kube) => kube.credentials(&registry.host).await?,
        ConnectedTarget::Docker => credentials::for_registry(&registry.host)
            .await
            .map_err(|e| e.to_string())?,
    };
    RegistryClient::new(registry, creds).map_err(|e| e.to_string())
}

/// The target's record and how reasons name it.
#[derive(Debug, Clone)]
pub struct RecordRead {
    pub record: Record,
    /// Names the record in reasons.
    pub source: String,
    /// A record that could not be read as a whole reads as silent, with this warning.
    pub warning: Option<String>,
}

pub async fn read_record(
    mesh: &Mesh,
    target: &ConnectedTarget,
    db: &Mutex<StateDb>,
) -> Result<RecordRead, String> {
    match target {
        ConnectedTarget::Docker => {
            let record = locked(db)?.record(&mesh.name).map_err(|e| e.to_string())?;
            Ok(RecordRead {
                record,
                source: "the docker record".into(),
                warning: None,
            })
        }
        ConnectedTarget::Kubernetes(kube) => {
            let read = kube
                .cluster
                .read_record()
                .await
                .map_err(|e| e.to_string())?;
            Ok(RecordRead {
                record: read.record,
                source: format!(
                    "annotation {RECORD_ANNOTATION} on namespace {}",
                    kube.cluster.namespace
                ),
                warning: read.warning,
            })
        }
    }
}

/// Deliver one module's artifact to the target. `build_id` is this converge's build of it, if it was
/// built now; a push's manifest digest is kept with that build (or, for a host skip, with the build
/// that made the artifact, when the history knows it).
#[allow(clippy::too_many_arguments)]
pub async fn deliver(
    mesh: &Mesh,
    target: &ConnectedTarget,
    daemon: &LazyDaemon,
    db: &Mutex<StateDb>,
    module: &str,
    reference: &str,
    artifact: &str,
    build_id: Option<&str>,
    emitter: &Emitter,
) -> Result<(), String> {
    let ConnectedTarget::Kubernetes(kube) = target else {
        emitter.emit(
            Step::Delivered,
            Some(module),
            format!("{reference} is on the host daemon, which is the target"),
        );
        return Ok(());
    };
    match target.delivery()? {
        Delivery::Host => Ok(()),
        Delivery::KindLoad(name) => {
            kind_load(&name, reference)
                .await
                .map_err(|e| e.to_string())?;
            emitter.emit(
                Step::Delivered,
                Some(module),
                format!("kind load {reference} into kind cluster {name}"),
            );
            Ok(())
        }
        Delivery::Push(registry) => {
            let creds = kube.credentials(&registry.host).await?;
            let docker = daemon.get().await?;
            let digest = push_image(docker.docker(), reference, creds.as_ref())
                .await
                .map_err(|e| e.to_string())?;
            let db = locked(db)?;
            let build = match build_id {
                Some(id) => Some(id.to_string()),
                None => db
                    .build_by_digest(&mesh.name, artifact)
                    .map_err(|e| e.to_string())?
                    .map(|b| b.id),
            };
            if let Some(id) = build {
                db.set_published(&id, reference, &digest)
                    .map_err(|e| e.to_string())?;
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

/// The manifest digest the record's artifact was published under: the history's word, else the
/// registry's answer for its ref (a push from another host). None: not known to be published.
pub async fn published_digest(
    mesh: &Mesh,
    target: &ConnectedTarget,
    db: &Mutex<StateDb>,
    entry: &RecordEntry,
) -> Option<String> {
    let ConnectedTarget::Kubernetes(kube) = target else {
        return None;
    };
    let known = locked(db)
        .ok()?
        .build_by_digest(&mesh.name, &entry.digest)
        .ok()
        .flatten()
        .and_then(|b| b.published_digest);
    if known.is_some() {
        return known;
    }
    let registry = kube.registry.as_ref()?;
    let creds = kube.credentials(&registry.host).await.ok().flatten();
    let client = RegistryClient::new(registry, creds).ok()?;
    let (path, tag) = repository_in(&registry.host, &entry.reference);
    match client.manifest(path, tag).await {
        Ok(Published::Present { digest }) => Some(digest),
        _ => None,
    }
}

/// Stamp the record: merge `entries` into what it holds, only while `operation_id` holds the mesh.
/// Docker: the check and the stamp are one transaction of the state database. Kubernetes: the
/// lock is checked just before the annotation is written (two systems: no common transaction).
pub async fn stamp(
    mesh: &Mesh,
    target: &ConnectedTarget,
    db: &Mutex<StateDb>,
    operation_id: &str,
    entries: &Record,
) -> Result<(), ConvergeError> {
    stamp_as(mesh, target, db, operation_id, "converge", entries).await
}

/// Stamp the record by an operation of `kind` (converge, rollback), only while that operation still
/// holds the mesh; every changed entry is noted in the record's history in the state database (on
/// Kubernetes after the annotation was written: a history that cannot be written then is a warning,
/// the stamp stands).
pub async fn stamp_as(
    mesh: &Mesh,
    target: &ConnectedTarget,
    db: &Mutex<StateDb>,
    operation_id: &str,
    kind: &str,
    entries: &Record,
) -> Result<(), ConvergeError> {
    let history_error = |e: StateError| match e {
        StateError::LockLost { .. } => ConvergeError::LockLost(e.to_string()),
        other => ConvergeError::Failed(other.to_string()),
    };
    match target {
        ConnectedTarget::Docker => locked(db)
            .map_err(|e| ConvergeError::Failed(e.into()))?
            .stamp_record_as(&mesh.name, operation_id, kind, entries)
            .map_err(history_error),
        ConnectedTarget::Kubernetes(kube) => {
            super::engine::still_holds(db, &mesh.name, operation_id)?;
            let (previous, _) = kube
                .cluster
                .stamp_record_over(entries)
                .await
                .map_err(|e| ConvergeError::Failed(e.to_string()))?;
            let noted = locked(db).map_err(String::from).and_then(|h| {
                h.note_stamps(&mesh.name, operation_id, kind, &previous, entries)
                    .map_err(|e| e.to_string())
            });
            if let Err(error) = noted {
                tracing::warn!("the record was stamped, its history not: {error}");
            }
            Ok(())
        }
    }
}
