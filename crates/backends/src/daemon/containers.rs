//! Machines on the Docker target: containers labelled `jr2.dev/module`, created, listed and
//! recreated on a new image with everything else they had (`clone`), proven before the old one
//! goes (`proof`). Which of them are machines (the
//! `jr2.dev/machine` mark, or a declared machine's name) is the engine's call, not the listing's.

use std::collections::HashMap;

use bollard::models::NetworkConnectRequest;
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, ListContainersOptionsBuilder, RemoveContainerOptionsBuilder,
    RenameContainerOptionsBuilder, StopContainerOptionsBuilder,
};

use super::made::{self, NewContainer};
use super::proof::Proven;
use super::{Daemon, DaemonError, clone};
use crate::mesh::model::{MACHINE_LABEL, MESH_LABEL, MODULE_LABEL, TARGET_LABEL};

/// The name suffix of an old container kept, stopped, while its replacement starts during a send.
pub const KEPT_SUFFIX: &str = ".meshtop-previous";

/// compose's labels: the project and service a container is of, its number in the service, and
/// whether it is a one-off (`docker-compose run`).
pub const COMPOSE_PROJECT_LABEL: &str = "com.docker.compose.project";
pub const COMPOSE_SERVICE_LABEL: &str = "com.docker.compose.service";
pub const COMPOSE_NUMBER_LABEL: &str = "com.docker.compose.container-number";
pub const COMPOSE_ONEOFF_LABEL: &str = "com.docker.compose.oneoff";

/// A listed container as a machine of `module`; None without a name.
fn container(summary: bollard::models::ContainerSummary, module: String) -> Option<Container> {
    let labels = summary.labels.unwrap_or_default();
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
        compose_number: labels
            .get(COMPOSE_NUMBER_LABEL)
            .and_then(|n| n.parse().ok()),
        image: summary.image.unwrap_or_default(),
        image_id: summary.image_id.unwrap_or_default(),
        state: summary.state.map(|s| s.to_string()).unwrap_or_default(),
        status: summary.status.unwrap_or_default(),
    })
}

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
    /// Its number in its compose service (`com.docker.compose.container-number`), if compose
    /// made it.
    pub compose_number: Option<u32>,
    /// What it was created from.
    pub image: String,
    /// The artifact it runs.
    pub image_id: String,
    /// `running`, `exited`, …
    pub state: String,
    /// Docker's status line, e.g. `Up 3 minutes`, `Exited (1) 2 hours ago`.
    pub status: String,
}

impl Daemon {
    /// Every container carrying meshtop's module label, running or not, in one call.
    pub async fn labelled_containers(&self) -> Result<Vec<Container>, DaemonError> {
        let filters: HashMap<&str, Vec<&str>> = HashMap::from([("label", vec![MODULE_LABEL])]);
        let summaries = self.listed(filters).await?;
        Ok(summaries
            .into_iter()
            .filter_map(|summary| {
                let module = summary.labels.as_ref()?.get(MODULE_LABEL)?.clone();
                container(summary, module)
            })
            .collect())
    }

    /// The containers of a compose project's service (compose's labels), running or not, each
    /// as a machine of `module`, with its number in the service (`com.docker.compose.container-number`).
    pub async fn compose_containers(
        &self,
        project: &str,
        service: &str,
        module: &str,
    ) -> Result<Vec<Container>, DaemonError> {
        let project = format!("{COMPOSE_PROJECT_LABEL}={project}");
        let service = format!("{COMPOSE_SERVICE_LABEL}={service}");
        let filters: HashMap<&str, Vec<&str>> =
            HashMap::from([("label", vec![project.as_str(), service.as_str()])]);
        let summaries = self.listed(filters).await?;
        Ok(summaries
            .into_iter()
            // A one-off `docker-compose run` container is not the service's.
            .filter(|summary| {
                summary
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(COMPOSE_ONEOFF_LABEL))
                    .is_none_or(|oneoff| oneoff != "True")
            })
            .filter_map(|summary| container(summary, module.to_string()))
            .collect())
    }

    /// The containers the filters select, but for an old container kept during a send (not a
    /// machine of its own).
    async fn listed(
        &self,
        filters: HashMap<&str, Vec<&str>>,
    ) -> Result<Vec<bollard::models::ContainerSummary>, DaemonError> {
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
            .filter(|summary| {
                !summary
                    .names
                    .iter()
                    .flatten()
                    .any(|name| name.ends_with(KEPT_SUFFIX))
            })
            .collect())
    }

    /// Create and start a declared machine.
    pub async fn create_machine(&self, spec: NewContainer) -> Result<String, DaemonError> {
        let mesh_labels: HashMap<String, String> = spec
            .labels
            .iter()
            .filter(|(key, _)| key.as_str() == MESH_LABEL)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.ensure_networks(&spec.service.networks, &mesh_labels)
            .await?;
        let options = CreateContainerOptionsBuilder::default()
            .name(&spec.name)
            .build();
        let (body, later) = made::body(spec);
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(self.call_error("create a container"))?;
        self.join_networks(&created.id, later).await?;
        self.docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(self.call_error("start a container"))?;
        Ok(created.id)
    }

    /// Connect container `id` to each network with its endpoint (aliases and all), before it starts.
    async fn join_networks(
        &self,
        id: &str,
        networks: Vec<(String, bollard::models::EndpointSettings)>,
    ) -> Result<(), DaemonError> {
        for (network, endpoint) in networks {
            let request = NetworkConnectRequest {
                container: id.to_string(),
                endpoint_config: Some(endpoint),
            };
            self.docker
                .connect_network(&network, request)
                .await
                .map_err(self.call_error("connect a container to a network"))?;
        }
        Ok(())
    }

    /// Move a container to `new_image` and change nothing else about it: the new container is the
    /// old one in every setting but its image (its own config, its whole host config, every network
    /// with its aliases; see `clone`). The old one is stopped with its own stop timeout and kept,
    /// renamed, until the new one proves itself (healthy, or running for a while: `proof`); if the
    /// new one fails, it is removed and the old one put back and started again. `said` hears what
    /// it waits on, as it begins to.
    pub async fn recreate(
        &self,
        name: &str,
        new_image: &str,
        said: &(dyn Fn(&str) + Sync),
    ) -> Result<Proven, DaemonError> {
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
        let replacement = clone::replacement(&old, old_image_config.as_ref(), new_image);
        let was_running = old.state.as_ref().and_then(|s| s.running).unwrap_or(false);
        let kept_name = format!("{name}{KEPT_SUFFIX}");
        if was_running {
            let grace = stop_grace(old.config.as_ref().and_then(|c| c.stop_timeout));
            said(&format!(
                "stopping the old container (its grace: {grace} s), kept until the new one proves itself"
            ));
            let stop = StopContainerOptionsBuilder::default().t(grace).build();
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
        match self.start_replacement(name, replacement, said).await {
            Ok(proven) => {
                let remove = RemoveContainerOptionsBuilder::default().force(true).build();
                self.docker
                    .remove_container(&kept_name, Some(remove))
                    .await
                    .map_err(self.call_error("remove the old container"))?;
                Ok(proven)
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

    /// Create the replacement under `name`, connect its other networks, start it and watch it
    /// prove itself.
    async fn start_replacement(
        &self,
        name: &str,
        replacement: clone::Replacement,
        said: &(dyn Fn(&str) + Sync),
    ) -> Result<Proven, DaemonError> {
        let options = CreateContainerOptionsBuilder::default().name(name).build();
        let created = self
            .docker
            .create_container(Some(options), replacement.body)
            .await
            .map_err(self.call_error("create the new container"))?;
        self.join_networks(&created.id, replacement.later).await?;
        self.docker
            .start_container(
                &created.id,
                None::<bollard::query_parameters::StartContainerOptions>,
            )
            .await
            .map_err(self.call_error("start the new container"))?;
        self.prove(name, &created.id, said).await
    }
}

/// The seconds a stop waits before it kills: the container's own stop timeout (compose's
/// `stop_grace_period` lands there), else the daemon's default of 10 s. One that says "wait for
/// ever" (negative) waits as long as a call to the daemon may last.
fn stop_grace(stop_timeout: Option<i64>) -> i32 {
    match stop_timeout {
        None => 10,
        Some(t) if t < 0 => 590,
        Some(t) => i32::try_from(t.min(590)).unwrap_or(590),
    }
}

#[cfg(test)]
mod tests {
    use super::stop_grace;

    #[test]
    fn a_stop_waits_the_containers_own_grace() {
        assert_eq!(stop_grace(None), 10, "the daemon's default");
        assert_eq!(stop_grace(Some(2)), 2, "compose's stop_grace_period: 2s");
        assert_eq!(
            stop_grace(Some(-1)),
            590,
            "for ever: as long as a call may last"
        );
        assert_eq!(stop_grace(Some(i64::MAX)), 590);
    }
}
