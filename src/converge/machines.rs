//! The machines of a mesh on its target, each with its state against the record.

use crate::backends::daemon::LazyDaemon;
use crate::backends::daemon::containers::{Container, NewContainer};
use crate::backends::state::StateDb;
use crate::mesh::behind::{MachineState, machine_state, workload_state};
use crate::mesh::machine::Machine;
use crate::mesh::model::{MACHINE_LABEL, MESH_LABEL, MODULE_LABEL, Mesh, Record};
use std::collections::HashMap;
use std::sync::Mutex;

use super::progress::{Emitter, Step};
use super::target::{ConnectedTarget, Kube, published_digest};

/// Whether a labelled container is a machine of this mesh. It must be a machine: it carries the
/// machine mark (`jr2.dev/machine`, set on the container at create time; images never carry it),
/// or its name is one of the mesh's declared machines (made before the mark existed). A builder's
/// container inherits `jr2.dev/module` from its base image and is neither. Then its mesh label names
/// this mesh, or it has none (started by hand) and its module is one of the mesh's.
pub fn belongs(mesh: &Mesh, container: &Container) -> bool {
    let declared = mesh
        .machines
        .iter()
        .any(|m| m.name == container.name && m.module == container.module);
    if container.machine.is_none() && !declared {
        return false;
    }
    match &container.mesh {
        Some(name) => name == &mesh.name && mesh.module(&container.module).is_some(),
        None => mesh.module(&container.module).is_some(),
    }
}

/// The declared machines that do not exist on the target, each as a `missing` machine.
fn missing_declared(mesh: &Mesh, found: &[Machine]) -> Vec<Machine> {
    mesh.machines
        .iter()
        .filter(|spec| !found.iter().any(|m| m.name == spec.name))
        .map(|spec| Machine {
            name: spec.name.clone(),
            module: spec.module.clone(),
            kind: "container".into(),
            image: String::new(),
            running: Vec::new(),
            state: MachineState::Missing,
            health: "missing".into(),
        })
        .collect()
}

fn health(container: &Container) -> String {
    if container.status.is_empty() {
        container.state.clone()
    } else {
        container.status.clone()
    }
}

/// Every machine of the mesh, sorted by (module, name); on Docker, a declared machine that does
/// not exist is listed as `missing`. `history` names the published digests of
/// the record's artifacts (a pod reports the manifest digest it pulled).
pub async fn list(
    mesh: &Mesh,
    record: &Record,
    daemon: &LazyDaemon,
    target: &ConnectedTarget,
    db: &Mutex<StateDb>,
) -> Result<Vec<Machine>, String> {
    match target {
        ConnectedTarget::Docker => {
            let daemon = daemon.get().await?;
            let containers = daemon
                .labelled_containers()
                .await
                .map_err(|e| e.to_string())?;
            let mut machines: Vec<Machine> = containers
                .iter()
                .filter(|c| belongs(mesh, c))
                .filter_map(|c| {
                    let module = mesh.module(&c.module)?;
                    let running = vec![c.image_id.clone()];
                    let state = machine_state(&running, record.get(&c.module), &[], module.policy);
                    Some(Machine {
                        name: c.name.clone(),
                        module: c.module.clone(),
                        kind: "container".into(),
                        image: c.image.clone(),
                        running,
                        state,
                        health: health(c),
                    })
                })
                .collect();
            let missing = missing_declared(mesh, &machines);
            machines.extend(missing);
            machines.sort_by(|a, b| (&a.module, &a.name).cmp(&(&b.module, &b.name)));
            Ok(machines)
        }
        ConnectedTarget::Kubernetes(kube) => kube_machines(mesh, record, target, kube, db).await,
    }
}

/// The mesh's labelled workloads (≤ 5 API calls), each against the record; remembered for send.
async fn kube_machines(
    mesh: &Mesh,
    record: &Record,
    target: &ConnectedTarget,
    kube: &Kube,
    db: &Mutex<StateDb>,
) -> Result<Vec<Machine>, String> {
    let workloads = kube.cluster.machines().await.map_err(|e| e.to_string())?;
    let workloads: Vec<_> = workloads
        .into_iter()
        .filter(|w| mesh.module(&w.module).is_some())
        .collect();
    let mut aliases: HashMap<&str, Vec<String>> = HashMap::new();
    for w in &workloads {
        if aliases.contains_key(w.module.as_str()) {
            continue;
        }
        let published = match record.get(&w.module) {
            Some(entry) => published_digest(mesh, target, db, entry).await,
            None => None,
        };
        aliases.insert(w.module.as_str(), published.into_iter().collect());
    }
    let mut machines: Vec<Machine> = workloads
        .iter()
        .filter_map(|w| {
            let module = mesh.module(&w.module)?;
            let state = machine_state(
                &w.running_digests,
                record.get(&w.module),
                aliases
                    .get(w.module.as_str())
                    .map_or(&[][..], Vec::as_slice),
                module.policy,
            );
            let state = workload_state(state, w.unknown_container.is_none(), w.paused);
            Some(Machine {
                name: w.name.clone(),
                module: w.module.clone(),
                kind: w.kind.as_str().to_string(),
                image: w.image.clone(),
                running: w.running_digests.clone(),
                state,
                health: format!("{}/{} ready", w.ready, w.replicas),
            })
        })
        .collect();
    machines.sort_by(|a, b| (&a.module, &a.name, &a.kind).cmp(&(&b.module, &b.name, &b.kind)));
    if let Ok(mut seen) = kube.workloads.lock() {
        *seen = workloads;
    }
    Ok(machines)
}

/// Create each declared machine that does not exist yet and whose module the record holds.
pub async fn create_declared(
    mesh: &Mesh,
    record: &Record,
    existing: &[Machine],
    in_scope: &(dyn Fn(&str) -> bool + Sync),
    daemon: &LazyDaemon,
    emitter: &Emitter,
) -> Result<Vec<String>, String> {
    if !matches!(mesh.target, crate::mesh::model::Target::Docker) {
        return Ok(Vec::new());
    }
    let mut created = Vec::new();
    for spec in mesh.machines.iter().filter(|m| in_scope(&m.module)) {
        if existing
            .iter()
            .any(|m| m.name == spec.name && m.state != MachineState::Missing)
        {
            continue;
        }
        let Some(entry) = record.get(&spec.module) else {
            continue;
        };
        let daemon = daemon.get().await?;
        let labels = HashMap::from([
            (MODULE_LABEL.to_string(), spec.module.clone()),
            (MESH_LABEL.to_string(), mesh.name.clone()),
            (MACHINE_LABEL.to_string(), spec.name.clone()),
        ]);
        let new = NewContainer {
            name: spec.name.clone(),
            image: entry.digest.clone(),
            command: spec.command.clone(),
            env: spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            labels,
        };
        daemon.create_machine(new).await.map_err(|e| {
            format!(
                "cannot create declared machine {} of module {}: {e}",
                spec.name, spec.module
            )
        })?;
        emitter.emit(
            Step::Created,
            Some(&spec.module),
            format!("created machine {} on {}", spec.name, entry.reference),
        );
        created.push(spec.name.clone());
    }
    Ok(created)
}
