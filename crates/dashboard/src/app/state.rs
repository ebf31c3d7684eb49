//! The dashboard's state: one owner (the app loop), changed only by `update`, read by the widgets.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use crate::mesh::behind::MachineState;
use crate::mesh::builds::BuildRow;
use crate::mesh::decide::HostImage;
use crate::mesh::live::{HeldBy, LiveOperation, LockHolder, OperationState};
use crate::mesh::machine::Machine;
use crate::mesh::model::{Mesh, Policy, Record};
use crate::mesh::operation::OperationKind;
use crate::mesh::plan::{Plan, PlannedModule};
use crate::mesh::progress::EventRow;
use crate::mesh::provenance::ReadProvenance;
use crate::mesh::target::TargetDescription;
use crate::mesh::upstream_lock::UpstreamNow;

use super::keys::{KeyTable, Mode};
use super::log_view::LogView;
use super::msg::{ActionRequest, Effect, PollParams, RegistryAnswer, SourceId};
use super::view_state::{Loaded, ViewState};
use super::window::{BuildsWindow, PAGE_SIZE};

/// At most this many progress lines of the followed operation are kept.
pub(crate) const MAX_OPERATION_LINES: usize = 500;
/// At most this many bytes of them ([`EventRow::held_bytes`]): 500 lines of 1 KiB fit, while a
/// builder printing 16 KiB lines holds no more.
pub(crate) const MAX_OPERATION_BYTES: usize = 1024 * 1024;
/// How many bytes of one progress line's text are held; the rest is cut and said
/// (`… [12.3 KiB cut]`), as the logs view cuts its lines.
pub(crate) const OPERATION_LINE_BYTES: usize = 4 * 1024;

/// What the header names: fixed for the life of the dashboard (the target is [`AppState::target`]).
#[derive(Debug, Clone)]
pub struct Context {
    pub mesh: String,
    pub state_path: String,
    pub registry: Option<String>,
}

/// A module as the mesh declares it (the rows of the modules pane, sorted by tier then name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    pub name: String,
    /// The name in lower case: what the filter matches (made once, not at every key).
    pub lowercase: String,
    pub tier: u32,
    pub base: Option<String>,
    /// The modules it builds on: its base, then its named contexts' modules.
    pub builds_on: Vec<String>,
    pub policy: Policy,
}

/// How a source is doing: when it last answered, and its last error.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceStatus {
    pub ok_ms: Option<i64>,
    /// The last poll's error, with when it happened (cleared by a good answer).
    pub error: Option<(i64, String)>,
    pub polls: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pane {
    Modules,
    Machines,
    Builds,
    /// The followed operation's progress lines (a converge, a send, a rollback, a gc).
    Operation,
}

impl Pane {
    pub(crate) const ORDER: [Pane; 4] =
        [Pane::Modules, Pane::Machines, Pane::Builds, Pane::Operation];
}

/// What the detail overlay shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Detail {
    Module(String),
    Build(String),
    Machine(String),
    /// One line of the operation pane, by its event id.
    Event(i64),
    /// What gc would take (the dry run) and the keep set: `ViewState::gc`.
    Gc,
    /// Every target side by side: `ViewState::environments`.
    Environments,
    /// What the skip decision saves: `ViewState::stats`.
    Stats,
    /// Where an operation's time went (by its uuid): `ViewState::timeline`, or the operation
    /// pane's own timeline while it follows that operation.
    Timeline(String),
}

/// A confirmation: what exactly will happen, Cancel selected by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Confirm {
    pub title: String,
    pub lines: Vec<String>,
    /// The word on the button that goes ahead (`Send`, `Rebuild`, `Converge`, `Quit`).
    pub verb: String,
    pub then: ConfirmThen,
    /// False: Cancel is selected.
    pub go: bool,
}

/// What going ahead does.
// One value, held while its dialog is open: boxing the request would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfirmThen {
    Start(ActionRequest),
    /// Quit while an action started here runs: cancel it first (its builds are marked cancelled).
    CancelAndQuit,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub text: String,
    pub error: bool,
    pub at_ms: i64,
}

/// The operation pane: progress of the mesh's latest operation, followed through the state database.
#[derive(Debug, Clone, Default)]
pub struct OperationView {
    pub operation_id: Option<String>,
    /// Its short id within the mesh (`#142`), when it has one.
    pub operation: Option<i64>,
    /// What it is (`converge`, `force`, `send`, `rollback`, `gc`), when the database said.
    pub kind: Option<OperationKind>,
    /// What its start said (`converge of 3 module(s)`), for the header while it runs.
    pub started_with: Option<String>,
    pub lines: VecDeque<EventRow>,
    /// What `lines` take ([`EventRow::held_bytes`] summed), at most [`MAX_OPERATION_BYTES`].
    pub lines_bytes: usize,
    pub last_event_id: i64,
    /// The selected line, counted up from the last (0: the last line, following the tail).
    pub scroll: usize,
    /// The operation folded from its steps: each module's state in it, while it runs and after.
    pub live: Option<LiveOperation>,
    /// Who holds the mesh's lock, as the state database said at the last poll.
    pub holder: Option<LockHolder>,
    /// Its timeline, folded from the same steps (the timeline view draws it live).
    pub timeline: Option<crate::mesh::timeline::Timeline>,
}

impl OperationView {
    /// The pane's name for it: `rollback #5`, `converge #142`; `operation` before any is known.
    pub fn title(&self) -> String {
        let kind = self.kind.map_or("operation", OperationKind::as_str);
        match &self.operation_id {
            Some(id) => format!(
                "{kind} {}",
                crate::mesh::progress::operation_label(self.operation, id)
            ),
            None => kind.to_string(),
        }
    }

    /// Keep a progress line (its text cut at [`OPERATION_LINE_BYTES`]); the oldest lines go while
    /// more than [`MAX_OPERATION_LINES`] or [`MAX_OPERATION_BYTES`] are held. How many went.
    pub(crate) fn keep(&mut self, mut event: EventRow) -> usize {
        crate::mesh::text::cut_long_line(&mut event.text, OPERATION_LINE_BYTES);
        self.lines_bytes += event.held_bytes();
        self.lines.push_back(event);
        let mut dropped = 0;
        while self.lines.len() > 1
            && (self.lines.len() > MAX_OPERATION_LINES || self.lines_bytes > MAX_OPERATION_BYTES)
        {
            if let Some(old) = self.lines.pop_front() {
                self.lines_bytes -= old.held_bytes();
                dropped += 1;
            }
        }
        dropped
    }

    /// The line under the cursor (the last one while following).
    pub(crate) fn selected_line(&self) -> Option<&EventRow> {
        let last = self.lines.len().checked_sub(1)?;
        self.lines.get(last.saturating_sub(self.scroll))
    }
}

/// The action started here that runs now (one at a time), by what it is, with its label. Quitting
/// cancels a converge (its builds are marked cancelled) and waits for the others to end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Running {
    /// A converge or a forced rebuild.
    Converge(String),
    Send(String),
    Rollback(String),
    Gc(String),
    Promote(String),
}

impl Running {
    pub(crate) fn of(request: &ActionRequest) -> Running {
        let label = request.label();
        match request {
            ActionRequest::Converge { .. } | ActionRequest::UpdateUpstreams { .. } => {
                Running::Converge(label)
            }
            ActionRequest::Send { .. } => Running::Send(label),
            ActionRequest::Rollback { .. } => Running::Rollback(label),
            ActionRequest::Gc { .. } => Running::Gc(label),
            ActionRequest::Promote { .. } => Running::Promote(label),
        }
    }

    /// What it is, as the notices say it (`send api`, `converge mesh`).
    pub(crate) fn label(&self) -> &str {
        match self {
            Running::Converge(label)
            | Running::Send(label)
            | Running::Rollback(label)
            | Running::Gc(label)
            | Running::Promote(label) => label,
        }
    }
}

/// What of the screen depends on the clock: each source's age (seconds), row ages (minutes), and
/// while an operation runs its elapsed times (seconds).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ClockFace {
    ages: Vec<String>,
    minute: i64,
    running_second: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct AppState {
    pub context: Context,
    /// The target in words (kind, place, what a send does there): the header and the confirms say
    /// it; no file of the app or the widgets names a target kind. The main view shows this one.
    pub target: TargetDescription,
    /// Every target of the mesh in words, in the mesh file's order (`t` shows the next one).
    pub targets: Vec<TargetDescription>,
    pub readonly: bool,
    pub keys: KeyTable,
    /// Problems met on the way (bad key overrides…), shown on a warning line.
    pub warnings: Vec<String>,
    pub now_ms: i64,
    pub sources: [SourceStatus; 7],
    /// The registry's answers, module → answer (only when the mesh names a registry).
    pub registry_answers: BTreeMap<String, RegistryAnswer>,
    /// Every locked upstream against what its registry served when last asked.
    pub upstreams: Vec<UpstreamNow>,

    pub modules: Vec<ModuleInfo>,
    /// Indices into `modules` that pass the filter, ascending.
    pub visible: Vec<usize>,
    pub selected: usize,
    pub filter: String,
    /// The filter `visible` answers, in lower case: a longer filter that still holds it narrows
    /// `visible` instead of matching every module again.
    visible_for: String,

    pub plan: Option<Plan>,
    /// Module name → index in `plan.modules`.
    pub planned: HashMap<String, usize>,
    /// (module, planned ref) of every planned module whose ref is known, made once per plan: the
    /// pollers' parameters are derived after every message and share it rather than copy it.
    plan_refs: Arc<[(String, String)]>,
    pub record: Option<Record>,
    /// Who holds the mesh where the team meets (the namespace's Lease), read with the record.
    pub held_by: Option<HeldBy>,
    pub host: Option<Vec<HostImage>>,
    pub last_builds: BTreeMap<String, BuildRow>,
    pub made_by: BTreeMap<String, BuildRow>,
    /// Whether BUILT BY may answer from a signed provenance: the mesh trusts keys and names a
    /// registry.
    pub reads_provenance: bool,
    /// Running digest with no build row here → its signed provenance, as read (None: none a
    /// trusted key signed for it).
    pub provenance: BTreeMap<String, Loaded<Option<ReadProvenance>>>,
    /// Sorted by module then name; set through [`AppState::set_machines`].
    pub machines: Vec<Machine>,
    /// The record the machines' states were judged against, when the source says (a send's moves
    /// go to this record's artifact: the pair is one poll's, so the confirm is consistent).
    pub machines_record: Option<Record>,
    pub machine_ranges: HashMap<String, std::ops::Range<usize>>,
    /// The digests the machines run, sorted, each once: made with the listing, shared by the
    /// pollers' parameters.
    machine_digests: Arc<[String]>,
    pub machine_selected: usize,
    pub builds: BuildsWindow,
    /// `b`: the history follows the selected module (true) or shows the whole mesh.
    pub history_by_module: bool,
    pub operation: OperationView,
    /// The gc and stats views, the record's history and the pins.
    pub views: ViewState,
    /// The logs view (`l`), while open.
    pub logs: Option<LogView>,
    /// The streams asked for so far: a batch of an older one is dropped.
    pub logs_stream: u64,

    pub focus: Pane,
    pub mode: Mode,
    pub detail: Option<Detail>,
    /// Lines scrolled up from the end of the detail (0: its end, where a log's last words are).
    pub detail_scroll: usize,
    /// Whether the detail wraps long lines (`w` toggles; otherwise they are cut with `…`).
    pub detail_wrap: bool,
    pub help_scroll: usize,
    pub confirm: Option<Confirm>,
    pub running: Option<Running>,
    /// Quitting: the running action was asked to stop; quit when it has, or at this time.
    pub quit_after_ms: Option<i64>,
    /// Converge by itself once a change's plan shows something to build or deliver (off at start).
    pub auto_converge: bool,
    /// A change was seen with auto-converge on: converge when the plan it asked for answers.
    pub converge_on_plan: bool,
    /// The modules whose inputs changed last, and when (ms).
    pub changed: Option<(Vec<String>, i64)>,
    pub notice: Option<Notice>,
    pub size: (u16, u16),
    /// `NO_COLOR`: draw with modifiers only.
    pub no_color: bool,
    /// Ring the bell when a followed operation fails or a long one (> 30 s) finishes.
    pub bell: bool,
    /// Something visible changed since the last draw.
    pub dirty: bool,
    /// The clock's part of the screen as last drawn (or about to be: set whenever `dirty` is):
    /// a tick redraws when the face it shows now differs.
    pub(crate) clock_drawn: ClockFace,
}

impl AppState {
    /// The state of a dashboard on `mesh`, showing `target` (as the target seam describes it).
    pub fn new(
        mesh: &Mesh,
        target: TargetDescription,
        context: Context,
        readonly: bool,
        keys: KeyTable,
        now_ms: i64,
    ) -> AppState {
        let mut modules: Vec<ModuleInfo> = mesh
            .modules
            .iter()
            .map(|m| ModuleInfo {
                name: m.name.clone(),
                lowercase: m.name.to_lowercase(),
                tier: m.tier,
                base: m.base.clone(),
                builds_on: m.builds_on().into_iter().map(str::to_string).collect(),
                policy: m.policy,
            })
            .collect();
        modules.sort_by(|a, b| (a.tier, &a.name).cmp(&(b.tier, &b.name)));
        let visible = (0..modules.len()).collect();
        let first = modules.first().map(|m| m.name.clone());
        AppState {
            context,
            target,
            targets: Vec::new(),
            readonly,
            keys,
            warnings: Vec::new(),
            now_ms,
            sources: Default::default(),
            registry_answers: BTreeMap::new(),
            upstreams: Vec::new(),
            modules,
            visible,
            selected: 0,
            filter: String::new(),
            visible_for: String::new(),
            plan: None,
            planned: HashMap::new(),
            plan_refs: Arc::from([]),
            record: None,
            held_by: None,
            host: None,
            last_builds: BTreeMap::new(),
            made_by: BTreeMap::new(),
            reads_provenance: !mesh.signing.trust.is_empty() && mesh.registry.is_some(),
            provenance: BTreeMap::new(),
            machines: Vec::new(),
            machines_record: None,
            machine_ranges: HashMap::new(),
            machine_digests: Arc::from([]),
            machine_selected: 0,
            builds: BuildsWindow::new(first),
            history_by_module: true,
            operation: OperationView::default(),
            views: Default::default(),
            logs: None,
            logs_stream: 0,
            focus: Pane::Modules,
            mode: Mode::Normal,
            detail: None,
            detail_scroll: 0,
            bell: true,
            detail_wrap: true,
            help_scroll: 0,
            confirm: None,
            running: None,
            quit_after_ms: None,
            notice: None,
            auto_converge: false,
            converge_on_plan: false,
            changed: None,
            size: (0, 0),
            no_color: false,
            dirty: true,
            clock_drawn: ClockFace::default(),
        }
    }

    /// Show a one-line notice (an error in the error style).
    pub(crate) fn notify(&mut self, text: String, error: bool) {
        self.notice = Some(Notice {
            text,
            error,
            at_ms: self.now_ms,
        });
        self.dirty = true;
    }

    /// Start an action, unless one started here still runs (one at a time: say so instead).
    pub(crate) fn start(&mut self, request: ActionRequest) -> Vec<Effect> {
        if let Some(running) = &self.running {
            let text = format!("{} is still running; wait for it to end", running.label());
            self.notify(text, true);
            return Vec::new();
        }
        let running = Running::of(&request);
        self.notify(format!("{}: started", running.label()), false);
        self.running = Some(running);
        vec![Effect::Start(request)]
    }

    /// When the history follows the selected module and the selection moved, ask for its builds.
    pub(crate) fn sync_history_scope(&mut self) -> Vec<Effect> {
        let wanted = self.wanted_history_scope();
        if wanted == self.builds.scope {
            return Vec::new();
        }
        vec![Effect::FetchBuilds(self.builds.rescope(wanted))]
    }

    /// What of the screen depends on the clock, now.
    pub(crate) fn clock_face(&self) -> ClockFace {
        let ages = self
            .sources
            .iter()
            .map(|s| {
                s.ok_ms
                    .map(|at| crate::timefmt::age_since(at, self.now_ms))
                    .unwrap_or_default()
            })
            .collect();
        ClockFace {
            ages,
            minute: self.now_ms / 60_000,
            running_second: self.live_running().map(|_| self.now_ms / 1000),
        }
    }

    /// The upstreams `module`'s Dockerfile names whose registries serve another digest than the
    /// lock holds.
    pub(crate) fn moved_upstreams(&self, module: &str) -> Vec<&UpstreamNow> {
        self.upstreams
            .iter()
            .filter(|u| u.moved() && u.modules.iter().any(|m| m == module))
            .collect()
    }

    pub fn source(&self, id: SourceId) -> &SourceStatus {
        &self.sources[id.index()]
    }

    /// The module under the cursor.
    pub fn selected_module(&self) -> Option<&ModuleInfo> {
        self.visible
            .get(self.selected)
            .and_then(|&i| self.modules.get(i))
    }

    pub(crate) fn planned(&self, module: &str) -> Option<&PlannedModule> {
        let plan = self.plan.as_ref()?;
        self.planned.get(module).and_then(|&i| plan.modules.get(i))
    }

    /// The machines of one module, in name order.
    pub fn machines_of(&self, module: &str) -> &[Machine] {
        match self.machine_ranges.get(module) {
            Some(range) => self.machines.get(range.clone()).unwrap_or(&[]),
            None => &[],
        }
    }

    /// Hold a new machine listing, sorted by module then name, indexed by module; whether it
    /// differs from the one held.
    pub(crate) fn set_machines(&mut self, mut machines: Vec<Machine>) -> bool {
        machines.sort_by(|a, b| (&a.module, &a.name).cmp(&(&b.module, &b.name)));
        if machines == self.machines {
            return false;
        }
        self.machine_ranges.clear();
        let mut start = 0;
        for i in 1..=machines.len() {
            if i == machines.len() || machines[i].module != machines[start].module {
                self.machine_ranges
                    .insert(machines[start].module.clone(), start..i);
                start = i;
            }
        }
        let mut digests: Vec<String> = machines
            .iter()
            .flat_map(|m| m.running.iter().cloned())
            .collect();
        digests.sort();
        digests.dedup();
        self.machine_digests = digests.into();
        self.machines = machines;
        let count = self.selected_machines().len();
        self.machine_selected = self.machine_selected.min(count.saturating_sub(1));
        true
    }

    /// The machines of the selected module.
    pub(crate) fn selected_machines(&self) -> Vec<&Machine> {
        match self.selected_module() {
            Some(module) => self.machines_of(&module.name).iter().collect(),
            None => Vec::new(),
        }
    }

    /// Recompute the rows passing the filter, keeping the cursor on the same module when it stays.
    /// A filter that holds the one `visible` answers (a character typed) only narrows those rows.
    pub(crate) fn refilter(&mut self) {
        let keep = self.visible.get(self.selected).copied();
        let needle = self.filter.to_lowercase();
        if needle.is_empty() {
            self.visible = (0..self.modules.len()).collect();
        } else {
            let modules = &self.modules;
            let passes = |&i: &usize| {
                modules
                    .get(i)
                    .is_some_and(|m| m.lowercase.contains(&needle))
            };
            if needle.contains(&self.visible_for) {
                self.visible.retain(passes);
            } else {
                self.visible = (0..modules.len()).filter(passes).collect();
            }
        }
        self.visible_for = needle;
        self.selected = keep
            .and_then(|i| self.visible.binary_search(&i).ok())
            .unwrap_or(0);
    }

    pub(crate) fn set_plan(&mut self, plan: Plan) {
        self.planned = plan
            .modules
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.clone(), i))
            .collect();
        self.plan_refs = plan
            .modules
            .iter()
            .filter_map(|m| Some((m.name.clone(), m.reference.clone()?)))
            .collect();
        self.plan = Some(plan);
    }

    /// Forget the plan (another target is shown: its plan is asked for).
    pub(crate) fn clear_plan(&mut self) {
        self.plan = None;
        self.planned.clear();
        self.plan_refs = Arc::from([]);
    }

    /// The history scope the `b` toggle and the cursor ask for.
    pub(crate) fn wanted_history_scope(&self) -> Option<String> {
        if self.history_by_module {
            self.selected_module().map(|m| m.name.clone())
        } else {
            None
        }
    }

    /// What the pollers need to know, derived from the state (after every message: what is large
    /// is shared, not copied).
    pub fn poll_params(&self) -> PollParams {
        // The artifacts of the selected module's record history: a rollback's confirm names the
        // builds that made them.
        let mut stamp_digests: Vec<String> = Vec::new();
        if let Some(module) = self.selected_module() {
            for stamp in self.views.stamps_of(&module.name).unwrap_or(&[]) {
                stamp_digests.push(stamp.to_digest.clone());
                stamp_digests.extend(stamp.from_digest.clone());
            }
        }
        stamp_digests.sort();
        stamp_digests.dedup();
        let history_opened = match &self.detail {
            Some(Detail::Module(module)) => Some(module.clone()),
            _ => None,
        };
        PollParams {
            target: Some(self.target.name.clone()),
            history_module: self.builds.scope.clone(),
            events_after: self.operation.last_event_id,
            digests: self.machine_digests.clone(),
            stamp_digests,
            page_size: PAGE_SIZE,
            refs: self.plan_refs.clone(),
            stamps_module: history_opened
                .clone()
                .or_else(|| self.selected_module().map(|m| m.name.clone())),
            history_opened,
        }
    }

    /// The build that made or published a digest, when the history knows it.
    pub(crate) fn build_of(&self, digest: &str) -> Option<&BuildRow> {
        self.made_by.get(digest)
    }

    /// What the signed provenance of a running digest says, as far as it was read (a digest never
    /// asked for: not read).
    pub(crate) fn provenance_of(&self, digest: &str) -> Option<&Loaded<Option<ReadProvenance>>> {
        self.provenance.get(digest)
    }

    /// The operation being followed and where it stands (running, finished, or its process gone).
    pub fn followed(&self) -> Option<(&LiveOperation, OperationState)> {
        let live = self.operation.live.as_ref()?;
        Some((live, live.state(self.operation.holder.as_ref())))
    }

    /// The operation that runs now, from this or any process: the table shows its modules' states.
    pub(crate) fn live_running(&self) -> Option<&LiveOperation> {
        self.followed()
            .filter(|(_, state)| *state == OperationState::Running)
            .map(|(live, _)| live)
    }

    /// The machines of a module that run another artifact than the record's.
    pub(crate) fn behind_machines(&self, module: &str) -> Vec<&Machine> {
        self.machines_of(module)
            .iter()
            .filter(|m| m.state.is_behind())
            .collect()
    }

    /// Machine counts of a module.
    pub fn machine_counts(&self, module: &str) -> MachineCounts {
        let mut counts = MachineCounts::default();
        for machine in self.machines_of(module) {
            counts.total += 1;
            match machine.state {
                MachineState::Current => counts.current += 1,
                MachineState::Behind => counts.behind += 1,
                MachineState::Held | MachineState::Paused => counts.held += 1,
                MachineState::Missing => counts.missing += 1,
                MachineState::Unrecorded | MachineState::UnknownContainer => {}
            }
        }
        counts
    }
}

/// How a module's machines stand against the record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MachineCounts {
    pub current: usize,
    pub behind: usize,
    pub held: usize,
    /// Declared machines that do not exist.
    pub missing: usize,
    pub total: usize,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::progress::{Payload, Step};

    fn output(id: i64, text: String) -> EventRow {
        EventRow {
            id,
            at_ms: id,
            mesh: "demo".into(),
            operation_id: "c1".into(),
            operation: Some(1),
            operation_kind: Some(OperationKind::Converge),
            step: Step::Output,
            module: Some("api".into()),
            text,
            payload: Some(Payload::output("x")),
        }
    }

    #[test]
    fn operation_lines_are_bounded_by_bytes_and_long_ones_cut() {
        let mut view = OperationView::default();
        view.keep(output(1, "x".repeat(OPERATION_LINE_BYTES)));
        assert_eq!(view.lines[0].text.len(), OPERATION_LINE_BYTES);
        view.keep(output(2, "y".repeat(OPERATION_LINE_BYTES + 12_595)));
        assert_eq!(
            view.lines[1].text,
            format!("{} … [12.3 KiB cut]", "y".repeat(OPERATION_LINE_BYTES))
        );
        let mut dropped = 0;
        for n in 3..3_000 {
            dropped += view.keep(output(n, "z".repeat(16 * 1024)));
            assert!(view.lines_bytes <= MAX_OPERATION_BYTES, "after {n} lines");
        }
        assert_eq!(dropped + view.lines.len(), 2_999);
        assert!(
            view.lines.len() < MAX_OPERATION_LINES,
            "{}",
            view.lines.len()
        );
        let held: usize = view.lines.iter().map(EventRow::held_bytes).sum();
        assert_eq!(held, view.lines_bytes);
        // Short lines: the count bounds them, as before.
        let mut view = OperationView::default();
        for n in 0..1_000 {
            view.keep(output(n, format!("line {n}")));
        }
        assert_eq!(view.lines.len(), MAX_OPERATION_LINES);
        assert_eq!(view.lines[0].text, "line 500");
    }
}
