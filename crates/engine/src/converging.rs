//! One converge's context: what every stage of it reaches — the walk, the placer, each build on
//! its builder, the hand-over, each delivery. Made once when the converge starts and handed down
//! whole (it is `Copy`: five references), so that no stage copies the same references into a
//! struct of its own.

use std::sync::{Arc, Mutex};

use crate::backends::daemon::LazyDaemon;
use crate::backends::state::StateDb;
use crate::mesh::model::Mesh;
use crate::progress::Emitter;
use crate::targets::{Reach, Target};

/// The mesh, its target, the host daemon, the state database and the operation's progress.
#[derive(Clone, Copy)]
pub(crate) struct Converging<'a> {
    pub(crate) mesh: &'a Mesh,
    pub(crate) target: &'a dyn Target,
    /// The daemon on this machine (a builder of the pool when the mesh has one).
    pub(crate) host: &'a Arc<LazyDaemon>,
    pub(crate) db: &'a Arc<Mutex<StateDb>>,
    pub(crate) emitter: &'a Emitter,
}

impl<'a> Converging<'a> {
    /// What a call on the target reaches: the host daemon and the state database.
    pub(crate) fn reach(&self) -> Reach<'a> {
        Reach {
            daemon: self.host,
            db: self.db,
        }
    }
}
