//! What gc saw and did (DESIGN.md: "keep set"): pure types, shared by `meshtop gc` and the
//! dashboard's gc view. The engine that fills them is `crate::converge::gc`.

use std::collections::BTreeMap;

use serde::Serialize;

/// One thing gc would take (or took): a tag, an image, or a registry manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// `tag`, `image` or `manifest`.
    pub kind: String,
    /// The tag, the image id, or `repository@digest`.
    pub name: String,
    pub module: String,
    /// The artifact (image id).
    pub artifact: String,
    /// Why nothing needs it.
    pub why: String,
    /// Bytes the daemon reports for an image (0 for a tag or a manifest).
    pub bytes: i64,
    /// What happened to it (`removed`, `untagged`, `deleted`, or the error); none on a dry run.
    pub outcome: Option<String>,
}

impl Candidate {
    /// Whether its outcome says it was taken.
    pub fn taken(&self) -> bool {
        self.outcome
            .as_deref()
            .is_some_and(|o| matches!(o, "removed" | "untagged" | "deleted"))
    }
}

/// What a gc saw and did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GcReport {
    pub mesh: String,
    pub dry_run: bool,
    pub keep_newest: usize,
    /// Artifacts in the keep set.
    pub kept: usize,
    /// Why they are kept: `record`, `running`, `pinned`, `newest`, `base` → how many artifacts
    /// (each counted once, under one root that names it).
    pub kept_by: BTreeMap<String, usize>,
    /// Bytes of this mesh's images on the host that the keep set holds.
    pub kept_bytes: i64,
    pub candidates: Vec<Candidate>,
    pub bytes_freed: i64,
    pub warnings: Vec<String>,
}

/// `12.3 MB` (decimal units, as `docker images` counts).
pub fn human_bytes(n: i64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value.abs() >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

impl GcReport {
    /// Bytes the candidates would free (a dry run) or freed (a sweep).
    pub fn bytes(&self) -> i64 {
        if self.dry_run {
            self.candidates.iter().map(|c| c.bytes).sum()
        } else {
            self.bytes_freed
        }
    }

    /// `keep set: 7 artifact(s), 48.2 MB on the host — newest 2, record 3, running 2`.
    pub fn keep_line(&self) -> String {
        let by: Vec<String> = self
            .kept_by
            .iter()
            .map(|(why, n)| format!("{why} {n}"))
            .collect();
        format!(
            "keep set: {} artifact(s), {} on the host — {}",
            self.kept,
            human_bytes(self.kept_bytes),
            if by.is_empty() {
                "none".to_string()
            } else {
                by.join(", ")
            }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_as_people_count_them() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(12_345_678), "12.3 MB");
        assert_eq!(human_bytes(48_200_000_000), "48.2 GB");
    }
}
