//! `compose = { project = "shop", service = "backend" }` in a `[[machine]]`: the machine is a
//! compose service's containers, found by compose's labels. Its names follow compose's rules; the
//! keys only a machine meshtop makes has are refused beside it, saying why.

use super::MeshError;
use super::table::{Section, Source, show};
use crate::mesh::model::ComposeService;

const COMPOSE_KEYS: &[&str] = &["project", "service"];

/// The keys of a `[[machine]]`.
pub(super) const MACHINE_KEYS: &[&str] = &[
    "name",
    "module",
    "target",
    "compose",
    // From here on, what only a machine meshtop makes has (see `MADE_BY_MESHTOP`).
    "command",
    "env",
    "ports",
    "volumes",
    "networks",
    "restart",
    "healthcheck",
    "stop_grace_period",
];
/// The `[[machine]]` keys that say how meshtop makes the container.
pub(super) const MADE_BY_MESHTOP: &[&str] = MACHINE_KEYS.split_at(4).1;

/// The machine's `compose` table, checked; None without one.
pub(super) fn compose(
    src: &Source<'_>,
    machine: &Section<'_, '_>,
) -> Result<Option<ComposeService>, MeshError> {
    let Some(value) = machine.get("compose") else {
        return Ok(None);
    };
    let example = "{ project = \"shop\", service = \"backend\" }";
    let table = Section::of(
        src,
        value,
        format!("`compose` of {}", machine.label),
        COMPOSE_KEYS,
        &format!("write compose = {example}"),
    )?;
    table.check_keys(src)?;
    let project = table.required_string(src, "project", "\"shop\" (docker-compose -p)")?;
    if let Err(why) = check_project(project.get_ref()) {
        return Err(src.err(
            &project.span(),
            format!(
                "compose project {} of {} {why}",
                show(project.get_ref()),
                machine.label
            ),
            "a compose project name is lowercase letters, digits, '-' and '_', starting with a letter or digit (as docker-compose -p takes it)",
        ));
    }
    let service = table.required_string(
        src,
        "service",
        "\"backend\" (a service of the compose file)",
    )?;
    if let Err(why) = check_service(service.get_ref()) {
        return Err(src.err(
            &service.span(),
            format!(
                "compose service {} of {} {why}",
                show(service.get_ref()),
                machine.label
            ),
            "a compose service name is letters, digits, '.', '_' and '-' (as the compose file's services: key)",
        ));
    }
    // A compose service's containers are made by `docker-compose up` from its compose file.
    for key in MADE_BY_MESHTOP {
        if let Some(value) = machine.get(key) {
            return Err(src.err(
                &value.span(),
                format!(
                    "{} is compose service {} of project {}, so `{key}` cannot be set here: docker-compose makes its containers from the compose file, meshtop only moves them to new artifacts",
                    machine.label,
                    show(service.get_ref()),
                    show(project.get_ref())
                ),
                format!(
                    "set {key} on services.{} in the compose file, or remove `compose` to have meshtop make the machine",
                    service.get_ref()
                ),
            ));
        }
    }
    Ok(Some(ComposeService {
        project: project.into_inner(),
        service: service.into_inner(),
    }))
}

/// Compose's rule for a project name: lowercase letters, digits, dashes and underscores, beginning
/// with a lowercase letter or a digit.
fn check_project(name: &str) -> Result<(), &'static str> {
    let mut chars = name.chars();
    match chars.next() {
        None => Err("is empty"),
        Some(c) if !(c.is_ascii_lowercase() || c.is_ascii_digit()) => {
            Err("does not begin with a lowercase letter or a digit")
        }
        _ if !chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_') =>
        {
            Err("holds characters other than lowercase letters, digits, '-' and '_'")
        }
        _ => Ok(()),
    }
}

/// Compose's rule for a service name: `[a-zA-Z0-9._-]+`.
fn check_service(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        Err("is empty")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Err("holds characters other than letters, digits, '.', '_' and '-'")
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{check_project, check_service};

    #[test]
    fn names_follow_composes_rules() {
        assert!(check_project("shop").is_ok());
        assert!(check_project("0shop_a-b").is_ok());
        assert!(check_project("Shop").is_err());
        assert!(check_project("-shop").is_err());
        assert!(check_project("").is_err());
        assert!(check_project("sh.op").is_err());
        assert!(check_service("Backend.v2_x-y").is_ok());
        assert!(check_service("back end").is_err());
        assert!(check_service("").is_err());
    }
}
