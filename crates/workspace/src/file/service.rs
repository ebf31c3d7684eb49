//! A `[[machine]]`'s service keys, with compose's names and meanings: `ports`, `volumes`,
//! `networks` (a list, or a table giving each network's `aliases`), `restart`, `healthcheck` and
//! `stop_grace_period`. Each value is checked at its line.

use std::path::{Component, Path, PathBuf};

use toml::Spanned;
use toml::de::DeValue;

use super::MeshError;
use super::table::{Section, Source, show};
use crate::mesh::service::{self, Healthcheck, Network, Service};

const NETWORK_KEYS: &[&str] = &["aliases"];
const HEALTHCHECK_KEYS: &[&str] = &[
    "test",
    "interval",
    "timeout",
    "retries",
    "start_period",
    "disable",
];
const NETWORKS_EXAMPLE: &str = "[\"front\", \"back\"] or { front = { aliases = [\"api\"] } }";
const HEALTHCHECK_EXAMPLE: &str = "{ test = [\"CMD\", \"wget\", \"-q\", \"-O-\", \"http://localhost:8080/\"], interval = \"5s\" }";

/// The machine's service keys, checked.
pub(super) fn service(src: &Source<'_>, machine: &Section<'_, '_>) -> Result<Service, MeshError> {
    let label = &machine.label;
    let mut out = Service::default();
    for port in listed(src, machine, "ports", "[\"8080:80\"]")? {
        out.ports.push(service::parse_port(port.get_ref()).map_err(|why| {
            src.err(
                &port.span(),
                format!("port {} of {label} {why}", show(port.get_ref())),
                "write [HOST_IP:][HOST_PORT:]CONTAINER_PORT[/tcp|udp|sctp], e.g. ports = [\"8080:80\"], as compose does",
            )
        })?);
    }
    for volume in listed(src, machine, "volumes", "[\"data:/data\"]")? {
        let text = volume.get_ref();
        let checked = service::parse_volume(text);
        out.volumes.push(checked.map_err(|why| {
            src.err(
                &volume.span(),
                format!("volume {} of {label} {why}", show(text)),
                "write SOURCE:TARGET[:ro|rw]: a volume name or a path (./www relative to the mesh file), e.g. volumes = [\"data:/data\"], as compose does",
            )
        })?);
    }
    out.networks = networks(src, machine)?;
    if let Some(restart) = machine.string(src, "restart", "\"unless-stopped\"")? {
        out.restart = Some(service::parse_restart(restart.get_ref()).map_err(|why| {
            src.err(
                &restart.span(),
                format!("`restart` {} of {label} {why}", show(restart.get_ref())),
                "write restart = \"no\", \"always\", \"on-failure\" (or \"on-failure:3\") or \"unless-stopped\" (the default), as compose does",
            )
        })?);
    }
    out.healthcheck = healthcheck(src, machine)?;
    out.stop_grace_period = duration(src, machine, "stop_grace_period", "\"10s\"")?;
    Ok(out)
}

/// An array of strings, or none.
fn listed(
    src: &Source<'_>,
    machine: &Section<'_, '_>,
    key: &str,
    example: &str,
) -> Result<Vec<Spanned<String>>, MeshError> {
    Ok(machine
        .string_list(src, key, example)?
        .map(Spanned::into_inner)
        .unwrap_or_default())
}

/// A compose duration (`1m30s`), or none.
fn duration(
    src: &Source<'_>,
    table: &Section<'_, '_>,
    key: &str,
    example: &str,
) -> Result<Option<std::time::Duration>, MeshError> {
    let Some(text) = table.string(src, key, example)? else {
        return Ok(None);
    };
    service::parse_duration(text.get_ref())
        .map(Some)
        .map_err(|why| {
            src.err(
                &text.span(),
                format!("`{key}` {} of {} {why}", show(text.get_ref()), table.label),
                format!("write a compose duration, e.g. {key} = {example} (units us, ms, s, m, h: \"1m30s\")"),
            )
        })
}

/// `networks`: a list of names, or a table of name → `{ aliases = [...] }`.
fn networks(src: &Source<'_>, machine: &Section<'_, '_>) -> Result<Vec<Network>, MeshError> {
    let Some(value) = machine.get("networks") else {
        return Ok(Vec::new());
    };
    let mut out: Vec<Network> = Vec::new();
    let mut named = |name: &Spanned<String>, aliases: Vec<Spanned<String>>| {
        for word in std::iter::once(name).chain(&aliases) {
            if !service::is_network_name(word.get_ref()) {
                return Err(src.err(
                    &word.span(),
                    format!(
                        "network name or alias {} of {} is not one the daemon takes",
                        show(word.get_ref()),
                        machine.label
                    ),
                    "use [a-zA-Z0-9][a-zA-Z0-9_.-]*",
                ));
            }
        }
        if out.iter().any(|n| n.name == *name.get_ref()) {
            return Err(src.err(
                &name.span(),
                format!(
                    "network {} of {} is named twice",
                    show(name.get_ref()),
                    machine.label
                ),
                "name each network once",
            ));
        }
        out.push(Network {
            name: name.get_ref().clone(),
            aliases: aliases.into_iter().map(Spanned::into_inner).collect(),
        });
        Ok(())
    };
    match value.get_ref() {
        DeValue::Array(_) => {
            for name in listed(src, machine, "networks", NETWORKS_EXAMPLE)? {
                named(&name, Vec::new())?;
            }
        }
        DeValue::Table(table) => {
            // In file order (the first is joined at create).
            let mut entries: Vec<_> = table.iter().collect();
            entries.sort_by_key(|(key, _)| key.span().start);
            for (key, each) in entries {
                let name = Spanned::new(key.span(), key.get_ref().to_string());
                let network = Section::of(
                    src,
                    each,
                    format!("network {} of {}", show(name.get_ref()), machine.label),
                    NETWORK_KEYS,
                    &format!("write networks = {NETWORKS_EXAMPLE}"),
                )?;
                network.check_keys(src)?;
                let aliases = listed(src, &network, "aliases", "[\"api\"]")?;
                named(&name, aliases)?;
            }
        }
        _ => {
            return Err(src.err(
                &value.span(),
                format!(
                    "`networks` in {} must be a list of names or a table",
                    machine.label
                ),
                format!("write networks = {NETWORKS_EXAMPLE}"),
            ));
        }
    }
    Ok(out)
}

/// `healthcheck`: compose's keys; `test` a string (run by the shell) or `["CMD", …]`,
/// `["CMD-SHELL", "…"]`, `["NONE"]`; `disable = true` alone turns the image's off.
fn healthcheck(
    src: &Source<'_>,
    machine: &Section<'_, '_>,
) -> Result<Option<Healthcheck>, MeshError> {
    let Some(value) = machine.get("healthcheck") else {
        return Ok(None);
    };
    let check = Section::of(
        src,
        value,
        format!("`healthcheck` of {}", machine.label),
        HEALTHCHECK_KEYS,
        &format!("write healthcheck = {HEALTHCHECK_EXAMPLE}"),
    )?;
    check.check_keys(src)?;
    if let Some(disable) = check.boolean(src, "disable")? {
        let others = HEALTHCHECK_KEYS
            .iter()
            .find(|k| **k != "disable" && check.get(k).is_some());
        if let Some(other) = others.filter(|_| *disable.get_ref()) {
            return Err(src.err(
                &disable.span(),
                format!("{} is disabled and sets `{other}` too", check.label),
                "keep disable = true alone, or remove it",
            ));
        }
        if *disable.get_ref() {
            return Ok(Some(Healthcheck {
                test: vec!["NONE".into()],
                interval: None,
                timeout: None,
                retries: None,
                start_period: None,
            }));
        }
    }
    let test = match check.get("test").map(|v| v.get_ref()) {
        None => return Err(check.missing(src, "test", "[\"CMD-SHELL\", \"cat /www/ok\"]")),
        Some(DeValue::String(command)) => vec!["CMD-SHELL".to_string(), command.to_string()],
        Some(_) => {
            let list = listed(
                src,
                &check,
                "test",
                "[\"CMD\", \"wget\", \"-q\", \"http://localhost/\"]",
            )?;
            let first = list.first().map(|s| s.get_ref().as_str());
            match (first, list.len()) {
                (Some("CMD"), 2..) | (Some("CMD-SHELL"), 2) | (Some("NONE"), 1) => {}
                _ => {
                    let span = list.first().map_or(check.span.clone(), |s| s.span());
                    return Err(src.err(
                        &span,
                        format!("`test` of {} is not [\"CMD\", args…], [\"CMD-SHELL\", \"command\"] or [\"NONE\"]", check.label),
                        "write test = [\"CMD\", \"wget\", \"-q\", \"http://localhost:8080/\"] or a string run by the shell, as compose does",
                    ));
                }
            }
            list.into_iter().map(Spanned::into_inner).collect()
        }
    };
    Ok(Some(Healthcheck {
        test,
        interval: duration(src, &check, "interval", "\"5s\"")?,
        timeout: duration(src, &check, "timeout", "\"2s\"")?,
        retries: check.count(src, "retries", "3")?.map(Spanned::into_inner),
        start_period: duration(src, &check, "start_period", "\"10s\"")?,
    }))
}

/// The machine's volumes with their relative host paths (`./www`) resolved under `dir` (the mesh
/// file's directory), lexically.
pub(super) fn resolved(mut service: Service, dir: &Path) -> Service {
    for volume in &mut service.volumes {
        if volume.source.starts_with('.') {
            let mut path = PathBuf::new();
            for part in dir.join(&volume.source).components() {
                match part {
                    Component::CurDir => {}
                    Component::ParentDir => {
                        path.pop();
                    }
                    other => path.push(other),
                }
            }
            volume.source = path.display().to_string();
        }
    }
    service
}
