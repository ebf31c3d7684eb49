//! Every view of the dashboard says `stopped (process gone)` for a running build whose converge is
//! gone (derived when read, see `StateDb::builds`), and `stopped` for a row closed as stopped: the
//! builds pane, the modules pane's LAST BUILD, and the module detail (issue 14).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::dashboard::*;
use meshtop::app::msg::{Msg, PageRequest, Placement};
use meshtop::app::update::update;
use meshtop::mesh::builds::BuildStatus;
use meshtop::widgets::{self, Palette};
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;

fn text(buffer: &Buffer) -> String {
    let area = buffer.area;
    (0..area.height)
        .map(|y| {
            (0..area.width)
                .map(|x| buffer[(x, y)].symbol())
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_build_whose_process_is_gone_reads_stopped_process_gone_in_every_view() {
    let mut state = demo_state();
    let palette = Palette { no_color: true };
    let mut gone = build(
        "b-gone",
        "api",
        BuildStatus::Running,
        NOW - 60_000,
        "host-a",
    );
    gone.ended_ms = None;
    gone.process_gone = true;
    let mut stopped = build(
        "b-stop",
        "api",
        BuildStatus::Stopped,
        NOW - 120_000,
        "host-a",
    );
    // One age per build, since it ended (BuildRow::age): this one ended two minutes ago.
    stopped.ended_ms = Some(NOW - 120_000);
    stopped.error = Some(
        "process gone: converge 4b2e9d10 ended without recording the end of this build".into(),
    );
    update(
        &mut state,
        Msg::BuildsPage {
            request: PageRequest {
                module: Some("base".into()),
                before: None,
                limit: 100,
                placement: Placement::Replace,
            },
            at_ms: NOW,
            result: Ok(vec![gone.clone(), stopped.clone()]),
        },
    );
    state.last_builds.insert("api".into(), gone.clone());

    let area = Rect::new(0, 0, 120, 6);
    let mut buffer = Buffer::empty(area);
    widgets::builds::draw(&mut buffer, area, &state, palette);
    let pane = text(&buffer);
    let line = |id_module: &str, age: &str| {
        pane.lines()
            .find(|l| l.contains(id_module) && l.contains(age))
            .unwrap_or_else(|| panic!("no {id_module} line of age {age}:\n{pane}"))
            .to_string()
    };
    let gone_line = line("api", "1m");
    assert!(
        gone_line.contains("■ stopped") && gone_line.contains("(process gone)"),
        "{pane}"
    );
    assert!(!gone_line.contains("running"), "{pane}");
    let stopped_line = line("api", "2m");
    assert!(
        stopped_line.contains("■ stopped") && stopped_line.contains("process gone: converge"),
        "{pane}"
    );

    let (cell, _) = widgets::modules::last_build_cell(&state, "api", palette);
    assert!(cell.contains("stopped (process gone)"), "{cell}");

    let api = state
        .modules
        .iter()
        .find(|m| m.name == "api")
        .unwrap()
        .clone();
    let detail = widgets::detail::module_lines(&state, &api, true, palette);
    assert!(
        detail
            .iter()
            .any(|(l, _)| l.starts_with("last build: stopped (process gone)")),
        "{detail:?}"
    );
    assert!(
        widgets::lines::build_summary(&stopped, NOW).starts_with("stopped "),
        "{}",
        widgets::lines::build_summary(&stopped, NOW)
    );
}
