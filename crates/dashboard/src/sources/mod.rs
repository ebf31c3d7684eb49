//! What the dashboard polls and the actions it runs: one file per source, sharing one connection
//! per outside system ([`session::Session`]), and the action runner. Results go to the app as
//! messages; nothing here knows the screen.

pub mod actions;
pub(crate) mod error;
pub(crate) mod host;
pub(crate) mod logs;
pub(crate) mod machines;
pub(crate) mod plan;
pub(crate) mod poll;
pub(crate) mod provenance;
pub(crate) mod record;
pub(crate) mod registry;
pub(crate) mod session;
pub(crate) mod state;
pub(crate) mod upstreams;
pub mod views;

use std::sync::Arc;
use std::time::Duration;

use crate::app::msg::{PollParams, SourceData, SourceError, SourceId};

/// Where the command line points the targets, carried to the session unread (the seam reads it).
pub use crate::converge::targets::Overrides;
pub use poll::{BoxFuture, FnSource, OnDemand, Pollers, Source};
pub use session::Session;

type PollFn = fn(Arc<Session>, PollParams) -> BoxFuture<Result<SourceData, SourceError>>;

/// A source polled through the session: which it is, how often, and its poll.
pub(crate) struct SessionSource {
    pub id: SourceId,
    pub interval: Duration,
    pub session: Arc<Session>,
    pub poll: PollFn,
}

impl Source for SessionSource {
    fn id(&self) -> SourceId {
        self.id
    }
    fn interval(&self) -> Duration {
        self.interval
    }
    fn poll(&self, params: PollParams) -> BoxFuture<Result<SourceData, SourceError>> {
        (self.poll)(self.session.clone(), params)
    }
}

/// Every source of the session's mesh (the registry only when the mesh names one), each on its
/// own interval.
pub fn all(session: &Arc<Session>) -> Vec<Arc<dyn Source>> {
    let secs = Duration::from_secs;
    let mut polls: Vec<(SourceId, Duration, PollFn)> = vec![
        // A safety net: saves are seen by the context watcher (see tui.rs) within a second.
        (SourceId::Plan, secs(60), plan::poll),
        (SourceId::Record, secs(3), record::poll),
        (SourceId::Host, secs(5), host::poll),
        (SourceId::State, secs(2), state::poll),
        (SourceId::Machines, secs(5), machines::poll),
        // Registries outside this machine: asked every ten minutes (and on `r`), never on a key.
        (SourceId::Upstreams, secs(600), upstreams::poll),
    ];
    if session.mesh.registry.is_some() {
        polls.push((SourceId::Registry, secs(10), registry::poll));
    }
    polls
        .into_iter()
        .map(|(id, interval, poll)| {
            Arc::new(SessionSource {
                id,
                interval,
                session: session.clone(),
                poll,
            }) as Arc<dyn Source>
        })
        .collect()
}
