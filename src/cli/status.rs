//! `meshtop status`: every machine, its state against the record, and the build that made what it runs.

use std::process::ExitCode;
use std::sync::Arc;

use serde::Serialize;

use crate::backends::daemon::LazyDaemon;
use crate::backends::state::UpstreamSeen;
use crate::converge::plan::moved_under;
use crate::converge::targets::{Reach, RecordRoom};
use crate::converge::vouch::{self, ArtifactProvenance};
use crate::mesh::behind::MachineState;
use crate::mesh::builds::BuildRow;
use crate::mesh::machine::Machine;
use crate::mesh::text::short_id;
use crate::mesh::upstream_lock::UpstreamMoved;
use crate::mesh::why::short_digest;
use crate::timefmt;
use std::collections::BTreeMap;

use super::args::{Global, StatusArgs};
use super::setup::{self, Reading};
use super::{Failure, Outcome, print_json, print_out};

#[derive(Serialize)]
struct MachineStatus {
    #[serde(flatten)]
    machine: Machine,
    /// The build that made the artifact it runs, when the history knows it.
    built_by: Option<BuildRow>,
    /// The target's record: its form and how close it is to its limit (targets that have one).
    #[serde(skip_serializing_if = "Option::is_none")]
    record: Option<RecordRoom>,
    /// Without a build row here: what the artifact's signed provenance says of its build.
    #[serde(skip_serializing_if = "Option::is_none")]
    provenance: Option<crate::mesh::provenance::ReadProvenance>,
    #[serde(skip)]
    provenance_text: Option<String>,
    /// The upstreams its artifact was built on that moved since (what their registries served when
    /// last asked: `outdated`, `plan --refresh`, the dashboard).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    behind_upstream: Vec<UpstreamMoved>,
}

pub(crate) async fn run(global: &Global, args: StatusArgs) -> Outcome {
    if args.all_targets {
        return super::environments::run(global, args.json, args.exit_code).await;
    }
    let mesh = setup::load_mesh(global)?;
    let Reading {
        mesh,
        db,
        target,
        record,
    } = Reading::of(global, mesh).await?;
    if let Some(warning) = &record.warning {
        eprintln!("meshtop: warning: {warning}");
    }
    let daemon = Arc::new(LazyDaemon::new());
    let reach = Reach {
        daemon: &daemon,
        db: &db,
    };
    let machines = target
        .machines(&mesh, &record.record, reach)
        .await
        .map_err(Failure::failed)?;
    let db = db
        .into_inner()
        .map_err(|_| Failure::failed("the state database handle is poisoned"))?;
    let seen = match db.upstreams_seen() {
        Ok(seen) => seen,
        Err(e) => {
            eprintln!("meshtop: warning: what upstream registries served could not be read: {e}");
            Default::default()
        }
    };
    let mut rows = Vec::new();
    let mut read: std::collections::HashMap<String, Option<ArtifactProvenance>> =
        std::collections::HashMap::new();
    for machine in machines {
        let built_by = match machine.running.first() {
            Some(digest) => db
                .build_by_digest(&mesh.name, digest)
                .map_err(|e| Failure::failed(e.to_string()))?,
            None => None,
        };
        let mut found = None;
        if let (None, Some(digest)) = (&built_by, machine.running.first()) {
            if !read.contains_key(digest) {
                let recorded = record.record.get(&machine.module).cloned();
                // A fault reads as none: `unknown build`.
                let answer = vouch::running_provenance(&mesh, recorded, &machine.image, digest)
                    .await
                    .ok()
                    .flatten();
                read.insert(digest.clone(), answer);
            }
            found = read.get(digest).cloned().flatten();
        }
        let behind_upstream =
            upstreams_moved(&db, &mesh.name, &record.record, &machine, &built_by, &seen);
        rows.push(MachineStatus {
            behind_upstream,
            machine,
            built_by,
            provenance: found.as_ref().and_then(|f| f.provenances.first().cloned()),
            provenance_text: found.as_ref().and_then(super::provenance::built_by_text),
            record: record.room.clone(),
        });
    }
    let count =
        |state: fn(&MachineState) -> bool| rows.iter().filter(|r| state(&r.machine.state)).count();
    let behind = count(|s| s.is_behind());
    let missing = count(|s| *s == MachineState::Missing);
    let unknown = count(|s| *s == MachineState::UnknownContainer);
    let on_moved = rows
        .iter()
        .filter(|r| !r.behind_upstream.is_empty())
        .count();
    let attention = count(|s| s.needs_attention()) + on_moved;
    if args.json {
        print_json(&rows)?;
    } else if rows.is_empty() {
        let room = record
            .room
            .as_ref()
            .map(|room| format!("{}\n", room.said))
            .unwrap_or_default();
        print_out(&format!(
            "no machines of mesh {} on target {}\n{room}",
            mesh.name,
            target.name()
        ))?;
    } else {
        let mut out = table_text(&rows);
        let unknown = match unknown {
            0 => String::new(),
            n => format!(", {n} unknown container"),
        };
        let on_moved_text = match on_moved {
            0 => String::new(),
            n => format!(", {n} behind upstream"),
        };
        out.push_str(&behind_upstream_text(&rows, &seen));
        outln!(
            out,
            "{} machine(s), {behind} behind{on_moved_text}, {missing} missing{unknown}",
            rows.len()
        );
        if let Some(room) = &record.room {
            outln!(out, "{}", room.said);
        }
        print_out(&out)?;
    }
    Ok(if args.exit_code && attention > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The upstreams the artifact a machine runs was built on that moved since: the inputs this state
/// database kept for its build (its build row's ref, else the record's when it runs the record's
/// artifact), against what their registries served when last asked. A fault reads as none.
fn upstreams_moved(
    db: &crate::backends::state::StateDb,
    mesh: &str,
    record: &crate::mesh::model::Record,
    machine: &Machine,
    built_by: &Option<BuildRow>,
    seen: &BTreeMap<String, UpstreamSeen>,
) -> Vec<UpstreamMoved> {
    if seen.is_empty() {
        return Vec::new();
    }
    let recorded = record
        .get(&machine.module)
        .filter(|entry| machine.running.first() == Some(&entry.digest))
        .map(|entry| entry.reference.clone());
    let Some(reference) = built_by
        .as_ref()
        .and_then(|b| b.reference.clone())
        .or(recorded)
    else {
        return Vec::new();
    };
    moved_under(db, mesh, &machine.module, &reference, seen).unwrap_or_default()
}

/// One line per machine on a moved upstream, and what to do.
fn behind_upstream_text(rows: &[MachineStatus], seen: &BTreeMap<String, UpstreamSeen>) -> String {
    let now = timefmt::now_ms();
    let mut out = String::new();
    for row in rows {
        for moved in &row.behind_upstream {
            let asked = seen
                .get(&moved.image)
                .map(|s| format!("{} ago", timefmt::age_since(s.asked_ms, now)))
                .unwrap_or_default();
            outln!(
                out,
                "behind upstream: {} runs an artifact built on {} {}, which its registry has since moved to {} (asked {asked}): meshtop update {}, then converge",
                row.machine.name,
                moved.image,
                short_digest(&moved.built_on),
                short_digest(&moved.now),
                moved.image
            );
        }
    }
    out
}

fn table_text(rows: &[MachineStatus]) -> String {
    let now = timefmt::now_ms();
    let mut out = String::new();
    outln!(
        out,
        "{:<24} {:<12} {:<10} {:<14} {:<22} BUILT BY",
        "MACHINE",
        "MODULE",
        "STATE",
        "RUNNING",
        "HEALTH"
    );
    for row in rows {
        let running = row
            .machine
            .running
            .first()
            .map(|d| short_id(d))
            .unwrap_or("–");
        let built_by = match (&row.built_by, &row.provenance_text) {
            (Some(build), _) => build.made_by(now),
            (None, Some(said)) => said.clone(),
            (None, None) => "unknown build".into(),
        };
        outln!(
            out,
            "{:<24} {:<12} {:<10} {:<14} {:<22} {}",
            row.machine.name,
            row.machine.module,
            row.machine.state,
            running,
            row.machine.health,
            built_by
        );
    }
    out
}
