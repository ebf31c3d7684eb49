//! The target's record: the state database's table (Docker) or the namespace's annotation.

use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData};
use crate::converge::target;
use crate::mesh::model::Target;

use super::poll::BoxFuture;
use super::session::Session;

pub fn poll(session: Arc<Session>, _params: PollParams) -> BoxFuture<Result<SourceData, String>> {
    Box::pin(async move {
        let mesh = session.mesh.clone();
        if mesh.target == Target::Docker {
            return session
                .db(move |db| {
                    crate::backends::state::locked(db)?
                        .record(&mesh.name)
                        .map(SourceData::Record)
                        .map_err(|e| e.to_string())
                })
                .await;
        }
        let db = session.db_handle().await?;
        session
            .target(|target| async move {
                let read = target::read_record(&mesh, &target, &db).await?;
                Ok(SourceData::Record(read.record))
            })
            .await
    })
}
