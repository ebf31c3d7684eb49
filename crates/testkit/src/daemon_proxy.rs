//! A tiny unix-socket proxy in front of the Docker daemon: it counts the HTTP requests that pass
//! through it, and can be shut — every connection dropped, the socket no longer listening — to
//! play a daemon that goes away. Used by the integration tests and by `examples/daemon_proxy.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

/// The daemon's own socket.
pub const DOCKER_SOCKET: &str = "/var/run/docker.sock";

/// What went through the proxy.
#[derive(Debug, Default)]
pub struct Counts {
    pub connections: AtomicUsize,
    /// HTTP requests: lines starting with a method and ` /` at the start of a client write.
    pub requests: AtomicUsize,
    /// Of those, image builds: `POST /build` or `POST /v1.NN/build`.
    pub builds: AtomicUsize,
    /// Each request's method and path (the query left off), in the order they came.
    pub lines: Mutex<Vec<String>>,
}

/// Called with each request's line (method, full target with its query) before the request is
/// forwarded to the daemon: what it does on the real daemon happens before the daemon serves it.
pub type OnRequest = Arc<dyn Fn(&str) + Send + Sync>;

/// The request lines (method and target, query kept) that start in this chunk.
pub fn request_heads(chunk: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(chunk);
    std::iter::once(text.as_ref())
        .chain(text.split("\r\n").skip(1))
        .filter(|line| METHODS.iter().any(|m| line.as_bytes().starts_with(m)))
        .filter_map(|line| {
            let (method, rest) = line.split_once(' ')?;
            Some(format!("{method} {}", rest.split(' ').next()?))
        })
        .collect()
}

pub struct DaemonProxy {
    path: PathBuf,
    accept: JoinHandle<()>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    pub counts: Arc<Counts>,
}

const METHODS: [&[u8]; 5] = [b"GET /", b"POST /", b"HEAD /", b"PUT /", b"DELETE /"];

/// Requests that start in this chunk of client bytes. A request line that straddles two reads is
/// missed; Docker's clients write each request head in one write, so this counts them all in practice.
pub fn count_requests(chunk: &[u8]) -> usize {
    let starts = std::iter::once(0).chain(
        chunk
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w == b"\r\n")
            .map(|(i, _)| i + 2),
    );
    starts
        .filter(|&i| METHODS.iter().any(|m| chunk[i..].starts_with(m)))
        .count()
}

/// The method and path (the query left off) of each request that starts in this chunk, as
/// [`count_requests`] finds them.
pub fn request_lines(chunk: &[u8]) -> Vec<String> {
    request_heads(chunk)
        .into_iter()
        .map(|head| match head.split_once('?') {
            Some((line, _)) => line.to_string(),
            None => head,
        })
        .collect()
}

/// Build requests (`POST [/v1.NN]/build`) that start in this chunk, as [`count_requests`] finds them.
pub fn count_builds(chunk: &[u8]) -> usize {
    let text = String::from_utf8_lossy(chunk);
    std::iter::once(text.as_ref())
        .chain(text.split("\r\n").skip(1))
        .filter_map(|line| line.strip_prefix("POST /"))
        .filter(|path| {
            let path = match path.split_once('/') {
                Some((version, rest)) if version.starts_with('v') => rest,
                _ => path,
            };
            path.starts_with("build?") || path.starts_with("build ")
        })
        .count()
}

impl DaemonProxy {
    /// Listen on `path`, forwarding each connection to `upstream`. Must run inside a tokio runtime.
    pub fn start(path: &Path, upstream: &Path) -> DaemonProxy {
        DaemonProxy::start_with(path, upstream, None)
    }

    /// As [`DaemonProxy::start`], running `on_request` for each request before it is forwarded
    /// (off the runtime's threads; the request waits for it).
    pub fn start_with(path: &Path, upstream: &Path, on_request: Option<OnRequest>) -> DaemonProxy {
        let _ = std::fs::remove_file(path);
        let listener = UnixListener::bind(path).unwrap();
        let tasks: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let counts: Arc<Counts> = Arc::default();
        let upstream = upstream.to_path_buf();
        let accept = {
            let tasks = tasks.clone();
            let counts = counts.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    counts.connections.fetch_add(1, Ordering::SeqCst);
                    let upstream = upstream.clone();
                    let counts = counts.clone();
                    let on_request = on_request.clone();
                    let task = tokio::spawn(async move {
                        if let Ok(daemon) = UnixStream::connect(&upstream).await {
                            pipe(client, daemon, counts, on_request).await;
                        }
                    });
                    tasks.lock().unwrap().push(task);
                }
            })
        };
        DaemonProxy {
            path: path.to_path_buf(),
            accept,
            tasks,
            counts,
        }
    }

    /// `unix://<path>` for `DOCKER_HOST`.
    pub fn docker_host(&self) -> String {
        format!("unix://{}", self.path.display())
    }

    pub fn requests(&self) -> usize {
        self.counts.requests.load(Ordering::SeqCst)
    }

    /// Every request's method and path so far ([`request_lines`]).
    pub fn lines(&self) -> Vec<String> {
        self.counts.lines.lock().unwrap().clone()
    }

    /// Build requests that reached the daemon so far.
    pub fn builds(&self) -> usize {
        self.counts.builds.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> usize {
        self.counts.connections.load(Ordering::SeqCst)
    }

    /// The daemon goes away: stop listening, drop every connection, remove the socket.
    pub fn shut(&self) {
        self.accept.abort();
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for DaemonProxy {
    fn drop(&mut self) {
        self.shut();
    }
}

async fn pipe(
    client: UnixStream,
    daemon: UnixStream,
    counts: Arc<Counts>,
    on_request: Option<OnRequest>,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut daemon_read, mut daemon_write) = daemon.into_split();
    let up = async {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match client_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            counts
                .requests
                .fetch_add(count_requests(&buf[..n]), Ordering::SeqCst);
            counts
                .builds
                .fetch_add(count_builds(&buf[..n]), Ordering::SeqCst);
            counts
                .lines
                .lock()
                .unwrap()
                .extend(request_lines(&buf[..n]));
            if let Some(hook) = &on_request {
                for head in request_heads(&buf[..n]) {
                    let hook = hook.clone();
                    let _ = tokio::task::spawn_blocking(move || hook(&head)).await;
                }
            }
            if daemon_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = daemon_write.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut daemon_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::join!(up, down);
}
