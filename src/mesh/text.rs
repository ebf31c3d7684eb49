//! Cutting stored text for one-line display: by characters, never bytes, so any text is safe.

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
