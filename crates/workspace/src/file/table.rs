//! Typed, spanned access to the tables of a parsed mesh file, with errors that name the key and the line.

use std::ops::Range;
use std::path::Path;

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::MeshError;

/// The text being parsed and where it came from: turns byte offsets into errors.
pub(super) struct Source<'a> {
    pub text: &'a str,
    pub file: &'a Path,
    /// Byte offset where each line starts (line 1 at index 0).
    line_starts: Vec<usize>,
}

/// 1-based line and column (in characters) of a byte offset.
pub(super) fn line_col(bytes: &[u8], offset: usize) -> (usize, usize) {
    let offset = offset.min(bytes.len());
    let before = &bytes[..offset];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let column = String::from_utf8_lossy(&before[line_start..])
        .chars()
        .count()
        + 1;
    (line, column)
}

impl<'a> Source<'a> {
    pub(super) fn new(text: &'a str, file: &'a Path) -> Self {
        let line_starts = std::iter::once(0)
            .chain(
                text.bytes()
                    .enumerate()
                    .filter(|(_, b)| *b == b'\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        Source {
            text,
            file,
            line_starts,
        }
    }

    pub(super) fn line_col(&self, offset: usize) -> (usize, usize) {
        line_col(self.text.as_bytes(), offset)
    }

    /// 1-based line of a span's start (binary search: many lookups on a big file stay cheap).
    pub(super) fn line(&self, span: &Range<usize>) -> usize {
        let offset = span.start.min(self.text.len());
        self.line_starts
            .partition_point(|start| *start <= offset)
            .max(1)
    }

    pub(super) fn err(
        &self,
        span: &Range<usize>,
        what: impl Into<String>,
        fix: impl Into<String>,
    ) -> MeshError {
        MeshError::at(self.file, Some(self.line(span)), None, what, fix)
    }

    /// A TOML syntax error, with line and column.
    pub(super) fn toml_error(&self, error: &toml::de::Error) -> MeshError {
        let (line, column) = match error.span() {
            Some(span) => {
                let (l, c) = self.line_col(span.start);
                (Some(l), Some(c))
            }
            None => (None, None),
        };
        MeshError::at(
            self.file,
            line,
            column,
            format!("not valid TOML: {}", error.message().trim_end()),
            "fix the syntax at this position (see https://toml.io)",
        )
    }
}

const MAX_SHOWN: usize = 64;

/// A user-given name for a message, unquoted: escaped, and cut short if it is huge.
pub(super) fn cut(text: &str) -> String {
    let count = text.chars().count();
    let head: String = text
        .chars()
        .take(MAX_SHOWN)
        .collect::<String>()
        .escape_debug()
        .collect();
    if count <= MAX_SHOWN {
        head
    } else {
        format!("{head}… ({count} characters)")
    }
}

/// Quote a user-given value for a message, cut short if it is huge.
pub(super) fn show(text: &str) -> String {
    format!("\"{}\"", cut(text))
}

pub(super) fn type_name(value: &DeValue<'_>) -> &'static str {
    match value {
        DeValue::String(_) => "a string",
        DeValue::Integer(_) => "an integer",
        DeValue::Float(_) => "a float",
        DeValue::Boolean(_) => "a boolean",
        DeValue::Datetime(_) => "a date-time",
        DeValue::Array(_) => "an array",
        DeValue::Table(_) => "a table",
    }
}

/// One table of the mesh file: which keys it allows and how to name it in messages.
pub(super) struct Section<'a, 'i> {
    pub table: &'a DeTable<'i>,
    /// The table's header (or inline value), for "missing key" messages.
    pub span: Range<usize>,
    /// How messages name it: `[mesh]`, `module "api"`, …
    pub label: String,
    pub allowed: &'static [&'static str],
}

type Value<'a, 'i> = &'a Spanned<DeValue<'i>>;
/// `(key, value)` pairs of a table of strings, in file order.
pub(super) type Pairs = Vec<(Spanned<String>, Spanned<String>)>;

impl<'a, 'i> Section<'a, 'i> {
    /// Expect `value` to be a table (as `[name]`, `[[name]]` or an inline table).
    pub(super) fn of(
        src: &Source<'_>,
        value: Value<'a, 'i>,
        label: impl Into<String>,
        allowed: &'static [&'static str],
        fix: &str,
    ) -> Result<Self, MeshError> {
        let label = label.into();
        match value.get_ref() {
            DeValue::Table(table) => Ok(Section {
                table,
                span: value.span(),
                label,
                allowed,
            }),
            other => Err(src.err(
                &value.span(),
                format!("{label} must be a table, found {}", type_name(other)),
                fix,
            )),
        }
    }

    /// Every key must be one of `allowed`; the first unknown key (in file order) is the error.
    pub(super) fn check_keys(&self, src: &Source<'_>) -> Result<(), MeshError> {
        let mut keys: Vec<&Spanned<std::borrow::Cow<'i, str>>> = self.table.keys().collect();
        keys.sort_by_key(|k| k.span().start);
        for key in keys {
            let name: &str = key.get_ref();
            if !self.allowed.contains(&name) {
                let hint = match super::typos::nearest(name, self.allowed.iter().copied()) {
                    Some(near) => format!("did you mean `{near}`? "),
                    None => String::new(),
                };
                return Err(src.err(
                    &key.span(),
                    format!("unknown key `{}` in {}", cut(name), self.label),
                    format!("{hint}allowed keys: {}", self.allowed.join(", ")),
                ));
            }
        }
        Ok(())
    }

    pub(super) fn get(&self, key: &str) -> Option<Value<'a, 'i>> {
        self.table.get(key)
    }

    fn wrong_type(
        &self,
        src: &Source<'_>,
        key: &str,
        value: Value<'_, '_>,
        want: &str,
        example: &str,
    ) -> MeshError {
        src.err(
            &value.span(),
            format!(
                "`{key}` in {} must be {want}, found {}",
                self.label,
                type_name(value.get_ref())
            ),
            format!("write it as {key} = {example}"),
        )
    }

    pub(super) fn missing(&self, src: &Source<'_>, key: &str, example: &str) -> MeshError {
        src.err(
            &self.span,
            format!("{} has no `{key}`", self.label),
            format!("add {key} = {example} to it"),
        )
    }

    pub(super) fn string(
        &self,
        src: &Source<'_>,
        key: &str,
        example: &str,
    ) -> Result<Option<Spanned<String>>, MeshError> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => match value.get_ref() {
                DeValue::String(s) => Ok(Some(Spanned::new(value.span(), s.to_string()))),
                _ => Err(self.wrong_type(src, key, value, "a string", example)),
            },
        }
    }

    pub(super) fn required_string(
        &self,
        src: &Source<'_>,
        key: &str,
        example: &str,
    ) -> Result<Spanned<String>, MeshError> {
        self.string(src, key, example)?
            .ok_or_else(|| self.missing(src, key, example))
    }

    /// A whole number from 1 to `u32::MAX` (TOML's `_` separators and radix prefixes allowed).
    pub(super) fn count(
        &self,
        src: &Source<'_>,
        key: &str,
        example: &str,
    ) -> Result<Option<Spanned<u32>>, MeshError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let Some(integer) = value.get_ref().as_integer() else {
            return Err(self.wrong_type(src, key, value, "a whole number", example));
        };
        let digits = integer.as_str().replace('_', "");
        let digits = digits
            .strip_prefix("0x")
            .or_else(|| digits.strip_prefix("0o"))
            .or_else(|| digits.strip_prefix("0b"))
            .unwrap_or(&digits);
        match u32::from_str_radix(digits.trim_start_matches('+'), integer.radix()) {
            Ok(n) if n > 0 => Ok(Some(Spanned::new(value.span(), n))),
            _ => Err(src.err(
                &value.span(),
                format!(
                    "`{key}` in {} must be a whole number from 1 to {}, found {}",
                    self.label,
                    u32::MAX,
                    integer.as_str()
                ),
                format!("write it as {key} = {example}"),
            )),
        }
    }

    pub(super) fn boolean(
        &self,
        src: &Source<'_>,
        key: &str,
    ) -> Result<Option<Spanned<bool>>, MeshError> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => match value.get_ref() {
                DeValue::Boolean(b) => Ok(Some(Spanned::new(value.span(), *b))),
                _ => Err(self.wrong_type(src, key, value, "true or false", "true")),
            },
        }
    }

    /// An array of strings; the outer span is the array's.
    pub(super) fn string_list(
        &self,
        src: &Source<'_>,
        key: &str,
        example: &str,
    ) -> Result<Option<Spanned<Vec<Spanned<String>>>>, MeshError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let DeValue::Array(items) = value.get_ref() else {
            return Err(self.wrong_type(src, key, value, "an array of strings", example));
        };
        let mut out = Vec::with_capacity(items.len());
        for item in items.iter() {
            match item.get_ref() {
                DeValue::String(s) => out.push(Spanned::new(item.span(), s.to_string())),
                other => {
                    return Err(src.err(
                        &item.span(),
                        format!(
                            "`{key}` in {} must hold strings only, found {}",
                            self.label,
                            type_name(other)
                        ),
                        format!("write it as {key} = {example}"),
                    ));
                }
            }
        }
        Ok(Some(Spanned::new(value.span(), out)))
    }

    /// A table of string values (`{ KEY = "value" }`), as (key, value) pairs in file order.
    pub(super) fn string_map(
        &self,
        src: &Source<'_>,
        key: &str,
        example: &str,
    ) -> Result<Option<Pairs>, MeshError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let DeValue::Table(table) = value.get_ref() else {
            return Err(self.wrong_type(src, key, value, "a table of strings", example));
        };
        let mut out = Vec::with_capacity(table.len());
        for (k, v) in table.iter() {
            let name = Spanned::new(k.span(), k.get_ref().to_string());
            match v.get_ref() {
                DeValue::String(s) => out.push((name, Spanned::new(v.span(), s.to_string()))),
                other => {
                    return Err(src.err(
                        &v.span(),
                        format!(
                            "`{key}.{}` in {} must be a string, found {}",
                            cut(name.get_ref()),
                            self.label,
                            type_name(other)
                        ),
                        "quote the value: KEY = \"value\"",
                    ));
                }
            }
        }
        out.sort_by_key(|(k, _)| k.span().start);
        Ok(Some(out))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn lines_agree_with_a_plain_count() {
        let text = "a\n\nbé\ncd\n\n";
        let src = Source::new(text, Path::new("m.toml"));
        for offset in 0..=text.len() + 2 {
            assert_eq!(
                src.line(&(offset..offset)),
                line_col(text.as_bytes(), offset).0,
                "{offset}"
            );
        }
        assert_eq!(line_col(text.as_bytes(), 6), (3, 3));
        assert_eq!(
            cut(&"x".repeat(100)),
            format!("{}… (100 characters)", "x".repeat(64))
        );
        assert_eq!(show("a\"b\n"), "\"a\\\"b\\n\"");
    }
}
