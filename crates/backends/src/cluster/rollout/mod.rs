//! Send (a guarded JSON patch of the container's image) and following the roll-out to done or a diagnosis.
//!
//! The verdict is kubectl's (see `judge.rs`, a port of kubectl's
//! `staging/src/k8s.io/kubectl/pkg/polymorphichelpers/rollout_status.go`). A failure is diagnosed only from
//! the pods of the NEW revision — a Deployment's new ReplicaSet (`pod-template-hash`), a StatefulSet's
//! `status.updateRevision` or a DaemonSet's newest ControllerRevision (`controller-revision-hash`) — and never
//! from terminating pods: old pods crash-looping while a fix rolls out are what the fix is for.
//!
//! `send.rs` the guarded patch · `follow.rs` reading the workload to kubectl's verdict · `revision.rs`
//! which pods are the new revision's · `diagnose.rs` a new pod's waiting container, its events and log,
//! named. This file holds the rules they share.

mod diagnose;
mod follow;
mod revision;
mod send;

use std::time::Duration;

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
