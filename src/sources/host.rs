//! What the host daemon holds: the images meshtop labelled.

use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData};

use super::poll::BoxFuture;
use super::session::Session;

pub fn poll(session: Arc<Session>, _params: PollParams) -> BoxFuture<Result<SourceData, String>> {
    Box::pin(async move {
        session
            .daemon(|daemon| async move {
                daemon
                    .labelled_images()
                    .await
                    .map(SourceData::Host)
                    .map_err(|e| e.to_string())
            })
            .await
    })
}
