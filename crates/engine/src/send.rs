//! Send: move a module's behind machines to the record's artifact, each move recorded.

use std::sync::{Arc, Mutex};

use serde::Serialize;

use super::error::SendError;
use super::progress::{Emitter, LastWord, Payload};
use super::targets::{Reach, Target};
use crate::backends::daemon::LazyDaemon;
use crate::backends::state::{SendRow, StateDb};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};

pub use crate::mesh::machine::{Move, moves_for, side_by_side};
use crate::mesh::model::{Mesh, RecordEntry};
use crate::mesh::operation::OperationKind;
use crate::timefmt;

#[derive(Debug, Clone, Serialize)]
pub struct SendOutcome {
    #[serde(flatten)]
    pub moved: Move,
    pub ok: bool,
    pub message: String,
}

/// Carry out `moves`, module after module; a module's machines side by side, at most its cap
/// ([`side_by_side`]) at once, each waiting its turn said live. Every outcome is recorded, in the
/// order of `moves`.
pub async fn send(
    mesh: &Mesh,
    moves: &[Move],
    daemon: &LazyDaemon,
    target: &dyn Target,
    db: &Arc<Mutex<StateDb>>,
    emitter: &Emitter,
) -> Vec<SendOutcome> {
    // Before anything changes: may we move these machines, to these artifacts?
    let refused = match target.check_write_access(false, moves).await {
        Ok(()) => signed_where_required(mesh, target, moves, db)
            .await
            .err()
            .map(|unsigned| unsigned.to_string()),
        Err(refused) => Some(refused.to_string()),
    };
    if let Some(refused) = refused {
        let outcomes = moves
            .iter()
            .map(|moved| SendOutcome {
                moved: moved.clone(),
                ok: false,
                message: refused.clone(),
            })
            .collect();
        emitter.emit(Payload::Refused, None, refused);
        return outcomes;
    }
    let one = OneSend {
        mesh,
        daemon,
        target,
        db,
        emitter,
        lost: Mutex::new(None),
    };
    let mut outcomes = Vec::with_capacity(moves.len());
    let mut rest = moves;
    while let Some(first) = rest.first() {
        let same = rest.iter().take_while(|m| m.module == first.module).count();
        let (group, after) = rest.split_at(same);
        rest = after;
        let cap = side_by_side(
            mesh.module(&first.module).and_then(|m| m.max_unavailable),
            first.of_module.max(group.len()),
        );
        for waiting in group.iter().skip(cap) {
            emitter.emit(
                Payload::Rollout {
                    machine: waiting.machine.clone(),
                },
                Some(&waiting.module),
                format!(
                    "{}: waits its turn: {cap} of {}'s {} machine(s) move at once (max_unavailable)",
                    waiting.machine,
                    waiting.module,
                    first.of_module.max(group.len())
                ),
            );
        }
        // Up to `cap` at once; each that ends lets the next waiting one begin.
        let mut sent: Vec<(usize, SendOutcome)> = Vec::with_capacity(group.len());
        let mut moving = FuturesUnordered::new();
        let mut waiting = group.iter().enumerate();
        loop {
            while moving.len() < cap {
                let Some((index, moved)) = waiting.next() else {
                    break;
                };
                moving.push(one.run(moved).map(move |outcome| (index, outcome)));
            }
            match moving.next().await {
                Some(done) => sent.push(done),
                None => break,
            }
        }
        sent.sort_by_key(|(index, _)| *index);
        outcomes.extend(sent.into_iter().map(|(_, outcome)| outcome));
    }
    outcomes
}

/// What each machine's send needs, and whether the mesh was lost on the way (every send after is
/// then not made).
struct OneSend<'a> {
    mesh: &'a Mesh,
    daemon: &'a LazyDaemon,
    target: &'a dyn Target,
    db: &'a Arc<Mutex<StateDb>>,
    emitter: &'a Emitter,
    lost: Mutex<Option<String>>,
}

impl OneSend<'_> {
    /// Send one machine: only while this operation still holds the mesh; its outcome recorded.
    async fn run(&self, moved: &Move) -> SendOutcome {
        let (mesh, emitter) = (self.mesh, self.emitter);
        let lost = self.lost.lock().ok().and_then(|l| l.clone());
        let held = match lost {
            Some(error) => Err(error),
            None => self
                .target
                .still_holds(self.db, &mesh.name, &emitter.operation_id)
                .await
                .map_err(|error| {
                    let said = error.to_string();
                    emitter.emit(
                        Payload::Failed {
                            error: said.clone(),
                        },
                        Some(&moved.module),
                        said.clone(),
                    );
                    if let Ok(mut lost) = self.lost.lock() {
                        *lost = Some(said.clone());
                    }
                    said
                }),
        };
        if let Err(error) = held {
            return SendOutcome {
                moved: moved.clone(),
                ok: false,
                message: format!("not sent: {error}"),
            };
        }
        emitter.emit(
            Payload::Send {
                machine: moved.machine.clone(),
                from: moved.from.clone(),
                to_reference: moved.to_reference.clone(),
                to_digest: moved.to_digest.clone(),
            },
            Some(&moved.module),
            format!(
                "{}: {} → {}@{}",
                moved.machine, moved.from, moved.to_reference, moved.to_digest
            ),
        );
        let reach = Reach {
            daemon: self.daemon,
            db: self.db.as_ref(),
        };
        let result = self.target.send(mesh, moved, reach, emitter).await;
        let (ok, message) = match result {
            Ok(proof) if proof.is_empty() => (true, "moved".to_string()),
            Ok(proof) => (true, format!("moved: {proof}")),
            Err(error) => (false, format!("failed: {error}")),
        };
        let row = SendRow {
            mesh: mesh.name.clone(),
            target: self.target.name().to_string(),
            module: moved.module.clone(),
            machine: moved.machine.clone(),
            from_digest: moved.from.clone(),
            to_ref: moved.to_reference.clone(),
            to_digest: moved.to_digest.clone(),
            outcome: message.clone(),
            at_ms: timefmt::now_ms(),
            operation_id: Some(emitter.operation_id.clone()),
        };
        if let Ok(db) = self.db.lock()
            && let Err(error) = db.record_send(&row)
        {
            tracing::warn!("cannot record a send: {error}");
        }
        // The text for people: `web-1: moved`, or `web-1: failed: …`.
        emitter.emit(
            Payload::sent(&moved.machine, ok),
            Some(&moved.module),
            format!("{}: {message}", moved.machine),
        );
        SendOutcome {
            moved: moved.clone(),
            ok,
            message,
        }
    }
}

/// On a `require_signed` target every artifact a move names must carry a trusted signature
/// (the record's own verdict, else the registry's); Err says which does not.
async fn signed_where_required(
    mesh: &Mesh,
    target: &dyn Target,
    moves: &[Move],
    db: &Mutex<StateDb>,
) -> Result<(), super::vouch::Unsigned> {
    let mut named: Vec<(String, RecordEntry)> = Vec::new();
    for moved in moves {
        let entry = RecordEntry::new(moved.to_reference.clone(), moved.to_digest.clone())
            .with_manifest(moved.to_manifest.clone(), moved.to_signed_by.clone());
        if !named.iter().any(|(m, e)| *m == moved.module && *e == entry) {
            named.push((moved.module.clone(), entry));
        }
    }
    super::vouch::require_signed(mesh, target.name(), named, db)
        .await
        .map(|_| ())
}

/// What a send of `module` would move: the record's entry for it, and its behind machines.
pub async fn prepare(
    mesh: &Mesh,
    module: &str,
    daemon: &LazyDaemon,
    target: &dyn Target,
    db: &Mutex<StateDb>,
) -> Result<Vec<Move>, SendError> {
    let record = target.read_record(mesh, db).await?;
    if !record.record.contains_key(module) {
        return Err(SendError::NothingRecorded {
            record: record.source,
            module: module.to_string(),
        });
    }
    let machines = target
        .machines(mesh, &record.record, Reach { daemon, db })
        .await?;
    Ok(moves_for(&record.record, &machines, module))
}

/// What a send did: its operation id, each machine's outcome, and the confirmed machines it left
/// alone because they no longer were behind.
#[derive(Debug, Clone, Serialize)]
pub struct SendReport {
    pub send_id: String,
    /// The send's short id within the mesh (`#142`).
    pub operation: Option<i64>,
    pub module: String,
    pub outcomes: Vec<SendOutcome>,
    /// Confirmed machines that were current (or gone) by the time the send ran.
    pub skipped: Vec<String>,
}

impl SendReport {
    pub fn ok(&self) -> bool {
        self.outcomes.iter().all(|o| o.ok)
    }

    /// One line: what moved, or which machines failed and why.
    pub fn headline(&self) -> String {
        let failed: Vec<String> = self
            .outcomes
            .iter()
            .filter(|o| !o.ok)
            .map(|o| format!("{}: {}", o.moved.machine, o.message))
            .collect();
        let id = crate::mesh::progress::operation_label(self.operation, &self.send_id);
        let mut text = if failed.is_empty() {
            format!(
                "send {id} of {}: {} machine(s) moved",
                self.module,
                self.outcomes.len()
            )
        } else {
            format!("send {id} of {} failed: {}", self.module, failed.join("; "))
        };
        if !self.skipped.is_empty() {
            text.push_str(&format!(
                " ({} no longer behind: {})",
                self.skipped.len(),
                self.skipped.join(", ")
            ));
        }
        text
    }
}

/// Carry out the moves a person confirmed, holding the mesh (a send never runs beside a converge of
/// the same mesh). Under the lock the record and the machines are read again: when the record no
/// longer names the artifact that was confirmed, nothing is sent and the error says what it names
/// now; a confirmed machine that is no longer behind is left alone and named in the report.
pub async fn send_confirmed(
    mesh: &Mesh,
    module: &str,
    confirmed: &[Move],
    daemon: &LazyDaemon,
    target: &dyn Target,
    db: &Arc<Mutex<StateDb>>,
    tx: Option<super::progress::ProgressTx>,
) -> Result<SendReport, SendError> {
    super::hold::Operation::new(target, db, &mesh.name, OperationKind::Send)
        .progress(tx)
        .run(
            async |running| {
                let emitter = &running.emitter;
                let current = prepare(mesh, module, daemon, target, db).await?;
                same_artifact(module, confirmed, &current, target, mesh, db).await?;
                let moves: Vec<Move> = current
                    .into_iter()
                    .filter(|m| confirmed.iter().any(|c| c.machine == m.machine))
                    .collect();
                let skipped: Vec<String> = confirmed
                    .iter()
                    .filter(|c| !moves.iter().any(|m| m.machine == c.machine))
                    .map(|c| c.machine.clone())
                    .collect();
                let outcomes = send(mesh, &moves, daemon, target, db, emitter).await;
                Ok(SendReport {
                    send_id: emitter.operation_id.clone(),
                    operation: emitter.operation,
                    module: module.to_string(),
                    outcomes,
                    skipped,
                })
            },
            |result| match result {
                Ok(report) => {
                    let moved = report.outcomes.iter().filter(|o| o.ok).count();
                    let text = format!("send: {moved}/{} machine(s) moved", report.outcomes.len());
                    LastWord::judged(moved == report.outcomes.len(), text)
                }
                Err(error) => nothing_sent(error),
            },
        )
        .await
}

/// The record must still name the artifact the person confirmed.
async fn same_artifact(
    module: &str,
    confirmed: &[Move],
    current: &[Move],
    target: &dyn Target,
    mesh: &Mesh,
    db: &Mutex<StateDb>,
) -> Result<(), SendError> {
    let Some(wanted) = confirmed.first() else {
        return Ok(());
    };
    let now = match current.first() {
        Some(m) => Some((m.to_reference.clone(), m.to_digest.clone())),
        // No machine is behind any more: the record may still have moved (say so), or not.
        None => target
            .read_record(mesh, db)
            .await?
            .record
            .get(module)
            .map(|e| (e.reference.clone(), e.digest.clone())),
    };
    match now {
        Some((reference, digest))
            if reference == wanted.to_reference && digest == wanted.to_digest =>
        {
            Ok(())
        }
        Some((reference, digest)) => Err(SendError::Moved {
            module: module.to_string(),
            short: crate::mesh::text::short_id(&digest).to_string(),
            reference,
            confirmed: wanted.to_reference.clone(),
            confirmed_short: crate::mesh::text::short_id(&wanted.to_digest).to_string(),
        }),
        None => Err(SendError::NoLongerNamed {
            module: module.to_string(),
        }),
    }
}

/// The last word of a send that sent nothing.
fn nothing_sent(error: &SendError) -> LastWord {
    LastWord::failed_saying("send: nothing sent", error)
}
