//! The Docker target: the host daemon is the target. Its record is a table in the state database,
//! delivery is nothing, machines are containers labelled `jr2.dev/module`, and a send recreates
//! the container on the new artifact.

use crate::error::HoldLost;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::Sender;

use crate::backends::credentials::{self, Credentials};
use crate::backends::daemon::LazyDaemon;
use crate::backends::daemon::containers::Container;
use crate::backends::daemon::made::NewContainer;
use crate::backends::registry::{Published, RegistryClient, repository_in};
use crate::backends::state::{StateDb, StateError, locked};
use crate::error::{ConvergeError, TargetError};
use crate::mesh::behind::{MachineState, machine_state};
use crate::mesh::logs::{LogAsk, LogItem};
use crate::mesh::machine::{Machine, Move};
use crate::mesh::model::{
    MACHINE_LABEL, MESH_LABEL, MODULE_LABEL, MachineSpec, Mesh, Record, RecordEntry, Registry,
    TARGET_LABEL, Target as Spec,
};
use crate::mesh::pin::{PinChange, StampBy};
use crate::mesh::progress::DeliveredBy;
use crate::mesh::target::TargetDescription;
use crate::progress::{Emitter, Payload};

use super::seam::{
    Artifact, Delivers, Delivery, Describes, Holding, HoldsTheMesh, KeepsRecord, Reach, RecordRead,
    RunsMachines, Target,
};
use super::{host, sign};

/// The host daemon as the target (nothing to connect: the daemon is reached lazily per call).
pub(super) struct Docker {
    /// The target's name in the mesh.
    pub name: String,
    /// The mesh's first docker target: a machine without the target label is this one's.
    pub first: bool,
    /// The mesh has several docker targets: the machines created here carry the target label.
    pub marked: bool,
}

impl Docker {
    /// Docker target `name` of `mesh`.
    pub(super) fn new(mesh: &Mesh, name: &str) -> Docker {
        let docker: Vec<&str> = mesh
            .target_names()
            .into_iter()
            .filter(|n| matches!(mesh.target(n), Some(Spec::Docker)))
            .collect();
        Docker {
            name: name.to_string(),
            first: docker.first().is_none_or(|first| *first == name),
            marked: docker.len() > 1,
        }
    }

    /// Whether a container of the mesh runs on this target: it says so, or it says nothing and
    /// this is the mesh's first docker target.
    fn runs_here(&self, container: &Container) -> bool {
        match &container.target {
            Some(target) => *target == self.name,
            None => self.first,
        }
    }

    /// This target's declared machines.
    fn declared<'m>(&self, mesh: &'m Mesh) -> impl Iterator<Item = &'m MachineSpec> {
        let name = self.name.clone();
        mesh.machines.iter().filter(move |m| m.target == name)
    }
}

impl Describes for Docker {
    fn name(&self) -> &str {
        &self.name
    }

    fn describe(&self) -> TargetDescription {
        description(&self.name)
    }
}

#[async_trait::async_trait]
impl KeepsRecord for Docker {
    async fn read_record<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
    ) -> Result<RecordRead, TargetError> {
        let record = locked(db)
            .map_err(TargetError::Handle)?
            .record(&mesh.name, &self.name)?;
        Ok(RecordRead {
            record,
            source: "the docker record".into(),
            warning: None,
            team_warning: None,
            kept: None,
            room: None,
        })
    }

    /// The check and the stamp are one transaction of the state database.
    async fn stamp<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
        by: StampBy<'a>,
        entries: &'a Record,
        pins: &'a PinChange,
    ) -> Result<(), ConvergeError> {
        let state_error = |e: StateError| match e {
            StateError::LockLost { .. } => {
                ConvergeError::LockLost(HoldLost::Lock(std::sync::Arc::new(e)))
            }
            other => ConvergeError::Failed(other.to_string()),
        };
        locked(db)
            .map_err(|e| ConvergeError::Failed(e.to_string()))?
            .stamp_record_as(&mesh.name, &self.name, by, entries, pins)
            .map_err(state_error)
    }
}

#[async_trait::async_trait]
impl RunsMachines for Docker {
    fn machines_root(&self) -> &'static str {
        "the host daemon's containers"
    }

    /// On Docker a declared machine that does not exist is listed as `missing`.
    async fn machines<'a>(
        &'a self,
        mesh: &'a Mesh,
        record: &'a Record,
        reach: Reach<'a>,
    ) -> Result<Vec<Machine>, TargetError> {
        let daemon = reach.daemon.get().await.map_err(TargetError::Unreachable)?;
        let containers = daemon.labelled_containers().await?;
        // A multi-platform artifact (an index) runs here as the image pulled for the daemon's
        // platform out of it: a container on that image runs the record's artifact.
        let mut aliases: HashMap<&str, Vec<String>> = HashMap::new();
        for (module, entry) in record {
            aliases.insert(
                module.as_str(),
                host::index_images(reach.db, &mesh.name, &entry.digest)?,
            );
        }
        let as_machine = |name: String, c: &Container| {
            let module = mesh.module(&c.module)?;
            let running = vec![c.image_id.clone()];
            let also = aliases
                .get(c.module.as_str())
                .map_or(&[][..], Vec::as_slice);
            let state = machine_state(&running, record.get(&c.module), also, module.policy);
            Some(Machine {
                name,
                module: c.module.clone(),
                kind: CONTAINER.into(),
                display_name: c.name.clone(),
                before_send: None,
                image: c.image.clone(),
                running,
                state,
                health: health(c),
            })
        };
        let composed = compose_services(self.declared(mesh), daemon).await?;
        let mut machines: Vec<Machine> = containers
            .iter()
            .filter(|c| belongs(mesh, c) && self.runs_here(c))
            // A compose service's container is its declared machine's (below), never twice.
            .filter(|c| {
                !composed
                    .iter()
                    .any(|(_, found)| found.iter().any(|(_, f)| f.id == c.id))
            })
            .filter_map(|c| as_machine(c.name.clone(), c))
            .collect();
        for (spec, found) in &composed {
            if found.is_empty() {
                machines.push(missing_compose(spec));
            }
            machines.extend(
                found
                    .iter()
                    .filter_map(|(name, c)| as_machine(name.clone(), c)),
            );
        }
        let missing = missing_declared(
            self.declared(mesh).filter(|s| s.compose.is_none()),
            &machines,
        );
        machines.extend(missing);
        machines.sort_by(|a, b| (&a.module, &a.name).cmp(&(&b.module, &b.name)));
        Ok(machines)
    }

    async fn create_declared<'a>(
        &'a self,
        mesh: &'a Mesh,
        record: &'a Record,
        existing: &'a [Machine],
        in_scope: &'a (dyn for<'s> Fn(&'s str) -> bool + Sync),
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<Vec<String>, TargetError> {
        let made = Made {
            mesh,
            target: self.marked.then_some(self.name.as_str()),
            specs: self.declared(mesh).collect(),
        };
        create_declared(made, record, existing, in_scope, reach, emitter).await
    }

    async fn runs_as<'a>(
        &'a self,
        mesh: &'a Mesh,
        entry: &'a RecordEntry,
        reach: Reach<'a>,
    ) -> Result<Vec<String>, TargetError> {
        host::index_images(reach.db, &mesh.name, &entry.digest)
    }

    /// The container is recreated on the artifact (a multi-platform one's image for the daemon's
    /// platform, pulled out of its index), everything else about it kept; sent once it proved
    /// itself: healthy, or running a while without a healthcheck.
    async fn send<'a>(
        &'a self,
        mesh: &'a Mesh,
        moved: &'a Move,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<String, TargetError> {
        let image = host::runnable(&reach, &mesh.name, &moved.to_digest).await?;
        // What the send waits on, live, as a Kubernetes roll-out says its own.
        let said = |message: &str| {
            emitter.emit(
                Payload::Rollout {
                    machine: moved.machine.clone(),
                },
                Some(&moved.module),
                format!("{}: {message}", moved.machine),
            );
        };
        reach
            .daemon
            .get()
            .await
            .map_err(TargetError::Unreachable)?
            .recreate(moved.container(), &image, &said)
            .await
            .map(|proven| proven.to_string())
            .map_err(TargetError::from)
    }

    async fn logs<'a>(
        &'a self,
        _mesh: &'a Mesh,
        machine: &'a Machine,
        ask: &'a LogAsk,
        daemon: &'a LazyDaemon,
        out: Sender<LogItem>,
    ) -> Result<(), TargetError> {
        if machine.state == MachineState::Missing {
            let text = format!("container {} is declared but does not exist", machine.name);
            let _ = out.send(LogItem::Note { text }).await;
            return Ok(());
        }
        let daemon = daemon.get().await.map_err(TargetError::Unreachable)?;
        Ok(daemon
            .container_logs(&machine.display_name, ask, &out)
            .await?)
    }
}

#[async_trait::async_trait]
impl Delivers for Docker {
    /// The host daemon is where machines run: its images are the target's.
    fn host_images_answer(&self) -> bool {
        true
    }

    fn host_holds_what_it_runs(&self) -> bool {
        true
    }

    fn delivery(&self) -> Result<Delivery, TargetError> {
        Ok(Delivery::Host)
    }

    /// The daemon's platform, pulled out of the index by digest (`host::pull_from_index`).
    async fn run_from_index<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<(), TargetError> {
        let (registry, creds) = registry_of(mesh, &artifact).await?;
        host::pull_from_index(
            &reach,
            &mesh.name,
            &artifact,
            registry,
            creds.as_ref(),
            emitter,
        )
        .await
        .map(|_| ())
    }

    async fn deliver<'a>(
        &'a self,
        _mesh: &'a Mesh,
        artifact: Artifact<'a>,
        _reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<Option<String>, TargetError> {
        emitter.emit(
            Payload::Delivered {
                reference: artifact.reference.to_string(),
                by: DeliveredBy::OnHost,
            },
            Some(artifact.module),
            format!(
                "{} is on the host daemon, which is the target",
                artifact.reference
            ),
        );
        Ok(None)
    }

    /// The host is the target: the artifact is pulled into the daemon, whatever `on_host` says.
    async fn fetch_vouched<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        manifest: &'a str,
        _on_host: bool,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<(), TargetError> {
        let (registry, creds) = registry_of(mesh, &artifact).await?;
        host::pull_vouched(
            &reach,
            &mesh.name,
            &artifact,
            manifest,
            registry,
            creds.as_ref(),
            emitter,
        )
        .await
    }

    /// Delivery is nothing here: with `--publish` (or `publish = true`) each build (and each host
    /// skip) is pushed to the
    /// mesh's registry for other machines, its manifest digest kept with the build.
    async fn publish<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<Option<String>, TargetError> {
        let (true, Some(registry)) = (mesh.publish, &mesh.registry) else {
            return Ok(None);
        };
        let creds = registry_credentials(registry).await?;
        let docker = reach.daemon.get().await.map_err(TargetError::Unreachable)?;
        let (digest, _) = docker
            .push_built(
                artifact.reference,
                artifact.digest,
                registry,
                creds.as_ref(),
            )
            .await?;
        let module = artifact.module;
        let pushed = crate::attest::Pushed {
            module,
            reference: artifact.reference,
            manifest: &digest,
            inputs: None,
        };
        sign::sign_pushed(mesh, registry, creds, &pushed, emitter).await?;
        host::note_published(&reach, &mesh.name, &artifact, &digest)?;
        emitter.emit(
            Payload::Delivered {
                reference: artifact.reference.to_string(),
                by: DeliveredBy::Published {
                    registry: registry.host.clone(),
                    digest: digest.clone(),
                },
            },
            Some(artifact.module),
            format!(
                "published {} to registry {} → {digest}",
                artifact.reference, registry.host
            ),
        );
        Ok(Some(digest))
    }

    async fn holds<'a>(
        &'a self,
        mesh: &'a Mesh,
        wanted: &'a RecordEntry,
        reach: Reach<'a>,
    ) -> Result<Holding, TargetError> {
        let runs = host::runnable(&reach, &mesh.name, &wanted.digest).await?;
        let wanted = RecordEntry {
            digest: runs,
            ..wanted.clone()
        };
        host::holds(reach.daemon, &wanted).await
    }

    /// On the host already, or pulled from the mesh's registry by the digest its ref answers with
    /// (the pulled image must be the artifact).
    async fn bring<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<Holding, TargetError> {
        let wanted = artifact.entry();
        if self.holds(mesh, &wanted, reach).await? == Holding::Held {
            return Ok(Holding::Held);
        }
        let Some(registry) = &mesh.registry else {
            return Ok(Holding::Gone(
                "the host daemon (and the mesh names no registry to pull it from)".into(),
            ));
        };
        let creds = registry_credentials(registry).await?;
        // A multi-platform artifact is its index's digest (the manifest names itself): the
        // daemon's platform out of it.
        if artifact.manifest == Some(artifact.digest) {
            host::pull_from_index(
                &reach,
                &mesh.name,
                &artifact,
                registry,
                creds.as_ref(),
                emitter,
            )
            .await?;
            return Ok(Holding::Held);
        }
        let client = RegistryClient::new(registry, creds.clone())?;
        let (path, tag) = repository_in(&registry.host, artifact.reference);
        // The manifest the record names, never the tag looked up again; a record from before
        // manifests were kept asks the tag, and the pull must still bring the artifact.
        let found = match artifact.manifest {
            Some(manifest) => client.manifest(path, manifest).await?,
            None => client.manifest(path, tag).await?,
        };
        match found {
            Published::Present { digest } => {
                host::pull_vouched(
                    &reach,
                    &mesh.name,
                    &artifact,
                    &digest,
                    registry,
                    creds.as_ref(),
                    emitter,
                )
                .await?;
                Ok(Holding::Held)
            }
            Published::Absent => Ok(Holding::Gone(format!(
                "the host daemon, and registry {}",
                registry.host
            ))),
        }
    }

    async fn registry_client<'a>(
        &'a self,
        registry: &'a Registry,
    ) -> Result<RegistryClient, TargetError> {
        let creds = registry_credentials(registry).await?;
        RegistryClient::new(registry, creds).map_err(TargetError::from)
    }
}

impl HoldsTheMesh for Docker {}

#[async_trait::async_trait]
impl Target for Docker {
    /// The daemon is one host: whoever may use it may write everything.
    async fn check_write_access<'a>(
        &'a self,
        _stamps: bool,
        _sends: &'a [Move],
    ) -> Result<(), TargetError> {
        Ok(())
    }

    async fn check_converge_access<'a>(
        &'a self,
        _mesh: &'a Mesh,
        _modules: &'a [&'a str],
    ) -> Result<(), TargetError> {
        Ok(())
    }
}

/// Docker's credentials for `registry` (none: it asks for no login).
/// The mesh's registry, which the artifact is pulled from, and its credentials.
async fn registry_of<'m>(
    mesh: &'m Mesh,
    artifact: &Artifact<'_>,
) -> Result<(&'m Registry, Option<Credentials>), TargetError> {
    let Some(registry) = &mesh.registry else {
        return Err(TargetError::NoRegistry {
            mesh: mesh.name.clone(),
            reference: artifact.reference.to_string(),
        });
    };
    Ok((registry, registry_credentials(registry).await?))
}

async fn registry_credentials(registry: &Registry) -> Result<Option<Credentials>, TargetError> {
    credentials::for_registry(&registry.host)
        .await
        .map_err(|e| TargetError::Credentials(Arc::new(e)))
}

/// What a machine is here, in this target's word.
const CONTAINER: &str = "container";

/// The host daemon in words: it is here, and a send recreates each container.
pub(super) fn description(name: &str) -> TargetDescription {
    TargetDescription {
        name: name.to_string(),
        kind: "docker".into(),
        place: None,
        send_does: "each container is recreated with the same configuration on the new artifact"
            .into(),
    }
}

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

/// Each declared compose service of the target with its containers, each under its machine's
/// name: the spec's name when the service has one container, `name-N` (compose's container
/// number) when it is scaled to several.
async fn compose_services<'m>(
    declared: impl Iterator<Item = &'m MachineSpec>,
    daemon: &crate::backends::daemon::Daemon,
) -> Result<Vec<(&'m MachineSpec, Vec<(String, Container)>)>, TargetError> {
    let mut services = Vec::new();
    for spec in declared {
        let Some(compose) = &spec.compose else {
            continue;
        };
        let mut found = daemon
            .compose_containers(&compose.project, &compose.service, &spec.module)
            .await?;
        found.sort_by_key(|c| (c.compose_number, c.name.clone()));
        let several = found.len() > 1;
        let named = found
            .into_iter()
            .map(|c| {
                let name = match (several, c.compose_number) {
                    (false, _) => spec.name.clone(),
                    (true, Some(number)) => format!("{}-{number}", spec.name),
                    (true, None) => c.name.clone(),
                };
                (name, c)
            })
            .collect();
        services.push((spec, named));
    }
    Ok(services)
}

/// A declared compose service without a container: `missing`, saying how to start it (meshtop
/// never runs `docker-compose up`).
fn missing_compose(spec: &MachineSpec) -> Machine {
    let service = spec.compose.as_ref().map_or("", |c| c.service.as_str());
    let project = spec.compose.as_ref().map_or("", |c| c.project.as_str());
    missing(
        spec,
        format!("missing: run docker-compose -p {project} up -d {service}"),
    )
}

/// A declared machine that does not exist, `health` saying so.
fn missing(spec: &MachineSpec, health: String) -> Machine {
    Machine {
        name: spec.name.clone(),
        module: spec.module.clone(),
        kind: CONTAINER.into(),
        display_name: spec.name.clone(),
        before_send: None,
        image: String::new(),
        running: Vec::new(),
        state: MachineState::Missing,
        health,
    }
}

/// The declared machines that do not exist on the target, each as a `missing` machine.
fn missing_declared<'m>(
    declared: impl Iterator<Item = &'m MachineSpec>,
    found: &[Machine],
) -> Vec<Machine> {
    declared
        .filter(|spec| !found.iter().any(|m| m.name == spec.name))
        .map(|spec| missing(spec, "missing".into()))
        .collect()
}

fn health(container: &Container) -> String {
    if container.status.is_empty() {
        container.state.clone()
    } else {
        container.status.clone()
    }
}

/// What a target creates machines of: the mesh, the target label to set (several docker targets),
/// and its declared machines.
struct Made<'a> {
    mesh: &'a Mesh,
    target: Option<&'a str>,
    specs: Vec<&'a MachineSpec>,
}

/// Create each declared machine that does not exist yet and whose module the record holds.
async fn create_declared(
    made: Made<'_>,
    record: &Record,
    existing: &[Machine],
    in_scope: &(dyn Fn(&str) -> bool + Sync),
    reach: Reach<'_>,
    emitter: &Emitter,
) -> Result<Vec<String>, TargetError> {
    let mesh = made.mesh;
    let mut created = Vec::new();
    // A compose service's containers are docker-compose's to make, never meshtop's.
    for spec in made
        .specs
        .into_iter()
        .filter(|m| in_scope(&m.module) && m.compose.is_none())
    {
        if existing
            .iter()
            .any(|m| m.name == spec.name && m.state != MachineState::Missing)
        {
            continue;
        }
        let Some(entry) = record.get(&spec.module) else {
            continue;
        };
        let image = host::runnable(&reach, &mesh.name, &entry.digest).await?;
        let daemon = reach.daemon.get().await.map_err(TargetError::Unreachable)?;
        let mut labels = HashMap::from([
            (MODULE_LABEL.to_string(), spec.module.clone()),
            (MESH_LABEL.to_string(), mesh.name.clone()),
            (MACHINE_LABEL.to_string(), spec.name.clone()),
        ]);
        if let Some(target) = made.target {
            labels.insert(TARGET_LABEL.to_string(), target.to_string());
        }
        let new = NewContainer {
            name: spec.name.clone(),
            image,
            command: spec.command.clone(),
            env: spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
            labels,
            service: spec.service.clone(),
        };
        daemon
            .create_machine(new)
            .await
            .map_err(|source| TargetError::CreateMachine {
                machine: spec.name.clone(),
                module: spec.module.clone(),
                source: Box::new(source),
            })?;
        emitter.emit(
            Payload::Created {
                machine: spec.name.clone(),
                reference: entry.reference.clone(),
            },
            Some(&spec.module),
            format!("created machine {} on {}", spec.name, entry.reference),
        );
        created.push(spec.name.clone());
    }
    Ok(created)
}
