//! The state database: build records, the newest progress events, the builds that made what
//! machines run, the selected module's record history and the pinned modules.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::app::msg::{PollParams, SourceData, SourceError, StateSnapshot};
use crate::backends::state::{BuildQuery, StateDb, StateError, locked};
use crate::mesh::builds::BuildRow;
use crate::mesh::live::LockHolder;

use super::poll::BoxFuture;
use super::session::Session;

/// Events read per history poll (the first poll reads the tail of the latest ones).
const EVENTS_PER_POLL: usize = 500;
/// The record's history shown of the selected module: its newest stamps.
const STAMPS_SHOWN: usize = 50;
/// At most this many running digests are traced back to their builds per poll.
const MAX_TRACED: usize = 200;

pub(crate) fn poll(
    session: Arc<Session>,
    params: PollParams,
) -> BoxFuture<Result<SourceData, SourceError>> {
    let mesh = session.mesh.name.clone();
    let target = session.target_name(params.target.as_deref()).to_string();
    Box::pin(async move {
        session
            .db(move |db| {
                let db = locked(db)?;
                // The events and the lock on one snapshot: they must agree on whether the newest
                // operation still runs (a converge that just ended is not "gone" for a poll).
                Ok(db.on_one_snapshot(|db| read(db, (&mesh, &target), params))?)
            })
            .await
    })
}

fn read(
    db: &StateDb,
    (mesh, target): (&str, &str),
    params: PollParams,
) -> Result<SourceData, StateError> {
    let mesh = mesh.to_string();
    let holder = db.mesh_holder(&mesh, target)?.map(|h| LockHolder {
        alive: !h.is_dead(crate::timefmt::now_ms()),
        operation_id: h.operation_id,
        host: h.host,
        pid: h.pid,
        heartbeat_ms: h.heartbeat_ms,
    });
    let last_builds = db.last_builds(&mesh)?;
    let query = BuildQuery {
        mesh: mesh.clone(),
        module: params.history_module.clone(),
        failed_only: false,
        limit: params.page_size.max(1),
        before: None,
    };
    let page = db.builds(&query)?;
    // First poll: the tail only, not every kept event in batches.
    let mut events = if params.events_after == 0 {
        db.events_tail_on(&mesh, Some(target), EVENTS_PER_POLL)?
    } else {
        Vec::new()
    };
    let mut after = events.last().map_or(params.events_after, |row| row.id);
    loop {
        let batch = db.events_after_on(&mesh, Some(target), after, EVENTS_PER_POLL)?;
        let full = batch.len() == EVENTS_PER_POLL;
        after = batch.last().map_or(after, |row| row.id);
        events.extend(batch);
        if events.len() > EVENTS_PER_POLL {
            events.drain(..events.len() - EVENTS_PER_POLL);
        }
        if !full {
            break;
        }
    }
    let latest_operation = db.latest_operation_on(&mesh, Some(target))?;
    let mut made_by: BTreeMap<String, BuildRow> = BTreeMap::new();
    let mut unbuilt = Vec::new();
    for digest in params.traced_digests().into_iter().take(MAX_TRACED) {
        match db.build_by_digest(&mesh, digest)? {
            Some(row) => {
                made_by.insert(digest.clone(), row);
            }
            None => unbuilt.push(digest.clone()),
        }
    }
    let stamps = match &params.stamps_module {
        Some(module) => Some((
            module.clone(),
            db.stamps(&mesh, target, module, STAMPS_SHOWN)?,
        )),
        None => None,
    };
    let pins = db.pins(&mesh, target)?;
    Ok(SourceData::State(Box::new(StateSnapshot {
        last_builds,
        scope: params.history_module,
        page,
        events,
        latest_operation,
        made_by,
        unbuilt,
        holder,
        stamps,
        pins,
    })))
}
