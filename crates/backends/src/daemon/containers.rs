//! Machines on the Docker target: containers labelled `jr2.dev/module`, created, listed and
//! recreated on a new image with the configuration they had. Which of them are machines (the
//! `jr2.dev/machine` mark, or a declared machine's name) is the engine's call, not the listing's.

use std::collections::HashMap;
use std::time::Duration;

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, EndpointSettings, NetworkConnectRequest,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
    RenameContainerOptionsBuilder, StopContainerOptionsBuilder,
};

use super::{Daemon, DaemonError};
use crate::mesh::model::{MACHINE_LABEL, MESH_LABEL, MODULE_LABEL, TARGET_LABEL};

/// The name suffix of an old container kept, stopped, while its replacement starts during a send.
pub const KEPT_SUFFIX: &str = ".meshtop-previous";

/// One labelled container, as the listing gave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub id: String,
    pub name: String,
    pub module: String,
    pub mesh: Option<String>,
    /// The machine mark (`jr2.dev/machine`), set on the container, never inherited from an image.
    pub machine: Option<String>,
    /// The docker target it runs on (`jr2.dev/target`), where the mesh has several.
    pub target: Option<String>,
    /// What it was created from.
    pub image: String,
    /// The artifact it runs.
    pub image_id: String,
    /// `running`, `exited`, …
    pub state: String,
    /// Docker's status line, e.g. `Up 3 minutes`, `Exited (1) 2 hours ago`.
    pub status: String,
}

/// A container to create for a declared machine.
pub struct NewContainer {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub env: Vec<String>,
    pub labels: HashMap<String, String>,
}

impl Daemon {
    /// Every container carrying meshtop's module label, running or not, in one call.
    pub async fn labelled_containers(&self) -> Result<Vec<Container>, DaemonError> {
        let filters: HashMap<&str, Vec<&str>> = HashMap::from([("label", vec![MODULE_LABEL])]);
        let options = ListContainersOptionsBuilder::default()
            .all(true)
            .filters(&filters)
            .build();
        let summaries = self
            .docker
            .list_containers(Some(options))
            .await
            .map_err(self.call_error("list containers"))?;
        Ok(summaries
            .into_iter()
            // An old container kept during a send is not a machine of its own.
            .filter(|summary| {
                !summary
                    .names
                    .iter()
                    .flatten()
                    .any(|name| name.ends_with(KEPT_SUFFIX))
            })
            .filter_map(|summary| {
                let labels = summary.labels.unwrap_or_default();
                let module = labels.get(MODULE_LABEL)?.clone();
                let name = summary
                    .names
                    .unwrap_or_default()
                    .first()?
                    .trim_start_matches('/')
                    .to_string();
                Some(Container {
                    id: summary.id.unwrap_or_default(),
                    name,
                    module,
                    mesh: labels.get(MESH_LABEL).cloned(),
                    machine: labels.get(MACHINE_LABEL).cloned(),
                    target: labels.get(TARGET_LABEL).cloned(),
                    image: summary.image.unwrap_or_default(),
                    image_id: summary.image_id.unwrap_or_default(),
                    state: summary.state.map(|s| s.to_string()).unwrap_or_default(),
                    status: summary.status.unwrap_or_default(),
                })
            })
            .collect())
    }

    /// Create and start a declared machine.
    pub async fn create_machine(&self, spec: NewContainer) -> Result<String, DaemonError> {
        let body = ContainerCreateBody {
            image: Some(spec.image),
            cmd: (!spec.command.is_empty()).then_some(spec.command),
            env: (!spec.env.is_empty()).then_some(spec.env),
            labels: Some(spec.labels),
            host_config: Some(bollard::models::HostConfig {
                restart_policy: Some(bollard::models::RestartPolicy {
                    name: Some(bollard::models::RestartPolicyNameEnum::UNLESS_STOPPED),
                    maximum_retry_count: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let options = CreateContainerOptionsBuilder::default()
            .name(&spec.name)
            .build();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(self.call_error("create a container"))?;
        self.docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(self.call_error("start a container"))?;
        Ok(created.id)
    }

    /// Move a container to `new_image` with the configuration it had: the old one is stopped and
    /// kept until the new one runs; if the new one fails, the old one is started again.
    pub async fn recreate(&self, name: &str, new_image: &str) -> Result<(), DaemonError> {
        let old = self
            .docker
            .inspect_container(name, None)
            .await
            .map_err(self.call_error("inspect a container"))?;
        let old_image_config = match old.image.as_deref() {
            Some(image) => self
                .docker
                .inspect_image(image)
                .await
                .ok()
                .and_then(|i| i.config),
            None => None,
        };
        let body = recreated_body(&old, old_image_config.as_ref(), new_image);
        let extra_networks = extra_networks(&old);
        let was_running = old.state.as_ref().and_then(|s| s.running).unwrap_or(false);
        let kept_name = format!("{name}{KEPT_SUFFIX}");
        if was_running {
            let stop = StopContainerOptionsBuilder::default().t(10).build();
            self.docker
                .stop_container(name, Some(stop))
                .await
                .map_err(self.call_error("stop the old container"))?;
        }
        let rename = RenameContainerOptionsBuilder::default()
            .name(&kept_name)
            .build();
        self.docker
            .rename_container(name, rename)
            .await
            .map_err(self.call_error("rename the old container"))?;
        match self.start_replacement(name, body, extra_networks).await {
            Ok(()) => {
                let remove = RemoveContainerOptionsBuilder::default().force(true).build();
                self.docker
                    .remove_container(&kept_name, Some(remove))
                    .await
                    .map_err(self.call_error("remove the old container"))?;
                Ok(())
            }
            Err(error) => {
                // Put the old machine back as it was; report the new one's failure.
                let remove = RemoveContainerOptionsBuilder::default().force(true).build();
                let _ = self.docker.remove_container(name, Some(remove)).await;
                let back = RenameContainerOptionsBuilder::default().name(name).build();
                self.docker
                    .rename_container(&kept_name, back)
                    .await
                    .map_err(self.call_error("restore the old container's name"))?;
                if was_running {
                    self.docker
                        .start_container(
                            name,
                            None::<bollard::query_parameters::StartContainerOptions>,
                        )
                        .await
                        .map_err(self.call_error("restart the old container"))?;
                }
                Err(error)
            }
        }
    }

    async fn start_replacement(
        &self,
        name: &str,
        body: ContainerCreateBody,
        extra_networks: Vec<(String, EndpointSettings)>,
    ) -> Result<(), DaemonError> {
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(self.call_error("create the new container"))?;
        for (network, endpoint) in extra_networks {
            let request = NetworkConnectRequest {
                container: created.id.clone(),
                endpoint_config: Some(endpoint),
            };
            self.docker
                .connect_network(&network, request)
                .await
                .map_err(self.call_error("connect the new container to a network"))?;
        }
        self.docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(self.call_error("start the new container"))?;
        // A container that dies (or keeps restarting) right away did not "run": watch it a moment.
        for _ in 0..4 {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = self
                .docker
                .inspect_container(&created.id, None)
                .await
                .map_err(self.call_error("inspect the new container"))?;
            let restarts = now.restart_count.unwrap_or(0);
            let state = now.state.unwrap_or_default();
            let exit_code = state.exit_code.unwrap_or(0);
            let running = state.running.unwrap_or(false);
            let message = if state.restarting.unwrap_or(false) || restarts > 0 {
                format!(
                    "the new container {name} kept restarting right away (restarted {restarts} time(s), last exit code {exit_code})"
                )
            } else if !running && exit_code != 0 {
                let error = state
                    .error
                    .filter(|e| !e.is_empty())
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default();
                format!(
                    "the new container {name} stopped right away (exit code {exit_code}{error})"
                )
            } else {
                continue;
            };
            return Err(DaemonError::Refused {
                endpoint: self.endpoint.to_string(),
                message,
            });
        }
        Ok(())
    }
}

/// The old container's configuration on a new image. What the old container merely inherited from
/// its image (command, entrypoint, env, workdir, ports, labels) is left out, so that the new image's
/// own defaults apply; what was set on the container is kept.
fn recreated_body(
    old: &ContainerInspectResponse,
    old_image: Option<&bollard::models::ImageConfig>,
    new_image: &str,
) -> ContainerCreateBody {
    let config = old.config.clone().unwrap_or_default();
    let image = old_image.cloned().unwrap_or_default();
    let own = |value: Option<Vec<String>>, inherited: &Option<Vec<String>>| {
        value.filter(|v| Some(v) != inherited.as_ref())
    };
    let env = config
        .env
        .map(|env| {
            env.into_iter()
                .filter(|e| !image.env.as_ref().is_some_and(|i| i.contains(e)))
                .collect::<Vec<_>>()
        })
        .filter(|env| !env.is_empty());
    let image_labels = image.labels.clone().unwrap_or_default();
    let labels: HashMap<String, String> = config
        .labels
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, v)| {
            k == MODULE_LABEL
                || k == MESH_LABEL
                || k == MACHINE_LABEL
                || k == TARGET_LABEL
                || image_labels.get(k) != Some(v)
        })
        .collect();
    ContainerCreateBody {
        image: Some(new_image.to_string()),
        hostname: None,
        user: own(config.user.map(|u| vec![u]), &image.user.map(|u| vec![u]))
            .and_then(|mut u| u.pop()),
        cmd: own(config.cmd, &image.cmd),
        entrypoint: own(config.entrypoint, &image.entrypoint),
        env,
        working_dir: config
            .working_dir
            .filter(|w| Some(w) != image.working_dir.as_ref()),
        exposed_ports: own(config.exposed_ports, &image.exposed_ports),
        labels: Some(labels),
        tty: config.tty,
        open_stdin: config.open_stdin,
        stop_signal: config
            .stop_signal
            .filter(|s| Some(s) != image.stop_signal.as_ref()),
        stop_timeout: config.stop_timeout,
        host_config: old.host_config.clone(),
        ..Default::default()
    }
}

/// Networks beyond the primary one (`network_mode`), to connect before the new container starts.
fn extra_networks(old: &ContainerInspectResponse) -> Vec<(String, EndpointSettings)> {
    let primary = old
        .host_config
        .as_ref()
        .and_then(|h| h.network_mode.clone())
        .unwrap_or_default();
    let networks = old
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.clone())
        .unwrap_or_default();
    networks
        .into_iter()
        .filter(|(name, _)| name != &primary && !(primary == "default" && name == "bridge"))
        .map(|(name, endpoint)| {
            let kept = EndpointSettings {
                aliases: endpoint.aliases,
                links: endpoint.links,
                driver_opts: endpoint.driver_opts,
                ipam_config: endpoint.ipam_config,
                ..Default::default()
            };
            (name, kept)
        })
        .collect()
}
