//! `.dockerignore` with Docker's exact semantics.
//!
//! A port of what Docker's CLI and BuildKit do with the file (moby/patternmatcher and its
//! `ignorefile` reader, and the context walkers built on them):
//!
//! - a line starting with `#` (in column 0) is a comment; other lines are trimmed, blank ones skipped;
//! - a leading `!` makes an exception (re-inclusion); the last pattern that matches wins;
//! - patterns are cleaned like Go's `filepath.Clean` and a leading `/` is dropped;
//! - `*` is any run of non-`/` characters, `?` one non-`/` character, `[...]` a class, `\` escapes,
//!   `**` any number of directories (also none);
//! - a path is excluded when a pattern matches it **or any of its parent directories**;
//! - the walk still enters an excluded directory when an exception may re-include something below it;
//! - the Dockerfile and `.dockerignore` are always sent, as Docker's CLI does (it appends `!<file>`
//!   exceptions when they would be excluded).

use std::fmt;
use std::path::Path;

use regex::Regex;

/// A `.dockerignore` that could not be used: names the line and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(".dockerignore line {line}: {message}")]
pub struct IgnoreError {
    /// 1-based line in the file (0 for a pattern that was added by meshtop).
    pub line: usize,
    pub message: String,
}

#[derive(Debug, Clone)]
enum Kind {
    Exact,
    /// `foo/**`, `foo**`: the cleaned pattern minus its trailing `**`.
    Prefix(String),
    /// `**/foo`, `**foo`: the cleaned pattern minus its leading `**`.
    Suffix(String),
    Regexp(Regex),
}

/// One cleaned pattern.
#[derive(Debug, Clone)]
pub struct Pattern {
    cleaned: String,
    exclusion: bool,
    kind: Kind,
}

impl Pattern {
    fn matches(&self, path: &str) -> bool {
        match &self.kind {
            Kind::Exact => path == self.cleaned,
            Kind::Prefix(prefix) => path.starts_with(prefix.as_str()),
            Kind::Suffix(suffix) => {
                path.ends_with(suffix.as_str())
                    || suffix.strip_prefix('/').is_some_and(|rest| path == rest)
            }
            Kind::Regexp(re) => re.is_match(path),
        }
    }
}

/// What matching a directory taught about its patterns, handed down to its entries
/// (patternmatcher's `MatchInfo`). `Default` is "no parent information".
#[derive(Debug, Clone, Default)]
pub struct MatchInfo {
    parent_matched: Vec<bool>,
}

/// A parsed `.dockerignore`.
#[derive(Debug, Clone, Default)]
pub struct DockerIgnore {
    patterns: Vec<Pattern>,
    exceptions: bool,
}

impl DockerIgnore {
    /// Reads `<context>/.dockerignore`; a missing file ignores nothing.
    pub(crate) fn load(context: &Path) -> Result<DockerIgnore, IgnoreError> {
        let path = context.join(".dockerignore");
        match std::fs::read(&path) {
            Ok(bytes) => DockerIgnore::parse(&String::from_utf8_lossy(&bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(DockerIgnore::default()),
            Err(e) => Err(IgnoreError {
                line: 0,
                message: format!("cannot read {}: {e}", path.display()),
            }),
        }
    }

    /// Parses the text of a `.dockerignore` (like `ignorefile.ReadAll` then `patternmatcher.New`).
    pub fn parse(text: &str) -> Result<DockerIgnore, IgnoreError> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut ignore = DockerIgnore::default();
        for (index, raw) in text.lines().enumerate() {
            if raw.starts_with('#') {
                continue;
            }
            let mut pattern = raw.trim();
            if pattern.is_empty() {
                continue;
            }
            let invert = pattern.starts_with('!');
            if invert {
                pattern = pattern[1..].trim();
            }
            let mut cleaned = String::new();
            if !pattern.is_empty() {
                cleaned = clean(pattern);
                if cleaned.len() > 1 && cleaned.starts_with('/') {
                    cleaned.remove(0);
                }
            }
            let line = if invert {
                format!("!{cleaned}")
            } else {
                cleaned
            };
            ignore.push(&line, index + 1)?;
        }
        Ok(ignore)
    }

    /// Adds one pattern as `patternmatcher.New` would (`!` makes an exception).
    pub(crate) fn push(&mut self, pattern: &str, line: usize) -> Result<(), IgnoreError> {
        let trimmed = pattern.trim();
        if trimmed.is_empty() {
            return Ok(());
        }
        let mut cleaned = clean(trimmed);
        let exclusion = cleaned.starts_with('!');
        if exclusion {
            if cleaned.len() == 1 {
                return Err(IgnoreError {
                    line,
                    message: "illegal exception pattern \"!\": write the path to re-include after the `!`".into(),
                });
            }
            cleaned.remove(0);
        }
        let kind = compile(&cleaned).map_err(|why| IgnoreError {
            line,
            message: format!("bad pattern {cleaned:?}: {why}"),
        })?;
        self.exceptions |= exclusion;
        self.patterns.push(Pattern {
            cleaned,
            exclusion,
            kind,
        });
        Ok(())
    }

    /// Makes sure `path` (relative, `/`-separated) is sent even if a pattern excludes it,
    /// as Docker's CLI does for the Dockerfile and `.dockerignore`.
    pub fn always_send(&mut self, path: &str) -> Result<(), IgnoreError> {
        if self.is_excluded(path) {
            self.push(&format!("!{path}"), 0)?;
        }
        Ok(())
    }

    pub fn patterns(&self) -> &[Pattern] {
        &self.patterns
    }

    /// `MatchesOrParentMatches`: is `path` (relative, `/`-separated) excluded?
    pub fn is_excluded(&self, path: &str) -> bool {
        self.matches_with_parent(path, &MatchInfo::default()).0
    }

    /// `MatchesUsingParentResults`: as `is_excluded`, reusing what matching the parent
    /// directory found (pass `MatchInfo::default()` for an entry of the context's root).
    pub fn matches_with_parent(&self, path: &str, parent: &MatchInfo) -> (bool, MatchInfo) {
        let parent_matched = if parent.parent_matched.len() == self.patterns.len() {
            parent.parent_matched.as_slice()
        } else {
            &[]
        };
        let mut matched = false;
        let mut info = MatchInfo {
            parent_matched: vec![false; self.patterns.len()],
        };
        for (i, pattern) in self.patterns.iter().enumerate() {
            let mut hit = parent_matched.get(i).copied().unwrap_or(false);
            if !hit {
                if pattern.exclusion != matched {
                    continue;
                }
                hit = pattern.matches(path);
                if !hit
                    && parent_matched.is_empty()
                    && let Some((parent_path, _)) = path.rsplit_once('/')
                {
                    let mut end = 0;
                    for segment in parent_path.split('/') {
                        end += segment.len();
                        if pattern.matches(&parent_path[..end]) {
                            hit = true;
                            break;
                        }
                        end += 1;
                    }
                }
            }
            info.parent_matched[i] = hit;
            if hit {
                matched = !pattern.exclusion;
            }
        }
        (matched, info)
    }

    /// Whether the walk must still enter the excluded directory `dir`: an exception may
    /// re-include something below it. Exceptions with wildcards may match anywhere, so any
    /// excluded directory is entered then (as BuildKit does); otherwise only directories
    /// that prefix an exception are.
    pub fn may_reinclude_under(&self, dir: &str) -> bool {
        if !self.exceptions {
            return false;
        }
        let dir_slash = format!("{dir}/");
        self.patterns.iter().filter(|p| p.exclusion).any(|p| {
            p.cleaned.contains(['*', '?', '[', ']', '^', '\\'])
                || format!("{}/", p.cleaned).starts_with(&dir_slash)
        })
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.exclusion {
            f.write_str("!")?;
        }
        f.write_str(&self.cleaned)
    }
}

/// Go's `filepath.Clean` (Unix): collapse `//`, drop `.`, resolve `..` lexically, no trailing `/`.
pub fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".into();
    }
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".into(),
        (false, false) => joined,
    }
}

/// Why a pattern cannot be used: Go's `filepath.Match` errors (Docker refuses them), or the
/// regexp it compiles to.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum BadPattern {
    #[error("a trailing `\\` escapes nothing")]
    TrailingEscape,
    #[error("unclosed `[`: close the class with `]`")]
    UnclosedClass,
    #[error("empty class `[]`")]
    EmptyClass,
    #[error(transparent)]
    Regexp(#[from] regex::Error),
}

/// What a pattern compiles to, as patternmatcher detects it while it reads.
#[derive(PartialEq)]
enum Detected {
    Exact,
    Prefix,
    Suffix,
    Regexp,
}

/// One character inside a `[…]` class (`chars[*i - 1]`), for Rust's regexp as Go's reads it: Go
/// takes `[`, `&`, `~` and `--` literally there, where Rust's would read set operations. False
/// once the class is closed.
fn push_class_char(ch: char, chars: &[char], i: &mut usize, re: &mut String) -> bool {
    match ch {
        ']' => {
            re.push(']');
            return false;
        }
        '[' => re.push_str("\\["),
        '&' | '~' => {
            re.push('\\');
            re.push(ch);
        }
        '-' if chars.get(*i) == Some(&'-') => re.push_str("\\-"),
        '\\' if *i < chars.len() => {
            re.push('\\');
            re.push(chars[*i]);
            *i += 1;
        }
        _ => re.push(ch),
    }
    true
}

/// `**` (its first `*` read; `chars[*i]` is the second), and a `/` after it: any directories. At
/// the pattern's end it makes a prefix match (a regexp's `.*` after other wildcards); at its start
/// a suffix match.
fn double_star(
    chars: &[char],
    i: &mut usize,
    first: bool,
    detected: Detected,
    re: &mut String,
) -> Detected {
    *i += 1;
    if chars.get(*i) == Some(&'/') {
        *i += 1;
    }
    let detected = if *i == chars.len() {
        if detected == Detected::Exact {
            Detected::Prefix
        } else {
            re.push_str(".*");
            Detected::Regexp
        }
    } else {
        re.push_str("(.*/)?");
        Detected::Regexp
    };
    if first { Detected::Suffix } else { detected }
}

/// patternmatcher's `compile`: a pattern to an exact, prefix, suffix or regexp matcher.
fn compile(pattern: &str) -> Result<Kind, BadPattern> {
    check_syntax(pattern)?;
    let mut detected = Detected::Exact;
    let mut re = String::from("^");
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    let mut in_class = false;
    while i < chars.len() {
        let first = i == 0;
        let ch = chars[i];
        i += 1;
        if in_class {
            in_class = push_class_char(ch, &chars, &mut i, &mut re);
            continue;
        }
        match ch {
            '*' if chars.get(i) == Some(&'*') => {
                detected = double_star(&chars, &mut i, first, detected, &mut re);
            }
            '*' => {
                re.push_str("[^/]*");
                detected = Detected::Regexp;
            }
            '?' => {
                re.push_str("[^/]");
                detected = Detected::Regexp;
            }
            '.' | '+' | '(' | ')' | '|' | '{' | '}' | '$' => {
                re.push('\\');
                re.push(ch);
            }
            '\\' => {
                if i < chars.len() {
                    re.push_str(&regex::escape(&chars[i].to_string()));
                    i += 1;
                    detected = Detected::Regexp;
                } else {
                    re.push_str("\\\\");
                }
            }
            '[' => {
                in_class = true;
                re.push('[');
                detected = Detected::Regexp;
            }
            ']' => {
                re.push_str("\\]");
                detected = Detected::Regexp;
            }
            '^' => {
                // Outside a class Go's regexp reads `^` as an anchor; it can never match mid-path.
                re.push('^');
            }
            other => re.push_str(&regex::escape(&other.to_string())),
        }
    }
    Ok(match detected {
        Detected::Exact => Kind::Exact,
        Detected::Prefix => Kind::Prefix(pattern[..pattern.len() - 2].to_string()),
        Detected::Suffix => Kind::Suffix(pattern[2..].to_string()),
        Detected::Regexp => {
            re.push('$');
            Kind::Regexp(Regex::new(&re)?)
        }
    })
}

/// The errors Go's `filepath.Match` reports for a malformed pattern (Docker refuses them).
fn check_syntax(pattern: &str) -> Result<(), BadPattern> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                if i + 1 == chars.len() {
                    return Err(BadPattern::TrailingEscape);
                }
                i += 2;
            }
            '[' => {
                i += 1;
                if chars.get(i) == Some(&'^') {
                    i += 1;
                }
                let start = i;
                loop {
                    match chars.get(i) {
                        None => return Err(BadPattern::UnclosedClass),
                        Some(']') if i > start => break,
                        Some(']') => return Err(BadPattern::EmptyClass),
                        Some('\\') => i += 2,
                        Some(_) => i += 1,
                    }
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    Ok(())
}
