//! What the skip decision saves (`meshtop stats` and the dashboard's stats view): per module builds,
//! failures, median build time, the decisions of the last converges and the build time the skips
//! did not spend. Pure: computed from build rows and progress events the caller read.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::builds::{BuildRow, BuildStatus};
use super::decide::Decision;
use super::progress::{EventRow, Payload};

/// Progress events read for the decisions (the newest ones).
pub const EVENTS_READ: usize = 50_000;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ModuleStats {
    pub builds: u64,
    pub failures: u64,
    pub median_build_ms: Option<i64>,
    /// decision → how many converges decided it.
    pub decisions: BTreeMap<String, u64>,
    /// Skips (record, host, pinned) × the median build.
    pub saved_ms: i64,
}

impl ModuleStats {
    /// `build 5, record 7`: each decision and how many converges made it.
    pub fn decisions_text(&self) -> String {
        let parts: Vec<String> = self
            .decisions
            .iter()
            .map(|(decision, n)| format!("{decision} {n}"))
            .collect();
        parts.join(", ")
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub mesh: String,
    /// The window asked for (`--since`), in ms; None: everything kept.
    pub since_ms: Option<i64>,
    pub converges: usize,
    pub modules: BTreeMap<String, ModuleStats>,
    pub saved_ms: i64,
}

/// A `--since` that is not a duration, as the user wrote it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--since {text:?} is not a duration: give a number and a unit, e.g. 90s, 30m, 12h, 7d, 2w")]
pub struct NotADuration {
    pub text: String,
}

/// `90s`, `30m`, `12h`, `7d`, `2w` → milliseconds.
pub fn parse_duration(text: &str) -> Result<i64, NotADuration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let bad = || NotADuration {
        text: text.to_string(),
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

pub fn median(mut values: Vec<i64>) -> Option<i64> {
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

/// The stats of mesh `mesh` (its modules named in `modules`) from its build rows and progress
/// events; `since_ms` is the window, `now_ms` the clock it ends at.
pub fn compute(
    mesh: &str,
    modules: &[String],
    rows: &[BuildRow],
    events: &[EventRow],
    since_ms: Option<i64>,
    now_ms: i64,
) -> Stats {
    let from = since_ms.map(|window| now_ms - window);
    let mut per: BTreeMap<String, ModuleStats> = modules
        .iter()
        .map(|m| (m.clone(), ModuleStats::default()))
        .collect();
    let mut times: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for row in rows
        .iter()
        .filter(|r| from.is_none_or(|f| r.started_ms >= f))
    {
        let Some(module) = &row.module else { continue };
        let stats = per.entry(module.clone()).or_default();
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
        if let Some(stats) = per.get_mut(&module) {
            stats.median_build_ms = median(values);
        }
    }
    let mut converges = BTreeSet::new();
    // The decision is the step's data (a step written before payloads were kept has none to count).
    for event in events.iter().filter(|e| from.is_none_or(|f| e.at_ms >= f)) {
        let (Some(module), Some(Payload::Decided { decision, .. })) =
            (&event.module, &event.payload)
        else {
            continue;
        };
        converges.insert(event.operation_id.clone());
        let stats = per.entry(module.clone()).or_default();
        *stats
            .decisions
            .entry(decision.as_str().to_string())
            .or_default() += 1;
        // A registry skip whose pull failed was built in that converge after all: nothing saved.
        let built_then = || {
            rows.iter().any(|r| {
                r.module.as_deref() == Some(module.as_str())
                    && r.operation_id.as_deref() == Some(event.operation_id.as_str())
            })
        };
        let skipped = matches!(
            decision,
            Decision::Record | Decision::Host | Decision::Registry | Decision::Pinned
        );
        if skipped && !built_then() {
            stats.saved_ms += stats.median_build_ms.unwrap_or(0);
        }
    }
    Stats {
        mesh: mesh.to_string(),
        since_ms,
        converges: converges.len(),
        saved_ms: per.values().map(|m| m.saved_ms).sum(),
        modules: per,
    }
}

/// `12.3s`.
pub fn seconds(ms: i64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::progress::Step;

    #[test]
    fn durations_and_medians() {
        assert_eq!(parse_duration("90s").unwrap(), 90_000);
        assert_eq!(parse_duration("7d").unwrap(), 7 * 86_400_000);
        assert!(
            parse_duration("7")
                .unwrap_err()
                .to_string()
                .contains("e.g. 90s")
        );
        assert!(parse_duration("x1h").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![5, 1, 3]), Some(3));
        assert_eq!(median(vec![4, 1, 3, 2]), Some(2));
    }

    fn build(module: &str, status: BuildStatus, started: i64, took: i64) -> BuildRow {
        BuildRow {
            id: format!("{module}-{started}"),
            mesh: "demo".into(),
            module: Some(module.into()),
            repository: format!("demo/{module}"),
            commit: None,
            dirty: false,
            base_module: None,
            base_digest: None,
            reference: None,
            digest: None,
            platforms: "linux/amd64".into(),
            status,
            forced: false,
            why: String::new(),
            host: "h".into(),
            started_ms: started,
            ended_ms: Some(started + took),
            error: None,
            log_tail: None,
            published_ref: None,
            published_digest: None,
            published_ms: None,
            operation_id: None,
            operation: None,
            builder: None,
            push_ms: None,
            daemon_ms: None,
            process_gone: false,
        }
    }

    fn decided(id: i64, converge: &str, module: &str, text: &str, at: i64) -> EventRow {
        EventRow {
            id,
            at_ms: at,
            mesh: "demo".into(),
            operation_id: converge.into(),
            operation: None,
            operation_kind: None,
            step: Step::Decided,
            module: Some(module.into()),
            text: text.into(),
            payload: Some(payload_of(text)),
        }
    }

    /// What the engine puts beside `<decision> <ref> — <reason>` (converge/tiers.rs).
    fn payload_of(text: &str) -> Payload {
        let (head, reason) = text.split_once(" — ").unwrap();
        let (decision, reference) = head.split_once(' ').unwrap();
        Payload::Decided {
            decision: Decision::parse(decision).unwrap(),
            reference: Some(reference.into()),
            reason: reason.into(),
        }
    }

    #[test]
    fn skips_are_counted_at_the_median_build_and_the_window_cuts() {
        let rows = vec![
            build("api", BuildStatus::Succeeded, 1_000, 10_000),
            build("api", BuildStatus::Succeeded, 2_000, 30_000),
            build("api", BuildStatus::Failed, 3_000, 1_000),
            build("web", BuildStatus::Succeeded, 50_000, 4_000),
        ];
        let events = vec![
            // As the engine writes them (converge/tiers.rs): `<decision> <ref> — <reason>`.
            decided(1, "c1", "api", "build demo/api:1 — new module", 1_000),
            decided(
                2,
                "c2",
                "api",
                "record demo/api:1 — the record names it",
                60_000,
            ),
            decided(3, "c2", "web", "host demo/web:1 — labelled image", 60_000),
            decided(
                4,
                "c3",
                "api",
                "pinned demo/api:2 — pinned: rolled back",
                70_000,
            ),
        ];
        let modules = vec!["api".to_string(), "web".to_string()];
        let all = compute("demo", &modules, &rows, &events, None, 100_000);
        assert_eq!(all.converges, 3);
        let api = &all.modules["api"];
        assert_eq!((api.builds, api.failures), (3, 1));
        assert_eq!(api.median_build_ms, Some(20_000));
        assert_eq!(api.decisions["record"], 1);
        assert_eq!(api.decisions["pinned"], 1);
        assert_eq!(api.saved_ms, 40_000);
        assert_eq!(all.modules["web"].saved_ms, 4_000);
        assert_eq!(all.saved_ms, 44_000);
        // The last 60 s: only web's build and the two later converges.
        let recent = compute("demo", &modules, &rows, &events, Some(60_000), 100_000);
        assert_eq!(recent.converges, 2);
        assert_eq!(recent.modules["api"].builds, 0);
        assert_eq!(recent.modules["api"].saved_ms, 0, "no median in the window");
        assert_eq!(recent.modules["web"].builds, 1);
    }

    #[test]
    fn a_registry_skip_saves_a_build_unless_its_pull_failed_and_it_was_built() {
        let mut fallback = build("web", BuildStatus::Succeeded, 80_000, 4_000);
        fallback.operation_id = Some("c5".into());
        let rows = vec![
            build("web", BuildStatus::Succeeded, 50_000, 4_000),
            fallback,
        ];
        let events = vec![
            decided(
                1,
                "c4",
                "web",
                "registry r/web:1 — registry r holds manifest",
                70_000,
            ),
            decided(
                2,
                "c5",
                "web",
                "registry r/web:2 — registry r holds manifest",
                80_000,
            ),
        ];
        let modules = vec!["web".to_string()];
        let stats = compute("demo", &modules, &rows, &events, None, 100_000);
        let web = &stats.modules["web"];
        assert_eq!(web.decisions["registry"], 2);
        assert_eq!(web.saved_ms, 4_000, "c4 saved a build, c5 built after all");
    }
}
