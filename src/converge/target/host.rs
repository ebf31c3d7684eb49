//! The host daemon's answers that more than one kind of target needs: whether it still holds an
//! artifact (the Docker target, and a kind cluster loaded from it), and the pull of an artifact the
//! registry vouched for (the Docker target's delivery, and a base a Kubernetes converge builds FROM).

use crate::backends::credentials::Credentials;
use crate::backends::daemon::LazyDaemon;
use crate::converge::error::TargetError;
use crate::converge::progress::{Emitter, Payload};
use crate::mesh::model::{RecordEntry, Registry};
use crate::mesh::progress::DeliveredBy;
use crate::mesh::refs::repository_of;
use crate::mesh::text::short_id;

use super::seam::{Artifact, Holding};

/// The daemon must hold the artifact; a ref that gc untagged while the image stayed is tagged again.
pub async fn holds(daemon: &LazyDaemon, wanted: &RecordEntry) -> Result<Holding, TargetError> {
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
/// digest, tagged with the ref as a build would leave it; the pulled image must be the artifact.
pub async fn pull_vouched(
    daemon: &LazyDaemon,
    artifact: &Artifact<'_>,
    manifest: &str,
    registry: &Registry,
    creds: Option<&Credentials>,
    emitter: &Emitter,
) -> Result<(), TargetError> {
    let docker = daemon.get().await.map_err(TargetError::Unreachable)?;
    let repository = repository_of(artifact.reference);
    let auth = creds.map(|c| c.to_docker(&registry.host));
    let id = docker
        .pull_by_digest(repository, manifest, artifact.reference, auth)
        .await?;
    if id != artifact.digest {
        return Err(TargetError::PulledOther {
            pinned: format!("{repository}@{manifest}"),
            got: short_id(&id).to_string(),
            artifact: short_id(artifact.digest).to_string(),
        });
    }
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
