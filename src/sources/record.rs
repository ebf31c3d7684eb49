//! The target's record, as the target reads it (the state database's table, the namespace's
//! annotation: the target knows which).

use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData};

use super::poll::BoxFuture;
use super::session::Session;

pub fn poll(session: Arc<Session>, _params: PollParams) -> BoxFuture<Result<SourceData, String>> {
    Box::pin(async move {
        let mesh = session.mesh.clone();
        let db = session.db_handle().await?;
        session
            .target(|target| async move {
                let read = target.read_record(&mesh, &db).await?;
                Ok(SourceData::Record(read.record))
            })
            .await
    })
}
