//! Reading a failure on screen (issue 14): a failure of the current ref is red and shown in full in
//! the module's detail; a failure of an older ref is said to be one and leaves the row quiet.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::dashboard::*;
use meshtop::widgets::Palette;
use meshtop::widgets::detail::module_lines;
use meshtop::widgets::modules::last_build_cell;

fn detail_text(state: &meshtop::app::state::AppState, module: &str) -> Vec<String> {
    let info = state.modules.iter().find(|m| m.name == module).unwrap();
    module_lines(state, info, true, Palette { no_color: true })
        .into_iter()
        .map(|(text, _)| text)
        .collect()
}

#[test]
fn a_failure_of_the_current_ref_is_shown_in_full() {
    let state = demo_state();
    let palette = Palette { no_color: true };
    let (cell, style) = last_build_cell(&state, "api", palette);
    assert!(cell.contains("failed"), "{cell}");
    assert_eq!(style, palette.bad());
    let lines = detail_text(&state, "api");
    let error = lines.iter().position(|l| l == "error:").expect("the error");
    let log = lines
        .iter()
        .position(|l| l == "end of its log:")
        .expect("the log");
    assert!(
        log < error,
        "the log's end comes before the error, last: {lines:#?}"
    );
    assert_eq!(
        lines.last().map(String::as_str),
        Some("  build stopped"),
        "the error's last words end the detail: {lines:#?}"
    );
    assert!(lines.iter().any(|l| l.contains("step 3/5 COPY failed")));
}

#[test]
fn a_failure_of_an_older_ref_is_said_so_and_not_red() {
    let mut state = demo_state();
    let build = state.last_builds.get_mut("api").unwrap();
    build.reference = Some("demo/api:0000older0000-amd64".into());
    build.error = Some("\u{1b}[91mold trouble\u{1b}[0m".into());
    let palette = Palette { no_color: true };
    let (cell, style) = last_build_cell(&state, "api", palette);
    assert!(cell.contains("old ref"), "{cell}");
    assert_ne!(style, palette.bad());
    let lines = detail_text(&state, "api");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("was for an older ref demo/api:0000older0000-amd64")),
        "{lines:#?}"
    );
    assert!(
        !lines.iter().any(|l| l.contains("old trouble")),
        "{lines:#?}"
    );
}
