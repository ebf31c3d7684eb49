//! A file's stat data and the hash cached under it (the stat cache's entries, as git's index
//! holds them), and the rule that says when an entry still answers for its file. Pure data: the
//! disk is read in `crate::workspace::stat_cache`, the entries are stored in `backends::state`.

/// An entry written less than this after its file's last change is re-hashed: wider than the
/// coarsest timestamp tick of a filesystem meshtop may read (1 s on some, 2 s on FAT).
pub const RACY_NS: i64 = 2_000_000_000;

/// What `lstat` says of a file, as compared between two looks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatKey {
    pub size: u64,
    pub mtime_ns: i64,
    pub ctime_ns: i64,
    pub ino: u64,
    pub dev: u64,
    pub mode: u32,
}

/// One cached hash: the stat data it was taken under, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CachedDigest {
    pub stat: StatKey,
    pub sha256: String,
    /// When the bytes were read (ns since the epoch), taken before reading them.
    pub hashed_at_ns: i64,
}

impl CachedDigest {
    /// Whether this entry answers for a file whose stat data is now `stat`.
    pub fn answers(&self, stat: &StatKey) -> bool {
        answers(&self.stat, self.hashed_at_ns, stat)
    }
}

/// Whether a hash taken at `hashed_at_ns` of a file whose stat data was `cached` answers for it
/// now that its stat data is `now`: the same in every field, and changed well before the hash
/// (git's racy-timestamp rule).
fn answers(cached: &StatKey, hashed_at_ns: i64, now: &StatKey) -> bool {
    cached == now && now.mtime_ns < hashed_at_ns - RACY_NS && now.ctime_ns < hashed_at_ns - RACY_NS
}

/// One context's cached entries as loaded for a plan: every path in one buffer and each entry's
/// fixed part (the sha256 as its 32 bytes), sorted by path. A steady plan looks up thousands of
/// entries and changes none: loading them allocates twice, not twice per file, and an entry
/// becomes a [`CachedDigest`] only when it is asked for or written back.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StatSet {
    paths: String,
    entries: Vec<StatEntry>,
}

/// An entry of a [`StatSet`]: its path's span in the set's buffer, and what was cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StatEntry {
    start: usize,
    end: usize,
    stat: StatKey,
    hashed_at_ns: i64,
    sha256: [u8; 32],
}

impl StatSet {
    /// An empty set with room for `entries` entries whose paths total `path_bytes` bytes.
    pub fn with_capacity(entries: usize, path_bytes: usize) -> StatSet {
        StatSet {
            paths: String::with_capacity(path_bytes),
            entries: Vec::with_capacity(entries),
        }
    }

    /// Add an entry (in any order: [`StatSet::sorted`] puts them in path order).
    pub fn push(&mut self, path: &str, stat: StatKey, hashed_at_ns: i64, sha256: [u8; 32]) {
        let start = self.paths.len();
        self.paths.push_str(path);
        self.entries.push(StatEntry {
            start,
            end: self.paths.len(),
            stat,
            hashed_at_ns,
            sha256,
        });
    }

    /// The set in path order, one entry per path (the first kept).
    pub fn sorted(mut self) -> StatSet {
        let paths = &self.paths;
        let path = |e: &StatEntry| &paths[e.start..e.end];
        if !self.entries.is_sorted_by(|a, b| path(a) < path(b)) {
            self.entries.sort_by(|a, b| path(a).cmp(path(b)));
            self.entries.dedup_by(|a, b| path(a) == path(b));
        }
        self
    }

    /// Entries as [`CachedDigest`]s keep them (an entry whose digest is not 64 hex digits is
    /// left out), in path order.
    pub fn from_entries(entries: impl IntoIterator<Item = (String, CachedDigest)>) -> StatSet {
        let mut set = StatSet::default();
        for (path, entry) in entries {
            let mut sha = [0u8; 32];
            if hex::decode_to_slice(&entry.sha256, &mut sha).is_ok() {
                set.push(&path, entry.stat, entry.hashed_at_ns, sha);
            }
        }
        set.sorted()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The path of entry `i`.
    pub fn path(&self, i: usize) -> &str {
        let e = &self.entries[i];
        &self.paths[e.start..e.end]
    }

    /// Where `path`'s entry is.
    pub fn find(&self, path: &str) -> Option<usize> {
        self.entries
            .binary_search_by(|e| self.paths[e.start..e.end].cmp(path))
            .ok()
    }

    /// Entry `i`'s sha256 (lowercase hex) when it answers for a file whose stat data is `now`.
    pub fn answer(&self, i: usize, now: &StatKey) -> Option<String> {
        let e = &self.entries[i];
        answers(&e.stat, e.hashed_at_ns, now).then(|| lower_hex(&e.sha256))
    }

    /// Whether entry `i` is `entry` (its digest compared as bytes).
    pub fn is(&self, i: usize, entry: &CachedDigest) -> bool {
        let e = &self.entries[i];
        let mut sha = [0u8; 32];
        e.stat == entry.stat
            && e.hashed_at_ns == entry.hashed_at_ns
            && hex::decode_to_slice(&entry.sha256, &mut sha).is_ok()
            && sha == e.sha256
    }

    /// Entry `i` as a [`CachedDigest`].
    pub fn digest(&self, i: usize) -> CachedDigest {
        let e = &self.entries[i];
        CachedDigest {
            stat: e.stat,
            sha256: lower_hex(&e.sha256),
            hashed_at_ns: e.hashed_at_ns,
        }
    }

    /// Every entry, in path order.
    pub fn to_entries(&self) -> Vec<(String, CachedDigest)> {
        (0..self.len())
            .map(|i| (self.path(i).to_string(), self.digest(i)))
            .collect()
    }
}

/// Lowercase hex, as `hex::encode` writes it (without its per-character iterator: this runs for
/// every file of every context on every plan).
pub fn lower_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 15)]);
    }
    // ASCII by construction (the check is the fast ASCII path: pushing chars cost four times it).
    String::from_utf8(out).unwrap_or_default()
}
