//! What a converge refuses before any build: a module whose base has no artifact, a multi-platform
//! build with nowhere to push, a secret a build would mount that cannot be had, a delivery the
//! target cannot take.

use std::collections::BTreeMap;

use super::targets::Delivers;
use crate::mesh::decide::Decision;
use crate::mesh::model::Mesh;
use crate::mesh::plan::PlannedModule;

/// Every refusal, one line each (empty: go ahead). Only the first kind found is given: a mesh with
/// refused modules is not also told about platforms.
pub fn refusals(
    planned: &BTreeMap<String, PlannedModule>,
    mesh: &Mesh,
    target: &dyn Delivers,
) -> Vec<String> {
    let refused: Vec<String> = planned
        .values()
        .filter(|p| p.decision == Decision::Refused)
        .map(|p| format!("{}: {}", p.name, p.reason))
        .collect();
    if !refused.is_empty() {
        return refused;
    }
    // A build for several platforms can only be pushed, never loaded into a daemon: to the
    // target's registry, or the mesh's (the Docker target runs its own platform out of the index).
    let pushes = target.pushes_to().is_some() || mesh.registry.is_some();
    let unbuildable: Vec<String> = planned
        .values()
        .filter(|p| p.multi_platform && !pushes)
        .filter(|p| matches!(p.decision, Decision::Build | Decision::Forced))
        .filter_map(|p| Some((p, mesh.modules.iter().find(|m| m.name == p.name)?)))
        .map(|(p, m)| {
            format!(
                "module {} ({}:{}) builds for {} platforms, which needs a target that pushes to a registry (`registry` in [mesh]); target {} ({}) pushes nowhere: give the module one platform",
                m.name,
                mesh.file.display(),
                m.line,
                p.platforms.len(),
                target.name(),
                target.describe().kind
            )
        })
        .collect();
    if !unbuildable.is_empty() {
        return unbuildable;
    }
    // A secret a build would mount must be there before anything builds (values dropped at once).
    let missing: Vec<String> = mesh
        .modules
        .iter()
        .filter(|m| {
            planned
                .get(&m.name)
                .is_some_and(|p| matches!(p.decision, Decision::Build | Decision::Forced))
        })
        .filter_map(|m| crate::workspace::secrets::check(m).err())
        .map(|why| why.to_string())
        .collect();
    if !missing.is_empty() {
        return missing;
    }
    // Something will be delivered: the target must be able to take it, or nothing is built.
    if planned
        .values()
        .any(|p| !matches!(p.decision, Decision::Record | Decision::Pinned))
        && let Err(why) = target.delivery()
    {
        return vec![why.to_string()];
    }
    Vec::new()
}
