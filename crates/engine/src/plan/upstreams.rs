//! The upstream images the planned modules' Dockerfiles name, locked before any address is
//! computed: each found in `mesh.lock`, or resolved now (the registry first, the host daemon's
//! RepoDigests when no registry answers, said which) and written to it. A plan whose every upstream
//! is locked asks nothing of any registry.

use std::collections::BTreeMap;

use super::{PlanError, Planner};
use crate::backends::credentials;
use crate::backends::daemon::LazyDaemon;
use crate::backends::registry::{InIndex, Published, RegistryClient, RegistryError};
use crate::backends::state::{StateDb, StateError, UpstreamSeen};
use crate::mesh::manifest::Manifest;
use crate::mesh::model::{Mesh, Module, Platform, Registry};
pub use crate::mesh::upstream_lock::UpstreamNow;
use crate::mesh::upstream_lock::{LockEntry, ResolvedFrom, UpstreamMoved, moved_since};
use crate::workspace::lock_file::{add_to_lock, module_upstreams, read_lock, write_lock};

/// How long one registry is asked about one upstream before the host daemon is asked instead.
const RESOLVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl Planner<'_> {
    /// Lock every upstream `modules` name; after it, each module's upstreams (image → locked
    /// digest) are what its address is computed from.
    pub(crate) async fn lock_upstreams(&mut self, modules: &[&Module]) -> Result<(), PlanError> {
        let root = self.ctx.mesh.root.clone();
        let lock_error = |why: String| PlanError::Lock { why };
        let mut lock = read_lock(&root).map_err(|e| lock_error(e.to_string()))?;
        let mut named: Vec<(String, Vec<String>)> = Vec::new();
        // Per image, the modules naming it (their platforms are asked only for an image to lock).
        let mut users: BTreeMap<String, Vec<&Module>> = BTreeMap::new();
        for module in modules {
            let found = match module_upstreams(module) {
                Ok(found) => found,
                // The walk says what is wrong with an unreadable Dockerfile, at the module.
                Err(_) => continue,
            };
            for upstream in &found {
                users
                    .entry(upstream.image.clone())
                    .or_default()
                    .push(module);
            }
            named.push((
                module.name.clone(),
                found.into_iter().map(|u| u.image).collect(),
            ));
        }
        let mut resolved = BTreeMap::new();
        for (image, modules) in users {
            if lock.entries.contains_key(&image) {
                continue;
            }
            let mut platforms: Vec<Platform> = Vec::new();
            for module in modules {
                for platform in self.platforms(module).await {
                    if !platforms.contains(&platform) {
                        platforms.push(platform);
                    }
                }
            }
            let entry = resolve(&image, &self.daemon, &platforms).await?;
            self.upstream_notes.push(format!(
                "upstream {image} locked at {} ({}); written to mesh.lock",
                crate::mesh::why::short_digest(&entry.digest),
                entry.from.word()
            ));
            resolved.insert(image, entry);
        }
        if !resolved.is_empty() {
            // Added to the lock as it is now: an entry another plan wrote meanwhile is kept, and
            // wins over ours (it may have built on it already).
            lock = add_to_lock(&root, resolved).map_err(|e| lock_error(e.to_string()))?;
        }
        for (module, images) in named {
            let locked: BTreeMap<String, String> = images
                .into_iter()
                .filter_map(|image| {
                    let digest = lock.digest_of(&image)?.to_string();
                    Some((image, digest))
                })
                .collect();
            self.upstreams.insert(module, locked);
        }
        Ok(())
    }

    /// What [`Planner::lock_upstreams`] resolved now and wrote to mesh.lock, one line each.
    pub(crate) fn upstreams_locked(&self) -> &[String] {
        &self.upstream_notes
    }
}

/// `image`'s digest now: what its registry serves under its tag, else what the host daemon
/// pulled it as.
async fn resolve(
    image: &str,
    daemon: &LazyDaemon,
    platforms: &[Platform],
) -> Result<LockEntry, PlanError> {
    let name = ImageName::parse(image);
    let registry_said = match ask_registry(&name).await {
        Ok(Some(digest)) => {
            let platforms = platforms_in(image, &name, &digest, platforms).await?;
            return Ok(LockEntry {
                digest,
                from: ResolvedFrom::Registry,
                platforms,
            });
        }
        Ok(None) => format!("the registry {} holds no {}", name.host, name.reference()),
        Err(e) => format!("the registry {} did not answer: {e}", name.host),
    };
    if let Some(digest) = host_digest(daemon, &name, image).await {
        return Ok(LockEntry {
            digest,
            from: ResolvedFrom::Host,
            platforms: BTreeMap::new(),
        });
    }
    Err(PlanError::Upstream {
        image: image.to_string(),
        why: format!(
            "{registry_said}, and the host daemon holds no digest of it: push or pull it, or pin it in the Dockerfile (FROM {}@sha256:…)",
            crate::mesh::upstream::repository(image)
        ),
    })
}

/// Per platform the modules build, the manifest the index `digest` names for it (none when the
/// digest is a single image's manifest). An index that names none for a platform a module builds
/// stops the plan, naming what it does name: that build could only fail, or run emulated on the
/// wrong image. A registry that cannot say leaves the map without that platform.
async fn platforms_in(
    image: &str,
    name: &ImageName,
    digest: &str,
    platforms: &[Platform],
) -> Result<BTreeMap<String, String>, PlanError> {
    let mut found = BTreeMap::new();
    if platforms.is_empty() {
        return Ok(found);
    }
    let registry = Registry {
        host: name.host.clone(),
        insecure: false,
    };
    let creds = credentials::for_registry(&name.host).await.ok().flatten();
    let Ok(client) = RegistryClient::new(&registry, creds) else {
        return Ok(found);
    };
    let client = client.with_timeout(RESOLVE_TIMEOUT);
    for platform in platforms {
        let asked = client
            .platform_in_index(
                &name.repository,
                digest,
                &platform.os,
                &platform.arch,
                platform.variant.as_deref(),
            )
            .await;
        match asked {
            Ok(InIndex::Found(one)) => {
                found.insert(platform.to_string(), one.manifest);
            }
            Ok(InIndex::NotAnIndex) => return Ok(BTreeMap::new()),
            Ok(InIndex::Lacks { platforms: named }) => {
                return Err(PlanError::Upstream {
                    image: image.to_string(),
                    why: format!(
                        "its index {} names no {platform} image (it names {}), and a module on it builds for {platform}: build the module for those platforms, or name an upstream that has {platform}",
                        crate::mesh::why::short_digest(digest),
                        named.join(", ")
                    ),
                });
            }
            Ok(InIndex::Absent) | Err(_) => {}
        }
    }
    Ok(found)
}

/// The digest the host daemon knows `image` by, from its RepoDigests.
async fn host_digest(daemon: &LazyDaemon, name: &ImageName, image: &str) -> Option<String> {
    let daemon = daemon.get().await.ok()?;
    let digests = daemon.repo_digests(image).await.ok()?;
    let repository = crate::mesh::upstream::repository(image);
    digests.into_iter().find_map(|d| {
        let (repo, digest) = d.split_once('@')?;
        (repo == repository || repo == name.familiar_repository()).then(|| digest.to_string())
    })
}

/// What `meshtop update` did to the lock.
#[derive(Debug, Default, serde::Serialize)]
pub struct LockUpdate {
    /// (image, locked digest before, digest now) of each entry that moved.
    pub moved: Vec<(String, String, String)>,
    /// Entries asked and still where they were.
    pub unchanged: Vec<String>,
    /// Entries no Dockerfile of the mesh names any more (kept: `update` only moves entries).
    pub unused: Vec<String>,
}

/// `meshtop update [IMAGE…]`: each named upstream (every one the lock holds, when none is named)
/// resolved again and its entry moved, as `cargo update` does. A name the lock does not hold is
/// refused, naming what it holds.
pub async fn update_lock(
    mesh: &Mesh,
    images: &[String],
    daemon: &LazyDaemon,
) -> Result<LockUpdate, PlanError> {
    let lock_error = |why: String| PlanError::Lock { why };
    let mut lock = read_lock(&mesh.root).map_err(|e| lock_error(e.to_string()))?;
    if let Some(unknown) = images.iter().find(|i| !lock.entries.contains_key(*i)) {
        let held: Vec<&String> = lock.entries.keys().collect();
        return Err(lock_error(format!(
            "mesh.lock holds no {unknown}; it holds {held:?} (a plan locks what the Dockerfiles name)"
        )));
    }
    let asked: Vec<String> = if images.is_empty() {
        lock.entries.keys().cloned().collect()
    } else {
        images.to_vec()
    };
    let mut update = LockUpdate::default();
    for image in asked {
        // The platforms the entry was locked for, locked again.
        let platforms: Vec<Platform> = lock
            .entries
            .get(&image)
            .map(|e| {
                e.platforms
                    .keys()
                    .filter_map(|p| Platform::parse(p).ok())
                    .collect()
            })
            .unwrap_or_default();
        let now = resolve(&image, daemon, &platforms).await?;
        let Some(entry) = lock.entries.get_mut(&image) else {
            continue;
        };
        if entry.digest == now.digest {
            update.unchanged.push(image);
        } else {
            update
                .moved
                .push((image, entry.digest.clone(), now.digest.clone()));
            *entry = now;
        }
    }
    let mut named = std::collections::BTreeSet::new();
    for module in &mesh.modules {
        if let Ok(found) = module_upstreams(module) {
            named.extend(found.into_iter().map(|u| u.image));
        }
    }
    update.unused = lock
        .entries
        .keys()
        .filter(|i| !named.contains(*i))
        .cloned()
        .collect();
    if !update.moved.is_empty() {
        write_lock(&mesh.root, &lock).map_err(|e| lock_error(e.to_string()))?;
    }
    Ok(update)
}

/// How many registries `outdated` asks at once.
const ASKED_AT_ONCE: usize = 8;

/// `meshtop outdated`: every locked upstream asked of its registry (a few at once, each bounded by
/// its timeout), against the lock. Reads only; `update` moves the lock.
pub async fn outdated(mesh: &Mesh) -> Result<Vec<UpstreamNow>, PlanError> {
    use futures_util::StreamExt;
    let lock = read_lock(&mesh.root).map_err(|e| PlanError::Lock { why: e.to_string() })?;
    let mut users: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for module in &mesh.modules {
        for upstream in module_upstreams(module).unwrap_or_default() {
            let modules = users.entry(upstream.image).or_default();
            if !modules.contains(&module.name) {
                modules.push(module.name.clone());
            }
        }
    }
    // Owned: a future that borrows the lock cannot be sent on from a poller's task.
    let asks = lock.entries.into_iter().map(|(image, entry)| {
        let modules = users.get(&image).cloned().unwrap_or_default();
        let machines = mesh
            .machines
            .iter()
            .filter(|m| modules.contains(&m.module))
            .count();
        async move {
            let (current, error) = match ask_registry(&ImageName::parse(&image)).await {
                Ok(Some(digest)) => (Some(digest), None),
                Ok(None) => (None, Some("the registry holds no such tag now".to_string())),
                Err(e) => (None, Some(e.to_string())),
            };
            UpstreamNow {
                image,
                locked: entry.digest,
                current,
                error,
                modules,
                machines,
            }
        }
    });
    let mut answers: Vec<UpstreamNow> = futures_util::stream::iter(asks)
        .buffer_unordered(ASKED_AT_ONCE)
        .collect()
        .await;
    answers.sort_by(|a, b| a.image.cmp(&b.image));
    Ok(answers)
}

/// The registry's answer for `name`: its manifest digest, None when it holds no such tag.
async fn ask_registry(name: &ImageName) -> Result<Option<String>, RegistryError> {
    let registry = Registry {
        host: name.host.clone(),
        insecure: false,
    };
    let creds = credentials::for_registry(&name.host).await.ok().flatten();
    let client = RegistryClient::new(&registry, creds)?.with_timeout(RESOLVE_TIMEOUT);
    match client.manifest(&name.repository, &name.tag).await? {
        Published::Present { digest } => Ok(Some(digest)),
        Published::Absent => Ok(None),
    }
}

/// Where Docker Hub's registry API answers.
const DOCKER_HUB: &str = "registry-1.docker.io";

/// An image name as Docker reads it: `python:3.12` is Docker Hub's `library/python`, tag `3.12`;
/// a first component with a dot, a colon or `localhost` names the registry.
#[derive(Debug, PartialEq, Eq)]
struct ImageName {
    host: String,
    repository: String,
    tag: String,
}

impl ImageName {
    fn parse(image: &str) -> ImageName {
        let repository = crate::mesh::upstream::repository(image);
        let tag = image[repository.len()..]
            .strip_prefix(':')
            .unwrap_or("latest")
            .to_string();
        // Docker Hub written out (`docker.io/library/python`) is Docker Hub, whose API is served
        // at registry-1.docker.io, as the daemon's own resolver maps it.
        let hub = |path: &str| match path.contains('/') {
            true => (DOCKER_HUB.to_string(), path.to_string()),
            false => (DOCKER_HUB.to_string(), format!("library/{path}")),
        };
        let (host, path) = match repository.split_once('/') {
            Some(("docker.io" | "index.docker.io", rest)) => hub(rest),
            Some((first, rest))
                if first.contains('.') || first.contains(':') || first == "localhost" =>
            {
                (first.to_string(), rest.to_string())
            }
            _ => hub(repository),
        };
        ImageName {
            host,
            repository: path,
            tag,
        }
    }

    fn reference(&self) -> String {
        format!("{}:{}", self.repository, self.tag)
    }

    /// The repository as the daemon writes it in RepoDigests (`python` for Docker Hub's library).
    fn familiar_repository(&self) -> String {
        if self.host == DOCKER_HUB {
            self.repository
                .strip_prefix("library/")
                .unwrap_or(&self.repository)
                .to_string()
        } else {
            format!("{}/{}", self.host, self.repository)
        }
    }
}

/// `outdated`, each answer noted in the state database (what `status` and the dashboard read to
/// say which machines stand on a moved upstream, without asking a registry themselves). A state
/// database that cannot be written (opened read-only) leaves the answers unnoted, said in `unnoted`.
pub async fn refresh_upstreams(
    mesh: &Mesh,
    db: &std::sync::Mutex<StateDb>,
) -> Result<Refreshed, PlanError> {
    let answers = outdated(mesh).await?;
    let unnoted = match crate::backends::state::locked(db) {
        Ok(db) => answers
            .iter()
            .try_for_each(|answer| {
                db.note_upstream_seen(
                    &answer.image,
                    answer.current.as_deref(),
                    answer.error.as_deref(),
                )
            })
            .err()
            .map(|e| e.to_string()),
        Err(poisoned) => Some(poisoned.to_string()),
    };
    Ok(Refreshed { answers, unnoted })
}

/// The upstreams asked now, and why their answers could not be kept, if they could not.
pub struct Refreshed {
    pub answers: Vec<UpstreamNow>,
    pub unnoted: Option<String>,
}

/// The upstreams the artifact of `reference` (a build of `module` this state database kept the
/// inputs of) was built on that moved since, by what their registries served when last asked.
/// Nothing when the inputs are not kept here (an artifact another machine built).
pub fn moved_under(
    db: &StateDb,
    mesh: &str,
    module: &str,
    reference: &str,
    seen: &BTreeMap<String, UpstreamSeen>,
) -> Result<Vec<UpstreamMoved>, StateError> {
    let Some(json) = db.manifest(mesh, module, reference)? else {
        return Ok(Vec::new());
    };
    let Ok(manifest) = serde_json::from_str::<Manifest>(&json) else {
        return Ok(Vec::new());
    };
    Ok(moved_since(&manifest.upstreams, |image| {
        seen.get(image).and_then(|s| s.digest.as_deref())
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_read_as_the_daemon_reads_them() {
        let name = ImageName::parse("python:3.12-slim");
        assert_eq!(
            (
                name.host.as_str(),
                name.repository.as_str(),
                name.tag.as_str()
            ),
            ("registry-1.docker.io", "library/python", "3.12-slim")
        );
        assert_eq!(name.familiar_repository(), "python");
        let name = ImageName::parse("127.0.0.1:5000/up/base:1");
        assert_eq!(
            (
                name.host.as_str(),
                name.repository.as_str(),
                name.tag.as_str()
            ),
            ("127.0.0.1:5000", "up/base", "1")
        );
        assert_eq!(name.familiar_repository(), "127.0.0.1:5000/up/base");
        for written in [
            "docker.io/library/python:3.12-slim",
            "index.docker.io/python:3.12-slim",
        ] {
            let name = ImageName::parse(written);
            assert_eq!(
                (
                    name.host.as_str(),
                    name.repository.as_str(),
                    name.tag.as_str()
                ),
                ("registry-1.docker.io", "library/python", "3.12-slim"),
                "{written}"
            );
        }
        let name = ImageName::parse("team/tool");
        assert_eq!(
            (name.repository.as_str(), name.tag.as_str()),
            ("team/tool", "latest")
        );
    }
}
