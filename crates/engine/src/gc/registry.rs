//! gc on the registry a Kubernetes target pulls from: what machines run, mapped from manifest
//! digests to artifacts; the published manifests nothing needs; and the tags that keep a manifest
//! a teammate needs.

use std::collections::{BTreeMap, BTreeSet};

use crate::backends::registry::{Published, RegistryClient, repository_in, split_reference};
use crate::error::GcError;
use crate::mesh::gc::candidates::Manifests;
use crate::mesh::gc::{Candidate, Roots, keeping_tag};
use crate::mesh::machine::Machine;
use crate::mesh::model::Mesh;
use crate::mesh::text::short_id;

/// The registry a Kubernetes target pulls from, as gc asks it.
pub(super) struct Pulled<'a> {
    pub(super) client: &'a RegistryClient,
    pub(super) host: &'a str,
}

/// What machines run, and what their templates name by digest (the pods a controller has yet to
/// make: a roll-out held back, pods lagging the template, pull what it names), as artifacts: a digest
/// a build made is one; a manifest digest a build published names that build's artifact; any other is
/// asked of the registry (a manifest's config digest, or an index's own digest), in the repository the
/// machine pulls from.
pub(super) async fn keep_running(
    mesh: &Mesh,
    machines: &[Machine],
    roots: &mut Roots,
    registry: Option<&Pulled<'_>>,
) -> Result<(), GcError> {
    let rows = || roots.builds.values().flatten();
    let artifacts: BTreeSet<String> = rows().filter_map(|b| b.digest.clone()).collect();
    let published: BTreeMap<String, String> = rows()
        .filter_map(|b| Some((b.published_digest.clone()?, b.digest.clone()?)))
        .collect();
    for machine in machines {
        let named = machine
            .image
            .rsplit_once('@')
            .map(|(_, digest)| digest.to_string())
            .filter(|d| d.starts_with("sha256:") && !machine.running.contains(d));
        for running in machine.running.iter().chain(named.iter()) {
            let artifact = if artifacts.contains(running) {
                running.clone()
            } else {
                roots.running_manifests.insert(running.clone());
                match (published.get(running), registry) {
                    (Some(artifact), _) => artifact.clone(),
                    (None, Some(registry)) => {
                        let repository = pulled_repository(mesh, machine, registry.host);
                        registry
                            .client
                            .artifact_of(&repository, running)
                            .await
                            .map_err(|e| GcError::unreadable("the registry", e))?
                            .unwrap_or_else(|| running.clone())
                    }
                    (None, None) => running.clone(),
                }
            };
            let verb = if named.as_ref() == Some(running) {
                "names it in its template"
            } else {
                "runs it"
            };
            let why = if artifact == *running {
                format!("machine {} {verb}", machine.name)
            } else {
                format!(
                    "machine {} {verb} (manifest sha256:{})",
                    machine.name,
                    short_id(running)
                )
            };
            roots.keep.entry(artifact).or_insert(("running", why));
        }
    }
    Ok(())
}

/// The repository (in `host`'s words) the machine's image names, when it is in that registry;
/// else the module's own (`<mesh>/<module>`).
fn pulled_repository(mesh: &Mesh, machine: &Machine, host: &str) -> String {
    let image = machine.image.split('@').next().unwrap_or_default();
    let (repository, _) = split_reference(image);
    match repository
        .strip_prefix(host)
        .and_then(|r| r.strip_prefix('/'))
    {
        Some(path) if !path.is_empty() => path.to_string(),
        _ => format!("{}/{}", mesh.name, machine.module),
    }
}

/// Before a manifest is deleted (which untags every tag naming it: distribution's
/// `DeleteImageManifest`), the repository's tags are listed and each asked which manifest it
/// names; a manifest a tag outside this mesh's unreachable set names is spared, saying which.
pub(super) async fn spare_tagged(
    registry: &Pulled<'_>,
    manifests: Manifests,
    kept_refs: &BTreeSet<String>,
) -> Result<(Vec<Candidate>, Vec<Candidate>), GcError> {
    let Manifests {
        candidates,
        mut spared,
        ours,
    } = manifests;
    let repositories: BTreeSet<String> = candidates
        .iter()
        .filter_map(|c| Some(c.name.split_once('@')?.0.to_string()))
        .collect();
    // repository → manifest digest → the tags naming it.
    let mut naming: BTreeMap<String, BTreeMap<String, Vec<String>>> = BTreeMap::new();
    for repository in &repositories {
        let unreadable =
            |e| GcError::unreadable(&format!("the registry's tags of {repository}"), e);
        let tags = registry.client.tags(repository).await.map_err(unreadable)?;
        let by_digest = naming.entry(repository.clone()).or_default();
        for tag in tags {
            // A tag deleted since the listing names nothing.
            if let Published::Present { digest } = registry
                .client
                .manifest(repository, &tag)
                .await
                .map_err(unreadable)?
            {
                by_digest.entry(digest).or_default().push(tag);
            }
        }
    }
    let mut kept_tags: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for reference in kept_refs {
        let (repository, tag) = repository_in(registry.host, reference);
        kept_tags
            .entry(repository)
            .or_default()
            .insert(tag.to_string());
    }
    let none = BTreeSet::new();
    let mut out = Vec::new();
    for candidate in candidates {
        let (repository, digest) = candidate
            .name
            .split_once('@')
            .unwrap_or((candidate.name.as_str(), ""));
        let tags = naming
            .get(repository)
            .and_then(|d| d.get(digest))
            .map_or(&[][..], Vec::as_slice);
        let kept = kept_tags.get(repository).unwrap_or(&none);
        // A tag the keep set names is never ours to untag, even if an unreachable build gave it.
        let ours: BTreeSet<String> = ours
            .get(repository)
            .map(|o| o.difference(kept).cloned().collect())
            .unwrap_or_default();
        match keeping_tag(tags, &ours, kept) {
            Some(why) => spared.push(Candidate { why, ..candidate }),
            None => out.push(candidate),
        }
    }
    Ok((out, spared))
}
