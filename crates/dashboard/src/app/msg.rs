//! What arrives at the app (messages) and what the app asks of the loop (effects).

use std::collections::BTreeMap;
use std::sync::Arc;

use ratatui::crossterm::event::KeyEvent;

use crate::mesh::builds::BuildRow;
use crate::mesh::decide::HostImage;
use crate::mesh::environments::Grid;
use crate::mesh::gc::{Candidate, GcReport};
use crate::mesh::live::HeldBy;
use crate::mesh::logs::{LogAsk, LogItem};
use crate::mesh::machine::{Machine, Move};
use crate::mesh::model::{Record, RecordEntry};
use crate::mesh::pin::{Pin, Stamp};
use crate::mesh::plan::Plan;
use crate::mesh::progress::{EventRow, Progress};
use crate::mesh::provenance::ReadProvenance;
use crate::mesh::stats::Stats;
use crate::mesh::timeline::Timeline;
use crate::mesh::upstream_lock::UpstreamNow;

/// The sources the dashboard polls, each on its own task and interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceId {
    Plan,
    Record,
    Host,
    State,
    Machines,
    /// Only when the mesh names a registry.
    Registry,
    /// What each locked upstream's registry serves now (a modest interval: never on a key's path).
    Upstreams,
}

impl SourceId {
    pub const ALL: [SourceId; 7] = [
        SourceId::Plan,
        SourceId::Record,
        SourceId::Host,
        SourceId::State,
        SourceId::Machines,
        SourceId::Registry,
        SourceId::Upstreams,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            SourceId::Plan => "plan",
            SourceId::Record => "record",
            SourceId::Host => "host",
            SourceId::State => "history",
            SourceId::Machines => "machines",
            SourceId::Registry => "registry",
            SourceId::Upstreams => "upstreams",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// Whether its answer is one target's (the record, the machines, the plan against the record,
    /// the history of the operations there), not the host's or the registry's.
    pub(crate) fn of_target(self) -> bool {
        matches!(
            self,
            SourceId::Plan | SourceId::Record | SourceId::State | SourceId::Machines
        )
    }
}

/// Why a poll, a page of history, a view's read or an action failed: what arrives at the app from
/// the sources. The error the sources met is kept whole (`Failed`: its type and its chain, for a
/// caller that looks into it); the app only shows it, through `Display`, the words a person reads.
/// One shared `dyn Error` rather than a variant per backend: the app may not name the backends'
/// and the engine's types (tests/layering.rs), the sources convert each (`sources/error.rs`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum SourceError {
    /// What an outside system or the engine answered (the target, the host daemon, the
    /// registry, the state database, a converge, send, rollback, promote or gc).
    #[error(transparent)]
    Failed(Arc<dyn std::error::Error + Send + Sync>),
    /// The task that opened or read the state database stopped before it answered (it panicked).
    #[error("{doing} the state database stopped: {source}")]
    Stopped {
        doing: &'static str,
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// The mesh names no registry to ask.
    #[error("the mesh names no registry")]
    NoRegistry,
    /// A target the mesh file does not name.
    #[error("mesh {mesh} names no target {name:?} (its targets: {names})")]
    NoSuchTarget {
        mesh: String,
        name: String,
        names: String,
    },
    /// The record moved between the person's confirm and the rollback: nothing was done.
    #[error("the record of {module} moved since the rollback was confirmed; nothing rolled back")]
    RollbackMoved { module: String },
    /// A record moved between the person's confirm and the promote: nothing was done.
    #[error(
        "the records of {module} on {from} or {to} moved since the promote was confirmed; nothing promoted: look again and promote again"
    )]
    PromoteMoved {
        module: String,
        from: String,
        to: String,
    },
    /// gc could not read a root of its keep set (or the mesh is held): it took nothing.
    #[error("took nothing: {0}")]
    TookNothing(Arc<dyn std::error::Error + Send + Sync>),
    /// An action ran to its end without fully succeeding: its report's headline, which says
    /// what did not (some candidates not taken, a machine that did not move).
    #[error("{0}")]
    Unfinished(String),
    /// A view was answered with another view's data (`view` names the one asked).
    #[error("the {view} view was answered with another view's data")]
    OtherView { view: &'static str },
}

impl SourceError {
    /// An outside system's or the engine's error, kept whole.
    pub fn failed(error: impl std::error::Error + Send + Sync + 'static) -> SourceError {
        SourceError::Failed(Arc::new(error))
    }
}

/// One poll of the history: what the panes need from the state database.
#[derive(Debug, Clone, Default)]
pub struct StateSnapshot {
    /// The newest build of each module.
    pub last_builds: BTreeMap<String, BuildRow>,
    /// The module the page is of (None: the whole mesh), as asked in [`PollParams`].
    pub scope: Option<String>,
    /// The newest page of builds of that scope.
    pub page: Vec<BuildRow>,
    /// Progress events after [`PollParams::events_after`], oldest first.
    pub events: Vec<EventRow>,
    pub latest_operation: Option<String>,
    /// Running digest → the build that made or published it.
    pub made_by: BTreeMap<String, BuildRow>,
    /// The digests of [`PollParams::digests`] looked up that no build here made or published:
    /// their BUILT BY can only come from a signed provenance.
    pub unbuilt: Vec<String>,
    /// Who holds the mesh's lock (read on the same snapshot as the events).
    pub holder: Option<crate::mesh::live::LockHolder>,
    /// The record's history of [`PollParams::stamps_module`] (newest first), and of which module.
    pub stamps: Option<(String, Vec<Stamp>)>,
    /// The mesh's pinned modules.
    pub pins: BTreeMap<String, Pin>,
}

/// What one source answered.
#[derive(Debug, Clone)]
pub enum SourceData {
    Plan(Box<Plan>),
    /// The record, and who holds the mesh where the team meets (a Lease), if anyone.
    Record(Record, Option<HeldBy>),
    Host(Vec<HostImage>),
    State(Box<StateSnapshot>),
    /// The machines with the record they were judged against: a send's confirm is built from
    /// this pair, never from a record polled at another moment.
    MachinesAgainst(Record, Vec<Machine>),
    /// Module → what the registry answered for its planned ref.
    Registry(BTreeMap<String, RegistryAnswer>),
    /// Every locked upstream against what its registry serves now.
    Upstreams(Vec<UpstreamNow>),
}

/// What a view asks the sources to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewRequest {
    /// The gc dry run: every root read, each candidate with why it is unreachable (gc acting on
    /// `target`, the one the main view shows; None: the mesh's first).
    Gc {
        keep_newest: usize,
        grace_ms: i64,
        target: Option<String>,
    },
    /// The stats over everything kept (None) or the last `since_ms`.
    Stats { since_ms: Option<i64> },
    /// Every target of the mesh read, as `meshtop status --all-targets` reads them.
    Environments,
    /// One operation's timeline (by its uuid) and each module's median build.
    Timeline { operation_id: String },
}

/// What a view's read answered.
#[derive(Debug, Clone)]
pub enum ViewData {
    Gc(Box<GcReport>),
    Stats(Box<Stats>),
    Environments(Box<Grid>),
    Timeline(Box<TimelineRead>),
}

/// An operation's timeline as read, and each module's median build (what a skip saved).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimelineRead {
    pub timeline: Timeline,
    pub medians: BTreeMap<String, i64>,
}

/// What the registry said of one ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryAnswer {
    /// Published, with the manifest digest it serves.
    Published(String),
    Absent,
    /// The question failed (auth, network): the reason.
    Failed(String),
}

/// A running artifact this machine has no build row of, whose signed provenance the dashboard
/// asks for (BUILT BY, the machine's detail).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProvenanceAsk {
    /// The artifact a machine runs.
    pub digest: String,
    /// The machine's image (`ref@…`): where the artifact is asked for when the record names another.
    pub image: String,
    /// The record's entry of the machine's module (its ref and verified manifest), if any.
    pub recorded: Option<RecordEntry>,
}

/// What the pollers need to know of the app's state (sent to them over a watch channel).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PollParams {
    /// The target the main view shows (None: the mesh's first).
    pub target: Option<String>,
    /// The history pane's scope: a module, or None for the whole mesh.
    pub history_module: Option<String>,
    /// The id of the last progress event seen.
    pub events_after: i64,
    /// Running digests whose builds the machines pane names (sorted, each once).
    pub digests: Arc<[String]>,
    /// The digests of the selected module's record history (sorted, each once): a rollback's
    /// confirm names the builds that made them.
    pub stamp_digests: Vec<String>,
    pub page_size: usize,
    /// (module, planned ref) of every module whose ref is known, for the registry source.
    pub refs: Arc<[(String, String)]>,
    /// The module whose record history the detail shows (the open one, else the selected one).
    pub stamps_module: Option<String>,
    /// The module whose detail is open: the only one whose record history is read from the target
    /// where the target keeps it apart (its shard alone); the others' is never asked for by a poll.
    pub history_opened: Option<String>,
}

impl PollParams {
    /// The digests whose builds a history poll traces: the machines' and the record history's,
    /// sorted, each once.
    pub fn traced_digests(&self) -> Vec<&String> {
        let mut digests: Vec<&String> = self.digests.iter().chain(&self.stamp_digests).collect();
        digests.sort();
        digests.dedup();
        digests
    }
}

/// Where a fetched page of builds goes in the history window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// A new scope: the page replaces the window.
    Replace,
    /// Older rows, below the window.
    Append,
    /// Newer rows dropped earlier, above the window.
    Prepend,
}

/// One page of builds the history pane asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest {
    pub module: Option<String>,
    pub before: Option<(i64, String)>,
    pub limit: usize,
    pub placement: Placement,
}

/// An action that changes something, as the app asks the loop to start it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionRequest {
    /// Converge `modules` (None: the whole mesh), forcing their builds when `force`.
    Converge {
        modules: Option<Vec<String>>,
        force: bool,
    },
    /// Send a module's behind machines to the record's artifact: exactly the moves the person
    /// confirmed (the send refuses when the record no longer names their artifact).
    Send { module: String, moves: Vec<Move> },
    /// Roll a module back to the artifact the record named before `from` (what the record named
    /// when the person confirmed; refused when it moved since), send its machines, pin it.
    Rollback { module: String, from: RecordEntry },
    /// Sweep what the gc view listed: only these candidates, and only if still unreachable.
    Gc {
        keep_newest: usize,
        grace_ms: i64,
        confirmed: Vec<Candidate>,
    },
    /// Promote `module` into target `to` from target `from`: exactly the artifact confirmed, over
    /// what `to` named when the person confirmed (refused when either record moved since).
    Promote {
        module: String,
        from: String,
        to: String,
        artifact: RecordEntry,
        current: Option<RecordEntry>,
    },
    /// Move these upstreams in `mesh.lock` to what their registries serve now, then converge
    /// `modules` (those whose Dockerfiles name them: their addresses move).
    UpdateUpstreams {
        images: Vec<String>,
        modules: Vec<String>,
    },
}

impl ActionRequest {
    pub(crate) fn label(&self) -> String {
        match self {
            ActionRequest::Converge {
                modules: None,
                force: false,
            } => "converge mesh".into(),
            ActionRequest::Converge {
                modules: None,
                force: true,
            } => "forced converge of the mesh".into(),
            ActionRequest::Converge {
                modules: Some(names),
                force,
            } => {
                format!(
                    "{} {}",
                    if *force { "force rebuild" } else { "converge" },
                    names.join(", ")
                )
            }
            ActionRequest::Send { module, .. } => format!("send {module}"),
            ActionRequest::Rollback { module, .. } => format!("roll back {module}"),
            ActionRequest::Gc { .. } => "gc".into(),
            ActionRequest::Promote { module, to, .. } => format!("promote {module} to {to}"),
            ActionRequest::UpdateUpstreams { modules, .. } => {
                format!("update upstreams of {}", modules.join(", "))
            }
        }
    }
}

/// The logs view asks for what these machines say, streamed in batches tagged with `stream` (a
/// batch of a stream the view no longer shows is dropped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRequest {
    pub stream: u64,
    /// The target the main view shows (None: the mesh's first).
    pub target: Option<String>,
    pub machines: Vec<Machine>,
    pub ask: LogAsk,
}

#[derive(Debug, Clone)]
pub enum Msg {
    Key(KeyEvent),
    Resize(u16, u16),
    /// The clock moved (ages shown on screen may change).
    Tick(i64),
    Polled {
        source: SourceId,
        at_ms: i64,
        /// The target it was polled for, as [`PollParams::target`] asked (an answer for a target
        /// the main view no longer shows is dropped); None: whatever the view shows.
        target: Option<String>,
        result: Result<SourceData, SourceError>,
    },
    BuildsPage {
        request: PageRequest,
        at_ms: i64,
        result: Result<Vec<BuildRow>, SourceError>,
    },
    /// Files of these modules' contexts changed (the watcher, after a quiet period).
    InputsChanged(Vec<String>),
    /// A step of progress from an action started here.
    ActionProgress(Progress),
    ActionDone {
        at_ms: i64,
        label: String,
        result: Result<String, SourceError>,
    },
    /// A view's data (gc, stats) arrived.
    ViewLoaded {
        request: ViewRequest,
        at_ms: i64,
        result: Result<ViewData, SourceError>,
    },
    /// What the logs view's machines said since the last batch: (machine, item), in order.
    LogLines {
        stream: u64,
        items: Vec<(String, LogItem)>,
    },
    /// The signed provenance of a running artifact, as read (None: no provenance a trusted key
    /// signed for that artifact).
    ProvenanceRead {
        digest: String,
        at_ms: i64,
        result: Result<Option<ReadProvenance>, SourceError>,
    },
    /// The logs view's streams ended (a read without follow is whole; a follow ends only on a
    /// fault): the machines that could not be read, and why.
    LogsEnded {
        stream: u64,
        failures: Vec<(String, String)>,
    },
}

/// What `update` asks the loop to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Poll these sources now (each poller still runs one poll at a time).
    PollNow(Vec<SourceId>),
    FetchBuilds(PageRequest),
    /// Read what a view shows (the gc dry run, the stats).
    FetchView(ViewRequest),
    Start(ActionRequest),
    /// Ring the terminal bell (and notify the desktop) with this text.
    Bell(String),
    /// Cancel the action started here (a converge stops its builds and marks them cancelled).
    CancelAction,
    /// Stream what machines say to the logs view (any earlier stream stops).
    FollowLogs(LogRequest),
    /// The logs view closed: stop its streams.
    StopLogs,
    /// Read the signed provenance of these running artifacts (a few at once).
    FetchProvenance(Vec<ProvenanceAsk>),
    Quit,
}
