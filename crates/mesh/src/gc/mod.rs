//! What gc saw and did (DESIGN.md: "keep set"): pure types, shared by `meshtop gc` and the
//! dashboard's gc view, and the pure weighing of the keep set ([`roots`]) and of the candidates
//! against it ([`candidates`]). The engine that reads the roots and takes is `crate::converge::gc`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Serialize, Serializer};

pub mod candidates;
pub mod roots;

pub use candidates::{SizedImage, candidates, is_this_mesh, manifest_candidates, short_name};
pub use roots::{GRACE, Roots};

/// Nothing built or published within this long is taken (`--grace`; the dashboard's gc too): a
/// teammate's converge may be about to stamp it.
pub const DEFAULT_GRACE_MS: i64 = 3_600_000;

/// What gc keeps besides each module's newest builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcRules {
    /// Each module's newest N successful builds are kept.
    pub keep_newest: usize,
    /// Nothing built or published within this many ms is taken.
    pub grace_ms: i64,
}

/// What a candidate is; `--json` and the screen say it by its word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CandidateKind {
    /// One of this mesh's tags on an image something else keeps.
    Tag,
    /// An image on the host, with every tag it has.
    Image,
    /// A manifest in the registry.
    Manifest,
    /// A part of the record the target keeps apart (a shard) that no index names any more.
    Shard,
}

impl CandidateKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CandidateKind::Tag => "tag",
            CandidateKind::Image => "image",
            CandidateKind::Manifest => "manifest",
            CandidateKind::Shard => "shard",
        }
    }
}

impl fmt::Display for CandidateKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `pad` keeps the width the gc listing aligns its column with.
        f.pad(self.as_str())
    }
}

/// What happened to a candidate a sweep tried to take. Said (on screen and in `--json`) as it
/// always was: `removed`, `untagged`, `deleted`, `already gone`, `skipped: …`, `failed: …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GcOutcome {
    /// An image the daemon removed.
    Removed,
    /// A tag the daemon removed (the image stays).
    Untagged,
    /// A manifest the registry deleted.
    Deleted,
    /// A manifest the registry no longer had.
    AlreadyGone,
    /// Not tried, and why (no registry, a registry that does not allow deletes).
    Skipped(String),
    /// Tried, or refused before trying (the mesh was lost), and why.
    Failed(String),
}

impl fmt::Display for GcOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GcOutcome::Removed => f.write_str("removed"),
            GcOutcome::Untagged => f.write_str("untagged"),
            GcOutcome::Deleted => f.write_str("deleted"),
            GcOutcome::AlreadyGone => f.write_str("already gone"),
            GcOutcome::Skipped(why) => write!(f, "skipped: {why}"),
            GcOutcome::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

/// The words scripts have always read: the outcome as it is said.
impl Serialize for GcOutcome {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// One thing gc would take (or took): a tag, an image, a registry manifest, or a record shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Candidate {
    pub kind: CandidateKind,
    /// The tag, the image id, `repository@digest`, or the shard's name.
    pub name: String,
    /// Its module (empty for a shard: it holds many).
    pub module: String,
    /// The artifact (image id; empty for a shard).
    pub artifact: String,
    /// Why nothing needs it.
    pub why: String,
    /// Bytes the daemon reports for an image (0 for a tag or a manifest).
    pub bytes: i64,
    /// What happened to it; none on a dry run.
    pub outcome: Option<GcOutcome>,
}

impl Candidate {
    /// Whether it was taken.
    pub fn taken(&self) -> bool {
        matches!(
            self.outcome,
            Some(GcOutcome::Removed | GcOutcome::Untagged | GcOutcome::Deleted)
        )
    }

    /// Whether taking it was tried (or refused) and failed.
    pub fn failed(&self) -> bool {
        matches!(self.outcome, Some(GcOutcome::Failed(_)))
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
    /// Nothing built or published within this many ms is taken.
    pub grace_ms: i64,
    pub candidates: Vec<Candidate>,
    /// What would be taken but for a teammate who may need it: built or published within the
    /// grace, or a manifest a tag outside this mesh's unreachable set names. `why` says which.
    pub spared: Vec<Candidate>,
    pub bytes_freed: i64,
    pub warnings: Vec<String>,
    /// The mesh's other targets an operation holds now (`target prod is held by converge #12 on
    /// host-b`): a sweep takes nothing while one is.
    #[serde(default)]
    pub held_elsewhere: Vec<String>,
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

/// A grace (`--grace`) that reads as no duration, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a duration ({why}): give numbers with units, e.g. 0s, 30m, 2h, 1h30m")]
pub struct BadGrace {
    pub text: String,
    pub why: String,
}

/// `0s`, `90s`, `30m`, `2h`, `1h30m`, `2 hours`, `1d` → ms: numbers each with a unit, as humantime
/// reads them (units: ms, s, m/min, h, d, w and their long names).
pub fn parse_grace(text: &str) -> Result<i64, BadGrace> {
    let bad = |why: &str| BadGrace {
        text: text.to_string(),
        why: why.to_string(),
    };
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(bad("it is empty"));
    }
    let mut total: i64 = 0;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad("a unit without a number"));
        }
        let number: i64 = rest[..digits].parse().map_err(|_| bad("too long"))?;
        rest = rest[digits..].trim_start();
        let letters = rest
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(rest.len());
        let unit_ms = match &rest[..letters] {
            "ms" | "msec" | "millis" => 1,
            "s" | "sec" | "secs" | "second" | "seconds" => 1_000,
            "m" | "min" | "mins" | "minute" | "minutes" => 60_000,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000,
            "d" | "day" | "days" => 86_400_000,
            "w" | "week" | "weeks" => 7 * 86_400_000,
            "" => return Err(bad("a number without a unit")),
            other => return Err(bad(&format!("unknown unit {other:?}"))),
        };
        rest = rest[letters..].trim_start();
        total = number
            .checked_mul(unit_ms)
            .and_then(|ms| total.checked_add(ms))
            .ok_or_else(|| bad("too long"))?;
    }
    Ok(total)
}

/// A grace as people write it: `1h`, `30m`, `1h30m`, `0s`.
pub fn grace_words(ms: i64) -> String {
    if ms <= 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut left = ms;
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if left >= size {
            out.push_str(&format!("{}{unit}", left / size));
            left %= size;
        }
    }
    out
}

/// How long ago, in words: `40 s ago`, `12 min ago`, `3 h ago`, `2 d ago`.
pub fn ago_words(ms: i64) -> String {
    let seconds = (ms / 1000).max(0);
    match seconds {
        s if s < 60 => format!("{s} s ago"),
        s if s < 3600 => format!("{} min ago", s / 60),
        s if s < 86_400 => format!("{} h ago", s / 3600),
        s => format!("{} d ago", s / 86_400),
    }
}

/// Why something `what` (built, published) at `at_ms` is kept, if that was within the grace:
/// `built 12 min ago, within the grace of 1h`.
pub(crate) fn within_grace(what: &str, at_ms: i64, now_ms: i64, grace_ms: i64) -> Option<String> {
    (now_ms - at_ms < grace_ms).then(|| {
        format!(
            "{what} {}, within the grace of {}",
            ago_words(now_ms - at_ms),
            grace_words(grace_ms)
        )
    })
}

/// The tag that keeps a manifest from a registry delete (which untags every tag naming it): any of
/// `naming` that is not one of `ours` (this mesh's tags of unreachable builds). A kept ref says so.
pub fn keeping_tag(
    naming: &[String],
    ours: &BTreeSet<String>,
    kept_refs: &BTreeSet<String>,
) -> Option<String> {
    let tag = naming.iter().find(|t| !ours.contains(*t))?;
    Some(if kept_refs.contains(tag) {
        format!("tagged {tag}, a ref the keep set names")
    } else {
        format!("tagged {tag} by someone else")
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn graces_read_as_humantime_writes_them() {
        assert_eq!(parse_grace("0s"), Ok(0));
        assert_eq!(parse_grace("30m"), Ok(1_800_000));
        assert_eq!(parse_grace("2h"), Ok(7_200_000));
        assert_eq!(parse_grace("1h30m"), Ok(5_400_000));
        assert_eq!(parse_grace("1h 30min"), Ok(5_400_000));
        assert_eq!(parse_grace("2 hours"), Ok(7_200_000));
        assert_eq!(parse_grace("1d"), Ok(86_400_000));
        for bad in [
            "",
            "soon",
            "30",
            "h",
            "5 parsecs",
            "-1h",
            "99999999999999999999d",
        ] {
            let error = parse_grace(bad).unwrap_err().to_string();
            assert!(
                error.contains("is not a duration") && error.contains("e.g. 0s"),
                "{error}"
            );
        }
        assert_eq!(grace_words(3_600_000), "1h");
        assert_eq!(grace_words(5_400_000), "1h30m");
        assert_eq!(grace_words(0), "0s");
    }

    #[test]
    fn the_grace_names_how_long_ago() {
        let now = 10_000_000;
        assert_eq!(
            within_grace("built", now - 12 * 60_000 - 5_000, now, 3_600_000).as_deref(),
            Some("built 12 min ago, within the grace of 1h")
        );
        assert_eq!(within_grace("built", now - 3_600_000, now, 3_600_000), None);
        assert_eq!(within_grace("built", now, now, 0), None);
    }

    #[test]
    fn a_tag_outside_the_unreachable_set_keeps_a_manifest() {
        let ours = BTreeSet::from(["abc-amd64".to_string()]);
        let kept = BTreeSet::from(["def-amd64".to_string()]);
        let tags = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(keeping_tag(&tags(&["abc-amd64"]), &ours, &kept), None);
        assert_eq!(
            keeping_tag(&tags(&["abc-amd64", "prod"]), &ours, &kept).as_deref(),
            Some("tagged prod by someone else")
        );
        assert_eq!(
            keeping_tag(&tags(&["def-amd64"]), &ours, &kept).as_deref(),
            Some("tagged def-amd64, a ref the keep set names")
        );
    }

    #[test]
    fn outcomes_and_kinds_say_the_words_scripts_read() {
        let candidate = |kind, outcome| Candidate {
            kind,
            name: "sha256:e".into(),
            module: "api".into(),
            artifact: "sha256:e".into(),
            why: "unreachable".into(),
            bytes: 0,
            outcome,
        };
        let cases = [
            (
                CandidateKind::Image,
                Some(GcOutcome::Removed),
                "image",
                "removed",
            ),
            (
                CandidateKind::Tag,
                Some(GcOutcome::Untagged),
                "tag",
                "untagged",
            ),
            (
                CandidateKind::Manifest,
                Some(GcOutcome::Deleted),
                "manifest",
                "deleted",
            ),
            (
                CandidateKind::Manifest,
                Some(GcOutcome::AlreadyGone),
                "manifest",
                "already gone",
            ),
            (
                CandidateKind::Manifest,
                Some(GcOutcome::Skipped("no registry".into())),
                "manifest",
                "skipped: no registry",
            ),
            (
                CandidateKind::Image,
                Some(GcOutcome::Failed("not taken: lost".into())),
                "image",
                "failed: not taken: lost",
            ),
        ];
        for (kind, outcome, kind_word, outcome_word) in cases {
            let json = serde_json::to_value(candidate(kind, outcome.clone())).unwrap();
            assert_eq!(json["kind"], kind_word);
            assert_eq!(json["outcome"], outcome_word);
            assert_eq!(kind.to_string(), kind_word);
            assert_eq!(
                outcome.map(|o| o.to_string()).as_deref(),
                Some(outcome_word)
            );
        }
        let dry = serde_json::to_value(candidate(CandidateKind::Tag, None)).unwrap();
        assert!(dry["outcome"].is_null(), "{dry}");
        assert_eq!(format!("{:<8}|", CandidateKind::Tag), "tag     |");
        let taken = |o| candidate(CandidateKind::Image, Some(o)).taken();
        let failed = |o| candidate(CandidateKind::Image, Some(o)).failed();
        assert!(
            taken(GcOutcome::Removed) && taken(GcOutcome::Untagged) && taken(GcOutcome::Deleted)
        );
        assert!(!taken(GcOutcome::AlreadyGone) && !taken(GcOutcome::Skipped(String::new())));
        assert!(failed(GcOutcome::Failed(String::new())) && !failed(GcOutcome::Removed));
    }

    #[test]
    fn bytes_read_as_people_count_them() {
        assert_eq!(human_bytes(999), "999 B");
        assert_eq!(human_bytes(12_345_678), "12.3 MB");
        assert_eq!(human_bytes(48_200_000_000), "48.2 GB");
    }
}
