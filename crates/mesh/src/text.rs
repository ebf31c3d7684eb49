//! Cutting stored text for one-line display: by characters, never bytes, so any text is safe;
//! and builder output made plain (no terminal escapes) before it is stored or shown.

use std::borrow::Cow;

/// Builder output or an error without terminal escapes (colours, cursor moves, titles) and other
/// control characters but newline and tab, so that stored text never draws as `[91m` on a screen.
/// The escapes are parsed by the `console` crate (the one indicatif and insta use), not a regex.
pub fn plain(text: &str) -> Cow<'_, str> {
    let stripped = console::strip_ansi_codes(text);
    if !stripped
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return stripped;
    }
    Cow::Owned(
        stripped
            .chars()
            .filter(|&c| !c.is_control() || c == '\n' || c == '\t')
            .collect(),
    )
}

/// `512 B`, `12.3 KiB`, `2.0 MiB` (binary units: what is held in memory).
pub(crate) fn binary_bytes(n: usize) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Cut `text` to at most `max` bytes (at a character boundary) and say how much went:
/// `… [12.3 KiB cut]`. Text at or under `max` is left as it is. Returns the bytes cut.
pub fn cut_long_line(text: &mut String, max: usize) -> usize {
    if text.len() <= max {
        return 0;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    text.truncate(end);
    text.push_str(&format!(" … [{} cut]", binary_bytes(cut)));
    text.shrink_to_fit();
    cut
}

/// `sha256:3f9c2a1b7d4e…` → `3f9c2a1b7d4e` (for one-line messages).
pub fn short_id(id: &str) -> &str {
    // A digest read from a cluster annotation is not checked to be hex.
    first_chars(id.strip_prefix("sha256:").unwrap_or(id), 12)
}

/// A commit as tables show it: its first 7 characters.
pub fn short_commit(commit: &str) -> &str {
    first_chars(commit, 7)
}

/// The first `n` characters of `text` (by characters, so any stored text is safe to cut).
pub fn first_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((end, _)) => &text[..end],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_controls_go_text_stays() {
        assert_eq!(
            plain("\u{1b}[91m/bin/sh: make: not found\u{1b}[0m"),
            "/bin/sh: make: not found"
        );
        assert_eq!(plain("a\r\u{7}b\nc\td"), "ab\nc\td");
        assert_eq!(plain("\u{1b}]0;title\u{7}done"), "done");
        assert_eq!(plain("plain ✓ text"), "plain ✓ text");
        // A cut-off escape loses its ESC: what stays is plain text.
        assert_eq!(plain("\u{1b}["), "[");
    }
}
