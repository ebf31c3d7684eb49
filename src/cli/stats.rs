//! `meshtop stats [--since DURATION] [--json]`: per module builds, failures, median build time,
//! the decisions of the last converges and the build time the skips did not spend.

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde::Serialize;

use crate::backends::history::BuildQuery;
use crate::mesh::builds::BuildStatus;
use crate::mesh::progress::Step;
use crate::timefmt;

use super::args::{Global, StatsArgs};
use super::{Failure, Outcome, print_json, print_out, setup};

#[derive(Debug, Default, Serialize)]
struct ModuleStats {
    builds: u64,
    failures: u64,
    median_build_ms: Option<i64>,
    /// decision → how many converges decided it.
    decisions: BTreeMap<String, u64>,
    /// Skips (record, host, pinned) × the median build.
    saved_ms: i64,
}

#[derive(Debug, Serialize)]
struct Stats {
    mesh: String,
    since_ms: Option<i64>,
    converges: usize,
    modules: BTreeMap<String, ModuleStats>,
    saved_ms: i64,
}

/// `90s`, `30m`, `12h`, `7d`, `2w` → milliseconds.
pub fn parse_duration(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let bad = || {
        format!(
            "--since {text:?} is not a duration: give a number and a unit, e.g. 90s, 30m, 12h, 7d, 2w"
        )
    };
    let n: i64 = number.parse().map_err(|_| bad())?;
    let unit_ms = match unit {
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(unit_ms).ok_or_else(bad)
}

fn median(mut values: Vec<i64>) -> Option<i64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2
    } else {
        values[mid]
    })
}

pub async fn run(global: &Global, args: StatsArgs) -> Outcome {
    let since = args
        .since
        .as_deref()
        .map(parse_duration)
        .transpose()
        .map_err(Failure::input)?;
    let mesh = setup::load_mesh(global)?;
    let history = setup::open_history(global)?;
    let from = since.map(|window| timefmt::now_ms() - window);
    let failed = |e: crate::backends::history::HistoryError| Failure::failed(e.to_string());
    let rows = history
        .builds(&BuildQuery {
            mesh: mesh.name.clone(),
            limit: 1_000_000,
            ..BuildQuery::default()
        })
        .map_err(failed)?;
    let mut modules: BTreeMap<String, ModuleStats> = mesh
        .modules
        .iter()
        .map(|m| (m.name.clone(), ModuleStats::default()))
        .collect();
    let mut times: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for row in rows
        .iter()
        .filter(|r| from.is_none_or(|f| r.started_ms >= f))
    {
        let Some(module) = &row.module else { continue };
        let stats = modules.entry(module.clone()).or_default();
        stats.builds += 1;
        if row.status == BuildStatus::Failed {
            stats.failures += 1;
        }
        if let (BuildStatus::Succeeded, Some(ended)) = (row.status, row.ended_ms) {
            times
                .entry(module.clone())
                .or_default()
                .push(ended - row.started_ms);
        }
    }
    for (module, values) in times {
        if let Some(stats) = modules.get_mut(&module) {
            stats.median_build_ms = median(values);
        }
    }
    let events = history.events_tail(&mesh.name, 50_000).map_err(failed)?;
    let mut converges = std::collections::BTreeSet::new();
    for event in events
        .iter()
        .filter(|e| e.step == Step::Decided && from.is_none_or(|f| e.at_ms >= f))
    {
        let (Some(module), Some(decision)) = (&event.module, event.text.split_whitespace().next())
        else {
            continue;
        };
        converges.insert(event.converge_id.clone());
        let stats = modules.entry(module.clone()).or_default();
        *stats.decisions.entry(decision.to_string()).or_default() += 1;
        if matches!(decision, "record" | "host" | "pinned") {
            stats.saved_ms += stats.median_build_ms.unwrap_or(0);
        }
    }
    let stats = Stats {
        mesh: mesh.name.clone(),
        since_ms: since,
        converges: converges.len(),
        saved_ms: modules.values().map(|m| m.saved_ms).sum(),
        modules,
    };
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
        let decisions: Vec<String> = m
            .decisions
            .iter()
            .map(|(d, n)| format!("{d} {n}"))
            .collect();
        outln!(
            out,
            "{:<16} {:>6} {:>8} {:>10}  {:<40} {:>10}",
            name,
            m.builds,
            m.failures,
            m.median_build_ms.map(seconds).unwrap_or_else(|| "–".into()),
            decisions.join(", "),
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

fn seconds(ms: i64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_medians() {
        assert_eq!(parse_duration("90s").unwrap(), 90_000);
        assert_eq!(parse_duration("7d").unwrap(), 7 * 86_400_000);
        assert!(parse_duration("7").unwrap_err().contains("e.g. 90s"));
        assert!(parse_duration("x1h").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![5, 1, 3]), Some(3));
        assert_eq!(median(vec![4, 1, 3, 2]), Some(2));
    }
}
