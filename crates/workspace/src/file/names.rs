//! Names and hosts in a mesh file: modules, machines, build args, registries; and typo suggestions.

use toml::Spanned;

use super::MeshError;
use super::table::{Source, cut, show};
use super::typos::nearest;

/// Longest module, mesh or namespace name (a DNS label).
pub const MAX_NAME: usize = 63;
/// Longest machine (container) name.
pub const MAX_MACHINE_NAME: usize = 128;

/// Module, mesh and namespace names: `[a-z0-9][a-z0-9-]*`, at most 63, not ending with '-'
/// (they become image repository path components and Kubernetes namespaces, where a trailing '-' is invalid).
pub(super) fn check_name(
    src: &Source<'_>,
    name: &Spanned<String>,
    what: &str,
) -> Result<(), MeshError> {
    let text = name.get_ref();
    let problem = if text.is_empty() {
        Some("is empty".to_string())
    } else if text.chars().count() > MAX_NAME {
        Some(format!(
            "is {} characters long, more than {MAX_NAME}",
            text.chars().count()
        ))
    } else if !text
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        Some("holds characters other than a-z, 0-9 and '-'".to_string())
    } else if text.starts_with('-') {
        Some("starts with '-'".to_string())
    } else if text.ends_with('-') {
        Some("ends with '-'".to_string())
    } else {
        None
    };
    let Some(problem) = problem else {
        return Ok(());
    };
    let rule = format!(
        "use [a-z0-9][a-z0-9-]* (lowercase letters, digits, '-'; not ending with '-'), at most {MAX_NAME} characters"
    );
    let fix = match suggested_name(text) {
        Some(better) if better != *text => format!("{rule}, e.g. {}", show(&better)),
        _ => rule,
    };
    Err(src.err(
        &name.span(),
        format!("{what} {} {problem}", show(text)),
        fix,
    ))
}

/// A valid name close to an invalid one: lowercased, other characters turned to '-', trimmed.
fn suggested_name(text: &str) -> Option<String> {
    let mapped: String = text
        .chars()
        .take(MAX_NAME)
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = mapped.trim_matches('-').to_string();
    (!trimmed.is_empty()).then_some(trimmed)
}

/// What is wrong with a machine name (said after it: `machine name "-x" must start with …`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(super) enum BadMachineName {
    #[error("is empty")]
    Empty,
    #[error("must start with a letter or digit")]
    FirstNotAlphanumeric,
    #[error("is longer than {MAX_MACHINE_NAME} characters")]
    TooLong,
    #[error("holds characters other than letters, digits, '_', '.' and '-'")]
    OtherCharacters,
}

pub(super) fn check_machine_name(name: &str) -> Result<(), BadMachineName> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err(BadMachineName::Empty),
        Some(c) if !c.is_ascii_alphanumeric() => {
            return Err(BadMachineName::FirstNotAlphanumeric);
        }
        _ => {}
    }
    if name.len() > MAX_MACHINE_NAME {
        return Err(BadMachineName::TooLong);
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
        return Err(BadMachineName::OtherCharacters);
    }
    Ok(())
}

pub(super) fn is_arg_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A Dockerfile stage name as the frontend takes one (`FROM … AS name`, compared lower-cased):
/// a letter, then letters, digits, `_`, `-`, `.`; at most 128 characters.
pub(super) fn is_stage_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 128
        && matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// `host[:port]`: a DNS name, an IPv4 address or a bracketed IPv6 address; no scheme, no path.
pub(super) fn check_registry(text: &str) -> Result<(), (String, String)> {
    let bad = |why: &str| {
        (
            format!("invalid registry {} in [mesh]: {why}", show(text)),
            "write registry = \"host[:port]\", e.g. \"localhost:5000\" (no scheme, no path; use insecure_registry = true for plain HTTP)"
                .to_string(),
        )
    };
    if text.contains("://") {
        return Err(bad("it has a scheme"));
    }
    if text.contains('/') {
        return Err(bad("it has a path"));
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((v6, after)) = rest.split_once(']') else {
            return Err(bad("unclosed '['"));
        };
        if v6.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad("not an IPv6 address between the brackets"));
        }
        match after {
            "" => (None, None),
            p => match p.strip_prefix(':') {
                Some(port) => (None, Some(port)),
                None => return Err(bad("unexpected text after ']'")),
            },
        }
    } else {
        match text.rsplit_once(':') {
            Some((h, p)) => (Some(h), Some(p)),
            None => (Some(text), None),
        }
    };
    if let Some(port) = port
        && !matches!(port.parse::<u16>(), Ok(p) if p > 0)
    {
        return Err(bad("the port is not a number from 1 to 65535"));
    }
    if let Some(host) = host {
        if host.is_empty() {
            return Err(bad("the host is empty"));
        }
        if host.len() > 253 {
            return Err(bad("the host is longer than 253 characters"));
        }
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        };
        if !host.split('.').all(label_ok) {
            return Err(bad("the host is not a DNS name or an IP address"));
        }
    }
    Ok(())
}

/// "did you mean …?" for a name that is not one of `known`.
pub(super) fn suggest(wrong: &str, known: &[&str]) -> String {
    let listed: Vec<String> = known.iter().take(12).map(|n| cut(n)).collect();
    let more = if known.len() > 12 { ", …" } else { "" };
    let list = if known.is_empty() {
        "none".to_string()
    } else {
        format!("{}{more}", listed.join(", "))
    };
    match nearest(wrong, known.iter().copied()) {
        Some(near) => format!("did you mean {}? (modules: {list})", show(near)),
        None => format!(
            "name one of the mesh's modules ({list}) or declare a [[module]] named {}",
            show(wrong)
        ),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn registry_hosts() {
        for ok in [
            "localhost:5000",
            "localhost",
            "registry.example.com",
            "10.0.0.1:443",
            "[::1]:5000",
            "[::1]",
            "a-b.c",
        ] {
            assert!(check_registry(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://localhost:5000",
            "localhost:5000/path",
            "",
            ":5000",
            "localhost:0",
            "localhost:99999",
            "localhost:x",
            "-bad.com",
            "a..b",
            "[::1",
            "[nope]:1",
            "host name",
        ] {
            assert!(check_registry(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names() {
        assert!(check_machine_name("api-1").is_ok());
        assert!(check_machine_name("A_b.c-1").is_ok());
        assert!(check_machine_name("-x").is_err());
        assert!(check_machine_name("a b").is_err());
        assert!(check_machine_name(&"a".repeat(MAX_MACHINE_NAME + 1)).is_err());
        assert_eq!(suggested_name("My_API"), Some("my-api".to_string()));
        assert!(
            is_arg_name("_A1") && !is_arg_name("1A") && !is_arg_name("A-B") && !is_arg_name("")
        );
    }
}
