//! A poll's answer into the state: the plan (and the auto-converge it may start), the record, the
//! host, the machines, the registry, and the history — whose progress steps the converge pane shows
//! and fold into the running operation each module's state in it.

use crate::mesh::live::LiveOperation;
use crate::mesh::progress::Step;

use super::msg::{Effect, SourceData, SourceId};
use super::state::{AppState, MAX_CONVERGE_LINES};
use super::update::start;

pub(super) fn polled(state: &mut AppState, data: SourceData, at_ms: i64) -> Vec<Effect> {
    match data {
        SourceData::Plan(plan) => {
            let work = plan
                .modules
                .iter()
                .any(|m| m.decision != crate::mesh::decide::Decision::Record);
            state.set_plan(*plan);
            if std::mem::take(&mut state.converge_on_plan) && work && !state.readonly {
                return start(
                    state,
                    super::msg::ActionRequest::Converge {
                        modules: None,
                        force: false,
                    },
                );
            }
        }
        SourceData::Record(record) => state.record = Some(record),
        SourceData::Host(images) => state.host = Some(images),
        SourceData::Machines(machines) => state.set_machines(machines),
        SourceData::MachinesAgainst(record, machines) => {
            state.machines_record = Some(record);
            state.set_machines(machines);
        }
        SourceData::Registry(answers) => state.registry_answers = answers,
        SourceData::State(snapshot) => {
            let mut snapshot = *snapshot;
            super::views::note_history(state, &mut snapshot);
            state.last_builds = snapshot.last_builds;
            state.made_by = snapshot.made_by;
            state
                .builds
                .refresh_head(&snapshot.scope, snapshot.page, at_ms);
            let view = &mut state.converge;
            view.holder = snapshot.holder;
            if view.operation_id.is_none() {
                view.operation_id = snapshot.latest_operation;
            }
            let mut newest_word = None;
            // The first poll reads the past: nothing of it rings.
            let live = view.last_event_id > 0;
            let mut ended_here = false;
            for event in snapshot.events {
                view.last_event_id = view.last_event_id.max(event.id);
                if view.operation_id.as_deref() != Some(event.operation_id.as_str()) {
                    view.operation_id = Some(event.operation_id.clone());
                    view.operation = None;
                    view.lines.clear();
                    view.scroll = 0;
                    view.live = None;
                }
                view.operation = event.operation.or(view.operation);
                view.live
                    .get_or_insert_with(|| LiveOperation::new(&event))
                    .apply(&event);
                if matches!(event.step, Step::Started | Step::Finished) {
                    newest_word = Some(event.clone());
                }
                ended_here |= live && event.step == Step::Finished;
                // Queued steps are the table's (each module's state), not lines to read.
                if event.step == Step::Queued {
                    continue;
                }
                view.lines.push_back(event);
                // The selected line stays selected while lines arrive under it.
                if view.scroll > 0 {
                    view.scroll += 1;
                }
                if view.lines.len() > MAX_CONVERGE_LINES {
                    view.lines.pop_front();
                }
            }
            view.scroll = view.scroll.min(view.lines.len().saturating_sub(1));
            let mut effects = Vec::new();
            // The plan the table falls back to was made before the converge: ask for a fresh one.
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
            return effects;
        }
    }
    Vec::new()
}
