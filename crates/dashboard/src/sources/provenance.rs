//! The signed provenance of running artifacts this machine has no build row of (BUILT BY and the
//! machine's detail): read through the same checks as `meshtop status`
//! (`vouch::running_provenance`: envelopes signed by a trusted key, whose subject is the artifact
//! the record names), a few at once (as many as the registry voucher asks at once, across every
//! batch), each answer sent to the app as it comes.

use std::sync::Arc;

use futures_util::StreamExt;
use tokio::sync::{Semaphore, mpsc};

use crate::app::msg::{Msg, ProvenanceAsk, SourceError};
use crate::converge::vouch;
use crate::mesh::provenance::ReadProvenance;
use crate::timefmt;

use super::poll::{BoxFuture, OnDemand};
use super::session::Session;

/// Reads in flight at once, across every batch: the registry voucher's bound.
pub(crate) const READS_AT_ONCE: usize = vouch::QUESTIONS_AT_ONCE;

/// The reader: its bound is shared by every batch it is given.
pub(crate) struct ProvenanceReader {
    gate: Arc<Semaphore>,
}

impl Default for ProvenanceReader {
    fn default() -> Self {
        ProvenanceReader {
            gate: Arc::new(Semaphore::new(READS_AT_ONCE)),
        }
    }
}

impl ProvenanceReader {
    /// Read each ask's provenance, at most [`READS_AT_ONCE`] at once, each answer sent to the app
    /// as [`Msg::ProvenanceRead`] when it comes.
    pub(crate) fn fetch(
        &self,
        backend: &Arc<dyn OnDemand>,
        asks: Vec<ProvenanceAsk>,
        tx: mpsc::UnboundedSender<Msg>,
    ) {
        let backend = backend.clone();
        let gate = self.gate.clone();
        tokio::spawn(async move {
            futures_util::stream::iter(asks)
                .for_each_concurrent(READS_AT_ONCE, |ask| {
                    let (backend, gate, tx) = (backend.clone(), gate.clone(), tx.clone());
                    async move {
                        let Ok(_permit) = gate.acquire_owned().await else {
                            return;
                        };
                        let digest = ask.digest.clone();
                        let result = backend.provenance(ask).await;
                        let _ = tx.send(Msg::ProvenanceRead {
                            digest,
                            at_ms: timefmt::now_ms(),
                            result,
                        });
                    }
                })
                .await;
        });
    }
}

/// One artifact's provenance through the session's mesh: what `meshtop status` reads for it.
pub(crate) fn read(
    session: Arc<Session>,
    ask: ProvenanceAsk,
) -> BoxFuture<Result<Option<ReadProvenance>, SourceError>> {
    Box::pin(async move {
        let found = vouch::running_provenance(&session.mesh, ask.recorded, &ask.image, &ask.digest)
            .await
            .map_err(SourceError::failed)?;
        Ok(found.and_then(|f| f.provenances.into_iter().next()))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::app::msg::{ActionRequest, LogRequest, PageRequest};
    use crate::app::views::{ViewData, ViewRequest};
    use crate::mesh::builds::BuildRow;
    use crate::mesh::logs::LogItem;
    use crate::mesh::progress::Progress;

    use super::*;

    /// Provenance reads that wait for the test to let them end, counting how many are in flight.
    struct Gated {
        in_flight: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        gate: Arc<Semaphore>,
    }

    impl OnDemand for Gated {
        fn builds_page(&self, _: PageRequest) -> BoxFuture<Result<Vec<BuildRow>, SourceError>> {
            unimplemented!("not asked")
        }
        fn start(
            &self,
            _: ActionRequest,
            _: Option<String>,
            _: mpsc::UnboundedSender<Progress>,
            _: tokio::sync::watch::Receiver<bool>,
        ) -> BoxFuture<Result<String, SourceError>> {
            unimplemented!("not asked")
        }
        fn view(&self, _: ViewRequest) -> BoxFuture<Result<ViewData, SourceError>> {
            unimplemented!("not asked")
        }
        fn logs(
            &self,
            _: LogRequest,
            _: Vec<mpsc::Sender<LogItem>>,
        ) -> BoxFuture<Vec<(String, String)>> {
            unimplemented!("not asked")
        }
        fn provenance(
            &self,
            _: ProvenanceAsk,
        ) -> BoxFuture<Result<Option<ReadProvenance>, SourceError>> {
            let (in_flight, most, gate) =
                (self.in_flight.clone(), self.most.clone(), self.gate.clone());
            Box::pin(async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                gate.acquire().await.unwrap().forget();
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(None)
            })
        }
    }

    fn asks(from: usize, count: usize) -> Vec<ProvenanceAsk> {
        (from..from + count)
            .map(|n| ProvenanceAsk {
                digest: format!("sha256:{n:064}"),
                image: "demo/api:tag".into(),
                recorded: None,
            })
            .collect()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reads_are_bounded_across_batches_and_each_answer_is_sent() {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(Semaphore::new(0));
        let backend: Arc<dyn OnDemand> = Arc::new(Gated {
            in_flight: in_flight.clone(),
            most: most.clone(),
            gate: gate.clone(),
        });
        let reader = ProvenanceReader::default();
        let (tx, mut rx) = mpsc::unbounded_channel();
        // Two batches of 12: 24 reads asked, never more than the bound at once.
        reader.fetch(&backend, asks(0, 12), tx.clone());
        reader.fetch(&backend, asks(12, 12), tx);
        // Every wait ends with a message naming what never happened, never a hang.
        let limit = std::time::Duration::from_secs(10);
        let deadline = tokio::time::Instant::now() + limit;
        while in_flight.load(Ordering::SeqCst) < READS_AT_ONCE {
            assert!(
                tokio::time::Instant::now() < deadline,
                "only {} of {READS_AT_ONCE} reads were ever in flight at once within {limit:?}",
                in_flight.load(Ordering::SeqCst)
            );
            tokio::task::yield_now().await;
        }
        let mut answered = std::collections::BTreeSet::new();
        while answered.len() < 24 {
            gate.add_permits(1);
            let answer = tokio::time::timeout(limit, rx.recv())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "answer {} of 24 never came within {limit:?} of its read's permit",
                        answered.len() + 1
                    )
                })
                .expect("the reader's sender stays open until every answer is sent");
            match answer {
                Msg::ProvenanceRead {
                    digest,
                    result: Ok(None),
                    ..
                } => assert!(answered.insert(digest)),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(most.load(Ordering::SeqCst), READS_AT_ONCE);
        assert_eq!(READS_AT_ONCE, vouch::QUESTIONS_AT_ONCE);
    }
}
