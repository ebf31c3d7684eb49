//! The Kubernetes target: one namespace of one context. The record is the namespace's annotation
//! (`record.rs`), delivery a push or `kind load` (`delivery.rs`), machines the labelled workloads
//! (`machines.rs`), and a send patches a workload's container image to `ref@digest` and follows its
//! roll-out (`send.rs`); what the cluster must allow is checked first (`access.rs`). The mesh is
//! held by the state database's lock and the namespace's Lease (`hold.rs` answers the hold's role,
//! `lease.rs`); what only this target can say is `error.rs`. This file connects it and answers the
//! other roles by delegation.

mod access;
mod delivery;
mod error;
mod flags;
mod hold;
mod lease;
mod machines;
mod record;
mod send;

use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::Sender;

use crate::backends::cluster::{Cluster, FollowRules, Workload};
use crate::backends::credentials::{Credentials, CredentialsError};
use crate::backends::daemon::LazyDaemon;
use crate::backends::registry::RegistryClient;
use crate::backends::state::StateDb;
use crate::error::{ConvergeError, TargetError};
use crate::mesh::logs::{LogAsk, LogItem};
use crate::mesh::machine::{Machine, Move};
use crate::mesh::model::{Mesh, Record, RecordEntry, Registry};
use crate::mesh::pin::{PinChange, StampBy};
use crate::mesh::target::TargetDescription;
use crate::progress::Emitter;

use super::seam::{
    Artifact, Delivers, Delivery, Describes, Holding, KeepsRecord, LeftoverRemoval, Reach,
    RecordLeftover, RecordRead, RunsMachines, Shown, Target,
};

pub(super) use error::{KubeError, UnknownContext};
pub(super) use flags::Flags;
use lease::LeaseClaims;
use record::Stamps;

/// One Kubernetes namespace of one context, and how modules get there.
pub(super) struct Kube {
    /// The target's name in the mesh.
    pub name: String,
    pub cluster: Cluster,
    pub registry: Option<Registry>,
    /// How roll-outs are followed: the deadline follows each workload (`progressDeadlineSeconds`, else
    /// 600 s) unless the mesh file sets `rollout_deadline` in [target].
    pub rollout: FollowRules,
    /// Docker's credentials for the registry, looked up at most once.
    creds: tokio::sync::OnceCell<Result<Option<Credentials>, Arc<CredentialsError>>>,
    /// The workloads as last listed: a send guards against the image seen here.
    workloads: Mutex<Vec<Workload>>,
    /// The operations of this process holding the mesh's Lease.
    claims: Arc<LeaseClaims>,
}

impl Kube {
    /// Connect at `context` (the kubeconfig's current one when None) and `namespace`. A named
    /// target's context must be one the kubeconfig has: checked before any call.
    pub(super) async fn connect(
        mesh: &Mesh,
        name: &str,
        context: Option<String>,
        namespace: Option<String>,
    ) -> Result<Kube, TargetError> {
        let environment = mesh.environment(name);
        if environment.is_some_and(|e| e.named)
            && let Some(context) = &context
        {
            known_context(mesh, name, context)?;
        }
        let namespace = namespace.unwrap_or_default();
        let cluster = Cluster::connect(context.as_deref(), &namespace).await?;
        let rules = FollowRules {
            deadline: environment
                .and_then(|e| e.rollout_deadline)
                .or(mesh.rollout_deadline),
            ..FollowRules::default()
        };
        Ok(Kube::new(name, cluster, mesh.registry.clone(), rules))
    }

    pub(super) fn new(
        name: &str,
        cluster: Cluster,
        registry: Option<Registry>,
        rollout: FollowRules,
    ) -> Kube {
        let kube = Kube {
            name: name.to_string(),
            cluster,
            registry,
            rollout,
            creds: tokio::sync::OnceCell::new(),
            workloads: Mutex::new(Vec::new()),
            claims: Arc::new(LeaseClaims::default()),
        };
        // A pod's artifact annotation says what it runs only where images arrive by `kind load`
        // (no registry digest to report); elsewhere its imageID does.
        let kind_loaded = matches!(kube.delivery_here(), Ok(Delivery::KindLoad(_)));
        Kube {
            cluster: kube.cluster.with_loaded_images(kind_loaded),
            ..kube
        }
    }
}

/// A named target's context must be one the kubeconfig has: checked before any call, so that it
/// never falls back on another (the current one).
fn known_context(mesh: &Mesh, name: &str, context: &str) -> Result<(), TargetError> {
    let known = crate::backends::cluster::kubeconfig_contexts();
    if known.names.iter().any(|c| c == context) {
        return Ok(());
    }
    Err(KubeError::UnknownContext(Box::new(UnknownContext {
        file: mesh.file.display().to_string(),
        line: mesh.environment(name).map_or(0, |e| e.line),
        target: name.to_string(),
        context: context.to_string(),
        kubeconfig: known.kubeconfig,
        contexts: known.names,
    }))
    .into())
}

/// A namespace in words (`context X, namespace Y`; the context unsaid when it is the kubeconfig's
/// current one and not yet read), and what a send really does there.
pub(super) fn description(name: &str, context: Option<&str>, namespace: &str) -> TargetDescription {
    let place = match context {
        Some(context) => format!("context {context}, namespace {namespace}"),
        None => format!("namespace {namespace}"),
    };
    TargetDescription {
        name: name.to_string(),
        kind: "kubernetes".into(),
        place: Some(place),
        send_does:
            "each workload's container image is patched to ref@digest and its roll-out followed"
                .into(),
    }
}

impl Describes for Kube {
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
}

#[async_trait::async_trait]
impl KeepsRecord for Kube {
    async fn read_record<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
    ) -> Result<RecordRead, TargetError> {
        self.read(mesh, db, Stamps::Whole).await
    }

    async fn read_entries<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
    ) -> Result<RecordRead, TargetError> {
        self.read(mesh, db, Stamps::Apart).await
    }

    async fn read_shown<'a>(&'a self, shown: Shown<'a>) -> Result<RecordRead, TargetError> {
        let stamps = Stamps::Shown(shown.history_of);
        self.read(shown.mesh, shown.db, stamps).await
    }

    async fn record_leftovers<'a>(
        &'a self,
        grace_ms: i64,
    ) -> Result<Vec<RecordLeftover>, TargetError> {
        self.unnamed_shards(grace_ms).await
    }

    async fn remove_leftover<'a>(
        &'a self,
        name: &'a str,
        grace_ms: i64,
    ) -> Result<LeftoverRemoval, TargetError> {
        self.remove_unnamed_shard(name, grace_ms).await
    }

    async fn stamp<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
        by: StampBy<'a>,
        entries: &'a Record,
        pins: &'a PinChange,
    ) -> Result<(), ConvergeError> {
        self.stamp_over(mesh, db, by, entries, pins).await
    }
}

#[async_trait::async_trait]
impl RunsMachines for Kube {
    fn machines_root(&self) -> &'static str {
        "the cluster's workloads"
    }

    async fn machines<'a>(
        &'a self,
        mesh: &'a Mesh,
        record: &'a Record,
        reach: Reach<'a>,
    ) -> Result<Vec<Machine>, TargetError> {
        self.list(mesh, record, reach.db).await
    }

    /// Workloads are declared by their own manifests: none is created here.
    async fn create_declared<'a>(
        &'a self,
        _mesh: &'a Mesh,
        _record: &'a Record,
        _existing: &'a [Machine],
        _in_scope: &'a (dyn for<'s> Fn(&'s str) -> bool + Sync),
        _reach: Reach<'a>,
        _emitter: &'a Emitter,
    ) -> Result<Vec<String>, TargetError> {
        Ok(Vec::new())
    }

    async fn send<'a>(
        &'a self,
        mesh: &'a Mesh,
        moved: &'a Move,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<String, TargetError> {
        self.send_one(mesh, reach.db, moved, emitter)
            .await
            .map(|()| String::new())
    }

    async fn logs<'a>(
        &'a self,
        _mesh: &'a Mesh,
        machine: &'a Machine,
        ask: &'a LogAsk,
        _daemon: &'a LazyDaemon,
        out: Sender<LogItem>,
    ) -> Result<(), TargetError> {
        let workloads = self.cluster.machines().await?;
        let Some(workload) = workloads
            .iter()
            .find(|w| w.name == machine.name && w.kind.as_str() == machine.kind)
        else {
            return Err(KubeError::MachineGone {
                kind: machine.kind.clone(),
                machine: machine.name.clone(),
                place: self.cluster.place(),
            }
            .into());
        };
        Ok(self.cluster.workload_logs(workload, ask, &out).await?)
    }
}

#[async_trait::async_trait]
impl Delivers for Kube {
    /// The cluster runs what its registry (or `kind load`) was given: an image on the host daemon
    /// answers for nothing here.
    fn host_images_answer(&self) -> bool {
        false
    }

    fn host_holds_what_it_runs(&self) -> bool {
        false
    }

    fn delivery(&self) -> Result<Delivery, TargetError> {
        self.delivery_here()
    }

    async fn deliver<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<Option<String>, TargetError> {
        self.deliver_now(mesh, artifact, reach, emitter).await
    }

    /// The cluster pulls from the registry that vouched: nothing to push. The host daemon needs the
    /// artifact only when a module of this converge builds FROM it (then it is pulled there).
    async fn fetch_vouched<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        manifest: &'a str,
        on_host: bool,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<(), TargetError> {
        self.fetch(mesh, artifact, manifest, on_host, reach, emitter)
            .await
    }

    /// Delivery pushes every build to the registry already: nothing more to publish.
    async fn publish<'a>(
        &'a self,
        _mesh: &'a Mesh,
        _artifact: Artifact<'a>,
        _reach: Reach<'a>,
        _emitter: &'a Emitter,
    ) -> Result<Option<String>, TargetError> {
        Ok(None)
    }

    async fn holds<'a>(
        &'a self,
        mesh: &'a Mesh,
        wanted: &'a RecordEntry,
        reach: Reach<'a>,
    ) -> Result<Holding, TargetError> {
        self.holds_now(mesh, wanted, reach).await
    }

    /// Pushed: the registry must hold it (nothing is pushed; the cluster pulls it). Loaded: the
    /// host must hold it, and it is loaded into this kind cluster.
    async fn bring<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<Holding, TargetError> {
        self.bring_here(mesh, artifact, reach, emitter).await
    }

    /// The credentials a push uses (the Docker config's, read once per connection).
    async fn registry_client<'a>(
        &'a self,
        registry: &'a Registry,
    ) -> Result<RegistryClient, TargetError> {
        self.client(registry).await
    }
}

#[async_trait::async_trait]
impl Target for Kube {
    async fn check_write_access<'a>(
        &'a self,
        stamps: bool,
        sends: &'a [Move],
    ) -> Result<(), TargetError> {
        self.write_access(stamps, sends).await
    }

    async fn check_converge_access<'a>(
        &'a self,
        mesh: &'a Mesh,
        modules: &'a [&'a str],
    ) -> Result<(), TargetError> {
        self.converge_access(mesh, modules).await
    }
}
