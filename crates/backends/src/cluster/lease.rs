//! The mesh's lock on Kubernetes: a `coordination.k8s.io/v1` Lease named `meshtop-<mesh>` in the
//! mesh's namespace, where every teammate's meshtop meets (a state file is one person's).
//!
//! Taken, renewed and released as client-go's leader election does (`staging/src/k8s.io/client-go/
//! tools/leaderelection/leaderelection.go` tryAcquireOrRenew and release, `resourcelock/leaselock.go`):
//! create it when absent; otherwise replace it, guarded by the resourceVersion just read, only when it
//! is free (released), expired (renewTime + leaseDurationSeconds passed) or already ours. When two race,
//! the apiserver lets one write through and answers the other 409; the loser reads the winner.
//! client-go measures expiry from the moment it first observed a record; a command that runs once cannot
//! wait a full duration to observe, so it compares the holder's renewTime with its own clock (team
//! machines' clocks agree within seconds; the duration is minutes).

use std::collections::BTreeMap;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;

use super::access::Needed;
use super::{Cluster, ClusterError, status_code};

/// The Lease's name is this prefix and the mesh's name (mesh names are DNS labels already).
pub const LEASE_PREFIX: &str = "meshtop-";
/// The API group of the Lease (what an RBAC rule for it names).
const LEASE_GROUP: &str = "coordination.k8s.io";
/// Annotations on the Lease naming its holder (holderIdentity names them too, for kubectl).
pub const LEASE_HOST: &str = "jr2.dev/host";
pub const LEASE_PID: &str = "jr2.dev/pid";
pub const LEASE_KIND: &str = "jr2.dev/operation-kind";
pub const LEASE_OPERATION: &str = "jr2.dev/operation-id";
/// The holder's short id (`142` for `#142`), numbered by the holder's own state file.
pub const LEASE_SHORT: &str = "jr2.dev/operation";

/// How many read-then-write rounds one take, renew or release tries before it says the Lease kept
/// changing under it.
const ATTEMPTS: u32 = 5;

/// The Lease of a mesh.
pub fn lease_name(mesh: &str) -> String {
    format!("{LEASE_PREFIX}{mesh}")
}

/// One operation holding (or asking for) a mesh's Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHolder {
    pub host: String,
    pub pid: u32,
    /// converge, force, send, rollback, gc.
    pub kind: String,
    /// The operation's full uuid.
    pub operation_id: String,
    /// Its short id in its holder's state file (`#142`), when it has one.
    pub short: Option<i64>,
    /// When it took the Lease (acquireTime).
    pub acquired_ms: i64,
    /// Its last renewal (renewTime).
    pub renewed_ms: i64,
    /// leaseDurationSeconds: how long after a renewal it may be taken over.
    pub duration_s: i32,
}

impl LeaseHolder {
    /// The Lease's holderIdentity: host, process, operation kind and id; unique per operation.
    pub fn identity(&self) -> String {
        format!(
            "{}/{}/{}/{}",
            self.host, self.pid, self.kind, self.operation_id
        )
    }

    /// Whether its last renewal is older than its duration at `now_ms`.
    pub fn expired_at(&self, now_ms: i64) -> bool {
        now_ms > self.renewed_ms + i64::from(self.duration_s) * 1000
    }

    /// `send #12`, or `send 0190abcd` without a short id.
    pub fn operation_label(&self) -> String {
        match self.short {
            Some(n) => format!("{} #{n}", self.kind),
            None => format!(
                "{} {}",
                self.kind,
                self.operation_id.chars().take(8).collect::<String>()
            ),
        }
    }

    /// `send #12 (host h, process 7, since 12:01:02)` for messages.
    pub fn describe(&self) -> String {
        format!(
            "{} (host {}, process {}, since {})",
            self.operation_label(),
            self.host,
            self.pid,
            crate::timefmt::local_time(self.acquired_ms)
        )
    }
}

/// What a take found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseTake {
    /// The Lease is ours now; `from` is the expired holder it was taken over from.
    Taken { from: Option<LeaseHolder> },
    /// Someone else holds it and its renewal is within its duration.
    Busy(LeaseHolder),
}

impl Cluster {
    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    async fn read_lease(&self, name: &str) -> Result<Option<Lease>, ClusterError> {
        self.call(format!("get lease {name}"), self.leases().get_opt(name))
            .await
    }

    /// Replace the Lease as read (its resourceVersion is the guard): `Ok(false)` on a conflict.
    async fn replace_lease(&self, name: &str, lease: &Lease) -> Result<bool, ClusterError> {
        let what = format!("update lease {name}");
        match self
            .timed(self.leases().replace(name, &PostParams::default(), lease))
            .await
        {
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) if status_code(&e) == Some(409) => Ok(false),
            Ok(Err(e)) => Err(self.api_error(what, e)),
            Err(()) => Err(self.timeout_error(what)),
        }
    }

    /// Who holds the mesh's Lease now, alive or expired (None: no Lease, or it was released).
    pub async fn lease_holder(&self, mesh: &str) -> Result<Option<LeaseHolder>, ClusterError> {
        let lease = self.read_lease(&lease_name(mesh)).await?;
        Ok(lease.as_ref().and_then(holder_of))
    }

    /// Take the mesh's Lease for `me`: create it, or replace it when it is free, expired, ours, or
    /// held by an operation `gone` says is certainly gone (its process ended on this host). An
    /// identity the API server forbids the Lease is told which lease verbs it lacks, as the other
    /// permissions are (`check_access`), before anything is built or changed.
    pub async fn take_lease(
        &self,
        mesh: &str,
        me: &LeaseHolder,
        gone: &(dyn Fn(&LeaseHolder) -> bool + Send + Sync),
    ) -> Result<LeaseTake, ClusterError> {
        match self.try_take_lease(mesh, me, gone).await {
            Err(ClusterError::Api {
                what,
                context,
                source,
            }) if status_code(&source) == Some(403) => {
                let needed: Vec<Needed> = ["get", "create", "update"]
                    .into_iter()
                    .map(|verb| Needed::namespaced(verb, LEASE_GROUP, "leases"))
                    .collect();
                match self.check_access(&needed).await {
                    Err(forbidden @ ClusterError::Forbidden { .. }) => Err(forbidden),
                    _ => Err(ClusterError::Api {
                        what,
                        context,
                        source,
                    }),
                }
            }
            taken => taken,
        }
    }

    async fn try_take_lease(
        &self,
        mesh: &str,
        me: &LeaseHolder,
        gone: &(dyn Fn(&LeaseHolder) -> bool + Send + Sync),
    ) -> Result<LeaseTake, ClusterError> {
        let name = lease_name(mesh);
        for _ in 0..ATTEMPTS {
            let now = crate::timefmt::now_ms();
            let Some(current) = self.read_lease(&name).await? else {
                let lease = lease_object(&name, me, now, now, 0);
                let what = format!("create lease {name}");
                match self
                    .timed(self.leases().create(&PostParams::default(), &lease))
                    .await
                {
                    Ok(Ok(_)) => return Ok(LeaseTake::Taken { from: None }),
                    // Someone created it between our read and our create: read who.
                    Ok(Err(e)) if status_code(&e) == Some(409) => continue,
                    Ok(Err(e)) => return Err(self.api_error(what, e)),
                    Err(()) => return Err(self.timeout_error(what)),
                }
            };
            let held = holder_of(&current);
            let ours = is_ours(&current, me);
            if let Some(holder) = &held
                && !ours
                && !holder.expired_at(now)
                && !gone(holder)
            {
                return Ok(LeaseTake::Busy(holder.clone()));
            }
            let transitions = current
                .spec
                .as_ref()
                .and_then(|s| s.lease_transitions)
                .unwrap_or(0);
            let (acquired, transitions) = match &held {
                Some(holder) if ours => (holder.acquired_ms, transitions),
                _ => (now, transitions + 1),
            };
            let lease = rewritten(current, me, acquired, now, transitions);
            if self.replace_lease(&name, &lease).await? {
                return Ok(LeaseTake::Taken {
                    from: held.filter(|_| !ours),
                });
            }
        }
        Err(self.lease_contention(&name))
    }

    /// Renew `me`'s hold on the mesh. `LeaseLost` (naming who holds it now) when the Lease is no
    /// longer ours: the operation must stop before its next write.
    pub async fn renew_lease(&self, mesh: &str, me: &LeaseHolder) -> Result<(), ClusterError> {
        let name = lease_name(mesh);
        for _ in 0..ATTEMPTS {
            let current = self.read_lease(&name).await?;
            let Some(current) = current.filter(|l| is_ours(l, me)) else {
                return Err(ClusterError::LeaseLost {
                    lease: name,
                    namespace: self.namespace.clone(),
                    operation: me.operation_label(),
                    taken_by: self.lease_holder(mesh).await.ok().flatten().map(Box::new),
                });
            };
            let now = crate::timefmt::now_ms();
            let acquired = holder_of(&current).map_or(now, |h| h.acquired_ms);
            let transitions = current.spec.as_ref().and_then(|s| s.lease_transitions);
            let lease = rewritten(current, me, acquired, now, transitions.unwrap_or(0));
            if self.replace_lease(&name, &lease).await? {
                return Ok(());
            }
        }
        Err(self.lease_contention(&name))
    }

    /// Give the mesh back if `me` holds it (as client-go's release: the holder is cleared, the Lease
    /// stays with a one-second duration); a Lease someone else holds is left alone.
    pub async fn release_lease(&self, mesh: &str, me: &LeaseHolder) -> Result<(), ClusterError> {
        let name = lease_name(mesh);
        for _ in 0..ATTEMPTS {
            let current = self.read_lease(&name).await?;
            let Some(mut lease) = current.filter(|l| is_ours(l, me)) else {
                return Ok(());
            };
            let now = micro_time(crate::timefmt::now_ms());
            let transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions);
            lease.spec = Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: transitions,
                ..LeaseSpec::default()
            });
            if let Some(annotations) = lease.metadata.annotations.as_mut() {
                for key in HOLDER_ANNOTATIONS {
                    annotations.remove(key);
                }
            }
            if self.replace_lease(&name, &lease).await? {
                return Ok(());
            }
        }
        Err(self.lease_contention(&name))
    }

    fn lease_contention(&self, name: &str) -> ClusterError {
        ClusterError::LeaseContention {
            lease: name.to_string(),
            namespace: self.namespace.clone(),
            attempts: ATTEMPTS,
        }
    }
}

const HOLDER_ANNOTATIONS: [&str; 5] = [
    LEASE_HOST,
    LEASE_PID,
    LEASE_KIND,
    LEASE_OPERATION,
    LEASE_SHORT,
];

fn is_ours(lease: &Lease, me: &LeaseHolder) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        == Some(me.identity().as_str())
}

fn micro_time(ms: i64) -> MicroTime {
    MicroTime(Timestamp::from_millisecond(ms).unwrap_or(Timestamp::UNIX_EPOCH))
}

fn millis(time: Option<&MicroTime>) -> Option<i64> {
    time.map(|t| t.0.as_millisecond())
}

/// `me`'s annotations over the ones the Lease has (a teammate's own annotations stay).
fn holder_annotations(
    mut annotations: BTreeMap<String, String>,
    me: &LeaseHolder,
) -> BTreeMap<String, String> {
    annotations.insert(LEASE_HOST.into(), me.host.clone());
    annotations.insert(LEASE_PID.into(), me.pid.to_string());
    annotations.insert(LEASE_KIND.into(), me.kind.clone());
    annotations.insert(LEASE_OPERATION.into(), me.operation_id.clone());
    match me.short {
        Some(n) => annotations.insert(LEASE_SHORT.into(), n.to_string()),
        None => annotations.remove(LEASE_SHORT),
    };
    annotations
}

fn holder_spec(me: &LeaseHolder, acquired_ms: i64, now_ms: i64, transitions: i32) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(me.identity()),
        lease_duration_seconds: Some(me.duration_s),
        acquire_time: Some(micro_time(acquired_ms)),
        renew_time: Some(micro_time(now_ms)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    }
}

/// A new Lease held by `me`.
fn lease_object(
    name: &str,
    me: &LeaseHolder,
    acquired_ms: i64,
    now_ms: i64,
    transitions: i32,
) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            annotations: Some(holder_annotations(BTreeMap::new(), me)),
            ..ObjectMeta::default()
        },
        spec: Some(holder_spec(me, acquired_ms, now_ms, transitions)),
    }
}

/// The Lease as read (its resourceVersion kept: the guard), now held by `me`.
fn rewritten(
    mut lease: Lease,
    me: &LeaseHolder,
    acquired_ms: i64,
    now_ms: i64,
    transitions: i32,
) -> Lease {
    let annotations = lease.metadata.annotations.take().unwrap_or_default();
    lease.metadata.annotations = Some(holder_annotations(annotations, me));
    lease.spec = Some(holder_spec(me, acquired_ms, now_ms, transitions));
    lease
}

/// The holder a Lease names (None when its holderIdentity is empty: released). A Lease written by
/// something other than meshtop names its identity as the host.
pub fn holder_of(lease: &Lease) -> Option<LeaseHolder> {
    let spec = lease.spec.as_ref()?;
    let identity = spec.holder_identity.as_deref().filter(|i| !i.is_empty())?;
    let annotations = lease.metadata.annotations.clone().unwrap_or_default();
    let parts: Vec<&str> = identity.splitn(4, '/').collect();
    let part = |i: usize| parts.get(i).filter(|_| parts.len() == 4).copied();
    let named = |key: &str, i: usize, default: &str| {
        annotations
            .get(key)
            .cloned()
            .or_else(|| part(i).map(str::to_string))
            .unwrap_or_else(|| default.to_string())
    };
    let renewed_ms = millis(spec.renew_time.as_ref()).unwrap_or(0);
    Some(LeaseHolder {
        host: named(LEASE_HOST, 0, identity),
        pid: named(LEASE_PID, 1, "0").parse().unwrap_or(0),
        kind: named(LEASE_KIND, 2, "operation"),
        operation_id: named(LEASE_OPERATION, 3, identity),
        short: annotations.get(LEASE_SHORT).and_then(|s| s.parse().ok()),
        acquired_ms: millis(spec.acquire_time.as_ref()).unwrap_or(renewed_ms),
        renewed_ms,
        duration_s: spec.lease_duration_seconds.unwrap_or(0),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn me() -> LeaseHolder {
        LeaseHolder {
            host: "host-a".into(),
            pid: 42,
            kind: "send".into(),
            operation_id: "0190-uuid".into(),
            short: Some(7),
            acquired_ms: 1_000_000,
            renewed_ms: 1_000_000,
            duration_s: 120,
        }
    }

    #[test]
    fn a_lease_written_for_a_holder_reads_back_as_that_holder() {
        let lease = lease_object("meshtop-demo", &me(), 1_000_000, 1_000_000, 0);
        assert_eq!(holder_of(&lease), Some(me()));
        assert!(is_ours(&lease, &me()));
        let other = LeaseHolder { pid: 43, ..me() };
        assert!(!is_ours(&lease, &other));
    }

    #[test]
    fn expiry_counts_from_the_last_renewal() {
        let holder = me();
        assert!(!holder.expired_at(1_000_000 + 120_000));
        assert!(holder.expired_at(1_000_000 + 120_001));
    }

    #[test]
    fn a_foreign_identity_reads_as_its_host_and_a_released_lease_as_nobody() {
        let mut lease = lease_object("meshtop-demo", &me(), 0, 0, 0);
        lease.metadata.annotations = None;
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = Some("kube-controller-manager_abc".into());
        }
        let holder = holder_of(&lease).unwrap();
        assert_eq!(holder.host, "kube-controller-manager_abc");
        assert_eq!(holder.kind, "operation");
        if let Some(spec) = lease.spec.as_mut() {
            spec.holder_identity = Some(String::new());
        }
        assert_eq!(holder_of(&lease), None);
    }

    #[test]
    fn the_identity_alone_names_host_process_and_operation() {
        let mut lease = lease_object("meshtop-demo", &me(), 0, 0, 0);
        lease.metadata.annotations = None;
        let holder = holder_of(&lease).unwrap();
        assert_eq!(
            (holder.host.as_str(), holder.pid, holder.kind.as_str()),
            ("host-a", 42, "send")
        );
        assert_eq!(holder.operation_id, "0190-uuid");
        assert_eq!(holder.operation_label(), "send 0190-uui");
    }
}
