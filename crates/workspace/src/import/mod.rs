//! `meshtop init --from FILE`: a compose file, a bake file or a skaffold file read into a draft of
//! a mesh file ([`Draft`]), which [`write::render`] writes as `mesh.toml` with a comment for every
//! key it could not carry and why.
//!
//! Each reader keeps the file's own names (services, targets, images); [`Draft::finish`] turns
//! them into module names (`[a-z0-9][a-z0-9-]*`, at most 63 characters), resolves collisions and
//! the edges between modules, and says what it renamed.

mod bake;
mod compose;
mod dockerfile;
mod paths;
mod skaffold;
pub mod write;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::file::{MAX_NAME, MeshError};

/// The three kinds of file `init` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Compose,
    Bake,
    Skaffold,
}

impl Kind {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Kind::Compose => "compose file",
            Kind::Bake => "bake file",
            Kind::Skaffold => "skaffold file",
        }
    }
}

/// What `init` refuses a file it does not know with.
pub(crate) const KINDS_READ: &str = "a compose file (compose.yaml, docker-compose.yml), a bake file (docker-bake.hcl) or a skaffold file (skaffold.yaml)";

/// A mesh file to be, as read from another tool's file.
#[derive(Debug, Clone, Default)]
pub struct Draft {
    /// The mesh's name (already a valid name).
    pub mesh: String,
    pub modules: Vec<DraftModule>,
    pub machines: Vec<DraftMachine>,
    /// What the file says that belongs to no module or machine and was not carried, and why.
    pub notes: Vec<String>,
    /// Names changed to meshtop's rule or to resolve a collision: `service Web_App → module web-app`.
    pub renamed: Vec<String>,
}

/// One module to be: what its file calls it, and its keys with paths still absolute.
#[derive(Debug, Clone, Default)]
pub struct DraftModule {
    /// The file's own name for it (a service, a target, an image).
    pub source: String,
    /// The module's name, once [`Draft::finish`] gave it one.
    pub name: String,
    /// The build context (absolute, `..` resolved).
    pub context: PathBuf,
    /// The Dockerfile, relative to the context; `None`: `Dockerfile`.
    pub dockerfile: Option<String>,
    pub target: Option<String>,
    pub args: BTreeMap<String, String>,
    /// Another draft module's `source` it builds on (through the build arg BASE).
    pub base: Option<String>,
    /// Named contexts: the name its Dockerfile writes → another draft module's `source`.
    pub contexts: BTreeMap<String, String>,
    /// What was not carried for this module, and why.
    pub notes: Vec<String>,
    /// Why the module cannot be written at all (it is written as a comment).
    pub skipped: Option<String>,
}

/// One compose service as a machine (with a module when a module builds it).
#[derive(Debug, Clone, Default)]
pub struct DraftMachine {
    pub service: String,
    pub project: String,
    /// The `source` of the module it runs; `None`: it runs an image meshtop does not build.
    pub module: Option<String>,
    pub image: Option<String>,
    pub notes: Vec<String>,
}

/// Read `file` into a draft: its kind from its name, else from what it holds.
pub fn read(file: &Path) -> Result<(Kind, Draft), MeshError> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        MeshError::at(
            file,
            None,
            None,
            format!("cannot read it: {e}"),
            "give the path of a readable compose, bake or skaffold file",
        )
    })?;
    let kind = kind_of(file, &text)?;
    let dir = file_dir(file)?;
    let mut draft = match kind {
        Kind::Compose => compose::read(file, &dir, &text)?,
        Kind::Bake => bake::read(file, &dir, &text)?,
        Kind::Skaffold => skaffold::read(file, &dir, &text)?,
    };
    draft.finish();
    Ok((kind, draft))
}

/// Why a mesh file was not written.
#[derive(Debug, thiserror::Error)]
pub enum NotWritten {
    #[error(
        "{0}: a mesh file is there already — pass --force to overwrite it, or --out to write another"
    )]
    Exists(PathBuf),
    #[error("{0}: cannot write the mesh file: {1}")]
    Io(PathBuf, std::io::Error),
}

/// Write `text` to `out`: never over a file that is there unless `force`.
pub fn write_mesh_file(out: &Path, text: &str, force: bool) -> Result<(), NotWritten> {
    use std::io::Write as _;
    let mut options = std::fs::OpenOptions::new();
    options.write(true);
    if force {
        options.create(true).truncate(true);
    } else {
        options.create_new(true);
    }
    let mut file = options.open(out).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => NotWritten::Exists(out.to_path_buf()),
        _ => NotWritten::Io(out.to_path_buf(), e),
    })?;
    file.write_all(text.as_bytes())
        .map_err(|e| NotWritten::Io(out.to_path_buf(), e))
}

/// The directory of `file`, absolute and with symlinks resolved (as the mesh file's is when it
/// is read), so that the paths written relative to the mesh file are the ones it resolves.
pub fn file_dir(file: &Path) -> Result<PathBuf, MeshError> {
    let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    let dir = absolute.parent().unwrap_or(Path::new("/"));
    std::fs::canonicalize(dir).map_err(|e| {
        MeshError::at(
            file,
            None,
            None,
            format!("cannot resolve its directory {}: {e}", dir.display()),
            "give the path of a file in an existing directory",
        )
    })
}

/// The kind of `file`: by its name (`compose.yaml`, `docker-bake.hcl`, `skaffold.yaml`…), else a
/// `.hcl` is a bake file and a YAML file holding `services:` or `apiVersion: skaffold/…` is one of those.
fn kind_of(file: &Path, text: &str) -> Result<Kind, MeshError> {
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().to_lowercase())
        .unwrap_or_default();
    let yaml = name.ends_with(".yaml") || name.ends_with(".yml");
    if yaml && name.contains("skaffold") {
        return Ok(Kind::Skaffold);
    }
    if yaml && name.contains("compose") {
        return Ok(Kind::Compose);
    }
    if name.ends_with(".hcl") {
        return Ok(Kind::Bake);
    }
    if yaml {
        let lines = || text.lines().map(str::trim_end);
        if lines().any(|l| l.starts_with("apiVersion:") && l.contains("skaffold/")) {
            return Ok(Kind::Skaffold);
        }
        if lines().any(|l| l == "services:") {
            return Ok(Kind::Compose);
        }
    }
    Err(MeshError::at(
        file,
        None,
        None,
        "is no kind of file init reads",
        format!("give {KINDS_READ}"),
    ))
}

/// `name` under meshtop's name rule: lower case, any other character a `-`, no `-` twice, first
/// a letter or digit, not ending with `-`, at most 63 characters; `fallback` when nothing is left.
pub(crate) fn normalise(name: &str, fallback: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(MAX_NAME);
    let out = out.trim_end_matches('-');
    if out.is_empty() {
        fallback.to_string()
    } else {
        out.to_string()
    }
}

/// A whole value of another tool's file as meshtop's string: strings as they are, numbers and
/// booleans as written; `None` for null, lists and tables.
fn scalar(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        serde_json::Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The module's Dockerfile as the other tool names it (relative to the context): kept unless it
/// is the default, and the module skipped when it lies outside its context.
fn set_dockerfile(module: &mut DraftModule, dockerfile: String) {
    if !paths::inside(&dockerfile) {
        module.skipped = Some(format!(
            "its dockerfile {dockerfile} is not inside its context: meshtop sends the context, Dockerfile included"
        ));
    }
    if dockerfile != "Dockerfile" {
        module.dockerfile = Some(dockerfile);
    }
}

/// A Dockerfile written inline in the other tool's file: no module.
const INLINE_DOCKERFILE: &str =
    "its Dockerfile is inline: meshtop hashes and sends a Dockerfile file: write it to one";

/// Build args as the other tool wrote them, each checked against meshtop's rules; what cannot be
/// carried is noted on `module`.
fn add_args(module: &mut DraftModule, args: impl IntoIterator<Item = (String, Option<String>)>) {
    for (name, value) in args {
        let is_name = {
            let mut chars = name.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        match value {
            _ if name == "BASE" => module.notes.push(
                "build arg BASE: not carried: meshtop sets BASE to the base module's artifact".into(),
            ),
            _ if !is_name => module
                .notes
                .push(format!("build arg `{name}`: not carried: not a build arg name meshtop takes")),
            None => module.notes.push(format!(
                "build arg {name}: not carried: it has no value in the file (taken from the environment when it builds): give it one in `args`"
            )),
            Some(value) => {
                module.args.insert(name, value);
            }
        }
    }
}

/// Every YAML document of `text` (a file of several `---` documents gives several), each as a
/// JSON value; a file that does not parse is refused at its line.
fn yaml_documents(file: &Path, text: &str) -> Result<Vec<serde_json::Value>, MeshError> {
    serde_saphyr::from_str_multiple::<serde_json::Value, Vec<_>>(text).map_err(|e| {
        let line = e.location().map(|l| l.line() as usize);
        let column = e.location().map(|l| l.column() as usize);
        let what = e.to_string();
        let what = what.lines().next().unwrap_or("not valid YAML").trim();
        // The position is in the location already: say what is wrong without it.
        let what = what.strip_prefix("error: ").unwrap_or(what);
        let what = match what.split_once(": ") {
            Some((head, rest)) if head.starts_with("line ") => rest,
            _ => what,
        };
        MeshError::at(
            file,
            line.filter(|l| *l > 0),
            column.filter(|c| *c > 0),
            format!("not valid YAML: {what}"),
            "fix the syntax at this position (see https://yaml.org)",
        )
    })
}

/// A name meshtop takes as a named context's: lowercase letters, digits, `.`, `_`, `-`, `/`.
fn is_context_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| {
            c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-' | '/')
        })
}

/// The named contexts a module's file gives it that are other modules (`name` → the other's
/// `source`): each a `contexts` entry, as the other tool passes them all to the build.
fn context_edges(module: &mut DraftModule, edges: Vec<(String, String)>) {
    for (name, source) in edges {
        if is_context_name(&name) {
            module.contexts.insert(name, source);
        } else {
            module.notes.push(format!(
                "named context {name} = {source}: not carried: meshtop's context names are lowercase letters, digits, '.', '_', '-', '/': rename it in the Dockerfile and here"
            ));
        }
    }
}

impl Draft {
    /// Names every module (and says which it renamed), resolves each base to a module name (or
    /// notes why it cannot be one), and drops machines of modules that were skipped.
    fn finish(&mut self) {
        let mut taken: BTreeSet<String> = BTreeSet::new();
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        for module in &mut self.modules {
            let wanted = normalise(&module.source, "module");
            let mut name = wanted.clone();
            let mut n = 2;
            while taken.contains(&name) {
                let suffix = format!("-{n}");
                let mut stem = wanted.clone();
                stem.truncate(MAX_NAME - suffix.len());
                name = format!("{}{suffix}", stem.trim_end_matches('-'));
                n += 1;
            }
            if name != module.source {
                let why = if name != wanted {
                    format!(" ({wanted} was taken)")
                } else {
                    String::new()
                };
                self.renamed
                    .push(format!("{} → module {name}{why}", module.source));
            }
            taken.insert(name.clone());
            if module.skipped.is_none() {
                names.insert(module.source.clone(), name.clone());
            }
            module.name = name;
        }
        for module in &mut self.modules {
            if let Some(base) = module.base.take() {
                match names.get(&base) {
                    Some(name) => module.base = Some(name.clone()),
                    None => module.notes.push(format!(
                        "base {base}: no module of this mesh builds it, so it is no edge"
                    )),
                }
            }
        }
        for module in &mut self.modules {
            let contexts = std::mem::take(&mut module.contexts);
            for (context, source) in contexts {
                match names.get(&source) {
                    Some(name) => {
                        module.contexts.insert(context, name.clone());
                    }
                    None => {
                        // An arg naming the context (a skaffold alias) goes with it.
                        module.args.retain(|_, value| *value != context);
                        module.notes.push(format!(
                            "named context {context} = {source}: no module of this mesh builds it, so it is no edge"
                        ));
                    }
                }
            }
        }
        for machine in &mut self.machines {
            if let Some(source) = machine.module.take() {
                match names.get(&source) {
                    Some(name) => machine.module = Some(name.clone()),
                    None => machine
                        .notes
                        .push("its module could not be carried (see above)".into()),
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_rule() {
        assert_eq!(normalise("Web_App", "m"), "web-app");
        assert_eq!(
            normalise("gcr.io/proj/cartservice", "m"),
            "gcr-io-proj-cartservice"
        );
        assert_eq!(normalise("__x--y__", "m"), "x-y");
        assert_eq!(normalise("___", "m"), "m");
        assert_eq!(normalise(&"a".repeat(80), "m").len(), MAX_NAME);
    }

    #[test]
    fn collisions_get_a_number_and_are_said() {
        let mut draft = Draft {
            modules: ["web_app", "web-app", "Web.App"]
                .map(|s| DraftModule {
                    source: s.into(),
                    ..DraftModule::default()
                })
                .to_vec(),
            ..Draft::default()
        };
        draft.finish();
        let names: Vec<&str> = draft.modules.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["web-app", "web-app-2", "web-app-3"]);
        assert_eq!(
            draft.renamed,
            [
                "web_app → module web-app",
                "web-app → module web-app-2 (web-app was taken)",
                "Web.App → module web-app-3 (web-app was taken)"
            ]
        );
    }
}
