//! The record's history of a module in its detail (as `meshtop history MODULE`): who stamped its
//! entry, when, by which operation, from which artifact to which, newest first; and its pin.

use ratatui::style::Style;

use crate::app::state::AppState;
use crate::mesh::operation::OperationKind;
use crate::mesh::pin::{Pin, Stamp};
use crate::mesh::text::short_id;

use super::lines::{Palette, tag_of};

type Line = (String, Style);

/// `2026-11-29 14:00:00 UTC` (the same on every machine).
fn utc(at_ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(at_ms).map_or_else(
        || format!("@{at_ms}ms"),
        |t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

/// `pinned: rolled back from demo/api:…@3f9c2a1b7d4e by host-a at T (#12)`.
pub(crate) fn pin_reason(pin: &Pin) -> String {
    pin.reason(&utc(pin.at_ms))
}

/// The pin line of a module, when it is pinned.
pub(crate) fn pin_line(state: &AppState, module: &str, palette: Palette) -> Option<Line> {
    state
        .views
        .pins
        .get(module)
        .map(|pin| (pin_reason(pin), palette.pinned()))
}

fn stamp_line(stamp: &Stamp) -> String {
    let from = match (&stamp.from_ref, &stamp.from_digest) {
        (Some(reference), Some(digest)) => format!("{}@{}", tag_of(reference), short_id(digest)),
        _ => "(nothing)".into(),
    };
    let op = stamp.by.short.map(|s| format!("#{s} ")).unwrap_or_default();
    format!(
        "  {} {op}{} by {} · {from} → {}@{}",
        utc(stamp.by.at_ms),
        stamp.by.kind,
        stamp.by.host,
        tag_of(&stamp.to_ref),
        short_id(&stamp.to_digest)
    )
}

/// The record's history of `module`, newest first (the detail in full).
pub(crate) fn lines(state: &AppState, module: &str, palette: Palette) -> Vec<Line> {
    let mut lines: Vec<Line> = Vec::new();
    match state.views.stamps_of(module) {
        None => lines.push(("record history: reading…".to_string(), palette.dim())),
        Some([]) => lines.push((
            format!("record history: no stamp of {module} is recorded"),
            palette.dim(),
        )),
        Some(stamps) => {
            lines.push((
                format!("record history ({}, newest first):", stamps.len()),
                palette.heading(),
            ));
            for stamp in stamps {
                let style = if stamp.by.kind == OperationKind::Rollback {
                    palette.pinned()
                } else {
                    palette.plain()
                };
                lines.push((stamp_line(stamp), style));
            }
        }
    }
    lines
}
