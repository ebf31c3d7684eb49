//! The operation pane shows each event once for operations started on the dashboard (issue 23: a
//! converge's 24 events were 125 lines, its tier/decided/delivered block nine times): a converge,
//! a force and a send started from the keyboard, in tmux against the real daemon, each compared
//! with the state database's events for that operation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::ExampleMesh;
use common::tmux::{Tmux, row};
use meshtop::backends::state::StateDb;
use meshtop::mesh::progress::{EventRow, Step, said_once};

const WIDTH: u16 = 250;
const HEIGHT: u16 = 300;

/// The newest operation's events as the pane writes them (each step's word once; queued steps are
/// the table's), with its short id; None while it has not finished.
fn newest_operation(mesh: &ExampleMesh) -> Option<(i64, Vec<String>)> {
    let db = StateDb::open_for_reading(&mesh.state()).unwrap();
    let events = db.events_tail(&mesh.name, 2000).unwrap();
    let last = events.last()?.clone();
    let own: Vec<&EventRow> = events
        .iter()
        .filter(|e| e.operation_id == last.operation_id)
        .collect();
    if !own.iter().any(|e| e.step == Step::Finished) {
        return None;
    }
    let lines = own
        .iter()
        .filter(|e| e.step.is_line())
        .map(|e| {
            let (label, said) = said_once(e.step, e.module.as_deref(), &e.text);
            let text = format!(
                "{label:<14} {:<12} {}",
                e.module.as_deref().unwrap_or(""),
                meshtop::mesh::text::plain(said)
            );
            // What the pane's width shows of it, before a cut.
            text.chars()
                .take(usize::from(WIDTH) - 2)
                .collect::<String>()
                .trim_end()
                .to_string()
        })
        .collect();
    Some((last.operation?, lines))
}

/// The operation pane's lines on the screen: below its rule, which names the operation as what it
/// is (`send #3`, never `converge #3`), above the footer.
fn pane_lines(screen: &str, rule: &str, number: i64) -> Vec<String> {
    let rule = format!("── {rule} #{number}");
    let lines: Vec<&str> = screen.lines().collect();
    let Some(start) = lines
        .iter()
        .position(|l| l.contains(&rule) && l.contains('─'))
    else {
        return Vec::new();
    };
    let end = lines.len().saturating_sub(1);
    lines[start + 1..end]
        .iter()
        .map(|l| l.trim_end().to_string())
        .filter(|l| !l.is_empty())
        .collect()
}

/// A source's age as the header's second line says it (` plan 4s · record 1s · history 1s`), in
/// whole seconds; None while it has not answered, or when its last poll failed.
fn source_age(screen: &str, source: &str) -> Option<u64> {
    let header = screen.lines().nth(1)?;
    header.split(" · ").find_map(|part| {
        let (name, age) = part.trim().split_once(' ')?;
        if name != source {
            return None;
        }
        let (number, unit) = age.split_at(age.find(|c: char| !c.is_ascii_digit())?);
        let number: u64 = number.parse().ok()?;
        match unit {
            "s" => Some(number),
            "m" => Some(number * 60),
            "h" => Some(number * 3600),
            _ => None,
        }
    })
}

/// Wait until the sources a finished operation polls again have each answered after `seen` (when
/// the finish was seen on the screen): the history the pane is made from, and the record, host and
/// machines. An age of N on a screen drawn up to a second ago is an answer after `seen` once N + 2
/// seconds have passed since it. (The plan, polled each minute, is left out: no pane line is its.)
fn polled_since(tmux: &Tmux, seen: Instant, kind: &str) {
    const SOURCES: [&str; 4] = ["history", "record", "host", "machines"];
    tmux.wait_quietly(
        &format!("the history, record, host and machines polls after the {kind} finished"),
        Duration::from_secs(60),
        |screen| {
            let since = seen.elapsed().as_secs();
            SOURCES
                .iter()
                .all(|source| source_age(screen, source).is_some_and(|age| age + 2 <= since))
        },
    );
}

/// Wait for the newest operation (`kind`, its pane's rule saying `rule`) to finish and the pane to
/// show its last line, let the polls that a finished operation sets off arrive, then: the pane is the
/// operation's events, once.
fn pane_says_each_event_once(
    tmux: &Tmux,
    mesh: &ExampleMesh,
    (kind, rule): (&str, &str),
    after: i64,
) -> i64 {
    let long = Duration::from_secs(300);
    let found = std::cell::Cell::new(None);
    tmux.wait_quietly(&format!("{kind} to finish on screen"), long, |screen| {
        let Some((number, lines)) = newest_operation(mesh) else {
            return false;
        };
        let shown = pane_lines(screen, rule, number);
        let done = number > after && shown.last() == lines.last();
        if done {
            found.set(Some(number));
        }
        done
    });
    polled_since(tmux, Instant::now(), kind);
    let (number, lines) = newest_operation(mesh).unwrap();
    assert_eq!(Some(number), found.get(), "another operation ran");
    let screen = tmux.screen();
    let shown = pane_lines(&screen, rule, number);
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{:<14}", "finished")) && l.contains(kind)),
        "{lines:#?}"
    );
    // The pane shows the operation's tail: as many of its lines as fit, each once, in order.
    assert!(!shown.is_empty(), "{screen}");
    let tail = &lines[lines.len().saturating_sub(shown.len())..];
    assert_eq!(
        shown,
        tail,
        "{kind} #{number}: the pane is not the database's {} events\n{screen}",
        lines.len()
    );
    assert!(
        shown.len() == lines.len() || shown.len() > 20,
        "the pane shows the whole {kind} or a full pane:\n{screen}"
    );
    number
}

#[test]
fn a_converge_a_force_and_a_send_started_here_show_each_event_once() {
    let mesh = ExampleMesh::new("once");
    let tmux = Tmux::start(&mesh);
    tmux.resize(WIDTH, HEIGHT);
    tmux.wait_for("the modules table", Duration::from_secs(60), |s| {
        s.contains("modules · 5 of 5") && s.contains(&format!("{}/base:", mesh.name))
    });

    tmux.keys(&["C"]);
    tmux.wait_for("the converge confirmation", Duration::from_secs(10), |s| {
        s.contains("[ Cancel ]")
    });
    tmux.keys(&["Right", "Enter"]);
    let converge = pane_says_each_event_once(&tmux, &mesh, ("converge", "converge"), 0);

    // Force api (policy record): rebuilt, its machine held.
    tmux.keys(&["j", "j", "j"]); // base → tools → web → api
    tmux.wait_quietly("api selected", Duration::from_secs(10), |s| {
        s.contains("── api")
    });
    tmux.keys(&["f"]);
    tmux.wait_for("the force confirmation", Duration::from_secs(10), |s| {
        s.contains("[ Cancel ]")
    });
    tmux.keys(&["Right", "Enter"]);
    let force = pane_says_each_event_once(&tmux, &mesh, ("converge", "force"), converge);

    tmux.wait_for("api's machine held", Duration::from_secs(120), |s| {
        row(s, "api").contains("held")
    });
    tmux.keys(&["s"]);
    tmux.wait_for("the send confirmation", Duration::from_secs(10), |s| {
        s.contains("[ Cancel ]")
    });
    tmux.keys(&["Right", "Enter"]);
    pane_says_each_event_once(&tmux, &mesh, ("send", "send"), force);
}
