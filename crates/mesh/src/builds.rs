//! Build records as the domain sees them: one row per build attempt and where it stands.
//! The state database (`backends::state`) stores and reads them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a build attempt stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BuildStatus {
    Running,
    Succeeded,
    Failed,
    Cancelled,
    /// Its process ended without writing how the build ended (killed, frozen and taken over, or
    /// its record could not be written); the reason is in the row's `error`.
    Stopped,
}

impl BuildStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildStatus::Running => "running",
            BuildStatus::Succeeded => "succeeded",
            BuildStatus::Failed => "failed",
            BuildStatus::Cancelled => "cancelled",
            BuildStatus::Stopped => "stopped",
        }
    }

    pub fn parse(text: &str) -> Option<BuildStatus> {
        match text {
            "running" => Some(BuildStatus::Running),
            "succeeded" => Some(BuildStatus::Succeeded),
            "failed" => Some(BuildStatus::Failed),
            "cancelled" => Some(BuildStatus::Cancelled),
            "stopped" => Some(BuildStatus::Stopped),
            _ => None,
        }
    }

    /// Succeeded, failed, cancelled or stopped.
    pub fn is_finished(self) -> bool {
        self != BuildStatus::Running
    }
}

impl fmt::Display for BuildStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One build record, every column.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuildRow {
    pub id: String,
    pub mesh: String,
    pub module: Option<String>,
    pub repository: String,
    pub commit: Option<String>,
    pub dirty: bool,
    pub base_module: Option<String>,
    pub base_digest: Option<String>,
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub digest: Option<String>,
    pub platforms: String,
    pub status: BuildStatus,
    pub forced: bool,
    pub why: String,
    pub host: String,
    pub started_ms: i64,
    pub ended_ms: Option<i64>,
    pub error: Option<String>,
    pub log_tail: Option<String>,
    pub published_ref: Option<String>,
    pub published_digest: Option<String>,
    pub operation_id: Option<String>,
    /// When it was published (ms since the epoch); None: never, or before meshtop kept the time.
    pub published_ms: Option<i64>,
    /// The short id (`#142`) of the operation the build belongs to, when it has one.
    pub operation: Option<i64>,
    /// The pool's builder it ran on (None: the local daemon of a mesh without builders).
    pub builder: Option<String>,
    /// How long its hand-over push to the registry took (ms), apart from the build's own time.
    pub push_ms: Option<i64>,
    /// How long the builder's daemon worked on it (ms): the build call, from the session to the
    /// daemon's last answer. The rest of `started_ms .. ended_ms` is meshtop's own ([`BuildRow::own_ms`]).
    pub daemon_ms: Option<i64>,
    /// Derived when read, never stored: the row says `running` but the converge that runs it is
    /// gone (it holds no lock, or its heartbeat is stale, or its process is gone on this host).
    /// Shown as `stopped (process gone)`; the row itself is closed by the next take-over.
    pub process_gone: bool,
}

/// What a running row whose process is gone shows as its status.
pub(crate) const PROCESS_GONE: &str = "stopped (process gone)";

impl BuildRow {
    /// meshtop's own time in the build (ms): its row's span less its daemon's time (the row's
    /// start, the base's naming, the record); None until both are known.
    pub fn own_ms(&self) -> Option<i64> {
        let span = self.ended_ms? - self.started_ms;
        Some((span - self.daemon_ms?).max(0))
    }

    /// The status to show: the stored one, or [`PROCESS_GONE`] for a running row whose process is gone.
    pub fn shown_status(&self) -> &'static str {
        if self.status == BuildStatus::Running && self.process_gone {
            PROCESS_GONE
        } else {
            self.status.as_str()
        }
    }

    /// The module, or the repository for a build that never learned its module.
    pub fn subject(&self) -> &str {
        self.module.as_deref().unwrap_or(&self.repository)
    }

    /// The commit's first 7 characters, or `–` for a build from outside a repository.
    pub fn short_commit(&self) -> &str {
        self.commit
            .as_deref()
            .map(crate::text::short_commit)
            .unwrap_or("–")
    }

    /// How long ago it ended at `now_ms` (a running build: since it started): `26s`. The one age
    /// of a build, whichever view shows it (LAST BUILD, the builds pane, the detail, a confirm).
    pub fn age(&self, now_ms: i64) -> String {
        crate::timefmt::age_since(self.ended_ms.unwrap_or(self.started_ms), now_ms)
    }

    /// Who built it: the host that ran meshtop, and the pool's builder when it was not the local
    /// daemon (`host-a (farm-1)`).
    pub fn built_by(&self) -> String {
        match &self.builder {
            Some(builder) => format!("{} ({builder})", self.host),
            None => self.host.clone(),
        }
    }

    /// Where what it made came from: `host-a @c0ffee1 3m` (the age since it ended, at `now_ms`).
    pub fn made_by(&self, now_ms: i64) -> String {
        format!(
            "{} @{} {}",
            self.host,
            self.short_commit(),
            self.age(now_ms)
        )
    }
}
