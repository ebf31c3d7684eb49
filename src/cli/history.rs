//! `meshtop history MODULE`: every stamp of the module's entry in the record, newest first.

use std::process::ExitCode;

use crate::mesh::pin::merged_stamps;
use crate::mesh::text::short_id;
use crate::timefmt;

use super::args::{Global, HistoryArgs};
use super::setup::{NotRead, Stated};
use super::{Failure, Outcome, known_module, print_json, print_out, setup};

pub(crate) async fn run(global: &Global, args: HistoryArgs) -> Outcome {
    let mesh = setup::load_mesh(global)?;
    known_module(&mesh, &args.module)?;
    let stated = Stated::open(global, mesh)?;
    let target_name = setup::target_name(global, &stated.mesh)?;
    let limit = args.limit as usize;
    // The target's history and pins first (a teammate's stamps are there); this file's copy
    // when the target cannot be read, said so.
    let (Stated { mesh, db }, kept) = match stated.read(global).await {
        Ok(read) => {
            let stated = Stated {
                mesh: read.mesh,
                db: read.db,
            };
            (stated, read.record.kept)
        }
        Err((stated, NotRead::Record { error, .. })) => {
            eprintln!(
                "meshtop: the target could not be read ({error}): showing this state file's copy"
            );
            (stated, None)
        }
        Err((stated, NotRead::Target(failure))) => {
            eprintln!(
                "meshtop: {}: showing this state file's copy",
                failure.message
            );
            (stated, None)
        }
    };
    let db = db
        .into_inner()
        .map_err(|_| Failure::failed("the state database's handle was poisoned"))?;
    let local = db
        .stamps(&mesh.name, &target_name, &args.module, limit)
        .map_err(Failure::failed)?;
    let (stamps, pins) = match kept {
        Some(kept) => {
            let theirs = kept.history.get(&args.module).cloned().unwrap_or_default();
            (merged_stamps(&theirs, &local, limit), kept.pins)
        }
        None => (
            local,
            db.pins(&mesh.name, &target_name).map_err(Failure::failed)?,
        ),
    };
    if args.json {
        print_json(&stamps)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = String::new();
    if let Some(pin) = pins.get(&args.module) {
        outln!(out, "{}", pin.reason(&timefmt::local_time(pin.at_ms)));
    }
    if stamps.is_empty() {
        outln!(
            out,
            "no stamp of module {} is recorded in {}",
            args.module,
            db.path().display()
        );
    } else {
        outln!(
            out,
            "{:<19}  {:<6}  {:<9}  {:<24}  {:<26}  FROM → TO",
            "TIME",
            "OP",
            "KIND",
            "BY",
            "OPERATION"
        );
        for stamp in &stamps {
            let from = match (&stamp.from_ref, &stamp.from_digest) {
                (Some(reference), Some(digest)) => format!("{reference}@{}", short_id(digest)),
                _ => "(nothing)".into(),
            };
            // A promote says where its artifact came from.
            let source = stamp
                .by
                .from_target
                .as_ref()
                .map(|t| format!(" (from target {t})"))
                .unwrap_or_default();
            outln!(
                out,
                "{:<19}  {:<6}  {:<9}  {:<24}  {:<26}  {from} → {}@{}{source}",
                timefmt::local_time(stamp.by.at_ms),
                stamp.by.short.map(|s| format!("#{s}")).unwrap_or_default(),
                stamp.by.kind,
                format!("{} pid {}", stamp.by.host, stamp.by.pid),
                crate::mesh::text::first_chars(&stamp.by.operation_id, 26),
                stamp.to_ref,
                short_id(&stamp.to_digest)
            );
        }
    }
    print_out(&out)?;
    Ok(ExitCode::SUCCESS)
}
