//! What only the Kubernetes target can say. It reaches the engine as `TargetError::Kind` (bad input
//! as `TargetError::KindInput`), so that the engine's errors name no kind; the words are those the
//! commands and the screen showed before the seam was typed. At the bottom of the folder.

use crate::backends::cluster::ClusterError;
use crate::error::HoldLost;
use crate::error::{ConvergeError, TargetError};

use super::lease::{HoldError, LeaseBusy};

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The namespace's Lease is held by a live operation (the message names it, its kind and since).
    #[error(transparent)]
    LeaseBusy(Box<LeaseBusy>),
    #[error(
        "nothing can deliver to Kubernetes context {context:?} (namespace {namespace}): set `registry = \"host:port\"` in [mesh] to push there, or use a kind-* context (kind load)"
    )]
    NoDelivery { context: String, namespace: String },
    #[error("{reference} is not published in registry {registry}: converge module {module} first")]
    NotPublished {
        reference: String,
        registry: String,
        module: String,
    },
    /// The ref's tag names a manifest whose config is not the recorded artifact (pushed over since
    /// it was recorded): it is never deployed.
    #[error(
        "{reference} now names manifest {manifest} in registry {registry}, whose artifact is {names}, not the recorded {artifact}: nothing was sent (the tag was pushed over; converge module {module} again, or promote the artifact you want)"
    )]
    NotTheArtifact {
        reference: String,
        registry: String,
        manifest: String,
        names: String,
        artifact: String,
        module: String,
    },
    #[error("{kind} {machine} is no longer in {place}")]
    MachineGone {
        kind: String,
        machine: String,
        place: String,
    },
    /// Someone set another image while the roll-out ran: the machine runs that, not what was sent.
    #[error(
        "someone changed the image to {image} while the roll-out ran: {workload} runs that, not {sent}"
    )]
    Reverted {
        image: String,
        workload: String,
        sent: String,
    },
    /// Workloads whose module container cannot be told (each named with its containers and the fix).
    #[error("nothing was sent: {0}")]
    UnknownContainers(String),
    /// A named target's context is not in the kubeconfig: refused before any call (bad input).
    /// Boxed: it is large, and every target answer would carry its size.
    #[error(transparent)]
    UnknownContext(Box<UnknownContext>),
}

/// A named target's context that the kubeconfig does not have.
#[derive(Debug, thiserror::Error)]
#[error(
    "{file}:{line}: target {target:?} names context {context:?}, which the kubeconfig ({kubeconfig}) does not have — contexts there: {}; fix `context` of target {target:?} or add the context to the kubeconfig (a named target never falls back to the current context)",
    if .contexts.is_empty() { "none".to_string() } else { .contexts.join(", ") }
)]
pub struct UnknownContext {
    pub file: String,
    pub line: usize,
    pub target: String,
    pub context: String,
    pub kubeconfig: String,
    pub contexts: Vec<String>,
}

impl From<KubeError> for TargetError {
    fn from(error: KubeError) -> TargetError {
        match error {
            KubeError::UnknownContext(_) => TargetError::KindInput(Box::new(error)),
            other => TargetError::Kind(Box::new(other)),
        }
    }
}

impl From<ClusterError> for TargetError {
    fn from(error: ClusterError) -> TargetError {
        KubeError::Cluster(error).into()
    }
}

impl From<HoldError> for ConvergeError {
    fn from(error: HoldError) -> Self {
        match error {
            HoldError::Busy(busy) => ConvergeError::Target(KubeError::LeaseBusy(busy).into()),
            HoldError::Lost(lost) => {
                ConvergeError::LockLost(HoldLost::Target(std::sync::Arc::new(lost)))
            }
            HoldError::Failed(message) => ConvergeError::Failed(message),
        }
    }
}
