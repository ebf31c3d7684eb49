//! The target is one seam (`src/converge/target/`): outside it, only the mesh file's reader and the
//! mesh model (which declare the kinds) name a target kind. Everybody else asks the seam, so a
//! third kind, or a second target of the same kind, cannot compile and be wrong somewhere else.
//!
//! Text search is enough here: a kind is named as a path (`Target::Docker`, `Spec::Kubernetes { .. }`,
//! `ConnectedTarget::…`), and the kinds are read from the model's own enum.

#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use regex::Regex;

/// Where a kind may be named: the seam, the mesh file's reader, the model that declares the kinds.
const ALLOWED: &[&str] = &[
    "src/converge/target/",
    "src/workspace/file",
    "src/mesh/model.rs",
];

/// Files that still name a kind on this branch and lose it when a branch working beside this one
/// lands (the app's: the header reads `state.target`, the seam's description). The test fails when
/// one of them no longer names a kind, so that the exception cannot outlive its reason.
const PENDING: &[&str] = &[];

/// The target kinds: the variants of `pub enum Target` in the mesh model.
fn kinds(root: &Path) -> Vec<String> {
    let model = std::fs::read_to_string(root.join("src/mesh/model.rs")).unwrap();
    let start = model
        .find("pub enum Target {")
        .expect("the model declares `pub enum Target`");
    let body = &model[start + "pub enum Target {".len()..];
    let variant = Regex::new(r"(?m)^    ([A-Z][A-Za-z0-9]*)\b").unwrap();
    let end = body.find("\n}").unwrap();
    variant
        .captures_iter(&body[..end])
        .map(|c| c[1].to_string())
        .collect()
}

/// The lines of `text` that name a target kind (comments left out), with their numbers.
fn kind_paths(text: &str, kinds: &[String]) -> Vec<(usize, String)> {
    let alternatives = kinds.join("|");
    // `Target::X` or `ConnectedTarget::` (a whole word: `RollbackTarget::` is no target); any
    // path ending in a kind and used as a pattern or value (`Spec::Kubernetes { .. }`,
    // `T::Docker =>`, `matches!(t, K::Docker)`); the spec renamed to walk past the first rule.
    let patterns = [
        r"\b(Connected)?Target::".to_string(),
        format!(r"(\w+)::({alternatives})\b\s*(\{{|\(|=>|\)|,|\|)"),
        r"\bTarget\s+as\s+\w+".to_string(),
    ];
    let patterns: Vec<Regex> = patterns.iter().map(|p| Regex::new(p).unwrap()).collect();
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        // A crate's own type of the same name (`bollard::Docker`, the daemon's client) is no kind.
        .filter(|(_, line)| {
            patterns.iter().any(|p| {
                p.captures_iter(line)
                    .any(|c| c.get(1).is_none_or(|prefix| prefix.as_str() != "bollard"))
            })
        })
        .map(|(number, line)| (number + 1, line.trim().to_string()))
        .collect()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
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

#[test]
fn no_file_outside_the_seam_names_a_target_kind() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let kinds = kinds(root);
    assert!(
        kinds.contains(&"Docker".to_string()) && kinds.contains(&"Kubernetes".to_string()),
        "the kinds were not read from the model: {kinds:?}"
    );
    let mut found = Vec::new();
    let mut pending_clean = Vec::new();
    for file in rust_files(&root.join("src")) {
        let relative = file
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if ALLOWED.iter().any(|a| relative.starts_with(a)) {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let hits = kind_paths(&text, &kinds);
        if PENDING.contains(&relative.as_str()) {
            if hits.is_empty() {
                pending_clean.push(relative);
            }
            continue;
        }
        for (line, code) in hits {
            found.push(format!("{relative}:{line}: {code}"));
        }
    }
    assert!(
        found.is_empty(),
        "these lines name a target kind outside src/converge/target/ (ask the seam instead: \
         describe(), delivery(), pushes_to(), host_is_target()…):\n{}",
        found.join("\n")
    );
    assert!(
        pending_clean.is_empty(),
        "no longer names a target kind: remove it from PENDING in tests/target_seam.rs: {pending_clean:?}"
    );
}

/// The check can fail: each way of naming a kind is caught, and look-alikes are not.
#[test]
fn the_check_catches_each_way_of_naming_a_kind() {
    let kinds = vec![
        "Docker".to_string(),
        "Kubernetes".to_string(),
        "Nomad".to_string(),
    ];
    for named in [
        "        if mesh.target == Target::Docker {",
        "    let pushes = matches!(target, ConnectedTarget::Kubernetes(_)) && registry;",
        "        Spec::Kubernetes { namespace, .. } => namespace.clone(),",
        "    let t = ConnectedTarget::connect(mesh, None, None).await?;",
        "        model::Nomad => \"nomad\",",
        "        matches!(spec, K::Docker)",
        "use crate::mesh::model::Target as Where;",
    ] {
        assert_eq!(kind_paths(named, &kinds).len(), 1, "not caught: {named}");
    }
    for innocent in [
        "            RollbackTarget::To(entry) => Ok(entry),",
        "    let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());",
        "use bollard::Docker;",
        "    // Target::Docker in a comment says nothing",
        "    let target = target::docker();",
    ] {
        assert!(
            kind_paths(innocent, &kinds).is_empty(),
            "caught, but names no kind: {innocent}"
        );
    }
}
