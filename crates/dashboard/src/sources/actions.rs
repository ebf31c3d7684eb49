//! Work done on demand: pages of build history, and the actions that change something (converge,
//! force, send), run through the same engine and orchestration as the commands.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::app::msg::{ActionRequest, LogRequest, PageRequest, ProvenanceAsk, SourceError};
use crate::app::views::{ViewData, ViewRequest};
use crate::backends::state::{BuildQuery, locked};
use crate::converge::engine::{self, ConvergeRequest};
use crate::converge::targets::Connected;
use crate::converge::{gc, promote, rollback, send};
use crate::mesh::builds::BuildRow;
use crate::mesh::gc::Candidate;
use crate::mesh::logs::LogItem;
use crate::mesh::model::RecordEntry;
use crate::mesh::progress::Progress;
use crate::mesh::provenance::ReadProvenance;

use super::poll::{BoxFuture, OnDemand};
use super::session::Session;

pub(crate) struct Actions {
    pub session: Arc<Session>,
}

impl OnDemand for Actions {
    fn builds_page(&self, request: PageRequest) -> BoxFuture<Result<Vec<BuildRow>, SourceError>> {
        let session = self.session.clone();
        let query = BuildQuery {
            mesh: session.mesh.name.clone(),
            module: request.module,
            failed_only: false,
            limit: request.limit,
            before: request.before,
        };
        Box::pin(async move { session.db(move |db| Ok(locked(db)?.builds(&query)?)).await })
    }

    fn start(
        &self,
        request: ActionRequest,
        target: Option<String>,
        progress: mpsc::UnboundedSender<Progress>,
        cancel: tokio::sync::watch::Receiver<bool>,
    ) -> BoxFuture<Result<String, SourceError>> {
        Box::pin(run(self.session.clone(), request, target, progress, cancel))
    }

    fn view(&self, request: ViewRequest) -> BoxFuture<Result<ViewData, SourceError>> {
        super::views::read(self.session.clone(), request)
    }

    fn logs(
        &self,
        request: LogRequest,
        out: Vec<mpsc::Sender<LogItem>>,
    ) -> BoxFuture<Vec<(String, String)>> {
        Box::pin(super::logs::read(self.session.clone(), request, out))
    }

    fn provenance(
        &self,
        ask: ProvenanceAsk,
    ) -> BoxFuture<Result<Option<ReadProvenance>, SourceError>> {
        super::provenance::read(self.session.clone(), ask)
    }
}

/// A report's headline: Ok when the action fully succeeded, else `Unfinished`.
fn headline(ok: bool, headline: String) -> Result<String, SourceError> {
    if ok {
        Ok(headline)
    } else {
        Err(SourceError::Unfinished(headline))
    }
}

/// Run one action to its end; its progress goes to `progress` as it comes; `cancel` stops a
/// converge (sends and roll-backs run to their end). Ok is a one-line summary.
pub async fn run(
    session: Arc<Session>,
    request: ActionRequest,
    target: Option<String>,
    progress: mpsc::UnboundedSender<Progress>,
    cancel: tokio::sync::watch::Receiver<bool>,
) -> Result<String, SourceError> {
    let name = session.target_name(target.as_deref()).to_string();
    let target = session.connected(&name).await?;
    let daemon = session.lazy_daemon().await;
    let mesh = session.mesh_on(&name);
    match request {
        ActionRequest::Converge { modules, force } => {
            let request = ConvergeRequest {
                mesh: (*mesh).clone(),
                state_path: session.state_path.clone(),
                force,
                jobs: engine::default_jobs(),
                modules: modules.map(|names| names.into_iter().collect()),
                wait: false,
                target,
            };
            // Quitting the dashboard (after its question) cancels a converge started here.
            let summary = engine::converge(request, daemon, Some(progress), cancel).await?;
            headline(summary.ok, summary.headline())
        }
        ActionRequest::UpdateUpstreams { images, modules } => {
            let update = crate::converge::plan::update_lock(&mesh, &images, &daemon).await?;
            let request = ConvergeRequest {
                mesh: (*mesh).clone(),
                state_path: session.state_path.clone(),
                force: false,
                jobs: engine::default_jobs(),
                modules: Some(modules.into_iter().collect()),
                wait: false,
                target,
            };
            let summary = engine::converge(request, daemon, Some(progress), cancel).await?;
            let moved = update.moved.len();
            headline(
                summary.ok,
                format!(
                    "mesh.lock: {moved} upstream(s) moved; {}",
                    summary.headline()
                ),
            )
        }
        ActionRequest::Rollback { module, from } => {
            let db = session.db_handle().await?;
            let plan =
                rollback::prepare(&mesh, &module, None, &daemon, target.as_ref(), &db).await?;
            if plan.from != from {
                return Err(SourceError::RollbackMoved { module });
            }
            let report =
                rollback::rollback(&mesh, &plan, &daemon, target.as_ref(), &db, Some(progress))
                    .await?;
            headline(report.ok(), report.headline())
        }
        ActionRequest::Gc {
            keep_newest,
            grace_ms,
            confirmed,
        } => {
            let rules = gc::GcRules {
                keep_newest,
                grace_ms,
            };
            let on = GcOn {
                session: &session,
                name: &name,
                target: &target,
                daemon: &daemon,
            };
            gc_confirmed(on, &rules, &confirmed, progress).await
        }
        ActionRequest::Promote {
            module,
            from,
            to,
            artifact,
            current,
        } => {
            let confirmed = Confirmed {
                module,
                from,
                to,
                artifact,
                current,
            };
            promote_confirmed(&session, confirmed, &daemon, progress).await
        }
        ActionRequest::Send { module, moves } => {
            let db = session.db_handle().await?;
            let report = send::send_confirmed(
                &mesh,
                &module,
                &moves,
                &daemon,
                target.as_ref(),
                &db,
                Some(progress),
            )
            .await?;
            headline(report.ok(), report.headline())
        }
    }
}

/// Where a gc from the dashboard runs: the session, its acting target (by name and connected)
/// and the daemon.
struct GcOn<'a> {
    session: &'a Arc<Session>,
    name: &'a str,
    target: &'a Connected,
    daemon: &'a Arc<crate::backends::daemon::LazyDaemon>,
}

/// A gc the person confirmed: only the candidates shown are taken; the other targets' records
/// and pins are read too, so that nothing they name goes.
async fn gc_confirmed(
    on: GcOn<'_>,
    rules: &gc::GcRules,
    confirmed: &[Candidate],
    progress: mpsc::UnboundedSender<Progress>,
) -> Result<String, SourceError> {
    let db = on.session.db_handle().await?;
    let others = super::views::others(on.session, on.name).await;
    let report = gc::sweep(
        &on.session.mesh,
        rules,
        Some(confirmed),
        on.daemon,
        gc::GcTargets {
            acting: on.target.as_ref(),
            others: &others,
        },
        &db,
        Some(progress),
    )
    .await
    .map_err(|e| SourceError::TookNothing(Arc::new(e)))?;
    let taken = report.candidates.iter().filter(|c| c.taken()).count();
    let failed = report.candidates.len() - taken;
    let text = format!(
        "took {taken} of {} confirmed, {} bytes freed{}",
        confirmed.len(),
        report.bytes_freed,
        if failed > 0 {
            format!("; {failed} not taken (see `meshtop gc --dry-run`)")
        } else {
            String::new()
        }
    );
    headline(failed == 0, text)
}

/// What the person confirmed of a promote: `module`'s `artifact` from target `from` into target
/// `to`, over what `to` named then (`current`).
struct Confirmed {
    module: String,
    from: String,
    to: String,
    artifact: RecordEntry,
    current: Option<RecordEntry>,
}

/// A promote the person confirmed: exactly the artifact shown, over what the to-target named then.
async fn promote_confirmed(
    session: &Session,
    confirmed: Confirmed,
    daemon: &Arc<crate::backends::daemon::LazyDaemon>,
    progress: mpsc::UnboundedSender<Progress>,
) -> Result<String, SourceError> {
    let Confirmed {
        module,
        from,
        to,
        artifact,
        current,
    } = confirmed;
    let db = session.db_handle().await?;
    let (from_target, to_target) = (
        session.connected(&from).await?,
        session.connected(&to).await?,
    );
    let promotion = promote::Promotion {
        mesh: &session.mesh,
        from: from_target.as_ref(),
        to: to_target.as_ref(),
    };
    let plan = promote::prepare(&promotion, std::slice::from_ref(&module), daemon, &db).await?;
    let planned = plan.modules.first();
    if planned.is_none_or(|m| m.artifact != artifact || m.current != current) {
        return Err(SourceError::PromoteMoved { module, from, to });
    }
    let report = promote::promote(&promotion, &plan, daemon, &db, Some(progress)).await?;
    headline(report.ok(), report.headline())
}
