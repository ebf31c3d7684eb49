//! The machines of a mesh on its target, each with its state against the record.

use crate::backends::daemon::LazyDaemon;
use crate::backends::daemon::containers::{Container, NewContainer};
use crate::mesh::behind::{Machine, machine_state};
use crate::mesh::model::{MESH_LABEL, MODULE_LABEL, Mesh, Record, Target};
use std::collections::HashMap;

use super::progress::Emitter;

/// Whether a labelled container belongs to this mesh: its mesh label says so, or it has none
/// (started by hand) and its module is one of the mesh's.
fn belongs(mesh: &Mesh, container: &Container) -> bool {
    match &container.mesh {
        Some(name) => name == &mesh.name && mesh.module(&container.module).is_some(),
        None => mesh.module(&container.module).is_some(),
    }
}

fn health(container: &Container) -> String {
    if container.status.is_empty() {
        container.state.clone()
    } else {
        container.status.clone()
    }
}

/// Every machine of the mesh, sorted by (module, name).
pub async fn list(
    mesh: &Mesh,
    record: &Record,
    daemon: &LazyDaemon,
) -> Result<Vec<Machine>, String> {
    match &mesh.target {
        Target::Docker => {
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
            machines.sort_by(|a, b| (&a.module, &a.name).cmp(&(&b.module, &b.name)));
            Ok(machines)
        }
        Target::Kubernetes { namespace, .. } => Err(format!(
            "machines on Kubernetes (namespace {namespace}) are not wired into this build yet"
        )),
    }
}

/// Create each declared machine that does not exist yet and whose module the record holds.
pub async fn create_declared(
    mesh: &Mesh,
    record: &Record,
    existing: &[Machine],
    in_scope: &dyn Fn(&str) -> bool,
    daemon: &LazyDaemon,
    emitter: &Emitter,
) -> Result<Vec<String>, String> {
    if !matches!(mesh.target, Target::Docker) {
        return Ok(Vec::new());
    }
    let mut created = Vec::new();
    for spec in mesh.machines.iter().filter(|m| in_scope(&m.module)) {
        if existing.iter().any(|m| m.name == spec.name) {
            continue;
        }
        let Some(entry) = record.get(&spec.module) else {
            continue;
        };
        let daemon = daemon.get().await?;
        let labels = HashMap::from([
            (MODULE_LABEL.to_string(), spec.module.clone()),
            (MESH_LABEL.to_string(), mesh.name.clone()),
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
            "created",
            Some(&spec.module),
            format!("created machine {} on {}", spec.name, entry.reference),
        );
        created.push(spec.name.clone());
    }
    Ok(created)
}
