//! gc's candidates, weighed against the keep set: this mesh's images the host holds that no root
//! keeps (a dependent before its base), the registry's manifests of unreachable builds, and those
//! the grace spares. Pure: the images and the builds come in read.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::roots::{GRACE, Roots, unreachable_why};
use super::{Candidate, CandidateKind, GcRules, within_grace};
use crate::builds::BuildRow;
use crate::model::{MESH_LABEL, MODULE_LABEL, Mesh};
use crate::refs::{repository_in, split_reference};
use crate::text::short_id;

/// One meshtop-labelled image with its size, as gc weighs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizedImage {
    pub id: String,
    pub tags: Vec<String>,
    pub labels: HashMap<String, String>,
    /// Bytes on the daemon (layers shared with other images counted in each).
    pub size: i64,
    /// When it was built (ms since the epoch, as the daemon's `Created` says).
    pub created_ms: i64,
}

/// `[registry/]<mesh>/` — the repositories of this mesh's modules start with it.
fn mesh_prefix(mesh: &Mesh) -> String {
    match &mesh.registry {
        Some(registry) => format!("{}/{}/", registry.host, mesh.name),
        None => format!("{}/", mesh.name),
    }
}

fn is_mesh_tag(mesh: &Mesh, tag: &str) -> bool {
    let (repository, _) = split_reference(tag);
    repository
        .strip_prefix(&mesh_prefix(mesh))
        .is_some_and(|module| mesh.module(module).is_some())
}

/// This mesh's image: labelled with its name, or (no mesh label) labelled with one of its modules
/// and tagged into one of its repositories. Never another mesh's, never unlabelled.
pub fn is_this_mesh(mesh: &Mesh, image: &SizedImage) -> bool {
    match image.labels.get(MESH_LABEL) {
        Some(name) => *name == mesh.name,
        None => {
            image.labels.contains_key(MODULE_LABEL)
                && image.tags.iter().any(|tag| is_mesh_tag(mesh, tag))
        }
    }
}

/// What the host holds that nothing needs (candidates), and what it would take but for the grace
/// (spared).
pub fn candidates(
    mesh: &Mesh,
    roots: &Roots,
    rules: &GcRules,
    images: &[SizedImage],
    now_ms: i64,
) -> (Vec<Candidate>, Vec<Candidate>) {
    let mut out = Vec::new();
    let mut spared = Vec::new();
    for image in images.iter().filter(|i| is_this_mesh(mesh, i)) {
        let module = image.labels.get(MODULE_LABEL).cloned().unwrap_or_default();
        let candidate = |kind: CandidateKind, name: &str, why: String, bytes| Candidate {
            kind,
            name: name.into(),
            module: module.clone(),
            artifact: image.id.clone(),
            why,
            bytes,
            outcome: None,
        };
        let young = match roots.keep.get(&image.id) {
            Some((GRACE, why)) => Some(why.clone()),
            Some(_) => continue,
            None => within_grace("built", image.created_ms, now_ms, rules.grace_ms),
        };
        if let Some(why) = young {
            spared.push(candidate(CandidateKind::Image, &image.id, why, image.size));
            continue;
        }
        let why = unreachable_why(roots, rules.keep_newest, &module, &image.id);
        let ours: Vec<&String> = image
            .tags
            .iter()
            .filter(|t| is_mesh_tag(mesh, t) && !roots.kept_refs.contains(*t))
            .collect();
        if ours.len() == image.tags.len() {
            out.push(candidate(CandidateKind::Image, &image.id, why, image.size));
        } else {
            // A kept or foreign tag keeps the image: only this mesh's unreachable tags go.
            out.extend(
                ours.iter()
                    .map(|t| candidate(CandidateKind::Tag, t, why.clone(), 0)),
            );
        }
    }
    // Dependents before their bases: the daemon refuses to remove an image a child is built on.
    let tier = |c: &Candidate| mesh.module(&c.module).map_or(0, |m| m.tier);
    out.sort_by(|a, b| tier(b).cmp(&tier(a)).then_with(|| a.name.cmp(&b.name)));
    (out, spared)
}

/// Published manifests of builds nothing needs (Kubernetes with a registry), those spared by the
/// grace, and this mesh's unreachable set: repository → the tags its unreachable builds published.
pub struct Manifests {
    pub candidates: Vec<Candidate>,
    pub spared: Vec<Candidate>,
    pub ours: BTreeMap<String, BTreeSet<String>>,
}

pub fn manifest_candidates(roots: &Roots, keep_newest: usize, registry_host: &str) -> Manifests {
    let rows = || roots.builds.values().flatten();
    let root_of = |b: &BuildRow| b.digest.as_ref().and_then(|d| roots.keep.get(d));
    let kept_published: BTreeSet<&str> = rows()
        .filter(|b| root_of(b).is_some_and(|(root, _)| *root != GRACE))
        .filter_map(|b| b.published_digest.as_deref())
        .chain(roots.running_manifests.iter().map(String::as_str))
        .collect();
    // Published by a build within the grace (whichever other build published it too).
    let young: BTreeMap<&str, &String> = rows()
        .filter_map(|b| match root_of(b) {
            Some((GRACE, why)) => Some((b.published_digest.as_deref()?, why)),
            _ => None,
        })
        .collect();
    let mut seen = BTreeSet::new();
    let mut found = Manifests {
        candidates: Vec::new(),
        spared: Vec::new(),
        ours: BTreeMap::new(),
    };
    for (module, rows) in &roots.builds {
        for build in rows {
            let (Some(digest), Some(published), Some(reference)) =
                (&build.digest, &build.published_digest, &build.published_ref)
            else {
                continue;
            };
            if roots.keep.contains_key(digest) && !young.contains_key(published.as_str())
                || kept_published.contains(published.as_str())
            {
                continue;
            }
            let (repository, tag) = repository_in(registry_host, reference);
            let young = young.get(published.as_str());
            if young.is_none() {
                found
                    .ours
                    .entry(repository.to_string())
                    .or_default()
                    .insert(tag.to_string());
            }
            if !seen.insert(published.clone()) {
                continue;
            }
            let candidate = Candidate {
                kind: CandidateKind::Manifest,
                name: format!("{repository}@{published}"),
                module: module.clone(),
                artifact: digest.clone(),
                why: String::new(),
                bytes: 0,
                outcome: None,
            };
            match young {
                Some(why) => found.spared.push(Candidate {
                    why: (*why).clone(),
                    ..candidate
                }),
                None => found.candidates.push(Candidate {
                    why: unreachable_why(roots, keep_newest, module, digest),
                    ..candidate
                }),
            }
        }
    }
    found
}

/// A candidate's name as a line says it: a digest shortened.
pub fn short_name(name: &str) -> String {
    if name.starts_with("sha256:") {
        format!("sha256:{}", short_id(name))
    } else {
        name.to_string()
    }
}
