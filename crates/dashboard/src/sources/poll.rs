//! The pollers: one task per source, each on its own interval, never two polls of one source in
//! flight. Results arrive at the app as [`Msg::Polled`]. Sources are reached through [`Source`]
//! and the on-demand work through [`OnDemand`], so tests can feed fixed answers.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::mesh::builds::BuildRow;
use crate::mesh::logs::LogItem;
use crate::mesh::progress::Progress;
use crate::mesh::provenance::ReadProvenance;
use crate::timefmt;

use crate::app::msg::{
    ActionRequest, LogRequest, Msg, PageRequest, PollParams, ProvenanceAsk, SourceData,
    SourceError, SourceId,
};
use crate::app::views::{ViewData, ViewRequest};

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// One thing the dashboard polls.
pub trait Source: Send + Sync + 'static {
    fn id(&self) -> SourceId;
    /// How long between two polls.
    fn interval(&self) -> Duration;
    /// One poll. An error is a value: it is shown with the age of the last good answer.
    fn poll(&self, params: PollParams) -> BoxFuture<Result<SourceData, SourceError>>;
}

/// Work done on demand: pages of history, and the actions that change something.
pub trait OnDemand: Send + Sync + 'static {
    fn builds_page(&self, request: PageRequest) -> BoxFuture<Result<Vec<BuildRow>, SourceError>>;
    /// Run an action to its end, on `target` (the one the main view shows; None: the mesh's
    /// first) unless the request names its own; its progress goes to `progress`; `cancel` turning
    /// true asks it to stop (a converge stops its builds and marks them cancelled). Ok is a
    /// one-line summary; an action that ran without fully succeeding is `SourceError::Unfinished`.
    fn start(
        &self,
        request: ActionRequest,
        target: Option<String>,
        progress: mpsc::UnboundedSender<Progress>,
        cancel: watch::Receiver<bool>,
    ) -> BoxFuture<Result<String, SourceError>>;
    /// Read what a view shows (the gc dry run, the stats).
    fn view(&self, request: ViewRequest) -> BoxFuture<Result<ViewData, SourceError>>;
    /// Stream what the request's machines say, each machine into its own channel of `out` (in
    /// the request's machine order), every machine at once, until the reads end (a follow: until
    /// its channel closes). The machines that could not be read, and why.
    fn logs(
        &self,
        request: LogRequest,
        out: Vec<mpsc::Sender<LogItem>>,
    ) -> BoxFuture<Vec<(String, String)>>;
    /// What the signed provenance of a running artifact says (None: no provenance a trusted key
    /// signed for that artifact).
    fn provenance(
        &self,
        ask: ProvenanceAsk,
    ) -> BoxFuture<Result<Option<ReadProvenance>, SourceError>>;
}

/// The running pollers; dropping them stops every task.
pub struct Pollers {
    notify: HashMap<SourceId, Arc<Notify>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Pollers {
    /// Start one task per source. `params` tells them what the app currently shows.
    pub fn spawn(
        sources: Vec<Arc<dyn Source>>,
        tx: mpsc::UnboundedSender<Msg>,
        params: watch::Receiver<PollParams>,
        clock: fn() -> i64,
    ) -> Pollers {
        let mut notify = HashMap::new();
        let mut tasks = Vec::new();
        for source in sources {
            let now = Arc::new(Notify::new());
            notify.insert(source.id(), now.clone());
            tasks.push(tokio::spawn(poll_forever(
                source,
                tx.clone(),
                params.clone(),
                now,
                clock,
            )));
        }
        Pollers { notify, tasks }
    }

    /// Ask these sources for a poll now (one that is in flight is followed by one more, never doubled).
    pub fn poll_now(&self, ids: &[SourceId]) {
        for id in ids {
            if let Some(notify) = self.notify.get(id) {
                notify.notify_one();
            }
        }
    }
}

impl Drop for Pollers {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn poll_forever(
    source: Arc<dyn Source>,
    tx: mpsc::UnboundedSender<Msg>,
    params: watch::Receiver<PollParams>,
    now: Arc<Notify>,
    clock: fn() -> i64,
) {
    let mut ticker = tokio::time::interval(source.interval());
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = now.notified() => ticker.reset(),
        }
        let asked = params.borrow().clone();
        let target = asked.target.clone();
        // The poll is awaited here: this source never has two polls in flight.
        let result = source.poll(asked).await;
        let msg = Msg::Polled {
            source: source.id(),
            at_ms: clock(),
            target,
            result,
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
}

/// A source answering from a closure (tests, and sources not wired yet).
pub struct FnSource<F> {
    pub id: SourceId,
    pub interval: Duration,
    pub answer: F,
}

impl<F> Source for FnSource<F>
where
    F: Fn(&PollParams) -> Result<SourceData, SourceError> + Send + Sync + 'static,
{
    fn id(&self) -> SourceId {
        self.id
    }

    fn interval(&self) -> Duration {
        self.interval
    }

    fn poll(&self, params: PollParams) -> BoxFuture<Result<SourceData, SourceError>> {
        let answer = (self.answer)(&params);
        Box::pin(async move { answer })
    }
}

/// Run an on-demand fetch and hand its result to the app.
pub(crate) fn fetch_builds(
    backend: &Arc<dyn OnDemand>,
    request: PageRequest,
    tx: mpsc::UnboundedSender<Msg>,
) {
    let work = backend.builds_page(request.clone());
    tokio::spawn(async move {
        let result = work.await;
        let _ = tx.send(Msg::BuildsPage {
            request,
            at_ms: timefmt::now_ms(),
            result,
        });
    });
}

/// Run an action to its end, forwarding its progress steps and its outcome to the app. Sending true
/// on the returned sender asks the action to stop.
pub(crate) fn start_action(
    backend: &Arc<dyn OnDemand>,
    request: ActionRequest,
    target: Option<String>,
    tx: mpsc::UnboundedSender<Msg>,
) -> watch::Sender<bool> {
    let label = request.label();
    let (progress_tx, mut progress_rx) = mpsc::unbounded_channel::<Progress>();
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let work = backend.start(request, target, progress_tx, cancel_rx);
    let forward = tx.clone();
    tokio::spawn(async move {
        while let Some(step) = progress_rx.recv().await {
            if forward.send(Msg::ActionProgress(step)).is_err() {
                return;
            }
        }
    });
    tokio::spawn(async move {
        let result = work.await;
        let _ = tx.send(Msg::ActionDone {
            at_ms: timefmt::now_ms(),
            label,
            result,
        });
    });
    cancel_tx
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::sync::Semaphore;

    use super::*;

    /// A source whose polls wait for the test to let them finish.
    struct Gated {
        in_flight: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        started: mpsc::UnboundedSender<()>,
        gate: Arc<Semaphore>,
    }

    impl Source for Gated {
        fn id(&self) -> SourceId {
            SourceId::Record
        }
        fn interval(&self) -> Duration {
            Duration::from_secs(3600)
        }
        fn poll(&self, _params: PollParams) -> BoxFuture<Result<SourceData, SourceError>> {
            let (in_flight, most, started, gate) = (
                self.in_flight.clone(),
                self.most.clone(),
                self.started.clone(),
                self.gate.clone(),
            );
            Box::pin(async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                started.send(()).unwrap();
                gate.acquire().await.unwrap().forget();
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Err(SourceError::NoRegistry)
            })
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn never_two_polls_of_one_source_in_flight() {
        let most = Arc::new(AtomicUsize::new(0));
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let gate = Arc::new(Semaphore::new(0));
        let source: Arc<dyn Source> = Arc::new(Gated {
            in_flight: Arc::new(AtomicUsize::new(0)),
            most: most.clone(),
            started: started_tx,
            gate: gate.clone(),
        });
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (_params_tx, params_rx) = watch::channel(PollParams::default());
        let pollers = Pollers::spawn(vec![source], tx, params_rx, || 7);
        started.recv().await.unwrap(); // the first poll is in flight
        for _ in 0..20 {
            pollers.poll_now(&[SourceId::Record]); // twenty asks while it runs…
        }
        gate.add_permits(1);
        let first = rx.recv().await.unwrap();
        assert!(matches!(
            first,
            Msg::Polled {
                source: SourceId::Record,
                at_ms: 7,
                result: Err(SourceError::NoRegistry),
                ..
            }
        ));
        started.recv().await.unwrap(); // …make exactly one more poll, after the first ended
        gate.add_permits(1);
        rx.recv().await.unwrap();
        assert_eq!(
            most.load(Ordering::SeqCst),
            1,
            "two polls of one source were in flight"
        );
        assert!(started.try_recv().is_err());
    }
}
