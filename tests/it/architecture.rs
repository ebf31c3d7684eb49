//! docs/architecture.md draws the crates and what each may depend on; this holds the drawing to
//! every `Cargo.toml`, and holds the domain to its purity through everything it pulls in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::common::source_tree::repository;

/// A crate as drawn: its folder and the crates of meshtop it depends on.
#[derive(Debug, PartialEq)]
struct Drawn {
    folder: String,
    depends_on: BTreeSet<String>,
}

/// What nothing the domain pulls in may be, however deep: a runtime, a client of an outside system,
/// a database, a file watcher or the terminal.
const NEVER_UNDER_THE_DOMAIN: &[&str] = &[
    "tokio",
    "mio",
    "hyper",
    "reqwest",
    "bollard",
    "kube",
    "kube-client",
    "tonic",
    "rusqlite",
    "notify",
    "ratatui",
    "crossterm",
    "rayon",
    "tar",
    "directories",
];

/// The fenced block that follows `marker` in `text`.
fn block_after<'a>(text: &'a str, marker: &str) -> &'a str {
    let from = text
        .find(marker)
        .unwrap_or_else(|| panic!("docs/architecture.md has no {marker:?}"));
    let open = from + text[from..].find("```\n").expect("a fenced block after it") + 4;
    let close = open + text[open..].find("```").expect("the block closes");
    &text[open..close]
}

/// The crates drawn in the table under `## The crates`, by name.
fn drawn(doc: &str) -> Result<BTreeMap<String, Drawn>, String> {
    let block = block_after(doc, "## The crates");
    let mut crates = BTreeMap::new();
    for (n, line) in block.lines().enumerate().skip(1) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [name, folder, deps @ ..] = words.as_slice() else {
            return Err(format!(
                "line {} of the crates table: {line:?} is not `crate folder deps…`",
                n + 1
            ));
        };
        let depends_on = deps
            .iter()
            .filter(|d| **d != "-")
            .map(|d| d.to_string())
            .collect();
        let drawn = Drawn {
            folder: folder.to_string(),
            depends_on,
        };
        if crates.insert(name.to_string(), drawn).is_some() {
            return Err(format!("{name} is drawn twice"));
        }
    }
    Ok(crates)
}

fn manifest(folder: &Path) -> toml::Table {
    let path = folder.join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn dependencies(table: &toml::Table) -> BTreeSet<String> {
    table
        .get("dependencies")
        .and_then(|d| d.as_table())
        .map(|d| d.keys().cloned().collect())
        .unwrap_or_default()
}

/// What the drawing gets wrong about the manifests under `root`, one line each.
fn disagreements(root: &Path, doc: &str) -> Vec<String> {
    let crates = match drawn(doc) {
        Ok(crates) => crates,
        Err(e) => return vec![e],
    };
    let mut wrong = Vec::new();
    for (name, drawn) in &crates {
        let table = manifest(&root.join(&drawn.folder));
        let package = table
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str());
        if package != Some(name) {
            wrong.push(format!(
                "{}/Cargo.toml is {package:?}, drawn as {name}",
                drawn.folder
            ));
        }
        let own: BTreeSet<String> = dependencies(&table)
            .into_iter()
            .filter(|d| d.starts_with("meshtop-"))
            .collect();
        if own != drawn.depends_on {
            wrong.push(format!(
                "{name} depends on {own:?}, drawn as {:?}",
                drawn.depends_on
            ));
        }
    }
    for entry in std::fs::read_dir(root.join("crates")).expect("crates/") {
        let folder = format!(
            "crates/{}",
            entry.expect("an entry").file_name().to_string_lossy()
        );
        if !crates.values().any(|d| d.folder == folder) {
            wrong.push(format!("{folder} is a crate the drawing does not show"));
        }
    }
    let listed: BTreeSet<String> = block_after(doc, "The pure domain's outside crates")
        .trim()
        .strip_prefix("meshtop-mesh uses")
        .unwrap_or_default()
        .split_whitespace()
        .map(|d| d.replace('_', "-"))
        .collect();
    let outside: BTreeSet<String> = dependencies(&manifest(&root.join("crates/mesh")))
        .into_iter()
        .map(|d| d.replace('_', "-"))
        .collect();
    if listed != outside {
        wrong.push(format!(
            "meshtop-mesh uses {outside:?}, listed as {listed:?}"
        ));
    }
    wrong
}

#[test]
fn the_drawing_of_the_crates_is_what_cargo_says() {
    let doc = std::fs::read_to_string(repository().join("docs/architecture.md")).expect("the doc");
    let wrong = disagreements(&repository(), &doc);
    assert!(
        wrong.is_empty(),
        "docs/architecture.md against Cargo.toml:\n{}",
        wrong.join("\n")
    );
    assert!(
        drawn(&doc).expect("read").len() >= 7,
        "the drawing lost crates"
    );
}

#[test]
fn a_drawing_that_leaves_out_an_edge_or_a_crate_is_caught() {
    let doc = std::fs::read_to_string(repository().join("docs/architecture.md")).expect("the doc");
    let no_edge = doc.replacen(
        "meshtop-backends    crates/backends   meshtop-mesh meshtop-timefmt",
        "meshtop-backends    crates/backends   meshtop-mesh",
        1,
    );
    assert_ne!(no_edge, doc, "the planted change found its line");
    let wrong = disagreements(&repository(), &no_edge);
    assert!(
        wrong
            .iter()
            .any(|w| w.starts_with("meshtop-backends depends on")),
        "{wrong:?}"
    );
    let no_crate = doc.replacen(
        "meshtop-timefmt     crates/timefmt    meshtop-mesh\n",
        "",
        1,
    );
    let wrong = disagreements(&repository(), &no_crate);
    assert!(
        wrong.contains(&"crates/timefmt is a crate the drawing does not show".to_string()),
        "{wrong:?}"
    );
    let more = doc.replacen(
        "meshtop-mesh uses   base64",
        "meshtop-mesh uses   tokio base64",
        1,
    );
    assert!(
        disagreements(&repository(), &more)
            .iter()
            .any(|w| w.starts_with("meshtop-mesh uses"))
    );
}

/// Every package the domain pulls in, however deep (normal dependencies only), from `cargo metadata`.
fn under_the_domain() -> BTreeSet<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    // This machine's platform only: a fresh machine has downloaded only what builds here, and
    // `--offline` cannot fetch another platform's packages (android_system_properties…).
    let rustc = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc -vV runs");
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .expect("rustc -vV names its host");
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .args(["--filter-platform", &host])
        .current_dir(repository())
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("its JSON");
    let names: BTreeMap<&str, &str> = meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| {
            (
                p["id"].as_str().expect("an id"),
                p["name"].as_str().expect("a name"),
            )
        })
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .expect("the resolve graph")
        .iter()
        .map(|n| (n["id"].as_str().expect("an id"), n))
        .collect();
    let domain = names
        .iter()
        .find(|(_, name)| **name == "meshtop-mesh")
        .map(|(id, _)| *id)
        .expect("meshtop-mesh in the workspace");
    let mut seen = BTreeSet::new();
    let mut stack = vec![domain];
    while let Some(id) = stack.pop() {
        for dep in nodes[id]["deps"].as_array().expect("deps") {
            let normal = dep["dep_kinds"]
                .as_array()
                .expect("dep_kinds")
                .iter()
                .any(|k| k["kind"].is_null());
            let pkg = dep["pkg"].as_str().expect("pkg");
            if normal && seen.insert(names[pkg].to_string()) {
                stack.push(pkg);
            }
        }
    }
    seen
}

#[test]
fn nothing_the_domain_pulls_in_reaches_outside() {
    let under = under_the_domain();
    assert!(
        under.contains("sha2") && under.contains("serde"),
        "the graph was not read: {under:?}"
    );
    let outside: Vec<&&str> = NEVER_UNDER_THE_DOMAIN
        .iter()
        .filter(|n| under.contains(**n))
        .collect();
    assert!(
        outside.is_empty(),
        "meshtop-mesh pulls in {outside:?}: the domain stays pure"
    );
}
