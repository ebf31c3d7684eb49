//! The gc view (in the detail overlay): what a sweep would take, each candidate with why nothing
//! needs it, and the keep set; or which root could not be read, and nothing offered.

use ratatui::style::Style;

use crate::app::keys::{Action, Mode};
use crate::app::state::AppState;
use crate::mesh::gc::{Candidate, GcReport, grace_words, human_bytes as bytes};
use crate::timefmt;

use super::ladder::{NOT_READ, Rung, Waiting, rung};
use super::lines::{Palette, short_digest};

type Line = (String, Style);

pub(crate) fn lines(state: &AppState, palette: Palette) -> Vec<Line> {
    let view = &state.views.gc;
    let mut lines: Vec<Line> = vec![(
        format!(
            "gc of mesh {}: what nothing needs, by reachability (never age)",
            state.context.mesh
        ),
        palette.heading(),
    )];
    let read = view
        .at_ms
        .map(|at| format!("read {} ago", timefmt::age_since(at, state.now_ms)))
        .unwrap_or_default();
    let waiting = Waiting {
        reading: "reading every root (record, machines, builds, pins, the host)…",
        unread: NOT_READ,
        reread_hides_answer: true,
    };
    let report = match rung(view, &waiting, palette) {
        Rung::Answer(report) => report,
        Rung::Waiting(line) => {
            lines.push(line);
            return lines;
        }
        Rung::Failed(error) => {
            lines.push((format!("gc takes nothing: {error}"), palette.bad()));
            lines.push((
                "a root that cannot be read could hold anything: nothing is offered to sweep"
                    .into(),
                palette.warn(),
            ));
            if !read.is_empty() {
                lines.push((read, palette.dim()));
            }
            return lines;
        }
    };
    for warning in &report.warnings {
        lines.push((format!("warning: {warning}"), palette.warn()));
    }
    lines.push((
        format!(
            "{} (each module's newest {} builds)",
            report.keep_line(),
            report.keep_newest
        ),
        palette.good(),
    ));
    lines.extend(spared_lines(report, palette));
    if report.candidates.is_empty() {
        lines.push((
            "nothing unreachable: a sweep would take nothing".into(),
            palette.plain(),
        ));
        lines.push((read, palette.dim()));
        return lines;
    }
    lines.push((
        format!(
            "a sweep would take {} ({}):",
            report.candidates.len(),
            bytes(report.bytes())
        ),
        palette.heading(),
    ));
    lines.extend(
        report
            .candidates
            .iter()
            .flat_map(|c| candidate_lines(c, palette)),
    );
    let sweep = state.keys.hint_line(Mode::Detail, &[Action::Sweep]);
    let offer = if sweep.is_empty() {
        "read-only: sweeping is off (--readonly)".to_string()
    } else {
        format!("{sweep}: each only if still unreachable when the sweep reads the roots again")
    };
    lines.push((offer, palette.info()));
    lines.push((read, palette.dim()));
    lines
}

/// What the grace and others' tags spare, each with why (nothing when nothing is spared).
fn spared_lines(report: &GcReport, palette: Palette) -> Vec<Line> {
    let mut lines = Vec::new();
    if report.spared.is_empty() {
        return lines;
    }
    lines.push((
        format!(
            "spared {}, a teammate may need it (grace {}; tags given by others):",
            report.spared.len(),
            grace_words(report.grace_ms)
        ),
        palette.heading(),
    ));
    for spared in &report.spared {
        lines.push((
            format!(
                "  {:<8} {} [{}]",
                spared.kind,
                short_name(&spared.name),
                spared.module
            ),
            palette.good(),
        ));
        lines.push((format!("           {}", spared.why), palette.dim()));
    }
    lines
}

/// One candidate a sweep would take: its kind, name, module and size, then why nothing needs it.
fn candidate_lines(candidate: &Candidate, palette: Palette) -> Vec<Line> {
    let mut lines = Vec::new();
    let size = if candidate.bytes > 0 {
        format!(" {}", bytes(candidate.bytes))
    } else {
        String::new()
    };
    lines.push((
        format!(
            "  {:<8} {} [{}]{size}",
            candidate.kind,
            short_name(&candidate.name),
            candidate.module
        ),
        palette.warn(),
    ));
    lines.push((format!("           {}", candidate.why), palette.dim()));
    lines
}

/// An image id as `sha256:3f9c2a1b7d4e`; a tag or a manifest name as it is.
fn short_name(name: &str) -> String {
    if name.starts_with("sha256:") {
        short_digest(name)
    } else {
        name.to_string()
    }
}
