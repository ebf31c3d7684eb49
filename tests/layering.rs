//! The layering, held on the source text (as bottom holds its lints): data flows one way, and each
//! folder reaches only what its place in the house allows (docs/architecture.md).
//! - `mesh` is pure: no disk, no threads, no outside system, nothing above it;
//! - `widgets` draw from the app's state and domain types only;
//! - `app` never reaches the widgets, the sources, the terminal loop or an outside system;
//! - `backends` and `converge` never know the screen;
//! - no source file has more than 450 lines of non-test code without a reason written at its top
//!   (a `//! Long:` line).

#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};

/// Code lines of a file (comments and the `#[cfg(test)]` module left out), with their numbers.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut lines = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            break;
        }
        if trimmed.starts_with("//") || trimmed.is_empty() {
            continue;
        }
        lines.push((number + 1, line));
    }
    lines
}

/// Whether `line` names `word` as a path of its own (`fs::` in `std::fs::read`, not in `refs::`).
fn uses(line: &str, word: &str) -> bool {
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(!files.is_empty(), "no Rust file under {}", dir.display());
    files
}

fn src(folder: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(folder)
}

/// Every use of a forbidden path in the folder's code, as `file:line: text`.
fn breaches(folder: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for file in rust_files(&src(folder)) {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        for (number, line) in code_lines(&text) {
            for word in forbidden {
                if uses(line, word) {
                    found.push(format!(
                        "{}:{number}: `{word}` in `{}`",
                        file.display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    found
}

const OUTSIDE_SYSTEMS: &[&str] = &[
    "bollard",
    "kube::",
    "k8s_openapi",
    "rusqlite",
    "reqwest",
    "process::Command",
    "TcpStream",
    "TcpListener",
    "UdpSocket",
    "UnixStream",
    "tokio::net",
];
const THE_SCREEN: &[&str] = &[
    "ratatui",
    "crossterm",
    "crate::widgets",
    "crate::app",
    "crate::tui",
    "crate::sources",
];

#[test]
fn the_domain_is_pure() {
    let mut forbidden = vec![
        "std::fs",
        "fs::",
        "File::",
        "std::thread",
        "rayon",
        "tokio",
        "env::var",
        "crate::backends",
        "crate::workspace",
        "crate::converge",
        "crate::sources",
        "crate::app",
        "crate::widgets",
        "crate::tui",
        "crate::cli",
        "SystemTime",
        "Utc::now",
        "Local::now",
    ];
    forbidden.extend(OUTSIDE_SYSTEMS);
    let found = breaches("mesh", &forbidden);
    assert!(
        found.is_empty(),
        "src/mesh must stay pure:\n{}",
        found.join("\n")
    );
}

#[test]
fn widgets_draw_from_the_app_state_and_domain_types_only() {
    let mut forbidden = vec![
        "std::fs",
        "tokio",
        "std::thread",
        "crate::backends",
        "crate::converge",
        "crate::sources",
        "crate::workspace",
        "crate::tui",
        "crate::cli",
        "app::update",
    ];
    forbidden.extend(OUTSIDE_SYSTEMS);
    let found = breaches("widgets", &forbidden);
    assert!(
        found.is_empty(),
        "src/widgets may only read state:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_app_never_reaches_the_widgets_the_loop_or_an_outside_system() {
    let mut forbidden = vec![
        "crate::widgets",
        "crate::tui",
        "crate::sources",
        "crate::cli",
        "crate::backends",
        "crate::converge",
        "crate::workspace",
        "std::fs",
        "tokio::spawn",
        "std::thread",
    ];
    forbidden.extend(OUTSIDE_SYSTEMS);
    let found = breaches("app", &forbidden);
    assert!(
        found.is_empty(),
        "src/app is state and its update only:\n{}",
        found.join("\n")
    );
}

#[test]
fn backends_and_the_engine_never_know_the_screen() {
    let mut found = breaches("backends", THE_SCREEN);
    found.extend(breaches("converge", THE_SCREEN));
    found.extend(breaches("workspace", THE_SCREEN));
    assert!(
        found.is_empty(),
        "the screen leaked below the app:\n{}",
        found.join("\n")
    );
}

#[test]
fn outside_systems_are_reached_from_backends_only() {
    let mut found = Vec::new();
    for folder in [
        "converge",
        "sources",
        "app",
        "widgets",
        "mesh",
        "workspace",
        "cli",
    ] {
        found.extend(breaches(folder, OUTSIDE_SYSTEMS));
    }
    assert!(
        found.is_empty(),
        "an outside system outside src/backends:\n{}",
        found.join("\n")
    );
}

#[test]
fn every_source_file_reads_in_one_sitting() {
    let mut long = Vec::new();
    for file in rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src")) {
        let text = std::fs::read_to_string(&file).expect("a readable source file");
        let has_reason = text.lines().take(20).any(|l| l.starts_with("//! Long:"));
        let count = code_lines(&text).len();
        if count > 450 && !has_reason {
            long.push(format!(
                "{}: {count} lines of non-test code",
                file.display()
            ));
        }
    }
    assert!(
        long.is_empty(),
        "split these files or say at their top why not (`//! Long: …`):\n{}",
        long.join("\n")
    );
}

#[test]
fn the_checks_above_can_fail() {
    // A breach planted in text must be found, or the checks above prove nothing.
    let planted = "use std::fs;\n#[cfg(test)]\nmod tests { use rayon; }\n";
    let lines = code_lines(planted);
    assert_eq!(lines.len(), 1);
    assert!(uses(lines[0].1, "std::fs"));
    assert!(uses("let f = fs::read(p);", "fs::"));
    assert!(!uses("use super::refs::ImageRef;", "fs::"));
}
