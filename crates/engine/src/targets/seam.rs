//! The seam itself: what the engine, the sources and the commands ask of a target — the roles it
//! plays (its record, its machines, delivery, the hold) and the whole — and the types of its
//! answers. A leaf of the folder: `docker.rs` and `kubernetes/` implement it, `mod.rs` makes them;
//! nobody outside the targets' folder knows which kind it is talking to.

use crate::error::HoldLost;
use std::path::PathBuf;
use std::sync::Mutex;

use tokio::sync::mpsc::Sender;
use tokio::sync::watch;

use crate::backends::daemon::LazyDaemon;
use crate::backends::registry::RegistryClient;
use crate::backends::state::{Holder, StateDb};
use crate::error::{ConvergeError, TargetError, still_holds};
use crate::lock;
use crate::mesh::live::HeldBy;
use crate::mesh::logs::{LogAsk, LogItem};
use crate::mesh::machine::{Machine, Move};
use crate::mesh::model::{Mesh, Record, RecordEntry, Registry};
use crate::mesh::pin::{KeptWithRecord, PinChange, StampBy};
use crate::mesh::target::TargetDescription;
use crate::progress::Emitter;

/// The target's record and how reasons name it.
#[derive(Debug, Clone)]
pub struct RecordRead {
    pub record: Record,
    /// Names the record in reasons.
    pub source: String,
    /// A record that could not be read as a whole reads as silent, with this warning.
    pub warning: Option<String>,
    /// What lives with the record (pins, the record's history) could not be read: nothing is
    /// stamped and gc takes nothing until it is mended.
    pub team_warning: Option<String>,
    /// The pins and the record's history, where they live on the target (None: the state
    /// database is where they live).
    pub kept: Option<KeptWithRecord>,
    /// How close the record is to what the target can hold (None: no limit that matters).
    pub room: Option<RecordRoom>,
}

/// What [`KeepsRecord::read_shown`] reads for: the mesh, the state database its copy goes to, and the
/// module whose record history is open (None: no history is read where it is kept apart).
#[derive(Clone, Copy)]
pub struct Shown<'a> {
    pub mesh: &'a Mesh,
    pub db: &'a Mutex<StateDb>,
    pub history_of: Option<&'a str>,
}

/// How close the record is to its limit, and what reading it cost. Where and in what form the
/// record lives is the target's to say: `said` (the line `status` prints) and `form` (its own
/// fields, side by side with these in `status --json`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecordRoom {
    /// `record: in 7 shard(s) (…), their index … of … bytes of …; room for about … more module(s)`.
    #[serde(skip)]
    pub said: String,
    /// The target's own words for its record's form (e.g. `form`, `shards`, `shard_bytes`).
    #[serde(flatten)]
    pub form: serde_json::Map<String, serde_json::Value>,
    /// Bytes of the limited object used (the record's own and other tools'), and its limit.
    pub used_bytes: usize,
    pub limit_bytes: usize,
    /// About how many more modules the record can take in any form.
    pub modules_left: usize,
    /// What reading the record cost: objects read and bytes.
    pub read_objects: usize,
    pub read_bytes: usize,
}

/// A part of the record the target keeps apart (a shard) that no index names and whose time is
/// past the grace: gc's to take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordLeftover {
    /// Its name where the target keeps it.
    pub name: String,
    /// The operation that wrote (or last renewed) it.
    pub written_by: String,
    /// How long ago that was, in milliseconds.
    pub age_ms: i64,
}

/// What removing a leftover part of the record did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftoverRemoval {
    Removed,
    AlreadyGone,
    /// Not removed, and why (a stamp renewed it, an index names it now).
    Kept(String),
}

impl RecordRoom {
    /// The refusal of a stamp of `new_modules` modules the record cannot take, before any build.
    pub fn refuses(&self, source: &str, new_modules: usize) -> Option<String> {
        (new_modules > self.modules_left).then(|| {
            format!(
                "the record ({source}) can take about {} more module(s) in any form ({} of {} bytes of its object used); this converge would add {new_modules}: nothing was built or pushed — free room on the object (other large annotations) or converge fewer modules",
                self.modules_left, self.used_bytes, self.limit_bytes
            )
        })
    }
}

/// How a module's artifact reaches the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// The host daemon is the target.
    Host,
    /// Push to the registry.
    Push(Registry),
    /// `kind load docker-image --name <cluster>`.
    KindLoad(String),
}

/// One artifact to deliver: `build_id` is this converge's build of it, if it was built now (a push's
/// manifest digest is kept with that build, or with the build the history names for the artifact).
pub struct Artifact<'a> {
    pub module: &'a str,
    pub reference: &'a str,
    pub digest: &'a str,
    pub build_id: Option<&'a str>,
    /// The manifest digest it was pushed or verified as, when known: what is pulled or deployed,
    /// never the ref's tag looked up again.
    pub manifest: Option<&'a str>,
    /// The trusted key that signed `manifest`, when one was checked.
    pub signed_by: Option<&'a str>,
}

impl<'a> Artifact<'a> {
    /// The artifact of `module` as a record entry names it.
    pub fn of(module: &'a str, entry: &'a RecordEntry) -> Artifact<'a> {
        Artifact {
            module,
            reference: &entry.reference,
            digest: &entry.digest,
            build_id: None,
            manifest: entry.manifest.as_deref(),
            signed_by: entry.signed_by.as_deref(),
        }
    }

    /// The artifact as a record names it (ref, digest, and its manifest when known).
    pub fn entry(&self) -> RecordEntry {
        RecordEntry::new(self.reference.to_string(), self.digest.to_string()).with_manifest(
            self.manifest.map(str::to_string),
            self.signed_by.map(str::to_string),
        )
    }
}

/// Whether the target still holds an artifact (rollback asks before it stamps anything).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holding {
    Held,
    /// It is gone from this place (`the host daemon`, `registry … (namespace …)`).
    Gone(String),
}

/// The state database, the daemon and the progress of the operation a call is made for.
#[derive(Clone, Copy)]
pub struct Reach<'a> {
    pub daemon: &'a LazyDaemon,
    pub db: &'a Mutex<StateDb>,
}

/// Who the target is, in its own words: its name in the mesh and how the screen and the confirms
/// describe it. Every role below says it too.
pub trait Describes: Send + Sync {
    /// The target's name in the mesh (`default` for a mesh file's single `[target]`): what its
    /// record, lock, pins and history are kept under in the state database.
    fn name(&self) -> &str;

    /// The target in words, for the screen and the confirms.
    fn describe(&self) -> TargetDescription;

    /// `context X, namespace Y` where that says something (what a changing command names first).
    fn place(&self) -> Option<String> {
        self.describe().place
    }

    /// What a changing command says first of where it acts, in the target's words (None: nothing
    /// to say, the host daemon is here).
    fn acting_on(&self) -> Option<String> {
        self.describe().acting_on()
    }
}

/// The record role: where the target keeps the record (which artifact each module is), its pins
/// and history, how it reads back, how much room it has left, and the parts gc may take.
#[async_trait::async_trait]
pub trait KeepsRecord: Describes {
    async fn read_record<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
    ) -> Result<RecordRead, TargetError>;

    /// The record and its pins, for what decides by them (a converge, a plan, status): as
    /// [`KeepsRecord::read_record`], except that a history kept apart from the record (Kubernetes'
    /// history shards) is left unread; `kept`'s history is then only what came with the rest.
    async fn read_entries<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
    ) -> Result<RecordRead, TargetError> {
        self.read_record(mesh, db).await
    }

    /// What a screen shows of the record (the dashboard polls it): the entries and the pins as
    /// [`KeepsRecord::read_entries`], and of a history kept apart from the record only the stamps of
    /// the module whose history is open, copied into the state database where every reader of
    /// the history finds them. A target that reads the same things again answers an unchanged
    /// record from what it read (on Kubernetes: one GET of the namespace).
    async fn read_shown<'a>(&'a self, shown: Shown<'a>) -> Result<RecordRead, TargetError> {
        self.read_entries(shown.mesh, shown.db).await
    }

    /// The parts of the record kept apart (shards) that no index names and that were written
    /// longer than `grace_ms` ago (never less than the target's own grace, which keeps a stamp in
    /// flight safe): what gc takes beside images. None where the record is one object.
    async fn record_leftovers<'a>(
        &'a self,
        grace_ms: i64,
    ) -> Result<Vec<RecordLeftover>, TargetError> {
        let _ = grace_ms;
        Ok(Vec::new())
    }

    /// Remove the leftover part `name`, only while it still is one (no index names it, nothing
    /// renewed it since it was listed).
    async fn remove_leftover<'a>(
        &'a self,
        name: &'a str,
        grace_ms: i64,
    ) -> Result<LeftoverRemoval, TargetError> {
        let _ = grace_ms;
        Ok(LeftoverRemoval::Kept(format!(
            "{name} is no part of this target's record"
        )))
    }

    /// Merge `entries` into the record and change the pins, in one write, only while the
    /// operation `by` names (a converge, rollback, unpin, promote) still holds the mesh; every
    /// changed entry is noted in the record's history. Where the record lives on the target, the
    /// pins and the history live there too, and the state database keeps a copy.
    async fn stamp<'a>(
        &'a self,
        mesh: &'a Mesh,
        db: &'a Mutex<StateDb>,
        by: StampBy<'a>,
        entries: &'a Record,
        pins: &'a PinChange,
    ) -> Result<(), ConvergeError>;
}

/// The machines role: what runs the mesh's modules there, created and moved one by one, and
/// what each says (its logs).
#[async_trait::async_trait]
pub trait RunsMachines: Describes {
    /// What the machines are, as gc names the root they are read from.
    fn machines_root(&self) -> &'static str;

    /// Every machine of the mesh against `record`, sorted by (module, name).
    async fn machines<'a>(
        &'a self,
        mesh: &'a Mesh,
        record: &'a Record,
        reach: Reach<'a>,
    ) -> Result<Vec<Machine>, TargetError>;

    /// Create each declared machine in scope that does not exist yet and whose module the record
    /// holds; the names created. A target where machines are declared elsewhere creates none.
    async fn create_declared<'a>(
        &'a self,
        mesh: &'a Mesh,
        record: &'a Record,
        existing: &'a [Machine],
        // Spelled `for<'s>`: async_trait would name an elided lifetime after the method's own.
        in_scope: &'a (dyn for<'s> Fn(&'s str) -> bool + Sync),
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<Vec<String>, TargetError>;

    /// Other digests a machine running `entry`'s artifact reports for it here (the Docker target:
    /// the images it pulled out of a multi-platform artifact's index); none by default.
    async fn runs_as<'a>(
        &'a self,
        _mesh: &'a Mesh,
        _entry: &'a RecordEntry,
        _reach: Reach<'a>,
    ) -> Result<Vec<String>, TargetError> {
        Ok(Vec::new())
    }

    /// Move one machine to the artifact `moved` names, and follow it there. Ok: how it proved
    /// itself there, said after "moved" (empty: nothing more to say).
    async fn send<'a>(
        &'a self,
        mesh: &'a Mesh,
        moved: &'a Move,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<String, TargetError>;

    /// What `machine` says, as `ask` asks, sent to `out` item by item (lines safe to print, run
    /// starts, its exit, what replaced it, cuts): a follow keeps going across restarts and sends
    /// until `out` closes. Err before anything was said: the machine cannot be read (the target
    /// does not answer, the permission to read logs is missing).
    async fn logs<'a>(
        &'a self,
        mesh: &'a Mesh,
        machine: &'a Machine,
        ask: &'a LogAsk,
        daemon: &'a LazyDaemon,
        out: Sender<LogItem>,
    ) -> Result<(), TargetError>;
}

/// The delivery role: where a build must go for the target to run it, what the host daemon
/// answers for, and bringing an artifact there (delivered, fetched once vouched, published,
/// promoted, made runnable out of an index).
#[async_trait::async_trait]
pub trait Delivers: Describes {
    /// Whether an image on the host daemon answers for this target: a skip the host vouches for
    /// (the host voucher), and an artifact the record names that the host lost is rebuilt (the
    /// planner asks the host only then).
    fn host_images_answer(&self) -> bool;

    /// Whether what this target runs is on the host daemon: what the host's builder built needs
    /// no delivery (nor a hand-over for itself alone), and a module vouched for is there for a
    /// dependent to build on (the placer sends that dependent to the host's builder).
    fn host_holds_what_it_runs(&self) -> bool;

    /// How modules are delivered, or why they cannot be (then a converge is refused before any build).
    fn delivery(&self) -> Result<Delivery, TargetError>;

    /// The registry this target is delivered to by a push: what it holds is the target's too (gc
    /// sweeps its manifests, a multi-platform build can go there).
    fn pushes_to(&self) -> Option<Registry> {
        match self.delivery() {
            Ok(Delivery::Push(registry)) => Some(registry),
            _ => None,
        }
    }

    /// Make a multi-platform artifact (its image index, pushed by the build or vouched by the
    /// registry) runnable where the target runs it. A target that deploys the index as is has
    /// nothing to do; the Docker target pulls its daemon's platform out of the index.
    async fn run_from_index<'a>(
        &'a self,
        _mesh: &'a Mesh,
        _artifact: Artifact<'a>,
        _reach: Reach<'a>,
        _emitter: &'a Emitter,
    ) -> Result<(), TargetError> {
        Ok(())
    }

    /// Deliver one module's artifact; the manifest digest it was pushed as, where delivering
    /// pushes it (what the record keeps and a send deploys).
    async fn deliver<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<Option<String>, TargetError>;

    /// Bring an artifact the registry vouched for (it answered with manifest `manifest` under
    /// `artifact.reference`) where this target needs it, and into the host daemon when `on_host`
    /// (a module of this converge builds FROM it). Err says why it could not: the module is built.
    async fn fetch_vouched<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        manifest: &'a str,
        on_host: bool,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<(), TargetError>;

    /// Publish a build for other machines to reuse (`--publish`) where delivering it does not put
    /// it in the registry already; the manifest digest, kept with the build. Ok(None): nothing to
    /// publish here (not asked, no registry, or the delivery pushes).
    async fn publish<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<Option<String>, TargetError>;

    /// Whether the target still holds `wanted` (where a person could go back to it).
    async fn holds<'a>(
        &'a self,
        mesh: &'a Mesh,
        wanted: &'a RecordEntry,
        reach: Reach<'a>,
    ) -> Result<Holding, TargetError>;

    /// A promote: make `artifact`, which another target's record names, runnable here without a
    /// build. Held when this target can run it (brought here first where it must be: pulled onto
    /// the host from the registry, loaded into a kind cluster); Gone(where) when it cannot be had.
    /// Nothing is built or pushed.
    async fn bring<'a>(
        &'a self,
        mesh: &'a Mesh,
        artifact: Artifact<'a>,
        reach: Reach<'a>,
        emitter: &'a Emitter,
    ) -> Result<Holding, TargetError>;

    /// A client for `registry` with the credentials a push uses.
    async fn registry_client<'a>(
        &'a self,
        registry: &'a Registry,
    ) -> Result<RegistryClient, TargetError>;
}

/// The hold role: one operation at a time holds the mesh on the target. By default the state
/// database's lock (the dashboard on this machine follows the operation through it); a target
/// where the team meets elsewhere (Kubernetes: the namespace's Lease) overrides it.
#[async_trait::async_trait]
pub trait HoldsTheMesh: Describes {
    /// Hold the mesh for this operation of `kind` (or wait for it); the line that says whom it
    /// was taken over from, if it was. The state database's lock on every kind (the dashboard on
    /// this machine follows the operation through it); Kubernetes adds the namespace's Lease.
    async fn hold<'a>(
        &'a self,
        db: &'a Mutex<StateDb>,
        mesh: &'a str,
        holder: &'a Holder,
        kind: &'a str,
        wait: bool,
    ) -> Result<Option<String>, ConvergeError> {
        let _ = kind;
        let from = lock::acquire(db, mesh, self.name(), holder, wait).await?;
        Ok(from.map(|from| lock::took_over(db, mesh, self.name(), &from)))
    }

    /// The operation's short id (`#142`) is known (the state database gave it after the hold):
    /// where the mesh is held for the team, say it there too.
    async fn named<'a>(&'a self, mesh: &'a str, operation_id: &'a str, short: Option<i64>) {
        let _ = (mesh, operation_id, short);
    }

    /// Who holds the mesh where the team meets, if anyone does (None where the state database's
    /// lock is the only one: the screen reads that itself).
    async fn held_by<'a>(&'a self, mesh: &'a str) -> Result<Option<HeldBy>, TargetError> {
        let _ = mesh;
        Ok(None)
    }

    /// Keep holding the mesh while the operation runs (abort the handle when it ends); `lost`
    /// hears who took it over, if anyone does.
    fn heartbeat(
        &self,
        state_path: PathBuf,
        mesh: String,
        operation_id: String,
        lost: watch::Sender<Option<HoldLost>>,
    ) -> tokio::task::JoinHandle<()> {
        lock::spawn_heartbeat(
            state_path,
            mesh,
            self.name().to_string(),
            operation_id,
            lost,
        )
    }

    /// `LockLost` when `operation_id` no longer holds the mesh: call it in the same step as each
    /// write, just before it.
    async fn still_holds<'a>(
        &'a self,
        db: &'a Mutex<StateDb>,
        mesh: &'a str,
        operation_id: &'a str,
    ) -> Result<(), ConvergeError> {
        still_holds(db, mesh, self.name(), operation_id)
    }

    /// Give the mesh back at the operation's end, where the team holds it (the state database's
    /// lock is released by the emitter's last write, with the operation's last events).
    async fn release<'a>(&'a self, mesh: &'a str, operation_id: &'a str) {
        let _ = (mesh, operation_id);
    }
}

/// Where modules are delivered and machines run: the four roles a target plays (its record, its
/// machines, delivery, the hold), and what a changing command may do there, which asks of several
/// roles at once. Made once per command by [`super::connect`], shared as `Arc<dyn Target>`; a
/// caller that needs one role takes it alone (`&dyn KeepsRecord`: a `&dyn Target` coerces).
/// Its answers that wait are written `async fn` once; `async_trait` boxes their futures so that the
/// seam stays a trait object (`Arc<dyn Target>`, which native async in traits cannot be).
#[async_trait::async_trait]
pub trait Target: KeepsRecord + RunsMachines + Delivers + HoldsTheMesh {
    /// Before anything is built or changed: may we write the record (`stamps`) and move `sends`?
    async fn check_write_access<'a>(
        &'a self,
        stamps: bool,
        sends: &'a [Move],
    ) -> Result<(), TargetError>;

    /// What a converge of `modules` will write: the record, and the machines of the modules whose
    /// policy rolls out.
    async fn check_converge_access<'a>(
        &'a self,
        mesh: &'a Mesh,
        modules: &'a [&'a str],
    ) -> Result<(), TargetError>;
}
