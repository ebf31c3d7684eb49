//! The controllers and the kubelet of the Kubernetes API test server, as state changes over time.
//!
//! They behave as the real ones, read from their sources, one step at a time (a step runs after each read
//! of the workload, while it is watched, and on the clock of `KubeApi::start_clock`; what a client reads
//! always lags what it wrote by at least one step). What is modelled and what is not: `tests/README.md`.
//! - the Deployment and ReplicaSet controllers (`kube_deployment.rs`: rolling.go's maxSurge/maxUnavailable
//!   arithmetic, minReadySeconds, the Available and Progressing conditions of sync.go and progress.go);
//! - the StatefulSet controller (`pkg/controller/statefulset/stateful_set_control.go`): a ControllerRevision
//!   per template, `status.updateRevision`, pods replaced one at a time from the highest ordinal down to
//!   the partition, waiting for each to be Running and Ready, `currentRevision` becoming `updateRevision`
//!   when every pod is updated and ready, nothing replaced under OnDelete;
//! - the DaemonSet controller (`pkg/controller/daemon/update.go`): a ControllerRevision per template, old
//!   pods deleted one at a time (maxUnavailable 1) and replaced at the new hash, nothing under OnDelete;
//! - the kubelet (`pkg/kubelet/images/image_manager.go`, `pkg/kubelet/kuberuntime/kuberuntime_manager.go`):
//!   a new container waits in ContainerCreating, then runs, or fails to pull (ErrImagePull, then
//!   ImagePullBackOff while backing off), or crash-loops (CrashLoopBackOff), with its events; a deleted pod
//!   stays listed with `deletionTimestamp` until it is gone (graceful termination).
//!
//! Tests only; never in the shipped binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::kube_objects::labels_match;

#[path = "kube_deployment.rs"]
mod deployment;
pub use deployment::condition;

pub type Key = (String, String, String); // (resource, namespace, name); namespaces have namespace ""

/// What the kubelet makes of a container running an image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fate {
    /// Pulls, starts, becomes ready.
    Runs,
    /// The pull fails: ErrImagePull, then ImagePullBackOff from the next sync on.
    PullFails(String),
    /// The pull keeps failing without the kubelet backing off yet (ErrImagePull on every sync).
    PullKeepsFailing(String),
    /// The pull fails once (ErrImagePull), then succeeds.
    PullFailsOnce(String),
    /// The container starts and exits, again after every back-off: CrashLoopBackOff, with this log, its
    /// restartCount growing by one per restart and the back-off doubling (10 s, 20 s, … 300 s).
    Crashes(String),
    /// The container exits once with this log (a database not ready yet): CrashLoopBackOff with
    /// restartCount 1 for the first back-off (10 s), then it runs and becomes ready.
    CrashesOnce(String),
    /// The container waits with this reason and message (e.g. CreateContainerConfigError).
    Waits(String, String),
    /// The pod is never scheduled (no node has room: the scheduler's `FailedScheduling`, the pod Pending
    /// with `PodScheduled=False/Unschedulable` and no container statuses): the pods it was to replace keep
    /// running what they ran while the template names the new image.
    Unschedulable(String),
}

/// The container runtime behind the kubelet, which decides the form of a container's imageID (the
/// kubelet reports the runtime's `ImageRef` as is: `pkg/kubelet/kuberuntime/kuberuntime_container.go`
/// toKubeContainerStatus).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Runtime {
    /// Docker through dockershim / cri-dockerd: `docker-pullable://<repo>@sha256:<manifest>` for a
    /// pulled image (`DockerPullablePrefix`), `docker://sha256:<image id>` for one never pulled.
    #[default]
    Docker,
    /// containerd's CRI: `<repo>@sha256:<manifest>` for a pulled image, the bare image id
    /// `sha256:<config digest>` for one that has no repo digest (imported: `kind load`, `ctr import`).
    Containerd,
}

/// The repo digest a runtime reports for a pulled image (`<repo>@<digest>`): for an image of a
/// registry of the test world (on loopback: the real registry the tests push to), the digest of the
/// manifest that registry serves for it when the pod starts, as containerd's resolver fetches it
/// (`pkg/cri/server/image_pull.go`: the repo digest is the resolved manifest's, whatever the spec
/// names; `pkg/cri/server/container_status.go`: the container's ImageRef is that repo digest), never
/// derived from the spec's text. An image no registry of the test world can serve (`demo/api:1`,
/// or one never pushed) keeps the digest it was named by, else one made up for its tag.
fn pulled(image: &str) -> String {
    if let Some(resolved) = served_by_loopback_registry(image) {
        return resolved;
    }
    if image.contains("@sha256:") {
        return image.to_string();
    }
    let repository = match image.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => image,
    };
    format!(
        "{repository}@sha256:{}",
        hex::encode(Sha256::digest(image.as_bytes()))
    )
}

/// `<host>/<path>@<digest>` for `image` when its host is a registry on loopback (`127.0.0.1:…`,
/// `localhost:…`) that serves a manifest for it: asked as a runtime's pull asks, `HEAD
/// /v2/<path>/manifests/<tag or digest>` accepting every manifest and index type, the digest from
/// `Docker-Content-Digest` (distribution's `registry/handlers/manifests.go`).
fn served_by_loopback_registry(image: &str) -> Option<String> {
    use std::io::{Read, Write};
    let (host, rest) = image.split_once('/')?;
    if !(host.starts_with("127.0.0.1:") || host.starts_with("localhost:")) {
        return None;
    }
    let (path, reference) = match rest.split_once('@') {
        Some((path, digest)) => (path, digest),
        None => match rest.rsplit_once(':') {
            Some((path, tag)) if !tag.contains('/') => (path, tag),
            _ => (rest, "latest"),
        },
    };
    let mut stream = std::net::TcpStream::connect(host).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .ok()?;
    write!(
        stream,
        "HEAD /v2/{path}/manifests/{reference} HTTP/1.1\r\nHost: {host}\r\n\
         Accept: application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, \
         application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json\r\n\
         Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let mut lines = answer.lines();
    let status = lines.next()?;
    if status.split_whitespace().nth(1) != Some("200") {
        return None;
    }
    let digest = lines.take_while(|l| !l.is_empty()).find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.trim()
            .eq_ignore_ascii_case("docker-content-digest")
            .then(|| value.trim().to_string())
    })?;
    Some(format!("{host}/{path}@{digest}"))
}

#[derive(Default)]
pub struct Cluster {
    pub objects: BTreeMap<Key, Value>,
    pub resource_version: u64,
    /// What each container printed (by container id), and the wake-up of the follows reading it.
    pub logs: ContainerLogs,
    /// Image prefix → fate of containers running it (first match wins; default: runs).
    pub fates: Vec<(String, Fate)>,
    /// Workloads whose progress deadline has passed (the test's clock).
    pub deadline_passed: HashSet<Key>,
    /// Workloads whose controller has taken over their pods.
    adopted: HashSet<Key>,
    /// DaemonSet → how many nodes it should run on.
    nodes: HashMap<Key, i64>,
    /// (pod, container) in CrashLoopBackOff → (the step its back-off ends, the back-off in steps).
    backoff: HashMap<(Key, String), (u64, u64)>,
    /// Someone else's `kubectl set image`: once the workload's container runs `when`, `after` steps later
    /// its template is set to `then` (workload, container, when, then, after, the step `when` was seen).
    pub image_changes: Vec<(Key, String, String, String, u64, Option<u64>)>,
    /// Pod → the step at which it was marked for deletion.
    terminating: HashMap<Key, u64>,
    /// Deployment → after each of its controller's steps, (pods the ReplicaSets ask for, available,
    /// updated): how a roll-out went, for tests to check its arithmetic.
    pub trace: HashMap<Key, Vec<(i64, i64, i64)>>,
    /// The runtime whose imageID form the kubelet reports.
    pub runtime: Runtime,
    /// Images on the nodes that were loaded, not pulled (image → its id, `sha256:…`): reported by id.
    pub loaded: HashMap<String, String>,
    step: u64,
    serial: u64,
}

/// What the containers printed, by container id (`containerd://…`, a new one per run of a
/// container), each line with the time the kubelet took it in nanoseconds of the test's clock (the
/// CRI log file keeps one timestamped entry per line: `pkg/kubelet/kuberuntime/logs/logs.go`). A
/// container's log outlives its run, so the run before a restart is still read (`previous=true`).
#[derive(Default)]
pub struct ContainerLogs {
    pub lines: HashMap<String, Vec<(i64, String)>>,
    /// Woken on every change of a log or of an object: a follow reads on, or ends.
    pub changed: std::sync::Arc<tokio::sync::Notify>,
    /// The newest line's time, so that every line has its own (real logs are nanosecond-stamped).
    newest_ns: i64,
}

impl Cluster {
    pub fn bump(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    fn serial(&mut self) -> u64 {
        self.serial += 1;
        self.serial
    }

    pub fn uid(&mut self) -> String {
        format!("00000000-0000-4000-8000-{:012x}", self.serial())
    }

    /// The test's clock in seconds since the epoch: one second per controller step.
    fn clock_seconds(&self) -> i64 {
        1_767_225_600 + self.step as i64
    }

    /// A timestamp of the test's clock.
    pub fn now(&self) -> String {
        let at = chrono::DateTime::from_timestamp(self.clock_seconds(), 0).unwrap();
        at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
    }

    /// Store a new or changed object under a new resourceVersion.
    pub fn store(&mut self, key: Key, mut object: Value) {
        object["metadata"]["resourceVersion"] = json!(self.bump());
        self.objects.insert(key, object);
        self.logs.changed.notify_waiters();
    }

    /// A new container id, as the runtime gives one to every run of a container.
    pub fn new_container_id(&mut self) -> String {
        let n = self.serial();
        format!(
            "containerd://{}",
            hex::encode(Sha256::digest(format!("container {n}").as_bytes()))
        )
    }

    /// The container `id` prints `text` (one entry per line), now on the test's clock.
    pub fn print(&mut self, id: &str, text: &str) {
        for line in text.lines() {
            let at = (self.clock_seconds() * 1_000_000_000).max(self.logs.newest_ns + 1);
            self.logs.newest_ns = at;
            self.logs
                .lines
                .entry(id.to_string())
                .or_default()
                .push((at, line.to_string()));
        }
        self.logs.changed.notify_waiters();
    }

    /// The test's clock now, in nanoseconds (what `sinceSeconds` counts back from).
    pub fn now_ns(&self) -> i64 {
        self.clock_seconds() * 1_000_000_000
    }

    /// A container status made running as a new run of the container (its own container id).
    pub fn start_container(&mut self, cs: &mut Value) {
        cs["state"] = json!({"running": {"startedAt": self.now()}});
        cs["containerID"] = json!(self.new_container_id());
        cs["ready"] = json!(true);
        cs["started"] = json!(true);
    }

    /// The imageID the kubelet reports for a container running `image`.
    pub fn image_id(&self, image: &str) -> String {
        match (self.runtime, self.loaded.get(image)) {
            (Runtime::Docker, Some(id)) => format!("docker://{id}"),
            (Runtime::Containerd, Some(id)) => id.clone(),
            (Runtime::Docker, None) => format!("docker-pullable://{}", pulled(image)),
            (Runtime::Containerd, None) => pulled(image),
        }
    }

    fn fate_of(&self, image: &str) -> Fate {
        self.fates
            .iter()
            .find(|(prefix, _)| image.starts_with(prefix.as_str()))
            .map(|(_, f)| f.clone())
            .unwrap_or(Fate::Runs)
    }

    pub fn event(&mut self, namespace: &str, kind: &str, name: &str, reason: &str, message: &str) {
        let n = self.serial();
        let now = self.now();
        let event = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": format!("{name}.{n:x}"), "namespace": namespace},
            "involvedObject": {"kind": kind, "name": name, "namespace": namespace},
            "reason": reason, "message": message, "type": if reason == "Started" || reason == "Pulled" { "Normal" } else { "Warning" },
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "source": {"component": "kubelet"}});
        self.store(
            ("events".into(), namespace.into(), format!("{name}.{n:x}")),
            event,
        );
    }

    /// Pods of `namespace` whose labels the selector's matchLabels match.
    fn selected(&self, namespace: &str, selector: &Value) -> Vec<Key> {
        self.objects
            .iter()
            .filter(|((r, ns, _), pod)| {
                r == "pods" && ns == namespace && labels_match(selector, &pod["metadata"]["labels"])
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    fn active(&self, pods: &[Key]) -> Vec<Key> {
        pods.iter()
            .filter(|k| self.objects[*k]["metadata"]["deletionTimestamp"].is_null())
            .cloned()
            .collect()
    }

    fn label(&self, pod: &Key, label: &str) -> Option<String> {
        self.objects[pod]["metadata"]["labels"][label]
            .as_str()
            .map(str::to_string)
    }

    /// One step of the controller of this workload (and of the kubelet for its pods).
    pub fn reconcile(&mut self, key: &Key) {
        if !self.objects.contains_key(key) {
            return;
        }
        self.step += 1;
        self.adopt(key);
        self.someone_sets_images(key);
        self.finish_terminations(key);
        match key.0.as_str() {
            "deployments" => self.deployment_step(key),
            "statefulsets" => self.statefulset_step(key),
            "daemonsets" => self.daemonset_step(key),
            _ => {}
        }
    }

    /// Someone else's `kubectl set image` on this workload, when its time has come: a spec change, so a
    /// new generation (`pkg/registry/apps/deployment/strategy.go` PrepareForUpdate).
    fn someone_sets_images(&mut self, key: &Key) {
        let step = self.step;
        let mut changes = std::mem::take(&mut self.image_changes);
        for (workload, container, when, then, after, seen) in &mut changes {
            if workload != key {
                continue;
            }
            let mut object = self.objects[key].clone();
            let containers = object["spec"]["template"]["spec"]["containers"]
                .as_array_mut()
                .unwrap();
            let Some(c) = containers
                .iter_mut()
                .find(|c| c["name"] == json!(container))
            else {
                continue;
            };
            if seen.is_none() && c["image"] == json!(when) {
                *seen = Some(step);
            }
            if seen.is_some_and(|at| step >= at + *after) && c["image"] == json!(when) {
                c["image"] = json!(then);
                let generation = object["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
                object["metadata"]["generation"] = json!(generation);
                self.store(key.clone(), object);
            }
        }
        self.image_changes = changes;
    }

    // ---- revisions and pods ----

    /// The hash of a pod template, as `controller.ComputeHash` hashes one (a stable digest of the
    /// template; fnv there, sha256 here: only equality matters).
    pub fn template_hash(template: &Value) -> String {
        let digest = Sha256::digest(template.to_string().as_bytes());
        hex::encode(digest)[..10].to_string()
    }

    fn owner(workload: &Value) -> Value {
        json!([{"apiVersion": "apps/v1", "kind": workload["kind"], "name": workload["metadata"]["name"],
            "uid": workload["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}])
    }

    /// The label a pod of this revision carries: (key, value).
    fn revision_label(resource: &str, name: &str, hash: &str) -> (&'static str, String) {
        match resource {
            "deployments" => ("pod-template-hash", hash.to_string()),
            // StatefulSet pods carry the revision's name (`apps.StatefulSetRevisionLabel`)...
            "statefulsets" => ("controller-revision-hash", format!("{name}-{hash}")),
            // ... DaemonSet pods its hash (`apps.DefaultDaemonSetUniqueLabelKey`).
            _ => ("controller-revision-hash", hash.to_string()),
        }
    }

    /// Create the ReplicaSet or ControllerRevision of the workload's current template, if absent; its
    /// revision number.
    fn ensure_revision(&mut self, key: &Key) -> i64 {
        let workload = self.objects[key].clone();
        let (resource, ns, name) = key;
        let template = &workload["spec"]["template"];
        let hash = Self::template_hash(template);
        let owned =
            |o: &Value| o["metadata"]["ownerReferences"][0]["uid"] == workload["metadata"]["uid"];
        let (child_resource, revision_of): (&str, fn(&Value) -> i64) = if resource == "deployments"
        {
            ("replicasets", |o| {
                o["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
                    .as_str()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0)
            })
        } else {
            ("controllerrevisions", |o| {
                o["revision"].as_i64().unwrap_or(0)
            })
        };
        let child_name = format!("{name}-{hash}");
        let children: Vec<&Value> = self
            .objects
            .iter()
            .filter(|((r, n, _), o)| r == child_resource && n == ns && owned(o))
            .map(|(_, o)| o)
            .collect();
        let max = children.iter().map(|o| revision_of(o)).max().unwrap_or(0);
        if let Some(existing) =
            self.objects
                .get(&(child_resource.into(), ns.clone(), child_name.clone()))
        {
            let revision = revision_of(existing);
            if resource == "deployments" && revision < max {
                // A rollback to an older template: the Deployment controller gives its ReplicaSet the
                // next revision (`sync.go` getNewReplicaSet).
                let mut rs = existing.clone();
                rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] =
                    json!((max + 1).to_string());
                self.store((child_resource.into(), ns.clone(), child_name), rs);
                return max + 1;
            }
            return revision;
        }
        let revision = max + 1;
        let (label, value) = Self::revision_label(resource, name, &hash);
        let mut labels = template["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        let uid = self.uid();
        let child = if resource == "deployments" {
            labels[label] = json!(value);
            let mut rs_template = template.clone();
            rs_template["metadata"]["labels"] = labels.clone();
            let mut selector = workload["spec"]["selector"].clone();
            selector["matchLabels"][label] = json!(value);
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": child_name, "namespace": ns, "uid": uid, "labels": labels,
                    "annotations": {"deployment.kubernetes.io/revision": revision.to_string()},
                    "ownerReferences": Self::owner(&workload)},
                "spec": {"replicas": 0, "selector": selector, "template": rs_template},
                "status": {"replicas": 0}})
        } else {
            labels["controller-revision-hash"] = json!(hash);
            json!({"apiVersion": "apps/v1", "kind": "ControllerRevision",
                "metadata": {"name": child_name, "namespace": ns, "uid": uid, "labels": labels,
                    "ownerReferences": Self::owner(&workload)},
                "data": {"spec": {"template": template}}, "revision": revision})
        };
        self.store((child_resource.into(), ns.clone(), child_name), child);
        revision
    }

    /// A new pod of the workload's current template, waiting in ContainerCreating.
    fn create_pod(&mut self, key: &Key, pod_name: Option<String>) -> Key {
        let template = self.objects[key]["spec"]["template"].clone();
        let hash = Self::template_hash(&template);
        self.create_pod_of(key, &template, &hash, pod_name)
    }

    /// A new pod of the workload from `template` of the revision `hash` (a ReplicaSet's template, which
    /// carries its pod-template-hash already), waiting in ContainerCreating.
    fn create_pod_of(
        &mut self,
        key: &Key,
        template: &Value,
        hash: &str,
        pod_name: Option<String>,
    ) -> Key {
        let workload = self.objects[key].clone();
        let (resource, ns, name) = key;
        let (label, value) = Self::revision_label(resource, name, hash);
        let mut labels = template["metadata"]["labels"].clone();
        labels[label] = json!(value);
        let pod_name = pod_name.unwrap_or_else(|| {
            let n = self.serial();
            match resource.as_str() {
                "deployments" => format!("{name}-{hash}-{n:05x}"),
                _ => format!("{name}-{n:05x}"),
            }
        });
        let containers = template["spec"]["containers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let statuses: Vec<Value> = containers
            .iter()
            .map(|c| {
                json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": false,
                "restartCount": 0, "started": false,
                "state": {"waiting": {"reason": "ContainerCreating"}}})
            })
            .collect();
        let uid = self.uid();
        let mut metadata = json!({"name": pod_name, "namespace": ns, "uid": uid, "labels": labels,
            "ownerReferences": Self::owner(&workload), "creationTimestamp": self.now()});
        if let Some(annotations) = template["metadata"]["annotations"].as_object() {
            metadata["annotations"] = json!(annotations);
        }
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": template["spec"].clone(),
            "status": {"phase": "Pending", "containerStatuses": statuses}});
        let pod_key: Key = ("pods".into(), ns.clone(), pod_name);
        self.store(pod_key.clone(), pod);
        pod_key
    }

    /// A pod of a workload stored as rolled out: its containers run.
    fn run_now(&mut self, pod_key: &Key) {
        let mut pod = self.objects[pod_key].clone();
        for cs in pod["status"]["containerStatuses"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            let image = cs["image"].as_str().unwrap_or_default().to_string();
            self.start_container(cs);
            cs["imageID"] = json!(self.image_id(&image));
        }
        pod["status"]["phase"] = json!("Running");
        self.store(pod_key.clone(), pod);
    }

    /// The kubelet's next sync of a pod: ContainerCreating → the fate of its image; ErrImagePull → back-off.
    fn kubelet_sync(&mut self, pod_key: &Key) {
        let mut pod = self.objects[pod_key].clone();
        let (_, ns, pod_name) = pod_key;
        let mut events = Vec::new();
        let mut changed = false;
        let mut all_ready = true;
        let statuses = pod["status"]["containerStatuses"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut updated = Vec::new();
        for mut cs in statuses {
            let image = cs["image"].as_str().unwrap_or_default().to_string();
            let container = cs["name"].as_str().unwrap_or_default().to_string();
            let waiting = cs["state"]["waiting"]["reason"]
                .as_str()
                .map(str::to_string);
            let fate = self.fate_of(&image);
            let pulled_id = self.image_id(&image);
            let wait = |reason: &str, message: &str| json!({"waiting": {"reason": reason, "message": message}});
            match (waiting.as_deref(), &fate) {
                (Some("ContainerCreating"), Fate::Runs)
                | (Some("ErrImagePull"), Fate::PullFailsOnce(_)) => {
                    self.start_container(&mut cs);
                    cs["imageID"] = json!(pulled_id);
                    events.push(("Started", format!("Started container {container}")));
                    changed = true;
                }
                (
                    Some("ContainerCreating"),
                    Fate::PullFails(m) | Fate::PullKeepsFailing(m) | Fate::PullFailsOnce(m),
                )
                | (Some("ErrImagePull"), Fate::PullKeepsFailing(m)) => {
                    cs["state"] = wait("ErrImagePull", m);
                    events.push(("Failed", format!("Failed to pull image {image:?}: {m}")));
                    events.push(("Failed", "Error: ErrImagePull".to_string()));
                    changed = true;
                }
                (Some("ErrImagePull"), Fate::PullFails(_)) => {
                    cs["state"] = wait(
                        "ImagePullBackOff",
                        &format!("Back-off pulling image {image:?}"),
                    );
                    events.push(("BackOff", format!("Back-off pulling image {image:?}")));
                    events.push(("Failed", "Error: ImagePullBackOff".to_string()));
                    changed = true;
                }
                (Some("ContainerCreating"), Fate::Crashes(log) | Fate::CrashesOnce(log)) => {
                    cs["imageID"] = json!(pulled_id);
                    self.crash(&mut cs, pod_key, &pod, &mut events, log);
                    changed = true;
                }
                (Some("CrashLoopBackOff"), Fate::Crashes(log) | Fate::CrashesOnce(log))
                    if self
                        .backoff
                        .get(&(pod_key.clone(), container.clone()))
                        .is_some_and(|(until, _)| self.step >= *until) =>
                {
                    if matches!(fate, Fate::CrashesOnce(_)) {
                        // The restart after the back-off runs: restartCount stays what it was.
                        self.backoff.remove(&(pod_key.clone(), container.clone()));
                        self.start_container(&mut cs);
                        events.push(("Started", format!("Started container {container}")));
                    } else {
                        self.crash(&mut cs, pod_key, &pod, &mut events, log);
                    }
                    changed = true;
                }
                (Some("ContainerCreating"), Fate::Unschedulable(message)) => {
                    let message = message.clone();
                    let mut pod = pod.clone();
                    pod["status"] = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled",
                        "status": "False", "reason": "Unschedulable", "message": message,
                        "lastTransitionTime": self.now()}]});
                    self.store(pod_key.clone(), pod);
                    let now = self.now();
                    let n = self.serial();
                    let name = format!("{pod_name}.{n:x}");
                    let event = json!({"apiVersion": "v1", "kind": "Event",
                        "metadata": {"name": name, "namespace": ns},
                        "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": ns},
                        "reason": "FailedScheduling", "message": message, "type": "Warning",
                        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
                        "source": {"component": "default-scheduler"}});
                    self.store(("events".into(), ns.clone(), name), event);
                    return;
                }
                (Some("ContainerCreating"), Fate::Waits(reason, message))
                    if reason != "ContainerCreating" =>
                {
                    cs["state"] = wait(reason, message);
                    events.push(("Failed", format!("Error: {message}")));
                    changed = true;
                }
                _ => {}
            }
            all_ready &= cs["ready"] == json!(true);
            updated.push(cs);
        }
        if !changed {
            return;
        }
        pod["status"]["containerStatuses"] = json!(updated);
        pod["status"]["phase"] = json!(if all_ready { "Running" } else { "Pending" });
        // The Ready condition's lastTransitionTime is when it last changed (minReadySeconds counts from it).
        let ready = if all_ready { "True" } else { "False" };
        let was = deployment::condition(&pod["status"], "Ready").clone();
        let since = if was["status"] == ready && !was["lastTransitionTime"].is_null() {
            was["lastTransitionTime"].clone()
        } else {
            json!(self.now())
        };
        pod["status"]["conditions"] =
            json!([{"type": "Ready", "status": ready, "lastTransitionTime": since}]);
        self.store(pod_key.clone(), pod);
        for (reason, message) in events {
            self.event(ns, "Pod", pod_name, reason, &message);
        }
    }

    /// The container exited (again): the kubelet restarts it after a back-off that starts at 10 s and
    /// doubles up to 300 s (`pkg/kubelet/kubelet.go` backOffPeriod and MaxContainerBackOff;
    /// `pkg/kubelet/kuberuntime/kuberuntime_manager.go` doBackOff says CrashLoopBackOff meanwhile), its
    /// restartCount one more per restart. The restart itself and its exit fall within one step here: a
    /// container that exits at once is never Ready in between. Each run is a container of its own that
    /// printed `log`; the last one's is what `previous=true` reads.
    fn crash(
        &mut self,
        cs: &mut Value,
        pod_key: &Key,
        pod: &Value,
        events: &mut Vec<(&str, String)>,
        log: &str,
    ) {
        let ran = self.new_container_id();
        self.print(&ran, log);
        let (_, ns, pod_name) = pod_key;
        let container = cs["name"].as_str().unwrap_or_default().to_string();
        let key = (pod_key.clone(), container.clone());
        let period = match self.backoff.get(&key) {
            Some((_, period)) => {
                let restarts = cs["restartCount"].as_i64().unwrap_or(0);
                cs["restartCount"] = json!(restarts + 1);
                (period * 2).min(300)
            }
            None => {
                cs["restartCount"] = json!(1);
                10
            }
        };
        self.backoff.insert(key, (self.step + period, period));
        let back_off = format!(
            "back-off {period}s restarting failed container={container} pod={pod_name}_{ns}({})",
            pod["metadata"]["uid"].as_str().unwrap_or_default()
        );
        cs["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message": back_off}});
        let now = self.now();
        cs["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error", "containerID": ran,
            "startedAt": now, "finishedAt": now}});
        if let Some(map) = cs.as_object_mut() {
            // A container waiting to restart has no id of its own (`kubectl get pod -o json` shows none).
            map.remove("containerID");
        }
        cs["ready"] = json!(false);
        cs["started"] = json!(false);
        events.push((
            "BackOff",
            format!("Back-off restarting failed container {container} in pod {pod_name}_{ns}"),
        ));
    }

    pub fn pod_ready(pod: &Value) -> bool {
        let statuses = pod["status"]["containerStatuses"].as_array();
        statuses.is_some_and(|s| !s.is_empty() && s.iter().all(|c| c["ready"] == json!(true)))
    }

    /// Graceful deletion: the pod stays listed with its deletionTimestamp (`pkg/registry/core/pod/strategy.go`
    /// CheckGracefulDelete) until the kubelet confirms it stopped.
    pub fn mark_terminating(&mut self, pod_key: &Key) {
        let mut pod = self.objects[pod_key].clone();
        if !pod["metadata"]["deletionTimestamp"].is_null() {
            return;
        }
        pod["metadata"]["deletionTimestamp"] = json!(self.now());
        pod["metadata"]["deletionGracePeriodSeconds"] = json!(30);
        self.terminating.insert(pod_key.clone(), self.step);
        self.store(pod_key.clone(), pod);
    }

    /// Pods marked for deletion in an earlier step are gone; a StatefulSet recreates its pod under the
    /// same name, at the update revision (under OnDelete too: that is how OnDelete rolls).
    fn finish_terminations(&mut self, key: &Key) {
        let selector = self.objects[key]["spec"]["selector"]["matchLabels"].clone();
        let step = self.step;
        let gone: Vec<Key> = self
            .selected(&key.1, &selector)
            .into_iter()
            .filter(|p| self.terminating.get(p).is_some_and(|s| *s < step))
            .collect();
        for pod in gone {
            self.terminating.remove(&pod);
            self.objects.remove(&pod);
            self.bump();
            if key.0 == "statefulsets" {
                self.create_pod(key, Some(pod.2.clone()));
            } else if key.0 == "daemonsets" {
                self.create_pod(key, None);
            }
        }
    }

    /// The controller takes over a workload stored by a test as already rolled out: the revision of its
    /// template, its pods labelled with it, missing pods created running.
    fn adopt(&mut self, key: &Key) {
        if self.adopted.contains(key) {
            return;
        }
        self.adopted.insert(key.clone());
        let mut workload = self.objects[key].clone();
        if workload["metadata"]["uid"].is_null() {
            workload["metadata"]["uid"] = json!(self.uid());
            self.objects.insert(key.clone(), workload.clone());
        }
        let revision = self.ensure_revision(key);
        let (resource, ns, name) = key;
        let hash = Self::template_hash(&workload["spec"]["template"]);
        let (label, value) = Self::revision_label(resource, name, &hash);
        let selector = workload["spec"]["selector"]["matchLabels"].clone();
        let pods = self.selected(ns, &selector);
        for pod_key in &pods {
            let mut pod = self.objects[pod_key].clone();
            if pod["metadata"]["labels"][label].is_null() {
                pod["metadata"]["labels"][label] = json!(value);
                pod["metadata"]["ownerReferences"] = Self::owner(&workload);
                self.store(pod_key.clone(), pod);
            }
        }
        let wanted = if resource == "daemonsets" {
            let n = workload["status"]["desiredNumberScheduled"]
                .as_i64()
                .unwrap_or(1);
            self.nodes.insert(key.clone(), n);
            n
        } else {
            workload["spec"]["replicas"].as_i64().unwrap_or(1)
        };
        for i in pods.len() as i64..wanted {
            let pod_name = (resource == "statefulsets").then(|| format!("{name}-{i}"));
            let pod_key = self.create_pod(key, pod_name);
            self.run_now(&pod_key);
        }
        let mut workload = self.objects[key].clone();
        if resource == "deployments" {
            workload["metadata"]["annotations"]["deployment.kubernetes.io/revision"] =
                json!(revision.to_string());
            let rs: Key = ("replicasets".into(), ns.clone(), format!("{name}-{hash}"));
            let mut set = self.objects[&rs].clone();
            set["spec"]["replicas"] = json!(wanted);
            self.store(rs, set);
        } else if resource == "statefulsets" {
            workload["status"]["updateRevision"] = json!(value);
            workload["status"]["currentRevision"] = json!(value);
        }
        self.store(key.clone(), workload);
        self.write_status(key);
    }

    // ---- the controllers ----

    fn observe(&mut self, key: &Key) -> bool {
        let workload = &self.objects[key];
        let generation = workload["metadata"]["generation"].as_i64().unwrap_or(1);
        let observed = workload["status"]["observedGeneration"]
            .as_i64()
            .unwrap_or(0);
        if observed >= generation {
            return false;
        }
        let hash = Self::template_hash(&self.objects[key]["spec"]["template"]);
        let child = format!("{}-{hash}", key.2);
        let existed =
            self.objects
                .contains_key(&("replicasets".into(), key.1.clone(), child.clone()));
        let revision = self.ensure_revision(key);
        let mut workload = self.objects[key].clone();
        workload["status"]["observedGeneration"] = json!(generation);
        match key.0.as_str() {
            "deployments" => {
                workload["metadata"]["annotations"]["deployment.kubernetes.io/revision"] =
                    json!(revision.to_string());
                // sync.go getNewReplicaSet: a new ReplicaSet (or one found again, a rollback) is
                // progress; a timed-out condition is replaced.
                let (reason, message) = if existed {
                    (
                        "FoundNewReplicaSet",
                        format!("Found new replica set {child:?}"),
                    )
                } else {
                    (
                        "NewReplicaSetCreated",
                        format!("Created new replica set {child:?}"),
                    )
                };
                let now = self.now();
                deployment::set_condition(
                    &mut workload["status"],
                    "Progressing",
                    "True",
                    reason,
                    &message,
                    &now,
                );
            }
            "statefulsets" => {
                workload["status"]["updateRevision"] = json!(format!("{}-{hash}", key.2));
            }
            _ => {}
        }
        self.store(key.clone(), workload);
        self.write_status(key);
        true
    }

    /// A paused Deployment is only synced (`pkg/controller/deployment/deployment_controller.go`
    /// syncDeployment: `if d.Spec.Paused { return dc.sync(ctx, d, rsList) }`; `sync.go` sync asks
    /// getAllReplicaSetsAndSyncRevision with createIfNotExisted=false): no new ReplicaSet and no pod changes,
    /// the status recalculated (observedGeneration, updatedReplicas of a new ReplicaSet that does not exist),
    /// and `sync.go` checkPausedConditions sets Progressing=Unknown/DeploymentPaused ("Deployment is paused"),
    /// DeploymentResumed once it is resumed — only for a Deployment with a progress deadline
    /// (`deploymentutil.HasProgressDeadline`: set and not MaxInt32; the apiserver defaults it to 600).
    fn paused_step(&mut self, key: &Key) -> bool {
        let mut workload = self.objects[key].clone();
        let paused = workload["spec"]["paused"] == json!(true);
        let condition = deployment::condition(&workload["status"], "Progressing").clone();
        let paused_condition = condition["reason"] == "DeploymentPaused";
        let deadline = workload["spec"]["progressDeadlineSeconds"]
            .as_i64()
            .is_some_and(|seconds| seconds != i64::from(i32::MAX));
        if !deadline
            || condition["reason"] == "ProgressDeadlineExceeded"
            || paused == paused_condition
        {
            // checkPausedConditions never overwrites a timed-out condition.
        } else {
            let (reason, message) = if paused {
                ("DeploymentPaused", "Deployment is paused")
            } else {
                ("DeploymentResumed", "Deployment is resumed")
            };
            let now = self.now();
            deployment::set_condition(
                &mut workload["status"],
                "Progressing",
                "Unknown",
                reason,
                message,
                &now,
            );
        }
        if paused {
            let generation = workload["metadata"]["generation"].clone();
            workload["status"]["observedGeneration"] = generation;
        }
        if self.objects[key] != workload {
            self.store(key.clone(), workload);
        }
        if paused {
            self.write_status(key);
        }
        paused
    }

    fn statefulset_step(&mut self, key: &Key) {
        if self.observe(key) {
            return;
        }
        let workload = self.objects[key].clone();
        let update_revision = workload["status"]["updateRevision"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let strategy = workload["spec"]["updateStrategy"]["type"]
            .as_str()
            .unwrap_or("RollingUpdate");
        let selector = workload["spec"]["selector"]["matchLabels"].clone();
        let mut pods = self.active(&self.selected(&key.1, &selector));
        // Every pod at the update revision goes through the kubelet; the controller waits for each.
        for pod in &pods {
            if self.label(pod, "controller-revision-hash").as_deref()
                == Some(update_revision.as_str())
            {
                self.kubelet_sync(pod);
            }
        }
        let settling = pods.iter().any(|p| !Self::pod_ready(&self.objects[p]))
            || self
                .terminating
                .keys()
                .any(|p| p.1 == key.1 && p.2.starts_with(&format!("{}-", key.2)));
        if strategy == "RollingUpdate" && !settling {
            let partition = workload["spec"]["updateStrategy"]["rollingUpdate"]["partition"]
                .as_i64()
                .unwrap_or(0);
            let ordinal = |k: &Key| {
                k.2.rsplit('-')
                    .next()
                    .and_then(|o| o.parse::<i64>().ok())
                    .unwrap_or(0)
            };
            pods.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));
            if let Some(next) = pods.iter().find(|p| {
                ordinal(p) >= partition
                    && self.label(p, "controller-revision-hash").as_deref()
                        != Some(update_revision.as_str())
            }) {
                let next = next.clone();
                self.mark_terminating(&next);
            }
        }
        self.write_status(key);
    }

    fn daemonset_step(&mut self, key: &Key) {
        if self.observe(key) {
            return;
        }
        let workload = self.objects[key].clone();
        let hash = Self::template_hash(&workload["spec"]["template"]);
        let strategy = workload["spec"]["updateStrategy"]["type"]
            .as_str()
            .unwrap_or("RollingUpdate");
        let selector = workload["spec"]["selector"]["matchLabels"].clone();
        let pods = self.active(&self.selected(&key.1, &selector));
        for pod in &pods {
            if self.label(pod, "controller-revision-hash").as_deref() == Some(hash.as_str()) {
                self.kubelet_sync(pod);
            }
        }
        let unavailable = pods
            .iter()
            .filter(|p| !Self::pod_ready(&self.objects[*p]))
            .count();
        let terminating = self.terminating.keys().any(|p| {
            p.1 == key.1
                && self
                    .objects
                    .get(p)
                    .is_some_and(|o| labels_match(&selector, &o["metadata"]["labels"]))
        });
        if strategy == "RollingUpdate"
            && unavailable == 0
            && !terminating
            && let Some(old) = pods.iter().find(|p| {
                self.label(p, "controller-revision-hash").as_deref() != Some(hash.as_str())
            })
        {
            let old = old.clone();
            self.mark_terminating(&old);
        }
        self.write_status(key);
    }

    /// The status the controller writes from the pods it sees (active pods only: terminating pods are not
    /// counted, `controller.FilterActivePods`).
    pub fn write_status(&mut self, key: &Key) {
        let mut workload = self.objects[key].clone();
        let (resource, ns, name) = key;
        let hash = Self::template_hash(&workload["spec"]["template"]);
        let selector = workload["spec"]["selector"]["matchLabels"].clone();
        let pods = self.active(&self.selected(ns, &selector));
        let ready = pods
            .iter()
            .filter(|p| Self::pod_ready(&self.objects[*p]))
            .count() as i64;
        let total = pods.len() as i64;
        let status = &mut workload["status"];
        match resource.as_str() {
            "deployments" => {
                let _ = (ready, total);
                *status = self.deployment_status(key);
            }
            "statefulsets" => {
                let update = status["updateRevision"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let current = status["currentRevision"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let at = |r: &str| {
                    pods.iter()
                        .filter(|p| self.label(p, "controller-revision-hash").as_deref() == Some(r))
                        .count() as i64
                };
                let (updated, mut current_replicas) = (at(&update), at(&current));
                let replicas = workload["spec"]["replicas"].as_i64().unwrap_or(1);
                let rolling = workload["spec"]["updateStrategy"]["type"]
                    .as_str()
                    .unwrap_or("RollingUpdate")
                    == "RollingUpdate";
                let status = &mut workload["status"];
                if rolling && updated == replicas && ready == replicas {
                    status["currentRevision"] = json!(update);
                    current_replicas = updated;
                }
                status["replicas"] = json!(total);
                status["readyReplicas"] = json!(ready);
                status["availableReplicas"] = json!(ready);
                status["updatedReplicas"] = json!(updated);
                status["currentReplicas"] = json!(current_replicas);
            }
            _ => {
                let updated = pods
                    .iter()
                    .filter(|p| {
                        self.label(p, "controller-revision-hash").as_deref() == Some(hash.as_str())
                    })
                    .count() as i64;
                let desired = self.nodes.get(key).copied().unwrap_or(total);
                status["desiredNumberScheduled"] = json!(desired);
                status["currentNumberScheduled"] = json!(total);
                status["numberMisscheduled"] = json!(0);
                status["updatedNumberScheduled"] = json!(updated);
                status["numberReady"] = json!(ready);
                status["numberAvailable"] = json!(ready);
                status["numberUnavailable"] = json!((desired - ready).max(0));
            }
        }
        let _ = name;
        if self.objects[key] != workload {
            self.store(key.clone(), workload);
        }
    }

    /// Before a patch lands, the controller knows the revision of the template being replaced.
    pub fn before_write(&mut self, key: &Key) {
        if matches!(
            key.0.as_str(),
            "deployments" | "statefulsets" | "daemonsets"
        ) && self.objects.contains_key(key)
        {
            self.adopt(key);
        }
    }
}
