//! `mesh.lock`: each upstream image the mesh's Dockerfiles name and the digest it resolved to,
//! committed beside the mesh file as `Cargo.lock` is. The address is computed from it, builds use
//! exactly it, and only `meshtop update` moves an entry.
//!
//! ```toml
//! version = 1
//!
//! [[upstream]]
//! image = "python:3.12-slim"
//! digest = "sha256:…"                       # what the registry serves for the name
//! from = "registry"                         # or "host": the daemon's RepoDigests, offline
//! platforms = { "linux/amd64" = "sha256:…" } # an index's manifest per platform
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The form this meshtop writes; a lock of a newer form is refused, never rewritten.
pub(crate) const LOCK_VERSION: u32 = 1;

/// The lock's file name, beside the mesh file.
pub const LOCK_FILE: &str = "mesh.lock";

/// The lock, by image as written (after substitution).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lock {
    pub entries: BTreeMap<String, LockEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEntry {
    /// The digest the name resolved to: an index's or a single manifest's.
    pub digest: String,
    /// Where it was resolved (a registry, or the host daemon when none answered).
    pub from: ResolvedFrom,
    /// Per platform, the manifest an index names for it (empty for a single manifest).
    pub platforms: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResolvedFrom {
    Registry,
    Host,
}

impl ResolvedFrom {
    pub fn word(self) -> &'static str {
        match self {
            ResolvedFrom::Registry => "registry",
            ResolvedFrom::Host => "host",
        }
    }
}

/// What is wrong with a lock's text, at its line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file} line {line}: {message}")]
pub struct LockError {
    pub file: String,
    pub line: usize,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    version: toml::Spanned<u32>,
    #[serde(default)]
    upstream: Vec<StoredEntry>,
}

#[derive(Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct StoredEntry {
    image: toml::Spanned<String>,
    digest: toml::Spanned<String>,
    from: ResolvedFrom,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    platforms: BTreeMap<String, String>,
}

impl Lock {
    /// The lock in `text` (the file `file`, named in errors).
    pub fn parse(file: &str, text: &str) -> Result<Lock, LockError> {
        let at = |offset: usize, message: String| LockError {
            file: file.to_string(),
            line: text[..offset.min(text.len())].matches('\n').count() + 1,
            message,
        };
        let stored: Stored = toml::from_str(text).map_err(|e| {
            let offset = e.span().map_or(0, |s| s.start);
            at(
                offset,
                format!(
                    "{}; the lock is written by meshtop: `meshtop update` writes it anew",
                    e.message()
                ),
            )
        })?;
        if *stored.version.get_ref() > LOCK_VERSION {
            return Err(at(
                stored.version.span().start,
                format!(
                    "version {} is newer than this meshtop reads ({LOCK_VERSION}): update meshtop",
                    stored.version.get_ref()
                ),
            ));
        }
        let mut entries = BTreeMap::new();
        for entry in stored.upstream {
            let image = entry.image.get_ref().clone();
            for digest in std::iter::once(entry.digest.get_ref()).chain(entry.platforms.values()) {
                if !is_digest(digest) {
                    return Err(at(
                        entry.digest.span().start,
                        format!(
                            "{image}: {digest:?} is not a sha256 digest (sha256: and 64 hex digits)"
                        ),
                    ));
                }
            }
            let value = LockEntry {
                digest: entry.digest.get_ref().clone(),
                from: entry.from,
                platforms: entry.platforms,
            };
            if entries.insert(image.clone(), value).is_some() {
                return Err(at(
                    entry.image.span().start,
                    format!("{image} is locked twice: keep one entry"),
                ));
            }
        }
        Ok(Lock { entries })
    }

    /// The lock as its file holds it: entries in name order, so that two machines write it alike.
    pub fn text(&self) -> String {
        let mut out = String::from(
            "# mesh.lock: the upstream images the mesh's Dockerfiles name, and the digest each\n\
             # resolved to. Written by meshtop; commit it. `meshtop update [IMAGE…]` moves it.\n",
        );
        out.push_str(&format!("version = {LOCK_VERSION}\n"));
        for (image, entry) in &self.entries {
            out.push_str("\n[[upstream]]\n");
            out.push_str(&format!("image = {}\n", quoted(image)));
            out.push_str(&format!("digest = {}\n", quoted(&entry.digest)));
            out.push_str(&format!("from = {}\n", quoted(entry.from.word())));
            if !entry.platforms.is_empty() {
                let platforms: Vec<String> = entry
                    .platforms
                    .iter()
                    .map(|(p, d)| format!("{} = {}", quoted(p), quoted(d)))
                    .collect();
                out.push_str(&format!("platforms = {{ {} }}\n", platforms.join(", ")));
            }
        }
        out
    }

    /// The digest a build uses for `image`.
    pub fn digest_of(&self, image: &str) -> Option<&str> {
        self.entries.get(image).map(|e| e.digest.as_str())
    }
}

/// A TOML basic string.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `sha256:` and 64 lowercase hex digits.
pub(crate) fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// One locked upstream against what its registry serves now.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UpstreamNow {
    pub image: String,
    pub locked: String,
    /// What the registry serves under the tag now; None when it could not say (`error` says why).
    pub current: Option<String>,
    pub error: Option<String>,
    /// The modules whose Dockerfiles name it.
    pub modules: Vec<String>,
    /// The machines the mesh file declares for those modules.
    pub machines: usize,
}

impl UpstreamNow {
    /// The registry serves another digest than the lock holds.
    pub fn moved(&self) -> bool {
        self.current.as_ref().is_some_and(|c| *c != self.locked)
    }
}

/// An upstream an artifact was built on that its registry has since moved past.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UpstreamMoved {
    pub image: String,
    /// The digest the artifact was built on (the lock's, when it was built).
    pub built_on: String,
    /// What the registry served under the tag when last asked.
    pub now: String,
}

/// The upstreams of an artifact (`built_on`: image → the digest it was built on, from its input
/// manifest) that moved since, by what their registries served when last asked (`now`). An
/// upstream never asked, or whose registry could not say, is not counted as moved.
pub fn moved_since<'a>(
    built_on: &BTreeMap<String, String>,
    now: impl Fn(&str) -> Option<&'a str>,
) -> Vec<UpstreamMoved> {
    built_on
        .iter()
        .filter_map(|(image, digest)| {
            let now = now(image)?;
            (now != digest).then(|| UpstreamMoved {
                image: image.clone(),
                built_on: digest.clone(),
                now: now.to_string(),
            })
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn digest(c: char) -> String {
        format!("sha256:{}", c.to_string().repeat(64))
    }

    fn sample() -> Lock {
        let mut lock = Lock::default();
        lock.entries.insert(
            "python:3.12-slim".into(),
            LockEntry {
                digest: digest('a'),
                from: ResolvedFrom::Registry,
                platforms: [("linux/amd64".to_string(), digest('b'))].into(),
            },
        );
        lock.entries.insert(
            "127.0.0.1:5000/up/base:1".into(),
            LockEntry {
                digest: digest('c'),
                from: ResolvedFrom::Host,
                platforms: BTreeMap::new(),
            },
        );
        lock
    }

    #[test]
    fn a_lock_reads_back_as_written_and_writes_alike() {
        let lock = sample();
        let text = lock.text();
        assert_eq!(Lock::parse("mesh.lock", &text), Ok(lock.clone()));
        assert_eq!(Lock::parse("mesh.lock", &text).map(|l| l.text()), Ok(text));
        assert_eq!(
            lock.digest_of("python:3.12-slim"),
            Some(digest('a').as_str())
        );
    }

    #[test]
    fn a_bad_lock_names_its_line_and_what_is_wrong() {
        let text = "version = 1\n\n[[upstream]]\nimage = \"a:1\"\ndigest = \"sha256:short\"\nfrom = \"registry\"\n";
        let e = Lock::parse("mesh.lock", text).expect_err("a short digest");
        assert_eq!(e.line, 5, "{e}");
        assert!(
            e.to_string().contains("a:1") && e.to_string().contains("not a sha256 digest"),
            "{e}"
        );

        let twice = format!(
            "{}{}",
            sample().text(),
            "\n[[upstream]]\nimage = \"python:3.12-slim\"\n"
        ) + &format!("digest = \"{}\"\nfrom = \"host\"\n", digest('d'));
        let e = Lock::parse("mesh.lock", &twice).expect_err("twice");
        assert!(e.to_string().contains("locked twice"), "{e}");
        let second = twice
            .lines()
            .enumerate()
            .filter(|(_, l)| *l == "image = \"python:3.12-slim\"")
            .nth(1)
            .map(|(i, _)| i + 1);
        assert_eq!(Some(e.line), second, "{e}");

        let e = Lock::parse("mesh.lock", "version = 1\nupstream = 3\n").expect_err("a wrong type");
        assert_eq!(e.line, 2, "{e}");

        let e = Lock::parse("x/mesh.lock", "version = 2\n").expect_err("newer");
        assert_eq!(
            e.to_string(),
            "x/mesh.lock line 1: version 2 is newer than this meshtop reads (1): update meshtop"
        );
    }

    #[test]
    fn only_an_upstream_seen_elsewhere_since_counts_as_moved() {
        let built_on: BTreeMap<String, String> = [
            ("a:1".to_string(), "sha256:aa".to_string()),
            ("b:1".to_string(), "sha256:bb".to_string()),
            ("c:1".to_string(), "sha256:cc".to_string()),
        ]
        .into();
        let now = |image: &str| match image {
            "a:1" => Some("sha256:a2"),
            "b:1" => Some("sha256:bb"),
            _ => None,
        };
        assert_eq!(
            moved_since(&built_on, now),
            [UpstreamMoved {
                image: "a:1".into(),
                built_on: "sha256:aa".into(),
                now: "sha256:a2".into(),
            }]
        );
    }
}
