//! What the host daemon holds: the images meshtop labelled.

use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData, SourceError};

use super::poll::BoxFuture;
use super::session::Session;

pub fn poll(
    session: Arc<Session>,
    _params: PollParams,
) -> BoxFuture<Result<SourceData, SourceError>> {
    Box::pin(async move {
        session
            .daemon(|daemon| async move { Ok(SourceData::Host(daemon.labelled_images().await?)) })
            .await
    })
}
