//! The target's record, as the target reads it (the state database's table, the namespace's
//! annotation: the target knows which), and who holds the mesh there. Only what the screen shows
//! is read: the entries and pins, and the record history of the module whose detail is open.

use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData, SourceError};
use crate::converge::targets::Shown;

use super::poll::BoxFuture;
use super::session::Session;

pub(crate) fn poll(
    session: Arc<Session>,
    params: PollParams,
) -> BoxFuture<Result<SourceData, SourceError>> {
    Box::pin(async move {
        let name = session.target_name(params.target.as_deref()).to_string();
        let mesh = session.mesh_on(&name);
        let db = session.db_handle().await?;
        let opened = params.history_opened;
        session
            .target_on(&name, |target| async move {
                let shown = Shown {
                    mesh: &mesh,
                    db: &db,
                    history_of: opened.as_deref(),
                };
                let read = target.read_shown(shown).await?;
                // Who holds the mesh for the team is read with the record; a Lease that cannot
                // be read names no one (the record's answer still stands).
                let held_by = target.held_by(&mesh.name).await.unwrap_or_else(|error| {
                    tracing::debug!("the mesh's holder could not be read: {error}");
                    None
                });
                Ok(SourceData::Record(read.record, held_by))
            })
            .await
    })
}
