//! What a module's address is computed from, entry by entry, and the digest over it.
//!
//! The digest is sha256 over a canonical, versioned encoding ([`ENCODING`]): every field is written
//! as its length (u64, little-endian) then its bytes, in this order: the encoding name; per entry in
//! path order a tag (`F` file, `L` symlink, `D` directory), the relative path (`/`-separated), then
//! for a file its permission bits (`mode & 0o7777` as 4 octal digits, kept in the image as `docker
//! build` keeps them) and its content sha256, for a link its target, for a directory its
//! permission bits (as for a file); `dockerfile` and the
//! Dockerfile's sha256; `args`, their count and each name and value in name order; `base` and the
//! base digest or `-`; `platforms`, their count and each sorted platform; then, only when the
//! Dockerfile names upstream images, `upstreams`, their count and each image (as written, after
//! substitution) and its locked digest in name order (`mesh.lock`: a moved lock moves the ref, and a
//! module without upstreams keeps the digest it always had); then, only when the module names one,
//! `target` and the Dockerfile stage it builds (a module without `target` keeps its digest too). No
//! mtimes, owners or walk order: the same tree gives the same digest anywhere.
//!
//! v3 (this one) added the permission bits of directories (v2 sent every directory as 0755, so a
//! 0700 directory became world-readable in the image); v2 added the permission bits of files; v1
//! had only the owner's x bit (`X`/`F`). Every ref moved once with each.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The name and version of the canonical encoding hashed into every digest.
pub(crate) const ENCODING: &str = "meshtop-inputs/v3";
/// Per-entry record of the inputs, kept with each successful build to tell the *why* of a new address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Relative `/`-separated path → entry, for everything sent. Shared with the walk it came
    /// from: a plan decides each module from its walk without copying thousands of entries.
    pub files: Arc<BTreeMap<String, FileEntry>>,
    /// sha256 hex of the Dockerfile's bytes.
    pub dockerfile: String,
    pub build_args: BTreeMap<String, String>,
    pub base: Option<String>,
    /// Sorted, deduplicated platform strings (`linux/amd64`).
    pub platforms: Vec<String>,
    /// Each upstream image the Dockerfile names → the digest `mesh.lock` holds for it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub upstreams: BTreeMap<String, String>,
    /// Each named context (the name the Dockerfile writes) → its module's artifact.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub contexts: BTreeMap<String, String>,
    /// The Dockerfile stage built (`target`); `None`: the last stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StoredEntry")]
pub enum FileEntry {
    File {
        sha256: String,
        /// Permission bits (`mode & 0o7777`), sent to the builder and kept in the image.
        #[serde(default)]
        mode: u32,
    },
    Link {
        target: String,
    },
    Dir {
        /// Permission bits (`mode & 0o7777`), sent to the builder and kept in the image.
        mode: u32,
    },
}

/// The mode every directory was sent with before `meshtop-inputs/v3`.
pub(crate) const V2_DIR_MODE: u32 = 0o755;

/// A manifest entry as stored: today's form, or a directory saved before v3 (the bare `"Dir"`).
#[derive(Deserialize)]
#[serde(untagged)]
enum StoredEntry {
    Current(CurrentEntry),
    Legacy(LegacyEntry),
}

#[derive(Deserialize)]
enum CurrentEntry {
    File {
        sha256: String,
        #[serde(default)]
        mode: u32,
    },
    Link {
        target: String,
    },
    Dir {
        mode: u32,
    },
}

#[derive(Deserialize)]
enum LegacyEntry {
    Dir,
}

impl From<StoredEntry> for FileEntry {
    fn from(stored: StoredEntry) -> FileEntry {
        match stored {
            StoredEntry::Current(CurrentEntry::File { sha256, mode }) => {
                FileEntry::File { sha256, mode }
            }
            StoredEntry::Current(CurrentEntry::Link { target }) => FileEntry::Link { target },
            StoredEntry::Current(CurrentEntry::Dir { mode }) => FileEntry::Dir { mode },
            StoredEntry::Legacy(LegacyEntry::Dir) => FileEntry::Dir { mode: V2_DIR_MODE },
        }
    }
}

/// The digest of a manifest: sha256 over the canonical encoding described in the module docs.
pub fn digest_of(manifest: &Manifest) -> String {
    digest_with_base(manifest, manifest.base.as_deref())
}

fn digest_with_base(manifest: &Manifest, base: Option<&str>) -> String {
    let mut h = Sha256::new();
    let mut field = |bytes: &[u8]| {
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    field(ENCODING.as_bytes());
    for (path, entry) in manifest.files.iter() {
        match entry {
            FileEntry::File { sha256, mode } => {
                field(b"F");
                field(path.as_bytes());
                field(&octal4(*mode));
                field(sha256.as_bytes());
            }
            FileEntry::Link { target } => {
                field(b"L");
                field(path.as_bytes());
                field(target.as_bytes());
            }
            FileEntry::Dir { mode } => {
                field(b"D");
                field(path.as_bytes());
                field(format!("{:04o}", mode & 0o7777).as_bytes());
            }
        }
    }
    field(b"dockerfile");
    field(manifest.dockerfile.as_bytes());
    field(b"args");
    field(&(manifest.build_args.len() as u64).to_le_bytes());
    for (name, value) in &manifest.build_args {
        field(name.as_bytes());
        field(value.as_bytes());
    }
    field(b"base");
    field(base.unwrap_or("-").as_bytes());
    field(b"platforms");
    field(&(manifest.platforms.len() as u64).to_le_bytes());
    for platform in &manifest.platforms {
        field(platform.as_bytes());
    }
    if !manifest.upstreams.is_empty() {
        field(b"upstreams");
        field(&(manifest.upstreams.len() as u64).to_le_bytes());
        for (image, digest) in &manifest.upstreams {
            field(image.as_bytes());
            field(digest.as_bytes());
        }
    }
    // Hashed only when there is one: a module without named contexts keeps the ref it had.
    if !manifest.contexts.is_empty() {
        field(b"contexts");
        field(&(manifest.contexts.len() as u64).to_le_bytes());
        for (name, artifact) in &manifest.contexts {
            field(name.as_bytes());
            field(artifact.as_bytes());
        }
    }
    if let Some(target) = &manifest.target {
        field(b"target");
        field(target.as_bytes());
    }
    hex::encode(h.finalize())
}

/// The digest of a module's own inputs: its files, Dockerfile, args and platforms, without its
/// base's artifact (a pin holds across a base that moved: `mesh::pin`).
pub fn own_digest(manifest: &Manifest) -> String {
    digest_with_base(manifest, None)
}

/// `mode & 0o7777` as 4 octal digits (`format!("{:04o}")` without allocating: once per file).
fn octal4(mode: u32) -> [u8; 4] {
    let digit = |shift: u32| b'0' + ((mode >> shift) & 7) as u8;
    [digit(9), digit(6), digit(3), digit(0)]
}

/// A module's inputs: the digest (64 lowercase hex) and the manifest it was computed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inputs {
    pub digest: String,
    pub manifest: Manifest,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn octal4_writes_what_format_writes() {
        for mode in [0, 0o7, 0o644, 0o755, 0o4755, 0o7777, 0o100644, 0o120777] {
            let want = format!("{:04o}", mode & 0o7777);
            assert_eq!(octal4(mode), want.as_bytes(), "mode {mode:o}");
        }
    }
}
