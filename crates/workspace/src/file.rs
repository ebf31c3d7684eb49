//! `mesh.toml`: find it, read it, validate it into a [`Mesh`]. The format is documented in `docs/mesh-file.md`.
//!
//! Every error names the file, the line, what is wrong (with the module or key) and how to fix it.
//! Nothing here panics on any input: an empty file, binary junk or huge names are errors like any other.

mod builders;
mod compose;
mod keys;
mod names;
mod paths;
mod read;
mod secrets;
mod service;
mod table;
mod targets;
mod trust;
mod typos;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::de::DeTable;

use crate::mesh::model::{MachineSpec, Mesh, Module};
use crate::mesh::tiers::{TierError, cycle_text, resolve_tiers};
pub use builders::TLS_FILES;
pub use keys::read_signing_key;
use names::suggest;
pub use names::{MAX_MACHINE_NAME, MAX_NAME};
use read::{RawMachine, RawModule};
use table::{Section, Source, show};

/// The name meshtop looks for when `--mesh` is not given.
pub const MESH_FILE_NAME: &str = "mesh.toml";

/// A mesh file larger than this is refused before parsing (a mesh file is a few kilobytes).
pub(crate) const MAX_MESH_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// A mesh file that could not be found, read or accepted.
/// Displays as `<file>:<line>: <what is wrong> — <how to fix>` (`:<column>` after the line for TOML
/// syntax errors; no line when the error is about the file as a whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{location}: {what} — {fix}", location = location(.file, .line, .column))]
pub struct MeshError {
    /// The mesh file (as it was given), or what was looked for.
    pub file: PathBuf,
    /// 1-based line the problem is on.
    pub line: Option<usize>,
    /// 1-based column (TOML syntax errors only).
    pub column: Option<usize>,
    /// What is wrong, naming the module or key.
    pub what: String,
    /// How to fix it.
    pub fix: String,
}

fn location(file: &Path, line: &Option<usize>, column: &Option<usize>) -> String {
    match (*line, *column) {
        (Some(l), Some(c)) => format!("{}:{l}:{c}", file.display()),
        (Some(l), None) => format!("{}:{l}", file.display()),
        _ => file.display().to_string(),
    }
}

impl MeshError {
    pub(crate) fn at(
        file: &Path,
        line: Option<usize>,
        column: Option<usize>,
        what: impl Into<String>,
        fix: impl Into<String>,
    ) -> MeshError {
        MeshError {
            file: file.to_path_buf(),
            line,
            column,
            what: what.into(),
            fix: fix.into(),
        }
    }
}

/// `--mesh PATH` if given, else `./mesh.toml` in the current directory.
/// The error names what was tried and how to fix it.
pub fn find_mesh_file(explicit: Option<&Path>) -> Result<PathBuf, MeshError> {
    let cwd = std::env::current_dir().map_err(|e| {
        MeshError::at(
            Path::new(MESH_FILE_NAME),
            None,
            None,
            format!("cannot read the current directory: {e}"),
            "pass the mesh file with --mesh PATH",
        )
    })?;
    find_mesh_file_in(explicit, &cwd)
}

/// [`find_mesh_file`] with the current directory given (testable without changing the process's).
/// An explicit path to a directory means the `mesh.toml` inside it.
pub fn find_mesh_file_in(explicit: Option<&Path>, cwd: &Path) -> Result<PathBuf, MeshError> {
    match explicit {
        Some(given) => {
            let path = if given.is_absolute() {
                given.to_path_buf()
            } else {
                cwd.join(given)
            };
            if path.is_file() {
                return Ok(path);
            }
            if path.is_dir() {
                let inside = path.join(MESH_FILE_NAME);
                if inside.is_file() {
                    return Ok(inside);
                }
                return Err(MeshError::at(
                    given,
                    None,
                    None,
                    format!(
                        "--mesh names a directory that holds no {MESH_FILE_NAME} (tried {})",
                        inside.display()
                    ),
                    "pass the path of the mesh file itself with --mesh PATH",
                ));
            }
            Err(MeshError::at(
                given,
                None,
                None,
                format!(
                    "the mesh file given with --mesh does not exist (tried {})",
                    path.display()
                ),
                "check the path given to --mesh",
            ))
        }
        None => {
            let path = cwd.join(MESH_FILE_NAME);
            if path.is_file() {
                return Ok(path);
            }
            Err(MeshError::at(
                &path,
                None,
                None,
                format!(
                    "no mesh file: --mesh was not given and there is no {MESH_FILE_NAME} in the current directory"
                ),
                format!(
                    "run meshtop in the directory holding {MESH_FILE_NAME}, or pass --mesh PATH"
                ),
            ))
        }
    }
}

/// Read, parse and validate a mesh file; tiers resolved, modules sorted by (tier, name).
/// A module that sets no platforms, in a mesh that sets none, keeps `platforms` empty: the daemon's own.
pub fn load(path: &Path) -> Result<Mesh, MeshError> {
    let unreadable = |e: std::io::Error| {
        let fix = match e.kind() {
            std::io::ErrorKind::NotFound => {
                "check the path, or pass the mesh file with --mesh PATH"
            }
            std::io::ErrorKind::PermissionDenied => "make the mesh file readable by this user",
            _ => "check that the path is a readable file",
        };
        MeshError::at(
            path,
            None,
            None,
            format!("cannot read the mesh file: {e}"),
            fix,
        )
    };
    let size = std::fs::metadata(path).map_err(unreadable)?.len();
    if size > MAX_MESH_FILE_BYTES {
        return Err(MeshError::at(
            path,
            None,
            None,
            format!("the mesh file is {size} bytes; more than {MAX_MESH_FILE_BYTES} is refused"),
            "check that --mesh names a mesh file, not some other file",
        ));
    }
    let bytes = std::fs::read(path).map_err(unreadable)?;
    match String::from_utf8(bytes) {
        Ok(text) => parse(&text, path),
        Err(e) => {
            let valid = e.utf8_error().valid_up_to();
            let (line, column) = table::line_col(e.as_bytes(), valid);
            Err(MeshError::at(
                path,
                Some(line),
                Some(column),
                "the mesh file is not UTF-8 text",
                "save it as UTF-8 (is --mesh pointing at the right file?)",
            ))
        }
    }
}

/// Parse and validate mesh-file text. `path` is where the text came from: contexts resolve relative
/// to its directory, and the repository root is found from there.
pub fn parse(text: &str, path: &Path) -> Result<Mesh, MeshError> {
    let src = Source::new(text, path);
    let doc = DeTable::parse(text).map_err(|e| src.toml_error(&e))?;
    let top = Section {
        table: doc.get_ref(),
        span: 0..0,
        label: "the mesh file".into(),
        allowed: read::TOP_KEYS,
    };
    top.check_keys(&src)?;

    let header = read::mesh_header(&src, &top)?;
    let targets = targets::targets(&src, top.get("target"), &header.name)?;
    let modules = read::modules(&src, top.get("module"), &header)?;
    let machines = read::machines(
        &src,
        top.get("machine"),
        &targets.machine_targets(),
        targets.named(),
    )?;
    let builders = builders::builders(&src, top.get("builder"), &header)?;

    unique_names(&src, &modules, &machines)?;
    let names: Vec<&str> = modules.iter().map(|m| m.name.get_ref().as_str()).collect();
    machines_run_modules(&src, &machines, &names)?;

    let tiers = tiers_of(&src, &modules, &names)?;

    // Paths last: they touch the file system.
    let file = absolute_file(path)?;
    let dir = file
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("/"));
    let root = paths::find_root(&dir);
    let resolved = resolved_modules(&src, (&root, &dir), modules, &tiers, &header.platforms)?;
    let trust = trust::trusted_keys(&src, &dir, &header.trust)?;
    trust::require_signed_has_trust(&src, &targets.environments, &trust)?;

    Ok(Mesh {
        name: header.name,
        file,
        root,
        registry: header.registry,
        publish: header.publish,
        multi_platform: header.multi_platform,
        signing: crate::mesh::model::Signing {
            trust,
            key: None,
            trusted_builders: header.trusted_builders,
            builder_id: keys::builder_id(header.builder_id),
        },
        targets: targets.targets,
        environments: targets.environments,
        rollout_deadline: targets.rollout_deadline,
        builders,
        modules: resolved,
        machines: machines
            .into_iter()
            .map(|m| MachineSpec {
                name: m.name.into_inner(),
                module: m.module.into_inner(),
                target: m.target,
                command: m.command,
                env: m.env,
                compose: m.compose,
                service: service::resolved(m.service, &dir),
            })
            .collect(),
    })
}

/// Module and machine names are unique: the second of two is refused, naming both lines.
fn unique_names(
    src: &Source<'_>,
    modules: &[RawModule],
    machines: &[RawMachine],
) -> Result<(), MeshError> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for module in modules {
        let line = src.line(&module.name.span());
        if let Some(first) = seen.insert(module.name.get_ref(), line) {
            return Err(src.err(
                &module.name.span(),
                format!(
                    "module {} is declared twice (lines {first} and {line})",
                    show(module.name.get_ref()),
                ),
                "rename one of them or remove the duplicate [[module]] table",
            ));
        }
    }
    let mut seen_machines: BTreeMap<&str, usize> = BTreeMap::new();
    for machine in machines {
        let line = src.line(&machine.name.span());
        if let Some(first) = seen_machines.insert(machine.name.get_ref(), line) {
            return Err(src.err(
                &machine.name.span(),
                format!(
                    "machine {} is declared twice (lines {first} and {line})",
                    show(machine.name.get_ref())
                ),
                "machine names are container names and must be unique: rename or remove one",
            ));
        }
    }
    Ok(())
}

/// Every machine runs a module of this mesh (else the nearest name is suggested).
fn machines_run_modules(
    src: &Source<'_>,
    machines: &[RawMachine],
    names: &[&str],
) -> Result<(), MeshError> {
    for machine in machines {
        if !names.contains(&machine.module.get_ref().as_str()) {
            return Err(src.err(
                &machine.module.span(),
                format!(
                    "machine {} runs module {}, which is not a module of this mesh",
                    show(machine.name.get_ref()),
                    show(machine.module.get_ref())
                ),
                suggest(machine.module.get_ref(), names),
            ));
        }
    }
    Ok(())
}

/// The modules with their paths resolved (under the repository `root`, relative to the file's
/// `dir`) and their tiers, in tier order. Resolved side by side (a few `lstat`s each, thousands
/// of modules); the first module in the file that fails is the one said.
fn resolved_modules(
    src: &Source<'_>,
    (root, dir): (&Path, &Path),
    modules: Vec<RawModule>,
    tiers: &BTreeMap<String, u32>,
    platforms: &[crate::mesh::model::Platform],
) -> Result<Vec<Module>, MeshError> {
    use rayon::prelude::*;
    let results: Vec<Result<Module, MeshError>> = modules
        .into_par_iter()
        .map(|raw| {
            let tier = tiers.get(raw.name.get_ref().as_str()).copied().unwrap_or(0);
            paths::resolve_module(src, root, dir, raw, tier, platforms)
        })
        .collect();
    let mut resolved = results
        .into_iter()
        .collect::<Result<Vec<Module>, MeshError>>()?;
    resolved.sort_by(|a, b| (a.tier, &a.name).cmp(&(b.tier, &b.name)));
    Ok(resolved)
}

/// The mesh file's absolute path, its directory canonical (symlinks resolved).
fn absolute_file(path: &Path) -> Result<PathBuf, MeshError> {
    let fail = |what: String| {
        MeshError::at(
            path,
            None,
            None,
            what,
            "give the path of a mesh file in an existing directory",
        )
    };
    let absolute = std::path::absolute(path)
        .map_err(|e| fail(format!("cannot make the mesh file's path absolute: {e}")))?;
    let name = absolute
        .file_name()
        .ok_or_else(|| fail("the mesh file's path has no file name".into()))?;
    let dir = absolute.parent().unwrap_or_else(|| Path::new("/"));
    let dir = std::fs::canonicalize(dir).map_err(|e| {
        fail(format!(
            "cannot resolve the mesh file's directory {}: {e}",
            dir.display()
        ))
    })?;
    Ok(dir.join(name))
}

fn tiers_of(
    src: &Source<'_>,
    modules: &[RawModule],
    names: &[&str],
) -> Result<BTreeMap<String, u32>, MeshError> {
    let builds_on: BTreeMap<String, Vec<String>> = modules
        .iter()
        .map(|m| {
            let mut on: Vec<String> = m.base.iter().map(|b| b.get_ref().clone()).collect();
            on.extend(
                m.contexts
                    .iter()
                    .map(|(_, module)| module.get_ref().clone()),
            );
            (m.name.get_ref().clone(), on)
        })
        .collect();
    let by_name: BTreeMap<&str, &RawModule> = modules
        .iter()
        .map(|m| (m.name.get_ref().as_str(), m))
        .collect();
    // Where `module` names `on`: its `base`, else the named context that names it.
    let edge_span = |module: &str, on: Option<&str>| {
        let Some(m) = by_name.get(module) else {
            return 0..0;
        };
        let context = m
            .contexts
            .iter()
            .find(|(_, target)| on.is_some_and(|on| target.get_ref() == on))
            .map(|(_, target)| target.span());
        match (&m.base, context) {
            (Some(base), _) if on.is_none_or(|on| base.get_ref() == on) => base.span(),
            (_, Some(span)) => span,
            (Some(base), None) => base.span(),
            (None, None) => 0..0,
        }
    };
    resolve_tiers(&builds_on).map_err(|e| match e {
        TierError::SelfBase { module } => src.err(
            &edge_span(&module, Some(&module)),
            format!("module {} names itself as its base or a named context", show(&module)),
            "a module cannot build FROM itself: remove that `base` or `contexts` entry, or name another module",
        ),
        TierError::UnknownBase { module, base } => {
            let others: Vec<&str> = names.iter().copied().filter(|n| *n != module).collect();
            let span = edge_span(&module, Some(&base));
            let what = match by_name.get(module.as_str()).and_then(|m| m.base.as_ref()) {
                Some(b) if b.get_ref() == &base => format!("module {} names base {}", show(&module), show(&base)),
                _ => format!("a named context of module {} names {}", show(&module), show(&base)),
            };
            src.err(
                &span,
                format!("{what}, which is not a module of this mesh"),
                suggest(&base, &others),
            )
        }
        TierError::Cycle(cycle) => {
            let first = cycle.first().map(String::as_str).unwrap_or_default();
            src.err(
                &edge_span(first, cycle.get(1).map(String::as_str)),
                format!("base cycle: {}", cycle_text(&cycle)),
                "no module can build FROM itself, even through others: remove or change one of these `base` or `contexts` keys",
            )
        }
    })
}
