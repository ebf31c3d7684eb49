//! The keep set's roots that the builds give: each module's newest successful builds, what was
//! built or published within the grace, and the base every kept artifact was built from.

use std::collections::BTreeMap;

use super::{GRACE, Roots};
use crate::mesh::builds::BuildStatus;
use crate::mesh::gc::within_grace;

/// Each module's newest `n` successful builds.
pub(super) fn keep_newest(roots: &mut Roots, n: usize) {
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
pub(super) fn keep_young(roots: &mut Roots, grace_ms: i64, now_ms: i64) {
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
pub(super) fn keep_bases(roots: &mut Roots) {
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
