//! How a Dockerfile takes another module's image through a build arg: what decides whether a
//! skaffold `requires` alias is an edge.

use std::path::Path;

/// The `FROM` images of the Dockerfile at `path` (as written, flags dropped); empty when it
/// cannot be read.
fn froms(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut images = Vec::new();
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
        if words.next().is_some_and(|w| w.eq_ignore_ascii_case("FROM"))
            && let Some(image) = words.find(|w| !w.starts_with("--"))
        {
            images.push(image.to_string());
        }
    }
    images
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

/// Whether the Dockerfile at `path` builds a stage `FROM ${arg}`.
pub(super) fn arg_use(path: &Path, arg: &str) -> bool {
    froms(path).iter().any(|image| arg_of(image) == Some(arg))
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
    fn an_arg_is_built_from_in_any_of_its_spellings() {
        assert!(arg_use(
            file("ARG BASE\nFROM ${BASE} AS b\n").path(),
            "BASE"
        ));
        assert!(arg_use(
            file("ARG B\nfrom --platform=$P \\\n  $B\n").path(),
            "B"
        ));
        assert!(arg_use(file("ARG B=x\nFROM ${B:-y}\n").path(), "B"));
        assert!(!arg_use(
            file("# FROM ${B}\nFROM scratch\nCOPY --from=${B} / /\n").path(),
            "B"
        ));
    }
}
