//! Progress of an operation (converge, send, rollback, gc): each step goes to the state database (so another process can follow it
//! live) and to an optional channel (the command's stderr, the dashboard).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc::UnboundedSender;

use crate::backends::state::{NewEvent, StateDb};
use crate::mesh::operation::OperationKind;
pub use crate::mesh::progress::{LastWord, Payload, Progress, Step};
use crate::mesh::timeline::Timeline;

pub type ProgressTx = UnboundedSender<Progress>;

/// Writes each step to the database and the channel; a step the database cannot take is logged,
/// never fatal (the build records themselves are written separately, and those are required).
/// Steps that come in a burst with no work between them (a tier's decisions) can be deferred: they
/// reach the channel at once and the database in one write, before the next step that is not.
#[derive(Clone)]
pub struct Emitter {
    db: Arc<Mutex<StateDb>>,
    pub mesh: String,
    /// The target of the mesh the operation acts on (and holds).
    pub target: String,
    pub operation_id: String,
    /// The operation's short id within the mesh (`#142`); None when the database would not give one.
    pub operation: Option<i64>,
    tx: Option<ProgressTx>,
    deferred: Arc<Mutex<Vec<NewEvent>>>,
    /// When the operation began (ms since the epoch): a provenance's `startedOn` without a build row.
    pub started_ms: i64,
    /// The operation's timeline, folded from each step as it is emitted (timed then, not when a
    /// deferred step is written) and kept when it ends; None when `MESHTOP_TIMELINE=off`.
    timeline: Option<Arc<Mutex<Timeline>>>,
}

/// Whether operations keep their timeline: on unless the command line turned it off
/// (`MESHTOP_TIMELINE=off`, what the recording's overhead is measured against).
static RECORD_TIMELINES: AtomicBool = AtomicBool::new(true);

/// Keep (or not) the timeline of the operations this process runs from now on.
pub fn record_timelines(on: bool) {
    RECORD_TIMELINES.store(on, Ordering::Relaxed);
}

fn records_timeline() -> bool {
    RECORD_TIMELINES.load(Ordering::Relaxed)
}

impl Emitter {
    /// An emitter for the operation `operation_id` of kind `kind` (`converge`, `force`, `send`…)
    /// on `target`, which is given its short id within the mesh here.
    pub fn new(
        db: Arc<Mutex<StateDb>>,
        mesh: &str,
        target: &str,
        operation_id: &str,
        kind: OperationKind,
        tx: Option<ProgressTx>,
    ) -> Emitter {
        let operation = match db.lock() {
            Ok(db) => match db.begin_operation(mesh, target, kind, operation_id) {
                Ok(id) => Some(id.number),
                Err(error) => {
                    tracing::warn!("cannot give operation {operation_id} a short id: {error}");
                    None
                }
            },
            Err(_) => None,
        };
        Emitter {
            db,
            mesh: mesh.to_string(),
            target: target.to_string(),
            operation_id: operation_id.to_string(),
            operation,
            tx,
            deferred: Arc::new(Mutex::new(Vec::new())),
            started_ms: crate::timefmt::now_ms(),
            timeline: records_timeline()
                .then(|| Arc::new(Mutex::new(Timeline::new(operation_id, operation)))),
        }
    }

    /// The newest build of `module` this machine recorded in the operation's mesh (None: none, or
    /// the state file could not be read): what a provenance of its artifact says of its build.
    pub(crate) fn last_build(&self, module: &str) -> Option<crate::mesh::builds::BuildRow> {
        let db = crate::backends::state::locked(&self.db).ok()?;
        db.last_builds(&self.mesh).ok()?.remove(module)
    }

    /// The build of this machine that produced image `id` in the operation's mesh (None: none,
    /// or the state file could not be read).
    pub(crate) fn build_of(&self, id: &str) -> Option<crate::mesh::builds::BuildRow> {
        let db = crate::backends::state::locked(&self.db).ok()?;
        db.build_by_digest(&self.mesh, id).ok()?
    }

    /// The ref and manifest this machine pulled image `id` as after verifying it (None: never, or
    /// the state file could not be read).
    pub(crate) fn verified_pull_of(&self, id: &str) -> Option<(String, String)> {
        let db = crate::backends::state::locked(&self.db).ok()?;
        db.verified_pull(&self.mesh, id).ok()?
    }

    /// The inputs digest of `module`'s `reference` as this machine's plan computed it when a
    /// build of that ref succeeded (the input manifest kept with it); None: never built here.
    pub(crate) fn planned_inputs(&self, module: &str, reference: &str) -> Option<String> {
        let manifest = self.planned_manifest(module, reference)?;
        Some(crate::mesh::manifest::digest_of(&manifest))
    }

    /// The input manifest this machine saved with its build of `reference`.
    pub(crate) fn planned_manifest(
        &self,
        module: &str,
        reference: &str,
    ) -> Option<crate::mesh::manifest::Manifest> {
        let db = crate::backends::state::locked(&self.db).ok()?;
        let json = db.manifest(&self.mesh, module, reference).ok()??;
        serde_json::from_str(&json).ok()
    }

    /// A step: its payload (which names the step) and its text for people.
    fn step(&self, payload: Payload, module: Option<&str>, text: String) -> NewEvent {
        // Builder output and errors carry colours: stored and shown plain.
        let text = crate::mesh::text::plain(&text).into_owned();
        let step = payload.step();
        if let Some(timeline) = &self.timeline
            && let Ok(mut timeline) = timeline.lock()
        {
            timeline.fold(crate::timefmt::now_ms(), module, &payload, &text);
        }
        let event = NewEvent {
            mesh: self.mesh.clone(),
            operation_id: self.operation_id.clone(),
            kind: step.as_str().to_string(),
            module: module.map(str::to_string),
            text: text.clone(),
            payload: Some(payload.clone()),
        };
        let progress = Progress {
            step,
            module: event.module.clone(),
            text,
            payload,
        };
        if let Some(tx) = &self.tx {
            let _ = tx.send(progress);
        }
        event
    }

    /// Record a step now (after any deferred ones).
    pub(crate) fn emit(&self, payload: Payload, module: Option<&str>, text: impl Into<String>) {
        let event = self.step(payload, module, text.into());
        let mut batch = self.take_deferred();
        batch.push(event);
        self.write(&batch);
    }

    /// Record a step with the next write.
    pub(crate) fn defer(&self, payload: Payload, module: Option<&str>, text: impl Into<String>) {
        let event = self.step(payload, module, text.into());
        match self.deferred.lock() {
            Ok(mut deferred) => deferred.push(event),
            Err(_) => self.write(&[event]),
        }
    }

    /// Record the last step and release the mesh's lock (taken under this emitter's operation id),
    /// in one write.
    pub(crate) fn finish(&self, last: LastWord) {
        let event = self.step(last.payload(), None, last.text);
        let mut batch = self.take_deferred();
        batch.push(event);
        let Ok(db) = self.db.lock() else {
            tracing::warn!(
                "the state database handle is poisoned; the mesh's lock stays until it is taken over"
            );
            return;
        };
        let timeline = self.timeline();
        if let Err(error) = db.finish_operation(
            &batch,
            &self.mesh,
            &self.target,
            &self.operation_id,
            timeline.as_ref(),
        ) {
            tracing::warn!("cannot record the end of the operation: {error}");
            // The events could not be written: the mesh must still be freed.
            if let Err(error) = db.unlock_mesh(&self.mesh, &self.target, &self.operation_id) {
                tracing::warn!("cannot release the mesh's lock: {error}");
            }
        }
    }

    /// The timeline so far (None when none is recorded).
    pub(crate) fn timeline(&self) -> Option<Timeline> {
        self.timeline.as_ref()?.lock().ok().map(|t| t.clone())
    }

    fn take_deferred(&self) -> Vec<NewEvent> {
        self.deferred
            .lock()
            .map(|mut d| std::mem::take(&mut *d))
            .unwrap_or_default()
    }

    fn write(&self, events: &[NewEvent]) {
        let written = match self.db.lock() {
            Ok(db) => db.append_events(events),
            Err(_) => {
                tracing::warn!("the state database handle is poisoned; events not recorded");
                return;
            }
        };
        if let Err(error) = written {
            tracing::warn!("cannot record the operation's events: {error}");
        }
    }
}
