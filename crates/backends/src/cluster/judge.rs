//! Where a roll-out stands, judged as `kubectl rollout status` judges it.
//!
//! A port of kubectl's `staging/src/k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go`
//! (`DeploymentStatusViewer`, `StatefulSetStatusViewer`, `DaemonSetStatusViewer`): the same order of checks
//! and the same messages (without kubectl's trailing newline), so meshtop and `kubectl rollout status` reach
//! the same verdict on the same object. Pure: no I/O.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, StatefulSet};

/// The reason the Deployment controller gives a Progressing=False condition once `progressDeadlineSeconds`
/// passed without progress (`deploymentutil.TimedOutReason`).
pub(crate) const TIMED_OUT_REASON: &str = "ProgressDeadlineExceeded";

/// kubectl's verdict on one read of a workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Not done yet: kubectl's "Waiting for …" message.
    Waiting(String),
    /// Rolled out: kubectl's success message.
    Done(String),
    /// kubectl gives up with this error (a Deployment that exceeded its progress deadline).
    Failed(String),
    /// kubectl cannot follow this strategy (OnDelete): the pods change only when they are deleted.
    OnDelete(String),
}

impl Verdict {
    pub(crate) fn message(&self) -> &str {
        match self {
            Verdict::Waiting(m) | Verdict::Done(m) | Verdict::Failed(m) | Verdict::OnDelete(m) => m,
        }
    }
}

/// `DeploymentStatusViewer.Status`: nothing is judged before the controller observed the current
/// generation, not even a ProgressDeadlineExceeded condition (it may be left from the previous roll-out).
pub(crate) fn deployment(d: &Deployment) -> Verdict {
    let name = d.metadata.name.as_deref().unwrap_or_default();
    let generation = d.metadata.generation.unwrap_or(0);
    let status = d.status.clone().unwrap_or_default();
    if generation > status.observed_generation.unwrap_or(0) {
        return Verdict::Waiting("Waiting for deployment spec update to be observed...".into());
    }
    let timed_out = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Progressing")
        .is_some_and(|c| c.reason.as_deref() == Some(TIMED_OUT_REASON));
    if timed_out {
        return Verdict::Failed(format!(
            "deployment {name:?} exceeded its progress deadline"
        ));
    }
    let updated = status.updated_replicas.unwrap_or(0);
    let replicas = status.replicas.unwrap_or(0);
    let available = status.available_replicas.unwrap_or(0);
    if let Some(wanted) = d.spec.as_ref().and_then(|s| s.replicas)
        && updated < wanted
    {
        return Verdict::Waiting(format!(
            "Waiting for deployment {name:?} rollout to finish: {updated} out of {wanted} new replicas have been updated..."
        ));
    }
    if replicas > updated {
        return Verdict::Waiting(format!(
            "Waiting for deployment {name:?} rollout to finish: {} old replicas are pending termination...",
            replicas - updated
        ));
    }
    if available < updated {
        return Verdict::Waiting(format!(
            "Waiting for deployment {name:?} rollout to finish: {available} of {updated} updated replicas are available..."
        ));
    }
    Verdict::Done(format!("deployment {name:?} successfully rolled out"))
}

/// The update strategy's type, defaulted as the apiserver defaults it (`RollingUpdate`).
fn strategy_type(t: Option<&str>) -> &str {
    t.filter(|t| !t.is_empty()).unwrap_or("RollingUpdate")
}

fn on_delete(kind: &str, name: &str) -> Verdict {
    Verdict::OnDelete(format!(
        "{kind} {name:?} uses the OnDelete update strategy: its pods change only when they are deleted \
         (kubectl: rollout status is only available for RollingUpdate strategy type)"
    ))
}

/// `StatefulSetStatusViewer.Status`: a partition is done when the pods from the partition up are updated;
/// without one, when the update revision became the current revision.
pub(crate) fn statefulset(s: &StatefulSet) -> Verdict {
    let name = s.metadata.name.as_deref().unwrap_or_default();
    let spec = s.spec.as_ref();
    let strategy = spec.and_then(|s| s.update_strategy.as_ref());
    if strategy_type(strategy.and_then(|u| u.type_.as_deref())) != "RollingUpdate" {
        return on_delete("statefulset", name);
    }
    let status = s.status.clone().unwrap_or_default();
    let observed = status.observed_generation.unwrap_or(0);
    if observed == 0 || s.metadata.generation.unwrap_or(0) > observed {
        return Verdict::Waiting("Waiting for statefulset spec update to be observed...".into());
    }
    let replicas = spec.and_then(|s| s.replicas);
    let ready = status.ready_replicas.unwrap_or(0);
    if let Some(wanted) = replicas
        && ready < wanted
    {
        return Verdict::Waiting(format!(
            "Waiting for {} pods to be ready...",
            wanted - ready
        ));
    }
    let updated = status.updated_replicas.unwrap_or(0);
    if let Some(rolling) = strategy.and_then(|u| u.rolling_update.as_ref()) {
        if let (Some(wanted), Some(partition)) = (replicas, rolling.partition)
            && updated < wanted - partition
        {
            return Verdict::Waiting(format!(
                "Waiting for partitioned roll out to finish: {updated} out of {} new pods have been updated...",
                wanted - partition
            ));
        }
        return Verdict::Done(format!(
            "partitioned roll out complete: {updated} new pods have been updated..."
        ));
    }
    let update_revision = status.update_revision.unwrap_or_default();
    let current_revision = status.current_revision.unwrap_or_default();
    if update_revision != current_revision {
        return Verdict::Waiting(format!(
            "waiting for statefulset rolling update to complete {updated} pods at revision {update_revision}..."
        ));
    }
    Verdict::Done(format!(
        "statefulset rolling update complete {} pods at revision {current_revision}...",
        status.current_replicas.unwrap_or(0)
    ))
}

/// `DaemonSetStatusViewer.Status`.
pub(crate) fn daemonset(d: &DaemonSet) -> Verdict {
    let name = d.metadata.name.as_deref().unwrap_or_default();
    let strategy = d.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    if strategy_type(strategy.and_then(|u| u.type_.as_deref())) != "RollingUpdate" {
        return on_delete("daemon set", name);
    }
    let status = d.status.clone().unwrap_or_default();
    if d.metadata.generation.unwrap_or(0) > status.observed_generation.unwrap_or(0) {
        return Verdict::Waiting("Waiting for daemon set spec update to be observed...".into());
    }
    let desired = status.desired_number_scheduled;
    let updated = status.updated_number_scheduled.unwrap_or(0);
    let available = status.number_available.unwrap_or(0);
    if updated < desired {
        return Verdict::Waiting(format!(
            "Waiting for daemon set {name:?} rollout to finish: {updated} out of {desired} new pods have been updated..."
        ));
    }
    if available < desired {
        return Verdict::Waiting(format!(
            "Waiting for daemon set {name:?} rollout to finish: {available} of {desired} updated pods are available..."
        ));
    }
    Verdict::Done(format!("daemon set {name:?} successfully rolled out"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn deploy(v: serde_json::Value) -> Deployment {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_stale_progress_deadline_is_not_judged_before_the_generation_is_observed() {
        let d = deploy(json!({"metadata": {"name": "api", "generation": 3},
            "spec": {"replicas": 2, "selector": {}, "template": {}},
            "status": {"observedGeneration": 2, "conditions": [{"type": "Progressing", "status": "False",
                "reason": "ProgressDeadlineExceeded"}]}}));
        assert_eq!(
            deployment(&d),
            Verdict::Waiting("Waiting for deployment spec update to be observed...".into())
        );
        let mut observed = d.clone();
        observed.status.as_mut().unwrap().observed_generation = Some(3);
        assert_eq!(
            deployment(&observed),
            Verdict::Failed("deployment \"api\" exceeded its progress deadline".into())
        );
    }

    #[test]
    fn deployment_messages_are_kubectls_in_its_order() {
        let at = |updated: i32, replicas: i32, available: i32| {
            deployment(&deploy(
                json!({"metadata": {"name": "api", "generation": 2},
                "spec": {"replicas": 2, "selector": {}, "template": {}},
                "status": {"observedGeneration": 2, "updatedReplicas": updated, "replicas": replicas,
                    "availableReplicas": available}}),
            ))
        };
        assert_eq!(
            at(1, 3, 2).message(),
            "Waiting for deployment \"api\" rollout to finish: 1 out of 2 new replicas have been updated..."
        );
        assert_eq!(
            at(2, 3, 2).message(),
            "Waiting for deployment \"api\" rollout to finish: 1 old replicas are pending termination..."
        );
        assert_eq!(
            at(2, 2, 1).message(),
            "Waiting for deployment \"api\" rollout to finish: 1 of 2 updated replicas are available..."
        );
        assert_eq!(
            at(2, 2, 2),
            Verdict::Done("deployment \"api\" successfully rolled out".into())
        );
    }

    fn sts(v: serde_json::Value) -> StatefulSet {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn statefulset_partition_on_delete_and_revisions() {
        let base = |strategy: serde_json::Value, status: serde_json::Value| {
            sts(json!({"metadata": {"name": "db", "generation": 2},
                "spec": {"replicas": 4, "selector": {}, "serviceName": "db", "template": {}, "updateStrategy": strategy},
                "status": status}))
        };
        let ready = json!({"observedGeneration": 2, "replicas": 4, "readyReplicas": 4, "updatedReplicas": 1,
            "currentReplicas": 3, "currentRevision": "db-a", "updateRevision": "db-b"});
        let partition =
            |p: i32| json!({"type": "RollingUpdate", "rollingUpdate": {"partition": p}});
        assert_eq!(
            statefulset(&base(partition(3), ready.clone())).message(),
            "partitioned roll out complete: 1 new pods have been updated..."
        );
        assert_eq!(
            statefulset(&base(partition(2), ready.clone())).message(),
            "Waiting for partitioned roll out to finish: 1 out of 2 new pods have been updated..."
        );
        assert_eq!(
            statefulset(&base(json!({}), ready.clone())).message(),
            "waiting for statefulset rolling update to complete 1 pods at revision db-b..."
        );
        assert!(matches!(
            statefulset(&base(json!({"type": "OnDelete"}), ready.clone())),
            Verdict::OnDelete(_)
        ));
        let mut unready = ready.clone();
        unready["readyReplicas"] = json!(3);
        assert_eq!(
            statefulset(&base(json!({}), unready)).message(),
            "Waiting for 1 pods to be ready..."
        );
        let mut unobserved = ready.clone();
        unobserved["observedGeneration"] = json!(1);
        assert_eq!(
            statefulset(&base(partition(0), unobserved)).message(),
            "Waiting for statefulset spec update to be observed..."
        );
        let mut done = ready;
        done["currentRevision"] = json!("db-b");
        done["currentReplicas"] = json!(4);
        assert_eq!(
            statefulset(&base(json!({}), done)),
            Verdict::Done("statefulset rolling update complete 4 pods at revision db-b...".into())
        );
    }

    #[test]
    fn daemonset_messages_and_on_delete() {
        let ds = |strategy: serde_json::Value, updated: i32, available: i32| {
            daemonset(&serde_json::from_value(json!({"metadata": {"name": "agent", "generation": 2},
                "spec": {"selector": {}, "template": {}, "updateStrategy": strategy},
                "status": {"observedGeneration": 2, "desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                    "numberMisscheduled": 0, "numberReady": available, "updatedNumberScheduled": updated,
                    "numberAvailable": available}})).unwrap())
        };
        assert_eq!(
            ds(json!({}), 2, 3).message(),
            "Waiting for daemon set \"agent\" rollout to finish: 2 out of 3 new pods have been updated..."
        );
        assert_eq!(
            ds(json!({}), 3, 2).message(),
            "Waiting for daemon set \"agent\" rollout to finish: 2 of 3 updated pods are available..."
        );
        assert_eq!(
            ds(json!({}), 3, 3),
            Verdict::Done("daemon set \"agent\" successfully rolled out".into())
        );
        assert!(matches!(
            ds(json!({"type": "OnDelete"}), 0, 3),
            Verdict::OnDelete(_)
        ));
    }
}
