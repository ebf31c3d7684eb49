//! The host daemon's answers that more than one kind of target needs: whether it still holds an
//! artifact (the Docker target, and a kind cluster loaded from it), and the pull of an artifact the
//! registry vouched for (the Docker target's delivery, and a base a Kubernetes converge builds FROM).

use crate::backends::credentials::Credentials;
use crate::backends::daemon::LazyDaemon;
use crate::backends::registry::{InIndex, RegistryClient, repository_in};
use crate::backends::state::locked;
use crate::error::{IndexLack, TargetError};
use crate::mesh::model::{RecordEntry, Registry};
use crate::mesh::progress::DeliveredBy;
use crate::mesh::refs::repository_of;
use crate::mesh::text::short_id;
use crate::progress::{Emitter, Payload};

use super::seam::{Artifact, Holding, Reach};

/// The daemon must hold the artifact; a ref that gc untagged while the image stayed is tagged again.
pub(super) async fn holds(
    daemon: &LazyDaemon,
    wanted: &RecordEntry,
) -> Result<Holding, TargetError> {
    let docker = daemon.get().await.map_err(TargetError::Unreachable)?;
    if !docker.has_image(&wanted.digest).await? {
        return Ok(Holding::Gone("the host daemon".into()));
    }
    // gc may have untagged the ref while the image stayed (another tag kept it).
    if !docker.has_image(&wanted.reference).await? {
        docker.tag(&wanted.digest, &wanted.reference).await?;
    }
    Ok(Holding::Held)
}

/// Pull `artifact`'s manifest `manifest` (what the registry vouched with) into the host daemon by
/// digest; only once the pulled image is the artifact is it tagged with the ref (as a build would
/// leave it). A pull that brought another image leaves nothing under the ref, and its pinned name
/// is removed again.
pub(super) async fn pull_vouched(
    reach: &Reach<'_>,
    mesh: &str,
    artifact: &Artifact<'_>,
    manifest: &str,
    registry: &Registry,
    creds: Option<&Credentials>,
    emitter: &Emitter,
) -> Result<(), TargetError> {
    let docker = reach.daemon.get().await.map_err(TargetError::Unreachable)?;
    let repository = repository_of(artifact.reference);
    let auth = creds.map(|c| c.for_daemon(&registry.host));
    let id = docker.pull_by_digest(repository, manifest, auth).await?;
    let pinned = format!("{repository}@{manifest}");
    if id != artifact.digest {
        // Best effort: the refusal is the error that matters; a pinned name left behind tags nothing.
        if let Err(error) = docker.remove(&pinned).await {
            tracing::warn!("the refused pull {pinned} could not be removed again: {error}");
        }
        return Err(TargetError::PulledOther {
            pinned,
            got: short_id(&id).to_string(),
            artifact: short_id(artifact.digest).to_string(),
        });
    }
    docker.tag(&id, artifact.reference).await?;
    // With `trust`, the host vouches for this image later only because it was verified here.
    locked(reach.db)
        .map_err(TargetError::Handle)?
        .note_verified_pull(mesh, &id, artifact.reference, manifest, artifact.signed_by)?;
    emitter.emit(
        Payload::Delivered {
            reference: artifact.reference.to_string(),
            by: DeliveredBy::Pulled {
                manifest: manifest.to_string(),
                digest: id.clone(),
            },
        },
        Some(artifact.module),
        format!(
            "pulled {repository}@{manifest} as {} ({})",
            artifact.reference,
            short_id(&id)
        ),
    );
    Ok(())
}

/// Keep `manifest` with the build that made `artifact` as what it was published as: this
/// converge's build, or (a skip) the one the history names for the artifact.
pub(super) fn note_published(
    reach: &Reach<'_>,
    mesh: &str,
    artifact: &Artifact<'_>,
    manifest: &str,
) -> Result<(), TargetError> {
    let db = locked(reach.db).map_err(TargetError::Handle)?;
    let build = match artifact.build_id {
        Some(id) => Some(id.to_string()),
        None => db.build_by_digest(mesh, artifact.digest)?.map(|b| b.id),
    };
    if let Some(build) = build {
        db.set_published(&build, artifact.reference, manifest)?;
    }
    Ok(())
}

/// Pull the host daemon's platform out of the multi-platform artifact `artifact` (its digest is
/// its image index's, as the record names it): the index is fetched by that digest (its bytes
/// hashed), the manifest for the daemon's platform found in it and fetched by its own digest, and
/// the daemon pulls that manifest by digest; the pulled image must be the config it names. Only
/// then is it tagged with the ref and noted as what the host runs out of the index. Never a tag
/// looked up again. The image id.
pub(super) async fn pull_from_index(
    reach: &Reach<'_>,
    mesh: &str,
    artifact: &Artifact<'_>,
    registry: &Registry,
    creds: Option<&Credentials>,
    emitter: &Emitter,
) -> Result<String, TargetError> {
    let docker = reach.daemon.get().await.map_err(TargetError::Unreachable)?;
    let platform = docker.platform().await?.clone();
    let index = artifact.digest;
    let client = RegistryClient::new(registry, creds.cloned())?;
    let (path, _) = repository_in(&registry.host, artifact.reference);
    let lacks = |why: IndexLack| TargetError::IndexPlatform {
        reference: artifact.reference.to_string(),
        index: index.to_string(),
        why,
    };
    let found = client
        .platform_in_index(
            path,
            index,
            &platform.os,
            &platform.arch,
            platform.variant.as_deref(),
        )
        .await?;
    let image = match found {
        InIndex::Found(image) => image,
        InIndex::Absent => {
            return Err(lacks(IndexLack::Absent {
                registry: registry.host.clone(),
            }));
        }
        InIndex::NotAnIndex => return Err(lacks(IndexLack::NotAnIndex)),
        InIndex::Lacks { platforms } => {
            return Err(lacks(IndexLack::NoPlatform {
                platform: platform.to_string(),
                platforms: platforms.join(", "),
            }));
        }
    };
    let repository = repository_of(artifact.reference);
    let auth = creds.map(|c| c.for_daemon(&registry.host));
    let id = docker
        .pull_by_digest(repository, &image.manifest, auth)
        .await?;
    let pinned = format!("{repository}@{}", image.manifest);
    if id != image.config {
        if let Err(error) = docker.remove(&pinned).await {
            tracing::warn!("the refused pull {pinned} could not be removed again: {error}");
        }
        return Err(TargetError::PulledOther {
            pinned,
            got: short_id(&id).to_string(),
            artifact: short_id(&image.config).to_string(),
        });
    }
    docker.tag(&id, artifact.reference).await?;
    {
        let db = locked(reach.db).map_err(TargetError::Handle)?;
        db.note_verified_pull(
            mesh,
            &id,
            artifact.reference,
            &image.manifest,
            artifact.signed_by,
        )?;
        db.note_index_image(mesh, index, &platform.to_string(), &image.manifest, &id)?;
    }
    emitter.emit(
        Payload::Delivered {
            reference: artifact.reference.to_string(),
            by: DeliveredBy::Pulled {
                manifest: image.manifest.clone(),
                digest: id.clone(),
            },
        },
        Some(artifact.module),
        format!(
            "pulled {platform} out of the image index {} as {} ({}, manifest {})",
            short_id(index),
            artifact.reference,
            short_id(&id),
            short_id(&image.manifest)
        ),
    );
    Ok(id)
}

/// The images the host daemon runs out of `digest` when it is a multi-platform artifact (an
/// index this machine pulled its platform out of): what its containers report for it.
pub(super) fn index_images(
    db: &std::sync::Mutex<crate::backends::state::StateDb>,
    mesh: &str,
    digest: &str,
) -> Result<Vec<String>, TargetError> {
    let db = locked(db).map_err(TargetError::Handle)?;
    Ok(db.index_images(mesh, digest)?.into_values().collect())
}

/// What the host daemon runs for the artifact `digest`: the image it pulled for its platform out
/// of it when `digest` is an index, else `digest` itself.
pub(super) async fn runnable(
    reach: &Reach<'_>,
    mesh: &str,
    digest: &str,
) -> Result<String, TargetError> {
    let images = locked(reach.db)
        .map_err(TargetError::Handle)?
        .index_images(mesh, digest)?;
    if images.is_empty() {
        return Ok(digest.to_string());
    }
    let docker = reach.daemon.get().await.map_err(TargetError::Unreachable)?;
    let platform = docker.platform().await?.to_string();
    Ok(images
        .get(&platform)
        .cloned()
        .unwrap_or_else(|| digest.to_string()))
}
