//! The logs view's source: what machines say, through the target's `logs` (the reads `meshtop
//! logs` makes), sent to the app in small batches — at most one message per [`BATCH_EVERY`] — so
//! a chatty machine never floods the loop or the screen. Dropping the task stops every stream.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::app::msg::{LogRequest, Msg};
use crate::mesh::logs::LogItem;

use super::poll::OnDemand;
use super::session::Session;

/// How long a batch gathers lines before it goes to the app.
pub const BATCH_EVERY: Duration = Duration::from_millis(100);
/// A batch goes sooner when it holds this many.
pub const BATCH_MOST: usize = 2_000;
/// How many items wait between the readers and the batcher (a reader waits when it is full).
const WAITING: usize = 1_024;

/// Start the streams of `request`; their batches and their end go to the app.
pub fn follow(
    backend: &Arc<dyn OnDemand>,
    request: LogRequest,
    tx: mpsc::UnboundedSender<Msg>,
) -> JoinHandle<()> {
    let stream = request.stream;
    let (out, mut rx) = mpsc::channel::<(String, LogItem)>(WAITING);
    let work = backend.logs(request, out);
    tokio::spawn(async move {
        let batches = async {
            while let Some(first) = rx.recv().await {
                let mut items = vec![first];
                let mut gather = Box::pin(tokio::time::sleep(BATCH_EVERY));
                while items.len() < BATCH_MOST {
                    tokio::select! {
                        () = &mut gather => break,
                        next = rx.recv() => match next {
                            Some(item) => items.push(item),
                            None => break,
                        },
                    }
                }
                if tx.send(Msg::LogLines { stream, items }).is_err() {
                    return;
                }
            }
        };
        let (failures, ()) = tokio::join!(work, batches);
        let _ = tx.send(Msg::LogsEnded { stream, failures });
    })
}

/// Read every machine of `request` at once through the session's target, each item tagged with
/// its machine; the machines that could not be read, and why.
pub async fn read(
    session: Arc<Session>,
    request: LogRequest,
    out: mpsc::Sender<(String, LogItem)>,
) -> Vec<(String, String)> {
    let name = session.target_name(request.target.as_deref()).to_string();
    let target = match session.connected(&name).await {
        Ok(target) => target,
        Err(error) => {
            return request
                .machines
                .iter()
                .map(|m| (m.name.clone(), format!("target {name}: {error}")))
                .collect();
        }
    };
    let daemon = session.lazy_daemon().await;
    let name = &name;
    let reads = request.machines.iter().map(|machine| {
        let (tx, mut rx) = mpsc::channel(WAITING);
        let out = out.clone();
        let (target, daemon, session, ask) = (&target, &daemon, &session, &request.ask);
        async move {
            let forward = async {
                while let Some(item) = rx.recv().await {
                    if out.send((machine.name.clone(), item)).await.is_err() {
                        break;
                    }
                }
            };
            let (read, ()) = tokio::join!(target.logs(&session.mesh, machine, ask, daemon, tx), forward);
            read.err()
                .map(|e| (machine.name.clone(), format!("target {name}: {e}")))
        }
    });
    join_all(reads).await.into_iter().flatten().collect()
}
