//! The Kubernetes target through `kube`: the namespace's record, workloads as machines, send and roll-out.
//!
//! Every call names the context and namespace it acts on in its errors, so a message always says where.

mod machines;
mod record;
mod rollout;

use std::fmt;
use std::process::Stdio;

use kube::config::{KubeConfigOptions, Kubeconfig};

pub use machines::{Workload, WorkloadKind};
pub use record::{RECORD_ANNOTATION, RecordRead};
pub use rollout::RolloutDone;

/// The workload annotation naming the container meshtop sends to.
pub const CONTAINER_ANNOTATION: &str = "jr2.dev/container";
/// The pod-template annotation carrying the artifact id (so a new artifact under the same tag still rolls out).
pub const ARTIFACT_ANNOTATION: &str = "jr2.dev/artifact";

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "cannot configure the Kubernetes client{}: {message}. Check KUBECONFIG (or ~/.kube/config) and the context name",
        context.as_deref().map(|c| format!(" for context {c:?}")).unwrap_or_default()
    )]
    Config {
        context: Option<String>,
        message: String,
    },
    #[error("Kubernetes API call failed ({what}) in context {context:?}: {source}")]
    Api {
        what: String,
        context: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "namespace {namespace:?} does not exist in context {context:?}: create it (kubectl create namespace {namespace}) or set the mesh's namespace"
    )]
    NamespaceMissing { namespace: String, context: String },
    #[error(
        "the record on namespace {namespace:?} kept changing under us: gave up after {attempts} attempts; run the converge again"
    )]
    RecordContention { namespace: String, attempts: u32 },
    #[error(
        "{workload} was changed by someone else: it now runs {running:?}; not overwritten ({detail})"
    )]
    Conflict {
        workload: String,
        running: String,
        detail: String,
    },
    #[error("the roll-out of {workload} failed: {reason}{}", events_suffix(.events))]
    RolloutFailed {
        workload: String,
        reason: String,
        events: Vec<String>,
        log_tail: Option<String>,
    },
    #[error("kind load of {reference} into kind cluster {cluster:?} failed: {message}")]
    KindLoad {
        cluster: String,
        reference: String,
        message: String,
    },
}

fn events_suffix(events: &[String]) -> String {
    match events.last() {
        Some(last) => format!(" (last event: {last})"),
        None => String::new(),
    }
}

/// A connection to one namespace of one cluster context.
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
    pub context: String,
    pub namespace: String,
}

impl fmt::Debug for Cluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cluster")
            .field("context", &self.context)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Configure the client as kubectl does: `KUBECONFIG` or `~/.kube/config`, the current context unless one is given.
    pub async fn connect(context: Option<&str>, namespace: &str) -> Result<Cluster, ClusterError> {
        let config_error = |message: String| ClusterError::Config {
            context: context.map(str::to_string),
            message,
        };
        let kubeconfig = Kubeconfig::read().map_err(|e| config_error(e.to_string()))?;
        let context_name = match context {
            Some(c) => c.to_string(),
            None => kubeconfig
                .current_context
                .clone()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| {
                    config_error("the kubeconfig has no current context: pass --context".into())
                })?,
        };
        let options = KubeConfigOptions {
            context: Some(context_name.clone()),
            ..KubeConfigOptions::default()
        };
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| config_error(e.to_string()))?;
        let client = kube::Client::try_from(config).map_err(|e| config_error(e.to_string()))?;
        Ok(Cluster::from_client(client, &context_name, namespace))
    }

    /// A cluster over a ready client (tests point it at the API test server).
    pub fn from_client(client: kube::Client, context: &str, namespace: &str) -> Cluster {
        Cluster {
            client,
            context: context.to_string(),
            namespace: namespace.to_string(),
        }
    }

    /// Where this cluster acts, for headers and messages: `context/namespace`.
    pub fn place(&self) -> String {
        format!("{}/{}", self.context, self.namespace)
    }

    /// The kind cluster name of a `kind-<name>` context, if it is one.
    pub fn kind_cluster(&self) -> Option<&str> {
        self.context.strip_prefix("kind-").filter(|n| !n.is_empty())
    }

    fn api_error(&self, what: impl Into<String>, source: kube::Error) -> ClusterError {
        ClusterError::Api {
            what: what.into(),
            context: self.context.clone(),
            source,
        }
    }
}

/// The HTTP status code of an API error, if the server answered with one.
fn status_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// `kind load docker-image --name <cluster_name> <reference>`, as a process with arguments (no shell).
pub async fn kind_load(cluster_name: &str, reference: &str) -> Result<(), ClusterError> {
    let fail = |message: String| ClusterError::KindLoad {
        cluster: cluster_name.to_string(),
        reference: reference.to_string(),
        message,
    };
    let output = tokio::process::Command::new("kind")
        .args(["load", "docker-image", "--name", cluster_name, reference])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                fail("the `kind` command is not on PATH: install kind, or set `registry` in the mesh file".into())
            } else {
                fail(format!("cannot run `kind`: {e}"))
            }
        })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let tail: Vec<&str> = stderr
        .lines()
        .rev()
        .take(5)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    Err(fail(format!(
        "`kind` exited with {}: {}",
        output.status,
        tail.join(" / ")
    )))
}
