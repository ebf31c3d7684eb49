//! `meshtop stats [--since DURATION] [--json]`: per module builds, failures, median build time,
//! the decisions of the last converges and the build time the skips did not spend.

use std::process::ExitCode;

use crate::mesh::stats::{Stats, parse_duration, seconds};
use crate::timefmt;

use super::args::{Global, StatsArgs};
use super::{Failure, Outcome, print_json, print_out, setup};

pub(crate) async fn run(global: &Global, args: StatsArgs) -> Outcome {
    let since = args
        .since
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(Failure::input)?;
    let mesh = setup::load_mesh(global)?;
    let db = setup::open_state_for_reading(global)?;
    let modules: Vec<String> = mesh.modules.iter().map(|m| m.name.clone()).collect();
    let stats: Stats = db
        .stats(&mesh.name, &modules, since, timefmt::now_ms())
        .map_err(Failure::failed)?;
    if args.json {
        print_json(&stats)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = String::new();
    outln!(
        out,
        "{:<16} {:>6} {:>8} {:>10}  {:<40} {:>10}",
        "MODULE",
        "BUILDS",
        "FAILED",
        "MEDIAN",
        "DECISIONS",
        "SAVED"
    );
    for (name, m) in &stats.modules {
        outln!(
            out,
            "{:<16} {:>6} {:>8} {:>10}  {:<40} {:>10}",
            name,
            m.builds,
            m.failures,
            m.median_build_ms.map(seconds).unwrap_or_else(|| "–".into()),
            m.decisions_text(),
            seconds(m.saved_ms)
        );
    }
    outln!(
        out,
        "{} converge(s){}: the skips did not spend about {} of build time (each skip counted at its module's median build)",
        stats.converges,
        args.since
            .as_deref()
            .map(|s| format!(" in the last {s}"))
            .unwrap_or_default(),
        seconds(stats.saved_ms)
    );
    print_out(&out)?;
    Ok(ExitCode::SUCCESS)
}
