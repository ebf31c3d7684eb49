//! A small Kubernetes API server on loopback for the real `kube` client (and the real `kubectl`):
//! namespaces, apps/v1 workloads with their ReplicaSets and ControllerRevisions, pods, events and pod logs,
//! SelfSubjectAccessReviews. It answers as the apiserver does (`staging/src/k8s.io/apiserver/pkg/endpoints/
//! handlers/patch.go`: a failed JSON-patch `test` is 422, a stale resourceVersion 409; `pkg/registry/apps/
//! deployment/strategy.go` and its siblings: a PATCH of the object never changes its status, a changed spec
//! bumps metadata.generation; `responsewriters/errors.go`: 403 with the RBAC message), and its controllers
//! and kubelet change the state over time (`kube_controllers.rs`). It counts requests per path and has hooks
//! to set state. Tests only; never in the shipped binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Barrier;

use meshtop_backends::cluster::Cluster;

use crate::kube_controllers::{self, Fate, Key, Runtime};
use crate::kube_objects::{field_selector_matches, label_selector_matches, labels_match, query};
use crate::kube_rules::{self, Binding, Identity, Rule};

#[path = "kube_configmaps.rs"]
mod configmaps;
#[path = "kube_logs.rs"]
mod logs;

#[derive(Default)]
struct State {
    cluster: kube_controllers::Cluster,
    requests: HashMap<String, usize>,
    /// Requests by method and what they name (`GET configmaps/…` one object, `GET configmaps` a list).
    verbs: std::collections::BTreeMap<String, usize>,
    statuses: HashMap<u16, usize>,
    /// Bytes of the response bodies whose length was known when sent (every JSON answer; a
    /// streamed log or watch is not counted).
    response_bytes: usize,
    /// Namespace reads still to gather at the barrier (see `sync_next_namespace_reads`).
    gate: Option<(usize, Arc<Barrier>)>,
    /// Lease reads still to gather at their barrier (see `sync_next_lease_reads`).
    lease_gate: Option<(usize, Arc<Barrier>)>,
    /// Namespace patches still to gather at their barrier (see `sync_next_namespace_patches`).
    patch_gate: Option<(usize, Arc<Barrier>)>,
    /// ConfigMap creates still to let through before the next one is held, and its hold (see
    /// `hold_configmap_create_after`).
    create_hold: Option<(usize, Arc<Hold>)>,
    /// The next ConfigMap delete is held (see `hold_next_configmap_delete`).
    delete_hold: Option<Arc<Hold>>,
    /// Every shard a namespace write's record index named while no such ConfigMap existed
    /// (observed, never refused: the apiserver does not know what an annotation names).
    dangling: Vec<String>,
    /// Namespace patches answered 409 (a stale resourceVersion).
    namespace_conflicts: usize,
    /// Who requests are made as, and what RBAC lets them do; None: everything is allowed.
    identity: Option<Identity>,
    /// The next request with a continue token gets 410 Expired (an etcd compaction happened).
    expire_next_continue: bool,
    /// Every resource request the identity was authorized for, and the verdict (see `authorizations`).
    authorizations: Vec<(kube_rules::Attributes, bool)>,
    /// The same since the server started, never reset: the apiserver's audit log of verdicts.
    audit: Vec<(kube_rules::Attributes, bool)>,
    /// The next namespace patch fails as the apiserver fails a write etcd did not take (see
    /// `fail_next_namespace_patch`).
    fail_namespace_patch: bool,
}

/// How long a gate or a hold of the test server waits for what the test promised (the other
/// gathered requests, the held request, its release): past it the wait ends saying what never
/// came, instead of hanging until nextest's limit.
pub const GATE_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// A request held before the server acts on it, until the test releases it.
pub struct Hold {
    /// The request held, as a message names it.
    what: String,
    reached: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl Hold {
    fn new(what: String) -> Hold {
        Hold {
            what,
            reached: tokio::sync::Notify::new(),
            release: tokio::sync::Notify::new(),
        }
    }

    /// Wait until the held request has arrived; panics naming it when it never does.
    pub async fn reached(&self) {
        if tokio::time::timeout(GATE_LIMIT, self.reached.notified())
            .await
            .is_err()
        {
            panic!(
                "{} never reached the API test server within {GATE_LIMIT:?}",
                self.what
            );
        }
    }

    /// Let the held request through.
    pub fn release(&self) {
        self.release.notify_one();
    }

    /// Hold the request until released; a hold never released is answered 500, saying so.
    async fn hold(&self) -> Result<(), Response> {
        self.reached.notify_one();
        tokio::time::timeout(GATE_LIMIT, self.release.notified())
            .await
            .map_err(|_| {
                gate_failed(&format!(
                    "the test never released {} within {GATE_LIMIT:?}",
                    self.what
                ))
            })
    }
}

/// Wait at a gate's barrier for the other requests it gathers; a gate that never fills is
/// answered 500, naming it (the client's error then says what never happened).
async fn gather(barrier: &Barrier, what: &str) -> Result<(), Response> {
    tokio::time::timeout(GATE_LIMIT, barrier.wait())
        .await
        .map(|_| ())
        .map_err(|_| {
            gate_failed(&format!(
                "the other {what} this gate gathers never came within {GATE_LIMIT:?}"
            ))
        })
}

fn gate_failed(message: &str) -> Response {
    eprintln!("API test server: {message}");
    status(500, "InternalError", &format!("API test server: {message}"))
}

pub struct KubeApi {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
    /// The clock that steps every controller on its own (see `start_clock`), when started.
    clock: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.task.abort();
        if let Some(clock) = self.clock.lock().unwrap().take() {
            clock.abort();
        }
    }
}

fn kind_of(resource: &str) -> (&'static str, &'static str) {
    match resource {
        "deployments" => ("apps/v1", "Deployment"),
        "statefulsets" => ("apps/v1", "StatefulSet"),
        "daemonsets" => ("apps/v1", "DaemonSet"),
        "replicasets" => ("apps/v1", "ReplicaSet"),
        "controllerrevisions" => ("apps/v1", "ControllerRevision"),
        "pods" => ("v1", "Pod"),
        "events" => ("v1", "Event"),
        "leases" => ("coordination.k8s.io/v1", "Lease"),
        "configmaps" => ("v1", "ConfigMap"),
        _ => ("v1", "Namespace"),
    }
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    (
        StatusCode::from_u16(code).unwrap(),
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok_json(value: &Value) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

impl KubeApi {
    pub async fn start() -> KubeApi {
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        let app = Router::new().fallback(
            move |method: Method, uri: Uri, headers: HeaderMap, body: Bytes| {
                let state = shared.clone();
                async move { handle(state, method, uri, headers, body).await }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        KubeApi {
            addr,
            state,
            task,
            clock: Mutex::new(None),
        }
    }

    /// A real `kube` client pointed at this server.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(format!("http://{}", self.addr).parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    pub fn cluster(&self, namespace: &str) -> Cluster {
        Cluster::from_client(self.client(), "test-context", namespace)
    }

    /// A kubeconfig for this server (for the binary and for kubectl), current context `context`.
    pub fn kubeconfig(&self, context: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: {context}\nclusters:\n- name: test\n  cluster:\n    server: http://{}\n\
contexts:\n- name: {context}\n  context:\n    cluster: test\n    user: test\nusers:\n- name: test\n  user: {{}}\n",
            self.addr
        )
    }

    /// The machine's own kubectl against this server (the oracle): (succeeded, stdout and stderr).
    /// kubectl must be installed (scripts/test.sh installs Debian's kubernetes-client when it is not).
    pub async fn kubectl(&self, args: &[&str]) -> (bool, String) {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("kubeconfig");
        std::fs::write(&config, self.kubeconfig("oracle")).unwrap();
        let output = tokio::process::Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&config)
            .arg("--cache-dir")
            .arg(dir.path().join("cache"))
            .args(args)
            .output()
            .await
            .expect("kubectl runs: install it (Debian's kubernetes-client; scripts/test.sh does)");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        (output.status.success(), said)
    }

    // ---- state hooks ----

    pub fn put_namespace(&self, name: &str, annotations: &[(&str, &str)]) {
        let annotations: serde_json::Map<String, Value> = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        let object = json!({"metadata": {"name": name, "annotations": annotations}});
        self.put("namespaces", "", object);
    }

    /// Store an object as a create or an update does: namespace, resourceVersion, uid and generation 1
    /// when absent.
    pub fn put(&self, resource: &str, namespace: &str, mut object: Value) {
        let mut state = self.state.lock().unwrap();
        let (api_version, kind) = kind_of(resource);
        object["apiVersion"] = json!(api_version);
        object["kind"] = json!(kind);
        let name = object["metadata"]["name"]
            .as_str()
            .expect("object has metadata.name")
            .to_string();
        let key: Key = (resource.into(), namespace.into(), name);
        let previous_uid = state
            .cluster
            .objects
            .get(&key)
            .map(|o| o["metadata"]["uid"].clone());
        let uid = match previous_uid {
            Some(uid) if !uid.is_null() => uid,
            _ => json!(state.cluster.uid()),
        };
        let metadata = &mut object["metadata"];
        if !namespace.is_empty() {
            metadata["namespace"] = json!(namespace);
        }
        if metadata.get("generation").is_none() {
            metadata["generation"] = json!(1);
        }
        if metadata.get("uid").is_none() {
            metadata["uid"] = uid;
        }
        default_workload(resource, &mut object);
        state.cluster.store(key, object);
    }

    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.state
            .lock()
            .unwrap()
            .cluster
            .objects
            .get(&(resource.into(), namespace.into(), name.into()))
            .cloned()
    }

    /// Every object of a resource in a namespace.
    pub fn all(&self, resource: &str, namespace: &str) -> Vec<Value> {
        self.state
            .lock()
            .unwrap()
            .cluster
            .objects
            .iter()
            .filter(|((r, n, _), _)| r == resource && n == namespace)
            .map(|(_, o)| o.clone())
            .collect()
    }

    /// Requests received for one path (query excluded).
    pub fn requests(&self, path: &str) -> usize {
        self.state
            .lock()
            .unwrap()
            .requests
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// Requests since the last `reset_counts`, by method and what they name ([`verb_of`]).
    pub fn requests_by_verb(&self) -> std::collections::BTreeMap<String, usize> {
        self.state.lock().unwrap().verbs.clone()
    }

    /// Bytes the server answered since the last `reset_counts` (bodies of a known length).
    pub fn response_bytes(&self) -> usize {
        self.state.lock().unwrap().response_bytes
    }

    pub fn total_requests(&self) -> usize {
        self.state.lock().unwrap().requests.values().sum()
    }

    /// How many responses had this status code.
    pub fn responses_with(&self, code: u16) -> usize {
        self.state
            .lock()
            .unwrap()
            .statuses
            .get(&code)
            .copied()
            .unwrap_or(0)
    }

    pub fn reset_counts(&self) {
        let mut state = self.state.lock().unwrap();
        state.requests.clear();
        state.verbs.clear();
        state.statuses.clear();
        state.response_bytes = 0;
        state.authorizations.clear();
    }

    /// Every resource request authorized against the identity since the last `reset_counts`, with
    /// whether it was allowed (a SelfSubjectAccessReview's own attributes are not a request: not here).
    pub fn authorizations(&self) -> Vec<(kube_rules::Attributes, bool)> {
        self.state.lock().unwrap().authorizations.clone()
    }

    /// Every authorization since the server started and its verdict (`reset_counts` leaves it).
    pub fn audit(&self) -> Vec<(kube_rules::Attributes, bool)> {
        self.state.lock().unwrap().audit.clone()
    }

    /// The next namespace patch is answered 500, as the apiserver answers a write its storage did
    /// not take (`NewInternalError` around etcd's `request timed out`,
    /// `staging/src/k8s.io/apiserver/pkg/storage/etcd3/store.go` → `apierrors.NewInternalError`):
    /// a stamp that wrote its shards then stops before its index names them.
    pub fn fail_next_namespace_patch(&self) {
        self.state.lock().unwrap().fail_namespace_patch = true;
    }

    /// The next `n` namespace GETs wait for each other, so they all see the same resourceVersion.
    pub fn sync_next_namespace_reads(&self, n: usize) {
        self.state.lock().unwrap().gate = Some((n, Arc::new(Barrier::new(n))));
    }

    /// The next `n` lease GETs wait for each other, so they all see the same lease (or its absence):
    /// two takers then race to write.
    pub fn sync_next_lease_reads(&self, n: usize) {
        self.state.lock().unwrap().lease_gate = Some((n, Arc::new(Barrier::new(n))));
    }

    /// The next `n` namespace PATCHes wait for each other before any is applied: writers that read
    /// the same resourceVersion then race to write (one wins, the others' preconditions fail).
    pub fn sync_next_namespace_patches(&self, n: usize) {
        self.state.lock().unwrap().patch_gate = Some((n, Arc::new(Barrier::new(n))));
    }

    /// After `n` more ConfigMap creates, the next one is held (before it is applied) until released.
    pub fn hold_configmap_create_after(&self, n: usize) -> Arc<Hold> {
        let hold = Arc::new(Hold::new(format!(
            "the ConfigMap create after {n} more (hold_configmap_create_after)"
        )));
        self.state.lock().unwrap().create_hold = Some((n, hold.clone()));
        hold
    }

    /// The next ConfigMap delete is held (before it is applied) until released.
    pub fn hold_next_configmap_delete(&self) -> Arc<Hold> {
        let hold = Arc::new(Hold::new(
            "the next ConfigMap delete (hold_next_configmap_delete)".to_string(),
        ));
        self.state.lock().unwrap().delete_hold = Some(hold.clone());
        hold
    }

    /// How many namespace patches were answered 409 Conflict.
    pub fn namespace_conflicts(&self) -> usize {
        self.state.lock().unwrap().namespace_conflicts
    }

    /// The shards a namespace write's record index named while they did not exist.
    pub fn dangling_index_shards(&self) -> Vec<String> {
        self.state.lock().unwrap().dangling.clone()
    }

    /// Containers running an image that starts with `image_prefix` meet this fate in the kubelet.
    pub fn pods_of_image(&self, image_prefix: &str, fate: Fate) {
        self.state
            .lock()
            .unwrap()
            .cluster
            .fates
            .push((image_prefix.to_string(), fate));
    }

    /// Every container runs from now on (the fates given so far are forgotten).
    pub fn clear_fates(&self) {
        self.state.lock().unwrap().cluster.fates.clear();
    }

    /// The workload's progress deadline has passed (the test's clock): the Deployment controller reports
    /// it on its next step if the roll-out is still incomplete.
    pub fn pass_progress_deadline(&self, resource: &str, namespace: &str, name: &str) {
        self.state.lock().unwrap().cluster.deadline_passed.insert((
            resource.into(),
            namespace.into(),
            name.into(),
        ));
    }

    /// Someone else sets the image of `container` of the workload to `then`, `after` controller steps
    /// after it first runs `when` (as a `kubectl set image` in another terminal would).
    pub fn someone_sets_image(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        container: &str,
        (when, then): (&str, &str),
        after: u64,
    ) {
        self.state.lock().unwrap().cluster.image_changes.push((
            (resource.into(), namespace.into(), name.into()),
            container.into(),
            when.into(),
            then.into(),
            after,
            None,
        ));
    }

    /// Time passes on its own: every `every`, each workload's controller takes a step, whether a client
    /// reads or not (as a cluster's controllers do). Without it a workload steps after each read of it
    /// and every few milliseconds while it is watched; a test that follows a roll-out by reading it (as
    /// meshtop and kubectl do) sees the same states either way, only later.
    pub fn start_clock(&self, every: std::time::Duration) {
        let state = self.state.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let mut s = state.lock().unwrap();
                let workloads: Vec<Key> = s
                    .cluster
                    .objects
                    .keys()
                    .filter(|(r, _, _)| {
                        matches!(r.as_str(), "deployments" | "statefulsets" | "daemonsets")
                    })
                    .cloned()
                    .collect();
                for key in workloads {
                    s.cluster.reconcile(&key);
                }
            }
        });
        *self.clock.lock().unwrap() = Some(task);
    }

    /// (pods its ReplicaSets asked for, available, updated) after each step of a Deployment's controller.
    pub fn trace(&self, namespace: &str, name: &str) -> Vec<(i64, i64, i64)> {
        self.state
            .lock()
            .unwrap()
            .cluster
            .trace
            .get(&("deployments".into(), namespace.into(), name.into()))
            .cloned()
            .unwrap_or_default()
    }

    /// The kubelet runs on this container runtime (the form of the imageIDs it reports).
    pub fn runtime(&self, runtime: Runtime) {
        self.state.lock().unwrap().cluster.runtime = runtime;
    }

    /// `image` was loaded onto the nodes (`kind load`), not pulled: its containers report the image `id`.
    pub fn image_loaded(&self, image: &str, id: &str) {
        self.state
            .lock()
            .unwrap()
            .cluster
            .loaded
            .insert(image.into(), id.into());
    }

    /// One step of the workload's controller (as time passing would).
    pub fn tick(&self, resource: &str, namespace: &str, name: &str) {
        self.state.lock().unwrap().cluster.reconcile(&(
            resource.into(),
            namespace.into(),
            name.into(),
        ));
    }

    /// Let the workload's controller run until nothing changes (twenty steps are plenty here).
    pub fn settle(&self, resource: &str, namespace: &str, name: &str) {
        for _ in 0..20 {
            self.tick(resource, namespace, name);
        }
    }

    /// Requests are made as `user`, bound cluster-wide (a ClusterRoleBinding) to a role of these (verb,
    /// resource) pairs, each resource in the API group the server serves it in (`pods/log` a subresource);
    /// anything else is 403, a request in another group too.
    pub fn identity(&self, user: &str, allowed: &[(&str, &str)]) {
        let rules = allowed
            .iter()
            .map(|(verb, resource)| {
                let group = group_of(resource.split('/').next().unwrap_or_default());
                Rule::new(&[verb], &[group], &[resource])
            })
            .collect();
        self.identity_bound(user, vec![Binding::Cluster(rules)]);
    }

    /// Requests are made as `user` with exactly these bindings (RoleBindings count in their namespace only).
    pub fn identity_bound(&self, user: &str, bindings: Vec<Binding>) {
        self.state.lock().unwrap().identity = Some(Identity {
            user: user.to_string(),
            bindings,
        });
    }

    /// The next continue token presented has expired (as after an etcd compaction).
    pub fn expire_next_continue(&self) {
        self.state.lock().unwrap().expire_next_continue = true;
    }

    /// Every pod the workload selects waits with this reason (e.g. ImagePullBackOff).
    pub fn set_pods_waiting(
        &self,
        resource: &str,
        namespace: &str,
        workload: &str,
        reason: &str,
        message: &str,
    ) {
        let mut state = self.state.lock().unwrap();
        let object = state
            .cluster
            .objects
            .get(&(resource.into(), namespace.into(), workload.into()))
            .cloned()
            .unwrap();
        let selector = object["spec"]["selector"]["matchLabels"].clone();
        let keys: Vec<Key> = state
            .cluster
            .objects
            .iter()
            .filter(|((res, ns, _), pod)| {
                res == "pods"
                    && ns == namespace
                    && labels_match(&selector, &pod["metadata"]["labels"])
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let mut pod = state.cluster.objects[&key].clone();
            for cs in pod["status"]["containerStatuses"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                cs["ready"] = json!(false);
                cs["state"] = json!({"waiting": {"reason": reason, "message": message}});
                // A container backing off after a crash ran before: its run is the last terminated one.
                if reason == "CrashLoopBackOff" && cs["lastState"]["terminated"].is_null() {
                    let ran = state.cluster.new_container_id();
                    cs["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error",
                        "containerID": ran}});
                }
                cs.as_object_mut().unwrap().remove("containerID");
            }
            state.cluster.store(key, pod);
        }
    }

    /// Store an event as given (its timestamps and involvedObject as the test says).
    pub fn put_event(&self, namespace: &str, event: Value) {
        self.put("events", namespace, event);
    }

    /// What the pod's first container printed, in the run its log is read from: the running one,
    /// else the one that last terminated.
    pub fn set_pod_log(&self, namespace: &str, pod: &str, text: &str) {
        let mut s = self.state.lock().unwrap();
        let key: Key = ("pods".into(), namespace.into(), pod.into());
        let object = s.cluster.objects[&key].clone();
        let container = object["spec"]["containers"][0]["name"]
            .as_str()
            .unwrap()
            .to_string();
        let cs = object["status"]["containerStatuses"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["name"] == container.as_str()))
            .cloned()
            .unwrap_or_default();
        match cs["lastState"]["terminated"]["containerID"].as_str() {
            Some(id) if !cs["state"]["running"].is_object() => s.cluster.print(id, text),
            _ => {
                drop(s);
                self.container_prints(namespace, pod, &container, text);
            }
        }
    }

    /// The running `container` of the pod prints `text` (one log entry per line, on the test's clock);
    /// a follow of it sends them on. A running container the test stored without an id gets one.
    pub fn container_prints(&self, namespace: &str, pod: &str, container: &str, text: &str) {
        let mut s = self.state.lock().unwrap();
        let key: Key = ("pods".into(), namespace.into(), pod.into());
        let mut object = s.cluster.objects[&key].clone();
        let cs = container_status(&mut object, container);
        assert!(
            cs["state"]["running"].is_object(),
            "container {container} of pod {pod} is not running: it prints nothing ({cs})"
        );
        let id = match cs["containerID"].as_str() {
            Some(id) => id.to_string(),
            None => {
                let id = s.cluster.new_container_id();
                cs["containerID"] = json!(id);
                s.cluster.store(key, object);
                id
            }
        };
        s.cluster.print(&id, text);
    }

    /// The running `container` of the pod exits with `code` (`reason`: Error, OOMKilled, Completed): its
    /// run is kept as `lastState.terminated` (what `previous=true` reads), restartCount one more, and it
    /// waits in CrashLoopBackOff with the kubelet's BackOff event until [`KubeApi::container_restarts`]
    /// (`pkg/kubelet/kuberuntime/kuberuntime_manager.go` doBackOff; `pkg/kubelet/container/sync_result.go`).
    /// The status is the kubelet's (`pkg/kubelet/kubelet_pods.go` convertToAPIContainerStatuses: the
    /// exited run becomes `LastTerminationState`, `RestartCount` counts it) in the API's shape
    /// (`staging/src/k8s.io/api/core/v1/types.go` ContainerStatus `lastState`, `restartCount`;
    /// ContainerStateTerminated `exitCode`, `reason`, `startedAt`, `finishedAt` as metav1.Time, RFC 3339
    /// in whole seconds).
    pub fn container_crashes(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        code: i64,
        reason: &str,
    ) {
        if self.get("pods", namespace, pod).is_some_and(|p| {
            !p["status"]["containerStatuses"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["name"] == container && c["containerID"].is_string())
        }) {
            // A container the test stored without an id: it gets the id it ran under first.
            self.container_prints(namespace, pod, container, "");
        }
        let mut s = self.state.lock().unwrap();
        let key: Key = ("pods".into(), namespace.into(), pod.into());
        let mut object = s.cluster.objects[&key].clone();
        let uid = object["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let now = s.cluster.now();
        let cs = container_status(&mut object, container);
        let id = cs["containerID"].as_str().unwrap_or_default().to_string();
        let started = cs["state"]["running"]["startedAt"].clone();
        let restarts = cs["restartCount"].as_i64().unwrap_or(0) + 1;
        let message = format!(
            "back-off 10s restarting failed container={container} pod={pod}_{namespace}({uid})"
        );
        cs["lastState"] = json!({"terminated": {"exitCode": code, "reason": reason,
            "containerID": id, "startedAt": started, "finishedAt": now}});
        cs["state"] = json!({"waiting": {"reason": "CrashLoopBackOff", "message": message}});
        cs["restartCount"] = json!(restarts);
        cs["ready"] = json!(false);
        cs["started"] = json!(false);
        cs.as_object_mut().unwrap().remove("containerID");
        object["status"]["conditions"] =
            json!([{"type": "Ready", "status": "False", "lastTransitionTime": now}]);
        s.cluster.store(key, object);
        s.cluster.event(
            namespace,
            "Pod",
            pod,
            "BackOff",
            &format!(
                "Back-off restarting failed container {container} in pod {pod}_{namespace}({uid})"
            ),
        );
    }

    /// The back-off is over: the container runs again as a new container (a new id, an empty log).
    pub fn container_restarts(&self, namespace: &str, pod: &str, container: &str) {
        let mut s = self.state.lock().unwrap();
        let key: Key = ("pods".into(), namespace.into(), pod.into());
        let mut object = s.cluster.objects[&key].clone();
        let mut cs = container_status(&mut object, container).clone();
        s.cluster.start_container(&mut cs);
        *container_status(&mut object, container) = cs;
        let now = s.cluster.now();
        object["status"]["conditions"] =
            json!([{"type": "Ready", "status": "True", "lastTransitionTime": now}]);
        s.cluster.store(key, object);
        s.cluster.event(
            namespace,
            "Pod",
            pod,
            "Started",
            &format!("Started container {container}"),
        );
    }
}

/// The status of `container` in a pod object.
fn container_status<'a>(pod: &'a mut Value, container: &str) -> &'a mut Value {
    pod["status"]["containerStatuses"]
        .as_array_mut()
        .and_then(|all| all.iter_mut().find(|c| c["name"] == container))
        .unwrap_or_else(|| panic!("the pod has no container {container}"))
}

/// The apiserver's defaults for apps/v1 workloads (`pkg/apis/apps/v1/defaults.go`).
fn default_workload(resource: &str, object: &mut Value) {
    if !matches!(resource, "deployments" | "statefulsets" | "daemonsets")
        || !object["spec"].is_object()
    {
        return;
    }
    let spec = &mut object["spec"];
    match resource {
        "deployments" => {
            if spec["replicas"].is_null() {
                spec["replicas"] = json!(1);
            }
            if spec["strategy"].is_null() {
                spec["strategy"] = json!({"type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}});
            }
            if spec["progressDeadlineSeconds"].is_null() {
                spec["progressDeadlineSeconds"] = json!(600);
            }
            if spec["revisionHistoryLimit"].is_null() {
                spec["revisionHistoryLimit"] = json!(10);
            }
        }
        "statefulsets" => {
            if spec["replicas"].is_null() {
                spec["replicas"] = json!(1);
            }
            if spec["updateStrategy"].is_null() {
                spec["updateStrategy"] = json!({"type": "RollingUpdate"});
            }
            if spec["updateStrategy"]["type"] == "RollingUpdate"
                && spec["updateStrategy"]["rollingUpdate"].is_null()
            {
                spec["updateStrategy"]["rollingUpdate"] = json!({"partition": 0});
            }
            if spec["podManagementPolicy"].is_null() {
                spec["podManagementPolicy"] = json!("OrderedReady");
            }
        }
        _ => {
            if spec["updateStrategy"].is_null() {
                spec["updateStrategy"] = json!({"type": "RollingUpdate",
                    "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}});
            }
        }
    }
}

// ---- the server ----

async fn handle(
    state: Arc<Mutex<State>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_string();
    {
        let mut s = state.lock().unwrap();
        *s.requests.entry(path.clone()).or_default() += 1;
        *s.verbs.entry(verb_of(&method, &path)).or_default() += 1;
    }
    let response = route(&state, &method, &uri, &headers, &body).await;
    let sent = axum::body::HttpBody::size_hint(response.body()).exact();
    let mut s = state.lock().unwrap();
    *s.statuses.entry(response.status().as_u16()).or_default() += 1;
    s.response_bytes += usize::try_from(sent.unwrap_or(0)).unwrap_or(usize::MAX);
    drop(s);
    response
}

/// A request's method and what it names: `GET configmaps/…` (one object), `GET configmaps` (a list).
fn verb_of(method: &Method, path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let skip = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return format!("{method} {path}"),
    };
    let rest = segments.get(skip..).unwrap_or_default();
    match rest.len() % 2 {
        0 if !rest.is_empty() => format!("{method} {}/…", rest[rest.len() - 2]),
        _ => format!("{method} {}", rest.last().copied().unwrap_or_default()),
    }
}

/// The API group the server serves a resource in (what an RBAC rule for it must name).
pub fn group_of(resource: &str) -> &'static str {
    match resource {
        "deployments" | "statefulsets" | "daemonsets" | "replicasets" | "controllerrevisions" => {
            "apps"
        }
        "leases" => "coordination.k8s.io",
        "selfsubjectaccessreviews" => "authorization.k8s.io",
        _ => "",
    }
}

/// 403 with the apiserver's message (`responsewriters/errors.go`).
fn forbidden(user: &str, a: &kube_rules::Attributes) -> Response {
    // StatusDetails' fields are `omitempty` (`apimachinery/pkg/apis/meta/v1/types.go`): an empty name or
    // the core group is left out.
    let mut details = serde_json::Map::new();
    for (field, value) in [
        ("name", &a.name),
        ("group", &a.group),
        ("kind", &a.resource),
    ] {
        if !value.is_empty() {
            details.insert(field.to_string(), json!(value));
        }
    }
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": kube_rules::forbidden_message(user, a),
        "reason": "Forbidden", "details": details, "code": 403});
    (
        StatusCode::FORBIDDEN,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn route(
    state: &Arc<Mutex<State>>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let parts: Vec<&str> = uri.path().split('/').filter(|p| !p.is_empty()).collect();
    let q = query(uri);
    // Authorization first, as the apiserver's filter chain does (`WithAuthorization` in
    // `staging/src/k8s.io/apiserver/pkg/endpoints/filters/authorization.go`), for every resource
    // request; discovery is a non-resource request every authenticated user may make.
    let identity = state.lock().unwrap().identity.clone();
    if let Some(identity) = identity
        && let Some(attributes) = kube_rules::request_attributes(method, &parts, &q)
    {
        let allowed = identity.allows(&attributes) || kube_rules::allowed_to_everyone(&attributes);
        let mut s = state.lock().unwrap();
        s.authorizations.push((attributes.clone(), allowed));
        s.audit.push((attributes.clone(), allowed));
        drop(s);
        if !allowed {
            return forbidden(&identity.user, &attributes);
        }
    }
    let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    match (method.clone(), parts.as_slice()) {
        (Method::GET, ["api"]) => ok_json(&json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]})),
        (Method::GET, ["apis"]) => ok_json(&discovery_groups()),
        (Method::GET, ["api", "v1"]) => ok_json(&resource_list("v1", CORE_RESOURCES)),
        (Method::GET, ["apis", "apps", "v1"]) => ok_json(&resource_list("apps/v1", APPS_RESOURCES)),
        (Method::GET, ["apis", "authorization.k8s.io", "v1"]) => ok_json(&resource_list(
            "authorization.k8s.io/v1",
            &[(
                "selfsubjectaccessreviews",
                "SelfSubjectAccessReview",
                false,
                &[],
                &["create"],
            )],
        )),
        (Method::GET, ["apis", "coordination.k8s.io", "v1"]) => ok_json(&resource_list(
            "coordination.k8s.io/v1",
            &[("leases", "Lease", true, &[], READ_WRITE)],
        )),
        (
            method,
            [
                "apis",
                "coordination.k8s.io",
                "v1",
                "namespaces",
                ns,
                "leases",
            ],
        ) => leases(state, &method, ns, None, &q, body),
        (
            method,
            [
                "apis",
                "coordination.k8s.io",
                "v1",
                "namespaces",
                ns,
                "leases",
                name,
            ],
        ) => {
            let gate = if method == Method::GET {
                next_gate(&mut state.lock().unwrap().lease_gate)
            } else {
                None
            };
            // Read first, then wait (as for namespaces): every gated reader saw the same lease.
            let response = leases(state, &method, ns, Some(name), &q, body);
            if let Some(barrier) = gate
                && let Err(failed) = gather(&barrier, "lease reads (sync_next_lease_reads)").await
            {
                return failed;
            }
            response
        }
        (Method::GET, ["apis", "apps", "v1", "namespaces", ns, resource]) if watch => {
            watch_objects(state, resource, ns, &q)
        }
        (
            Method::POST,
            [
                "apis",
                "authorization.k8s.io",
                "v1",
                "selfsubjectaccessreviews",
            ],
        ) => access_review(state, body),
        (Method::GET, ["api", "v1", "namespaces", name]) => {
            let gate = next_gate(&mut state.lock().unwrap().gate);
            // Read first, then wait: every gated reader answers with the same resourceVersion however the
            // tasks are scheduled after the barrier.
            let response = get_object(state, "namespaces", "", name);
            if let Some(barrier) = gate
                && let Err(failed) =
                    gather(&barrier, "namespace reads (sync_next_namespace_reads)").await
            {
                return failed;
            }
            response
        }
        (Method::PATCH, ["api", "v1", "namespaces", name]) => {
            if std::mem::take(&mut state.lock().unwrap().fail_namespace_patch) {
                return status(
                    500,
                    "InternalError",
                    "Internal error occurred: etcdserver: request timed out",
                );
            }
            let gate = next_gate(&mut state.lock().unwrap().patch_gate);
            if let Some(barrier) = gate
                && let Err(failed) =
                    gather(&barrier, "namespace patches (sync_next_namespace_patches)").await
            {
                return failed;
            }
            let response = patch_object(state, "namespaces", "", name, headers, body);
            match response.status() {
                StatusCode::OK => note_dangling(state, name),
                StatusCode::CONFLICT => state.lock().unwrap().namespace_conflicts += 1,
                _ => {}
            }
            response
        }
        (Method::PATCH, ["api", "v1", "namespaces", ns, "configmaps", name]) => {
            patch_object(state, "configmaps", ns, name, headers, body)
        }
        (method, ["api", "v1", "namespaces", ns, "configmaps"]) => {
            if method == Method::POST {
                let hold = next_create_hold(&mut state.lock().unwrap().create_hold);
                if let Some(hold) = hold
                    && let Err(failed) = hold.hold().await
                {
                    return failed;
                }
            }
            configmaps::configmaps(state, &method, ns, None, &q, headers, body)
        }
        (method, ["api", "v1", "namespaces", ns, "configmaps", name]) => {
            if method == Method::DELETE {
                let hold = state.lock().unwrap().delete_hold.take();
                if let Some(hold) = hold
                    && let Err(failed) = hold.hold().await
                {
                    return failed;
                }
            }
            configmaps::configmaps(state, &method, ns, Some(name), &q, headers, body)
        }
        (
            Method::GET,
            [
                "api",
                "v1",
                "namespaces",
                ns,
                resource @ ("pods" | "events"),
            ],
        ) => list(state, resource, ns, &q),
        (Method::GET, ["api", "v1", "namespaces", ns, "pods", pod, "log"]) => {
            logs::pod_log(state, ns, pod, &q)
        }
        (Method::GET, ["api", "v1", "namespaces", ns, "pods", name]) => {
            get_object(state, "pods", ns, name)
        }
        (Method::DELETE, ["api", "v1", "namespaces", ns, "pods", name]) => {
            let mut s = state.lock().unwrap();
            let key: Key = ("pods".into(), ns.to_string(), name.to_string());
            if !s.cluster.objects.contains_key(&key) {
                return status(404, "NotFound", &format!("pods \"{name}\" not found"));
            }
            s.cluster.mark_terminating(&key);
            ok_json(&s.cluster.objects[&key])
        }
        (Method::GET, ["apis", "apps", "v1", "namespaces", ns, resource]) => {
            list(state, resource, ns, &q)
        }
        (Method::GET, ["apis", "apps", "v1", "namespaces", ns, resource, name]) => {
            let key: Key = (resource.to_string(), ns.to_string(), name.to_string());
            let response = get_object(state, resource, ns, name);
            // The controllers act after the read: what a client reads lags what it wrote.
            state.lock().unwrap().cluster.reconcile(&key);
            response
        }
        (Method::PATCH, ["apis", "apps", "v1", "namespaces", ns, resource, name]) => {
            patch_object(state, resource, ns, name, headers, body)
        }
        _ => status(
            404,
            "NotFound",
            &format!("the test server does not serve {method} {}", uri.path()),
        ),
    }
}

/// The hold of the create that comes after the ones still let through, counting one off.
fn next_create_hold(gate: &mut Option<(usize, Arc<Hold>)>) -> Option<Arc<Hold>> {
    match gate.take()? {
        (0, hold) => Some(hold),
        (n, hold) => {
            *gate = Some((n - 1, hold));
            None
        }
    }
}

/// Note every shard the namespace's record index names that does not exist now.
fn note_dangling(state: &Arc<Mutex<State>>, ns: &str) {
    let mut s = state.lock().unwrap();
    let key: Key = ("namespaces".into(), String::new(), ns.into());
    let index = s.cluster.objects.get(&key).and_then(|n| {
        n["metadata"]["annotations"][meshtop_backends::cluster::INDEX_ANNOTATION]
            .as_str()
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
    });
    let Some(index) = index else { return };
    // The record's shards and the history's.
    let missing: Vec<String> = ["shards", "history"]
        .iter()
        .filter_map(|list| index[*list].as_array())
        .flatten()
        .filter_map(|shard| shard["name"].as_str())
        .filter(|name| {
            !s.cluster
                .objects
                .contains_key(&("configmaps".into(), ns.into(), (*name).into()))
        })
        .map(str::to_string)
        .collect();
    s.dangling.extend(missing);
}

/// The barrier a gated read waits at, counting it off the gate.
fn next_gate(gate: &mut Option<(usize, Arc<Barrier>)>) -> Option<Arc<Barrier>> {
    let (n, barrier) = gate.take()?;
    if n > 1 {
        *gate = Some((n - 1, barrier.clone()));
    }
    Some(barrier)
}

type ResourceInfo = (
    &'static str,
    &'static str,
    bool,
    &'static [&'static str],
    &'static [&'static str],
);

const READ_WRITE: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// What the test server serves, as discovery (`staging/src/k8s.io/apiserver/pkg/endpoints/discovery`).
const CORE_RESOURCES: &[ResourceInfo] = &[
    ("namespaces", "Namespace", false, &["ns"], READ_WRITE),
    ("pods", "Pod", true, &["po"], READ_WRITE),
    ("pods/log", "Pod", true, &[], &["get"]),
    ("events", "Event", true, &["ev"], READ_WRITE),
    ("configmaps", "ConfigMap", true, &["cm"], READ_WRITE),
];
const APPS_RESOURCES: &[ResourceInfo] = &[
    ("deployments", "Deployment", true, &["deploy"], READ_WRITE),
    ("statefulsets", "StatefulSet", true, &["sts"], READ_WRITE),
    ("daemonsets", "DaemonSet", true, &["ds"], READ_WRITE),
    ("replicasets", "ReplicaSet", true, &["rs"], READ_WRITE),
    (
        "controllerrevisions",
        "ControllerRevision",
        true,
        &[],
        READ_WRITE,
    ),
];

fn resource_list(group_version: &str, resources: &[ResourceInfo]) -> Value {
    let resources: Vec<Value> = resources
        .iter()
        .map(|(name, kind, namespaced, short, verbs)| {
            let singular = if name.contains('/') { "" } else { kind };
            json!({"name": name, "singularName": singular.to_lowercase(), "namespaced": namespaced,
                "kind": kind, "verbs": verbs, "shortNames": short})
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
        "resources": resources})
}

fn discovery_groups() -> Value {
    let group = |name: &str| {
        let version = json!({"groupVersion": format!("{name}/v1"), "version": "v1"});
        json!({"name": name, "versions": [version.clone()], "preferredVersion": version})
    };
    json!({"kind": "APIGroupList", "apiVersion": "v1",
        "groups": [group("apps"), group("authorization.k8s.io"), group("coordination.k8s.io")]})
}

/// A watch (`?watch=true`): a stream of `{"type", "object"}` lines, one per change, as the apiserver's
/// watch handler writes them (`staging/src/k8s.io/apiserver/pkg/endpoints/handlers/watch.go`). Time passes
/// while someone watches: the controllers of the watched workloads take a step every few milliseconds
/// (a watcher never reads again, so nothing else would move them).
fn watch_objects(
    state: &Arc<Mutex<State>>,
    resource: &str,
    ns: &str,
    q: &HashMap<String, String>,
) -> Response {
    if let Some(selector) = q.get("fieldSelector")
        && let Err(message) = kube_rules::check_field_selector(resource, selector)
    {
        return status(400, "BadRequest", &message);
    }
    let since: u64 = q
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(60)
        .min(60);
    let state = state.clone();
    let (resource, ns, q) = (resource.to_string(), ns.to_string(), q.clone());
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(timeout);
    let sent: HashMap<String, u64> = HashMap::new();
    let stream = futures_util::stream::unfold((false, sent), move |(first_done, mut sent_now)| {
        let state = state.clone();
        let (resource, ns, q) = (resource.clone(), ns.clone(), q.clone());
        async move {
            if first_done {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            let mut lines = String::new();
            {
                let mut s = state.lock().unwrap();
                let keys: Vec<Key> = s
                    .cluster
                    .objects
                    .iter()
                    .filter(|((r, n, _), o)| {
                        *r == resource
                            && *n == ns
                            && q.get("fieldSelector")
                                .is_none_or(|sel| field_selector_matches(sel, o))
                            && q.get("labelSelector").is_none_or(|sel| {
                                label_selector_matches(sel, &o["metadata"]["labels"])
                            })
                    })
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in keys {
                    if first_done {
                        s.cluster.reconcile(&key);
                    }
                    let object = s.cluster.objects[&key].clone();
                    let rv: u64 = object["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let last = sent_now.get(&key.2).copied().unwrap_or(since);
                    if rv > last {
                        sent_now.insert(key.2.clone(), rv);
                        let kind = if last == 0 { "ADDED" } else { "MODIFIED" };
                        lines.push_str(&json!({"type": kind, "object": object}).to_string());
                        lines.push('\n');
                    }
                }
            }
            Some((
                Ok::<_, std::io::Error>(Bytes::from(lines)),
                (true, sent_now),
            ))
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::TRANSFER_ENCODING, "chunked")
        .body(axum::body::Body::from_stream(stream))
        .unwrap()
}

/// A SelfSubjectAccessReview answered from the identity's rules (`pkg/registry/authorization/
/// selfsubjectaccessreview/rest.go`: the spec echoed back with status.allowed).
fn access_review(state: &Arc<Mutex<State>>, body: &Bytes) -> Response {
    let Ok(mut review) = serde_json::from_slice::<Value>(body) else {
        return status(400, "BadRequest", "the review is not JSON");
    };
    let attributes = kube_rules::review_attributes(&review["spec"]["resourceAttributes"]);
    let allowed = match &state.lock().unwrap().identity {
        None => true,
        Some(identity) => {
            identity.allows(&attributes) || kube_rules::allowed_to_everyone(&attributes)
        }
    };
    review["status"] = if allowed {
        json!({"allowed": true, "reason": "RBAC: allowed by the test identity's bindings"})
    } else {
        json!({"allowed": false})
    };
    review["apiVersion"] = json!("authorization.k8s.io/v1");
    review["kind"] = json!("SelfSubjectAccessReview");
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        review.to_string(),
    )
        .into_response()
}

fn get_object(state: &Arc<Mutex<State>>, resource: &str, ns: &str, name: &str) -> Response {
    match state
        .lock()
        .unwrap()
        .cluster
        .objects
        .get(&(resource.into(), ns.into(), name.into()))
    {
        Some(object) => ok_json(object),
        None => status(404, "NotFound", &format!("{resource} \"{name}\" not found")),
    }
}

/// A list, paged when the client asks for `limit` (`continue` is the resourceVersion it was cut at
/// and the name to start after); an expired continue is 410 Expired, as `storage/errors.go` says it.
fn list(
    state: &Arc<Mutex<State>>,
    resource: &str,
    ns: &str,
    q: &HashMap<String, String>,
) -> Response {
    if let Some(selector) = q.get("fieldSelector")
        && let Err(message) = kube_rules::check_field_selector(resource, selector)
    {
        return status(400, "BadRequest", &message);
    }
    let mut s = state.lock().unwrap();
    let (start_after, list_rv) = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let Some((rv, name)) = token.split_once(':') else {
                return status(400, "BadRequest", "invalid continue token");
            };
            let rv: u64 = rv.parse().unwrap_or(0);
            if std::mem::take(&mut s.expire_next_continue) {
                return status(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
                );
            }
            (Some(name.to_string()), rv)
        }
        None => (None, s.cluster.resource_version),
    };
    let items: Vec<Value> = s
        .cluster
        .objects
        .iter()
        .filter(|((r, n, name), _)| {
            r == resource && n == ns && start_after.as_ref().is_none_or(|a| name > a)
        })
        .map(|(_, o)| o)
        .filter(|o| {
            q.get("labelSelector")
                .is_none_or(|sel| label_selector_matches(sel, &o["metadata"]["labels"]))
        })
        .filter(|o| {
            q.get("fieldSelector")
                .is_none_or(|sel| field_selector_matches(sel, o))
        })
        .cloned()
        .collect();
    let limit = q
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let (items, next) = match limit {
        Some(limit) if items.len() > limit => {
            let last = items[limit - 1]["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (items[..limit].to_vec(), Some(format!("{list_rv}:{last}")))
        }
        _ => (items, None),
    };
    let (api_version, kind) = kind_of(resource);
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if let Some(next) = next {
        metadata["continue"] = json!(next);
    }
    ok_json(
        &json!({"apiVersion": api_version, "kind": format!("{kind}List"),
        "metadata": metadata, "items": items}),
    )
}

/// The strategic merge patch of `staging/src/k8s.io/apimachinery/pkg/util/strategicpatch/patch.go`, for
/// what kubectl sends here: a JSON merge patch, except that the lists of containers, init containers,
/// volumes, env and volume mounts merge by `name` (their `patchMergeKey`), and directives (`$setElementOrder/…`,
/// `$patch`) are not stored.
fn strategic_merge(target: &mut Value, patch: &Value) {
    const BY_NAME: &[&str] = &[
        "containers",
        "initContainers",
        "volumes",
        "env",
        "volumeMounts",
    ];
    let Some(patch) = patch.as_object() else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    for (key, value) in patch {
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            target.as_object_mut().unwrap().remove(key);
        } else if BY_NAME.contains(&key.as_str()) && value.is_array() && target[key].is_array() {
            let list = target[key].as_array_mut().unwrap();
            for item in value.as_array().unwrap() {
                match list.iter_mut().find(|e| e["name"] == item["name"]) {
                    Some(existing) => strategic_merge(existing, item),
                    None => list.push(item.clone()),
                }
            }
        } else if value.is_object() {
            strategic_merge(&mut target[key], value);
        } else {
            target[key] = value.clone();
        }
    }
}

fn conflict(resource: &str, name: &str) -> Response {
    status(
        409,
        "Conflict",
        &format!(
            "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
        ),
    )
}

fn patch_object(
    state: &Arc<Mutex<State>>,
    resource: &str,
    ns: &str,
    name: &str,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let mut s = state.lock().unwrap();
    let key: Key = (resource.into(), ns.into(), name.into());
    s.cluster.before_write(&key);
    let Some(current) = s.cluster.objects.get(&key).cloned() else {
        return status(404, "NotFound", &format!("{resource} \"{name}\" not found"));
    };
    let Ok(patch) = serde_json::from_slice::<Value>(body) else {
        return status(400, "BadRequest", "the patch is not JSON");
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mut updated = current.clone();
    if content_type.starts_with("application/json-patch+json") {
        let Ok(ops) = serde_json::from_value::<json_patch::Patch>(patch) else {
            return status(400, "BadRequest", "not a JSON patch");
        };
        if let Err(e) = json_patch::patch(&mut updated, &ops.0) {
            return status(422, "Invalid", &format!("the JSON patch failed: {e}"));
        }
    } else if content_type.starts_with("application/merge-patch+json") {
        json_patch::merge(&mut updated, &patch);
    } else if content_type.starts_with("application/strategic-merge-patch+json") {
        strategic_merge(&mut updated, &patch);
    } else {
        return status(
            415,
            "UnsupportedMediaType",
            &format!("unsupported patch type {content_type:?}"),
        );
    }
    // A patch that names a resourceVersion other than the current one is a conflict (the store's
    // GuaranteedUpdate precondition).
    if updated["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"] {
        return conflict(resource, name);
    }
    // The main resource never writes status (PrepareForUpdate keeps the old one); uid and generation
    // are the server's.
    updated["status"] = current["status"].clone();
    updated["metadata"]["uid"] = current["metadata"]["uid"].clone();
    updated["metadata"]["generation"] = current["metadata"]["generation"].clone();
    if updated["status"].is_null() {
        updated.as_object_mut().unwrap().remove("status");
    }
    if updated["spec"] != current["spec"] {
        let generation = current["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
        updated["metadata"]["generation"] = json!(generation);
    }
    if updated == current {
        return ok_json(&current);
    }
    // A ConfigMap's update is validated as a whole (ValidateConfigMapUpdate: immutability, size).
    if resource == "configmaps" {
        let errors = configmaps::validate_update(&current, &updated);
        if !errors.is_empty() {
            return status(
                422,
                "Invalid",
                &kube_rules::invalid_message("ConfigMap", name, &errors),
            );
        }
    }
    // Validation of the object as updated (`ValidateObjectMetaUpdate` → ValidateAnnotations).
    if let Some(error) = kube_rules::annotations_too_long(&updated) {
        let (_, kind) = kind_of(resource);
        return status(
            422,
            "Invalid",
            &kube_rules::invalid_message(kind, name, &[error]),
        );
    }
    s.cluster.store(key, updated.clone());
    let stored = s
        .cluster
        .objects
        .get(&(resource.into(), ns.into(), name.into()))
        .cloned()
        .unwrap_or(updated);
    ok_json(&stored)
}

/// `coordination.k8s.io/v1` leases, kept as the generic registry keeps any object
/// (`staging/src/k8s.io/apiserver/pkg/registry/generic/registry/store.go`): a create of a name that exists
/// is 409 AlreadyExists (and of one in a namespace that does not exist 404, the NamespaceLifecycle
/// admission); an update (PUT) of a missing lease is 404 (leases never create on update), one without a
/// resourceVersion 422 and one with a stale resourceVersion 409 Conflict (leases allow no unconditional
/// update: `pkg/registry/coordination/lease/strategy.go`); a delete honours a resourceVersion precondition.
fn leases(
    state: &Arc<Mutex<State>>,
    method: &Method,
    ns: &str,
    name: Option<&str>,
    q: &HashMap<String, String>,
    body: &Bytes,
) -> Response {
    const QUALIFIED: &str = "leases.coordination.k8s.io";
    let not_found = |name: &str| {
        status(
            404,
            "NotFound",
            &format!("{QUALIFIED} \"{name}\" not found"),
        )
    };
    let parsed = || serde_json::from_slice::<Value>(body).ok();
    match (method.clone(), name) {
        (Method::GET, None) => list(state, "leases", ns, q),
        (Method::GET, Some(name)) => match get_object_of(state, "leases", ns, name) {
            Some(lease) => ok_json(&lease),
            None => not_found(name),
        },
        (Method::POST, None) => {
            let Some(mut lease) = parsed() else {
                return status(400, "BadRequest", "the lease is not JSON");
            };
            let Some(name) = lease["metadata"]["name"].as_str().map(str::to_string) else {
                return status(
                    422,
                    "Invalid",
                    "Lease.coordination.k8s.io is invalid: metadata.name: Required value: name or generateName is required",
                );
            };
            if let Err((code, message)) = kube_rules::check_lease(&lease) {
                return status(
                    code,
                    if code == 400 { "BadRequest" } else { "Invalid" },
                    &message,
                );
            }
            let mut s = state.lock().unwrap();
            if !s
                .cluster
                .objects
                .contains_key(&("namespaces".into(), String::new(), ns.into()))
            {
                return status(404, "NotFound", &format!("namespaces \"{ns}\" not found"));
            }
            let key: Key = ("leases".into(), ns.into(), name.clone());
            if s.cluster.objects.contains_key(&key) {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("{QUALIFIED} \"{name}\" already exists"),
                );
            }
            lease["apiVersion"] = json!("coordination.k8s.io/v1");
            lease["kind"] = json!("Lease");
            lease["metadata"]["namespace"] = json!(ns);
            lease["metadata"]["uid"] = json!(s.cluster.uid());
            lease["metadata"]["creationTimestamp"] = json!(s.cluster.now());
            s.cluster.store(key.clone(), lease);
            let stored = s.cluster.objects[&key].clone();
            (
                StatusCode::CREATED,
                [(header::CONTENT_TYPE, "application/json")],
                stored.to_string(),
            )
                .into_response()
        }
        (Method::PUT, Some(name)) => {
            let Some(mut lease) = parsed() else {
                return status(400, "BadRequest", "the lease is not JSON");
            };
            let mut s = state.lock().unwrap();
            let key: Key = ("leases".into(), ns.into(), name.into());
            let Some(current) = s.cluster.objects.get(&key).cloned() else {
                return not_found(name);
            };
            let sent = lease["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or("")
                .to_string();
            if sent.is_empty() {
                return status(
                    422,
                    "Invalid",
                    &format!(
                        "Lease.coordination.k8s.io \"{name}\" is invalid: metadata.resourceVersion: Invalid value: 0x0: must be specified for an update"
                    ),
                );
            }
            if json!(sent) != current["metadata"]["resourceVersion"] {
                return conflict(QUALIFIED, name);
            }
            if let Err((code, message)) = kube_rules::check_lease(&lease) {
                return status(
                    code,
                    if code == 400 { "BadRequest" } else { "Invalid" },
                    &message,
                );
            }
            for field in ["uid", "creationTimestamp", "namespace", "name"] {
                lease["metadata"][field] = current["metadata"][field].clone();
            }
            lease["apiVersion"] = json!("coordination.k8s.io/v1");
            lease["kind"] = json!("Lease");
            s.cluster.store(key.clone(), lease);
            ok_json(&s.cluster.objects[&key])
        }
        (Method::DELETE, Some(name)) => {
            let mut s = state.lock().unwrap();
            let key: Key = ("leases".into(), ns.into(), name.into());
            let Some(current) = s.cluster.objects.get(&key).cloned() else {
                return not_found(name);
            };
            let wanted = parsed().and_then(|o| {
                o["preconditions"]["resourceVersion"]
                    .as_str()
                    .map(str::to_string)
            });
            if let Some(wanted) = wanted
                && json!(wanted) != current["metadata"]["resourceVersion"]
            {
                return status(
                    409,
                    "Conflict",
                    &format!(
                        "Operation cannot be fulfilled on {QUALIFIED} \"{name}\": Precondition failed: ResourceVersion in precondition: {wanted}, ResourceVersion in object meta: {}",
                        current["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default()
                    ),
                );
            }
            s.cluster.objects.remove(&key);
            ok_json(
                &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": "coordination.k8s.io", "kind": "leases",
                    "uid": current["metadata"]["uid"]}}),
            )
        }
        _ => status(
            405,
            "MethodNotAllowed",
            &format!(
                "the server does not allow this method on the requested resource ({method} {QUALIFIED})"
            ),
        ),
    }
}

fn get_object_of(state: &Arc<Mutex<State>>, resource: &str, ns: &str, name: &str) -> Option<Value> {
    state
        .lock()
        .unwrap()
        .cluster
        .objects
        .get(&(resource.into(), ns.into(), name.into()))
        .cloned()
}
