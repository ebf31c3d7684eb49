#![allow(clippy::unwrap_used)]
use ratatui::crossterm::event::{KeyCode, KeyModifiers};

use super::*;

fn event(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
    KeyEvent::new(code, modifiers)
}

#[test]
fn no_two_actions_share_a_key_in_one_mode() {
    assert_eq!(KeyTable::new(false).clashes(), Vec::<String>::new());
    assert_eq!(KeyTable::new(true).clashes(), Vec::<String>::new());
}

#[test]
fn clashes_are_found() {
    let mut table = KeyTable::new(false);
    table.modes[0][0].keys.push(Key::ch('q'));
    assert_eq!(table.clashes(), vec!["normal: q → up, quit".to_string()]);
}

#[test]
fn dispatch_shift_and_ctrl() {
    let table = KeyTable::new(false);
    let n = Mode::Normal;
    assert_eq!(
        table.lookup(n, &event(KeyCode::Char('C'), KeyModifiers::SHIFT)),
        Some(Action::ConvergeMesh)
    );
    assert_eq!(
        table.lookup(n, &event(KeyCode::Char('c'), KeyModifiers::NONE)),
        Some(Action::ConvergeModule)
    );
    assert_eq!(
        table.lookup(n, &event(KeyCode::Char('c'), KeyModifiers::CONTROL)),
        Some(Action::Quit)
    );
    assert_eq!(
        table.lookup(n, &event(KeyCode::BackTab, KeyModifiers::SHIFT)),
        Some(Action::PrevPane)
    );
    assert_eq!(
        table.lookup(Mode::Filter, &event(KeyCode::Char('q'), KeyModifiers::NONE)),
        None
    );
}

#[test]
fn readonly_removes_actions_from_the_table() {
    let table = KeyTable::new(true);
    for action in [
        Action::ConvergeModule,
        Action::ConvergeMesh,
        Action::ForceRebuild,
        Action::Send,
    ] {
        assert!(!table.has(Mode::Normal, action));
    }
    assert_eq!(
        table.lookup(Mode::Normal, &event(KeyCode::Char('f'), KeyModifiers::NONE)),
        None
    );
    assert!(
        !table
            .hints(Mode::Normal)
            .iter()
            .any(|(_, word, _)| *word == "force")
    );
}

#[test]
fn overrides_apply_and_bad_ones_warn() {
    let text = r#"
[normal]
force_rebuild = "F"
send = "b"
bogus = "x"
quit = ["Q", "ctrl-d"]
[filter]
accept = "a"
[nowhere]
up = "k"
"#;
    let (table, warnings) = KeyTable::with_overrides(false, text);
    assert_eq!(table.keys_text(Mode::Normal, Action::ForceRebuild), "F");
    assert_eq!(table.keys_text(Mode::Normal, Action::Send), "s");
    // ctrl-c stays: it quits from every mode.
    assert_eq!(
        table.keys_text(Mode::Normal, Action::Quit),
        "Q/ctrl-d/ctrl-c"
    );
    assert_eq!(warnings.len(), 4, "{warnings:?}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("send") && w.contains("already bound to toggle_history"))
    );
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("bogus") && w.contains("unknown action"))
    );
    assert!(warnings.iter().any(|w| w.contains("[nowhere]")));
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("filter") && w.contains("text in the filter line"))
    );
    assert!(table.clashes().is_empty());
    let (_, broken) = KeyTable::with_overrides(false, "[normal");
    assert_eq!(broken.len(), 1);
    assert!(Key::parse("ctrl-").is_err() && Key::parse("f13").is_err());
}

#[test]
fn ctrl_c_still_quits_when_quit_is_rebound() {
    let (table, warnings) = KeyTable::with_overrides(false, "[normal]\nquit = [\"ctrl-d\"]\n");
    assert!(warnings.is_empty(), "{warnings:?}");
    let n = Mode::Normal;
    for code in ['d', 'c'] {
        assert_eq!(
            table.lookup(n, &event(KeyCode::Char(code), KeyModifiers::CONTROL)),
            Some(Action::Quit),
            "ctrl-{code}"
        );
    }
    assert_eq!(
        table.lookup(n, &event(KeyCode::Char('q'), KeyModifiers::NONE)),
        None
    );
}

#[test]
fn a_list_item_that_is_not_a_string_is_named() {
    let (table, warnings) = KeyTable::with_overrides(false, "[normal]\nquit = [\"x\", 1]\n");
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("1 is not a key"), "{warnings:?}");
    // The default is kept.
    assert_eq!(
        table.lookup(Mode::Normal, &event(KeyCode::Char('q'), KeyModifiers::NONE)),
        Some(Action::Quit)
    );
}

#[test]
fn the_bell_setting_sits_beside_the_tables() {
    let text = "bell = false\n[normal]\nquit = \"Q\"\n";
    let (settings, warnings) = KeyTable::settings_of(text);
    assert_eq!(settings.bell, Some(false));
    assert!(warnings.is_empty());
    // The setting is not a mode: the tables load without a warning about it.
    let (table, warnings) = KeyTable::with_overrides(false, text);
    assert!(warnings.is_empty(), "{warnings:?}");
    assert!(table.hint_line(Mode::Normal, &[Action::Quit]).contains('Q'));

    let (settings, warnings) = KeyTable::settings_of("bell = \"off\"\n");
    assert_eq!(settings.bell, None);
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].contains("bell must be true or false"),
        "{warnings:?}"
    );
    assert_eq!(KeyTable::settings_of("").0.bell, None);
}

#[test]
fn each_action_is_its_own_row_with_its_own_name() {
    let mut names = std::collections::HashSet::new();
    for (index, row) in ACTIONS.iter().enumerate() {
        assert_eq!(
            row.action as usize, index,
            "{} stands out of order",
            row.name
        );
        assert!(std::ptr::eq(row.action.row(), row));
        assert!(names.insert(row.name), "{} is named twice", row.name);
        assert_eq!(Action::parse(row.name), Some(row.action));
        assert!(!row.keys.is_empty(), "{} has no key in any mode", row.name);
    }
}

#[test]
fn a_row_says_per_mode_what_its_action_does_there() {
    assert_eq!(Action::Close.says_in(Mode::Confirm), "cancel");
    assert_eq!(
        Action::Close.says_in(Mode::Normal),
        "clear the filter and the notice"
    );
    // Without a word of its own in the mode, the help says the row's description.
    assert_eq!(Action::PageUp.says_in(Mode::Detail), "one page up");
}

#[test]
fn readonly_keeps_every_row_that_changes_nothing() {
    let table = KeyTable::new(true);
    for row in ACTIONS {
        for bound in row.keys {
            assert_eq!(
                table.has(bound.mode, row.action),
                !row.mutating,
                "{} in {} mode",
                row.name,
                bound.mode.name()
            );
        }
    }
}

#[test]
fn over_a_view_the_way_out_is_hinted_beside_quit() {
    let table = KeyTable::new(false);
    let words: Vec<&str> = table
        .hints(Mode::Detail)
        .iter()
        .map(|(_, word, _)| *word)
        .collect();
    assert_eq!(
        words,
        ["wrap", "promote", "target", "timeline", "close", "quit"]
    );
    let normal: Vec<&str> = table
        .hints(Mode::Normal)
        .iter()
        .map(|(_, word, _)| *word)
        .take(4)
        .collect();
    assert_eq!(normal, ["help", "pane", "detail", "close"]);
}
