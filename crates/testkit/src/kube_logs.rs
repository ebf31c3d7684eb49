//! `GET /api/v1/namespaces/{ns}/pods/{pod}/log` of the Kubernetes API test server, as the apiserver and
//! the kubelet answer it:
//! - the options are validated first (`pkg/apis/core/validation/validation.go` ValidatePodLogOptions:
//!   422 for a negative `tailLines`, a `sinceSeconds` under 1, both `sinceSeconds` and `sinceTime`);
//! - the pod must exist (404) and the container be chosen (`pkg/registry/core/pod/strategy.go`
//!   LogLocation → validateContainer: none named in a pod of several is 400 `a container name must be
//!   specified for pod P, choose one of: [a b]`, a name the pod lacks 400 `container c is not valid for
//!   pod P`); a pod never scheduled has no node to ask: 200 and nothing (`pkg/registry/core/pod/rest/
//!   log.go` streams from an empty location);
//! - the kubelet picks the run (`pkg/kubelet/kubelet_pods.go` validateContainerLogStatus: `previous`
//!   reads `lastState.terminated`'s container or is 400 `previous terminated container "c" in pod "p"
//!   not found`; else the running container, else the last terminated one, else 400 `container "c" in
//!   pod "p" is waiting to start: …`); its 400 reaches the client as the apiserver's BadRequest
//!   (`staging/src/k8s.io/apiserver/pkg/registry/generic/rest/response_checker.go`);
//! - the lines come from the container's log (`pkg/kubelet/kuberuntime/logs/logs.go` ReadLogs):
//!   the newest `tailLines` first cut, then those before `sinceSeconds`/`sinceTime` skipped, each
//!   prefixed with its RFC3339Nano time under `timestamps`; `follow` keeps the chunked response open and
//!   sends lines as the container prints them, and ends once the container is no longer running
//!   (waitLogs' isContainerRunning) and its log is read to the end.
// A refusal is the very response the request gets, made once: boxing it would buy nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::result_large_err)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::{State, status};

/// What a request asked (`PodLogOptions` from the query).
struct Options {
    container: Option<String>,
    follow: bool,
    previous: bool,
    tail: Option<usize>,
    since_ns: Option<i64>,
    timestamps: bool,
}

fn flag(q: &HashMap<String, String>, name: &str) -> bool {
    q.get(name).is_some_and(|v| v == "true" || v == "1")
}

fn invalid(pod: &str, field: &str, value: &str, why: &str) -> Response {
    status(
        422,
        "Invalid",
        &format!("PodLogOptions \"{pod}\" is invalid: {field}: Invalid value: {value}: {why}"),
    )
}

fn options(pod: &str, q: &HashMap<String, String>, now_ns: i64) -> Result<Options, Response> {
    let number = |name: &str| -> Result<Option<i64>, Response> {
        match q.get(name) {
            None => Ok(None),
            Some(text) => text.parse::<i64>().map(Some).map_err(|_| {
                status(
                    400,
                    "BadRequest",
                    &format!("{name}: invalid value {text:?}: not a number"),
                )
            }),
        }
    };
    let tail = number("tailLines")?;
    if let Some(t) = tail.filter(|t| *t < 0) {
        return Err(invalid(
            pod,
            "tailLines",
            &t.to_string(),
            "must be greater than or equal to 0",
        ));
    }
    let since_seconds = number("sinceSeconds")?;
    if let Some(s) = since_seconds.filter(|s| *s < 1) {
        return Err(invalid(
            pod,
            "sinceSeconds",
            &s.to_string(),
            "must be greater than 0",
        ));
    }
    let since_time = q.get("sinceTime");
    if since_seconds.is_some() && since_time.is_some() {
        return Err(status(
            422,
            "Invalid",
            &format!(
                "PodLogOptions \"{pod}\" is invalid: : Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
            ),
        ));
    }
    let since_ns = match (since_seconds, since_time) {
        (Some(s), _) => Some(now_ns - s * 1_000_000_000),
        (None, Some(t)) => Some(
            chrono::DateTime::parse_from_rfc3339(t)
                .map_err(|_| status(400, "BadRequest", &format!("sinceTime: invalid time {t:?}")))?
                .timestamp_nanos_opt()
                .unwrap_or(0),
        ),
        (None, None) => None,
    };
    Ok(Options {
        container: q.get("container").filter(|c| !c.is_empty()).cloned(),
        follow: flag(q, "follow"),
        previous: flag(q, "previous"),
        tail: tail.map(|t| t as usize),
        since_ns,
        timestamps: flag(q, "timestamps"),
    })
}

/// validateContainer: the container named, or the pod's only one.
fn container_of(pod_name: &str, pod: &Value, asked: Option<String>) -> Result<String, Response> {
    let names: Vec<String> = ["initContainers", "containers"]
        .iter()
        .flat_map(|list| pod["spec"][list].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["name"].as_str().map(str::to_string))
        .collect();
    let containers = pod["spec"]["containers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    match asked {
        Some(name) if names.contains(&name) => Ok(name),
        Some(name) => Err(status(
            400,
            "BadRequest",
            &format!("container {name} is not valid for pod {pod_name}"),
        )),
        None if containers.len() == 1 => {
            Ok(containers[0]["name"].as_str().unwrap_or("").to_string())
        }
        None if containers.is_empty() => Err(status(
            400,
            "BadRequest",
            &format!("a container name must be specified for pod {pod_name}"),
        )),
        // Go prints a []string as `[a b]`.
        None => Err(status(
            400,
            "BadRequest",
            &format!(
                "a container name must be specified for pod {pod_name}, choose one of: [{}]",
                names.join(" ")
            ),
        )),
    }
}

/// The container's status among the pod's (init containers too).
fn status_of<'a>(pod: &'a Value, container: &str) -> Option<&'a Value> {
    ["containerStatuses", "initContainerStatuses"]
        .iter()
        .filter_map(|list| pod["status"][list].as_array())
        .flatten()
        .find(|cs| cs["name"] == container)
}

fn id_in(state: &Value) -> Option<String> {
    state["containerID"]
        .as_str()
        .filter(|id| !id.is_empty())
        .map(str::to_string)
}

/// validateContainerLogStatus: which run of the container is read (its container id).
fn run_of(pod_name: &str, pod: &Value, container: &str, previous: bool) -> Result<String, String> {
    let Some(cs) = status_of(pod, container) else {
        return Err(format!(
            "container {container:?} in pod {pod_name:?} is not available"
        ));
    };
    let last = &cs["lastState"]["terminated"];
    let state = &cs["state"];
    let terminated = || format!("container {container:?} in pod {pod_name:?} is terminated");
    if previous {
        return id_in(last).ok_or_else(|| {
            format!("previous terminated container {container:?} in pod {pod_name:?} not found")
        });
    }
    if state["running"].is_object() {
        // A running container the test made without an id has printed nothing yet.
        return Ok(id_in(cs).unwrap_or_default());
    }
    if state["terminated"].is_object() {
        return id_in(&state["terminated"])
            .or_else(|| id_in(last))
            .ok_or_else(terminated);
    }
    if last.is_object() {
        return id_in(last).ok_or_else(terminated);
    }
    match state["waiting"]["reason"].as_str() {
        Some("ErrImagePull") => Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: image can't be pulled"
        )),
        Some("ImagePullBackOff") => Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: trying and failing to pull image"
        )),
        Some(reason) => Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start: {reason}"
        )),
        None => Err(format!(
            "container {container:?} in pod {pod_name:?} is waiting to start - no logs yet"
        )),
    }
}

/// Whether the run `id` of the container still runs (a follow ends when it does not).
fn still_running(pod: Option<&Value>, container: &str, id: &str) -> bool {
    pod.and_then(|p| status_of(p, container))
        .is_some_and(|cs| cs["state"]["running"].is_object() && id_in(cs).unwrap_or_default() == id)
}

/// Go's RFC3339Nano: the fraction without its trailing zeros.
pub(super) fn rfc3339_nano(ns: i64) -> String {
    let at = chrono::DateTime::from_timestamp(ns.div_euclid(1_000_000_000), 0).unwrap();
    let base = at.format("%Y-%m-%dT%H:%M:%S");
    let fraction = format!("{:09}", ns.rem_euclid(1_000_000_000));
    let fraction = fraction.trim_end_matches('0');
    if fraction.is_empty() {
        format!("{base}Z")
    } else {
        format!("{base}.{fraction}Z")
    }
}

fn render(lines: &[(i64, String)], timestamps: bool, since_ns: Option<i64>) -> String {
    let mut out = String::new();
    for (at, text) in lines {
        if since_ns.is_some_and(|since| *at < since) {
            continue;
        }
        if timestamps {
            out.push_str(&rfc3339_nano(*at));
            out.push(' ');
        }
        out.push_str(text);
        out.push('\n');
    }
    out
}

pub(super) fn pod_log(
    state: &Arc<Mutex<State>>,
    ns: &str,
    pod_name: &str,
    q: &HashMap<String, String>,
) -> Response {
    let s = state.lock().unwrap();
    let opts = match options(pod_name, q, s.cluster.now_ns()) {
        Ok(opts) => opts,
        Err(response) => return response,
    };
    let key = ("pods".to_string(), ns.to_string(), pod_name.to_string());
    let Some(pod) = s.cluster.objects.get(&key) else {
        return status(404, "NotFound", &format!("pods \"{pod_name}\" not found"));
    };
    let container = match container_of(pod_name, pod, opts.container.clone()) {
        Ok(container) => container,
        Err(response) => return response,
    };
    let unscheduled = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "PodScheduled" && c["status"] == "False");
    if unscheduled {
        return text_response(Body::empty());
    }
    let id = match run_of(pod_name, pod, &container, opts.previous) {
        Ok(id) => id,
        Err(message) => return status(400, "BadRequest", &message),
    };
    let all = s.cluster.logs.lines.get(&id).cloned().unwrap_or_default();
    let from = opts.tail.map_or(0, |t| all.len().saturating_sub(t));
    let first = render(&all[from..], opts.timestamps, opts.since_ns);
    if !opts.follow || !still_running(Some(pod), &container, &id) {
        return text_response(Body::from(first));
    }
    drop(s);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let follow = Follow {
        state: state.clone(),
        key,
        container,
        id,
        read: all.len(),
        timestamps: opts.timestamps,
    };
    tokio::spawn(follow.run(first, tx));
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    text_response(Body::from_stream(stream))
}

fn text_response(body: Body) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "text/plain")], body).into_response()
}

/// A follow: the lines the container prints from `read` on, until it stops running.
struct Follow {
    state: Arc<Mutex<State>>,
    key: super::Key,
    container: String,
    id: String,
    read: usize,
    timestamps: bool,
}

impl Follow {
    async fn run(
        mut self,
        first: String,
        tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    ) {
        // The kubelet's first (zero-byte) write opens the response; what the tail holds comes at once.
        if tx.send(Ok(Bytes::from(first))).await.is_err() {
            return;
        }
        loop {
            let changed = self.state.lock().unwrap().cluster.logs.changed.clone();
            // Made before reading, so a change between the read and the wait still wakes it.
            let notified = changed.notified();
            let (more, running) = {
                let s = self.state.lock().unwrap();
                let lines = s
                    .cluster
                    .logs
                    .lines
                    .get(&self.id)
                    .cloned()
                    .unwrap_or_default();
                let more = render(&lines[self.read.min(lines.len())..], self.timestamps, None);
                self.read = lines.len();
                let pod = s.cluster.objects.get(&self.key);
                (more, still_running(pod, &self.container, &self.id))
            };
            if !more.is_empty() && tx.send(Ok(Bytes::from(more))).await.is_err() {
                return;
            }
            if !running {
                return;
            }
            tokio::select! {
                () = notified => {}
                () = tx.closed() => return,
                // The kubelet checks every so often whatever it was told (logForceCheckPeriod).
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
            }
        }
    }
}
