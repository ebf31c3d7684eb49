//! A small Kubernetes API server on loopback for the real `kube` client: namespaces, apps/v1 workloads,
//! pods, events and pod logs, with resourceVersion preconditions and JSON-patch `test` failures.
//! It counts requests per path and has hooks to set state. Tests only; never in the shipped binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::Barrier;

use meshtop::backends::cluster::Cluster;

use super::kube_objects::{field_selector_matches, label_selector_matches, labels_match, query};

type Key = (String, String, String); // (resource, namespace, name); namespaces have namespace ""

#[derive(Default)]
struct State {
    objects: BTreeMap<Key, Value>,
    resource_version: u64,
    requests: HashMap<String, usize>,
    statuses: HashMap<u16, usize>,
    logs: HashMap<(String, String), String>,
    /// Workload key → GETs left until its roll-out is marked done.
    complete_after: HashMap<Key, usize>,
    /// Namespace reads still to gather at the barrier (see `sync_next_namespace_reads`).
    gate: Option<(usize, Arc<Barrier>)>,
}

impl State {
    fn bump(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }
}

pub struct KubeApi {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn kind_of(resource: &str) -> (&'static str, &'static str) {
    match resource {
        "deployments" => ("apps/v1", "Deployment"),
        "statefulsets" => ("apps/v1", "StatefulSet"),
        "daemonsets" => ("apps/v1", "DaemonSet"),
        "pods" => ("v1", "Pod"),
        "events" => ("v1", "Event"),
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
        KubeApi { addr, state, task }
    }

    /// A real `kube` client pointed at this server.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(format!("http://{}", self.addr).parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    pub fn cluster(&self, namespace: &str) -> Cluster {
        Cluster::from_client(self.client(), "test-context", namespace)
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

    /// Store an object (sets namespace, resourceVersion, and generation 1 when absent).
    pub fn put(&self, resource: &str, namespace: &str, mut object: Value) {
        let mut state = self.state.lock().unwrap();
        let rv = state.bump();
        let (api_version, kind) = kind_of(resource);
        object["apiVersion"] = json!(api_version);
        object["kind"] = json!(kind);
        let metadata = &mut object["metadata"];
        metadata["resourceVersion"] = json!(rv);
        if !namespace.is_empty() {
            metadata["namespace"] = json!(namespace);
        }
        if metadata.get("generation").is_none() {
            metadata["generation"] = json!(1);
        }
        let name = metadata["name"]
            .as_str()
            .expect("object has metadata.name")
            .to_string();
        state
            .objects
            .insert((resource.into(), namespace.into(), name), object);
    }

    pub fn get(&self, resource: &str, namespace: &str, name: &str) -> Option<Value> {
        self.state
            .lock()
            .unwrap()
            .objects
            .get(&(resource.into(), namespace.into(), name.into()))
            .cloned()
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
        state.statuses.clear();
    }

    /// The next `n` namespace GETs wait for each other, so they all see the same resourceVersion.
    pub fn sync_next_namespace_reads(&self, n: usize) {
        self.state.lock().unwrap().gate = Some((n, Arc::new(Barrier::new(n))));
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
            .objects
            .get(&(resource.into(), namespace.into(), workload.into()))
            .cloned()
            .unwrap();
        let selector = object["spec"]["selector"]["matchLabels"].clone();
        for ((res, ns, _), pod) in state.objects.iter_mut() {
            if res != "pods"
                || ns != namespace
                || !labels_match(&selector, &pod["metadata"]["labels"])
            {
                continue;
            }
            for cs in pod["status"]["containerStatuses"]
                .as_array_mut()
                .into_iter()
                .flatten()
            {
                cs["ready"] = json!(false);
                cs["state"] = json!({"waiting": {"reason": reason, "message": message}});
            }
        }
    }

    /// The workload's status says its current generation rolled out to every replica.
    pub fn mark_rollout_done(&self, resource: &str, namespace: &str, name: &str) {
        let mut state = self.state.lock().unwrap();
        let object = state
            .objects
            .get_mut(&(resource.into(), namespace.into(), name.into()))
            .unwrap();
        mark_done(resource, object);
    }

    /// After `reads` more GETs of the workload, its roll-out is done.
    pub fn complete_rollout_after_reads(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        reads: usize,
    ) {
        let key = (resource.into(), namespace.into(), name.into());
        self.state.lock().unwrap().complete_after.insert(key, reads);
    }

    pub fn add_event(&self, namespace: &str, involved: &str, reason: &str, message: &str) {
        let n = self.state.lock().unwrap().resource_version;
        let event = json!({"metadata": {"name": format!("{involved}.{n}")},
            "involvedObject": {"name": involved, "namespace": namespace},
            "reason": reason, "message": message, "type": "Warning"});
        self.put("events", namespace, event);
    }

    pub fn set_pod_log(&self, namespace: &str, pod: &str, text: &str) {
        self.state
            .lock()
            .unwrap()
            .logs
            .insert((namespace.into(), pod.into()), text.into());
    }
}

fn mark_done(resource: &str, object: &mut Value) {
    let generation = object["metadata"]["generation"].clone();
    let status = &mut object["status"];
    status["observedGeneration"] = generation;
    if resource == "daemonsets" {
        let desired = status["desiredNumberScheduled"].clone();
        for field in [
            "updatedNumberScheduled",
            "numberAvailable",
            "numberReady",
            "currentNumberScheduled",
        ] {
            status[field] = desired.clone();
        }
    } else {
        let replicas = object["spec"]["replicas"].clone();
        let status = &mut object["status"];
        for field in [
            "replicas",
            "updatedReplicas",
            "availableReplicas",
            "readyReplicas",
        ] {
            status[field] = replicas.clone();
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
    *state
        .lock()
        .unwrap()
        .requests
        .entry(path.clone())
        .or_default() += 1;
    let response = route(&state, &method, &uri, &headers, &body).await;
    *state
        .lock()
        .unwrap()
        .statuses
        .entry(response.status().as_u16())
        .or_default() += 1;
    response
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
    match (method.clone(), parts.as_slice()) {
        (Method::GET, ["api", "v1", "namespaces", name]) => {
            let gate = {
                let mut s = state.lock().unwrap();
                match s.gate.take() {
                    Some((n, barrier)) => {
                        if n > 1 {
                            s.gate = Some((n - 1, barrier.clone()));
                        }
                        Some(barrier)
                    }
                    None => None,
                }
            };
            if let Some(barrier) = gate {
                barrier.wait().await;
            }
            get_object(state, "namespaces", "", name)
        }
        (Method::PATCH, ["api", "v1", "namespaces", name]) => {
            patch_object(state, "namespaces", "", name, headers, body)
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
            let log = state
                .lock()
                .unwrap()
                .logs
                .get(&(ns.to_string(), pod.to_string()))
                .cloned();
            match log {
                Some(text) => {
                    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], text).into_response()
                }
                None => status(
                    400,
                    "BadRequest",
                    &format!("container in pod {pod} is waiting to start"),
                ),
            }
        }
        (Method::GET, ["apis", "apps", "v1", "namespaces", ns, resource]) => {
            list(state, resource, ns, &q)
        }
        (Method::GET, ["apis", "apps", "v1", "namespaces", ns, resource, name]) => {
            let key: Key = (resource.to_string(), ns.to_string(), name.to_string());
            {
                let mut s = state.lock().unwrap();
                if let Some(left) = s.complete_after.get_mut(&key) {
                    *left = left.saturating_sub(1);
                    if *left == 0 {
                        s.complete_after.remove(&key);
                        if let Some(object) = s.objects.get_mut(&key) {
                            mark_done(resource, object);
                        }
                    }
                }
            }
            get_object(state, resource, ns, name)
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

fn get_object(state: &Arc<Mutex<State>>, resource: &str, ns: &str, name: &str) -> Response {
    match state
        .lock()
        .unwrap()
        .objects
        .get(&(resource.into(), ns.into(), name.into()))
    {
        Some(object) => ok_json(object),
        None => status(404, "NotFound", &format!("{resource} \"{name}\" not found")),
    }
}

fn list(
    state: &Arc<Mutex<State>>,
    resource: &str,
    ns: &str,
    q: &HashMap<String, String>,
) -> Response {
    let s = state.lock().unwrap();
    let items: Vec<Value> = s
        .objects
        .iter()
        .filter(|((r, n, _), _)| r == resource && n == ns)
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
    let (api_version, kind) = kind_of(resource);
    ok_json(
        &json!({"apiVersion": api_version, "kind": format!("{kind}List"),
        "metadata": {"resourceVersion": s.resource_version.to_string()}, "items": items}),
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
    let Some(current) = s.objects.get(&key).cloned() else {
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
    } else if content_type.starts_with("application/merge-patch+json")
        || content_type.starts_with("application/strategic-merge-patch+json")
    {
        if let Some(wanted) = patch["metadata"]["resourceVersion"].as_str()
            && Some(wanted) != current["metadata"]["resourceVersion"].as_str()
        {
            return status(
                409,
                "Conflict",
                &format!(
                    "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                ),
            );
        }
        json_patch::merge(&mut updated, &patch);
    } else {
        return status(
            415,
            "UnsupportedMediaType",
            &format!("unsupported patch type {content_type:?}"),
        );
    }
    if updated["spec"] != current["spec"] {
        let generation = current["metadata"]["generation"].as_i64().unwrap_or(1) + 1;
        updated["metadata"]["generation"] = json!(generation);
    }
    updated["metadata"]["resourceVersion"] = json!(s.bump());
    s.objects.insert(key, updated.clone());
    ok_json(&updated)
}
