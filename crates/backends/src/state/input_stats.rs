//! The stat cache of input hashing (see `workspace::stat_cache`): per build context, one row
//! holding every file's stat data and digest, encoded — as git's index is one file, so that a
//! steady plan reads one row per context rather than one per file. A cache: written without
//! waiting for the disk; a row that cannot be decoded reads as empty (its files are read again).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rusqlite::{OptionalExtension, params};

use super::{StateDb, StateError};
use crate::mesh::file_stat::{CachedDigest, StatKey, StatSet};

/// The encoding's version, its first byte: another version reads as empty.
const FORMAT: u8 = 1;
/// Per entry after the path: size, mtime, ctime, inode, device, hashed-at (8 bytes each), mode
/// (4 bytes), sha256 (32 raw bytes).
const FIXED: usize = 6 * 8 + 4 + 32;

/// The row's key: the context's path without a trailing `/`.
fn key(dir: &Path) -> String {
    dir.to_string_lossy().trim_end_matches('/').to_string()
}

/// Entries as stored: [`FORMAT`], then per entry the path's length (u32, little-endian), the
/// path, then the [`FIXED`] part. An entry whose digest is not 64 hex digits is left out.
pub(super) fn encode(entries: &[(String, CachedDigest)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + entries.len() * (FIXED + 64));
    out.push(FORMAT);
    for (path, e) in entries {
        let mut sha = [0u8; 32];
        let Ok(len) = u32::try_from(path.len()) else {
            continue;
        };
        if hex::decode_to_slice(&e.sha256, &mut sha).is_err() {
            continue;
        }
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(path.as_bytes());
        out.extend_from_slice(&e.stat.size.to_le_bytes());
        out.extend_from_slice(&e.stat.mtime_ns.to_le_bytes());
        out.extend_from_slice(&e.stat.ctime_ns.to_le_bytes());
        out.extend_from_slice(&e.stat.ino.to_le_bytes());
        out.extend_from_slice(&e.stat.dev.to_le_bytes());
        out.extend_from_slice(&e.hashed_at_ns.to_le_bytes());
        out.extend_from_slice(&e.stat.mode.to_le_bytes());
        out.extend_from_slice(&sha);
    }
    out
}

/// What [`encode`] wrote, as a [`StatSet`]; None for anything else (another format, a truncated
/// row, a path that is not UTF-8). Two allocations whatever the number of entries: this runs for
/// every context on every plan.
pub fn decode(bytes: &[u8]) -> Option<StatSet> {
    let (&format, mut rest) = bytes.split_first()?;
    if format != FORMAT {
        return None;
    }
    fn take<'a>(rest: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if rest.len() < n {
            return None;
        }
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        Some(head)
    }
    fn u64_at(bytes: &[u8], at: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[at..at + 8]);
        u64::from_le_bytes(b)
    }
    // Each entry is at least 4 + FIXED bytes, and its path is what is left of that.
    let most = rest.len() / (4 + FIXED);
    let mut set = StatSet::with_capacity(most, rest.len().saturating_sub(most * (4 + FIXED)));
    while !rest.is_empty() {
        let len: [u8; 4] = take(&mut rest, 4)?.try_into().ok()?;
        let len = usize::try_from(u32::from_le_bytes(len)).ok()?;
        let path = std::str::from_utf8(take(&mut rest, len)?).ok()?;
        let fixed = take(&mut rest, FIXED)?;
        let mode: [u8; 4] = fixed[48..52].try_into().ok()?;
        let sha: [u8; 32] = fixed[52..84].try_into().ok()?;
        // Signed values travel as their bits.
        let stat = StatKey {
            size: u64_at(fixed, 0),
            mtime_ns: u64_at(fixed, 8) as i64,
            ctime_ns: u64_at(fixed, 16) as i64,
            ino: u64_at(fixed, 24),
            dev: u64_at(fixed, 32),
            mode: u32::from_le_bytes(mode),
        };
        set.push(path, stat, u64_at(fixed, 40) as i64, sha);
    }
    Some(set.sorted())
}

impl StateDb {
    /// The cached entries of the build context `dir` (none when never kept, or unreadable).
    pub fn input_stats_of(&self, dir: &Path) -> Result<StatSet, StateError> {
        Ok(self
            .input_stats_row(dir)?
            .and_then(|b| decode(&b))
            .unwrap_or_default())
    }

    /// The stored row of the build context `dir`, to [`decode`] (outside the database's lock:
    /// contexts are loaded side by side).
    pub fn input_stats_row(&self, dir: &Path) -> Result<Option<Vec<u8>>, StateError> {
        let mut st = self
            .conn
            .prepare_cached("SELECT entries FROM input_stat_sets WHERE context = ?1")
            .map_err(self.err("read the stat cache"))?;
        st.query_row([key(dir)], |r| r.get(0))
            .optional()
            .map_err(self.err("read the stat cache"))
    }

    /// The stored rows of every build context at or below `root`, by context: one range read of
    /// the table's key, where a plan of thousands of contexts would otherwise ask once for each.
    pub fn input_stats_rows_under(
        &self,
        root: &Path,
    ) -> Result<HashMap<PathBuf, Vec<u8>>, StateError> {
        let root = key(root);
        // Below `root`: from `root/` up to, not including, `root0` ('0' follows '/').
        let (low, high) = (format!("{root}/"), format!("{root}0"));
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT context, entries FROM input_stat_sets \
                 WHERE context = ?1 OR (context >= ?2 AND context < ?3)",
            )
            .map_err(self.err("read the stat cache"))?;
        let rows = st
            .query_map(params![root, low, high], |r| {
                Ok((PathBuf::from(r.get::<_, String>(0)?), r.get(1)?))
            })
            .map_err(self.err("read the stat cache"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.err("read the stat cache"))
    }

    /// Replace the entries of each given build context, in one transaction.
    pub fn save_input_stats<P: AsRef<Path>>(
        &self,
        sets: &[(P, Vec<(String, CachedDigest)>)],
    ) -> Result<(), StateError> {
        if sets.is_empty() {
            return Ok(());
        }
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(self.err("write the stat cache"))?;
        {
            let mut put = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO input_stat_sets (context, entries) VALUES (?1, ?2)",
                )
                .map_err(self.err("write the stat cache"))?;
            for (dir, entries) in sets {
                put.execute(params![key(dir.as_ref()), encode(entries)])
                    .map_err(self.err("write the stat cache"))?;
            }
        }
        tx.commit().map_err(self.err("write the stat cache"))?;
        self.shrink_wal();
        Ok(())
    }

    /// After a write that left the log large (the first plan of a big tree writes megabytes of
    /// stat data): copy it into the file and truncate it. Every process that opens the database
    /// first reads the whole log back (SQLite's recovery of its index), so a log left at 6 MB cost
    /// every later steady plan a 6 MB read. Best effort and never waiting: with a reader in its
    /// transaction (the dashboard) the log stays as it is until a later write.
    fn shrink_wal(&self) {
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        let large = std::fs::metadata(&wal).is_ok_and(|m| m.len() > WAL_SHRINK_FROM_BYTES);
        if !large || self.conn.busy_timeout(std::time::Duration::ZERO).is_err() {
            return;
        }
        if let Err(error) = self.conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)") {
            tracing::debug!("the state database's log was not truncated: {error}");
        }
        let _ = self.conn.busy_timeout(super::BUSY_TIMEOUT);
    }
}

/// A log larger than this after a stat-cache write is checkpointed and truncated.
const WAL_SHRINK_FROM_BYTES: u64 = 1024 * 1024;

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn entry(i: i64) -> CachedDigest {
        CachedDigest {
            stat: StatKey {
                size: i as u64,
                mtime_ns: -i,
                ctime_ns: i64::MAX - i,
                ino: u64::MAX - i as u64,
                dev: 7,
                mode: 0o100755,
            },
            sha256: format!("{:064x}", i),
            hashed_at_ns: i * 1_000_000_007,
        }
    }

    #[test]
    fn entries_come_back_as_they_were_kept_and_a_damaged_row_reads_as_empty() {
        let entries: Vec<(String, CachedDigest)> = (0..50)
            .map(|i| (format!("/ctx/src/é{i}.txt"), entry(i)))
            .collect();
        let bytes = encode(&entries);
        let mut sorted = entries.clone();
        sorted.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(decode(&bytes).map(|s| s.to_entries()), Some(sorted.clone()));
        assert_eq!(decode(&bytes[..bytes.len() - 1]), None, "truncated");
        let mut other = bytes.clone();
        other[0] = FORMAT + 1;
        assert_eq!(decode(&other), None, "another format");
        assert_eq!(decode(&encode(&[])), Some(StatSet::default()));
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(
            crate::mesh::file_stat::lower_hex(&bytes),
            hex::encode(&bytes)
        );

        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(&dir.path().join("state.db")).unwrap();
        let ctx = Path::new("/ctx/");
        assert!(db.input_stats_of(ctx).unwrap().is_empty());
        db.save_input_stats(&[(ctx, entries.clone())]).unwrap();
        assert_eq!(
            db.input_stats_of(Path::new("/ctx")).unwrap().to_entries(),
            sorted
        );
        db.conn
            .execute("UPDATE input_stat_sets SET entries = x'01ff'", [])
            .unwrap();
        assert!(db.input_stats_of(ctx).unwrap().is_empty());
    }

    #[test]
    fn the_rows_under_a_root_are_its_contexts_and_no_neighbours() {
        let dir = tempfile::tempdir().unwrap();
        let db = StateDb::open(&dir.path().join("state.db")).unwrap();
        let row = |i: i64| vec![(format!("/f{i}"), entry(i))];
        let contexts = [
            "/repo",
            "/repo/api",
            "/repo/api/v2",
            "/repo-other/api",
            "/repo0",
            "/repoX/web",
            "/elsewhere",
        ];
        let sets: Vec<(&Path, _)> = contexts
            .iter()
            .zip(0..)
            .map(|(c, i)| (Path::new(*c), row(i)))
            .collect();
        db.save_input_stats(&sets).unwrap();
        let rows = db.input_stats_rows_under(Path::new("/repo")).unwrap();
        let mut found: Vec<&str> = rows.keys().filter_map(|p| p.to_str()).collect();
        found.sort_unstable();
        assert_eq!(found, ["/repo", "/repo/api", "/repo/api/v2"]);
        assert_eq!(
            decode(&rows[Path::new("/repo/api")]).map(|s| s.to_entries()),
            Some(row(1))
        );
        let all = db.input_stats_rows_under(Path::new("/")).unwrap();
        assert_eq!(
            all.len(),
            contexts.len(),
            "the root of the file system holds them all"
        );
    }

    #[test]
    fn a_large_stat_cache_write_leaves_the_log_small() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let db = StateDb::open(&path).unwrap();
        let entries: Vec<(String, CachedDigest)> = (0..30_000)
            .map(|i| (format!("/ctx/src/d{}/f{i:05}.txt", i % 16), entry(i)))
            .collect();
        db.save_input_stats(&[(Path::new("/ctx"), entries.clone())])
            .unwrap();
        let wal = dir.path().join("state.db-wal");
        let len = std::fs::metadata(&wal).map_or(0, |m| m.len());
        assert!(
            len <= WAL_SHRINK_FROM_BYTES,
            "the log was left at {len} bytes"
        );
        // What was written is in the file, read back by another handle.
        let other = StateDb::open(&path).unwrap();
        assert_eq!(
            other.input_stats_of(Path::new("/ctx")).unwrap().len(),
            30_000
        );
    }
}
