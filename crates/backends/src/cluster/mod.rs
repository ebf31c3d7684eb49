//! The Kubernetes target through `kube`: the namespace's record, workloads as machines, send and roll-out.
//!
//! Every call names the context and namespace it acts on in its errors, so a message always says where.

mod access;
pub mod judge;
mod lease;
mod logs;
mod machines;
mod proxy;
mod record;
mod record_history;
mod record_shards;
mod rollout;

use std::fmt;
use std::future::Future;
use std::process::Stdio;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};

pub use access::Needed;
pub use lease::{
    LEASE_HOST, LEASE_KIND, LEASE_OPERATION, LEASE_PID, LEASE_PREFIX, LEASE_SHORT, LeaseHolder,
    LeaseTake, holder_of, lease_name,
};
pub use machines::{Workload, WorkloadKind};
pub use proxy::proxy_for;
pub use record::{
    ANNOTATIONS_LIMIT_BYTES, HISTORY_ANNOTATION, HISTORY_KEPT, PINS_ANNOTATION, RECORD_ANNOTATION,
    RecordForm, RecordRead, Stamped, TeamWrite, modules_left, trim_history,
};
pub use record_shards::{
    INDEX_ANNOTATION, INDEX_FORMAT, ReadCost, RecordIndex, SHARD_BYTES, SHARD_GRACE_MS, SHARD_KEY,
    SHARD_LABEL, SHARD_PREFIX, SHARD_WRITTEN_AT, SHARD_WRITTEN_BY, ShardContent, ShardProblem,
    ShardRef, ShardRemoval, UnnamedShard, shard_digest,
};
pub use rollout::{
    BACKOFF_REASONS, DEFAULT_PROGRESS_DEADLINE, FAILING_REASONS, FollowRules, RolloutDone,
    TRANSIENT_REASONS,
};

/// How long one API request may take before it reads as failed (kubectl has `--request-timeout`; meshtop
/// always sets one, so one hung GET never outlives a roll-out's deadline).
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The workload annotation naming the container meshtop sends to.
pub(crate) const CONTAINER_ANNOTATION: &str = "jr2.dev/container";
/// The pod-template annotation carrying the artifact id (so a new artifact under the same tag still rolls out).
pub(crate) const ARTIFACT_ANNOTATION: &str = "jr2.dev/artifact";
/// Beside it, the image the artifact was sent as: the artifact annotation describes a pod only while the
/// pod runs that image (someone may set another image and leave the annotation).
pub(crate) const ARTIFACT_IMAGE_ANNOTATION: &str = "jr2.dev/artifact-image";

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "cannot configure the Kubernetes client{}: {source}. Check KUBECONFIG (or ~/.kube/config) and the context name",
        context.as_deref().map(|c| format!(" for context {c:?}")).unwrap_or_default()
    )]
    Config {
        context: Option<String>,
        /// The kubeconfig's, the client's or the proxy's own error (or what meshtop found wrong).
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("Kubernetes API call failed ({what}) in context {context:?}: {}", describe(.source))]
    Api {
        what: String,
        context: String,
        #[source]
        source: kube::Error,
    },
    #[error("Kubernetes API call ({what}) in context {context:?} got no answer within {}s", .after.as_secs())]
    Timeout {
        what: String,
        context: String,
        after: Duration,
    },
    #[error(
        "not allowed in context {context:?}: {}. Nothing was built or changed; see docs/targets-kubernetes.md, \"RBAC\", for the role meshtop needs",
        .missing.join("; ")
    )]
    Forbidden {
        context: String,
        missing: Vec<String>,
    },
    #[error(
        "{operation} lost the mesh's lease {lease:?} in namespace {namespace:?}: {}; it stopped before its next write",
        lease_taken_by(.taken_by.as_deref())
    )]
    LeaseLost {
        lease: String,
        namespace: String,
        /// The operation that lost it (`send #12`).
        operation: String,
        /// Who holds it now, when anyone does.
        taken_by: Option<Box<LeaseHolder>>,
    },
    #[error(
        "the lease {lease:?} in namespace {namespace:?} kept changing under us: gave up after {attempts} attempts; try again"
    )]
    LeaseContention {
        lease: String,
        namespace: String,
        attempts: u32,
    },
    #[error("{workload} is not rolled out by its controller: {message}")]
    OnDelete { workload: String, message: String },
    #[error(
        "{workload} is paused (kubectl rollout pause): its image is patched, but nothing rolls out until it is resumed: {resume}. Its machine reads held (paused)"
    )]
    Paused { workload: String, resume: String },
    #[error(
        "{workload}: meshtop cannot tell which container is module {module}'s, so nothing was sent to it: {why}"
    )]
    UnknownContainer {
        workload: String,
        module: String,
        why: String,
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
        "the record's shard ConfigMap {shard:?} in namespace {namespace:?} {problem}; the record is not read. Restore the shard, or start the record over: kubectl annotate namespace {namespace} jr2.dev/record-index-"
    )]
    RecordShard {
        namespace: String,
        shard: String,
        #[source]
        problem: record_shards::ShardProblem,
    },
    #[error(
        "the record for namespace {namespace:?} does not fit on it in any form: its annotations would take {bytes} bytes, over the API server's limit of {limit} bytes for all of an object's annotations (in the plain form the history is already trimmed; in the sharded form only the index of shards stays on the namespace, and the namespace's other annotations leave no room for it); nothing was written — remove other large annotations from the namespace"
    )]
    RecordTooLarge {
        namespace: String,
        bytes: usize,
        limit: usize,
    },
    #[error(
        "{workload} was changed by someone else: it now runs {running:?}; not overwritten ({detail})"
    )]
    Conflict {
        workload: String,
        running: String,
        detail: String,
    },
    #[error("the roll-out of {workload} failed: {reason}{}", evidence(.waiting, .events, .log_tail))]
    RolloutFailed {
        workload: String,
        /// The named diagnosis (kubectl's message, or the waiting reason and what it means).
        reason: String,
        /// The raw waiting reason and message of the container diagnosed.
        waiting: Option<String>,
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

/// Who took a lost lease, as a person reads it.
fn lease_taken_by(holder: Option<&LeaseHolder>) -> String {
    match holder {
        Some(h) => format!("{} holds it now", h.describe()),
        None => "it was released or deleted (nobody holds it now)".into(),
    }
}

/// The raw evidence shown beside any named diagnosis: the waiting reason and message, the last events, the
/// log tail.
fn evidence(waiting: &Option<String>, events: &[String], log_tail: &Option<String>) -> String {
    let mut text = String::new();
    if let Some(waiting) = waiting {
        text.push_str(&format!("; waiting: {waiting}"));
    }
    if !events.is_empty() {
        text.push_str(&format!("; events: {}", events.join(" | ")));
    }
    if let Some(tail) = log_tail {
        text.push_str(&format!(
            "; log tail: {}",
            tail.trim_end().replace('\n', " / ")
        ));
    }
    text
}

/// An API error as a person reads it: the Status' own message and reason, never a Debug dump.
pub(crate) fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            let message = if status.message.is_empty() {
                "no message"
            } else {
                status.message.as_str()
            };
            if status.reason.is_empty() {
                format!("{message} (HTTP {})", status.code)
            } else {
                format!("{message} ({}, HTTP {})", status.reason, status.code)
            }
        }
        other => other.to_string(),
    }
}

/// A connection to one namespace of one cluster context.
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
    pub context: String,
    pub namespace: String,
    /// Every API request's timeout.
    pub request_timeout: Duration,
    /// How long a record shard no index names is kept after it was written or renewed
    /// ([`record_shards::SHARD_GRACE_MS`]; tests shorten it with [`Cluster::with_shard_grace`]).
    pub(crate) shard_grace_ms: i64,
    /// Whether the target delivers by `kind load`: only then is a pod's `jr2.dev/artifact`
    /// annotation read as what it runs (a loaded image has no registry digest); elsewhere the
    /// pod's `imageID` is, and anyone who can patch a workload can write the annotation.
    pub(crate) loaded_images: bool,
    /// The record's shards this connection read and verified (shared by its clones): a shard an
    /// index still names is not asked for again.
    seen: std::sync::Arc<std::sync::Mutex<record_shards::ShardsSeen>>,
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
    /// Configure the client as kubectl does: `KUBECONFIG` or `~/.kube/config`, the current context unless one
    /// is given; with no kubeconfig at all and no context asked for, the in-cluster service account (as
    /// client-go's `DeferredLoadingClientConfig` falls back in `tools/clientcmd/client_config.go`). Proxies as
    /// kubectl's: see [`proxy_for`].
    pub async fn connect(context: Option<&str>, namespace: &str) -> Result<Cluster, ClusterError> {
        let config_error =
            |source: Box<dyn std::error::Error + Send + Sync>| ClusterError::Config {
                context: context.map(str::to_string),
                source,
            };
        let (mut config, context_name, cluster_proxy) = match Kubeconfig::read() {
            Ok(kubeconfig) => {
                let context_name = match context {
                    Some(c) => c.to_string(),
                    None => kubeconfig
                        .current_context
                        .clone()
                        .filter(|c| !c.is_empty())
                        .ok_or_else(|| {
                            config_error(
                                "the kubeconfig has no current context: pass --context".into(),
                            )
                        })?,
                };
                let cluster_proxy = kubeconfig
                    .contexts
                    .iter()
                    .find(|c| c.name == context_name)
                    .and_then(|c| c.context.as_ref())
                    .and_then(|c| kubeconfig.clusters.iter().find(|n| n.name == c.cluster))
                    .and_then(|n| n.cluster.as_ref())
                    .and_then(|c| c.proxy_url.clone())
                    .filter(|p| !p.is_empty());
                let options = KubeConfigOptions {
                    context: Some(context_name.clone()),
                    ..KubeConfigOptions::default()
                };
                let config = kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .map_err(|e| config_error(e.into()))?;
                (config, context_name, cluster_proxy)
            }
            Err(error) if context.is_none() && !kubeconfig_present() => {
                let config = kube::Config::incluster().map_err(|e| {
                    config_error(
                        format!("no kubeconfig ({error}) and not inside a cluster ({e})").into(),
                    )
                })?;
                (config, IN_CLUSTER_CONTEXT.to_string(), None)
            }
            Err(error) => return Err(config_error(error.into())),
        };
        config.proxy_url = proxy_for(&config.cluster_url, cluster_proxy.as_deref(), &|k| {
            std::env::var(k).ok()
        })
        .map_err(|e| config_error(e.into()))?;
        config.connect_timeout = Some(REQUEST_TIMEOUT);
        config.read_timeout = Some(REQUEST_TIMEOUT);
        config.write_timeout = Some(REQUEST_TIMEOUT);
        config.reset_reader_on_write = true;
        let client = kube::Client::try_from(config).map_err(|e| config_error(e.into()))?;
        Ok(Cluster::from_client(client, &context_name, namespace))
    }

    /// A cluster over a ready client (tests point it at the API test server).
    pub fn from_client(client: kube::Client, context: &str, namespace: &str) -> Cluster {
        Cluster {
            client,
            context: context.to_string(),
            namespace: namespace.to_string(),
            request_timeout: REQUEST_TIMEOUT,
            shard_grace_ms: record_shards::SHARD_GRACE_MS,
            loaded_images: false,
            seen: std::sync::Arc::default(),
        }
    }

    /// The same cluster, told whether its images arrive by `kind load` (see `loaded_images`).
    pub fn with_loaded_images(mut self, loaded: bool) -> Cluster {
        self.loaded_images = loaded;
        self
    }

    /// The same cluster with another grace for the record's shards: tests shorten it to watch a
    /// stamper slower than the grace (no user setting: ten minutes is what keeps a stamp in flight
    /// safe from clocks that disagree).
    #[doc(hidden)]
    pub fn with_shard_grace(mut self, grace: Duration) -> Cluster {
        self.shard_grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
        self
    }

    /// The same cluster with another per-request timeout.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Cluster {
        self.request_timeout = timeout;
        self
    }

    /// Run one request under the request timeout (`Err(())`: it timed out).
    pub(crate) async fn timed<T>(&self, request: impl Future<Output = T>) -> Result<T, ()> {
        tokio::time::timeout(self.request_timeout, request)
            .await
            .map_err(|_| ())
    }

    /// Run one request under the request timeout, naming it in any error.
    pub(crate) async fn call<T>(
        &self,
        what: String,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, ClusterError> {
        match self.timed(request).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(self.api_error(what, e)),
            Err(()) => Err(self.timeout_error(what)),
        }
    }

    pub(crate) fn timeout_error(&self, what: impl Into<String>) -> ClusterError {
        ClusterError::Timeout {
            what: what.into(),
            context: self.context.clone(),
            after: self.request_timeout,
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

/// The contexts a kubeconfig names, and where it was read (`KUBECONFIG`'s value, or
/// `~/.kube/config`), without connecting to anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeContexts {
    pub kubeconfig: String,
    pub names: Vec<String>,
}

/// The contexts of the kubeconfig kubectl would read (read only; no call is made). A kubeconfig
/// that cannot be read names none, and says why in `kubeconfig`.
pub fn kubeconfig_contexts() -> KubeContexts {
    let kubeconfig = match std::env::var("KUBECONFIG") {
        Ok(value) if !value.is_empty() => value,
        _ => std::env::var_os("HOME")
            .map(|home| {
                std::path::PathBuf::from(home)
                    .join(".kube")
                    .join("config")
                    .display()
                    .to_string()
            })
            .unwrap_or_else(|| "~/.kube/config".into()),
    };
    match Kubeconfig::read() {
        Ok(config) => KubeContexts {
            kubeconfig,
            names: config.contexts.into_iter().map(|c| c.name).collect(),
        },
        Err(error) => KubeContexts {
            kubeconfig: format!("{kubeconfig}, unreadable: {error}"),
            names: Vec::new(),
        },
    }
}

/// The context name meshtop gives the in-cluster configuration.
pub(crate) const IN_CLUSTER_CONTEXT: &str = "in-cluster";

/// Is there a kubeconfig to read (KUBECONFIG names one, or ~/.kube/config exists)?
fn kubeconfig_present() -> bool {
    if std::env::var_os("KUBECONFIG").is_some_and(|v| !v.is_empty()) {
        return true;
    }
    std::env::var_os("HOME")
        .map(std::path::PathBuf::from)
        .is_some_and(|home| home.join(".kube").join("config").exists())
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
