//! What the host daemon holds: the images meshtop labelled.

use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData, SourceError};
use crate::backends::state::locked;
use crate::mesh::decide::mark_origins;

use super::poll::BoxFuture;
use super::session::Session;

pub(crate) fn poll(
    session: Arc<Session>,
    _params: PollParams,
) -> BoxFuture<Result<SourceData, SourceError>> {
    Box::pin(async move {
        let mut images = session
            .daemon(|daemon| async move { Ok(daemon.labelled_images().await?) })
            .await?;
        // With `trust`, the screen says which images would answer, as the plan decides.
        if !session.mesh.signing.trust.is_empty() {
            let mesh = session.mesh.name.clone();
            let vouched = session
                .db(move |db| Ok(locked(db)?.vouched_here(&mesh)?))
                .await?;
            mark_origins(&mut images, &vouched);
        }
        Ok(SourceData::Host(images))
    })
}
