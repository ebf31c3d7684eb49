//! Upstream images: what a Dockerfile names `FROM` (or `COPY --from`) that the mesh does not build
//! (`python:3.12-slim`, a company base), read as BuildKit reads the file, and the same file with
//! each of them pinned to the digest the lock holds.
//!
//! Read as the Dockerfile frontend reads it: parser directives (`# escape=`) first, comments
//! dropped, lines joined at the escape character, instructions in any case; the `ARG`s before the
//! first `FROM` (and the build args meshtop passes) substituted into `FROM` (`$X`, `${X}`,
//! `${X:-word}`, `${X:+word}`). `scratch`, an earlier stage's name, the mesh's own base (`${BASE}`),
//! a named context the module declares (`FROM lib` with `contexts = { lib = "lib" }`) and a name
//! already pinned by digest are not upstreams.

use std::collections::BTreeMap;

/// One upstream a Dockerfile names, where it names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// The image as the build would ask for it, after substitution (`python:3.12-slim`).
    pub image: String,
    /// The 1-based line of the instruction that names it.
    pub line: usize,
    /// `FROM` (a stage's base) or `COPY --from` (files taken from it).
    pub by: NamedBy,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamedBy {
    From,
    CopyFrom,
}

/// What a `FROM` names, once read.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Source {
    Scratch,
    Stage,
    MeshBase,
    /// A named context: a mesh module's artifact, by the name the Dockerfile writes.
    Context(String),
    Pinned,
    Upstream(String),
}

/// The build arg meshtop sets to the base module's artifact.
pub const BASE_ARG: &str = "BASE";

/// A stand-in value for `BASE` while reading: a name that contains it came from the mesh's base.
const BASE_MARK: &str = "\u{1}meshtop-base\u{1}";

/// One instruction: its keyword (upper case), its text after the keyword, the line it starts on
/// and how many physical lines it spans.
#[derive(Debug)]
struct Instruction {
    keyword: String,
    rest: String,
    line: usize,
    lines: usize,
}

/// Every upstream `text` names, in file order (an image named twice is listed twice, each line).
/// `args` are the build args meshtop passes (the module's own; `BASE` when it has a base);
/// `contexts`' keys the names of the module's named contexts.
pub fn upstreams(
    text: &str,
    args: &BTreeMap<String, String>,
    contexts: &BTreeMap<String, String>,
) -> Vec<Upstream> {
    let mut found = Vec::new();
    read(text, args, contexts, |instruction, source, copy_from| {
        if let Some(Source::Upstream(image)) = source {
            found.push(Upstream {
                image,
                line: instruction.line,
                by: NamedBy::From,
            });
        }
        if let Some((_, Source::Upstream(image))) = copy_from {
            found.push(Upstream {
                image,
                line: instruction.line,
                by: NamedBy::CopyFrom,
            });
        }
    });
    found
}

/// The stage names `text` declares (`FROM … AS name`), in file order, lower-cased as the
/// Dockerfile frontend compares them: what a module's `target` may name.
pub fn stages(text: &str) -> Vec<String> {
    instructions(text)
        .iter()
        .filter(|instruction| instruction.keyword == "FROM")
        .filter_map(|instruction| from_parts(&instruction.rest).1)
        .map(str::to_ascii_lowercase)
        .collect()
}

/// `text` with every upstream pinned: `FROM python:3.12-slim AS run` becomes
/// `FROM python@sha256:… AS run` when `digest_of("python:3.12-slim")` answers. An instruction
/// that spanned several lines is written on its first and the others left empty, so that every
/// line keeps its number in the builder's messages. An upstream `digest_of` does not answer for
/// is left as written. Each named context (`contexts`: the name the Dockerfile writes → the image
/// the builder reaches the module's artifact by) is replaced by that image, as BuildKit replaces a
/// name given with `--build-context`.
pub fn pinned(
    text: &str,
    args: &BTreeMap<String, String>,
    contexts: &BTreeMap<String, String>,
    digest_of: impl Fn(&str) -> Option<String>,
) -> String {
    let mut rewrites: BTreeMap<usize, (usize, String)> = BTreeMap::new();
    let replacement = |source: &Source| match source {
        Source::Upstream(image) => digest_of(image).map(|d| format!("{}@{d}", repository(image))),
        Source::Context(name) => contexts.get(name).cloned(),
        _ => None,
    };
    read(text, args, contexts, |instruction, source, copy_from| {
        let mut rest = instruction.rest.clone();
        let mut changed = false;
        if let Some(with) = source.as_ref().and_then(&replacement) {
            rest = pin_from(&rest, &with);
            changed = true;
        }
        if let Some((raw, source)) = &copy_from
            && let Some(with) = replacement(source)
        {
            rest = rest.replacen(&format!("--from={raw}"), &format!("--from={with}"), 1);
            changed = true;
        }
        if changed {
            let new = format!("{} {rest}", instruction.keyword);
            rewrites.insert(instruction.line, (instruction.lines, new));
        }
    });
    if rewrites.is_empty() {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 128);
    let mut skip = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        let number = index + 1;
        let ending = if line.ends_with('\n') { "\n" } else { "" };
        if let Some((lines, new)) = rewrites.get(&number) {
            out.push_str(new);
            out.push_str(ending);
            skip = lines - 1;
        } else if skip > 0 {
            skip -= 1;
            out.push_str(ending);
        } else {
            out.push_str(line);
        }
    }
    out
}

/// Whether the stage a build produces (`target`, else the last) is FROM the mesh's base
/// (`${BASE}`), directly or through the earlier stages it is FROM: its image then begins with the
/// base's layers. `args` as for [`upstreams`] (with `BASE`).
pub fn built_on_base(
    text: &str,
    args: &BTreeMap<String, String>,
    contexts: &BTreeMap<String, String>,
    target: Option<&str>,
) -> bool {
    // Each stage in file order: its name, and whether it is FROM the base.
    let mut stages: Vec<(Option<String>, bool)> = Vec::new();
    read(text, args, contexts, |instruction, source, _| {
        let Some(source) = source else {
            return;
        };
        let (image, name) = from_parts(&instruction.rest);
        let on_base = match source {
            Source::MeshBase => true,
            Source::Stage => {
                let image = image.to_ascii_lowercase();
                stages
                    .iter()
                    .rev()
                    .find(|(stage, _)| stage.as_deref() == Some(image.as_str()))
                    .is_some_and(|(_, on_base)| *on_base)
            }
            _ => false,
        };
        stages.push((name.map(str::to_ascii_lowercase), on_base));
    });
    let built = match target {
        Some(target) => {
            let target = target.to_ascii_lowercase();
            stages
                .iter()
                .find(|(stage, _)| stage.as_deref() == Some(target.as_str()))
        }
        None => stages.last(),
    };
    built.is_some_and(|(_, on_base)| *on_base)
}

/// The repository of an image name, its tag dropped (`host:5000/a/b:1` → `host:5000/a/b`): a
/// pinned name asks for the digest alone, so no builder can prefer the tag.
pub fn repository(image: &str) -> &str {
    let image = image.split('@').next().unwrap_or(image);
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(colon) => &image[..slash + colon],
        None => image,
    }
}

/// The `FROM` instruction's text with its image replaced by `with` (flags and `AS name` kept).
fn pin_from(rest: &str, with: &str) -> String {
    let words: Vec<&str> = rest.split_whitespace().collect();
    let Some(at) = words.iter().position(|w| !w.starts_with("--")) else {
        return rest.to_string();
    };
    let mut out: Vec<&str> = words.clone();
    out[at] = with;
    out.join(" ")
}

/// Walk the instructions of `text`, telling `each` what every `FROM` names and what every
/// `COPY --from` names (its raw flag value and what it is).
fn read(
    text: &str,
    args: &BTreeMap<String, String>,
    contexts: &BTreeMap<String, String>,
    mut each: impl FnMut(&Instruction, Option<Source>, Option<(String, Source)>),
) {
    let instructions = instructions(text);
    let mut scope: BTreeMap<String, String> = BTreeMap::new();
    let mut stages: Vec<String> = Vec::new();
    let mut seen_from = false;
    for instruction in &instructions {
        match instruction.keyword.as_str() {
            "ARG" if !seen_from => {
                for (name, default) in arg_declarations(&instruction.rest) {
                    let value = if name == BASE_ARG && args.contains_key(BASE_ARG) {
                        Some(BASE_MARK.to_string())
                    } else {
                        args.get(&name).cloned().or(default)
                    };
                    if let Some(value) = value {
                        scope.insert(name, value);
                    }
                }
            }
            "FROM" => {
                seen_from = true;
                let (image, stage) = from_parts(&instruction.rest);
                let image = substitute(image, &scope);
                let source = classify(&image, &stages, contexts);
                if let Some(stage) = stage {
                    stages.push(stage.to_ascii_lowercase());
                }
                each(instruction, Some(source), None);
            }
            "COPY" => {
                let copy_from = copy_from_flag(&instruction.rest).map(|raw| {
                    let image = substitute(raw, &scope);
                    let source = if image.chars().all(|c| c.is_ascii_digit()) {
                        Source::Stage
                    } else {
                        classify(&image, &stages, contexts)
                    };
                    (raw.to_string(), source)
                });
                if copy_from.is_some() {
                    each(instruction, None, copy_from);
                }
            }
            _ => {}
        }
    }
}

/// What a name after `FROM` (or `COPY --from=`) is. An earlier stage's name wins over a named
/// context of the same name, as a stage is what the file itself defines.
fn classify(image: &str, stages: &[String], contexts: &BTreeMap<String, String>) -> Source {
    let lower = image.to_ascii_lowercase();
    if lower == "scratch" {
        Source::Scratch
    } else if image.contains(BASE_MARK) {
        Source::MeshBase
    } else if stages.contains(&lower) {
        Source::Stage
    } else if contexts.contains_key(&lower) {
        Source::Context(lower)
    } else if image.contains('@') {
        Source::Pinned
    } else if image.is_empty() {
        // `FROM ${UNSET}`: nothing to lock; the builder says what is wrong with it.
        Source::Scratch
    } else {
        Source::Upstream(image.to_string())
    }
}

/// `[--flag…] image [AS name]` → (image, name).
fn from_parts(rest: &str) -> (&str, Option<&str>) {
    let words: Vec<&str> = rest.split_whitespace().collect();
    let Some(at) = words.iter().position(|w| !w.starts_with("--")) else {
        return ("", None);
    };
    let stage = match words.get(at + 1) {
        Some(word) if word.eq_ignore_ascii_case("as") => words.get(at + 2).copied(),
        _ => None,
    };
    (words[at], stage)
}

fn copy_from_flag(rest: &str) -> Option<&str> {
    rest.split_whitespace()
        .take_while(|w| w.starts_with("--"))
        .find_map(|w| w.strip_prefix("--from="))
}

/// `A=1 B="two" C` → [(A, Some(1)), (B, Some(two)), (C, None)].
fn arg_declarations(rest: &str) -> Vec<(String, Option<String>)> {
    rest.split_whitespace()
        .map(|word| match word.split_once('=') {
            Some((name, value)) => (name.to_string(), Some(unquote(value).to_string())),
            None => (word.to_string(), None),
        })
        .collect()
}

fn unquote(value: &str) -> &str {
    for quote in ['"', '\''] {
        if let Some(inner) = value
            .strip_prefix(quote)
            .and_then(|v| v.strip_suffix(quote))
        {
            return inner;
        }
    }
    value
}

/// `$X`, `${X}`, `${X:-word}`, `${X:+word}` from `scope`; an unset name is empty, as the frontend
/// reads it.
fn substitute(word: &str, scope: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(word.len());
    let mut chars = word.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if c != '$' {
            out.push(c);
            continue;
        }
        if word[at + 1..].starts_with('{') {
            let Some(close) = word[at..].find('}') else {
                out.push_str(&word[at..]);
                break;
            };
            let inner = &word[at + 2..at + close];
            out.push_str(&braced(inner, scope));
            while chars.peek().is_some_and(|(i, _)| *i <= at + close) {
                chars.next();
            }
        } else {
            let name: String = word[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() {
                out.push('$');
                continue;
            }
            out.push_str(scope.get(&name).map_or("", String::as_str));
            for _ in 0..name.len() {
                chars.next();
            }
        }
    }
    out
}

fn braced(inner: &str, scope: &BTreeMap<String, String>) -> String {
    if let Some((name, word)) = inner.split_once(":-") {
        return match scope.get(name) {
            Some(value) if !value.is_empty() => value.clone(),
            _ => substitute(word, scope),
        };
    }
    if let Some((name, word)) = inner.split_once(":+") {
        return match scope.get(name) {
            Some(value) if !value.is_empty() => substitute(word, scope),
            _ => String::new(),
        };
    }
    scope.get(inner).cloned().unwrap_or_default()
}

/// The instructions of a Dockerfile: directives read, comments dropped, continuations joined.
fn instructions(text: &str) -> Vec<Instruction> {
    let escape = escape_of(text);
    let mut out = Vec::new();
    let mut current: Option<Instruction> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        // A comment or an empty line inside a continuation is skipped, as the frontend skips it.
        if line.starts_with('#') || line.is_empty() {
            if let Some(open) = current.as_mut() {
                open.lines += 1;
            }
            continue;
        }
        let (body, continues) = match line.strip_suffix(escape) {
            Some(body) => (body.trim_end(), true),
            None => (line, false),
        };
        match current.as_mut() {
            Some(open) => {
                open.rest.push(' ');
                open.rest.push_str(body);
                open.lines += 1;
            }
            None => {
                let (keyword, rest) = body.split_once(char::is_whitespace).unwrap_or((body, ""));
                current = Some(Instruction {
                    keyword: keyword.to_ascii_uppercase(),
                    rest: rest.trim().to_string(),
                    line: index + 1,
                    lines: 1,
                });
            }
        }
        if !continues && let Some(done) = current.take() {
            out.push(done);
        }
    }
    out.extend(current);
    out
}

/// The escape character a `# escape=` parser directive sets (`\` by default).
fn escape_of(text: &str) -> char {
    for line in text.lines() {
        let Some(directive) = line.trim().strip_prefix('#') else {
            break;
        };
        let Some((key, value)) = directive.split_once('=') else {
            break;
        };
        if key.trim().eq_ignore_ascii_case("escape") && value.trim() == "`" {
            return '`';
        }
    }
    '\\'
}

#[cfg(test)]
#[path = "upstream_tests.rs"]
mod tests;
