//! Send (a guarded JSON patch of the container's image) and following the roll-out to done or a diagnosis.
//!
//! The verdict is kubectl's (see `judge.rs`, a port of kubectl's
//! `staging/src/k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go`). A failure is diagnosed only from
//! the pods of the NEW revision — a Deployment's new ReplicaSet (`pod-template-hash`), a StatefulSet's
//! `status.updateRevision` or a DaemonSet's newest ControllerRevision (`controller-revision-hash`) — and never
//! from terminating pods: old pods crash-looping while a fix rolls out are what the fix is for.
//! Long: following a roll-out and diagnosing its failure share the revision and pod reading; kubectl's judgement itself is in judge.rs.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{
    ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet,
};
use k8s_openapi::api::core::v1::{Event, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{ListParams, LogParams, Patch, PatchParams};
use serde_json::json;

use super::judge::{self, Verdict};
use super::machines::{Kind, Workload, WorkloadKind};
use super::{
    ARTIFACT_ANNOTATION, ARTIFACT_IMAGE_ANNOTATION, CONTAINER_ANNOTATION, Cluster, ClusterError,
    status_code,
};

/// Waiting reasons of a new pod's container that meshtop reads as a roll-out going wrong. kubectl's
/// `rollout_status.go` reads none: its viewers judge only the workload's status counts and the
/// Deployment's `ProgressDeadlineExceeded` condition, so `kubectl rollout status` waits through all of these
/// until the progress deadline (or forever, for StatefulSets and DaemonSets). meshtop says earlier, from the
/// new revision's pods, with the kubelet's own reasons: `pkg/kubelet/images/types.go` (ImagePullBackOff,
/// ErrImagePull, InvalidImageName, ErrImageNeverPull), `pkg/kubelet/container/sync_result.go`
/// (CrashLoopBackOff, RunContainerError), `pkg/kubelet/kuberuntime/kuberuntime_container.go`
/// (CreateContainerConfigError, CreateContainerError).
pub const FAILING_REASONS: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RunContainerError",
];

/// Reasons that often go away by themselves (a pull that fails once and succeeds on retry): they fail a
/// roll-out only when they persist.
pub const TRANSIENT_REASONS: &[&str] = &["ErrImagePull"];

/// Back-offs: the kubelet retries each by itself (a container that exits once while its database starts, a
/// Secret created a moment later), and kubectl would go on waiting. Each is shown at once and fails the
/// roll-out only when it persists: a restart count of [`FollowRules::restarts`], or the same reason for
/// [`FollowRules::backoff`], or the progress deadline.
pub const BACKOFF_REASONS: &[&str] = &[
    "CrashLoopBackOff",
    "ImagePullBackOff",
    "CreateContainerConfigError",
];

/// The Deployment controller's default `progressDeadlineSeconds`; the deadline of kinds that have none.
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(600);

/// The label of a Deployment's pods naming their ReplicaSet's template (`pod-template-hash`).
const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The label of StatefulSet and DaemonSet pods naming their ControllerRevision.
const CONTROLLER_REVISION_HASH: &str = "controller-revision-hash";
/// The Deployment controller's revision annotation, on the Deployment and its ReplicaSets.
const REVISION_ANNOTATION: &str = "deployment.kubernetes.io/revision";

/// How many events and log lines a diagnosis carries.
const EVENTS_KEPT: usize = 5;
const LOG_LINES: i64 = 20;
/// How many of a crashing container's last log lines the live line shows.
const SHOWN_LOG_LINES: usize = 3;
/// A transient reason fails only when it was seen on at least this many consecutive polls …
const TRANSIENT_POLLS: u32 = 3;
/// How many times a send re-reads and retries when the guard of a map it creates failed.
const SEND_ATTEMPTS: u32 = 3;

/// How a roll-out is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowRules {
    /// How long without progress before the roll-out reads as failed; None: the workload's own
    /// `spec.progressDeadlineSeconds` (Deployments), else 600 s.
    pub deadline: Option<Duration>,
    /// How often the workload is read.
    pub poll: Duration,
    /// … and for at least this long.
    pub transient_grace: Duration,
    /// A back-off ([`BACKOFF_REASONS`]) fails once a container of a new pod restarted this many times …
    pub restarts: u32,
    /// … or once the same back-off of the same container was seen on two reads this long apart.
    pub backoff: Duration,
}

impl Default for FollowRules {
    fn default() -> FollowRules {
        let backoff = crate::mesh::model::Backoff::default();
        FollowRules {
            deadline: None,
            poll: Duration::from_secs(1),
            transient_grace: Duration::from_secs(30),
            restarts: backoff.restarts,
            backoff: backoff.persists,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutDone {
    pub workload: String,
    pub replicas: i32,
    /// How many times the workload was read until it was done.
    pub polls: u32,
    /// kubectl's closing message ("deployment \"api\" successfully rolled out").
    pub message: String,
    /// The image the template names for the module's container when it was done: someone may have
    /// changed it while the roll-out ran (kubectl, without `--revision`, says done all the same).
    pub image: Option<String>,
}

/// One container of a new pod seen waiting: since when, on how many reads, with which reason.
#[derive(Debug, Clone)]
struct Seen {
    reason: String,
    since: tokio::time::Instant,
    polls: u32,
    /// What was last shown about it (shown again only when it changes).
    shown: String,
}

type Watched = HashMap<(String, String), Seen>;

/// Which pods belong to the revision being rolled out, as the workload names it.
enum NewRevision {
    /// A Deployment: its ReplicaSet with this revision annotation (None: the newest), owned by this uid.
    ReplicaSet {
        revision: Option<String>,
        uid: Option<String>,
    },
    /// A StatefulSet: pods whose `controller-revision-hash` is `status.updateRevision`.
    Label(String),
    /// A DaemonSet: its newest ControllerRevision, owned by this uid.
    NewestControllerRevision { uid: Option<String> },
}

trait Rolls: Kind {
    fn verdict(&self) -> Verdict;
    fn paused(&self) -> bool {
        self.shape().paused
    }
    fn new_revision(&self) -> Option<NewRevision>;
    fn progress_deadline(&self) -> Duration {
        DEFAULT_PROGRESS_DEADLINE
    }
    fn replicas(&self) -> i32 {
        self.shape().replicas
    }
}

fn uid(metadata: &ObjectMeta) -> Option<String> {
    metadata.uid.clone()
}

impl Rolls for Deployment {
    fn verdict(&self) -> Verdict {
        judge::deployment(self)
    }
    fn new_revision(&self) -> Option<NewRevision> {
        Some(NewRevision::ReplicaSet {
            revision: self
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(REVISION_ANNOTATION))
                .cloned(),
            uid: uid(&self.metadata),
        })
    }
    fn progress_deadline(&self) -> Duration {
        self.spec
            .as_ref()
            .and_then(|s| s.progress_deadline_seconds)
            .and_then(|s| u64::try_from(s).ok())
            .map_or(DEFAULT_PROGRESS_DEADLINE, Duration::from_secs)
    }
}

impl Rolls for StatefulSet {
    fn verdict(&self) -> Verdict {
        judge::statefulset(self)
    }
    fn new_revision(&self) -> Option<NewRevision> {
        self.status
            .as_ref()
            .and_then(|s| s.update_revision.clone())
            .filter(|r| !r.is_empty())
            .map(NewRevision::Label)
    }
}

impl Rolls for DaemonSet {
    fn verdict(&self) -> Verdict {
        judge::daemonset(self)
    }
    fn new_revision(&self) -> Option<NewRevision> {
        Some(NewRevision::NewestControllerRevision {
            uid: uid(&self.metadata),
        })
    }
}

/// Is this object controlled by the workload (by uid when known, else by kind and name)?
fn owned_by(metadata: &ObjectMeta, kind: &str, name: &str, uid: Option<&str>) -> bool {
    metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| match uid {
            Some(uid) => o.uid == uid,
            None => o.kind == kind && o.name == name,
        })
}

/// The image the workload's template names for `container`.
fn template_image<K: Kind>(object: &K, container: &str) -> Option<String> {
    let shape = object.shape();
    let spec = shape.template?.spec.as_ref()?;
    spec.containers
        .iter()
        .find(|c| c.name == container)?
        .image
        .clone()
}

/// A rule's duration as a person reads it: `60s`, `0.2s`.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// The last `n` non-empty lines of a log, as one line.
fn last_lines(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

/// One container of a new pod, seen waiting.
#[derive(Clone, Copy)]
struct Sight<'a> {
    pod: &'a str,
    container: &'a str,
    image: &'a str,
    reason: &'a str,
    message: &'a str,
    restarts: i32,
}

fn revision_number(metadata: &ObjectMeta) -> i64 {
    metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(REVISION_ANNOTATION))
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// A named diagnosis for a waiting reason, beside which the raw evidence is always shown.
fn diagnose(reason: &str, image: &str, evidence: &str) -> String {
    if evidence.contains("exec format error") {
        return format!(
            "platform mismatch: {image} was built for another platform than the node's (exec format error)"
        );
    }
    match reason {
        "ImagePullBackOff" | "ErrImagePull" => {
            format!("the node cannot pull {image}")
        }
        "ErrImageNeverPull" => format!(
            "{image} is not on the node and its imagePullPolicy is Never (a kind cluster: was it kind-loaded?)"
        ),
        "InvalidImageName" => format!("{image} is not a valid image name"),
        "CrashLoopBackOff" => "the container keeps exiting".into(),
        "CreateContainerConfigError" => {
            "the container's configuration cannot be resolved (a missing Secret or ConfigMap?)"
                .into()
        }
        "CreateContainerError" => "the runtime cannot create the container".into(),
        "RunContainerError" => "the runtime cannot start the container".into(),
        other => other.to_string(),
    }
}

impl Cluster {
    /// Patch the workload's container image to `to_image` with a JSON patch whose `test` guards the image the
    /// workload was seen running; with `artifact_id`, also stamp it on the pod template.
    pub async fn send(
        &self,
        w: &Workload,
        to_image: &str,
        artifact_id: Option<&str>,
    ) -> Result<(), ClusterError> {
        // Never a guess: a wrong container is another program overwritten.
        if let Some(why) = &w.unknown_container {
            return Err(self.unknown_container(w, why));
        }
        match w.kind {
            WorkloadKind::Deployment => {
                self.send_kind::<Deployment>(w, to_image, artifact_id).await
            }
            WorkloadKind::StatefulSet => {
                self.send_kind::<StatefulSet>(w, to_image, artifact_id)
                    .await
            }
            WorkloadKind::DaemonSet => self.send_kind::<DaemonSet>(w, to_image, artifact_id).await,
        }
    }

    async fn send_kind<K: Kind>(
        &self,
        w: &Workload,
        to_image: &str,
        artifact_id: Option<&str>,
    ) -> Result<(), ClusterError> {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let current = self.call(format!("get {w}"), api.get(&w.name)).await?;
            let patch = self.send_patch(&current, w, to_image, artifact_id)?;
            let patched = self
                .timed(api.patch(&w.name, &PatchParams::default(), &Patch::Json::<()>(patch)))
                .await
                .map_err(|()| self.timeout_error(format!("patch {w}")))?;
            let e = match patched {
                Ok(_) => return Ok(()),
                Err(e) if matches!(status_code(&e), Some(409 | 422)) => e,
                Err(e) => return Err(self.api_error(format!("patch {w}"), e)),
            };
            let running = self
                .timed(api.get(&w.name))
                .await
                .ok()
                .and_then(Result::ok)
                .and_then(|k| template_image(&k, &w.container))
                .unwrap_or_else(|| "(unknown)".into());
            if running != w.image {
                return Err(ClusterError::Conflict {
                    workload: w.to_string(),
                    running,
                    detail: format!("expected {:?} in container {:?}", w.image, w.container),
                });
            }
            // The image is still ours: what failed was the guard of a map we had to create (someone wrote
            // the workload in between). Read it again and retry, bounded.
            if attempt >= SEND_ATTEMPTS {
                return Err(self.api_error(format!("patch {w}"), e));
            }
        }
    }

    /// The JSON patch of a send: `test` the image seen, `replace` it; add the artifact annotation as one key.
    fn send_patch<K: Kind>(
        &self,
        current: &K,
        w: &Workload,
        to_image: &str,
        artifact_id: Option<&str>,
    ) -> Result<json_patch::Patch, ClusterError> {
        let shape = current.shape();
        let template = shape.template;
        let containers = template
            .and_then(|t| t.spec.as_ref())
            .map(|s| s.containers.as_slice())
            .unwrap_or_default();
        let Some(index) = containers.iter().position(|c| c.name == w.container) else {
            return Err(ClusterError::Conflict {
                workload: w.to_string(),
                running: "no container named ".to_string() + &w.container,
                detail: "its containers changed since it was read".into(),
            });
        };
        let image_path = format!("/spec/template/spec/containers/{index}/image");
        let mut ops = vec![
            json!({"op": "test", "path": image_path, "value": w.image}),
            json!({"op": "replace", "path": image_path, "value": to_image}),
        ];
        if let Some(artifact) = artifact_id {
            // One key, never the whole map: annotations others wrote between our GET and our PATCH stay.
            // Where the map (or the template's metadata) is absent it is created empty first, guarded by
            // a `test` of the resourceVersion we read, so an `add` never replaces a map someone just wrote.
            let metadata = template.and_then(|t| t.metadata.as_ref());
            if metadata.and_then(|m| m.annotations.as_ref()).is_none() {
                let resource_version = current.meta().resource_version.clone().unwrap_or_default();
                ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}));
                if metadata.is_none() {
                    ops.push(json!({"op": "add", "path": "/spec/template/metadata", "value": {}}));
                }
                ops.push(json!({"op": "add", "path": "/spec/template/metadata/annotations", "value": {}}));
            }
            for (key, value) in [
                (ARTIFACT_ANNOTATION, artifact),
                (ARTIFACT_IMAGE_ANNOTATION, to_image),
            ] {
                let key = key.replace('~', "~0").replace('/', "~1");
                ops.push(json!({"op": "add", "path": format!("/spec/template/metadata/annotations/{key}"), "value": value}));
            }
        }
        serde_json::from_value(serde_json::Value::Array(ops)).map_err(|e| ClusterError::Config {
            context: Some(self.context.clone()),
            message: format!("cannot build the JSON patch: {e}"),
        })
    }

    /// Follow a roll-out to done, or to a failure carrying its diagnosis (waiting reason, events, log tail).
    /// `on_message` hears kubectl's message each time it changes.
    pub async fn follow_rollout(
        &self,
        w: &Workload,
        rules: FollowRules,
        on_message: &(dyn Fn(&str) + Sync),
    ) -> Result<RolloutDone, ClusterError> {
        match w.kind {
            WorkloadKind::Deployment => self.follow_kind::<Deployment>(w, rules, on_message).await,
            WorkloadKind::StatefulSet => {
                self.follow_kind::<StatefulSet>(w, rules, on_message).await
            }
            WorkloadKind::DaemonSet => self.follow_kind::<DaemonSet>(w, rules, on_message).await,
        }
    }

    async fn follow_kind<K: Rolls>(
        &self,
        w: &Workload,
        rules: FollowRules,
        on_message: &(dyn Fn(&str) + Sync),
    ) -> Result<RolloutDone, ClusterError> {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut last_progress = tokio::time::Instant::now();
        let mut last_message = String::new();
        let mut watched = Watched::new();
        let mut polls = 0;
        loop {
            polls += 1;
            let object = self.call(format!("get {w}"), api.get(&w.name)).await?;
            // A paused Deployment is only synced (`pkg/controller/deployment/deployment_controller.go`
            // syncDeployment → `sync.go` sync): no new ReplicaSet until it is resumed. kubectl waits for
            // ever; a person wants to know now.
            if object.paused() {
                return Err(self.paused(w));
            }
            let verdict = object.verdict();
            if verdict.message() != last_message {
                last_message = verdict.message().to_string();
                last_progress = tokio::time::Instant::now();
                on_message(&last_message);
            }
            match verdict {
                Verdict::Done(message) => {
                    return Ok(RolloutDone {
                        workload: w.to_string(),
                        replicas: object.replicas(),
                        polls,
                        message,
                        image: template_image(&object, &w.container),
                    });
                }
                Verdict::OnDelete(message) => {
                    return Err(ClusterError::OnDelete {
                        workload: format!("{w} in {}", self.place()),
                        message,
                    });
                }
                Verdict::Failed(message) => {
                    return Err(self.failed_verdict(w, &object, message, rules).await);
                }
                Verdict::Waiting(message) => {
                    // Before the controller observed our patch, "the new revision" is still the old one.
                    let observed =
                        object.shape().observed_generation >= object.meta().generation.unwrap_or(0);
                    if observed
                        && let Some(revision) = object.new_revision()
                        && let Some(failure) = self
                            .failing_pod(w, &revision, &mut watched, rules, Some(on_message))
                            .await?
                    {
                        return Err(failure);
                    }
                    let deadline = rules.deadline.unwrap_or_else(|| object.progress_deadline());
                    if last_progress.elapsed() >= deadline {
                        let events = self.events_of(w.kind.as_str(), &w.name).await;
                        let reason =
                            format!("no progress within {}s: {message}", deadline.as_secs());
                        return Err(self.failed(w, reason, None, events, None));
                    }
                }
            }
            tokio::time::sleep(rules.poll).await;
        }
    }

    /// kubectl gave up (the progress deadline): its message, with the new pods' evidence when there is.
    async fn failed_verdict<K: Rolls>(
        &self,
        w: &Workload,
        object: &K,
        message: String,
        rules: FollowRules,
    ) -> ClusterError {
        let evidence = match object.new_revision() {
            Some(revision) => self
                .failing_pod(w, &revision, &mut Watched::new(), rules, None)
                .await
                .ok()
                .flatten(),
            None => None,
        };
        let mut failure =
            evidence.unwrap_or_else(|| self.failed(w, String::new(), None, Vec::new(), None));
        if let ClusterError::RolloutFailed { reason, events, .. } = &mut failure {
            *reason = if reason.is_empty() {
                message
            } else {
                format!("{message}; {reason}")
            };
            if events.is_empty() {
                *events = self.events_of(w.kind.as_str(), &w.name).await;
            }
        }
        failure
    }

    /// The refusal to send to a workload whose module container meshtop cannot tell.
    pub fn unknown_container(&self, w: &Workload, why: &str) -> ClusterError {
        ClusterError::UnknownContainer {
            workload: format!("{w} in {}", self.place()),
            module: w.module.clone(),
            why: format!(
                "{why} (kubectl annotate {}/{} -n {} {CONTAINER_ANNOTATION}=<container>)",
                w.kind.as_str().to_lowercase(),
                w.name,
                self.namespace
            ),
        }
    }

    fn paused(&self, w: &Workload) -> ClusterError {
        ClusterError::Paused {
            workload: format!("{w} in {}", self.place()),
            resume: format!(
                "kubectl rollout resume {}/{} -n {}",
                w.kind.as_str().to_lowercase(),
                w.name,
                self.namespace
            ),
        }
    }

    fn failed(
        &self,
        w: &Workload,
        reason: String,
        waiting: Option<String>,
        events: Vec<String>,
        log_tail: Option<String>,
    ) -> ClusterError {
        ClusterError::RolloutFailed {
            workload: format!("{w} in {}", self.place()),
            reason,
            waiting,
            events,
            log_tail,
        }
    }

    /// The label selecting the pods of the revision being rolled out, when it exists yet.
    async fn new_revision_label(
        &self,
        w: &Workload,
        revision: &NewRevision,
    ) -> Result<Option<(&'static str, String)>, ClusterError> {
        let Some(selector) = &w.selector else {
            return Ok(None);
        };
        let params = ListParams::default().labels(selector);
        match revision {
            NewRevision::Label(value) => Ok(Some((CONTROLLER_REVISION_HASH, value.clone()))),
            NewRevision::ReplicaSet { revision, uid } => {
                let sets = self.list_all::<ReplicaSet>(&params).await?;
                let owned = sets
                    .iter()
                    .filter(|rs| owned_by(&rs.metadata, "Deployment", &w.name, uid.as_deref()));
                let new = match revision {
                    Some(r) => owned
                        .filter(|rs| {
                            rs.metadata
                                .annotations
                                .as_ref()
                                .and_then(|a| a.get(REVISION_ANNOTATION))
                                == Some(r)
                        })
                        .max_by_key(|rs| revision_number(&rs.metadata)),
                    None => owned.max_by_key(|rs| revision_number(&rs.metadata)),
                };
                Ok(new
                    .and_then(|rs| rs.metadata.labels.as_ref()?.get(POD_TEMPLATE_HASH).cloned())
                    .map(|hash| (POD_TEMPLATE_HASH, hash)))
            }
            NewRevision::NewestControllerRevision { uid } => {
                let revisions = self.list_all::<ControllerRevision>(&params).await?;
                let newest = revisions
                    .iter()
                    .filter(|r| owned_by(&r.metadata, "DaemonSet", &w.name, uid.as_deref()))
                    .max_by_key(|r| r.revision);
                Ok(newest.and_then(|r| {
                    let hash = r
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(CONTROLLER_REVISION_HASH).cloned())
                        .or_else(|| {
                            r.metadata
                                .name
                                .as_deref()?
                                .strip_prefix(&format!("{}-", w.name))
                                .map(str::to_string)
                        })?;
                    Some((CONTROLLER_REVISION_HASH, hash))
                }))
            }
        }
    }

    /// The first container of a new-revision pod that waits for a reason that fails the roll-out: a
    /// terminal one at once, a transient one ([`TRANSIENT_REASONS`]) once it persisted, a back-off
    /// ([`BACKOFF_REASONS`]) once it persisted by the rules (shown through `show` meanwhile). Without
    /// `show`, any reason is reported at once: the roll-out already failed and this is its evidence.
    async fn failing_pod(
        &self,
        w: &Workload,
        revision: &NewRevision,
        watched: &mut Watched,
        rules: FollowRules,
        show: Option<&(dyn Fn(&str) + Sync)>,
    ) -> Result<Option<ClusterError>, ClusterError> {
        // The diagnosis is best effort (kubectl reads no pod at all): a role that cannot list
        // ReplicaSets, ControllerRevisions or pods still gets kubectl's verdict, only without the reasons.
        let label = match self.new_revision_label(w, revision).await {
            Ok(label) => label,
            Err(e) => {
                tracing::warn!("cannot tell the new revision of {w}: {e}");
                None
            }
        };
        let (Some(selector), Some((label, value))) = (&w.selector, label) else {
            return Ok(None);
        };
        let selected = ListParams::default().labels(&format!("{selector},{label}={value}"));
        let pods = match self.list_all::<Pod>(&selected).await {
            Ok(pods) => pods,
            Err(e) => {
                tracing::warn!("cannot list the pods of {w}: {e}");
                return Ok(None);
            }
        };
        let mut seen_now = Watched::new();
        for pod in pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
        {
            let Some(pod_name) = pod.metadata.name.as_deref() else {
                continue;
            };
            let status = pod.status.as_ref();
            let statuses = status
                .and_then(|s| s.container_statuses.as_ref())
                .into_iter()
                .flatten();
            let inits = status
                .and_then(|s| s.init_container_statuses.as_ref())
                .into_iter()
                .flatten();
            for cs in inits.chain(statuses) {
                let Some(waiting) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) else {
                    continue;
                };
                let Some(reason) = waiting
                    .reason
                    .as_deref()
                    .filter(|r| FAILING_REASONS.contains(r))
                else {
                    continue;
                };
                let key = (pod_name.to_string(), cs.name.clone());
                let seen = match watched.get(&key).filter(|s| s.reason == reason) {
                    Some(s) => Seen {
                        polls: s.polls + 1,
                        ..s.clone()
                    },
                    None => Seen {
                        reason: reason.to_string(),
                        since: tokio::time::Instant::now(),
                        polls: 1,
                        shown: String::new(),
                    },
                };
                let sight = Sight {
                    pod: pod_name,
                    container: &cs.name,
                    image: &cs.image,
                    reason,
                    message: waiting.message.as_deref().unwrap_or_default(),
                    restarts: cs.restart_count,
                };
                let seen = match show {
                    None => None,
                    Some(show) => self.still_waiting(&sight, seen, rules, show).await,
                };
                match seen {
                    Some(seen) => {
                        seen_now.insert(key, seen);
                    }
                    None => {
                        let failure = self.waiting_failure(w, &sight, rules, show.is_some());
                        return Ok(Some(failure.await));
                    }
                }
            }
        }
        // A reason that went away starts over.
        *watched = seen_now;
        Ok(None)
    }

    /// A container seen waiting that does not fail the roll-out yet: how it is watched from now on (a
    /// back-off is shown, once per reason and restart count). None: it fails the roll-out now.
    async fn still_waiting(
        &self,
        sight: &Sight<'_>,
        mut seen: Seen,
        rules: FollowRules,
        show: &(dyn Fn(&str) + Sync),
    ) -> Option<Seen> {
        let lasted = seen.polls >= 2 && seen.since.elapsed() >= rules.backoff;
        if TRANSIENT_REASONS.contains(&sight.reason) {
            let lasted =
                seen.polls >= TRANSIENT_POLLS && seen.since.elapsed() >= rules.transient_grace;
            return (!lasted).then_some(seen);
        }
        if !BACKOFF_REASONS.contains(&sight.reason)
            || sight.restarts >= i32::try_from(rules.restarts).unwrap_or(i32::MAX)
            || lasted
        {
            return None;
        }
        let key = format!("{}/{}", sight.reason, sight.restarts);
        if seen.shown != key {
            seen.shown = key;
            let said = if sight.reason == "CrashLoopBackOff" {
                self.log_tail(sight.pod, sight.container, true)
                    .await
                    .map(|tail| format!("last log: {}", last_lines(&tail, SHOWN_LOG_LINES)))
            } else {
                Some(sight.message.to_string()).filter(|m| !m.is_empty())
            };
            show(&format!(
                "pod {} container {}: {}, {} restart(s); fails the send at {} restarts or after {} of it{}",
                sight.pod,
                sight.container,
                sight.reason,
                sight.restarts,
                rules.restarts,
                seconds(rules.backoff),
                said.map(|s| format!("; {s}")).unwrap_or_default()
            ));
        }
        Some(seen)
    }

    /// The roll-out's failure for a container that waits: the named diagnosis with its evidence.
    async fn waiting_failure(
        &self,
        w: &Workload,
        sight: &Sight<'_>,
        rules: FollowRules,
        judged: bool,
    ) -> ClusterError {
        let Sight {
            pod,
            container,
            image,
            reason,
            message,
            restarts,
        } = *sight;
        let waiting_text = if message.is_empty() {
            reason.to_string()
        } else {
            format!("{reason}: {message}")
        };
        let events = self.events_of("Pod", pod).await;
        let log_tail = self
            .log_tail(
                pod,
                container,
                matches!(reason, "CrashLoopBackOff" | "RunContainerError"),
            )
            .await;
        let evidence = format!(
            "{message} {} {}",
            events.join(" "),
            log_tail.as_deref().unwrap_or_default()
        );
        let named = diagnose(reason, image, &evidence);
        let persisted = if !judged || !BACKOFF_REASONS.contains(&reason) {
            String::new()
        } else if restarts >= i32::try_from(rules.restarts).unwrap_or(i32::MAX) {
            format!(" (restarted {restarts} times)")
        } else {
            format!(" (for {}, {restarts} restart(s))", seconds(rules.backoff))
        };
        let text = format!("{reason} in pod {pod} container {container}: {named}{persisted}");
        self.failed(w, text, Some(waiting_text), events, log_tail)
    }

    /// The last events about an object (matched by kind and name), as `Reason: message`, oldest first,
    /// ordered as `kubectl describe` orders them: lastTimestamp, else eventTime, else firstTimestamp
    /// (events.k8s.io-era recorders set only eventTime). Best effort: a failing call gives none.
    pub(super) async fn events_of(&self, kind: &str, object: &str) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = ListParams::default().fields(&format!(
            "involvedObject.kind={kind},involvedObject.name={object}"
        ));
        let Ok(Ok(list)) = self.timed(api.list(&params)).await else {
            return Vec::new();
        };
        let mut events: Vec<Event> = list
            .items
            .into_iter()
            .filter(|e| {
                e.involved_object.name.as_deref() == Some(object)
                    && e.involved_object.kind.as_deref().is_none_or(|k| k == kind)
            })
            .collect();
        events.sort_by_key(|e| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or(e.event_time.as_ref().map(|t| t.0))
                .or(e.first_timestamp.as_ref().map(|t| t.0))
                .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
        });
        let start = events.len().saturating_sub(EVENTS_KEPT);
        events[start..]
            .iter()
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.as_deref().unwrap_or("Event"),
                    e.message.as_deref().unwrap_or("")
                )
            })
            .collect()
    }

    async fn log_tail(&self, pod: &str, container: &str, previous: bool) -> Option<String> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = LogParams {
            container: Some(container.to_string()),
            tail_lines: Some(LOG_LINES),
            previous,
            ..LogParams::default()
        };
        self.timed(api.logs(pod, &params))
            .await
            .ok()?
            .ok()
            .filter(|l| !l.trim().is_empty())
    }
}
