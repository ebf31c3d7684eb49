//! A build on the daemon's own BuildKit: `/build?version=2&session=…` with the context tar as the
//! request body, streamed (the daemon hands it to BuildKit as the build context), and BuildKit's
//! status stream (`moby.buildkit.trace`: vertexes and their logs) turned into lines as
//! `docker build --progress=plain` prints them: `#5 [2/3] RUN make`, `#5 0.12 output`, `#5 DONE 0.3s`.

use std::collections::{HashMap, VecDeque};
use std::io;

use bollard::moby::buildkit::v1::StatusResponse;
use bollard::models::{BuildInfo, BuildInfoAux};
use bollard::query_parameters::{BuildImageOptions, BuilderVersion};
use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::sync::mpsc;

use super::BuildEnd;
use super::session::Session;
use super::socket::{self, Address};

/// How many output lines of each step are kept to tell why it failed.
const STEP_TAIL: usize = 10;

/// Why a BuildKit build did not end in [`BuildEnd`].
#[derive(Debug, thiserror::Error)]
pub enum BuildkitError {
    /// The daemon cannot build with BuildKit (the legacy builder may): its words.
    #[error("{0}")]
    Unsupported(String),
    /// The daemon went away or broke the stream mid-build.
    #[error("{0}")]
    Failed(#[from] BuildkitFailure),
}

/// How a BuildKit build broke off: the daemon went away, or refused it.
#[derive(Debug, thiserror::Error)]
pub enum BuildkitFailure {
    #[error("cannot write the build's query: {0}")]
    Query(#[source] serde_urlencoded::ser::Error),
    #[error("cannot write the build's request: {0}")]
    Request(#[source] http::Error),
    #[error(transparent)]
    Socket(#[from] socket::SocketError),
    #[error("the build's stream broke: {0}")]
    Stream(#[source] hyper::Error),
    #[error("the daemon refused the build ({status}): {message}")]
    Refused {
        status: http::StatusCode,
        message: String,
    },
}

/// One build in `session` (which ends with it). `options` are the legacy builder's (tag,
/// Dockerfile, args, labels, no-cache); the version and the session are set here. The context is
/// the tar `context`, or, without one, what the session serves (`remote=client-session`, as
/// `docker build` with BuildKit sends a local directory): then the build's output ends with what
/// was sent, and a file that was not what was planned is the build's failure.
pub async fn build(
    address: &Address,
    api: &str,
    mut options: BuildImageOptions,
    context: Option<mpsc::Receiver<io::Result<Bytes>>>,
    session: Session,
    on_line: &mut (dyn FnMut(&str) + Send),
) -> Result<BuildEnd, BuildkitError> {
    options.version = BuilderVersion::BuilderBuildKit;
    options.session = Some(session.id.clone());
    if context.is_none() {
        options.remote = Some("client-session".into());
    }
    let query = serde_urlencoded::to_string(&options).map_err(BuildkitFailure::Query)?;
    let chunks = futures_util::stream::unfold(context, |rx| async move {
        let mut rx = rx?;
        rx.recv()
            .await
            .map(|item| (item.map(hyper::body::Frame::data), Some(rx)))
    });
    let request = http::Request::post(format!("/v{api}/build?{query}"))
        .header(http::header::HOST, "docker")
        .header(http::header::CONTENT_TYPE, "application/x-tar")
        .body(http_body_util::StreamBody::new(Box::pin(chunks)))
        .map_err(BuildkitFailure::Request)?;
    let (response, driver) = socket::send(address, request)
        .await
        .map_err(BuildkitFailure::Socket)?;
    let result = follow(response, on_line).await;
    driver.abort();
    let served = session.served.clone();
    drop(session);
    let Some(served) = served else {
        return result;
    };
    if let Some(refused) = served.tally.refused() {
        return Ok(BuildEnd::Failed(refused));
    }
    on_line(&served.tally.read().line());
    result
}

/// Read the daemon's answer to the end: the image id, or why the build failed.
async fn follow(
    response: http::Response<hyper::body::Incoming>,
    on_line: &mut (dyn FnMut(&str) + Send),
) -> Result<BuildEnd, BuildkitError> {
    let status = response.status();
    let mut body = response.into_body();
    if !status.is_success() {
        let text = body
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned())
            .unwrap_or_default();
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_string))
            .unwrap_or(text);
        return refusal(status, message);
    }
    let mut trace = Trace::default();
    let mut pending: Vec<u8> = Vec::new();
    let mut image: Option<String> = None;
    let mut error: Option<String> = None;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(BuildkitFailure::Stream)?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(end) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let Ok(info) = serde_json::from_slice::<BuildInfo>(&line) else {
                continue;
            };
            match info.aux {
                Some(BuildInfoAux::BuildKit(status)) => trace.apply(&status, on_line),
                Some(BuildInfoAux::Default(id)) => image = id.id.or(image),
                None => {}
            }
            if let Some(message) = info.error_detail.and_then(|d| d.message) {
                error = Some(message);
            }
            if let Some(text) = info.stream {
                text.lines()
                    .filter(|l| !l.trim().is_empty())
                    .for_each(&mut *on_line);
            }
        }
    }
    Ok(match (error, image) {
        (Some(message), _) => BuildEnd::Failed(trace.failure(&message)),
        (None, Some(id)) => BuildEnd::Built(id),
        (None, None) => BuildEnd::Failed(trace.failure("the build ended without an image")),
    })
}

/// A refused `/build`: a daemon that does not know `version=2` cannot; a bad request is the build's
/// failure; anything else is the daemon's.
fn refusal(status: http::StatusCode, message: String) -> Result<BuildEnd, BuildkitError> {
    let lower = message.to_lowercase();
    if lower.contains("buildkit")
        && (lower.contains("not supported") || lower.contains("unsupported"))
    {
        return Err(BuildkitError::Unsupported(message));
    }
    if status.is_client_error() {
        return Ok(BuildEnd::Failed(message));
    }
    Err(BuildkitFailure::Refused { status, message }.into())
}

/// BuildKit's steps as they were reported, numbered in the order they were first seen.
#[derive(Default)]
pub struct Trace {
    steps: HashMap<String, StepState>,
    next: usize,
}

#[derive(Default)]
struct StepState {
    number: usize,
    name: String,
    started: bool,
    done: bool,
    error: String,
    /// Output not yet ended by a newline.
    partial: String,
    tail: VecDeque<String>,
}

impl StepState {
    fn line(&mut self, line: &str, out: &mut (dyn FnMut(&str) + Send)) {
        let line = line.trim_end_matches('\r');
        if self.tail.len() == STEP_TAIL {
            self.tail.pop_front();
        }
        self.tail.push_back(line.to_string());
        out(&format!("#{} {line}", self.number));
    }
}

impl Trace {
    fn step(&mut self, digest: &str) -> &mut StepState {
        let next = &mut self.next;
        self.steps.entry(digest.to_string()).or_insert_with(|| {
            *next += 1;
            StepState {
                number: *next,
                ..StepState::default()
            }
        })
    }

    /// Fold one status message in, writing the lines it adds.
    pub fn apply(&mut self, status: &StatusResponse, out: &mut (dyn FnMut(&str) + Send)) {
        for vertex in &status.vertexes {
            let step = self.step(&vertex.digest);
            if !vertex.name.is_empty() {
                step.name = vertex.name.clone();
            }
            if (vertex.started.is_some() || vertex.cached) && !step.started {
                step.started = true;
                out(&format!("#{} {}", step.number, step.name));
            }
            if (vertex.completed.is_some() || vertex.cached) && !step.done {
                step.done = true;
                let rest = std::mem::take(&mut step.partial);
                if !rest.is_empty() {
                    step.line(&rest, out);
                }
                let word = if vertex.cached {
                    "CACHED".to_string()
                } else if !vertex.error.is_empty() {
                    step.error = vertex.error.clone();
                    format!("ERROR: {}", vertex.error)
                } else {
                    match (&vertex.started, &vertex.completed) {
                        (Some(a), Some(b)) => {
                            let ms = (b.seconds - a.seconds) * 1000
                                + i64::from(b.nanos - a.nanos) / 1_000_000;
                            format!("DONE {:.1}s", ms.max(0) as f64 / 1000.0)
                        }
                        _ => "DONE".to_string(),
                    }
                };
                out(&format!("#{} {word}", step.number));
            }
        }
        for log in &status.logs {
            let step = self.step(&log.vertex);
            let text = format!("{}{}", step.partial, String::from_utf8_lossy(&log.msg));
            let mut pieces: Vec<&str> = text.split('\n').collect();
            let rest = pieces.pop().unwrap_or("").to_string();
            for piece in pieces.into_iter().filter(|p| !p.trim().is_empty()) {
                step.line(piece, out);
            }
            step.partial = rest;
        }
    }

    /// Why the build failed: the failed step, its instruction and error on the first line, then its
    /// last output lines; the daemon's own message when no step said.
    pub fn failure(&self, daemon_message: &str) -> String {
        let failed = self
            .steps
            .values()
            .filter(|s| !s.error.is_empty())
            .min_by_key(|s| s.number);
        let Some(step) = failed else {
            return daemon_message.to_string();
        };
        let mut text = format!("{} failed: {}", step.name, step.error);
        for line in &step.tail {
            text.push('\n');
            text.push_str(line);
        }
        text
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use bollard::moby::buildkit::v1::{Vertex, VertexLog};

    fn vertex(digest: &str, name: &str, started: bool, completed: bool, error: &str) -> Vertex {
        let mut vertex = Vertex {
            digest: digest.into(),
            name: name.into(),
            error: error.into(),
            ..Vertex::default()
        };
        // The timestamp type is the proto crate's own (not re-exported): filled through Default.
        if started {
            vertex.started = Some(Default::default());
            if let Some(t) = vertex.started.as_mut() {
                t.seconds = 10;
            }
        }
        if completed {
            vertex.completed = Some(Default::default());
            if let Some(t) = vertex.completed.as_mut() {
                t.seconds = 12;
            }
        }
        vertex
    }

    fn log(digest: &str, msg: &str) -> VertexLog {
        VertexLog {
            vertex: digest.into(),
            msg: msg.as_bytes().to_vec(),
            ..VertexLog::default()
        }
    }

    #[test]
    fn the_trace_reads_as_plain_progress_and_a_failure_names_its_step() {
        let mut trace = Trace::default();
        let mut lines = Vec::new();
        let mut out = |l: &str| lines.push(l.to_string());
        let copy = vertex("a", "[1/2] COPY busybox /bin/busybox", true, true, "");
        let run = vertex("b", "[2/2] RUN make", true, false, "");
        trace.apply(
            &StatusResponse {
                vertexes: vec![copy, run],
                logs: vec![log("b", "compiling\nhalf a li")],
                ..StatusResponse::default()
            },
            &mut out,
        );
        let failed = vertex("b", "[2/2] RUN make", true, true, "exit code: 2");
        trace.apply(
            &StatusResponse {
                vertexes: vec![failed],
                logs: vec![],
                ..StatusResponse::default()
            },
            &mut out,
        );
        assert_eq!(
            lines,
            [
                "#1 [1/2] COPY busybox /bin/busybox",
                "#1 DONE 2.0s",
                "#2 [2/2] RUN make",
                "#2 compiling",
                "#2 half a li",
                "#2 ERROR: exit code: 2",
            ]
        );
        let why = trace.failure("executor failed");
        assert_eq!(
            why,
            "[2/2] RUN make failed: exit code: 2\ncompiling\nhalf a li"
        );
        assert_eq!(
            Trace::default().failure("executor failed"),
            "executor failed"
        );
    }

    #[test]
    fn a_daemon_without_buildkit_is_told_from_a_bad_build() {
        let bad = http::StatusCode::BAD_REQUEST;
        assert!(matches!(
            refusal(bad, "buildkit not supported by daemon".into()),
            Err(BuildkitError::Unsupported(_))
        ));
        assert!(matches!(
            refusal(bad, "dockerfile parse error".into()),
            Ok(BuildEnd::Failed(_))
        ));
        assert!(matches!(
            refusal(http::StatusCode::INTERNAL_SERVER_ERROR, "boom".into()),
            Err(BuildkitError::Failed(_))
        ));
    }

    #[test]
    fn the_query_names_buildkit_and_the_session() {
        let mut options = bollard::query_parameters::BuildImageOptionsBuilder::default()
            .t("demo/api:1")
            .build();
        options.version = BuilderVersion::BuilderBuildKit;
        options.session = Some("s1".into());
        let query = serde_urlencoded::to_string(&options).unwrap();
        assert!(query.contains("version=2"), "{query}");
        assert!(query.contains("session=s1"), "{query}");
    }
}
