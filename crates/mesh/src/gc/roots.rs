//! gc's keep set (DESIGN.md: "keep set"): every root as read, and the roots the builds give
//! (each module's newest successful builds, what was built or published within the grace, the
//! base every kept artifact was built from). Pure: the engine reads, this weighs.

use std::collections::{BTreeMap, BTreeSet};

use super::within_grace;
use crate::builds::{BuildRow, BuildStatus};

/// The root a build within the grace is kept by.
pub const GRACE: &str = "grace";

/// Every root, read; an unreadable one is an error naming it.
pub struct Roots {
    /// artifact → (which root keeps it, why).
    pub keep: BTreeMap<String, (&'static str, String)>,
    /// Manifest digests machines run (their artifacts are in `keep`): never deleted.
    pub running_manifests: BTreeSet<String>,
    /// refs the keep set names.
    pub kept_refs: BTreeSet<String>,
    /// module → its builds, newest first.
    pub builds: BTreeMap<String, Vec<BuildRow>>,
}

/// Each module's newest `n` successful builds.
pub fn keep_newest(roots: &mut Roots, n: usize) {
    for (module, rows) in &roots.builds {
        let newest = rows
            .iter()
            .filter(|b| b.status == BuildStatus::Succeeded)
            .filter(|b| b.digest.is_some())
            .take(n);
        for (index, build) in newest.enumerate() {
            if let Some(digest) = &build.digest {
                roots.keep.entry(digest.clone()).or_insert_with(|| {
                    (
                        "newest",
                        format!("newest successful build #{} of {module}", index + 1),
                    )
                });
                roots.kept_refs.extend(build.reference.clone());
            }
        }
    }
}

/// Nothing built or published within the grace (a teammate's converge may be about to stamp it).
pub fn keep_young(roots: &mut Roots, grace_ms: i64, now_ms: i64) {
    for build in roots.builds.values().flatten() {
        let Some(digest) = &build.digest else {
            continue;
        };
        if build.status != BuildStatus::Succeeded || roots.keep.contains_key(digest) {
            continue;
        }
        let built = build.ended_ms.unwrap_or(build.started_ms);
        let why = within_grace("built", built, now_ms, grace_ms).or_else(|| {
            build
                .published_ms
                .and_then(|at| within_grace("published", at, now_ms, grace_ms))
        });
        if let Some(why) = why {
            roots.keep.insert(digest.clone(), (GRACE, why));
            roots.kept_refs.extend(build.reference.clone());
            roots.kept_refs.extend(build.published_ref.clone());
        }
    }
}

/// A kept artifact needs the base it was built FROM (its layers, its parent on the daemon).
pub fn keep_bases(roots: &mut Roots) {
    let bases: BTreeMap<String, (String, String)> = roots
        .builds
        .values()
        .flatten()
        .filter_map(|b| {
            Some((
                b.digest.clone()?,
                (b.base_digest.clone()?, b.base_module.clone()?),
            ))
        })
        .collect();
    let mut walk: Vec<String> = roots.keep.keys().cloned().collect();
    while let Some(digest) = walk.pop() {
        if let Some((base, module)) = bases.get(&digest)
            && !roots.keep.contains_key(base)
        {
            roots.keep.insert(
                base.clone(),
                (
                    "base",
                    format!("the base ({module}) a kept artifact was built from"),
                ),
            );
            walk.push(base.clone());
        }
    }
}

/// Why an artifact no root keeps is taken, in words.
pub(crate) fn unreachable_why(
    roots: &Roots,
    keep_newest: usize,
    module: &str,
    artifact: &str,
) -> String {
    let built = roots
        .builds
        .get(module)
        .map(|rows| {
            let ok: Vec<&BuildRow> = rows
                .iter()
                .filter(|b| b.status == BuildStatus::Succeeded && b.digest.is_some())
                .collect();
            match ok
                .iter()
                .position(|b| b.digest.as_deref() == Some(artifact))
            {
                Some(at) => format!(
                    "successful build #{} of {module} (keep {keep_newest})",
                    at + 1
                ),
                None => "no successful build of this mesh made it".into(),
            }
        })
        .unwrap_or_else(|| format!("no build of {module} is recorded"));
    format!("not the record's, run by no machine, not pinned; {built}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::gc::candidates::manifest_candidates;

    fn build(id: &str, digest: &str, ended_ms: i64, published_ms: Option<i64>) -> BuildRow {
        BuildRow {
            id: id.into(),
            mesh: "demo".into(),
            module: Some("web".into()),
            repository: "demo/web".into(),
            commit: None,
            dirty: false,
            base_module: None,
            base_digest: None,
            reference: Some(format!("demo/web:{id}-amd64")),
            digest: Some(digest.into()),
            platforms: String::new(),
            status: BuildStatus::Succeeded,
            forced: false,
            why: String::new(),
            host: "h".into(),
            started_ms: ended_ms - 1_000,
            ended_ms: Some(ended_ms),
            error: None,
            log_tail: None,
            published_ref: Some(format!("r/demo/web:{id}-amd64")),
            published_digest: Some(format!("sha256:m{id}")),
            operation_id: None,
            published_ms,
            operation: None,
            builder: None,
            push_ms: None,
            daemon_ms: None,
            process_gone: false,
        }
    }

    #[test]
    fn built_or_published_within_the_grace_is_kept_saying_which() {
        let hour = 3_600_000;
        let now = 100 * hour;
        let mut roots = Roots {
            keep: BTreeMap::from([(
                "sha256:kept".to_string(),
                ("record", "the record's".to_string()),
            )]),
            running_manifests: BTreeSet::new(),
            kept_refs: BTreeSet::new(),
            builds: BTreeMap::from([(
                "web".to_string(),
                vec![
                    build("young", "sha256:young", now - 12 * 60_000, None),
                    build(
                        "pushed",
                        "sha256:pushed",
                        now - 5 * hour,
                        Some(now - 30_000),
                    ),
                    build("old", "sha256:old", now - 5 * hour, Some(now - 4 * hour)),
                    build("kept", "sha256:kept", now - 60_000, None),
                ],
            )]),
        };
        keep_young(&mut roots, hour, now);
        assert_eq!(
            roots.keep["sha256:young"],
            (
                GRACE,
                "built 12 min ago, within the grace of 1h".to_string()
            )
        );
        assert_eq!(
            roots.keep["sha256:pushed"],
            (
                GRACE,
                "published 30 s ago, within the grace of 1h".to_string()
            )
        );
        assert!(!roots.keep.contains_key("sha256:old"));
        assert_eq!(
            roots.keep["sha256:kept"].0, "record",
            "kept by its root first"
        );
        assert!(roots.kept_refs.contains("r/demo/web:pushed-amd64"));
        // A grace of 0s keeps nothing young.
        let mut none = Roots {
            keep: BTreeMap::new(),
            running_manifests: BTreeSet::new(),
            kept_refs: BTreeSet::new(),
            builds: roots.builds.clone(),
        };
        keep_young(&mut none, 0, now);
        assert!(none.keep.is_empty());
        // Their manifests are spared with that reason, never candidates.
        let found = manifest_candidates(&roots, 1, "r");
        let spared: Vec<&str> = found.spared.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            spared,
            vec!["demo/web@sha256:myoung", "demo/web@sha256:mpushed"]
        );
        let taken: Vec<&str> = found.candidates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(taken, vec!["demo/web@sha256:mold"]);
        assert_eq!(
            found.ours["demo/web"],
            BTreeSet::from(["old-amd64".to_string()])
        );
    }
}
