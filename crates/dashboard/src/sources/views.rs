//! What the dashboard's views read on demand: the gc dry run (through the same `converge::gc` the
//! command runs) and the stats (the same `StateDb::stats` as `meshtop stats`).

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::app::msg::{Msg, SourceError};
use crate::app::views::{TimelineRead, ViewData, ViewRequest};
use crate::backends::state::locked;
use crate::converge::{environments, gc};
use crate::mesh::timeline::Timeline;
use crate::timefmt;

use super::poll::{BoxFuture, OnDemand};
use super::session::Session;

/// Read what a view shows and hand it to the app.
pub(crate) fn fetch(
    backend: &Arc<dyn OnDemand>,
    request: ViewRequest,
    tx: mpsc::UnboundedSender<Msg>,
) {
    let work = backend.view(request.clone());
    tokio::spawn(async move {
        let result = work.await;
        let _ = tx.send(Msg::ViewLoaded {
            request,
            at_ms: timefmt::now_ms(),
            result,
        });
    });
}

/// Every target of the session's mesh but `acting`, connected (or why not): gc reads them all.
pub(crate) async fn others(session: &Session, acting: &str) -> Vec<gc::Other> {
    let mut others = Vec::new();
    for name in session.mesh.target_names() {
        if name != acting {
            others.push(gc::Other {
                name: name.to_string(),
                target: session.connected(name).await.map_err(Into::into),
            });
        }
    }
    others
}

/// One view's read through the session's connections.
pub fn read(
    session: Arc<Session>,
    request: ViewRequest,
) -> BoxFuture<Result<ViewData, SourceError>> {
    Box::pin(async move {
        match request {
            ViewRequest::Gc {
                keep_newest,
                grace_ms,
                target,
            } => {
                let rules = gc::GcRules {
                    keep_newest,
                    grace_ms,
                };
                let name = session.target_name(target.as_deref()).to_string();
                let target = session.connected(&name).await?;
                let daemon = session.lazy_daemon().await;
                let db = session.db_handle().await?;
                let others = others(&session, &name).await;
                let targets = gc::GcTargets {
                    acting: target.as_ref(),
                    others: &others,
                };
                let report = gc::plan(&session.mesh, &rules, &daemon, targets, &db).await?;
                Ok(ViewData::Gc(Box::new(report)))
            }
            ViewRequest::Environments => {
                let daemon = session.lazy_daemon().await;
                let db = session.db_handle().await?;
                let mut reads = Vec::new();
                for name in session.mesh.target_names() {
                    let connected = session.connected(name).await;
                    let target = match &connected {
                        Ok(target) => Ok(target.as_ref()),
                        Err(error) => Err(error as &(dyn std::error::Error + Send + Sync)),
                    };
                    reads.push(environments::read(&session.mesh, name, target, &daemon, &db).await);
                }
                let grid = crate::mesh::environments::grid(&session.mesh, &reads);
                Ok(ViewData::Environments(Box::new(grid)))
            }
            ViewRequest::Timeline { operation_id } => {
                let mesh = session.mesh.name.clone();
                session
                    .db(move |db| {
                        let db = locked(db)?;
                        let timeline = match db.timeline(&operation_id)? {
                            Some(kept) => kept,
                            // Still running, or ended before timelines were kept.
                            None => Timeline::from_events(&db.operation_events(&operation_id)?),
                        };
                        let medians = db.median_builds(&mesh)?;
                        Ok(ViewData::Timeline(Box::new(TimelineRead {
                            timeline,
                            medians,
                        })))
                    })
                    .await
            }
            ViewRequest::Stats { since_ms } => {
                let mesh = session.mesh.clone();
                session
                    .db(move |db| {
                        let modules: Vec<String> =
                            mesh.modules.iter().map(|m| m.name.clone()).collect();
                        let stats =
                            locked(db)?.stats(&mesh.name, &modules, since_ms, timefmt::now_ms())?;
                        Ok(ViewData::Stats(Box::new(stats)))
                    })
                    .await
            }
        }
    })
}
