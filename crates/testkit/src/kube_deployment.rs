//! The Deployment controller and the ReplicaSet controller of the API test server, one step at a time,
//! as `pkg/controller/deployment/` and `pkg/controller/replicaset/` do it:
//! - `rolling.go` rolloutRolling: reconcileNewReplicaSet scales the new ReplicaSet up to
//!   `deploymentutil.NewRSNewReplicas` (never more than replicas + maxSurge pods counted by the
//!   ReplicaSets' spec.replicas); reconcileOldReplicaSets scales the old ones down, unhealthy replicas
//!   first (cleanupUnhealthyReplicas), then as far as availability allows (availablePodCount −
//!   (replicas − maxUnavailable)), never while the new ReplicaSet's own pods are unavailable beyond the
//!   budget (`maxScaledDown`). maxSurge rounds up, maxUnavailable down, both 0 makes maxUnavailable 1
//!   (`deploymentutil.ResolveFenceposts`); `Recreate` (`recreate.go`) scales the old to 0 and waits for
//!   their pods to be gone before scaling the new up.
//! - `sync.go` calculateStatus: replicas/updated/ready/available counted from the ReplicaSets' pods, a
//!   pod available once Ready for `minReadySeconds` (`podutil.IsPodAvailable`); the `Available` condition
//!   `MinimumReplicasAvailable` / `MinimumReplicasUnavailable` (available ≥ replicas − maxUnavailable);
//! - `progress.go` syncRolloutStatus: `Progressing` `NewReplicaSetCreated` when the new ReplicaSet is made,
//!   `ReplicaSetUpdated` on progress (`deploymentutil.DeploymentProgressing`), `NewReplicaSetAvailable`
//!   once complete (`DeploymentComplete`), `ProgressDeadlineExceeded` once the test's clock passed the
//!   deadline without progress; conditions written as `SetDeploymentCondition` writes them (a changed
//!   one moves to the end, lastTransitionTime kept while its status stays).
//! - the ReplicaSet controller (`replica_set.go` manageReplicas): creates or deletes pods to its
//!   spec.replicas, deleting the least useful first (`controller.ActivePods`: not ready before ready,
//!   newer before older).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};

use super::{Cluster, Key};

/// The revision annotation on a Deployment and its ReplicaSets.
pub(super) const REVISION: &str = "deployment.kubernetes.io/revision";

/// `intstr.GetScaledValueFromIntOrPercent`: an int, or a percent of `total` rounded up or down.
fn scaled(value: &Value, default: &str, total: i64, round_up: bool) -> i64 {
    let text = match value {
        Value::Number(n) => return n.as_i64().unwrap_or(0),
        Value::String(s) => s.as_str(),
        _ => default,
    };
    match text.strip_suffix('%').and_then(|p| p.parse::<i64>().ok()) {
        Some(percent) if round_up => (percent * total + 99) / 100,
        Some(percent) => percent * total / 100,
        None => text.parse().unwrap_or(0),
    }
}

fn rolling(d: &Value) -> bool {
    d["spec"]["strategy"]["type"]
        .as_str()
        .unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

fn replicas_of(o: &Value) -> i64 {
    o["spec"]["replicas"].as_i64().unwrap_or(1)
}

/// `deploymentutil.ResolveFenceposts`: (maxSurge, maxUnavailable) in pods.
pub(super) fn fenceposts(d: &Value) -> (i64, i64) {
    if !rolling(d) {
        return (0, 0);
    }
    let replicas = replicas_of(d);
    let update = &d["spec"]["strategy"]["rollingUpdate"];
    let surge = scaled(&update["maxSurge"], "25%", replicas, true);
    let mut unavailable = scaled(&update["maxUnavailable"], "25%", replicas, false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    (surge, unavailable)
}

/// `deploymentutil.MaxUnavailable`: never more than replicas, 0 unless RollingUpdate.
fn max_unavailable(d: &Value) -> i64 {
    let replicas = replicas_of(d);
    if !rolling(d) || replicas == 0 {
        return 0;
    }
    fenceposts(d).1.min(replicas)
}

/// What one ReplicaSet's pods are, as its controller counts them.
#[derive(Debug, Clone, Default)]
struct Counts {
    replicas: i64,
    ready: i64,
    available: i64,
}

impl Cluster {
    /// The ReplicaSets the Deployment owns (by uid), oldest revision first.
    fn owned_sets(&self, key: &Key) -> Vec<Key> {
        let uid = &self.objects[key]["metadata"]["uid"];
        let mut sets: Vec<(i64, Key)> = self
            .objects
            .iter()
            .filter(|((r, ns, _), rs)| {
                r == "replicasets"
                    && *ns == key.1
                    && rs["metadata"]["ownerReferences"][0]["uid"] == *uid
            })
            .map(|(k, rs)| {
                let revision = rs["metadata"]["annotations"][REVISION]
                    .as_str()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0);
                (revision, k.clone())
            })
            .collect();
        sets.sort();
        sets.into_iter().map(|(_, k)| k).collect()
    }

    fn new_set(&self, key: &Key) -> Key {
        let hash = Self::template_hash(&self.objects[key]["spec"]["template"]);
        (
            "replicasets".into(),
            key.1.clone(),
            format!("{}-{hash}", key.2),
        )
    }

    /// The active pods of a ReplicaSet (its selector: the Deployment's and its pod-template-hash).
    fn pods_of_set(&self, rs: &Key) -> Vec<Key> {
        let selector = self.objects[rs]["spec"]["selector"]["matchLabels"].clone();
        self.active(&self.selected(&rs.1, &selector))
    }

    /// `podutil.IsPodAvailable`: Ready, and Ready for `min_ready` seconds of the test's clock (a pod
    /// a test stored as running, without a Ready condition, has been ready for ever).
    fn pod_available(&self, pod: &Value, min_ready: i64) -> bool {
        if !Self::pod_ready(pod) {
            return false;
        }
        if min_ready <= 0 {
            return true;
        }
        let since = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .and_then(|c| c["lastTransitionTime"].as_str())
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
        match since {
            None => true,
            Some(since) => self.clock_seconds() - since.timestamp() >= min_ready,
        }
    }

    fn counts(&self, rs: &Key, min_ready: i64) -> Counts {
        let pods = self.pods_of_set(rs);
        let ready = pods
            .iter()
            .filter(|p| Self::pod_ready(&self.objects[*p]))
            .count() as i64;
        let available = pods
            .iter()
            .filter(|p| self.pod_available(&self.objects[*p], min_ready))
            .count() as i64;
        Counts {
            replicas: pods.len() as i64,
            ready,
            available,
        }
    }

    fn scale(&mut self, rs: &Key, replicas: i64) {
        let mut set = self.objects[rs].clone();
        if set["spec"]["replicas"] != json!(replicas) {
            set["spec"]["replicas"] = json!(replicas);
            self.store(rs.clone(), set);
        }
    }

    /// The ReplicaSet controller's step: pods created or deleted to spec.replicas.
    fn replicaset_step(&mut self, deployment: &Key, rs: &Key) {
        let want = self.objects[rs]["spec"]["replicas"].as_i64().unwrap_or(0);
        let mut pods = self.pods_of_set(rs);
        let have = pods.len() as i64;
        if have < want {
            let template = self.objects[rs]["spec"]["template"].clone();
            let hash = rs.2.rsplit('-').next().unwrap_or_default().to_string();
            for _ in have..want {
                self.create_pod_of(deployment, &template, &hash, None);
            }
        } else if have > want {
            // controller.ActivePods: the least useful first — not ready before ready, newer before older.
            pods.sort_by_key(|p| {
                let pod = &self.objects[p];
                let created = pod["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                (Self::pod_ready(pod), std::cmp::Reverse(created))
            });
            for pod in pods.iter().take((have - want) as usize) {
                self.mark_terminating(pod);
            }
        }
    }

    /// The ReplicaSet's status as its controller writes it from its pods.
    fn write_set_status(&mut self, rs: &Key, min_ready: i64) {
        let counts = self.counts(rs, min_ready);
        let mut set = self.objects[rs].clone();
        set["status"] = json!({"replicas": counts.replicas, "fullyLabeledReplicas": counts.replicas,
            "readyReplicas": counts.ready, "availableReplicas": counts.available,
            "observedGeneration": set["metadata"]["generation"].as_i64().unwrap_or(1)});
        if self.objects[rs] != set {
            self.store(rs.clone(), set);
        }
    }

    /// One step of the Deployment controller (and of the ReplicaSet controller and kubelet under it).
    pub(super) fn deployment_step(&mut self, key: &Key) {
        if self.paused_step(key) || self.observe(key) {
            return;
        }
        let d = self.objects[key].clone();
        let min_ready = d["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
        let sets = self.owned_sets(key);
        let selector = d["spec"]["selector"]["matchLabels"].clone();
        // The kubelet acts on the pods that existed before this step; the ReplicaSet controller carries
        // out what the last step decided (a pod it creates now starts at the next step).
        let existing = self.active(&self.selected(&key.1, &selector));
        for pod in existing {
            self.kubelet_sync(&pod);
        }
        for rs in &sets {
            self.replicaset_step(key, rs);
            self.write_set_status(rs, min_ready);
        }
        let new = self.new_set(key);
        let old: Vec<Key> = sets.iter().filter(|k| **k != new).cloned().collect();
        if rolling(&d) {
            if !self.reconcile_new(key, &new, &sets) {
                self.reconcile_old(key, &new, &old, &sets);
            }
        } else {
            self.recreate(key, &new, &old);
        }
        self.write_status(key);
        let status = &self.objects[key]["status"];
        let asked = self.spec_replicas(&sets);
        let seen = (
            asked,
            status["availableReplicas"].as_i64().unwrap_or(0),
            status["updatedReplicas"].as_i64().unwrap_or(0),
        );
        self.trace.entry(key.clone()).or_default().push(seen);
    }

    fn spec_replicas(&self, sets: &[Key]) -> i64 {
        sets.iter()
            .map(|k| self.objects[k]["spec"]["replicas"].as_i64().unwrap_or(0))
            .sum()
    }

    /// `reconcileNewReplicaSet` with `NewRSNewReplicas`: whether it scaled.
    fn reconcile_new(&mut self, key: &Key, new: &Key, sets: &[Key]) -> bool {
        let d = &self.objects[key];
        let replicas = replicas_of(d);
        let (surge, _) = fenceposts(d);
        let current = self.objects[new]["spec"]["replicas"].as_i64().unwrap_or(0);
        if current == replicas {
            return false;
        }
        if current > replicas {
            self.scale(new, replicas);
            return true;
        }
        let total = self.spec_replicas(sets);
        let max_total = replicas + surge;
        if total >= max_total {
            return false;
        }
        let up = (max_total - total).min(replicas - current);
        self.scale(new, current + up);
        true
    }

    /// `reconcileOldReplicaSets`: cleanupUnhealthyReplicas, then scaleDownOldReplicaSetsForRollingUpdate.
    fn reconcile_old(&mut self, key: &Key, new: &Key, old: &[Key], sets: &[Key]) {
        let d = self.objects[key].clone();
        let min_ready = d["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
        if self.spec_replicas(old) == 0 {
            return;
        }
        let all = self.spec_replicas(sets);
        let min_available = replicas_of(&d) - max_unavailable(&d);
        let new_spec = self.objects[new]["spec"]["replicas"].as_i64().unwrap_or(0);
        let new_unavailable = new_spec - self.counts(new, min_ready).available;
        let max_scaled_down = all - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            return;
        }
        // Unhealthy old replicas go first: they count for nothing.
        let mut cleaned = 0;
        for rs in old {
            if cleaned >= max_scaled_down {
                break;
            }
            let spec = self.objects[rs]["spec"]["replicas"].as_i64().unwrap_or(0);
            let available = self.counts(rs, min_ready).available;
            if spec == available {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(spec - available);
            self.scale(rs, spec - down);
            cleaned += down;
        }
        // Then as far as availability allows.
        let available: i64 = sets
            .iter()
            .map(|rs| {
                let spec = self.objects[rs]["spec"]["replicas"].as_i64().unwrap_or(0);
                self.counts(rs, min_ready).available.min(spec)
            })
            .sum();
        if available <= min_available {
            return;
        }
        let mut budget = available - min_available;
        for rs in old {
            if budget == 0 {
                break;
            }
            let spec = self.objects[rs]["spec"]["replicas"].as_i64().unwrap_or(0);
            let down = spec.min(budget);
            if down > 0 {
                self.scale(rs, spec - down);
                budget -= down;
            }
        }
    }

    /// `recreate.go`: old ReplicaSets to 0, then (their pods gone) the new one to replicas.
    fn recreate(&mut self, key: &Key, new: &Key, old: &[Key]) {
        let mut scaled = false;
        for rs in old {
            if self.objects[rs]["spec"]["replicas"].as_i64().unwrap_or(0) > 0 {
                self.scale(rs, 0);
                scaled = true;
            }
        }
        let old_pods: usize = old
            .iter()
            .map(|rs| {
                self.selected(
                    &rs.1,
                    &self.objects[rs]["spec"]["selector"]["matchLabels"].clone(),
                )
                .len()
            })
            .sum();
        if !scaled && old_pods == 0 {
            let replicas = replicas_of(&self.objects[key]);
            self.scale(new, replicas);
        }
    }

    /// `calculateStatus` and `syncRolloutStatus` for a Deployment.
    pub(super) fn deployment_status(&self, key: &Key) -> Value {
        let d = &self.objects[key];
        let min_ready = d["spec"]["minReadySeconds"].as_i64().unwrap_or(0);
        let sets = self.owned_sets(key);
        let new = self.new_set(key);
        let mut total = Counts::default();
        for rs in &sets {
            let c = self.counts(rs, min_ready);
            total.replicas += c.replicas;
            total.ready += c.ready;
            total.available += c.available;
        }
        let updated = if self.objects.contains_key(&new) {
            self.counts(&new, min_ready).replicas
        } else {
            0
        };
        let replicas = replicas_of(d);
        let spec_total = self.spec_replicas(&sets);
        let old = &d["status"];
        let mut status = old.clone();
        if !status.is_object() {
            status = json!({});
        }
        status["replicas"] = json!(total.replicas);
        status["updatedReplicas"] = json!(updated);
        status["readyReplicas"] = json!(total.ready);
        status["availableReplicas"] = json!(total.available);
        status["unavailableReplicas"] = json!((spec_total - total.available).max(0));
        let now = self.now();
        if total.available >= replicas - max_unavailable(d) {
            set_condition(
                &mut status,
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.",
                &now,
            );
        } else {
            set_condition(
                &mut status,
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.",
                &now,
            );
        }
        let paused = d["spec"]["paused"] == json!(true);
        let deadline = d["spec"]["progressDeadlineSeconds"]
            .as_i64()
            .is_some_and(|s| s != i64::from(i32::MAX));
        if deadline && !paused {
            let reason = condition(&status, "Progressing")["reason"].clone();
            let finished = total.replicas == updated && reason == "NewReplicaSetAvailable";
            let generation = d["metadata"]["generation"].as_i64().unwrap_or(1);
            let observed = status["observedGeneration"].as_i64().unwrap_or(0);
            let complete = updated == replicas
                && total.replicas == replicas
                && total.available == replicas
                && observed >= generation;
            let count = |s: &Value, f: &str| s[f].as_i64().unwrap_or(0);
            let progressing = count(&status, "updatedReplicas") > count(old, "updatedReplicas")
                || count(&status, "replicas") - count(&status, "updatedReplicas")
                    < count(old, "replicas") - count(old, "updatedReplicas")
                || count(&status, "readyReplicas") > count(old, "readyReplicas")
                || count(&status, "availableReplicas") > count(old, "availableReplicas");
            let rs = &new.2;
            if finished {
            } else if complete {
                set_condition(
                    &mut status,
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    &format!("ReplicaSet {rs:?} has successfully progressed."),
                    &now,
                );
            } else if progressing {
                set_condition(
                    &mut status,
                    "Progressing",
                    "True",
                    "ReplicaSetUpdated",
                    &format!("ReplicaSet {rs:?} is progressing."),
                    &now,
                );
            } else if self.deadline_passed.contains(key) && reason != "ProgressDeadlineExceeded" {
                set_condition(
                    &mut status,
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    &format!("ReplicaSet {rs:?} has timed out progressing."),
                    &now,
                );
            }
        }
        status
    }
}

/// The condition of `type` in a status (Null when absent).
pub fn condition<'a>(status: &'a Value, kind: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

/// `deploymentutil.SetDeploymentCondition`: unchanged when status and reason are; else the old one of
/// that type removed and the new appended, keeping lastTransitionTime when the status did not change.
pub(super) fn set_condition(
    status: &mut Value,
    kind: &str,
    state: &str,
    reason: &str,
    message: &str,
    now: &str,
) {
    let current = condition(status, kind).clone();
    if current["status"] == state && current["reason"] == reason {
        return;
    }
    let transition = if current["status"] == state {
        current["lastTransitionTime"].clone()
    } else {
        json!(now)
    };
    let mut conditions: Vec<Value> = status["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["type"] != kind)
        .collect();
    conditions.push(
        json!({"type": kind, "status": state, "reason": reason, "message": message,
        "lastUpdateTime": now, "lastTransitionTime": transition}),
    );
    status["conditions"] = json!(conditions);
}
