//! Send: move a module's behind machines to the record's artifact, each move recorded.

use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::progress::Emitter;
use super::target::{Delivery, Kube, TargetBackend, published_digest};
use crate::backends::cluster::WorkloadKind;
use crate::backends::daemon::LazyDaemon;
use crate::backends::history::{History, SendRow};
use crate::mesh::behind::Machine;
use crate::mesh::model::{Mesh, Record, RecordEntry};
use crate::timefmt;

/// One machine to move: from the artifact it runs to the record's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Move {
    pub module: String,
    pub machine: String,
    /// `container`, `Deployment`, `StatefulSet` or `DaemonSet`.
    pub kind: String,
    pub from: String,
    #[serde(rename = "to_ref")]
    pub to_reference: String,
    pub to_digest: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SendOutcome {
    #[serde(flatten)]
    pub moved: Move,
    pub ok: bool,
    pub message: String,
}

/// The behind (or held) machines of `module`, and where each goes.
pub fn moves_for(record: &Record, machines: &[Machine], module: &str) -> Vec<Move> {
    let Some(entry) = record.get(module) else {
        return Vec::new();
    };
    machines
        .iter()
        .filter(|m| m.module == module && m.state.is_behind())
        .map(|m| Move {
            module: module.to_string(),
            machine: m.name.clone(),
            kind: m.kind.clone(),
            from: m.running.first().cloned().unwrap_or_default(),
            to_reference: entry.reference.clone(),
            to_digest: entry.digest.clone(),
        })
        .collect()
}

/// Carry out `moves`, one machine at a time; every outcome is recorded.
pub async fn send(
    mesh: &Mesh,
    moves: &[Move],
    daemon: &LazyDaemon,
    target: &TargetBackend,
    history: &Arc<Mutex<History>>,
    emitter: &Emitter,
) -> Vec<SendOutcome> {
    let mut outcomes = Vec::new();
    // Before anything changes: may we patch these workloads?
    let kinds: Vec<WorkloadKind> = moves
        .iter()
        .filter_map(|m| match m.kind.as_str() {
            "Deployment" => Some(WorkloadKind::Deployment),
            "StatefulSet" => Some(WorkloadKind::StatefulSet),
            "DaemonSet" => Some(WorkloadKind::DaemonSet),
            _ => None,
        })
        .collect();
    if let Err(refused) = super::target::check_write_access(target, false, &kinds).await {
        for moved in moves {
            outcomes.push(SendOutcome {
                moved: moved.clone(),
                ok: false,
                message: refused.clone(),
            });
        }
        emitter.emit("refused", None, refused);
        return outcomes;
    }
    for moved in moves {
        emitter.emit(
            "send",
            Some(&moved.module),
            format!(
                "{}: {} → {}@{}",
                moved.machine, moved.from, moved.to_reference, moved.to_digest
            ),
        );
        let result = match target {
            TargetBackend::Docker => match daemon.get().await {
                Ok(daemon) => daemon
                    .recreate(&moved.machine, &moved.to_digest)
                    .await
                    .map_err(|e| e.to_string()),
                Err(error) => Err(error),
            },
            TargetBackend::Kubernetes(kube) => {
                send_kube(mesh, kube, target, history, moved, emitter).await
            }
        };
        let (ok, message) = match result {
            Ok(()) => (true, "moved".to_string()),
            Err(error) => (false, format!("failed: {error}")),
        };
        let row = SendRow {
            mesh: mesh.name.clone(),
            module: moved.module.clone(),
            machine: moved.machine.clone(),
            from_digest: moved.from.clone(),
            to_ref: moved.to_reference.clone(),
            to_digest: moved.to_digest.clone(),
            outcome: message.clone(),
            at_ms: timefmt::now_ms(),
            converge_id: Some(emitter.converge_id.clone()),
        };
        if let Ok(history) = history.lock()
            && let Err(error) = history.record_send(&row)
        {
            tracing::warn!("cannot record a send: {error}");
        }
        emitter.emit(
            "sent",
            Some(&moved.module),
            format!("{}: {message}", moved.machine),
        );
        outcomes.push(SendOutcome {
            moved: moved.clone(),
            ok,
            message,
        });
    }
    outcomes
}

/// Patch the workload (guarded by the image it was listed with), then follow its roll-out.
async fn send_kube(
    mesh: &Mesh,
    kube: &Kube,
    target: &TargetBackend,
    history: &Mutex<History>,
    moved: &Move,
    emitter: &Emitter,
) -> Result<(), String> {
    let find = |workloads: &[crate::backends::cluster::Workload]| {
        workloads
            .iter()
            .find(|w| w.kind.as_str() == moved.kind && w.name == moved.machine)
            .cloned()
    };
    let seen = kube.workloads.lock().ok().and_then(|w| find(&w));
    let workload = match seen {
        Some(w) => w,
        None => {
            let listed = kube.cluster.machines().await.map_err(|e| e.to_string())?;
            find(&listed).ok_or_else(|| {
                format!(
                    "{} {} is no longer in {}",
                    moved.kind,
                    moved.machine,
                    kube.cluster.place()
                )
            })?
        }
    };
    let entry = RecordEntry {
        reference: moved.to_reference.clone(),
        digest: moved.to_digest.clone(),
    };
    let (to_image, artifact) = match target.delivery()? {
        Delivery::Push(registry) => match published_digest(mesh, target, history, &entry).await {
            Some(digest) => (format!("{}@{digest}", entry.reference), None),
            None => {
                return Err(format!(
                    "{} is not published in registry {}: converge module {} first",
                    entry.reference, registry.host, moved.module
                ));
            }
        },
        Delivery::KindLoad(_) | Delivery::Host => {
            (entry.reference.clone(), Some(entry.digest.as_str()))
        }
    };
    kube.cluster
        .send(&workload, &to_image, artifact)
        .await
        .map_err(|e| e.to_string())?;
    emitter.emit(
        "rollout",
        Some(&moved.module),
        format!("{workload}: image {to_image}; following the roll-out"),
    );
    // kubectl's own words as progress; a failure carries its evidence in its message.
    let said = |message: &str| {
        emitter.emit(
            "rollout",
            Some(&moved.module),
            format!("{workload}: {message}"),
        );
    };
    kube.cluster
        .follow_rollout(&workload, kube.rollout, &said)
        .await
        .map(|_| ())
        .map_err(|error| error.to_string())
}

/// What a send of `module` would move: the record's entry for it, and its behind machines.
pub async fn prepare(
    mesh: &Mesh,
    module: &str,
    daemon: &LazyDaemon,
    target: &TargetBackend,
    history: &Mutex<History>,
) -> Result<Vec<Move>, String> {
    let record = super::target::read_record(mesh, target, history).await?;
    if !record.record.contains_key(module) {
        return Err(format!(
            "{} holds nothing for module {module}: converge it first",
            record.source
        ));
    }
    let machines = super::machines::list(mesh, &record.record, daemon, target, history).await?;
    Ok(moves_for(&record.record, &machines, module))
}

/// Carry out `moves` holding the mesh (a send never runs beside a converge of the same mesh).
pub async fn send_holding_mesh(
    mesh: &Mesh,
    moves: &[Move],
    daemon: &LazyDaemon,
    target: &TargetBackend,
    history: &Arc<Mutex<History>>,
    tx: Option<super::progress::ProgressTx>,
) -> Result<Vec<SendOutcome>, String> {
    let send_id = uuid::Uuid::now_v7().to_string();
    let holder = crate::backends::history::Holder::here(&send_id);
    super::engine::acquire(history, &mesh.name, &holder, false)
        .await
        .map_err(|e| e.to_string())?;
    let emitter = Emitter::new(history.clone(), &mesh.name, &send_id, tx);
    let outcomes = send(mesh, moves, daemon, target, history, &emitter).await;
    let moved = outcomes.iter().filter(|o| o.ok).count();
    emitter.finish(format!("send: {moved}/{} machine(s) moved", outcomes.len()));
    Ok(outcomes)
}
