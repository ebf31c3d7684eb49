//! The machines of the mesh on its target, as the target lists them, with their state against the
//! record.

use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData, SourceError};
use crate::converge::targets::Reach;

use super::poll::BoxFuture;
use super::session::Session;

pub(crate) fn poll(
    session: Arc<Session>,
    params: PollParams,
) -> BoxFuture<Result<SourceData, SourceError>> {
    Box::pin(async move {
        let db = session.db_handle().await?;
        let name = session.target_name(params.target.as_deref()).to_string();
        let mesh = session.mesh_on(&name);
        // The shared daemon connection when there is one (a target whose machines are containers
        // asks it; one whose machines are elsewhere never connects).
        let daemon = session.lazy_daemon().await;
        session
            .target_on(&name, |target| async move {
                // The entries alone: the machines are judged against them, not the history.
                let read = target.read_entries(&mesh, &db).await?;
                let reach = Reach {
                    daemon: &daemon,
                    db: &db,
                };
                let listed = target.machines(&mesh, &read.record, reach).await?;
                Ok(SourceData::MachinesAgainst(read.record, listed))
            })
            .await
    })
}
