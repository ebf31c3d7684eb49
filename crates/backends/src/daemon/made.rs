//! The container meshtop makes for a declared machine: its image, command, environment and labels,
//! and its service keys as compose means them (ports published, volumes bound, networks joined with
//! their aliases — made when missing —, the restart policy, the healthcheck, the stop grace).

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, EndpointSettings, HealthConfig, HostConfig, NetworkCreateRequest,
    NetworkingConfig, PortBinding, RestartPolicy, RestartPolicyNameEnum,
};

use super::{Daemon, DaemonError};
use crate::mesh::service::{Network, Restart, Service};

/// A container to create for a declared machine.
pub struct NewContainer {
    pub name: String,
    pub image: String,
    pub command: Vec<String>,
    pub env: Vec<String>,
    pub labels: HashMap<String, String>,
    /// Its ports, volumes, networks, restart policy, healthcheck and stop grace.
    pub service: crate::mesh::service::Service,
}

/// The create body of `spec`, with its first network (if any) joined at create; the others, each
/// with its endpoint, to connect before it starts.
pub(super) fn body(spec: NewContainer) -> (ContainerCreateBody, Vec<(String, EndpointSettings)>) {
    let service = &spec.service;
    let endpoint = |network: &Network| EndpointSettings {
        aliases: (!network.aliases.is_empty()).then(|| network.aliases.clone()),
        ..Default::default()
    };
    let mut networks = service.networks.iter();
    let first = networks.next();
    let later = networks.map(|n| (n.name.clone(), endpoint(n))).collect();
    let body = ContainerCreateBody {
        image: Some(spec.image.clone()),
        cmd: (!spec.command.is_empty()).then(|| spec.command.clone()),
        env: (!spec.env.is_empty()).then(|| spec.env.clone()),
        labels: Some(spec.labels.clone()),
        exposed_ports: (!service.ports.is_empty())
            .then(|| service.ports.iter().map(|p| p.key()).collect()),
        healthcheck: service.healthcheck.as_ref().map(|check| HealthConfig {
            test: Some(check.test.clone()),
            interval: check.interval.map(nanos),
            timeout: check.timeout.map(nanos),
            retries: check.retries.map(i64::from),
            start_period: check.start_period.map(nanos),
            start_interval: None,
        }),
        // Whole seconds, rounded up: a grace is never cut short.
        stop_timeout: service
            .stop_grace_period
            .map(|grace| grace.as_millis().div_ceil(1000) as i64),
        host_config: Some(host_config(service)),
        networking_config: first.map(|network| NetworkingConfig {
            endpoints_config: Some(HashMap::from([(network.name.clone(), endpoint(network))])),
        }),
        ..Default::default()
    };
    (body, later)
}

fn nanos(duration: std::time::Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

/// Ports, volumes and the restart policy (`unless-stopped` unless the machine says).
fn host_config(service: &Service) -> HostConfig {
    let (name, retries) = match service.restart.unwrap_or(Restart::UnlessStopped) {
        Restart::No => (RestartPolicyNameEnum::NO, None),
        Restart::Always => (RestartPolicyNameEnum::ALWAYS, None),
        Restart::OnFailure(retries) => (RestartPolicyNameEnum::ON_FAILURE, retries),
        Restart::UnlessStopped => (RestartPolicyNameEnum::UNLESS_STOPPED, None),
    };
    let mut bindings: HashMap<String, Option<Vec<PortBinding>>> = HashMap::new();
    for port in &service.ports {
        bindings
            .entry(port.key())
            .or_insert_with(|| Some(Vec::new()))
            .get_or_insert_with(Vec::new)
            .push(PortBinding {
                host_ip: port.host_ip.clone(),
                host_port: Some(port.host_port.map(|p| p.to_string()).unwrap_or_default()),
            });
    }
    HostConfig {
        restart_policy: Some(RestartPolicy {
            name: Some(name),
            maximum_retry_count: retries.map(i64::from),
        }),
        port_bindings: (!bindings.is_empty()).then_some(bindings),
        binds: (!service.volumes.is_empty())
            .then(|| service.volumes.iter().map(|v| v.bind()).collect()),
        ..Default::default()
    }
}

impl Daemon {
    /// Make each of `networks` that the daemon does not have (a bridge network, labelled
    /// `labels`), as compose makes a project's networks before its containers.
    pub(super) async fn ensure_networks(
        &self,
        networks: &[Network],
        labels: &HashMap<String, String>,
    ) -> Result<(), DaemonError> {
        for network in networks {
            let found = self
                .docker
                .inspect_network(
                    &network.name,
                    None::<bollard::query_parameters::InspectNetworkOptions>,
                )
                .await;
            match found {
                Ok(_) => continue,
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code: 404, ..
                }) => {}
                Err(other) => return Err(self.call_error("look up a network")(other)),
            }
            let request = NetworkCreateRequest {
                name: network.name.clone(),
                driver: Some("bridge".into()),
                labels: Some(labels.clone()),
                ..Default::default()
            };
            self.docker
                .create_network(request)
                .await
                .map_err(self.call_error("create a network"))?;
        }
        Ok(())
    }
}
