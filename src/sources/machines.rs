//! The machines of the mesh on its target, as the engine lists them, with their state against the
//! record.

use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData};
use crate::backends::daemon::LazyDaemon;
use crate::converge::machines;
use crate::converge::target::{self, ConnectedTarget};
use crate::mesh::model::Target;

use super::poll::BoxFuture;
use super::session::Session;

pub fn poll(session: Arc<Session>, _params: PollParams) -> BoxFuture<Result<SourceData, String>> {
    Box::pin(async move {
        let db = session.db_handle().await?;
        let mesh = session.mesh.clone();
        if mesh.target == Target::Docker {
            // Every machine is a container: the daemon's connection is the one to drop on error.
            return session
                .daemon(|daemon| async move {
                    let target = ConnectedTarget::Docker;
                    let read = target::read_record(&mesh, &target, &db).await?;
                    let daemon = LazyDaemon::with(daemon);
                    machines::list(&mesh, &read.record, &daemon, &target, &db)
                        .await
                        .map(|listed| SourceData::MachinesAgainst(read.record, listed))
                })
                .await;
        }
        session
            .target(|target| async move {
                let read = target::read_record(&mesh, &target, &db).await?;
                machines::list(&mesh, &read.record, &LazyDaemon::new(), &target, &db)
                    .await
                    .map(|listed| SourceData::MachinesAgainst(read.record, listed))
            })
            .await
    })
}
