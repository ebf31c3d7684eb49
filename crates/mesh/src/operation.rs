//! What an operation is (DESIGN.md: "operation"): one value from its start to the record's
//! history, the events and the screen. Its words are the ones the state database, the record's
//! history annotation and `--json` have always held, so a row written before reads the same.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The kind of an operation that holds the mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum OperationKind {
    Converge,
    /// A converge with `--force` (or the force key).
    Force,
    Send,
    Rollback,
    Unpin,
    Promote,
    Gc,
}

/// A stored or received word that names no operation kind meshtop knows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{word:?} is not an operation kind meshtop knows (one of: converge, force, send, rollback, unpin, promote, gc): a newer meshtop may have written it; run that version, or upgrade this one"
)]
pub struct UnknownOperationKind {
    pub word: String,
}

impl OperationKind {
    pub(crate) const ALL: [OperationKind; 7] = [
        OperationKind::Converge,
        OperationKind::Force,
        OperationKind::Send,
        OperationKind::Rollback,
        OperationKind::Unpin,
        OperationKind::Promote,
        OperationKind::Gc,
    ];

    /// The word people read and the state database stores.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationKind::Converge => "converge",
            OperationKind::Force => "force",
            OperationKind::Send => "send",
            OperationKind::Rollback => "rollback",
            OperationKind::Unpin => "unpin",
            OperationKind::Promote => "promote",
            OperationKind::Gc => "gc",
        }
    }
}

impl fmt::Display for OperationKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OperationKind {
    type Err = UnknownOperationKind;

    /// Read back through `as_str`, so that the words are written once.
    fn from_str(word: &str) -> Result<OperationKind, UnknownOperationKind> {
        OperationKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == word)
            .ok_or_else(|| UnknownOperationKind {
                word: word.to_string(),
            })
    }
}

impl TryFrom<String> for OperationKind {
    type Error = UnknownOperationKind;

    fn try_from(word: String) -> Result<OperationKind, UnknownOperationKind> {
        word.parse()
    }
}

/// An operation's short id, unique within its mesh (`#142`), with its full uuid and kind
/// (`converge`, `force`, `send`, `rollback`, `gc`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OperationId {
    pub number: i64,
    pub uuid: String,
    pub kind: OperationKind,
}

impl fmt::Display for OperationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.number)
    }
}

/// How an operation is named on screen: `#142` when it has a short id, else its uuid's first
/// eight characters.
pub fn operation_label(number: Option<i64>, uuid: &str) -> String {
    match number {
        Some(n) => format!("#{n}"),
        None => uuid.chars().take(8).collect(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_reads_back_from_its_word_and_json_keeps_the_word() {
        for kind in OperationKind::ALL {
            assert_eq!(kind.as_str().parse::<OperationKind>(), Ok(kind));
            let json = serde_json::to_string(&kind).unwrap();
            assert_eq!(json, format!("\"{kind}\""));
            assert_eq!(serde_json::from_str::<OperationKind>(&json).unwrap(), kind);
        }
    }

    #[test]
    fn an_unknown_word_is_refused_naming_it_and_the_known_ones() {
        let error = "deploy".parse::<OperationKind>().unwrap_err();
        assert_eq!(error.word, "deploy");
        let said = error.to_string();
        assert!(
            said.contains("\"deploy\"") && said.contains("rollback"),
            "{said}"
        );
        let json = serde_json::from_str::<OperationKind>("\"deploy\"").unwrap_err();
        assert!(json.to_string().contains("newer meshtop"), "{json}");
    }
}
