//! The domain's words as their columns hold them. The types are the domain's (`meshtop-mesh`), which
//! does not know SQLite, so each is carried through rusqlite in a wrapper of this crate's own.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

use crate::mesh::builds::BuildStatus;
use crate::mesh::operation::OperationKind;

/// A build's status as its column holds it: the word (the domain's type is not SQLite's to know).
pub(crate) struct StatusWord(pub(crate) BuildStatus);

impl ToSql for StatusWord {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.0.as_str()))
    }
}

impl FromSql for StatusWord {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        let text = value.as_str()?;
        BuildStatus::parse(text)
            .map(StatusWord)
            .ok_or_else(|| FromSqlError::Other(format!("unknown build status {text:?}").into()))
    }
}

/// An operation's kind as its column holds it: the word it has always been stored as
/// (`converge`, `rollback`…); the domain's type is not SQLite's to know.
pub(crate) struct KindWord(pub(crate) OperationKind);

impl ToSql for KindWord {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.0.as_str()))
    }
}

/// Read back from its word; a word this meshtop does not know is an error that names it.
impl FromSql for KindWord {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<KindWord> {
        value
            .as_str()?
            .parse()
            .map(KindWord)
            .map_err(|unknown| FromSqlError::Other(Box::new(unknown)))
    }
}
