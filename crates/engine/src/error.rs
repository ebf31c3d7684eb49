//! How the engine fails, and the one check every changing step makes first (does this operation
//! still hold the mesh?). At the bottom of the room: every other file of `converge/` may use it, it
//! uses none of them.

use std::sync::{Arc, Mutex};

use crate::backends::credentials::CredentialsError;
use crate::backends::daemon::DaemonError;
use crate::backends::registry::RegistryError;
use crate::backends::state::{Holder, Poisoned, StateDb, StateError};
use crate::timefmt;

#[derive(Debug, thiserror::Error)]
pub enum ConvergeError {
    /// Another operation holds the mesh; `by` names it as a person says it (`send #12 (<uuid>)`).
    #[error("mesh {mesh} is held by {by} (host {}, process {}, since {}): wait for it, or pass --wait", .holder.host, .holder.pid, timefmt::local_time(.holder.since_ms))]
    Busy {
        mesh: String,
        by: String,
        holder: Holder,
    },
    #[error("meshtop refuses to build: there is nowhere to record builds ({0})")]
    NoRecord(#[source] Unrecordable),
    #[error("refused before any build: {0}")]
    Refused(String),
    #[error("converge cancelled: running builds were marked cancelled, nothing was stamped")]
    Cancelled,
    /// Another operation took the mesh over (this one was frozen past the stale limit): nothing more
    /// is stamped or sent; it names who took it.
    #[error(transparent)]
    LockLost(HoldLost),
    #[error("{0}")]
    Failed(String),
    /// Bad input found when the converge starts (its builders need a registry the mesh does not
    /// name): refused before anything ran; a command exits 2.
    #[error("{0}")]
    BadInput(String),
    /// A build ended but its end could not be written (a full disk): its row is marked `stopped`
    /// if it can be, else the next open of the state closes it so.
    #[error("{0}")]
    Unrecorded(String),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The state database's handle could not be taken.
    #[error(transparent)]
    Handle(#[from] Poisoned),
}

/// Why this operation no longer holds its mesh, as the hold that found it says: the state
/// database's lock, or the target's own hold (its words, typed by the target).
#[derive(Debug, Clone, thiserror::Error)]
pub enum HoldLost {
    #[error(transparent)]
    Lock(Arc<StateError>),
    #[error(transparent)]
    Target(Arc<dyn std::error::Error + Send + Sync>),
}

/// Why builds have nowhere to be recorded: the state database could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub enum Unrecordable {
    #[error(transparent)]
    State(#[from] StateError),
    /// A build's row could not be written when it started.
    #[error("cannot write the build row: {0}")]
    BuildRow(#[source] StateError),
}

/// `LockLost` when this operation no longer holds the mesh's `target` (checked in the state
/// database now).
pub(crate) fn still_holds(
    db: &Mutex<StateDb>,
    mesh: &str,
    target: &str,
    operation_id: &str,
) -> Result<(), ConvergeError> {
    let db = crate::backends::state::locked(db)?;
    db.check_holds(mesh, target, operation_id)
        .map_err(|e| ConvergeError::LockLost(HoldLost::Lock(Arc::new(e))))
}

/// What a target could not do; each says where and, when it can, how to fix it. The words are those
/// the CLI and the screen showed before the seam was typed.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// The host daemon could not be reached (the connection's own error, remembered once and
    /// shared by every caller).
    #[error(transparent)]
    Unreachable(Arc<DaemonError>),
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Docker's credentials for a registry could not be read (remembered once per connection,
    /// shared by every caller).
    #[error(transparent)]
    Credentials(Arc<CredentialsError>),
    /// A pull from the registry, on a mesh that names none.
    #[error("mesh {mesh} names no registry to pull {reference} from")]
    NoRegistry { mesh: String, reference: String },
    #[error(transparent)]
    State(#[from] StateError),
    /// The state database's handle could not be taken.
    #[error(transparent)]
    Handle(#[from] Poisoned),
    /// What only one kind of target can say, in its own error type (under `target/<kind>/`).
    #[error(transparent)]
    Kind(Box<dyn std::error::Error + Send + Sync>),
    /// Bad input that only one kind of target can judge (a context its configuration lacks):
    /// refused before any call; a command exits 2.
    #[error(transparent)]
    KindInput(Box<dyn std::error::Error + Send + Sync>),
    /// A pull by digest gave another image than the artifact the registry's answer named.
    #[error("{pinned} pulled as image {got}, not the artifact {artifact} its config names")]
    PulledOther {
        pinned: String,
        got: String,
        artifact: String,
    },
    /// The host daemon runs its own platform out of a multi-platform artifact (an image index
    /// fetched by its digest), and that index cannot give it.
    #[error("cannot run {reference} on the host daemon out of its image index {index}: {why}")]
    IndexPlatform {
        reference: String,
        index: String,
        why: IndexLack,
    },
    #[error("cannot create declared machine {machine} of module {module}: {source}")]
    CreateMachine {
        machine: String,
        module: String,
        /// Boxed: the daemon's error is large, and every target answer would carry its size.
        source: Box<DaemonError>,
    },
    #[error(
        "mesh {mesh} names no target {name:?} (it names: {names}): add a [target] table to {file}"
    )]
    NoSuchTarget {
        mesh: String,
        name: String,
        names: String,
        file: String,
    },
}

/// Why an image index cannot give the host daemon an image of its platform.
#[derive(Debug, thiserror::Error)]
pub enum IndexLack {
    #[error("registry {registry} holds no manifest under that digest")]
    Absent { registry: String },
    #[error("the manifest under that digest is an image, not an index")]
    NotAnIndex,
    #[error(
        "the index names no image for the daemon's platform {platform} (it names {platforms}): add \"{platform}\" to the module's platforms"
    )]
    NoPlatform { platform: String, platforms: String },
}

/// Why a rollback was refused or stopped; nothing was rolled back unless the message says so.
#[derive(Debug, thiserror::Error)]
pub enum RollbackError {
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    State(#[from] StateError),
    /// The state database's handle could not be taken.
    #[error(transparent)]
    Handle(#[from] Poisoned),
    /// What lives with the record (pins, the record's history) could not be read: nothing is
    /// unpinned until it is mended (the target's warning says how).
    #[error("{0}")]
    KeptUnreadable(String),
    /// The mesh could not be held (another operation holds it), or was lost while stamping.
    /// Boxed: a converge error is large, and every rollback answer would carry its size.
    #[error(transparent)]
    Hold(Box<ConvergeError>),
    /// The target requires signed artifacts and the one rolled back to is not.
    #[error(transparent)]
    Unsigned(#[from] super::vouch::Unsigned),
    #[error("{record} holds nothing for module {module}: there is nothing to roll back")]
    NothingRecorded { record: String, module: String },
    #[error(
        "--to {to:?} is too short: give a build id or an artifact digest of at least 6 characters (see `meshtop builds {module}`)"
    )]
    TooShort { to: String, module: String },
    #[error(
        "no build or recorded artifact of module {module} matches {to:?}: see `meshtop builds {module}` and `meshtop history {module}`"
    )]
    NoMatch { to: String, module: String },
    #[error("{to:?} matches {count} artifacts of module {module}: give more characters")]
    Ambiguous {
        to: String,
        count: usize,
        module: String,
    },
    #[error(
        "the record named nothing for module {module} before {reference}@{short}: nothing to roll back to; name an artifact with --to BUILD|DIGEST (see `meshtop builds {module}`)"
    )]
    NothingBefore {
        module: String,
        reference: String,
        short: String,
    },
    #[error(
        "the state database holds no stamp of module {module} naming {reference}@{short} (stamped before meshtop kept the record's history, or by another host): name an artifact with --to BUILD|DIGEST (see `meshtop builds {module}`)"
    )]
    NoStamp {
        module: String,
        reference: String,
        short: String,
    },
    #[error(
        "the record already names {reference}@{short} for module {module}: nothing to roll back"
    )]
    AlreadyNamed {
        module: String,
        reference: String,
        short: String,
    },
    #[error(
        "{reference}@{short} is no longer held by {place} (swept?): nothing was rolled back. {offer}"
    )]
    Gone {
        reference: String,
        short: String,
        place: String,
        /// The commands that rebuild it, when its inputs are known.
        offer: String,
    },
    #[error(
        "the record of {module} moved since the rollback was confirmed (confirmed from {reference}@{short}); look again and roll back again"
    )]
    Moved {
        module: String,
        reference: String,
        short: String,
    },
}

/// Why a send sent nothing (a machine that failed is an outcome of the report, not this).
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The mesh could not be held: another operation holds it.
    /// Boxed: a converge error is large, and every rollback answer would carry its size.
    #[error(transparent)]
    Hold(Box<ConvergeError>),
    #[error("{record} holds nothing for module {module}: converge it first")]
    NothingRecorded { record: String, module: String },
    #[error(
        "the record of {module} moved since the send was confirmed: it now names {reference}@{short} (confirmed: {confirmed}@{confirmed_short}); nothing was sent — look at the new moves and send again"
    )]
    Moved {
        module: String,
        reference: String,
        short: String,
        confirmed: String,
        confirmed_short: String,
    },
    #[error("the record no longer names module {module}; nothing was sent")]
    NoLongerNamed { module: String },
}

/// Why gc took nothing: a root of the keep set (or the place it would take from) could not be read,
/// or another operation holds the mesh.
#[derive(Debug, thiserror::Error)]
pub enum GcError {
    /// `root` names what could not be read: the target's record, its machines, the host daemon,
    /// the registry, the state database.
    #[error("{root} cannot be read ({why})")]
    Unreadable {
        root: String,
        /// The read's own error (or the target's warning, when that is all it said).
        #[source]
        why: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("gc takes nothing while another operation holds the mesh: {0}")]
    Held(Box<ConvergeError>),
    /// Another target of the mesh is held by an operation now.
    #[error("gc takes nothing while another target of the mesh is held: {0}")]
    HeldElsewhere(String),
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The state database's handle could not be taken.
    #[error(transparent)]
    Handle(#[from] Poisoned),
}

impl GcError {
    pub(crate) fn unreadable(
        root: &str,
        why: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> GcError {
        GcError::Unreadable {
            root: root.to_string(),
            why: why.into(),
        }
    }
}

/// Why a plan could not be made: a module's inputs could not be read.
#[derive(Debug, Clone, thiserror::Error)]
pub enum PlanError {
    #[error("module {module}: {why}")]
    Inputs { module: String, why: String },
    /// mesh.lock cannot be read or written (its line named when it does not parse).
    #[error("{why}")]
    Lock { why: String },
    /// An upstream the lock does not hold, and that could not be resolved now.
    #[error("upstream {image} cannot be locked: {why}")]
    Upstream { image: String, why: String },
    #[error(
        "the pinned modules of target {target} cannot be read ({message}); nothing is decided without them (a converge would undo a rollback): fix or restore the state database, then run again"
    )]
    Pins { target: String, message: String },
}

impl From<ConvergeError> for RollbackError {
    fn from(error: ConvergeError) -> RollbackError {
        RollbackError::Hold(Box::new(error))
    }
}

impl From<ConvergeError> for GcError {
    fn from(error: ConvergeError) -> GcError {
        GcError::Held(Box::new(error))
    }
}

impl From<ConvergeError> for SendError {
    fn from(error: ConvergeError) -> SendError {
        SendError::Hold(Box::new(error))
    }
}

/// Why a builder cannot reach a dependent's base: its build fails and says why.
#[derive(Debug, thiserror::Error)]
#[error("builder {builder}: {source}")]
pub struct BaseOutOfReach {
    pub builder: String,
    #[source]
    pub source: BaseUnreached,
}

/// Why the base could not be brought to one builder (`base_for`).
#[derive(Debug, thiserror::Error)]
pub enum BaseUnreached {
    /// The pull failed (the manifest is gone, the registry did not answer): another way may work.
    #[error("pulling {pinned}: {source}")]
    Pull {
        pinned: String,
        #[source]
        source: DaemonError,
    },
    /// Pulled, but not tagged: another way may work.
    #[error("tagging {pinned} as {reference}: {source}")]
    Tag {
        pinned: String,
        reference: String,
        #[source]
        source: DaemonError,
    },
    /// The manifest is not the base's artifact: refused.
    #[error(
        "registry {registry} answers the base's ref {reference} with manifest {manifest}, whose image is {id}, not the base's artifact {artifact}: refused (someone pushed another image under the base's ref; converge the base module again to push its artifact)"
    )]
    LookAlike {
        registry: String,
        reference: String,
        manifest: String,
        id: String,
        artifact: String,
    },
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Host(#[from] Arc<DaemonError>),
    #[error(
        "the base's artifact {artifact} ({reference}) is neither on this builder, nor in registry {registry}, nor on the host daemon{tried}: converge the base module again"
    )]
    Nowhere {
        artifact: String,
        reference: String,
        registry: String,
        /// The manifests tried on the way, and why each did not bring the base.
        tried: Tried,
    },
    #[error(transparent)]
    HandOver(#[from] HandOverError),
}

impl BaseUnreached {
    /// A pull or tag that failed: the base may still come another way. A look-alike is refused.
    pub(super) fn another_way_may_work(&self) -> bool {
        matches!(self, BaseUnreached::Pull { .. } | BaseUnreached::Tag { .. })
    }
}

/// The ways tried before a base was found nowhere, said in parentheses (nothing when none was).
#[derive(Debug)]
pub struct Tried(pub(super) Vec<BaseUnreached>);

impl std::fmt::Display for Tried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, fault) in self.0.iter().enumerate() {
            f.write_str(if i == 0 { " (" } else { "; " })?;
            write!(f, "{fault}")?;
        }
        if !self.0.is_empty() {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// Why a build could not be handed over through the registry, or a base from the host.
#[derive(Debug, thiserror::Error)]
pub enum HandOverError {
    #[error("builder {builder} could not push {reference} to registry {registry}: {why}")]
    Push {
        builder: String,
        reference: String,
        registry: String,
        why: HandOverFault,
    },
    /// Pushed, but a push that is not signed would not vouch on a machine that trusts keys.
    #[error(
        "builder {builder} pushed {reference} to registry {registry} as {digest}, which could not be signed: {source}"
    )]
    Unsigned {
        builder: String,
        reference: String,
        registry: String,
        digest: String,
        source: TargetError,
    },
    #[error("the base could not be handed over: {0}")]
    BaseTag(#[source] DaemonError),
    #[error("the base could not be handed over: {0}")]
    BasePush(#[source] RegistryError),
    #[error("the base could not be handed over: its push {digest} could not be signed: {source}")]
    BaseUnsigned { digest: String, source: TargetError },
}

/// Why a build that made an artifact did not reach where the target needs it (the module fails),
/// carried from the placer and the delivery to the walk as it happened.
#[derive(Debug, thiserror::Error)]
pub enum Undelivery {
    #[error(transparent)]
    HandOver(#[from] HandOverError),
    /// The builder that holds the artifact could not be reached to push it.
    #[error("builder {builder} could not hand {module} over: {source}")]
    NoDaemon {
        builder: String,
        module: String,
        source: std::sync::Arc<DaemonError>,
    },
    #[error(transparent)]
    Target(#[from] TargetError),
}

/// Why a hand-over push failed.
#[derive(Debug, thiserror::Error)]
pub enum HandOverFault {
    #[error(transparent)]
    Push(RegistryError),
    #[error("the push did not end within {seconds} s (MESHTOP_BUILD_DEADLINE)")]
    Deadline { seconds: u64 },
}
