//! What this machine can vouch for on its own host daemon: the artifacts its builds made and the
//! images it pulled after verifying them (hashed, their config the artifact, signed where the mesh
//! trusts keys). With `trust`, the host voucher answers only for these: a labelled image that
//! anyone with access to the daemon could have tagged answers for nothing.

use std::collections::{BTreeMap, BTreeSet};

use rusqlite::{OptionalExtension, params};

use super::{StateDb, StateError, now_ms};

impl StateDb {
    /// Note that `image_id` was pulled as `manifest` under `reference` after the registry voucher
    /// verified it (`signed_by`: the trusted key that signed it, None where the mesh trusts no key).
    pub fn note_verified_pull(
        &self,
        mesh: &str,
        image_id: &str,
        reference: &str,
        manifest: &str,
        signed_by: Option<&str>,
    ) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT INTO verified_pulls (mesh, image_id, manifest, signed_by, pulled_ms, reference) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT(mesh, image_id) DO UPDATE SET manifest = excluded.manifest, \
                 signed_by = excluded.signed_by, pulled_ms = excluded.pulled_ms, \
                 reference = excluded.reference",
            )
            .and_then(|mut st| {
                st.execute(params![
                    mesh,
                    image_id,
                    manifest,
                    signed_by,
                    now_ms(),
                    reference
                ])
            })
            .map_err(self.err("note a verified pull"))?;
        Ok(())
    }

    /// The ref and manifest the image `image_id` of `mesh` was pulled as after verification (None:
    /// this machine never pulled it so).
    pub fn verified_pull(
        &self,
        mesh: &str,
        image_id: &str,
    ) -> Result<Option<(String, String)>, StateError> {
        self.conn
            .prepare_cached(
                "SELECT reference, manifest FROM verified_pulls \
                 WHERE mesh = ?1 AND image_id = ?2 AND reference IS NOT NULL",
            )
            .and_then(|mut st| {
                st.query_row(params![mesh, image_id], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(self.err("read a verified pull"))
    }

    /// Note that the host daemon runs `index` (a multi-platform artifact) for `platform` as the
    /// image `image_id`, pulled by the manifest `manifest` the index names for it.
    pub fn note_index_image(
        &self,
        mesh: &str,
        index: &str,
        platform: &str,
        manifest: &str,
        image_id: &str,
    ) -> Result<(), StateError> {
        self.conn
            .prepare_cached(
                "INSERT INTO index_images (mesh, index_digest, platform, manifest, image_id, pulled_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
                 ON CONFLICT(mesh, index_digest, platform) DO UPDATE SET manifest = excluded.manifest, \
                 image_id = excluded.image_id, pulled_ms = excluded.pulled_ms",
            )
            .and_then(|mut st| {
                st.execute(params![mesh, index, platform, manifest, image_id, now_ms()])
            })
            .map_err(self.err("note the image run out of an index"))?;
        Ok(())
    }

    /// The images the host daemon runs out of `index`, per platform (`linux/amd64` → image id).
    pub fn index_images(
        &self,
        mesh: &str,
        index: &str,
    ) -> Result<BTreeMap<String, String>, StateError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT platform, image_id FROM index_images WHERE mesh = ?1 AND index_digest = ?2",
            )
            .map_err(self.err("read the images run out of an index"))?;
        st.query_map(params![mesh, index], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .and_then(|rows| rows.collect::<Result<BTreeMap<_, _>, _>>())
        .map_err(self.err("read the images run out of an index"))
    }

    /// Every (ref, image id) of `mesh` this machine vouches for: made under that ref by one of its
    /// succeeded builds, or pulled under it after verification.
    pub fn vouched_here(&self, mesh: &str) -> Result<BTreeSet<(String, String)>, StateError> {
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT ref, digest FROM builds WHERE mesh = ?1 AND status = 'succeeded' \
                 AND digest IS NOT NULL AND ref IS NOT NULL \
                 UNION SELECT reference, image_id FROM verified_pulls \
                 WHERE mesh = ?1 AND reference IS NOT NULL",
            )
            .map_err(self.err("read what this machine built or verified"))?;
        st.query_map([mesh], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
        })
        .and_then(|rows| rows.collect::<Result<BTreeSet<_>, _>>())
        .map_err(self.err("read what this machine built or verified"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_verified_pull_is_vouched_for_and_nothing_else_is() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(&dir.path().join("state.db")).unwrap();
        assert!(db.vouched_here("demo").unwrap().is_empty());
        db.note_verified_pull("demo", "sha256:aa", "demo/api:1", "sha256:m1", Some("ci"))
            .unwrap();
        db.note_verified_pull("other", "sha256:bb", "other/api:1", "sha256:m2", None)
            .unwrap();
        assert_eq!(
            db.vouched_here("demo").unwrap(),
            BTreeSet::from([("demo/api:1".to_string(), "sha256:aa".to_string())])
        );
        assert_eq!(
            db.verified_pull("demo", "sha256:aa").unwrap(),
            Some(("demo/api:1".to_string(), "sha256:m1".to_string()))
        );
        assert_eq!(db.verified_pull("demo", "sha256:bb").unwrap(), None);
    }
}
