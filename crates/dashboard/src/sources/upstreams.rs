//! What each locked upstream's registry serves now: `meshtop outdated`'s question, asked on a
//! modest interval, its answers kept in the state database for `status`.

use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData, SourceError};
use crate::converge::plan::refresh_upstreams;

use super::poll::BoxFuture;
use super::session::Session;

pub(crate) fn poll(
    session: Arc<Session>,
    _params: PollParams,
) -> BoxFuture<Result<SourceData, SourceError>> {
    Box::pin(async move {
        let db = session.db_handle().await?;
        let refreshed = refresh_upstreams(&session.mesh, &db).await?;
        if let Some(why) = &refreshed.unnoted {
            tracing::warn!("the upstreams' answers could not be kept for status: {why}");
        }
        Ok(SourceData::Upstreams(refreshed.answers))
    })
}
