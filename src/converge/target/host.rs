//! The host daemon's answers that more than one kind of target needs: whether it still holds an
//! artifact (the Docker target, and a kind cluster loaded from it).

use crate::backends::daemon::LazyDaemon;
use crate::converge::error::TargetError;
use crate::mesh::model::RecordEntry;

use super::seam::Holding;

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
