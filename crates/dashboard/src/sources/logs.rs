//! The logs view's source: what machines say, through the target's `logs` (the reads `meshtop
//! logs` makes), sent to the app in batches — one message per [`BATCH_EVERY`] at most — so a
//! chatty machine never floods the loop or the screen. Dropping the task stops every stream.

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
pub(crate) const BATCH_EVERY: Duration = Duration::from_millis(100);
/// How many items of one machine wait for the next batch (its reader waits when it is full).
const WAITING: usize = 2_048;

/// Start the streams of `request`; their batches and their end go to the app. Each machine's
/// reader writes into a channel of its own that is drained every [`BATCH_EVERY`]: nobody waits on
/// a channel, so a line costs the reader no wake-up of another task.
pub(crate) fn follow(
    backend: &Arc<dyn OnDemand>,
    request: LogRequest,
    tx: mpsc::UnboundedSender<Msg>,
) -> JoinHandle<()> {
    let stream = request.stream;
    let (senders, mut receivers): (Vec<_>, Vec<_>) = request
        .machines
        .iter()
        .map(|m| {
            let (out, rx) = mpsc::channel::<LogItem>(WAITING);
            (out, (m.name.clone(), rx))
        })
        .unzip();
    let work = backend.logs(request, senders);
    tokio::spawn(async move {
        let batches = async {
            loop {
                tokio::time::sleep(BATCH_EVERY).await;
                let mut items = Vec::new();
                let mut open = false;
                for (machine, rx) in &mut receivers {
                    loop {
                        match rx.try_recv() {
                            Ok(item) => items.push((machine.clone(), item)),
                            Err(mpsc::error::TryRecvError::Empty) => {
                                open = true;
                                break;
                            }
                            Err(mpsc::error::TryRecvError::Disconnected) => break,
                        }
                    }
                }
                if !items.is_empty() && tx.send(Msg::LogLines { stream, items }).is_err() {
                    return;
                }
                if !open {
                    return;
                }
            }
        };
        let (failures, ()) = tokio::join!(work, batches);
        let _ = tx.send(Msg::LogsEnded { stream, failures });
    })
}

/// Read every machine of `request` at once through the session's target, each into its own
/// channel (`out`, in the request's machine order); the machines that could not be read, and why.
pub(crate) async fn read(
    session: Arc<Session>,
    request: LogRequest,
    out: Vec<mpsc::Sender<LogItem>>,
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
    let (name, target, daemon, ask, mesh) = (&name, &target, &daemon, &request.ask, &session.mesh);
    let reads = request
        .machines
        .iter()
        .zip(out)
        .map(|(machine, tx)| async move {
            target
                .logs(mesh, machine, ask, daemon, tx)
                .await
                .err()
                .map(|e| (machine.name.clone(), format!("target {name}: {e}")))
        });
    join_all(reads).await.into_iter().flatten().collect()
}
