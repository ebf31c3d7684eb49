//! An operation's timeline in the Chrome trace event format (what `chrome://tracing` and Perfetto
//! open): a process per builder, a thread per module, a complete (`X`) event per span with its
//! duration, `M` events naming the processes and threads. Times in µs from the operation's start.
//! Pure: the caller writes the value.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::timeline::{Phase, Timeline};
use super::timeline_summary::LOCAL_BUILDER;

/// The process of modules nothing built (skipped, not reached): meshtop itself.
const MESHTOP_PROCESS: &str = "meshtop";

fn micros(ms: i64) -> i64 {
    ms * 1000
}

/// The trace of `timeline`, open spans drawn up to `now_ms`.
pub fn chrome_trace(timeline: &Timeline, now_ms: i64) -> Value {
    let origin = timeline.started_ms;
    // pid 1 is meshtop; each builder gets the next, in the order its first build came.
    let mut pids: BTreeMap<String, u32> = BTreeMap::from([(MESHTOP_PROCESS.to_string(), 1)]);
    let mut events = Vec::new();
    let label = crate::progress::operation_label(timeline.operation, &timeline.operation_id);
    events.push(json!({
        "name": format!("operation {label}"), "cat": "operation", "ph": "X",
        "ts": 0, "dur": micros(timeline.end_or(now_ms) - origin),
        "pid": 1, "tid": 0, "args": {"operation_id": timeline.operation_id},
    }));
    for (index, module) in timeline.modules.iter().enumerate() {
        let process = module.builder().unwrap_or_else(|| {
            if module.spans.iter().any(|s| s.phase == Phase::Build) {
                LOCAL_BUILDER
            } else {
                MESHTOP_PROCESS
            }
        });
        let next = pids.len() as u32 + 1;
        let pid = *pids.entry(process.to_string()).or_insert(next);
        let tid = index as u32 + 1;
        events.push(json!({
            "name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "ts": 0,
            "args": {"name": module.name},
        }));
        events.push(json!({
            "name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "ts": 0,
            "args": {"sort_index": tid},
        }));
        for span in &module.spans {
            let name = match (span.phase, span.step) {
                (Phase::Step, Some((n, m))) => format!("{n}/{m} {}", span.label),
                _ => span.phase.as_str().to_string(),
            };
            events.push(json!({
                "name": name, "cat": span.phase.as_str(), "ph": "X",
                "ts": micros(span.start_ms - origin), "dur": micros(span.duration_ms(now_ms)),
                "pid": pid, "tid": tid,
                "args": {
                    "module": module.name,
                    "builder": span.builder,
                    "cached": span.cached,
                    "label": span.label,
                    "tier": module.tier,
                },
            }));
        }
    }
    for (process, pid) in &pids {
        events.push(json!({
            "name": "process_name", "ph": "M", "pid": pid, "tid": 0, "ts": 0,
            "args": {"name": if process == MESHTOP_PROCESS { process.clone() } else { format!("builder {process}") }},
        }));
    }
    json!({ "traceEvents": events, "displayTimeUnit": "ms" })
}
