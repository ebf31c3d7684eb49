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
pub const READS_AT_ONCE: usize = vouch::QUESTIONS_AT_ONCE;

/// The reader: its bound is shared by every batch it is given.
pub struct ProvenanceReader {
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
    pub fn fetch(
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
pub fn read(
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
