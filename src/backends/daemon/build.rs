//! Builds on the host daemon: the context tar streams in (bounded memory, see [`context_pipe`]),
//! the daemon's output streams out as lines.

use std::collections::HashMap;
use std::io::{self, Write};

use bollard::models::{BuildInfoAux, ImageId};
use bollard::query_parameters::BuildImageOptionsBuilder;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::{Daemon, DaemonError};

/// The context tar is sent in chunks of this size.
const CHUNK: usize = 256 * 1024;
/// At most this many chunks wait between the tar and the builder: what a build holds in memory.
const IN_FLIGHT: usize = 4;

/// The receiving end of a context tar: chunks as the tar is written, an error when it was aborted.
pub type ContextBody = mpsc::Receiver<io::Result<Bytes>>;

/// A tar written on a blocking thread and streamed to the builder as it is written: at most
/// [`IN_FLIGHT`] chunks of [`CHUNK`] bytes are held. Call [`ContextWriter::finish`] once the tar
/// is complete, or [`ContextWriter::abort`]: an aborted body ends in an error, so the builder never
/// sees a truncated tar as a whole one.
pub fn context_pipe() -> (ContextWriter, ContextBody) {
    let (tx, rx) = mpsc::channel(IN_FLIGHT);
    (
        ContextWriter {
            tx,
            buf: Vec::with_capacity(CHUNK),
        },
        rx,
    )
}

pub struct ContextWriter {
    tx: mpsc::Sender<io::Result<Bytes>>,
    buf: Vec<u8>,
}

impl ContextWriter {
    fn send(&mut self, item: io::Result<Bytes>) -> io::Result<()> {
        self.tx.blocking_send(item).map_err(|_| {
            io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the builder stopped reading the context",
            )
        })
    }

    fn send_buffer(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
        self.send(Ok(Bytes::from(chunk)))
    }

    /// The tar is complete: send what is buffered and end the body.
    pub fn finish(mut self) -> io::Result<()> {
        self.send_buffer()
    }

    /// The tar was abandoned: drop what is buffered and end the body with an error.
    pub fn abort(mut self, why: &str) {
        self.buf.clear();
        let _ = self.send(Err(io::Error::other(why.to_string())));
    }
}

impl Write for ContextWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = CHUNK - self.buf.len();
        let n = data.len().min(room);
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() >= CHUNK {
            self.send_buffer()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// What one build asks of the builder (the daemon, or `docker buildx` for several platforms).
pub struct BuildRequest {
    /// The tar of the context, streamed as the same walk that computed the address writes it.
    pub context: ContextBody,
    pub dockerfile: String,
    /// The ref: the image's tag.
    pub tag: String,
    pub build_args: HashMap<String, String>,
    pub labels: HashMap<String, String>,
    /// A forced rebuild skips the builder's cache.
    pub no_cache: bool,
    /// Empty: the daemon's own platform. The daemon builds one; several go to buildx.
    pub platforms: Vec<String>,
}

/// How a build ended on the daemon.
#[derive(Debug)]
pub enum BuildEnd {
    /// The image id the daemon built.
    Built(String),
    /// The daemon said the build failed (a step failed): its message.
    Failed(String),
}

impl Daemon {
    /// Run one build, handing every output line to `on_line` as it comes.
    /// A daemon that goes away mid-build is an `Err`; a failed step is `Ok(BuildEnd::Failed)`.
    pub async fn build(
        &self,
        request: BuildRequest,
        mut on_line: impl FnMut(&str),
    ) -> Result<BuildEnd, DaemonError> {
        let options = BuildImageOptionsBuilder::default()
            .dockerfile(&request.dockerfile)
            .t(&request.tag)
            .buildargs(&request.build_args)
            .labels(&request.labels)
            .nocache(request.no_cache)
            .rm(true)
            .forcerm(true)
            .platform(request.platforms.first().map_or("", String::as_str))
            .build();
        let chunks = futures_util::stream::unfold(request.context, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let body = bollard::body_try_stream(chunks);
        let mut stream = self.docker.build_image(options, None, Some(body));
        let mut built: Option<String> = None;
        let mut last_line = String::new();
        while let Some(item) = stream.next().await {
            let info = match item {
                Ok(info) => info,
                Err(bollard::errors::Error::DockerStreamError { error }) => {
                    return Ok(BuildEnd::Failed(error));
                }
                Err(bollard::errors::Error::DockerResponseServerError {
                    status_code,
                    message,
                }) if status_code < 500 => {
                    return Ok(BuildEnd::Failed(message));
                }
                Err(source) => return Err(self.call_error("build")(source)),
            };
            if let Some(text) = info.stream.as_deref().or(info.status.as_deref()) {
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    on_line(line);
                    last_line = line.to_string();
                }
            }
            if let Some(detail) = info.error_detail {
                let message = detail.message.unwrap_or_else(|| "the build failed".into());
                return Ok(BuildEnd::Failed(message));
            }
            // With bollard's buildkit feature the aux is BuildKit's trace or the classic image id.
            if let Some(BuildInfoAux::Default(ImageId { id: Some(id) })) = info.aux {
                built = Some(id);
            }
        }
        match built {
            Some(id) => Ok(BuildEnd::Built(id)),
            // Older daemons only print "Successfully built <short id>": ask for the tag's id.
            // A daemon that went away is an error, not a failed build.
            None => match self.image_id(&request.tag).await? {
                Some(id) => Ok(BuildEnd::Built(id)),
                None => Ok(BuildEnd::Failed(format!(
                    "the build ended without an image (last output: {last_line})"
                ))),
            },
        }
    }

    /// The image id a tag names, if the daemon holds it.
    pub async fn image_id(&self, reference: &str) -> Result<Option<String>, DaemonError> {
        match self.docker.inspect_image(reference).await {
            Ok(image) => Ok(image.id),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(source) => Err(self.call_error("inspect an image")(source)),
        }
    }
}
