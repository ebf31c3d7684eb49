//! How a Dockerfile takes another module's image: what decides whether an edge of another tool's
//! file (a bake `target:` context, a skaffold `requires` alias) is a meshtop `base`.

use std::collections::BTreeMap;
use std::path::Path;

/// How a Dockerfile names an image a stage is built `FROM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Use {
    /// `FROM name`: the name itself (a named context).
    Literal,
    /// `ARG X[=…]` / `FROM ${X}`: through the build arg `X`.
    Arg(String),
    /// No `FROM` names it.
    Unused,
}

/// The `FROM` images of the Dockerfile at `path` (as written, flags dropped) and the defaults of
/// the `ARG`s before them; empty when it cannot be read.
fn froms(path: &Path) -> (Vec<String>, BTreeMap<String, String>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut images = Vec::new();
    let mut defaults = BTreeMap::new();
    let mut joined = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') {
            continue;
        }
        if let Some(head) = trimmed.strip_suffix('\\') {
            joined.push_str(head);
            joined.push(' ');
            continue;
        }
        joined.push_str(trimmed);
        let instruction = std::mem::take(&mut joined);
        let mut words = instruction.split_whitespace();
        match words.next().map(str::to_ascii_uppercase).as_deref() {
            Some("ARG") => {
                for word in words {
                    if let Some((name, value)) = word.split_once('=') {
                        defaults.insert(name.to_string(), value.trim_matches('"').to_string());
                    }
                }
            }
            Some("FROM") => {
                if let Some(image) = words.find(|w| !w.starts_with("--")) {
                    images.push(image.to_string());
                }
            }
            _ => {}
        }
    }
    (images, defaults)
}

/// The build arg `image` reads, when it is all one: `$X`, `${X}`, `${X:-default}`.
fn arg_of(image: &str) -> Option<&str> {
    let inner = image
        .strip_prefix("${")
        .and_then(|rest| rest.strip_suffix('}'))
        .or_else(|| image.strip_prefix('$'))?;
    let name = inner.split([':', '-']).next().unwrap_or(inner);
    (!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .then_some(name)
}

/// How the Dockerfile at `path` takes the named context `name`: `FROM name`, or `FROM ${X}` with
/// `ARG X=name` (the form that builds under bake and under meshtop alike).
pub(super) fn context_use(path: &Path, name: &str) -> Use {
    let (images, defaults) = froms(path);
    for image in &images {
        if image.eq_ignore_ascii_case(name) {
            return Use::Literal;
        }
        if let Some(arg) = arg_of(image)
            && defaults
                .get(arg)
                .is_some_and(|d| d.eq_ignore_ascii_case(name))
        {
            return Use::Arg(arg.to_string());
        }
    }
    Use::Unused
}

/// Whether the Dockerfile at `path` builds a stage `FROM ${arg}`.
pub(super) fn arg_use(path: &Path, arg: &str) -> bool {
    froms(path).0.iter().any(|image| arg_of(image) == Some(arg))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[test]
    fn a_context_is_named_literally_or_through_an_arg() {
        let literal = file("# base\nFROM --platform=$BUILDPLATFORM \\\n  base AS build\n");
        assert_eq!(context_use(literal.path(), "base"), Use::Literal);
        let through = file("ARG BASE=runtime\nFROM ${BASE}\n");
        assert_eq!(
            context_use(through.path(), "runtime"),
            Use::Arg("BASE".into())
        );
        assert_eq!(context_use(through.path(), "other"), Use::Unused);
        assert!(arg_use(through.path(), "BASE"));
        assert!(!arg_use(literal.path(), "BASE"));
        assert!(arg_use(file("ARG B\nFROM $B\n").path(), "B"));
    }
}
