//! The source as the fences read it: every crate's files laid out again as the one tree they were
//! (`src/mesh/…`, `src/converge/…`, `src/app/…`), each path written as from that tree's root.
//!
//! The rooms are crates now, and Cargo keeps what each may depend on. What Cargo cannot say stays
//! with the syn fences (`layering.rs`: the standard library's disk, process and network kept out of
//! the pure rooms, the dashboard's rooms inside one crate, no knots, no long function;
//! `target_seam.rs`; `closed_sets.rs`). They were written against one tree, and reading the crates
//! as that tree keeps every rule and its self-tests as they are. In a finding, `src/<room>/` is the
//! room's crate: `mesh`, `workspace`, `backends` → `crates/<room>/src/`, `converge` →
//! `crates/engine/src/`, `app`, `sources`, `widgets`, `tui.rs` → `crates/dashboard/src/`, `timefmt.rs`
//! → `crates/timefmt/src/lib.rs`, `cli` and `main.rs` → `src/`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// A crate of the workspace and where its files stand in the one tree.
struct Room {
    /// Its source folder, from the repository's root.
    src: &'static str,
    /// Where its files go in the one tree (`src/mesh`), or `None` for a crate whose folders are
    /// already the tree's (the dashboard, the command line).
    folder: Option<&'static str>,
    /// The names its root gives the crates below it (`use meshtop_mesh as mesh;`): a `crate::mesh`
    /// path written in it already names the tree's `mesh`.
    aliases: &'static [&'static str],
}

const ROOMS: &[Room] = &[
    Room {
        src: "crates/mesh/src",
        folder: Some("src/mesh"),
        aliases: &[],
    },
    Room {
        src: "crates/workspace/src",
        folder: Some("src/workspace"),
        aliases: &["mesh"],
    },
    Room {
        src: "crates/backends/src",
        folder: Some("src/backends"),
        aliases: &["mesh", "timefmt"],
    },
    Room {
        src: "crates/engine/src",
        folder: Some("src/converge"),
        aliases: &["backends", "mesh", "timefmt", "workspace"],
    },
    Room {
        src: "crates/dashboard/src",
        folder: None,
        aliases: &[],
    },
    Room {
        src: "src",
        folder: None,
        aliases: &[],
    },
];

/// Each crate's name and the tree's path it stands for.
const CRATES: &[(&str, &str)] = &[
    ("meshtop_mesh", "crate::mesh"),
    ("meshtop_timefmt", "crate::timefmt"),
    ("meshtop_workspace", "crate::workspace"),
    ("meshtop_backends", "crate::backends"),
    ("meshtop_engine", "crate::converge"),
    ("meshtop_dashboard", "crate"),
];

/// The one tree's root file, as it declared the folders.
const ROOT_LIB: &str = "//! meshtop (the crates read as one tree).\n\npub mod app;\npub mod backends;\npub mod cli;\npub mod converge;\npub mod mesh;\npub mod sources;\npub mod timefmt;\npub mod tui;\npub mod widgets;\npub mod workspace;\n";

pub(crate) fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file of every crate as (`src/…` path in the one tree, its text rewritten for it).
pub(crate) fn files() -> &'static [(String, String)] {
    static FILES: OnceLock<Vec<(String, String)>> = OnceLock::new();
    FILES.get_or_init(|| {
        let root = repository();
        let mut files = vec![("src/lib.rs".to_string(), ROOT_LIB.to_string())];
        for room in ROOMS {
            for path in rust_files(&root.join(room.src)) {
                let relative = path
                    .strip_prefix(root.join(room.src))
                    .expect("under its crate")
                    .display()
                    .to_string();
                let Some(place) = place_of(room, &relative) else {
                    continue;
                };
                let text = std::fs::read_to_string(&path)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                files.push((place, rewritten(room, &text)));
            }
        }
        files.push((
            "src/timefmt.rs".to_string(),
            rewritten(
                &Room {
                    src: "crates/timefmt/src",
                    folder: None,
                    aliases: &[],
                },
                &std::fs::read_to_string(root.join("crates/timefmt/src/lib.rs")).expect("timefmt"),
            ),
        ));
        files.sort();
        assert!(files.len() > 50, "too few source files: {}", files.len());
        files
    })
}

/// The same tree written out under a folder of its own (once per process), for the fences that
/// walk a folder.
pub(crate) fn folder() -> &'static Path {
    static FOLDER: OnceLock<tempfile::TempDir> = OnceLock::new();
    FOLDER
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("a temporary folder");
            for (place, text) in files() {
                let path = dir.path().join(place);
                std::fs::create_dir_all(path.parent().expect("a parent")).expect("a folder");
                std::fs::write(&path, text).expect("a file written");
            }
            dir
        })
        .path()
}

/// Where a crate's file stands in the one tree; None for a crate root that only declares and names.
fn place_of(room: &Room, relative: &str) -> Option<String> {
    match room.folder {
        Some(folder) if relative == "lib.rs" => Some(format!("{folder}/mod.rs")),
        Some(folder) => Some(format!("{folder}/{relative}")),
        None if relative == "lib.rs" => None,
        None => Some(format!("src/{relative}")),
    }
}

/// The text with its paths as the one tree spells them: `crate::x` inside a room's crate is
/// `crate::<room>::x` (but for the names its root gives the crates below), and a crate named by its
/// own name (`meshtop_mesh::x`) is the tree's folder. The lines that give those names go.
fn rewritten(room: &Room, text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 256);
    for line in text.lines() {
        let trimmed = line.trim_start();
        if (trimmed.starts_with("use meshtop_") || trimmed.starts_with("pub use meshtop_"))
            && room.folder.is_some()
        {
            continue;
        }
        out.push_str(&rewrite_line(room, line));
        out.push('\n');
    }
    out
}

fn rewrite_line(room: &Room, line: &str) -> String {
    let mut line = line.to_string();
    for (name, path) in CRATES {
        line = replace_word(&line, name, path);
    }
    let Some(folder) = room.folder else {
        return line;
    };
    let own = folder.trim_start_matches("src/");
    let mut out = String::with_capacity(line.len());
    let mut rest = line.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let next: String = rest[at + 7..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        out.push_str(&rest[..at]);
        let is_word = !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$');
        if is_word && !room.aliases.contains(&next.as_str()) && next != own {
            out.push_str(&format!("crate::{own}::"));
        } else {
            out.push_str("crate::");
        }
        rest = &rest[at + 7..];
    }
    out.push_str(rest);
    out
}

/// `word` replaced by `with` where it stands as a whole identifier.
fn replace_word(line: &str, word: &str, with: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(at) = rest.find(word) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + word.len()..].chars().next();
        let ident = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        out.push_str(&rest[..at]);
        out.push_str(if ident(before) || ident(after) {
            word
        } else {
            with
        });
        rest = &rest[at + word.len()..];
    }
    out.push_str(rest);
    out
}

/// Every `.rs` file under `dir`, sorted.
pub(crate) fn rust_files(dir: &Path) -> Vec<PathBuf> {
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
    files
}

/// `std`, `core`, `alloc` and what the crates depend on, their own names left out
/// (dev-dependencies are not for the source).
pub(crate) fn externs() -> std::collections::BTreeSet<String> {
    let root = repository();
    let mut names: std::collections::BTreeSet<String> =
        ["std", "core", "alloc"].map(String::from).into();
    let manifests = std::fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| e.expect("an entry").path().join("Cargo.toml"))
        .chain([root.join("Cargo.toml")]);
    for manifest in manifests {
        let text = std::fs::read_to_string(&manifest).expect("a Cargo.toml");
        let table: toml::Table = toml::from_str(&text).expect("Cargo.toml parses");
        let deps = table
            .get("dependencies")
            .and_then(|d| d.as_table())
            .expect("[dependencies]");
        names.extend(
            deps.keys()
                .map(|k| k.replace('-', "_"))
                .filter(|k| !k.starts_with("meshtop_")),
        );
    }
    names
}
