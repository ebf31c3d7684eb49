//! Following a roll-out: the workload read until kubectl's verdict says done, or a failure carrying
//! its diagnosis (a paused Deployment, the progress deadline, a new pod's container that waits).

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};
use kube::Api;

use super::diagnose::Watched;
use super::revision::{Rolls, template_image};
use super::{FollowRules, RolloutDone};
use crate::cluster::judge::Verdict;
use crate::cluster::machines::{Workload, WorkloadKind};
use crate::cluster::{Cluster, ClusterError};

impl Cluster {
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

    pub(super) async fn follow_kind<K: Rolls>(
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
    pub(super) async fn failed_verdict<K: Rolls>(
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

    pub(super) fn paused(&self, w: &Workload) -> ClusterError {
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

    pub(super) fn failed(
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
}
