//! The dry run, as `meshtop plan` makes it: the record, then every module's decision.

use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData, SourceError};
use crate::converge::plan::{self, PlanContext, StateManifests};

use super::poll::BoxFuture;
use super::session::Session;

pub(crate) fn poll(
    session: Arc<Session>,
    params: PollParams,
) -> BoxFuture<Result<SourceData, SourceError>> {
    Box::pin(async move {
        let db = session.db_handle().await?;
        let daemon = session.lazy_daemon().await;
        let name = session.target_name(params.target.as_deref()).to_string();
        let mesh = session.mesh_on(&name);
        let walks = session.walks.clone();
        session
            .target_on(&name, |target| async move {
                let read = target.read_entries(&mesh, &db).await?;
                let ctx = PlanContext::new(&mesh, target.as_ref(), &read, None, false);
                let manifests = StateManifests {
                    db: &db,
                    mesh: &mesh.name,
                    target: target.name(),
                };
                // Hashing runs on this worker thread (the planner moves it off the async pool);
                // a watched context that reported no change is not walked again.
                let plan = plan::dry_run_watched(ctx, daemon, &manifests, Some(&walks)).await?;
                Ok(SourceData::Plan(Box::new(plan)))
            })
            .await
    })
}
