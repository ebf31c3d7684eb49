//! `[[builder]]` tables: the Docker daemons that build for the mesh, each with its endpoint, its cap
//! and its platforms. More than one builder, or one that is not the local daemon, hands artifacts
//! over through the mesh's registry: refused without one.

use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::DeValue;

use super::MeshError;
use super::names::check_name;
use super::read::{Header, elements, platforms};
use super::table::{Section, Source, show};
use crate::mesh::builders::{Builder, Endpoint, registry_needed};

const BUILDER_KEYS: &[&str] = &[
    "name",
    "endpoint",
    "tls_dir",
    "max_builds",
    "platforms",
    "takes_secrets",
];

/// What a TLS directory holds, as `DOCKER_CERT_PATH` does.
pub const TLS_FILES: &[&str] = &["ca.pem", "cert.pem", "key.pem"];

type Value<'a, 'i> = &'a Spanned<DeValue<'i>>;

/// Every `[[builder]]`, in file order: names unique, endpoints readable, a TLS directory that
/// holds its three files, and the registry they need.
pub(super) fn builders(
    src: &Source<'_>,
    value: Option<Value<'_, '_>>,
    header: &Header,
) -> Result<Vec<Builder>, MeshError> {
    let items = elements(src, value, "builder")?;
    let mut out: Vec<Builder> = Vec::with_capacity(items.len());
    let mut spans = Vec::with_capacity(items.len());
    for item in items {
        let builder = one(src, item)?;
        if let Some(first) = out.iter().find(|b| b.name == builder.name) {
            return Err(src.err(
                &item.span(),
                format!(
                    "builder {} is declared twice (lines {} and {})",
                    show(&builder.name),
                    first.line,
                    builder.line
                ),
                "rename one of them or remove the duplicate [[builder]] table",
            ));
        }
        spans.push(item.span());
        out.push(builder);
    }
    if header.registry.is_none()
        && let Some(why) = registry_needed(&out)
    {
        let at = spans.get(1).or(spans.first()).cloned().unwrap_or_default();
        return Err(src.err(
            &at,
            format!(
                "the mesh has no registry, but {why}: builders hand their artifacts to each other and to the target through the registry"
            ),
            "add registry = \"host:port\" to [mesh], or keep one [[builder]] at endpoint = \"unix:///var/run/docker.sock\" (the local daemon)",
        ));
    }
    Ok(out)
}

fn one(src: &Source<'_>, item: Value<'_, '_>) -> Result<Builder, MeshError> {
    let line = src.line(&item.span());
    let mut section = Section::of(
        src,
        item,
        format!("the [[builder]] at line {line}"),
        BUILDER_KEYS,
        "use [[builder]] tables",
    )?;
    if let Some(name) = section.get("name").and_then(|v| v.get_ref().as_str()) {
        section.label = format!("builder {}", show(name));
    }
    section.check_keys(src)?;
    let name = section.required_string(src, "name", "\"farm-1\"")?;
    check_name(src, &name, "builder name")?;
    let written = section.required_string(src, "endpoint", "\"unix:///var/run/docker.sock\"")?;
    let mut endpoint = Endpoint::parse(written.get_ref()).map_err(|problem| {
        src.err(
            &written.span(),
            format!(
                "endpoint {} of {} cannot be read: {}",
                show(written.get_ref()),
                section.label,
                problem.what
            ),
            problem.fix,
        )
    })?;
    if let Some(dir) = section.string(src, "tls_dir", "\"certs/farm-1\"")? {
        let Endpoint::Tcp { tls_dir, .. } = &mut endpoint else {
            return Err(src.err(
                &dir.span(),
                format!(
                    "`tls_dir` of {} is for a tcp:// endpoint, but its endpoint is {}",
                    section.label,
                    show(written.get_ref())
                ),
                "remove tls_dir, or give a tcp://host:port endpoint",
            ));
        };
        *tls_dir = Some(tls_directory(src, &section.label, &dir)?);
    }
    let max_builds = section
        .count(src, "max_builds", "2")?
        .map_or(1, Spanned::into_inner);
    let platforms = platforms(src, &section)?.unwrap_or_default();
    let takes_secrets = match section.boolean(src, "takes_secrets")? {
        Some(said) if *said.get_ref() && !endpoint.is_private() => {
            return Err(src.err(
                &said.span(),
                format!(
                    "{} takes secrets, but its endpoint {} is plain tcp://: secrets and the ssh agent would cross the network in the clear",
                    section.label,
                    show(written.get_ref())
                ),
                "give it tls_dir (TLS), reach it over ssh://, or remove takes_secrets",
            ));
        }
        Some(said) => said.into_inner(),
        None => false,
    };
    Ok(Builder {
        name: name.into_inner(),
        endpoint,
        max_builds,
        platforms,
        line,
        takes_secrets,
    })
}

/// The TLS directory: `~/` is the home directory, a relative path starts at the mesh file's
/// directory; it must hold `ca.pem`, `cert.pem` and `key.pem`.
fn tls_directory(
    src: &Source<'_>,
    label: &str,
    written: &Spanned<String>,
) -> Result<PathBuf, MeshError> {
    let text = written.get_ref();
    let path = match text.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) => PathBuf::from(home).join(rest),
            None => PathBuf::from(text),
        },
        None if Path::new(text).is_absolute() => PathBuf::from(text),
        None => src
            .file
            .parent()
            .map_or_else(|| PathBuf::from(text), |dir| dir.join(text)),
    };
    let missing: Vec<&str> = TLS_FILES
        .iter()
        .copied()
        .filter(|file| !path.join(file).is_file())
        .collect();
    if !missing.is_empty() {
        return Err(src.err(
            &written.span(),
            format!(
                "`tls_dir` of {label} ({}) holds no {}",
                path.display(),
                missing.join(", ")
            ),
            "point it at the directory DOCKER_CERT_PATH would name: ca.pem (the daemon's CA), cert.pem and key.pem (this client's)",
        ));
    }
    Ok(path)
}
