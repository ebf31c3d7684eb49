//! The build context served through the build's session, as `docker buildx build` serves a local
//! directory: BuildKit asks for its locals `context` and `dockerfile` by fsutil's diff copy
//! (`moby.filesync.v1.FileSync/DiffCopy`), compares each entry's stat data with what it kept from
//! the last build of the same context (the session's shared key), and asks only for the files that
//! differ. The protocol is tonistiigi/fsutil's `send.go`: every entry's stat in walk order, then an
//! empty stat; the receiver asks (`REQ`) by an entry's number for a file it wants; the file goes as
//! `DATA` packets ended by an empty one; `FIN` both ways ends it; `ERR` carries why one side gave up.
//! What is served is the planned inputs ([`SentContext`]); every byte is hashed as it is read and a
//! file that no longer hashes to its planned digest ends the transfer with an error, so BuildKit
//! never builds from it.

use std::collections::HashSet;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bollard::fsutil::types::packet::PacketType;
use bollard::fsutil::types::{Packet, Stat};
use bollard::moby::filesync::v1::file_sync_server::FileSync;
use futures_util::{Stream, StreamExt};
use sha2::{Digest, Sha256};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tonic::{Request, Response, Status, Streaming};

use crate::mesh::sent::{SentContext, SentEntry, SentKind, Wanted};

/// Files go in packets of this size (fsutil's own buffer is 32 KiB; gRPC's limit is 4 MiB).
const DATA_CHUNK: usize = 128 * 1024;

/// Go's `os.FileMode` bits, which fsutil's stat carries (not the Unix mode).
const GO_MODE_DIR: u32 = 1 << 31;
const GO_MODE_SYMLINK: u32 = 1 << 27;
const GO_MODE_SETUID: u32 = 1 << 23;
const GO_MODE_SETGID: u32 = 1 << 22;
const GO_MODE_STICKY: u32 = 1 << 20;

/// A context served in one session, and what serving it did.
#[derive(Clone)]
pub struct Served {
    pub(super) context: Arc<SentContext>,
    pub(super) tally: Arc<Tally>,
}

impl Served {
    pub fn new(context: Arc<SentContext>) -> Served {
        Served {
            context,
            tally: Arc::default(),
        }
    }
}

/// What the session served, counted as it served it. Files by path: BuildKit asks for some twice
/// (`.dockerignore` alone, then with the whole context), and a file is one file.
#[derive(Default)]
pub(super) struct Tally {
    /// Regular files whose stat BuildKit was given.
    offered: Mutex<HashSet<String>>,
    /// Files BuildKit asked for and was sent.
    sent: Mutex<HashSet<String>>,
    /// Bytes sent, every time they were.
    bytes: AtomicU64,
    /// Why a transfer was refused: a file that is not what was planned.
    refused: Mutex<Option<String>>,
}

/// What one build's session sent, when it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentTally {
    pub offered: u64,
    pub sent: u64,
    pub bytes: u64,
}

impl Tally {
    pub(super) fn read(&self) -> SentTally {
        let count = |set: &Mutex<HashSet<String>>| set.lock().map_or(0, |s| s.len() as u64);
        SentTally {
            offered: count(&self.offered),
            sent: count(&self.sent),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }

    pub(super) fn refused(&self) -> Option<String> {
        self.refused.lock().ok().and_then(|r| r.clone())
    }

    fn note(set: &Mutex<HashSet<String>>, path: &str) {
        if let Ok(mut set) = set.lock() {
            set.insert(path.to_string());
        }
    }

    fn refuse(&self, why: String) {
        if let Ok(mut refused) = self.refused.lock() {
            refused.get_or_insert(why);
        }
    }
}

impl SentTally {
    /// The line a build's output says it with.
    pub fn line(&self) -> String {
        let kept = self.offered.saturating_sub(self.sent);
        format!(
            "meshtop: context: sent {} of {} files ({} B) through the session; BuildKit kept the other {kept} from its last build of this context",
            self.sent, self.offered, self.bytes
        )
    }
}

/// Why a transfer ended before BuildKit had what it asked for: sent to it as the transfer's
/// error, and the build's failure when the file is not what was planned.
#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error(
        "the build context changed since it was planned ({path} {how}); the build was stopped so that no image is made under a stale address: plan again"
    )]
    Changed { path: String, how: String },
    #[error("BuildKit asked for entry {id} of {count}")]
    NoSuchEntry { id: u32, count: usize },
    #[error("BuildKit asked for {path}, which is not a file")]
    NotAFile { path: String },
    #[error("the build stopped reading the context")]
    Gone,
}

/// One entry as it goes on the wire.
enum Item {
    Entry(SentEntry),
    /// The Dockerfile, pinned: bytes held here.
    Bytes {
        path: String,
        mode: u32,
        bytes: Arc<Vec<u8>>,
    },
}

impl Item {
    /// The path of a file BuildKit may ask for; None for a directory or a link.
    fn file_path(&self) -> Option<&str> {
        match self {
            Item::Bytes { path, .. }
            | Item::Entry(SentEntry {
                path,
                kind: SentKind::File { .. },
            }) => Some(path),
            Item::Entry(_) => None,
        }
    }
}

pub(super) struct ContextSync(pub(super) Served);

type Packets = Pin<Box<dyn Stream<Item = Result<Packet, Status>> + Send>>;

#[tonic::async_trait]
impl FileSync for ContextSync {
    type DiffCopyStream = Packets;

    async fn diff_copy(
        &self,
        request: Request<Streaming<Packet>>,
    ) -> Result<Response<Packets>, Status> {
        let metadata = request.metadata();
        let dir = values(metadata, "dir-name").into_iter().next();
        let items = match dir.as_deref() {
            Some("context") => {
                let wanted = Wanted {
                    follow_paths: values(metadata, "followpaths"),
                    include_patterns: values(metadata, "include-patterns"),
                };
                let context = &self.0.context;
                context
                    .wanted(&wanted)
                    .into_iter()
                    .map(|e| Item::Entry(e.clone()))
                    .collect()
            }
            Some("dockerfile") => dockerfile_items(&self.0.context),
            other => {
                return Err(Status::not_found(format!(
                    "meshtop serves the build's `context` and `dockerfile` only, not {other:?}"
                )));
            }
        };
        let (tx, rx) = mpsc::channel(16);
        let tally = self.0.tally.clone();
        tokio::spawn(send(items, request.into_inner(), tx, tally));
        let packets = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|packet| (packet, rx))
        });
        Ok(Response::new(Box::pin(packets)))
    }

    type TarStreamStream = Packets;

    async fn tar_stream(&self, _: Request<Streaming<Packet>>) -> Result<Response<Packets>, Status> {
        Err(Status::unimplemented(
            "meshtop serves the context by diff copy only",
        ))
    }
}

/// A metadata key's values, percent-decoded where BuildKit says it encoded them (`<key>-encoded`).
fn values(metadata: &tonic::metadata::MetadataMap, key: &str) -> Vec<String> {
    let encoded = metadata
        .get(format!("{key}-encoded").as_str())
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "true" || v == "1");
    metadata
        .get_all(key)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(|v| {
            if !encoded {
                return v.to_string();
            }
            serde_urlencoded::from_str::<Vec<(String, String)>>(&format!("v={v}"))
                .ok()
                .and_then(|mut pairs| pairs.pop())
                .map_or_else(|| v.to_string(), |(_, value)| value)
        })
        .collect()
}

/// The local `dockerfile`: the pinned Dockerfile under its digest-carrying name, and the
/// directories above it.
fn dockerfile_items(context: &SentContext) -> Vec<Item> {
    let dockerfile = &context.dockerfile;
    let mut items = Vec::new();
    let mut dir = String::new();
    let parts: Vec<&str> = dockerfile.name.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        if !dir.is_empty() {
            dir.push('/');
        }
        dir.push_str(part);
        items.push(Item::Entry(SentEntry {
            path: dir.clone(),
            kind: SentKind::Dir { mode: 0o755 },
        }));
    }
    items.push(Item::Bytes {
        path: dockerfile.name.clone(),
        mode: dockerfile.mode,
        bytes: Arc::new(dockerfile.bytes.clone()),
    });
    items
}

fn go_perm(mode: u32) -> u32 {
    let mut go = mode & 0o777;
    for (unix, bit) in [
        (0o4000, GO_MODE_SETUID),
        (0o2000, GO_MODE_SETGID),
        (0o1000, GO_MODE_STICKY),
    ] {
        if mode & unix != 0 {
            go |= bit;
        }
    }
    go
}

/// The stat BuildKit is given: owners 0 as `docker build` sends them, a file's mtime as the walk
/// saw it (what BuildKit compares, with the size), none for directories and links.
fn stat_of(item: &Item) -> Stat {
    let (path, mode, size, mod_time, linkname) = match item {
        Item::Entry(SentEntry { path, kind }) => match kind {
            SentKind::Dir { mode } => (path, GO_MODE_DIR | go_perm(*mode), 0, 0, String::new()),
            SentKind::Link { target } => (
                path,
                GO_MODE_SYMLINK | 0o777,
                target.len() as i64,
                0,
                target.clone(),
            ),
            SentKind::File {
                mode,
                size,
                mtime_ns,
                ..
            } => (
                path,
                go_perm(*mode),
                i64::try_from(*size).unwrap_or(i64::MAX),
                *mtime_ns,
                String::new(),
            ),
        },
        Item::Bytes { path, mode, bytes } => {
            (path, go_perm(*mode), bytes.len() as i64, 0, String::new())
        }
    };
    Stat {
        path: path.clone(),
        mode,
        size,
        mod_time,
        linkname,
        ..Stat::default()
    }
}

fn packet(kind: PacketType) -> Packet {
    Packet {
        r#type: kind as i32,
        ..Packet::default()
    }
}

/// One diff copy: the stats, then what BuildKit asks for, until it says it is done.
async fn send(
    items: Vec<Item>,
    mut inbound: Streaming<Packet>,
    tx: mpsc::Sender<Result<Packet, Status>>,
    tally: Arc<Tally>,
) {
    for item in &items {
        if let Some(path) = item.file_path() {
            Tally::note(&tally.offered, path);
        }
        let stat = Packet {
            stat: Some(stat_of(item)),
            ..packet(PacketType::PacketStat)
        };
        if tx.send(Ok(stat)).await.is_err() {
            return;
        }
    }
    if tx.send(Ok(packet(PacketType::PacketStat))).await.is_err() {
        return;
    }
    while let Some(Ok(asked)) = inbound.next().await {
        match PacketType::try_from(asked.r#type) {
            Ok(PacketType::PacketReq) => {
                let item = usize::try_from(asked.id).ok().and_then(|at| items.get(at));
                let served = match item {
                    Some(item) => send_file(item, asked.id, &tx, &tally).await,
                    None => Err(Refusal::NoSuchEntry {
                        id: asked.id,
                        count: items.len(),
                    }),
                };
                if let Err(why) = served {
                    let why = why.to_string();
                    tally.refuse(why.clone());
                    let error = Packet {
                        data: why.into_bytes(),
                        ..packet(PacketType::PacketErr)
                    };
                    let _ = tx.send(Ok(error)).await;
                    return;
                }
            }
            Ok(PacketType::PacketFin) => {
                let _ = tx.send(Ok(packet(PacketType::PacketFin))).await;
                return;
            }
            Ok(PacketType::PacketErr) => {
                tracing::debug!(
                    "BuildKit gave up the context: {}",
                    String::from_utf8_lossy(&asked.data)
                );
                return;
            }
            _ => {}
        }
    }
}

/// One file's bytes as `DATA` packets, then the empty one that ends it. A file on disk must hash
/// to its planned digest: when it does not, the error says so and the transfer ends there.
async fn send_file(
    item: &Item,
    id: u32,
    tx: &mpsc::Sender<Result<Packet, Status>>,
    tally: &Tally,
) -> Result<(), Refusal> {
    let data = |chunk: Vec<u8>| Packet {
        id,
        data: chunk,
        ..packet(PacketType::PacketData)
    };
    let gone = |_| Refusal::Gone;
    match item {
        Item::Bytes { bytes, .. } => {
            for chunk in bytes.chunks(DATA_CHUNK) {
                tx.send(Ok(data(chunk.to_vec()))).await.map_err(gone)?;
            }
            tally.bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        }
        Item::Entry(SentEntry {
            path,
            kind:
                SentKind::File {
                    source,
                    sha256,
                    size,
                    ..
                },
        }) => {
            let changed = |how: &str| Refusal::Changed {
                path: path.clone(),
                how: how.to_string(),
            };
            let mut file = tokio::fs::File::open(source)
                .await
                .map_err(|e| changed(&format!("cannot be read: {e}")))?;
            let mut hasher = Sha256::new();
            let mut total: u64 = 0;
            loop {
                let mut chunk = vec![0u8; DATA_CHUNK];
                let n = file
                    .read(&mut chunk)
                    .await
                    .map_err(|e| changed(&format!("cannot be read: {e}")))?;
                if n == 0 {
                    break;
                }
                chunk.truncate(n);
                hasher.update(&chunk);
                total += n as u64;
                if total > *size {
                    return Err(changed("grew"));
                }
                tx.send(Ok(data(chunk))).await.map_err(gone)?;
            }
            if total != *size || hex::encode(hasher.finalize()) != *sha256 {
                return Err(changed("changed: its bytes are not the planned ones"));
            }
            tally.bytes.fetch_add(total, Ordering::Relaxed);
        }
        Item::Entry(SentEntry { path, .. }) => {
            return Err(Refusal::NotAFile { path: path.clone() });
        }
    }
    if let Some(path) = item.file_path() {
        Tally::note(&tally.sent, path);
    }
    tx.send(Ok(data(Vec::new()))).await.map_err(gone)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_gos_file_modes() {
        let dir = Item::Entry(SentEntry {
            path: "d".into(),
            kind: SentKind::Dir { mode: 0o1755 },
        });
        assert_eq!(stat_of(&dir).mode, GO_MODE_DIR | GO_MODE_STICKY | 0o755);
        let link = Item::Entry(SentEntry {
            path: "l".into(),
            kind: SentKind::Link {
                target: "../x".into(),
            },
        });
        let stat = stat_of(&link);
        assert_eq!(
            (stat.mode, stat.linkname.as_str(), stat.size),
            (GO_MODE_SYMLINK | 0o777, "../x", 4)
        );
        let file = Item::Entry(SentEntry {
            path: "f".into(),
            kind: SentKind::File {
                mode: 0o4755,
                size: 9,
                mtime_ns: 1_700_000_000_123_456_789,
                source: "f".into(),
                sha256: String::new(),
            },
        });
        let stat = stat_of(&file);
        assert_eq!(
            (stat.mode, stat.size, stat.mod_time, stat.uid, stat.gid),
            (GO_MODE_SETUID | 0o755, 9, 1_700_000_000_123_456_789, 0, 0)
        );
    }

    #[test]
    fn the_line_says_what_was_sent_and_what_buildkit_kept() {
        let tally = SentTally {
            offered: 12,
            sent: 1,
            bytes: 34,
        };
        assert_eq!(
            tally.line(),
            "meshtop: context: sent 1 of 12 files (34 B) through the session; BuildKit kept the other 11 from its last build of this context"
        );
    }
}
