//! The stats view (in the detail overlay): per module builds, failures, median build time, the
//! decisions of the last converges (record/host/registry/build…) and the build time the skips saved.

use ratatui::style::Style;

use crate::app::state::AppState;
use crate::mesh::stats::seconds;
use crate::timefmt;

use super::ladder::{NOT_READ, Rung, Waiting, rung};
use super::lines::Palette;

type Line = (String, Style);

pub(crate) fn lines(state: &AppState, palette: Palette) -> Vec<Line> {
    let view = &state.views.stats;
    let mut lines: Vec<Line> = Vec::new();
    let waiting = Waiting {
        reading: "reading the build records and progress…",
        unread: NOT_READ,
        reread_hides_answer: true,
    };
    let stats = match rung(view, &waiting, palette) {
        Rung::Answer(stats) => stats,
        Rung::Waiting(line) => {
            lines.push(line);
            return lines;
        }
        Rung::Failed(error) => {
            lines.push((format!("cannot read the stats: {error}"), palette.bad()));
            return lines;
        }
    };
    lines.push((
        format!(
            "{:<14} {:>6} {:>6} {:>8} {:>8}  DECISIONS",
            "MODULE", "BUILDS", "FAILED", "MEDIAN", "SAVED"
        ),
        palette.heading(),
    ));
    for (name, m) in &stats.modules {
        let decisions = m.decisions_text();
        let style = if m.failures > 0 {
            palette.warn()
        } else {
            palette.plain()
        };
        lines.push((
            format!(
                "{:<14} {:>6} {:>6} {:>8} {:>8}  {}",
                name,
                m.builds,
                m.failures,
                m.median_build_ms.map(seconds).unwrap_or_else(|| "–".into()),
                seconds(m.saved_ms),
                if decisions.is_empty() {
                    "–".to_string()
                } else {
                    decisions
                }
            ),
            style,
        ));
    }
    let read = view
        .at_ms
        .map(|at| format!(" (read {} ago)", timefmt::age_since(at, state.now_ms)))
        .unwrap_or_default();
    lines.push((
        format!(
            "{} converge(s): the skips did not spend about {} of build time, each skip counted at its module's median build{read}",
            stats.converges,
            seconds(stats.saved_ms)
        ),
        palette.good(),
    ));
    lines
}
