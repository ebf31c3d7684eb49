//! A build's context as it is served to BuildKit through the build's session (fsutil's diff copy,
//! as `docker buildx build` serves a local directory): the planned inputs, entry by entry, with the
//! stat data BuildKit compares against what it kept from the last build of this context, and the
//! digest every byte served must hash to. Which entries one request wants ([`SentContext::wanted`])
//! and the order they go in ([`walk_order`]) are fsutil's rules, written here without I/O.

use std::cmp::Ordering;
use std::path::PathBuf;

/// What one session serves: the context (BuildKit's local `context`) and the Dockerfile (its local
/// `dockerfile`), each exactly as planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentContext {
    /// In [`walk_order`], every directory before what it holds.
    pub entries: Vec<SentEntry>,
    pub dockerfile: SentDockerfile,
    /// Names this context to BuildKit's cache of received contexts (its session's shared key): the
    /// same directory on the same machine finds what it sent last time.
    pub cache_key: String,
}

/// The Dockerfile as the builder reads it: pinned (upstreams to their locked digests, named
/// contexts to the names the builder reaches them by), under a name that carries its own digest.
/// BuildKit keeps the Dockerfile it received and asks again only when the stat data differs; the
/// pinned bytes can change while the file on disk does not (a moved lock), so the name changes
/// with the bytes instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentDockerfile {
    /// `Dockerfile.meshtop-<12 hex of the bytes' sha256>`, beside where the module's Dockerfile is.
    pub name: String,
    pub bytes: Vec<u8>,
    /// Permission bits (`mode & 0o7777`).
    pub mode: u32,
}

impl SentDockerfile {
    /// The Dockerfile `rel` (relative to the context) sent as `bytes`.
    pub fn new(rel: &str, bytes: Vec<u8>, mode: u32) -> SentDockerfile {
        use sha2::{Digest, Sha256};
        let digest = hex::encode(Sha256::digest(&bytes));
        SentDockerfile {
            name: format!("{rel}.meshtop-{}", &digest[..12]),
            bytes,
            mode,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentEntry {
    /// Relative, `/`-separated, as in the manifest.
    pub path: String,
    pub kind: SentKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SentKind {
    Dir {
        /// Permission bits (`mode & 0o7777`).
        mode: u32,
    },
    Link {
        target: String,
    },
    File {
        /// Permission bits (`mode & 0o7777`).
        mode: u32,
        /// As the walk that checked the plan saw it: what BuildKit compares, with the mtime.
        size: u64,
        mtime_ns: i64,
        /// Where it is read from when BuildKit asks for it.
        source: PathBuf,
        /// The planned sha256: the bytes served must hash to it.
        sha256: String,
    },
}

/// The key BuildKit keeps a context's last copy under, for the directory `dir` on the machine
/// `host`, as `docker build` keys a local context by its node and directory: the same directory
/// sent again is compared with what was sent last, and no two meet. `secret` (the state file's
/// own) makes it one nobody else can compute: BuildKit takes the files of the copy kept under it
/// unasked when their stat data match, so whoever could send under the key could decide them.
pub fn cache_key(host: &[u8], dir: &[u8], secret: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    hash.update(b"meshtop context\0");
    for part in [host, dir, secret] {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hex::encode(hash.finalize())
}

/// fsutil's walk order: path by path component, so a directory's entries follow it before any
/// sibling whose name extends its own (`a`, `a/b`, `a.txt`; plain string order puts `a.txt` before
/// `a/b`). BuildKit's receiver refuses entries out of this order.
pub fn walk_order(a: &str, b: &str) -> Ordering {
    a.split('/').cmp(b.split('/'))
}

/// What a request names: BuildKit's follow paths and include patterns. Empty: everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    pub follow_paths: Vec<String>,
    pub include_patterns: Vec<String>,
}

impl SentContext {
    /// The entries one request for the context wants, in walk order. What BuildKit names is a
    /// hint to send less, never a rule to send exactly: a pattern with a wildcard wants everything
    /// below its plain leading directories, a followed symlink its target too, and every entry
    /// sent brings its parent directories. More than asked for costs bytes; less would fail the
    /// build.
    pub fn wanted(&self, wanted: &Wanted) -> Vec<&SentEntry> {
        let mut prefixes: Vec<String> = Vec::new();
        for raw in wanted.follow_paths.iter().chain(&wanted.include_patterns) {
            prefixes.push(plain_prefix(raw));
        }
        if prefixes.is_empty() || prefixes.iter().any(String::is_empty) {
            return self.entries.iter().collect();
        }
        // A followed symlink brings its target (resolved against the link's own directory).
        let links: Vec<String> = self
            .entries
            .iter()
            .filter_map(|e| match &e.kind {
                SentKind::Link { target } if prefixes.iter().any(|p| under(&e.path, p)) => {
                    Some(resolve_link(&e.path, target))
                }
                _ => None,
            })
            .collect();
        if links.iter().any(String::is_empty) {
            return self.entries.iter().collect();
        }
        prefixes.extend(links);
        self.entries
            .iter()
            .filter(|e| {
                prefixes
                    .iter()
                    .any(|p| under(&e.path, p) || under(p, &e.path))
            })
            .collect()
    }
}

/// The plain directories a pattern begins with (`src/*.rs` → `src`, `*.txt` → everything: ``),
/// or the whole cleaned path when it has no wildcard.
fn plain_prefix(pattern: &str) -> String {
    let mut plain: Vec<&str> = Vec::new();
    for part in pattern.split('/') {
        match part {
            "" | "." => continue,
            ".." => {
                plain.pop();
                continue;
            }
            _ => {}
        }
        if part.contains(['*', '?', '[', '\\']) {
            break;
        }
        plain.push(part);
    }
    plain.join("/")
}

/// Whether `path` is `prefix` or below it.
fn under(path: &str, prefix: &str) -> bool {
    path == prefix
        || (path.len() > prefix.len()
            && path.starts_with(prefix)
            && path.as_bytes()[prefix.len()] == b'/')
}

/// A symlink's target as a path of the context (empty: it leaves the context or is absolute,
/// which BuildKit resolves against the context's root; everything is then sent).
fn resolve_link(link: &str, target: &str) -> String {
    if target.starts_with('/') {
        return String::new();
    }
    let dir = link.rsplit_once('/').map_or("", |(dir, _)| dir);
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in target.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    return String::new();
                }
            }
            _ => parts.push(part),
        }
    }
    parts.join("/")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entry(path: &str, kind: SentKind) -> SentEntry {
        SentEntry {
            path: path.into(),
            kind,
        }
    }

    fn file(path: &str) -> SentEntry {
        entry(
            path,
            SentKind::File {
                mode: 0o644,
                size: 1,
                mtime_ns: 1,
                source: PathBuf::from(path),
                sha256: String::new(),
            },
        )
    }

    fn dir(path: &str) -> SentEntry {
        entry(path, SentKind::Dir { mode: 0o755 })
    }

    fn context(mut entries: Vec<SentEntry>) -> SentContext {
        entries.sort_by(|a, b| walk_order(&a.path, &b.path));
        SentContext {
            entries,
            dockerfile: SentDockerfile::new("Dockerfile", b"FROM scratch\n".to_vec(), 0o644),
            cache_key: "k".into(),
        }
    }

    fn paths(entries: Vec<&SentEntry>) -> Vec<&str> {
        entries.iter().map(|e| e.path.as_str()).collect()
    }

    #[test]
    fn a_directory_comes_before_what_it_holds_and_before_a_longer_sibling() {
        let mut names = vec!["a.txt", "a/b", "a", "a/b/c", "ab", "a-b"];
        names.sort_by(|a, b| walk_order(a, b));
        assert_eq!(names, ["a", "a/b", "a/b/c", "a-b", "a.txt", "ab"]);
    }

    #[test]
    fn a_request_for_some_paths_gets_them_their_parents_and_what_is_below_them() {
        let sent = context(vec![
            dir("src"),
            file("src/main.rs"),
            dir("src/deep"),
            file("src/deep/x.rs"),
            file("README"),
            dir("docs"),
            file("docs/a.md"),
        ]);
        let want = |follow: &[&str], include: &[&str]| {
            let wanted = Wanted {
                follow_paths: follow.iter().map(|s| s.to_string()).collect(),
                include_patterns: include.iter().map(|s| s.to_string()).collect(),
            };
            paths(sent.wanted(&wanted))
        };
        assert_eq!(
            want(&["/src/deep/x.rs"], &[]),
            ["src", "src/deep", "src/deep/x.rs"]
        );
        assert_eq!(
            want(&["src"], &[]),
            ["src", "src/deep", "src/deep/x.rs", "src/main.rs"]
        );
        assert_eq!(want(&[".dockerignore"], &[]), Vec::<&str>::new());
        // A wildcard wants everything below its plain directories; at the top, everything.
        assert_eq!(want(&[], &["docs/*.md"]), ["docs", "docs/a.md"]);
        assert_eq!(want(&["*.md"], &[]).len(), 7);
        assert_eq!(want(&[], &[]).len(), 7, "nothing named: everything");
        assert_eq!(want(&["/"], &[]).len(), 7, "the root: everything");
    }

    #[test]
    fn a_followed_symlink_brings_its_target_and_one_leaving_the_context_brings_everything() {
        let sent = context(vec![
            dir("bin"),
            entry(
                "bin/tool",
                SentKind::Link {
                    target: "../lib/tool".into(),
                },
            ),
            dir("lib"),
            file("lib/tool"),
            file("other"),
            entry(
                "out",
                SentKind::Link {
                    target: "/etc/passwd".into(),
                },
            ),
        ]);
        let want = |follow: &str| {
            paths(sent.wanted(&Wanted {
                follow_paths: vec![follow.into()],
                include_patterns: vec![],
            }))
        };
        assert_eq!(want("bin/tool"), ["bin", "bin/tool", "lib", "lib/tool"]);
        assert_eq!(want("out").len(), 6);
    }

    #[test]
    fn the_cache_key_is_the_machines_the_directorys_and_the_secrets() {
        let key = cache_key(b"host", b"/src/api", b"secret one");
        assert_eq!(key, cache_key(b"host", b"/src/api", b"secret one"));
        assert_ne!(key, cache_key(b"host", b"/src/api", b"secret two"));
        assert_ne!(key, cache_key(b"host", b"/src/web", b"secret one"));
        assert_ne!(key, cache_key(b"other", b"/src/api", b"secret one"));
        // Lengths are hashed: a part's end cannot be moved into the next one.
        assert_ne!(cache_key(b"ab", b"c", b""), cache_key(b"a", b"bc", b""));
    }

    #[test]
    fn the_dockerfile_sent_is_named_by_its_bytes() {
        let one = SentDockerfile::new("build/Dockerfile", b"FROM a@sha256:1\n".to_vec(), 0o644);
        let two = SentDockerfile::new("build/Dockerfile", b"FROM a@sha256:2\n".to_vec(), 0o644);
        assert!(
            one.name.starts_with("build/Dockerfile.meshtop-"),
            "{}",
            one.name
        );
        assert_ne!(one.name, two.name);
        assert_eq!(
            one.name,
            SentDockerfile::new("build/Dockerfile", b"FROM a@sha256:1\n".to_vec(), 0o600).name
        );
    }
}
