//! The engine's and the backends' errors, as they reach the app: each kept whole in a
//! [`SourceError`] (never flattened to text here), so that a source or an action says `?`.

use std::sync::Arc;

use crate::app::msg::SourceError;
use crate::backends::credentials::CredentialsError;
use crate::backends::daemon::DaemonError;
use crate::backends::registry::RegistryError;
use crate::backends::state::{Poisoned, StateError};
use crate::converge::engine::ConvergeError;
use crate::converge::error::{GcError, PlanError, RollbackError, SendError, TargetError};
use crate::converge::promote::PromoteError;

/// `impl From<E> for SourceError` for each error the sources meet: kept whole as `Failed`.
macro_rules! kept_whole {
    ($($error:ty),* $(,)?) => {
        $(
            impl From<$error> for SourceError {
                fn from(error: $error) -> SourceError {
                    SourceError::failed(error)
                }
            }
        )*
    };
}

kept_whole!(
    TargetError,
    DaemonError,
    RegistryError,
    CredentialsError,
    StateError,
    Poisoned,
    ConvergeError,
    PlanError,
    RollbackError,
    SendError,
    GcError,
    PromoteError,
);

/// The host daemon's connection error, shared by every caller of one lazy connection.
impl From<Arc<DaemonError>> for SourceError {
    fn from(error: Arc<DaemonError>) -> SourceError {
        SourceError::Failed(error)
    }
}

/// The blocking task doing `doing` (`opening`, `reading`) on the state database stopped.
pub(crate) fn stopped(doing: &'static str) -> impl FnOnce(tokio::task::JoinError) -> SourceError {
    move |error| SourceError::Stopped {
        doing,
        source: Arc::new(error),
    }
}
