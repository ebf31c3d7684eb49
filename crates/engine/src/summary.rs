//! What a converge did, module by module: the summary both the command line and the dashboard
//! show (one text, one headline).

use std::fmt;

use serde::{Serialize, Serializer};

use super::send;
use crate::mesh::decide::Decision;

/// How a module's part in a converge ended. Said (on screen and in `--json`) as it always was:
/// `skipped (record)`, `built`, `failed: …`, `not reached: …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModuleEnd {
    /// The record names its ref: nothing built, nothing delivered.
    SkippedRecord,
    /// Pinned by a rollback: the record keeps the pinned artifact.
    KeptPinned,
    /// The registry vouched: no build, delivered from there.
    SkippedBuildRegistry,
    /// The host vouched: no build, delivered.
    SkippedBuildHost,
    /// Built and delivered.
    Built,
    /// Refused before anything was built (its base has no artifact), and why.
    NotReached(String),
    /// Its build, or the pool placing it, failed, and why.
    Failed(String),
    /// Built or vouched for, but publishing or delivering it failed, and why.
    DeliveryFailed(String),
}

impl ModuleEnd {
    /// Whether the module made it (the converge may stamp it).
    pub fn is_ok(&self) -> bool {
        !matches!(
            self,
            ModuleEnd::NotReached(_) | ModuleEnd::Failed(_) | ModuleEnd::DeliveryFailed(_)
        )
    }

    /// Its first word, without the why (`failed`, `not reached`): what "nothing stamped" lists.
    pub fn word(&self) -> &'static str {
        match self {
            ModuleEnd::SkippedRecord => "skipped (record)",
            ModuleEnd::KeptPinned => "kept (pinned)",
            ModuleEnd::SkippedBuildRegistry => "skipped build (registry)",
            ModuleEnd::SkippedBuildHost => "skipped build (host), delivered",
            ModuleEnd::Built => "built",
            ModuleEnd::NotReached(_) => "not reached",
            ModuleEnd::Failed(_) | ModuleEnd::DeliveryFailed(_) => "failed",
        }
    }
}

impl fmt::Display for ModuleEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModuleEnd::NotReached(why) | ModuleEnd::Failed(why) => {
                write!(f, "{}: {why}", self.word())
            }
            ModuleEnd::DeliveryFailed(why) => write!(f, "failed: delivery: {why}"),
            _ => f.write_str(self.word()),
        }
    }
}

/// The words scripts have always read: the outcome as it is said.
impl Serialize for ModuleEnd {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ModuleOutcome {
    pub name: String,
    pub tier: u32,
    pub decision: Decision,
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub digest: Option<String>,
    pub correlation_id: Option<String>,
    pub outcome: ModuleEnd,
    pub ok: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConvergeSummary {
    pub operation_id: String,
    /// The converge's short id within the mesh (`#142`).
    pub operation: Option<i64>,
    pub mesh: String,
    /// Warnings about the target's record (e.g. an unreadable annotation).
    pub warnings: Vec<String>,
    /// Whether this converge wrote the record (false when it already named every artifact).
    pub stamped: bool,
    /// What the converge's `stamped` step said of the record (`record stamped: 2 module(s)`,
    /// `record unchanged: it already names every artifact`, `nothing stamped: api failed, worker not
    /// reached`).
    pub record: String,
    pub modules: Vec<ModuleOutcome>,
    pub created: Vec<String>,
    pub sends: Vec<send::SendOutcome>,
    pub ok: bool,
}

impl ConvergeSummary {
    /// `#142`, or the uuid's start when the database gave no short id.
    pub fn label(&self) -> String {
        crate::mesh::progress::operation_label(self.operation, &self.operation_id)
    }

    /// One line: succeeded, or which modules and sends failed.
    pub fn headline(&self) -> String {
        if self.ok {
            return format!("converge {} succeeded", self.label());
        }
        let mut failed: Vec<String> = self
            .modules
            .iter()
            .filter(|m| !m.ok)
            .map(|m| format!("{} {}", m.name, m.outcome))
            .collect();
        failed.extend(
            self.sends
                .iter()
                .filter(|s| !s.ok)
                .map(|s| format!("send {}: {}", s.moved.machine, s.message)),
        );
        format!("converge {} failed: {}", self.label(), failed.join("; "))
    }

    /// The summary as `meshtop converge` prints it: one line per module, machine and send.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = writeln!(
            text,
            "converge {} ({}) of mesh {}",
            self.label(),
            self.operation_id,
            self.mesh
        );
        for module in &self.modules {
            let _ = writeln!(
                text,
                "{} tier {} {:<12} {:<8} {:<40} {}",
                if module.ok { "✓" } else { "✗" },
                module.tier,
                module.name,
                module.decision,
                module.reference.as_deref().unwrap_or("–"),
                module.outcome
            );
        }
        for name in &self.created {
            let _ = writeln!(text, "+ created machine {name}");
        }
        for send in &self.sends {
            let _ = writeln!(
                text,
                "{} sent {} ({}) → {}: {}",
                if send.ok { "✓" } else { "✗" },
                send.moved.machine,
                send.moved.module,
                send.moved.to_reference,
                send.message
            );
        }
        let _ = writeln!(text, "{}", self.record);
        text
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::ModuleEnd;

    #[test]
    fn each_end_says_the_words_scripts_read() {
        let cases = [
            (
                ModuleEnd::SkippedRecord,
                "skipped (record)",
                "skipped (record)",
                true,
            ),
            (
                ModuleEnd::KeptPinned,
                "kept (pinned)",
                "kept (pinned)",
                true,
            ),
            (
                ModuleEnd::SkippedBuildRegistry,
                "skipped build (registry)",
                "skipped build (registry)",
                true,
            ),
            (
                ModuleEnd::SkippedBuildHost,
                "skipped build (host), delivered",
                "skipped build (host), delivered",
                true,
            ),
            (ModuleEnd::Built, "built", "built", true),
            (
                ModuleEnd::NotReached("base first".into()),
                "not reached: base first",
                "not reached",
                false,
            ),
            (
                ModuleEnd::Failed("exit 1".into()),
                "failed: exit 1",
                "failed",
                false,
            ),
            (
                ModuleEnd::DeliveryFailed("no room".into()),
                "failed: delivery: no room",
                "failed",
                false,
            ),
        ];
        for (end, said, word, ok) in cases {
            assert_eq!(end.to_string(), said);
            assert_eq!(serde_json::to_value(&end).unwrap(), said);
            assert_eq!(end.word(), word, "{said}");
            assert_eq!(end.is_ok(), ok, "{said}");
        }
    }
}
