//! The target as one seam: where modules are delivered and machines run. Everything the engine, the
//! sources and the commands ask of a target goes through [`Target`] (`seam.rs`) and the roles it
//! plays — [`KeepsRecord`], [`RunsMachines`], [`Delivers`], [`HoldsTheMesh`], each [`Describes`]
//! the target — and a caller that asks one role takes that role alone (the hold takes
//! `&dyn HoldsTheMesh`, the plan `&dyn Delivers`); each kind lives
//! in its own file or folder (`docker.rs`, `kubernetes/`), and this file is the only one that chooses
//! between them. A target is connected once per command (one cluster connection) and shared as
//! `Arc<dyn Target>`.
//!
//! ```text
//!   cli/ · sources/ · converge/{engine,tiers,send,rollback,gc,rollout,preflight}
//!        │ ask (never match on the kind)
//!        ▼
//!   targets::connect(mesh, name, overrides) ──▶ Arc<dyn Target>  (seam.rs: the trait, its answers' types)
//!        ├── docker.rs      the host daemon · record in the state database · containers
//!        └── kubernetes/    a namespace · record in its annotation · workloads, roll-outs, the Lease
//!   host.rs: the daemon's answers both need (does it still hold an artifact?)
//! ```

mod docker;
mod host;
mod kubernetes;
mod overrides;
mod seam;
mod sign;

use std::sync::Arc;
use std::time::Duration;

use crate::backends::cluster::{Cluster, FollowRules};
use crate::error::TargetError;
use crate::mesh::model::{Mesh, Registry, Target as Spec};
use crate::mesh::target::TargetDescription;

pub(crate) use crate::attest::Pushed;
pub use docker::belongs;
pub use overrides::{NamedElsewhere, Overrides, PointedElsewhere};
pub use seam::{
    Artifact, Delivers, Delivery, Describes, Holding, HoldsTheMesh, KeepsRecord, LeftoverRemoval,
    Reach, RecordLeftover, RecordRead, RecordRoom, RunsMachines, Shown, Target,
};
pub(crate) use sign::sign_pushed;

/// How often a roll-out is polled.
pub(crate) const ROLLOUT_POLL: Duration = Duration::from_secs(1);

/// A connected target, shared by every step of a command.
pub type Connected = Arc<dyn Target>;

/// Connect to the mesh's target `name`, where the command line's `overrides` point it (a single
/// `[target]` only; a named target acts where it names).
pub async fn connect(
    mesh: &Mesh,
    name: &str,
    overrides: &Overrides,
) -> Result<Connected, TargetError> {
    let Some(spec) = mesh.target(name) else {
        return Err(TargetError::NoSuchTarget {
            mesh: mesh.name.clone(),
            name: name.to_string(),
            names: mesh.target_names().join(", "),
            file: mesh.file.display().to_string(),
        });
    };
    let environment = mesh.environment(name);
    let named = environment.is_some_and(|e| e.named);
    if named && overrides.first_given().is_some() {
        return Err(TargetError::Kind(Box::new(NamedElsewhere {
            mesh: mesh.name.clone(),
            target: name.to_string(),
            file: mesh.file.display().to_string(),
        })));
    }
    match spec {
        Spec::Docker => Ok(Arc::new(docker::Docker::new(mesh, name))),
        Spec::Kubernetes { namespace, context } => {
            let (context, namespace) = overrides.kubernetes.place(context.as_ref(), namespace);
            let kube = kubernetes::Kube::connect(mesh, name, context, Some(namespace)).await?;
            Ok(Arc::new(kube))
        }
    }
}

/// The target `name` in words without connecting to it (when it cannot be reached yet): the
/// `overrides` win over the mesh file.
pub fn describe(mesh: &Mesh, name: &str, overrides: &Overrides) -> TargetDescription {
    let spec = mesh.target(name).unwrap_or(mesh.default_target());
    match spec {
        Spec::Docker => docker::description(name),
        Spec::Kubernetes { namespace, context } => {
            let (context, namespace) = overrides.kubernetes.place(context.as_ref(), namespace);
            kubernetes::description(name, context.as_deref(), &namespace)
        }
    }
}

/// The host daemon as the target (tests, benches and examples make it by hand).
pub fn docker() -> Connected {
    Arc::new(docker::Docker {
        name: crate::mesh::model::DEFAULT_TARGET.to_string(),
        first: true,
        marked: false,
    })
}

/// A Kubernetes target over a ready cluster connection (tests point it at the API test server).
pub fn kubernetes(cluster: Cluster, registry: Option<Registry>) -> Connected {
    let rules = FollowRules {
        poll: ROLLOUT_POLL,
        ..FollowRules::default()
    };
    kubernetes_with_rollout(cluster, registry, rules)
}

/// As [`kubernetes`] with other roll-out rules.
pub(crate) fn kubernetes_with_rollout(
    cluster: Cluster,
    registry: Option<Registry>,
    rollout: FollowRules,
) -> Connected {
    Arc::new(kubernetes::Kube::new(
        crate::mesh::model::DEFAULT_TARGET,
        cluster,
        registry,
        rollout,
    ))
}
