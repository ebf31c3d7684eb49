//! A stat cache for input hashing, as git's index is for `git status`: per file, the stat data
//! (size, mtime and ctime in ns, inode, device, mode) and the sha256 of its bytes. A file whose
//! stat data equals the cached entry is not read again. The address stays exactly the same
//! function of the bytes: the cache only skips reading bytes it already hashed.
//!
//! What is trusted: an entry whose stat data matches in every field, and whose file was last
//! changed (mtime and ctime) well before the entry was written. The second half is git's
//! racy-timestamp rule: a file written in the same timestamp tick as its hash could change again
//! without its stat data moving, so such an entry is re-hashed next time (and then trusted).

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub use crate::mesh::file_stat::{CachedDigest, RACY_NS, StatKey, StatSet};

/// What `lstat` said of a file, as the cache compares it.
pub(crate) fn stat_key(meta: &Metadata) -> StatKey {
    StatKey {
        size: meta.size(),
        mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        ctime_ns: meta.ctime() * 1_000_000_000 + meta.ctime_nsec(),
        ino: meta.ino(),
        dev: meta.dev(),
        mode: meta.mode(),
    }
}

/// Now, in ns since the epoch (0 when the clock is before it: every entry then reads as racy).
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Where hashing asks for and leaves digests, keyed by the file's absolute path.
pub trait DigestCache: Sync {
    fn lookup(&self, path: &str, stat: &StatKey) -> Option<String>;
    fn store(&self, path: &str, entry: CachedDigest);
    /// The clock entries are stamped with (tests move it).
    fn now_ns(&self) -> i64 {
        now_ns()
    }
}

/// No cache: every file is read.
pub struct NoCache;

impl DigestCache for NoCache {
    fn lookup(&self, _path: &str, _stat: &StatKey) -> Option<String> {
        None
    }
    fn store(&self, _path: &str, _entry: CachedDigest) {}
}

/// A context's entries, loaded at once, with what one walk changed: entries to write, and the
/// paths it saw (the rest are gone and can be forgotten). A lookup takes no lock and allocates
/// only the digest it answers with (a binary search; it marks its entry seen): a steady plan is
/// thousands of lookups on several threads.
pub struct ContextCache {
    /// Sorted by path.
    known: StatSet,
    seen: Vec<AtomicBool>,
    stored: Mutex<Vec<(String, CachedDigest)>>,
    clock: fn() -> i64,
}

impl Default for ContextCache {
    fn default() -> Self {
        ContextCache::with_clock(StatSet::default(), now_ns)
    }
}

impl ContextCache {
    /// A cache of `known` entries (the tests' way in; the plan loads a `StatSet`).
    #[cfg(test)]
    pub(crate) fn new(known: impl IntoIterator<Item = (String, CachedDigest)>) -> ContextCache {
        ContextCache::with_clock(StatSet::from_entries(known), now_ns)
    }

    /// A cache of the entries as loaded from the state database.
    pub fn of(known: StatSet) -> ContextCache {
        ContextCache::with_clock(known, now_ns)
    }

    /// A cache whose entries are stamped by `clock` (tests: a clock ahead makes entries trusted
    /// at once, so that a property test exercises hits, not only the racy re-reads).
    pub fn with_clock(known: StatSet, clock: fn() -> i64) -> ContextCache {
        let known = known.sorted();
        let seen = (0..known.len()).map(|_| AtomicBool::new(false)).collect();
        ContextCache {
            known,
            seen,
            stored: Mutex::new(Vec::new()),
            clock,
        }
    }

    /// How many files were read (and stored) so far: a test's measure of what the cache spared.
    pub fn stored_count(&self) -> usize {
        self.stored.lock().map(|s| s.len()).unwrap_or(0)
    }

    /// The context's entries after this walk, in path order, when anything changed (None: the
    /// kept entries stand as they are): the known entries the walk saw, replaced by what it read.
    pub fn into_entries(self) -> Option<Vec<(String, CachedDigest)>> {
        let mut stored = self.stored.into_inner().unwrap_or_else(|p| p.into_inner());
        let all_seen = self.seen.iter().all(|k| k.load(Ordering::Relaxed));
        if stored.is_empty() && all_seen {
            return None;
        }
        stored.sort_by(|a, b| a.0.cmp(&b.0));
        let mut entries = Vec::with_capacity(self.known.len() + stored.len());
        let mut stored = stored.into_iter().peekable();
        for (i, seen) in self.seen.into_iter().enumerate() {
            let path = self.known.path(i);
            while let Some(next) = stored.next_if(|(p, _)| p.as_str() < path) {
                entries.push(next);
            }
            if let Some(next) = stored.next_if(|(p, _)| p == path) {
                entries.push(next);
            } else if seen.into_inner() {
                entries.push((path.to_string(), self.known.digest(i)));
            }
        }
        entries.extend(stored);
        Some(entries)
    }
}

impl DigestCache for ContextCache {
    fn lookup(&self, path: &str, stat: &StatKey) -> Option<String> {
        let i = self.known.find(path)?;
        self.seen[i].store(true, Ordering::Relaxed);
        self.known.answer(i, stat)
    }

    fn now_ns(&self) -> i64 {
        (self.clock)()
    }

    fn store(&self, path: &str, entry: CachedDigest) {
        // An entry that only moves out of its racy window is written once more; one that is
        // already trusted and unchanged is not written at all.
        if self
            .known
            .find(path)
            .is_some_and(|i| self.known.is(i, &entry))
        {
            return;
        }
        if let Ok(mut stored) = self.stored.lock() {
            stored.push((path.to_string(), entry));
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A digest of 64 hex digits from two (the cache keeps digests as their bytes).
    fn hex64(two: &str) -> String {
        two.repeat(32)
    }

    fn stat(mtime_ns: i64) -> StatKey {
        StatKey {
            size: 3,
            mtime_ns,
            ctime_ns: mtime_ns,
            ino: 7,
            dev: 1,
            mode: 0o100644,
        }
    }

    #[test]
    fn an_entry_answers_only_for_the_same_stat_data_outside_the_racy_window() {
        let now = 100 * RACY_NS;
        let entry = CachedDigest {
            stat: stat(now - 3 * RACY_NS),
            sha256: hex64("aa"),
            hashed_at_ns: now,
        };
        assert!(entry.answers(&stat(now - 3 * RACY_NS)));
        assert!(!entry.answers(&stat(now - 3 * RACY_NS + 1)), "mtime moved");
        let mut other_inode = stat(now - 3 * RACY_NS);
        other_inode.ino = 8;
        assert!(!entry.answers(&other_inode), "replaced by rename");
        let racy = CachedDigest {
            stat: stat(now - 1),
            ..entry.clone()
        };
        assert!(
            !racy.answers(&stat(now - 1)),
            "written in the same tick as hashed"
        );
    }

    #[test]
    fn a_context_cache_writes_back_what_changed_and_forgets_what_is_gone() {
        let now = 100 * RACY_NS;
        let old = CachedDigest {
            stat: stat(1),
            sha256: hex64("aa"),
            hashed_at_ns: now,
        };
        let cache = ContextCache::new(HashMap::from([
            ("/c/kept".to_string(), old.clone()),
            ("/c/gone".to_string(), old.clone()),
        ]));
        assert_eq!(cache.lookup("/c/kept", &stat(1)), Some(hex64("aa")));
        cache.store("/c/kept", old.clone());
        assert_eq!(cache.lookup("/c/new", &stat(2)), None);
        let new = CachedDigest {
            stat: stat(2),
            sha256: hex64("bb"),
            hashed_at_ns: now,
        };
        cache.store("/c/new", new.clone());
        // What is written back: what the walk saw, with what it read; the path it did not see is
        // forgotten.
        assert_eq!(
            cache.into_entries(),
            Some(vec![
                ("/c/kept".to_string(), old),
                ("/c/new".to_string(), new)
            ])
        );
    }

    #[test]
    fn the_entries_kept_are_what_the_walk_saw_with_what_it_read() {
        let entry = |sha: &str, mtime| CachedDigest {
            stat: stat(mtime),
            sha256: hex64(sha),
            hashed_at_ns: 100 * RACY_NS,
        };
        let known = vec![
            ("/c/a".to_string(), entry("aa", 1)),
            ("/c/c".to_string(), entry("cc", 1)),
            ("/c/e".to_string(), entry("ee", 1)),
        ];
        let cache = ContextCache::new(known.clone());
        for path in ["/c/a", "/c/c", "/c/e"] {
            assert!(cache.lookup(path, &stat(1)).is_some());
        }
        assert_eq!(cache.into_entries(), None, "nothing changed");

        let cache = ContextCache::new(known);
        assert!(cache.lookup("/c/a", &stat(1)).is_some());
        assert_eq!(cache.lookup("/c/c", &stat(2)), None, "changed");
        cache.store("/c/c", entry("c2", 2));
        cache.store("/c/d", entry("dd", 1));
        cache.store("/c/b", entry("bb", 1));
        // /c/e was not seen: gone.
        let paths: Vec<(String, String)> = cache
            .into_entries()
            .unwrap()
            .into_iter()
            .map(|(p, e)| (p, e.sha256))
            .collect();
        let want = [
            ("/c/a", "aa"),
            ("/c/b", "bb"),
            ("/c/c", "c2"),
            ("/c/d", "dd"),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(p, s)| (p.to_string(), hex64(s)))
            .collect();
        assert_eq!(paths, want);
    }
}
