//! The inputs of a module: exactly what is sent to the builder, walked, hashed and tarred.
//!
//! One walk lists the context minus `.dockerignore` (Docker's semantics, see [`super::ignore`]);
//! [`hash_inputs`] hashes its files in parallel; [`tar_inputs`] streams the same walk as a tar
//! while hashing the very bytes it writes, so the bytes sent are the bytes hashed.
//!
//! The address is [`crate::mesh::manifest::digest_of`] over the manifest this walk fills.
//! Long: the walk, the hashing and the tar share one entry list and must stay byte-for-byte the same; the stat cache is apart.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;
use sha2::{Digest, Sha256};

use super::ignore::{DockerIgnore, IgnoreError, MatchInfo, clean};
use super::stat_cache::{CachedDigest, DigestCache, NoCache, StatKey, stat_key};
pub use crate::mesh::manifest::Inputs;
use crate::mesh::manifest::{FileEntry, Manifest, digest_of};
use crate::mesh::model::Platform;
use crate::mesh::sent::{SentContext, SentDockerfile, SentEntry, SentKind, walk_order};
use crate::mesh::why;

/// Files are read in chunks of this size (never loaded whole).
const CHUNK: usize = 256 * 1024;

/// What a module's address is computed from.
#[derive(Debug, Clone, Copy)]
pub struct InputSpec<'a> {
    /// The build context directory.
    pub context: &'a Path,
    /// The Dockerfile, relative to the context.
    pub dockerfile: &'a str,
    pub build_args: &'a BTreeMap<String, String>,
    /// The base module's artifact digest, if the module has a base.
    pub base_digest: Option<&'a str>,
    pub platforms: &'a [Platform],
    /// Each upstream image the Dockerfile names → its digest in `mesh.lock`: part of the address,
    /// and what the Dockerfile sent to the builder is pinned to ([`NO_UPSTREAMS`] for none).
    pub upstreams: &'a BTreeMap<String, String>,
    /// The Dockerfile stage built (`target`); `None`: the last stage (and no part of the address).
    pub target: Option<&'a str>,
    /// Each named context (the name the Dockerfile writes) → its module's artifact: part of the
    /// address ([`NO_CONTEXTS`] for none).
    pub contexts: &'a BTreeMap<String, String>,
    /// Each named context → the image name the builder reaches that artifact by, written into
    /// the Dockerfile sent (empty when planning: only a build sends a Dockerfile).
    pub context_images: &'a BTreeMap<String, String>,
}

/// A Dockerfile that names no named context.
pub static NO_CONTEXTS: BTreeMap<String, String> = BTreeMap::new();

/// A Dockerfile that names no upstream image.
pub static NO_UPSTREAMS: BTreeMap<String, String> = BTreeMap::new();

#[derive(Debug, thiserror::Error)]
pub enum InputsError {
    #[error("cannot read {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: the name is not valid UTF-8; rename it or exclude it in .dockerignore", path.display())]
    NotUtf8 { path: PathBuf },
    #[error("{} is a {kind}: only files, directories and symlinks can be sent to the builder; exclude it in .dockerignore", path.display())]
    Unsupported { path: PathBuf, kind: &'static str },
    #[error("Dockerfile {path:?}: {message}")]
    Dockerfile { path: String, message: String },
    #[error("{}: {source}", path.display())]
    Ignore { path: PathBuf, source: IgnoreError },
    #[error(
        "the build context changed since it was planned ({detail}); the build was stopped so that no image is made under a stale address: plan again"
    )]
    Changed { files: Vec<String>, detail: String },
    #[error("cannot write the build context's tar: {0}")]
    Write(io::Error),
}

#[derive(Debug)]
enum Kind {
    /// `len` as the walk saw it: hashing sizes its buffer by it without asking again.
    File {
        /// Permission bits (`mode & 0o7777`), as `docker build` sends them.
        mode: u32,
        len: u64,
        /// The stat data the walk saw, for the digest cache.
        stat: StatKey,
    },
    Link {
        target: String,
    },
    Dir {
        /// Permission bits (`mode & 0o7777`), as `docker build` sends them.
        mode: u32,
    },
}

#[derive(Debug)]
struct Entry {
    rel: String,
    abs: PathBuf,
    kind: Kind,
}

/// From this many entries on, a context's files are hashed in parallel.
const PARALLEL_FROM: usize = 32;

/// The walk and the Dockerfile, shared by hashing and tarring.
struct Prepared {
    entries: Vec<Entry>,
    dockerfile_rel: String,
    dockerfile_sha: String,
}

/// Walks the context (its `.dockerignore` applied) and hashes every file (in parallel).
pub fn hash_inputs(spec: &InputSpec) -> Result<Inputs, InputsError> {
    hash_inputs_cached(spec, &NoCache)
}

/// [`hash_inputs`], reading only the files whose stat data `cache` does not answer for (see
/// [`super::stat_cache`]); every file it reads is left in the cache.
pub fn hash_inputs_cached(
    spec: &InputSpec,
    cache: &dyn DigestCache,
) -> Result<Inputs, InputsError> {
    let walked = walk_cached(spec.context, spec.dockerfile, cache)?;
    Ok(inputs_of(spec, walked))
}

/// What one walk of a context found: every entry sent to the builder with its digest, and the
/// Dockerfile's digest. The part of a module's inputs that lives on disk (the address adds the
/// build args, the base's artifact and the platforms: [`inputs_of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walked {
    /// Shared with the manifests made of it (a walk is decided from again without a copy).
    pub files: Arc<BTreeMap<String, FileEntry>>,
    pub dockerfile: String,
}

/// The inputs of `spec` whose context was walked into `walked`.
pub fn inputs_of(spec: &InputSpec, walked: Walked) -> Inputs {
    finish(spec, walked.files, walked.dockerfile)
}

/// Walks `context` (its `.dockerignore` applied) and hashes every file through `cache`.
pub fn walk_cached(
    context: &Path,
    dockerfile: &str,
    cache: &dyn DigestCache,
) -> Result<Walked, InputsError> {
    let prepared = prepare(context, dockerfile, cache)?;
    let files = hash_prepared(&prepared, cache)?;
    Ok(Walked {
        files: Arc::new(files),
        dockerfile: prepared.dockerfile_sha,
    })
}

/// Every entry of a walk with its digest: what the cache answers for is looked up in order (a
/// binary search each); only the files it does not answer for are read, side by side when there
/// are enough of them. A steady plan then wakes no thread per context.
fn hash_prepared(
    prepared: &Prepared,
    cache: &dyn DigestCache,
) -> Result<BTreeMap<String, FileEntry>, InputsError> {
    let mut files: Vec<(String, FileEntry)> = Vec::with_capacity(prepared.entries.len());
    let mut to_read: Vec<(usize, &Path, u64, StatKey)> = Vec::new();
    for e in &prepared.entries {
        let entry = match &e.kind {
            Kind::File { mode, len, stat } => {
                // The Dockerfile was hashed already (it is usually a file of the context too).
                let known = if e.rel == prepared.dockerfile_rel {
                    Some(prepared.dockerfile_sha.clone())
                } else {
                    e.abs.to_str().and_then(|key| cache.lookup(key, stat))
                };
                let sha256 = known.unwrap_or_else(|| {
                    to_read.push((files.len(), &e.abs, *len, *stat));
                    String::new()
                });
                FileEntry::File {
                    sha256,
                    mode: *mode,
                }
            }
            Kind::Link { target } => FileEntry::Link {
                target: target.clone(),
            },
            Kind::Dir { mode } => FileEntry::Dir { mode: *mode },
        };
        files.push((e.rel.clone(), entry));
    }
    let read = |(at, abs, len, stat): &(usize, &Path, u64, StatKey)| {
        read_through(cache, abs, *len, stat).map(|sha| (*at, sha))
    };
    // A few files are read on this thread: waking the pool costs more than it saves.
    let read: Vec<(usize, String)> = if to_read.len() < PARALLEL_FROM {
        to_read
            .iter()
            .map(read)
            .collect::<Result<_, InputsError>>()?
    } else {
        to_read
            .par_iter()
            .map(read)
            .collect::<Result<_, InputsError>>()?
    };
    for (at, sha) in read {
        if let Some((_, FileEntry::File { sha256, .. })) = files.get_mut(at) {
            *sha256 = sha;
        }
    }
    // Sorted already: collecting into the map appends at its end.
    Ok(files.into_iter().collect())
}

/// The context as the build's session serves it ([`SentContext`]): walked through `cache` as the
/// plan walked it and checked against the plan (`expected`) before anything is served, so a
/// context that changed since is refused as a tar would be. The bytes BuildKit then asks for are
/// hashed again as they are served, against the digests here. The Dockerfile is served pinned
/// (see [`Pinning`]), under a name that carries its digest.
pub fn sent_context(
    spec: &InputSpec,
    expected: Option<&Inputs>,
    cache: &dyn DigestCache,
    cache_key: String,
) -> Result<SentContext, InputsError> {
    let prepared = prepare(spec.context, spec.dockerfile, cache)?;
    let files = hash_prepared(&prepared, cache)?;
    let mut entries = Vec::with_capacity(prepared.entries.len());
    for e in &prepared.entries {
        let kind = match (&e.kind, files.get(&e.rel)) {
            (Kind::File { mode, len, stat }, Some(FileEntry::File { sha256, .. })) => {
                SentKind::File {
                    mode: *mode,
                    size: *len,
                    mtime_ns: stat.mtime_ns,
                    source: e.abs.clone(),
                    sha256: sha256.clone(),
                }
            }
            (Kind::Link { target }, _) => SentKind::Link {
                target: target.clone(),
            },
            (Kind::Dir { mode }, _) => SentKind::Dir { mode: *mode },
            (Kind::File { .. }, _) => continue,
        };
        entries.push(SentEntry {
            path: e.rel.clone(),
            kind,
        });
    }
    entries.sort_by(|a, b| walk_order(&a.path, &b.path));
    let dockerfile = sent_dockerfile(spec, &prepared)?;
    let inputs = finish(spec, Arc::new(files), prepared.dockerfile_sha);
    if let Some(expected) = expected
        && expected.digest != inputs.digest
    {
        let changes = why::why(Some(&expected.manifest), &inputs.manifest);
        return Err(InputsError::Changed {
            files: why::changed_paths(&changes),
            detail: why::describe(&changes),
        });
    }
    Ok(SentContext {
        entries,
        dockerfile,
        cache_key,
    })
}

/// The key BuildKit keeps `context`'s last copy under, on the machine `host`, with the state
/// file's `secret`: its real path, so that the same directory reached by two paths is one context
/// ([`crate::mesh::sent::cache_key`]).
pub fn context_cache_key(context: &Path, host: &[u8], secret: &[u8]) -> String {
    let dir = fs::canonicalize(context).unwrap_or_else(|_| context.to_path_buf());
    crate::mesh::sent::cache_key(host, dir.as_os_str().as_encoded_bytes(), secret)
}

/// The Dockerfile as the session serves it: the bytes hashed by the walk, pinned.
fn sent_dockerfile(spec: &InputSpec, prepared: &Prepared) -> Result<SentDockerfile, InputsError> {
    let path = spec.context.join(&prepared.dockerfile_rel);
    let bytes = fs::read(&path).map_err(io_err(&path))?;
    if hex::encode(Sha256::digest(&bytes)) != prepared.dockerfile_sha {
        return Err(InputsError::Changed {
            files: vec![prepared.dockerfile_rel.clone()],
            detail: format!("{} changed while it was read", prepared.dockerfile_rel),
        });
    }
    let mode = prepared
        .entries
        .iter()
        .find_map(|e| match &e.kind {
            Kind::File { mode, .. } if e.rel == prepared.dockerfile_rel => Some(*mode),
            _ => None,
        })
        .unwrap_or(0o644);
    let bytes = Pinning::of(spec).pinned(&bytes).unwrap_or(bytes);
    Ok(SentDockerfile::new(&prepared.dockerfile_rel, bytes, mode))
}

/// Walks once: for each file, reads the bytes, hashes them AND appends them to the tar written to `sink`;
/// returns the Inputs of what was written. If `expected` is Some and its digest differs, returns
/// [`InputsError::Changed`] naming which file(s) differ from the plan (so a build never runs under a stale
/// address). On any error the tar is left unfinished (no end-of-archive blocks): discard what was written.
pub fn tar_inputs<W: Write>(
    spec: &InputSpec,
    expected: Option<&Inputs>,
    sink: W,
) -> Result<Inputs, InputsError> {
    // What is sent is hashed from the bytes sent: no cache answers for them.
    let prepared = prepare(spec.context, spec.dockerfile, &NoCache)?;
    let mut builder = tar::Builder::new(Guard {
        inner: sink,
        poisoned: false,
    });
    match write_tar(&mut builder, &prepared, &Pinning::of(spec)) {
        Ok(files) => {
            let inputs = finish(spec, Arc::new(files), prepared.dockerfile_sha);
            let dockerfile_sent = match inputs.manifest.files.get(&prepared.dockerfile_rel) {
                Some(FileEntry::File { sha256, .. }) => Some(sha256.as_str()),
                _ => None,
            };
            if dockerfile_sent.is_some_and(|sent| sent != inputs.manifest.dockerfile) {
                builder.get_mut().poisoned = true;
                return Err(InputsError::Changed {
                    files: vec![prepared.dockerfile_rel.clone()],
                    detail: format!("{} changed while it was read", prepared.dockerfile_rel),
                });
            }
            if let Some(expected) = expected
                && expected.digest != inputs.digest
            {
                builder.get_mut().poisoned = true;
                let changes = why::why(Some(&expected.manifest), &inputs.manifest);
                return Err(InputsError::Changed {
                    files: why::changed_paths(&changes),
                    detail: why::describe(&changes),
                });
            }
            builder.finish().map_err(InputsError::Write)?;
            Ok(inputs)
        }
        Err(e) => {
            builder.get_mut().poisoned = true;
            Err(e)
        }
    }
}

fn finish(
    spec: &InputSpec,
    files: Arc<BTreeMap<String, FileEntry>>,
    dockerfile_sha: String,
) -> Inputs {
    let mut platforms: Vec<String> = spec.platforms.iter().map(|p| p.to_string()).collect();
    platforms.sort();
    platforms.dedup();
    let manifest = Manifest {
        files,
        dockerfile: dockerfile_sha,
        build_args: spec.build_args.clone(),
        base: spec.base_digest.map(str::to_string),
        platforms,
        upstreams: spec.upstreams.clone(),
        target: spec.target.map(str::to_string),
        contexts: spec.contexts.clone(),
    };
    Inputs {
        digest: digest_of(&manifest),
        manifest,
    }
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> InputsError + '_ {
    move |source| InputsError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The Dockerfile found and hashed (through `cache`, as every other file of the context), the
/// `.dockerignore` read, and the context listed.
fn prepare(
    context: &Path,
    dockerfile: &str,
    cache: &dyn DigestCache,
) -> Result<Prepared, InputsError> {
    let dockerfile_rel = dockerfile_path(dockerfile)?;
    let dockerfile_abs = context.join(&dockerfile_rel);
    // `dockerfile_rel` only goes down (cleaned, no `..`): unless a symlink is on the way, it is inside.
    let resolved = match super::realpath::resolve_below(context, Path::new(&dockerfile_rel)) {
        Ok(resolved) => resolved,
        Err(e) => {
            // Say what is wrong with the context itself before blaming its Dockerfile.
            let meta = fs::metadata(context).map_err(io_err(context))?;
            if !meta.is_dir() {
                return Err(InputsError::Io {
                    path: context.to_path_buf(),
                    source: io::Error::other("the build context is not a directory"),
                });
            }
            return Err(InputsError::Dockerfile {
                path: dockerfile.to_string(),
                message: format!("cannot read {}: {e}", dockerfile_abs.display()),
            });
        }
    };
    let inside = resolved.path == dockerfile_abs
        || resolved
            .path
            .starts_with(fs::canonicalize(context).map_err(io_err(context))?);
    if !inside {
        return Err(InputsError::Dockerfile {
            path: dockerfile.to_string(),
            message:
                "it resolves outside the build context; keep the Dockerfile inside the context"
                    .into(),
        });
    }
    let dockerfile_sha = hash_through(
        cache,
        &resolved.path,
        resolved.meta.len(),
        &stat_key(&resolved.meta),
    )?;

    let ignore_path = context.join(".dockerignore");
    let with_path = |source| InputsError::Ignore {
        path: ignore_path.clone(),
        source,
    };
    let mut ignore = DockerIgnore::load(context).map_err(with_path)?;
    ignore.always_send(".dockerignore").map_err(with_path)?;
    ignore.always_send(&dockerfile_rel).map_err(with_path)?;

    let mut entries = Vec::new();
    walk(context, "", &ignore, &MatchInfo::default(), &mut entries)?;
    entries.sort_by(|a, b| a.rel.cmp(&b.rel));
    Ok(Prepared {
        entries,
        dockerfile_rel,
        dockerfile_sha,
    })
}

fn dockerfile_path(dockerfile: &str) -> Result<String, InputsError> {
    let bad = |message: &str| InputsError::Dockerfile {
        path: dockerfile.to_string(),
        message: message.into(),
    };
    if dockerfile.trim().is_empty() {
        return Err(bad(
            "the path is empty; name the Dockerfile relative to the context",
        ));
    }
    if dockerfile.starts_with('/') {
        return Err(bad("the path is absolute; name it relative to the context"));
    }
    let rel = clean(dockerfile);
    if rel == "." || rel == ".." || rel.starts_with("../") {
        return Err(bad(
            "the path leaves the build context; keep the Dockerfile inside the context",
        ));
    }
    Ok(rel)
}

/// Lists `dir` (relative path `rel`, empty for the root) into `out`, minus exclusions. An excluded
/// directory is entered only when an exception may re-include something below it, and is then sent
/// only if something below it is (as BuildKit sends the parents of what it sends).
fn walk(
    dir: &Path,
    rel: &str,
    ignore: &DockerIgnore,
    parent: &MatchInfo,
    out: &mut Vec<Entry>,
) -> Result<(), InputsError> {
    for item in fs::read_dir(dir).map_err(io_err(dir))? {
        let item = item.map_err(io_err(dir))?;
        let abs = item.path();
        // The name as the path holds it (`DirEntry::file_name` would copy it once more).
        let Some(name) = abs.file_name().and_then(|n| n.to_str()) else {
            return Err(InputsError::NotUtf8 { path: abs });
        };
        let mut child = String::with_capacity(rel.len() + 1 + name.len());
        if !rel.is_empty() {
            child.push_str(rel);
            child.push('/');
        }
        child.push_str(name);
        let (excluded, info) = ignore.matches_with_parent(&child, parent);
        let file_type = item.file_type().map_err(io_err(&abs))?;
        if file_type.is_dir() {
            if excluded && !ignore.may_reinclude_under(&child) {
                continue;
            }
            let mode = fs::symlink_metadata(&abs)
                .map_err(io_err(&abs))?
                .permissions()
                .mode()
                & 0o7777;
            let start = out.len();
            walk(&abs, &child, ignore, &info, out)?;
            if !excluded || out.len() > start {
                out.push(Entry {
                    rel: child,
                    abs,
                    kind: Kind::Dir { mode },
                });
            }
            continue;
        }
        if excluded {
            continue;
        }
        let kind = if file_type.is_file() {
            // From the directory's own handle (`fstatat`): no walk of the whole path per file.
            let meta = item.metadata().map_err(io_err(&abs))?;
            Kind::File {
                mode: meta.permissions().mode() & 0o7777,
                len: meta.len(),
                stat: stat_key(&meta),
            }
        } else if file_type.is_symlink() {
            let target = fs::read_link(&abs).map_err(io_err(&abs))?;
            let Some(target) = target.to_str() else {
                return Err(InputsError::NotUtf8 { path: abs });
            };
            Kind::Link {
                target: target.to_string(),
            }
        } else {
            let kind = if file_type.is_socket() {
                "socket"
            } else if file_type.is_fifo() {
                "named pipe"
            } else if file_type.is_block_device() || file_type.is_char_device() {
                "device"
            } else {
                "special file"
            };
            return Err(InputsError::Unsupported { path: abs, kind });
        };
        out.push(Entry {
            rel: child,
            abs,
            kind,
        });
    }
    Ok(())
}

/// A file's sha256 from the cache when its stat data is answered for, else read (and cached).
fn hash_through(
    cache: &dyn DigestCache,
    path: &Path,
    len: u64,
    stat: &StatKey,
) -> Result<String, InputsError> {
    match path.to_str().and_then(|key| cache.lookup(key, stat)) {
        Some(sha256) => Ok(sha256),
        None => read_through(cache, path, len, stat),
    }
}

/// A file's sha256 read from its bytes, and left in the cache. The time is taken before the
/// read: a change during the read leaves the entry racy.
fn read_through(
    cache: &dyn DigestCache,
    path: &Path,
    len: u64,
    stat: &StatKey,
) -> Result<String, InputsError> {
    // A path that is not UTF-8 (only the context's own directory can be) is not cached.
    let Some(key) = path.to_str() else {
        return hash_file_sized(path, len);
    };
    let hashed_at_ns = cache.now_ns();
    let sha256 = hash_file_sized(path, len)?;
    cache.store(
        key,
        CachedDigest {
            stat: *stat,
            sha256: sha256.clone(),
            hashed_at_ns,
        },
    );
    Ok(sha256)
}

/// sha256 hex of a file's bytes, read in chunks; `len` is what the walk saw (a hint: the whole
/// file is read either way).
fn hash_file_sized(path: &Path, len: u64) -> Result<String, InputsError> {
    let mut file = File::open(path).map_err(io_err(path))?;
    let mut h = Sha256::new();
    // A small file gets a small buffer: zeroing (and faulting in) 256 KiB per tiny file was most
    // of a plan's time on a mesh of small contexts. One byte more than the length: a read that
    // comes back short once `len` bytes are in is the end of the file, without asking again.
    let size = usize::try_from(len).map_or(CHUNK, |len| len.saturating_add(1).min(CHUNK));
    let mut buf = vec![0u8; size];
    let mut total: u64 = 0;
    loop {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                h.update(&buf[..n]);
                total = total.saturating_add(n as u64);
                if total >= len && n < buf.len() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_err(path)(e)),
        }
    }
    Ok(hex::encode(h.finalize()))
}

/// The sink, refusing every write once poisoned (so an aborted tar is never finished).
struct Guard<W> {
    inner: W,
    poisoned: bool,
}

impl<W: Write> Write for Guard<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.poisoned {
            return Err(io::Error::other("the build context tar was aborted"));
        }
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Reads exactly `remaining` bytes of a file, hashing them; a file that ends early is flagged.
struct Hashing<'a> {
    file: &'a mut File,
    hasher: Sha256,
    remaining: u64,
    shrank: bool,
    read_failed: bool,
}

impl Read for Hashing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
        let n = self.file.read(&mut buf[..want]).inspect_err(|e| {
            self.read_failed = e.kind() != io::ErrorKind::Interrupted;
        })?;
        if n == 0 {
            self.shrank = true;
            return Err(io::Error::other("the file shrank while it was read"));
        }
        self.hasher.update(&buf[..n]);
        self.remaining -= n as u64;
        Ok(n)
    }
}

fn header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_mtime(0);
    h.set_uid(0);
    h.set_gid(0);
    h
}

/// How the Dockerfile is sent: as it is, or with its upstreams pinned to the lock's digests (the
/// address is the file as written plus the lock; the builder gets exactly what is locked, whatever
/// a tag names by the time it builds).
struct Pinning<'a> {
    upstreams: &'a BTreeMap<String, String>,
    context_images: &'a BTreeMap<String, String>,
    args: BTreeMap<String, String>,
}

impl<'a> Pinning<'a> {
    fn of(spec: &InputSpec<'a>) -> Pinning<'a> {
        let mut args = spec.build_args.clone();
        if let Some(base) = spec.base_digest {
            args.insert(crate::mesh::upstream::BASE_ARG.into(), base.into());
        }
        Pinning {
            upstreams: spec.upstreams,
            context_images: spec.context_images,
            args,
        }
    }

    /// The Dockerfile's bytes as the builder gets them; None: as they are on disk.
    fn pinned(&self, text: &[u8]) -> Option<Vec<u8>> {
        if self.upstreams.is_empty() && self.context_images.is_empty() {
            return None;
        }
        let text = std::str::from_utf8(text).ok()?;
        let pinned =
            crate::mesh::upstream::pinned(text, &self.args, self.context_images, |image| {
                self.upstreams.get(image).cloned()
            });
        Some(pinned.into_bytes())
    }
}

/// The Dockerfile, read whole (hashed as it is on disk) and written pinned.
fn append_pinned_dockerfile<W: Write>(
    builder: &mut tar::Builder<Guard<W>>,
    e: &Entry,
    mode: u32,
    pinning: &Pinning,
) -> Result<Option<FileEntry>, InputsError> {
    let bytes = fs::read(&e.abs).map_err(io_err(&e.abs))?;
    let Some(pinned) = pinning.pinned(&bytes) else {
        return Ok(None);
    };
    let mut h = header(tar::EntryType::Regular, mode, pinned.len() as u64);
    builder
        .append_data(&mut h, &e.rel, pinned.as_slice())
        .map_err(InputsError::Write)?;
    Ok(Some(FileEntry::File {
        sha256: hex::encode(Sha256::digest(&bytes)),
        mode,
    }))
}

fn write_tar<W: Write>(
    builder: &mut tar::Builder<Guard<W>>,
    prepared: &Prepared,
    pinning: &Pinning,
) -> Result<BTreeMap<String, FileEntry>, InputsError> {
    let mut files = BTreeMap::new();
    for e in &prepared.entries {
        if let Kind::File { mode, .. } = &e.kind
            && e.rel == prepared.dockerfile_rel
            && let Some(entry) = append_pinned_dockerfile(builder, e, *mode, pinning)?
        {
            files.insert(e.rel.clone(), entry);
            continue;
        }
        let entry = match &e.kind {
            Kind::Dir { mode } => {
                let mut h = header(tar::EntryType::Directory, *mode, 0);
                builder
                    .append_data(&mut h, format!("{}/", e.rel), io::empty())
                    .map_err(InputsError::Write)?;
                FileEntry::Dir { mode: *mode }
            }
            Kind::Link { target } => {
                let mut h = header(tar::EntryType::Symlink, 0o777, 0);
                builder
                    .append_link(&mut h, &e.rel, target)
                    .map_err(InputsError::Write)?;
                FileEntry::Link {
                    target: target.clone(),
                }
            }
            Kind::File { mode, .. } => {
                let changed = || InputsError::Changed {
                    files: vec![e.rel.clone()],
                    detail: format!("{} changed while it was read", e.rel),
                };
                let mut file = File::open(&e.abs).map_err(io_err(&e.abs))?;
                let size = file.metadata().map_err(io_err(&e.abs))?.len();
                let mut h = header(tar::EntryType::Regular, *mode, size);
                let mut reader = Hashing {
                    file: &mut file,
                    hasher: Sha256::new(),
                    remaining: size,
                    shrank: false,
                    read_failed: false,
                };
                if let Err(err) = builder.append_data(&mut h, &e.rel, &mut reader) {
                    return Err(if reader.shrank {
                        changed()
                    } else if reader.read_failed {
                        io_err(&e.abs)(err)
                    } else {
                        InputsError::Write(err)
                    });
                }
                let sha256 = hex::encode(reader.hasher.finalize());
                let mut extra = [0u8; 1];
                if file.read(&mut extra).map_err(io_err(&e.abs))? > 0 {
                    return Err(changed());
                }
                FileEntry::File {
                    sha256,
                    mode: *mode,
                }
            }
        };
        files.insert(e.rel.clone(), entry);
    }
    Ok(files)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The length is a hint: a file that grew or shrank since it was looked at hashes whole.
    #[test]
    fn a_wrong_length_hint_still_hashes_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        for size in [0usize, 1, 100, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 7] {
            let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
            fs::write(&path, &bytes).unwrap();
            let want = hex::encode(Sha256::digest(&bytes));
            for hint in [
                0u64,
                1,
                size as u64 / 2,
                size as u64,
                size as u64 + 1,
                10 * CHUNK as u64,
            ] {
                assert_eq!(
                    hash_file_sized(&path, hint).unwrap(),
                    want,
                    "size {size}, hint {hint}"
                );
            }
        }
    }
}
