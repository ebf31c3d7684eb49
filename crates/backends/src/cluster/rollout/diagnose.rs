//! A new pod's container that waits, judged by the rules (a terminal reason at once, a transient one
//! or a back-off once it persisted) and named with its evidence: the waiting reason, the pod's
//! events, its log's tail.

use std::collections::HashMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::{ListParams, LogParams};

use super::revision::NewRevision;
use super::{BACKOFF_REASONS, FAILING_REASONS, FollowRules, TRANSIENT_REASONS};
use crate::cluster::machines::Workload;
use crate::cluster::{Cluster, ClusterError};

/// How many events and log lines a diagnosis carries.
pub(super) const EVENTS_KEPT: usize = 5;
pub(super) const LOG_LINES: i64 = 20;
/// How many of a crashing container's last log lines the live line shows.
pub(super) const SHOWN_LOG_LINES: usize = 3;
/// A transient reason fails only when it was seen on at least this many consecutive polls …
pub(super) const TRANSIENT_POLLS: u32 = 3;
/// One container of a new pod seen waiting: since when, on how many reads, with which reason.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    reason: String,
    since: tokio::time::Instant,
    polls: u32,
    /// What was last shown about it (shown again only when it changes).
    shown: String,
}

pub(super) type Watched = HashMap<(String, String), Seen>;

/// One container of a new pod, seen waiting.
#[derive(Clone, Copy)]
pub(super) struct Sight<'a> {
    pod: &'a str,
    container: &'a str,
    image: &'a str,
    reason: &'a str,
    message: &'a str,
    restarts: i32,
}

/// A rule's duration as a person reads it: `60s`, `0.2s`.
pub(super) fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// The last `n` non-empty lines of a log, as one line.
pub(super) fn last_lines(log: &str, n: usize) -> String {
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" / ")
}

/// A named diagnosis for a waiting reason, beside which the raw evidence is always shown.
pub(super) fn diagnose(reason: &str, image: &str, evidence: &str) -> String {
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
    /// The first container of a new-revision pod that waits for a reason that fails the roll-out: a
    /// terminal one at once, a transient one ([`TRANSIENT_REASONS`]) once it persisted, a back-off
    /// ([`BACKOFF_REASONS`]) once it persisted by the rules (shown through `show` meanwhile). Without
    /// `show`, any reason is reported at once: the roll-out already failed and this is its evidence.
    pub(super) async fn failing_pod(
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
    pub(super) async fn still_waiting(
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
    pub(super) async fn waiting_failure(
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
    pub(in crate::cluster) async fn events_of(&self, kind: &str, object: &str) -> Vec<String> {
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

    pub(super) async fn log_tail(
        &self,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Option<String> {
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
