//! Send (a guarded JSON patch of the container's image) and following the roll-out to done or a diagnosis.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{ListParams, LogParams, Patch, PatchParams};
use serde_json::json;

use super::machines::{Kind, Workload, WorkloadKind};
use super::{ARTIFACT_ANNOTATION, Cluster, ClusterError, status_code};

/// Waiting reasons that mean a roll-out will not finish by itself.
pub const FAILING_REASONS: &[&str] = &[
    "ImagePullBackOff",
    "ErrImagePull",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
];

/// How many events and log lines a diagnosis carries.
const EVENTS_KEPT: usize = 5;
const LOG_LINES: i64 = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolloutDone {
    pub workload: String,
    pub replicas: i32,
    /// How many times the workload was read until it was done.
    pub polls: u32,
}

/// Where a roll-out stands, whatever the kind.
#[derive(Debug, Clone, Default)]
struct Progress {
    generation: i64,
    observed_generation: i64,
    desired: i32,
    updated: i32,
    available: i32,
    /// Replicas that exist at all (old and new); None when the kind does not say.
    existing: Option<i32>,
    /// The Progressing=False condition's message, when the deadline was exceeded.
    deadline_exceeded: Option<String>,
}

impl Progress {
    fn done(&self) -> bool {
        self.observed_generation >= self.generation
            && self.updated >= self.desired
            && self.available >= self.desired
            && self.existing.is_none_or(|n| n <= self.desired)
    }
}

trait Rolls: Kind {
    fn progress(&self) -> Progress;
}

impl Rolls for Deployment {
    fn progress(&self) -> Progress {
        let status = self.status.clone().unwrap_or_default();
        let deadline_exceeded = status.conditions.iter().flatten().find_map(|c| {
            (c.type_ == "Progressing"
                && c.status == "False"
                && c.reason.as_deref() == Some("ProgressDeadlineExceeded"))
            .then(|| {
                c.message
                    .clone()
                    .unwrap_or_else(|| "ProgressDeadlineExceeded".into())
            })
        });
        Progress {
            generation: self.metadata.generation.unwrap_or(0),
            observed_generation: status.observed_generation.unwrap_or(0),
            desired: self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            updated: status.updated_replicas.unwrap_or(0),
            available: status.available_replicas.unwrap_or(0),
            existing: Some(status.replicas.unwrap_or(0)),
            deadline_exceeded,
        }
    }
}

impl Rolls for StatefulSet {
    fn progress(&self) -> Progress {
        let status = self.status.clone().unwrap_or_default();
        Progress {
            generation: self.metadata.generation.unwrap_or(0),
            observed_generation: status.observed_generation.unwrap_or(0),
            desired: self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
            updated: status.updated_replicas.unwrap_or(0),
            available: status
                .available_replicas
                .or(status.ready_replicas)
                .unwrap_or(0),
            existing: Some(status.replicas),
            deadline_exceeded: None,
        }
    }
}

impl Rolls for DaemonSet {
    fn progress(&self) -> Progress {
        let status = self.status.clone().unwrap_or_default();
        Progress {
            generation: self.metadata.generation.unwrap_or(0),
            observed_generation: status.observed_generation.unwrap_or(0),
            desired: status.desired_number_scheduled,
            updated: status.updated_number_scheduled.unwrap_or(0),
            available: status.number_available.unwrap_or(0),
            existing: None,
            deadline_exceeded: None,
        }
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
        let current = api
            .get(&w.name)
            .await
            .map_err(|e| self.api_error(format!("get {w}"), e))?;
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
            let has_annotations = template
                .and_then(|t| t.metadata.as_ref())
                .and_then(|m| m.annotations.as_ref())
                .is_some();
            let has_metadata = template.and_then(|t| t.metadata.as_ref()).is_some();
            ops.push(if has_annotations {
                json!({"op": "add", "path": "/spec/template/metadata/annotations/jr2.dev~1artifact", "value": artifact})
            } else if has_metadata {
                json!({"op": "add", "path": "/spec/template/metadata/annotations", "value": {ARTIFACT_ANNOTATION: artifact}})
            } else {
                json!({"op": "add", "path": "/spec/template/metadata", "value": {"annotations": {ARTIFACT_ANNOTATION: artifact}}})
            });
        }
        let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
            .map_err(|e| ClusterError::Config {
                context: Some(self.context.clone()),
                message: format!("cannot build the JSON patch: {e}"),
            })?;
        match api
            .patch(&w.name, &PatchParams::default(), &Patch::Json::<()>(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if matches!(status_code(&e), Some(409 | 422)) => {
                let running = api
                    .get(&w.name)
                    .await
                    .ok()
                    .and_then(|k| {
                        let shape = k.shape();
                        let spec = shape.template?.spec.as_ref()?;
                        spec.containers
                            .iter()
                            .find(|c| c.name == w.container)?
                            .image
                            .clone()
                    })
                    .unwrap_or_else(|| "(unknown)".into());
                if running == w.image {
                    return Err(self.api_error(format!("patch {w}"), e));
                }
                Err(ClusterError::Conflict {
                    workload: w.to_string(),
                    running,
                    detail: format!("expected {:?} in container {:?}", w.image, w.container),
                })
            }
            Err(e) => Err(self.api_error(format!("patch {w}"), e)),
        }
    }

    /// Follow a roll-out to done, or to a failure carrying its diagnosis (waiting reason, events, log tail).
    pub async fn follow_rollout(
        &self,
        w: &Workload,
        deadline: Duration,
        poll: Duration,
    ) -> Result<RolloutDone, ClusterError> {
        match w.kind {
            WorkloadKind::Deployment => self.follow_kind::<Deployment>(w, deadline, poll).await,
            WorkloadKind::StatefulSet => self.follow_kind::<StatefulSet>(w, deadline, poll).await,
            WorkloadKind::DaemonSet => self.follow_kind::<DaemonSet>(w, deadline, poll).await,
        }
    }

    async fn follow_kind<K: Rolls>(
        &self,
        w: &Workload,
        deadline: Duration,
        poll: Duration,
    ) -> Result<RolloutDone, ClusterError> {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        let started = tokio::time::Instant::now();
        let mut polls = 0;
        loop {
            polls += 1;
            let progress = api
                .get(&w.name)
                .await
                .map_err(|e| self.api_error(format!("get {w}"), e))?
                .progress();
            if progress.done() {
                return Ok(RolloutDone {
                    workload: w.to_string(),
                    replicas: progress.desired,
                    polls,
                });
            }
            if let Some(message) = progress.deadline_exceeded {
                let events = self.events_of(&w.name).await;
                return Err(self.failed(
                    w,
                    format!("ProgressDeadlineExceeded: {message}"),
                    events,
                    None,
                ));
            }
            if let Some(failure) = self.failing_pod(w).await? {
                return Err(failure);
            }
            if started.elapsed() >= deadline {
                let events = self.events_of(&w.name).await;
                let reason = format!(
                    "not done within {}s: {}/{} updated, {}/{} available, generation {} observed {}",
                    deadline.as_secs(),
                    progress.updated,
                    progress.desired,
                    progress.available,
                    progress.desired,
                    progress.generation,
                    progress.observed_generation
                );
                return Err(self.failed(w, reason, events, None));
            }
            tokio::time::sleep(poll).await;
        }
    }

    fn failed(
        &self,
        w: &Workload,
        reason: String,
        events: Vec<String>,
        log_tail: Option<String>,
    ) -> ClusterError {
        ClusterError::RolloutFailed {
            workload: format!("{w} in {}", self.place()),
            reason,
            events,
            log_tail,
        }
    }

    /// The first pod of the workload whose container waits for a reason that will not go away by itself.
    async fn failing_pod(&self, w: &Workload) -> Result<Option<ClusterError>, ClusterError> {
        let Some(selector) = &w.selector else {
            return Ok(None);
        };
        let pods = self
            .list_all::<Pod>(&ListParams::default().labels(selector))
            .await?;
        for pod in &pods {
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
            for cs in statuses.chain(inits) {
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
                let mut text = format!("{reason} in pod {pod_name} container {}", cs.name);
                if let Some(message) = waiting.message.as_deref().filter(|m| !m.is_empty()) {
                    text.push_str(&format!(": {message}"));
                }
                let events = self.events_of(pod_name).await;
                let log_tail = self
                    .log_tail(pod_name, &cs.name, reason == "CrashLoopBackOff")
                    .await;
                return Ok(Some(self.failed(w, text, events, log_tail)));
            }
        }
        Ok(None)
    }

    /// The last events about an object, as `Reason: message` (best effort: a failing call gives none).
    async fn events_of(&self, object: &str) -> Vec<String> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let params = ListParams::default().fields(&format!("involvedObject.name={object}"));
        let Ok(list) = api.list(&params).await else {
            return Vec::new();
        };
        let mut events = list.items;
        events.sort_by_key(|e| {
            e.last_timestamp
                .clone()
                .or(e.first_timestamp.clone())
                .map(|t| t.0)
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
        api.logs(pod, &params)
            .await
            .ok()
            .filter(|l| !l.trim().is_empty())
    }
}
