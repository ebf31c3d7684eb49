//! What each upstream image's registry served under its tag when last asked: written by whatever
//! asks (`outdated`, `plan --refresh`, the dashboard's poller), read by what must not ask (`status`,
//! the dashboard's screen). Upstream images are facts of the world, not of one mesh: keyed by the
//! image name alone.

use std::collections::BTreeMap;

use rusqlite::params;
use serde::Serialize;

use super::{StateDb, StateError, now_ms};

/// One upstream's last answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpstreamSeen {
    /// The manifest digest its registry served under the tag; None when it could not say.
    pub digest: Option<String>,
    /// Why it could not say.
    pub error: Option<String>,
    /// When it was asked (ms since the epoch).
    pub asked_ms: i64,
}

impl StateDb {
    /// Note what `image`'s registry answered now. An answer that could not say keeps the last
    /// digest seen (a registry down for a while does not make a moved upstream look current).
    pub fn note_upstream_seen(
        &self,
        image: &str,
        digest: Option<&str>,
        error: Option<&str>,
    ) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT INTO upstreams_seen (image, digest, error, asked_ms) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT(image) DO UPDATE SET digest = COALESCE(excluded.digest, upstreams_seen.digest), \
                 error = excluded.error, asked_ms = excluded.asked_ms",
            )
            .and_then(|mut st| st.execute(params![image, digest, error, now_ms()]))
            .map_err(self.err("note what an upstream's registry served"))?;
        Ok(())
    }

    /// Every upstream's last answer, by image.
    pub fn upstreams_seen(&self) -> Result<BTreeMap<String, UpstreamSeen>, StateError> {
        let read = || -> rusqlite::Result<BTreeMap<String, UpstreamSeen>> {
            let mut st = self
                .conn
                .prepare_cached("SELECT image, digest, error, asked_ms FROM upstreams_seen")?;
            let rows = st.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    UpstreamSeen {
                        digest: r.get(1)?,
                        error: r.get(2)?,
                        asked_ms: r.get(3)?,
                    },
                ))
            })?;
            rows.collect()
        };
        read().map_err(self.err("read what upstream registries served"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_that_could_not_say_keeps_the_digest_last_seen() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(&dir.path().join("state.db")).unwrap();
        db.note_upstream_seen("up/base:1", Some("sha256:aa"), None)
            .unwrap();
        db.note_upstream_seen("up/base:1", None, Some("connection refused"))
            .unwrap();
        let seen = db.upstreams_seen().unwrap();
        assert_eq!(seen["up/base:1"].digest.as_deref(), Some("sha256:aa"));
        assert_eq!(
            seen["up/base:1"].error.as_deref(),
            Some("connection refused")
        );
        db.note_upstream_seen("up/base:1", Some("sha256:bb"), None)
            .unwrap();
        let seen = db.upstreams_seen().unwrap();
        assert_eq!(seen["up/base:1"].digest.as_deref(), Some("sha256:bb"));
        assert_eq!(seen["up/base:1"].error, None);
    }
}
