//! A container's own configuration, to make it again on another image (a send): everything it was
//! given, nothing it merely inherited from its old image. Pure: the old container's and its image's
//! inspection in, the create body and the networks to connect before start out.

use std::collections::HashMap;

use bollard::models::{
    ContainerConfig, ContainerCreateBody, ContainerInspectResponse, EndpointSettings, HostConfig,
    ImageConfig, NetworkingConfig,
};

use crate::mesh::model::{MACHINE_LABEL, MESH_LABEL, MODULE_LABEL, TARGET_LABEL};

/// A network's name and the endpoint to make on it.
type Endpoint = (String, EndpointSettings);

/// The old container on a new image.
pub(super) struct Replacement {
    /// The create call: its own `Config`, its whole `HostConfig`, its primary network's endpoint.
    pub body: ContainerCreateBody,
    /// Every other network with its endpoint (aliases, IPAM config, links), connected after the
    /// create and before the start: the Engine API takes one network at create before 1.44
    /// (Docker 20.10 speaks 1.41), as compose does it there.
    pub later: Vec<Endpoint>,
}

/// The old container `old` (made from an image whose config was `old_image`, None when that image
/// is gone: then everything is taken as the container's own) on `new_image`.
pub(super) fn replacement(
    old: &ContainerInspectResponse,
    old_image: Option<&ImageConfig>,
    new_image: &str,
) -> Replacement {
    let short_id: String = old
        .id
        .as_deref()
        .unwrap_or_default()
        .chars()
        .take(12)
        .collect();
    let mut body = own_config(
        old.config.clone().unwrap_or_default(),
        old_image.cloned().unwrap_or_default(),
        &short_id,
    );
    body.image = Some(new_image.to_string());
    body.host_config = old.host_config.clone().map(with_links_as_given);
    let (primary, later) = endpoints(old, &short_id);
    body.networking_config = primary.map(|(network, endpoint)| NetworkingConfig {
        endpoints_config: Some(HashMap::from([(network, endpoint)])),
    });
    Replacement { body, later }
}

/// Every field of `Config` the container set. A field equal to the old image's was inherited
/// (the daemon fills a container's config from its image at create) and is left out, so that the
/// new image's own applies; env, labels, ports and volumes are weighed item by item.
fn own_config(config: ContainerConfig, image: ImageConfig, short_id: &str) -> ContainerCreateBody {
    let own = |value: Option<Vec<String>>, inherited: &Option<Vec<String>>| {
        value.filter(|v| !v.is_empty() && Some(v) != inherited.as_ref())
    };
    let not_in = |value: Option<Vec<String>>, inherited: &Option<Vec<String>>| {
        let inherited = inherited.clone().unwrap_or_default();
        value
            .map(|items| {
                items
                    .into_iter()
                    .filter(|item| !inherited.contains(item))
                    .collect::<Vec<_>>()
            })
            .filter(|items| !items.is_empty())
    };
    let entrypoint = own(config.entrypoint, &image.entrypoint);
    // The daemon gives a container the image's command only when it set no entrypoint of its own.
    let cmd = match entrypoint {
        Some(_) => config.cmd,
        None => own(config.cmd, &image.cmd),
    };
    ContainerCreateBody {
        // The daemon names a container's host by its short id unless it was given a hostname.
        hostname: config.hostname.filter(|h| !h.is_empty() && h != short_id),
        domainname: config.domainname.filter(|d| !d.is_empty()),
        user: config
            .user
            .filter(|u| !u.is_empty() && Some(u) != image.user.as_ref()),
        attach_stdin: config.attach_stdin,
        attach_stdout: config.attach_stdout,
        attach_stderr: config.attach_stderr,
        exposed_ports: not_in(config.exposed_ports, &image.exposed_ports),
        tty: config.tty,
        open_stdin: config.open_stdin,
        stdin_once: config.stdin_once,
        env: not_in(config.env, &image.env),
        cmd,
        healthcheck: config
            .healthcheck
            .filter(|h| Some(h) != image.healthcheck.as_ref()),
        volumes: not_in(config.volumes, &image.volumes),
        working_dir: config
            .working_dir
            .filter(|w| !w.is_empty() && Some(w) != image.working_dir.as_ref()),
        entrypoint,
        network_disabled: config.network_disabled,
        labels: Some(own_labels(config.labels, image.labels)),
        stop_signal: config
            .stop_signal
            .filter(|s| !s.is_empty() && Some(s) != image.stop_signal.as_ref()),
        stop_timeout: config.stop_timeout,
        shell: own(config.shell, &image.shell),
        ..Default::default()
    }
}

/// The labels set on the container (compose's `com.docker.compose.*` among them), and meshtop's
/// own always, even where the old image carried the same.
fn own_labels(
    labels: Option<HashMap<String, String>>,
    image: Option<HashMap<String, String>>,
) -> HashMap<String, String> {
    let image = image.unwrap_or_default();
    labels
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, v)| {
            [MODULE_LABEL, MESH_LABEL, MACHINE_LABEL, TARGET_LABEL].contains(&k.as_str())
                || image.get(k) != Some(v)
        })
        .collect()
}

/// Legacy links as a create takes them (`name:alias`): an inspection shows each as the linked
/// container's and the link's full names (`/db:/web/db`), which a create would read as an alias
/// `/web/db` under the new container's own name.
fn with_links_as_given(mut host: HostConfig) -> HostConfig {
    host.links = host.links.map(|links| {
        links
            .into_iter()
            .map(|link| match link.split_once(':') {
                Some((name, alias)) => {
                    let alias = alias.rsplit('/').next().unwrap_or(alias);
                    format!("{}:{alias}", name.trim_start_matches('/'))
                }
                None => link,
            })
            .collect()
    });
    host
}

/// The container's networks, each endpoint as it was asked for (aliases, IPAM config, links,
/// driver options; never what the daemon assigned: ids, addresses, the old container's short id
/// among the aliases): the primary one (`NetworkMode`), and the others.
fn endpoints(old: &ContainerInspectResponse, short_id: &str) -> (Option<Endpoint>, Vec<Endpoint>) {
    let mode = old
        .host_config
        .as_ref()
        .and_then(|h| h.network_mode.clone())
        .unwrap_or_default();
    // The host's stack, none, or another container's: no endpoints of its own to make.
    if mode == "host" || mode == "none" || mode.starts_with("container:") {
        return (None, Vec::new());
    }
    let primary = if mode.is_empty() || mode == "default" {
        "bridge".to_string()
    } else {
        mode
    };
    let mut networks: Vec<Endpoint> = old
        .network_settings
        .as_ref()
        .and_then(|n| n.networks.clone())
        .unwrap_or_default()
        .into_iter()
        .collect();
    networks.sort_by(|a, b| a.0.cmp(&b.0));
    // NetworkMode names the primary network, or (rarely) its id.
    let primary = networks
        .iter()
        .find(|(network, _)| *network == primary)
        .or_else(|| {
            networks.iter().find(|(_, e)| {
                e.network_id
                    .as_deref()
                    .is_some_and(|id| !id.is_empty() && id.starts_with(primary.as_str()))
            })
        })
        .map(|(network, _)| network.clone());
    let full_id = old.id.clone().unwrap_or_default();
    let mut first = None;
    let mut later = Vec::new();
    for (network, endpoint) in networks {
        let is_primary = primary.as_ref() == Some(&network);
        let aliases = endpoint.aliases.map(|aliases| {
            aliases
                .into_iter()
                .filter(|a| a != short_id && *a != full_id)
                .collect::<Vec<_>>()
        });
        let asked = EndpointSettings {
            ipam_config: endpoint.ipam_config,
            links: endpoint.links.filter(|l| !l.is_empty()),
            aliases: aliases.filter(|a| !a.is_empty()),
            driver_opts: endpoint.driver_opts.filter(|d| !d.is_empty()),
            ..Default::default()
        };
        if is_primary {
            first = Some((network, asked));
        } else {
            later.push((network, asked));
        }
    }
    (first, later)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bollard::models::{HealthConfig, NetworkSettings};

    fn compose_backend() -> ContainerInspectResponse {
        let id = "0123456789abcdef0123456789abcdef";
        let endpoint = |alias: &str| EndpointSettings {
            aliases: Some(vec!["backend".into(), alias.into(), "0123456789ab".into()]),
            network_id: Some("f00d".into()),
            endpoint_id: Some("e1".into()),
            ip_address: Some("172.30.0.2".into()),
            ..Default::default()
        };
        ContainerInspectResponse {
            id: Some(id.into()),
            config: Some(ContainerConfig {
                hostname: Some("backend-host".into()),
                domainname: Some("stack.test".into()),
                env: Some(vec!["PATH=/bin".into(), "ROLE=backend".into()]),
                cmd: Some(vec!["httpd".into()]),
                healthcheck: Some(HealthConfig {
                    test: Some(vec!["CMD-SHELL".into(), "cat /www/ok".into()]),
                    ..Default::default()
                }),
                labels: Some(HashMap::from([
                    ("com.docker.compose.service".into(), "backend".into()),
                    (MODULE_LABEL.into(), "backend".into()),
                    ("jr2.dev/inputs".into(), "old".into()),
                ])),
                stop_timeout: Some(2),
                ..Default::default()
            }),
            host_config: Some(HostConfig {
                network_mode: Some("p_front".into()),
                links: Some(vec!["/p_db_1:/p_backend_1/db".into()]),
                ..Default::default()
            }),
            network_settings: Some(NetworkSettings {
                networks: Some(HashMap::from([
                    ("p_front".into(), endpoint("api-front")),
                    ("p_back".into(), endpoint("api-back")),
                ])),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn its_image() -> ImageConfig {
        ImageConfig {
            env: Some(vec!["PATH=/bin".into()]),
            cmd: Some(vec!["httpd".into()]),
            labels: Some(HashMap::from([
                (MODULE_LABEL.into(), "backend".into()),
                ("jr2.dev/inputs".into(), "old".into()),
            ])),
            ..Default::default()
        }
    }

    #[test]
    fn the_replacement_keeps_what_the_container_was_given_and_drops_what_it_inherited() {
        let made = replacement(&compose_backend(), Some(&its_image()), "sha256:new");
        let body = made.body;
        assert_eq!(body.image.as_deref(), Some("sha256:new"));
        assert_eq!(body.hostname.as_deref(), Some("backend-host"));
        assert_eq!(body.domainname.as_deref(), Some("stack.test"));
        assert_eq!(body.env, Some(vec!["ROLE=backend".to_string()]));
        assert_eq!(body.cmd, None, "inherited: the new image's command applies");
        assert!(body.healthcheck.is_some());
        assert_eq!(body.stop_timeout, Some(2));
        let labels = body.labels.unwrap();
        assert_eq!(labels["com.docker.compose.service"], "backend");
        assert_eq!(labels[MODULE_LABEL], "backend");
        assert!(!labels.contains_key("jr2.dev/inputs"), "{labels:?}");
        let links = body.host_config.unwrap().links.unwrap();
        assert_eq!(links, vec!["p_db_1:db".to_string()]);
    }

    #[test]
    fn every_network_keeps_its_aliases_but_never_the_old_containers_id() {
        let made = replacement(&compose_backend(), Some(&its_image()), "sha256:new");
        let primary = made
            .body
            .networking_config
            .unwrap()
            .endpoints_config
            .unwrap();
        let front = &primary["p_front"];
        assert_eq!(
            front.aliases,
            Some(vec!["backend".to_string(), "api-front".to_string()])
        );
        assert_eq!(front.endpoint_id, None);
        assert_eq!(front.ip_address, None);
        assert_eq!(made.later.len(), 1);
        assert_eq!(made.later[0].0, "p_back");
        assert_eq!(
            made.later[0].1.aliases,
            Some(vec!["backend".to_string(), "api-back".to_string()])
        );
    }

    #[test]
    fn a_hostname_the_daemon_gave_and_a_host_network_are_not_carried() {
        let mut old = compose_backend();
        old.config.as_mut().unwrap().hostname = Some("0123456789ab".into());
        old.host_config.as_mut().unwrap().network_mode = Some("host".into());
        let made = replacement(&old, None, "sha256:new");
        assert_eq!(made.body.hostname, None);
        assert!(made.body.networking_config.is_none());
        assert!(made.later.is_empty());
        // Without the old image everything is the container's own.
        assert_eq!(made.body.cmd, Some(vec!["httpd".to_string()]));
    }

    #[test]
    fn an_entrypoint_of_its_own_keeps_its_command_even_when_the_image_has_the_same() {
        let mut old = compose_backend();
        old.config.as_mut().unwrap().entrypoint = Some(vec!["/bin/sh".into(), "-c".into()]);
        let made = replacement(&old, Some(&its_image()), "sha256:new");
        assert_eq!(made.body.cmd, Some(vec!["httpd".to_string()]));
    }
}
