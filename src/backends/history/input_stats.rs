//! The stat cache of input hashing (see `workspace::stat_cache`): per file, its stat data and
//! digest. A cache: written without waiting for the disk, and a failed write loses nothing but time.

use std::path::Path;

use rusqlite::params;

use super::{History, HistoryError};
use crate::workspace::stat_cache::{CachedDigest, StatKey};

/// `[dir/, dir0)`: every path below `dir` ('0' is the byte after '/').
fn range_below(dir: &Path) -> (String, String) {
    let dir = dir.to_string_lossy();
    let dir = dir.trim_end_matches('/');
    (format!("{dir}/"), format!("{dir}0"))
}

impl History {
    /// Every cached entry below `dir`, by absolute path, in path order.
    pub fn input_stats_below(
        &self,
        dir: &Path,
    ) -> Result<Vec<(String, CachedDigest)>, HistoryError> {
        let (from, to) = range_below(dir);
        let mut st = self
            .conn
            .prepare_cached(
                "SELECT path, size, mtime_ns, ctime_ns, ino, dev, mode, sha256, hashed_at_ns \
                 FROM input_stats WHERE path >= ?1 AND path < ?2 ORDER BY path",
            )
            .map_err(self.err("read the stat cache"))?;
        let rows = st
            .query_map(params![from, to], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    CachedDigest {
                        // Stored as SQLite's signed integers, bit for bit.
                        stat: StatKey {
                            size: r.get::<_, i64>(1)? as u64,
                            mtime_ns: r.get(2)?,
                            ctime_ns: r.get(3)?,
                            ino: r.get::<_, i64>(4)? as u64,
                            dev: r.get::<_, i64>(5)? as u64,
                            mode: r.get(6)?,
                        },
                        sha256: r.get(7)?,
                        hashed_at_ns: r.get(8)?,
                    },
                ))
            })
            .map_err(self.err("read the stat cache"))?;
        rows.collect::<Result<_, _>>()
            .map_err(self.err("read the stat cache"))
    }

    /// Write new entries and forget the paths that are gone, in one transaction.
    pub fn save_input_stats(
        &self,
        stored: &[(String, CachedDigest)],
        gone: &[String],
    ) -> Result<(), HistoryError> {
        if stored.is_empty() && gone.is_empty() {
            return Ok(());
        }
        let tx = self
            .conn
            .unchecked_transaction()
            .map_err(self.err("write the stat cache"))?;
        {
            let mut put = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO input_stats \
                     (path, size, mtime_ns, ctime_ns, ino, dev, mode, sha256, hashed_at_ns) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .map_err(self.err("write the stat cache"))?;
            for (path, e) in stored {
                put.execute(params![
                    path,
                    e.stat.size as i64,
                    e.stat.mtime_ns,
                    e.stat.ctime_ns,
                    e.stat.ino as i64,
                    e.stat.dev as i64,
                    e.stat.mode,
                    e.sha256,
                    e.hashed_at_ns
                ])
                .map_err(self.err("write the stat cache"))?;
            }
            let mut forget = tx
                .prepare_cached("DELETE FROM input_stats WHERE path = ?1")
                .map_err(self.err("write the stat cache"))?;
            for path in gone {
                forget
                    .execute([path])
                    .map_err(self.err("write the stat cache"))?;
            }
        }
        tx.commit().map_err(self.err("write the stat cache"))
    }
}
