//! A poll's answer into the state: the plan (and the auto-converge it may start), the record, the
//! host, the machines, the registry, and the history — whose progress steps the operation pane shows
//! and fold into the running operation each module's state in it. An answer equal to what the
//! state holds changes nothing and marks nothing to draw.

use crate::mesh::decide::Decision;
use crate::mesh::live::LiveOperation;
use crate::mesh::progress::Step;

use super::msg::{ActionRequest, Effect, SourceData, SourceId, StateSnapshot};
use super::state::{AppState, Detail};

pub(super) fn polled(state: &mut AppState, data: SourceData, at_ms: i64) -> Vec<Effect> {
    match data {
        SourceData::Plan(plan) => {
            let work = plan.modules.iter().any(|m| m.decision != Decision::Record);
            if state.plan.as_ref() != Some(&*plan) {
                state.set_plan(*plan);
                state.dirty = true;
            }
            if std::mem::take(&mut state.converge_on_plan) && work && !state.readonly {
                return state.start(ActionRequest::Converge {
                    modules: None,
                    force: false,
                });
            }
        }
        SourceData::Record(record, held_by) => {
            if state.record.as_ref() != Some(&record) {
                state.record = Some(record);
                state.dirty = true;
            }
            if state.held_by != held_by {
                state.held_by = held_by;
                state.dirty = true;
            }
            // The open module's history came with this answer into the state database: read it
            // there now rather than at the next history poll, until it is shown.
            if let Some(Detail::Module(module)) = &state.detail
                && state.views.stamps_of(module).is_none()
            {
                return vec![Effect::PollNow(vec![SourceId::State])];
            }
        }
        SourceData::Host(images) => {
            if state.host.as_ref() != Some(&images) {
                state.host = Some(images);
                state.dirty = true;
            }
        }
        SourceData::MachinesAgainst(record, machines) => {
            let record_moved = state.machines_record.as_ref() != Some(&record);
            state.machines_record = Some(record);
            if state.set_machines(machines) || record_moved {
                state.dirty = true;
            }
        }
        SourceData::Registry(answers) => {
            if state.registry_answers != answers {
                state.registry_answers = answers;
                state.dirty = true;
            }
        }
        SourceData::Upstreams(answers) => {
            if state.upstreams != answers {
                state.upstreams = answers;
                state.dirty = true;
            }
        }
        SourceData::State(snapshot) => return history(state, *snapshot, at_ms),
    }
    Vec::new()
}

/// A history poll: builds, the record's history and pins, the lock's holder, and the steps of the
/// mesh's operations since the last one read.
fn history(state: &mut AppState, mut snapshot: StateSnapshot, at_ms: i64) -> Vec<Effect> {
    let mut changed = super::views::note_history(state, &mut snapshot);
    changed |= state.last_builds != snapshot.last_builds || state.made_by != snapshot.made_by;
    state.last_builds = snapshot.last_builds;
    state.made_by = snapshot.made_by;
    let mut effects = super::provenance::wanted(state, &snapshot.unbuilt);
    changed |= state
        .builds
        .refresh_head(&snapshot.scope, snapshot.page, at_ms);
    let view = &mut state.operation;
    changed |=
        view.holder != snapshot.holder || snapshot.events.iter().any(|e| e.id > view.last_event_id);
    view.holder = snapshot.holder;
    if view.operation_id.is_none() && snapshot.latest_operation.is_some() {
        view.operation_id = snapshot.latest_operation;
        changed = true;
    }
    let mut newest_word = None;
    // The first poll reads the past: nothing of it rings.
    let live = view.last_event_id > 0;
    let mut ended_here = false;
    let last_seen = view.last_event_id;
    for event in crate::mesh::progress::unseen(snapshot.events, last_seen) {
        view.last_event_id = view.last_event_id.max(event.id);
        if view.operation_id.as_deref() != Some(event.operation_id.as_str()) {
            view.operation_id = Some(event.operation_id.clone());
            view.operation = None;
            view.kind = None;
            view.started_with = None;
            view.lines.clear();
            view.lines_bytes = 0;
            view.scroll = 0;
            view.live = None;
            view.timeline = None;
        }
        view.operation = event.operation.or(view.operation);
        view.kind = event.operation_kind.or(view.kind);
        view.live
            .get_or_insert_with(|| LiveOperation::new(&event))
            .apply(&event);
        super::timeline::fold(view, &event);
        if event.step == Step::Started {
            view.started_with = Some(event.text.clone());
        }
        if matches!(event.step, Step::Started | Step::Finished) {
            newest_word = Some(event.clone());
        }
        ended_here |= live && event.step == Step::Finished;
        if !event.step.is_line() {
            continue;
        }
        view.keep(event);
        // The selected line stays selected while lines arrive under it.
        if view.scroll > 0 {
            view.scroll += 1;
        }
    }
    view.scroll = view.scroll.min(view.lines.len().saturating_sub(1));
    if changed {
        state.dirty = true;
    }
    // The plan the table falls back to was made before the operation: ask for a fresh one.
    if ended_here {
        effects.push(Effect::PollNow(vec![
            SourceId::Plan,
            SourceId::Record,
            SourceId::Host,
            SourceId::Machines,
        ]));
    }
    if let Some(event) = newest_word {
        effects.extend(super::follow::follow_operation(state, &event, live));
    }
    effects
}
