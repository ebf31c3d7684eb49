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
        self.stat == *stat
            && stat.mtime_ns < self.hashed_at_ns - RACY_NS
            && stat.ctime_ns < self.hashed_at_ns - RACY_NS
    }
}
