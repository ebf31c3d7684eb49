//! The *why* of an address: what differs between the manifest of the last successful build and now.

use std::collections::BTreeSet;

use serde::Serialize;

use super::manifest::{FileEntry, Manifest};

/// One reason an address differs from the last successful build's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Change {
    /// No build of the module succeeded before.
    NewModule,
    /// The build was forced (added by the caller: a manifest cannot know it).
    Forced,
    /// Paths sent now and not before (a directory is named, with a trailing `/`, only when nothing below it is).
    Added(Vec<String>),
    Removed(Vec<String>),
    /// Paths whose bytes, permission bits, link target or kind changed.
    Changed(Vec<String>),
    DockerfileChanged,
    BaseMoved {
        from: Option<String>,
        to: Option<String>,
    },
    PlatformsChanged {
        from: Vec<String>,
        to: Vec<String>,
    },
    /// Names of build args added, removed or changed.
    ArgsChanged(Vec<String>),
    /// An upstream image the Dockerfile names resolved to another digest in `mesh.lock` (or was
    /// named first, or no more: `None` on that side).
    UpstreamMoved {
        image: String,
        from: Option<String>,
        to: Option<String>,
    },
    /// A named context's module has another artifact (or the context was added or dropped).
    ContextMoved {
        name: String,
        from: Option<String>,
        to: Option<String>,
    },
    /// This state file holds no earlier inputs of the module, but the record names `record`: the
    /// module is not new, and its ref is all there is to compare (its platforms, `from → to`,
    /// when they moved).
    NoEarlierInputs {
        record: String,
        platforms: Option<(String, String)>,
    },
}

/// What changed from `previous` (the manifest of the last successful build) to `current`; empty = unchanged.
pub fn why(previous: Option<&Manifest>, current: &Manifest) -> Vec<Change> {
    let Some(previous) = previous else {
        return vec![Change::NewModule];
    };
    let mut changes = Vec::new();
    if previous.base != current.base {
        changes.push(Change::BaseMoved {
            from: previous.base.clone(),
            to: current.base.clone(),
        });
    }
    if previous.dockerfile != current.dockerfile {
        changes.push(Change::DockerfileChanged);
    }
    if previous.platforms != current.platforms {
        changes.push(Change::PlatformsChanged {
            from: previous.platforms.clone(),
            to: current.platforms.clone(),
        });
    }
    let arg_names: BTreeSet<&String> = previous
        .build_args
        .keys()
        .chain(current.build_args.keys())
        .collect();
    let args: Vec<String> = arg_names
        .into_iter()
        .filter(|name| previous.build_args.get(*name) != current.build_args.get(*name))
        .cloned()
        .collect();
    if !args.is_empty() {
        changes.push(Change::ArgsChanged(args));
    }
    changes.extend(upstreams_moved(previous, current));
    let names: BTreeSet<&String> = previous
        .contexts
        .keys()
        .chain(current.contexts.keys())
        .collect();
    changes.extend(
        names
            .into_iter()
            .filter(|name| previous.contexts.get(*name) != current.contexts.get(*name))
            .map(|name| Change::ContextMoved {
                name: name.clone(),
                from: previous.contexts.get(name).cloned(),
                to: current.contexts.get(name).cloned(),
            }),
    );
    let changed: Vec<String> = current
        .files
        .iter()
        .filter(|(path, entry)| {
            previous
                .files
                .get(*path)
                .is_some_and(|before| before != *entry)
        })
        .map(|(path, _)| path.clone())
        .collect();
    if !changed.is_empty() {
        changes.push(Change::Changed(changed));
    }
    let added = only_in(current, previous);
    if !added.is_empty() {
        changes.push(Change::Added(added));
    }
    let removed = only_in(previous, current);
    if !removed.is_empty() {
        changes.push(Change::Removed(removed));
    }
    changes
}

/// Each upstream whose locked digest differs between the two manifests.
fn upstreams_moved(previous: &Manifest, current: &Manifest) -> Vec<Change> {
    let images: BTreeSet<&String> = previous
        .upstreams
        .keys()
        .chain(current.upstreams.keys())
        .collect();
    images
        .into_iter()
        .filter(|image| previous.upstreams.get(*image) != current.upstreams.get(*image))
        .map(|image| Change::UpstreamMoved {
            image: image.clone(),
            from: previous.upstreams.get(image).cloned(),
            to: current.upstreams.get(image).cloned(),
        })
        .collect()
}

/// `sha256:0123456789ab…`: a digest as a person compares two of them.
pub fn short_digest(digest: &str) -> String {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    format!("sha256:{}…", hex.chars().take(12).collect::<String>())
}

/// `upstream python:3.12-slim sha256:aaaa… → sha256:bbbb…`.
pub fn upstream_moved_text(image: &str, from: Option<&str>, to: Option<&str>) -> String {
    match (from, to) {
        (Some(from), Some(to)) => format!(
            "upstream {image} {} → {}",
            short_digest(from),
            short_digest(to)
        ),
        (None, Some(to)) => format!("upstream {image} named ({})", short_digest(to)),
        (Some(_), None) => format!("upstream {image} no longer named"),
        (None, None) => format!("upstream {image}"),
    }
}

/// The why of an address that is not the record's: against the module's earlier inputs, or, when
/// this state file knows none, against what the record's ref can tell (never "new module" for a
/// module the record names).
pub fn why_against_record(
    previous: Option<&Manifest>,
    current: &Manifest,
    record_ref: Option<&str>,
    current_ref: Option<&str>,
) -> Vec<Change> {
    match (previous, record_ref) {
        (None, Some(record)) => {
            let platforms = match (arch_of(record), current_ref.and_then(arch_of)) {
                (Some(from), Some(to)) if from != to => Some((from.to_string(), to.to_string())),
                _ => None,
            };
            vec![Change::NoEarlierInputs {
                record: record.to_string(),
                platforms,
            }]
        }
        _ => why(previous, current),
    }
}

/// The platforms of a ref, from its tag `<hash12>-<arch[-arch…]>`: `amd64-arm64`.
fn arch_of(reference: &str) -> Option<&str> {
    let (_, tag) = reference.rsplit_once(':')?;
    tag.split_once('-').map(|(_, arch)| arch)
}

/// Paths of `a` absent from `b`; a directory only when no listed path lies below it.
fn only_in(a: &Manifest, b: &Manifest) -> Vec<String> {
    let paths: Vec<(&String, &FileEntry)> = a
        .files
        .iter()
        .filter(|(p, _)| !b.files.contains_key(*p))
        .collect();
    paths
        .iter()
        .filter_map(|(path, entry)| match entry {
            FileEntry::Dir { .. } => {
                let below = format!("{path}/");
                let covered = paths.iter().any(|(other, _)| other.starts_with(&below));
                (!covered).then_some(below)
            }
            _ => Some((*path).clone()),
        })
        .collect()
}

fn files(n: usize) -> String {
    if n == 1 {
        "1 file".into()
    } else {
        format!("{n} files")
    }
}

/// One line telling the why: "src/main.rs changed (+2 files)", "base moved", "new module", "unchanged".
pub fn summary(changes: &[Change]) -> String {
    if changes.is_empty() {
        return "unchanged".into();
    }
    let mut parts: Vec<String> = Vec::new();
    let (mut added, mut removed, mut changed): (&[String], &[String], &[String]) = (&[], &[], &[]);
    for change in changes {
        match change {
            Change::NewModule => parts.push("new module".into()),
            Change::NoEarlierInputs { record, platforms } => {
                let tag = record
                    .rsplit_once(':')
                    .map_or(record.as_str(), |(_, tag)| tag);
                parts.push(format!(
                    "inputs differ from the record's {tag} (this state file holds no earlier inputs to compare)"
                ));
                if let Some((from, to)) = platforms {
                    parts.push(format!("platforms {from} → {to}"));
                }
            }
            Change::Forced => parts.push("forced".into()),
            Change::BaseMoved { .. } => parts.push("base moved".into()),
            Change::ContextMoved { name, from, to } => parts.push(match (from, to) {
                (Some(_), Some(_)) => format!("context {name} moved"),
                (None, _) => format!("context {name} added"),
                (_, None) => format!("context {name} dropped"),
            }),
            Change::DockerfileChanged => parts.push("Dockerfile changed".into()),
            Change::PlatformsChanged { from, to } => {
                parts.push(format!("platforms {} → {}", list(from), list(to)));
            }
            Change::ArgsChanged(names) => {
                parts.push(format!("build args changed ({})", names.join(", ")))
            }
            Change::UpstreamMoved { image, from, to } => {
                parts.push(upstream_moved_text(image, from.as_deref(), to.as_deref()))
            }
            Change::Added(p) => added = p,
            Change::Removed(p) => removed = p,
            Change::Changed(p) => changed = p,
        }
    }
    let mut head = String::new();
    let mut rest: Vec<String> = Vec::new();
    if let Some(first) = changed.first() {
        head = format!("{first} changed");
        if changed.len() > 1 {
            rest.push(format!("{} more changed", changed.len() - 1));
        }
    }
    if !added.is_empty() {
        if head.is_empty() && added.len() == 1 {
            head = format!("{} added", added[0]);
        } else {
            rest.push(format!("+{}", files(added.len())));
        }
    }
    if !removed.is_empty() {
        if head.is_empty() && removed.len() == 1 {
            head = format!("{} removed", removed[0]);
        } else {
            rest.push(format!("-{}", files(removed.len())));
        }
    }
    let file_part = match (head.is_empty(), rest.is_empty()) {
        (true, true) => None,
        (true, false) => Some(rest.join(", ")),
        (false, true) => Some(head),
        (false, false) => Some(format!("{head} ({})", rest.join(", "))),
    };
    parts.extend(file_part);
    // The Dockerfile is a file of the context too: its change is said once.
    let mut said: Vec<String> = Vec::new();
    for part in parts {
        if !said.contains(&part) {
            said.push(part);
        }
    }
    said.join(", ")
}

fn list(platforms: &[String]) -> String {
    if platforms.is_empty() {
        "(daemon's own)".into()
    } else {
        platforms.join(",")
    }
}

/// Every path named by the changes (changed, added, removed), sorted.
pub fn changed_paths(changes: &[Change]) -> Vec<String> {
    let mut paths: BTreeSet<String> = BTreeSet::new();
    for change in changes {
        if let Change::Added(p) | Change::Removed(p) | Change::Changed(p) = change {
            paths.extend(p.iter().cloned());
        }
    }
    paths.into_iter().collect()
}

/// Every change spelled out (for error messages): "src/a.rs changed, b.txt added, Dockerfile changed".
pub fn describe(changes: &[Change]) -> String {
    let mut parts: Vec<String> = Vec::new();
    for change in changes {
        match change {
            Change::Changed(p) => parts.extend(p.iter().map(|p| format!("{p} changed"))),
            Change::Added(p) => parts.extend(p.iter().map(|p| format!("{p} added"))),
            Change::Removed(p) => parts.extend(p.iter().map(|p| format!("{p} removed"))),
            other => parts.push(summary(std::slice::from_ref(other))),
        }
    }
    if parts.is_empty() {
        "unchanged".into()
    } else {
        parts.join(", ")
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {

    #[test]
    fn a_dockerfile_change_is_said_once() {
        let changes = vec![
            Change::DockerfileChanged,
            Change::Changed(vec!["Dockerfile".into()]),
        ];
        assert_eq!(summary(&changes), "Dockerfile changed");
    }

    use std::collections::BTreeMap;

    use super::*;

    fn file(sha: &str) -> FileEntry {
        FileEntry::File {
            sha256: sha.into(),
            mode: 0o644,
        }
    }

    fn manifest(files: &[(&str, FileEntry)]) -> Manifest {
        Manifest {
            files: files
                .iter()
                .map(|(p, e)| ((*p).to_string(), e.clone()))
                .collect::<BTreeMap<_, _>>()
                .into(),
            dockerfile: "d0".into(),
            build_args: BTreeMap::from([("A".into(), "1".into())]),
            base: Some("sha256:b0".into()),
            platforms: vec!["linux/amd64".into()],
            upstreams: BTreeMap::new(),
            contexts: BTreeMap::new(),
        }
    }

    #[test]
    fn a_moved_upstream_is_named_with_both_digests() {
        let before = manifest(&[("a", file("1"))]);
        let mut after = before.clone();
        let (a, b) = (
            format!("sha256:{}", "a".repeat(64)),
            format!("sha256:{}", "b".repeat(64)),
        );
        let mut locked = before.clone();
        locked
            .upstreams
            .insert("python:3.12-slim".into(), a.clone());
        after.upstreams.insert("python:3.12-slim".into(), b.clone());
        let changes = why(Some(&locked), &after);
        assert_eq!(
            changes,
            [Change::UpstreamMoved {
                image: "python:3.12-slim".into(),
                from: Some(a),
                to: Some(b)
            }]
        );
        assert_eq!(
            summary(&changes),
            "upstream python:3.12-slim sha256:aaaaaaaaaaaa… → sha256:bbbbbbbbbbbb…"
        );
        assert_ne!(
            crate::manifest::digest_of(&locked),
            crate::manifest::digest_of(&after),
            "a moved lock moves the address"
        );
    }

    #[test]
    fn new_module_and_unchanged() {
        let m = manifest(&[("a", file("1"))]);
        assert_eq!(why(None, &m), [Change::NewModule]);
        assert_eq!(summary(&why(None, &m)), "new module");
        assert!(why(Some(&m), &m).is_empty());
        assert_eq!(summary(&why(Some(&m), &m)), "unchanged");
    }

    #[test]
    fn a_module_the_record_names_is_never_new() {
        let m = manifest(&[("a", file("1"))]);
        let record = "localhost:5000/demo/api:3f9c2a1b7d4e-amd64";
        let changes = why_against_record(None, &m, Some(record), Some("demo/api:9a8b-amd64-arm64"));
        assert_eq!(
            changes,
            [Change::NoEarlierInputs {
                record: record.into(),
                platforms: Some(("amd64".into(), "amd64-arm64".into())),
            }]
        );
        assert_eq!(
            summary(&changes),
            "inputs differ from the record's 3f9c2a1b7d4e-amd64 (this state file holds no earlier inputs to compare), platforms amd64 → amd64-arm64"
        );
        // Earlier inputs known: they answer; no record and none known: new.
        let n = manifest(&[("a", file("2"))]);
        assert_eq!(
            why_against_record(Some(&m), &n, Some(record), None),
            why(Some(&m), &n)
        );
        assert_eq!(
            why_against_record(None, &m, None, None),
            [Change::NewModule]
        );
    }

    #[test]
    fn files_added_removed_changed() {
        let before = manifest(&[
            ("src", FileEntry::Dir { mode: 0o755 }),
            ("src/main.rs", file("1")),
            ("old.txt", file("9")),
        ]);
        let after = manifest(&[
            ("src", FileEntry::Dir { mode: 0o755 }),
            ("src/main.rs", file("2")),
            ("src/new", FileEntry::Dir { mode: 0o755 }),
            ("src/new/a.rs", file("3")),
            ("src/new/b.rs", file("4")),
            ("empty", FileEntry::Dir { mode: 0o755 }),
        ]);
        let changes = why(Some(&before), &after);
        assert_eq!(
            changes,
            [
                Change::Changed(vec!["src/main.rs".into()]),
                Change::Added(vec![
                    "empty/".into(),
                    "src/new/a.rs".into(),
                    "src/new/b.rs".into()
                ]),
                Change::Removed(vec!["old.txt".into()]),
            ]
        );
        assert_eq!(summary(&changes), "src/main.rs changed (+3 files, -1 file)");
        assert_eq!(
            changed_paths(&changes),
            [
                "empty/",
                "old.txt",
                "src/main.rs",
                "src/new/a.rs",
                "src/new/b.rs"
            ]
        );
        assert_eq!(
            describe(&changes),
            "src/main.rs changed, empty/ added, src/new/a.rs added, src/new/b.rs added, old.txt removed"
        );
    }

    #[test]
    fn x_bit_and_kind_changes_are_changes() {
        let before = manifest(&[
            ("run", file("1")),
            ("l", FileEntry::Link { target: "a".into() }),
        ]);
        let after = manifest(&[
            (
                "run",
                FileEntry::File {
                    sha256: "1".into(),
                    mode: 0o755,
                },
            ),
            ("l", FileEntry::Dir { mode: 0o755 }),
        ]);
        assert_eq!(
            why(Some(&before), &after),
            [Change::Changed(vec!["l".into(), "run".into()])]
        );
    }

    #[test]
    fn single_added_or_removed_is_named() {
        let before = manifest(&[("a", file("1"))]);
        let after = manifest(&[("a", file("1")), ("b", file("2"))]);
        assert_eq!(summary(&why(Some(&before), &after)), "b added");
        assert_eq!(summary(&why(Some(&after), &before)), "b removed");
    }

    #[test]
    fn base_dockerfile_platforms_args() {
        let before = manifest(&[("a", file("1"))]);
        let mut after = before.clone();
        after.base = Some("sha256:b1".into());
        assert_eq!(
            why(Some(&before), &after),
            [Change::BaseMoved {
                from: Some("sha256:b0".into()),
                to: Some("sha256:b1".into())
            }]
        );
        assert_eq!(summary(&why(Some(&before), &after)), "base moved");
        after.dockerfile = "d1".into();
        after.platforms = vec!["linux/amd64".into(), "linux/arm64".into()];
        after.build_args.insert("B".into(), "2".into());
        after.build_args.insert("A".into(), "0".into());
        let changes = why(Some(&before), &after);
        assert_eq!(changes.len(), 4);
        assert_eq!(
            changes[3],
            Change::ArgsChanged(vec!["A".into(), "B".into()])
        );
        assert_eq!(
            summary(&changes),
            "base moved, Dockerfile changed, platforms linux/amd64 → linux/amd64,linux/arm64, build args changed (A, B)"
        );
        let mut forced = vec![Change::Forced];
        forced.extend(changes);
        assert!(summary(&forced).starts_with("forced, base moved"));
    }
}
