//! Builds on the host daemon: the context tar streams in (bounded memory, see [`context_pipe`]),
//! the daemon's output streams out as lines. The daemon's own BuildKit builds (see [`super::buildkit`]);
//! its legacy builder only where BuildKit cannot, said once with why.

use std::collections::HashMap;
use std::io::{self, Write};
use std::path::PathBuf;

use bollard::models::{BuildInfoAux, ImageId};
use bollard::query_parameters::{BuildImageOptions, BuildImageOptionsBuilder};
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::buildkit::{self, BuildkitError};
use super::filesync::Served;
use super::session::{self, SecretValues, Serving, SessionError};
use super::socket::Address;
use super::{BuildEnd, Daemon, DaemonError, SessionAddressError};

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

/// `MESHTOP_CONTEXT=tar` sends every context as a tar, as before contexts were served through
/// the session: a way out should a daemon's BuildKit mishandle its file sync, and the bench's
/// reference.
pub fn tar_asked_for() -> bool {
    std::env::var("MESHTOP_CONTEXT").is_ok_and(|v| v == "tar")
}

/// How long one build may run when nobody says (`MESHTOP_BUILD_DEADLINE`, seconds).
pub const DEFAULT_BUILD_DEADLINE: std::time::Duration = std::time::Duration::from_secs(3600);

/// The deadline of each build: `MESHTOP_BUILD_DEADLINE` seconds, else [`DEFAULT_BUILD_DEADLINE`].
/// Past it a build reads as its builder gone: nothing stays `running`.
pub fn build_deadline() -> std::time::Duration {
    std::env::var("MESHTOP_BUILD_DEADLINE")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|secs| *secs > 0)
        .map_or(DEFAULT_BUILD_DEADLINE, std::time::Duration::from_secs)
}

/// How the build context reaches the builder.
pub enum BuildContext {
    /// A tar, streamed as the same walk that computed the address writes it.
    Tar(ContextBody),
    /// Served through the build's BuildKit session ([`super::filesync`]): BuildKit asks only for
    /// what changed since its last build of this context. `tar` writes it as a tar instead, for a
    /// daemon that turns out to build with its legacy builder.
    Served {
        context: std::sync::Arc<crate::mesh::sent::SentContext>,
        tar: Box<dyn FnOnce() -> ContextBody + Send>,
    },
}

impl BuildContext {
    /// The context as a tar, whichever way it was to go.
    pub fn into_tar(self) -> ContextBody {
        match self {
            BuildContext::Tar(body) => body,
            BuildContext::Served { tar, .. } => tar(),
        }
    }
}

/// What one build asks of the builder (the daemon, or `docker buildx` for several platforms).
pub struct BuildRequest {
    pub context: BuildContext,
    pub dockerfile: String,
    /// The Dockerfile stage to build (`target`); `None`: the last stage.
    pub target: Option<String>,
    /// The ref: the image's tag.
    pub tag: String,
    pub build_args: HashMap<String, String>,
    pub labels: HashMap<String, String>,
    /// A forced rebuild skips the builder's cache.
    pub no_cache: bool,
    /// Empty: the daemon's own platform. The daemon builds one; several go to buildx.
    pub platforms: Vec<String>,
    /// The module's secrets, served through the build's session (BuildKit only).
    pub secrets: SecretValues,
    /// The ssh agent's socket to forward (`ssh = true`), BuildKit only.
    pub ssh_agent: Option<PathBuf>,
    /// The stage built is FROM the base (`BASE`), directly or through earlier stages: the image
    /// it makes must begin with the base's layers, checked when the build ends.
    pub on_base: bool,
}

impl BuildRequest {
    /// Whether the build needs BuildKit whatever its Dockerfile says.
    fn needs_buildkit(&self) -> bool {
        !self.secrets.0.is_empty() || self.ssh_agent.is_some()
    }
}

/// Why the base's artifact cannot be named to BuildKit: the build fails with these words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum BaseUnnamed {
    #[error("the base's artifact {artifact} is not on the daemon: converge the base module again")]
    NotOnDaemon { artifact: String },
    #[error(
        "the base's artifact {artifact} carries no tag, and BuildKit builds FROM a tag only (an image id reads as an image to pull): converge the base module again (--force) to tag it"
    )]
    Untagged { artifact: String },
}

/// The base as BuildKit was given it (`BASE`'s artifact id replaced by a name the daemon
/// resolves locally), checked again at the end.
struct NamedBase {
    name: LocalName,
    artifact: String,
}

/// How the daemon's BuildKit is given an image the daemon holds: by a name, as BuildKit finds a
/// `FROM` image by name only (see [`Daemon::name_base`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalName {
    /// `repo@sha256:<manifest>`: a digest reference the daemon recorded for this very image when
    /// it pushed or pulled it. moby's reference store maps it to the image id and never re-points
    /// it (`distribution/pull_v2.go`, `addDigestReference`: "Updating digests not supported"),
    /// and `docker tag`, `import` and `load` refuse digest references: nobody on the daemon can
    /// move it, and BuildKit resolves it locally (`builder-next/adapters/containerimage/pull.go`,
    /// `resolveLocal` asks the reference store).
    Pinned(String),
    /// A tag on the image (never the build's own): anyone who can reach the daemon may move it.
    Tagged(String),
}

impl LocalName {
    pub fn name(&self) -> &str {
        match self {
            LocalName::Pinned(name) | LocalName::Tagged(name) => name,
        }
    }
}

/// What the daemon names an image by, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LocalNaming {
    Named(LocalName),
    /// The daemon holds the image under no name (no digest, no tag but the build's own).
    Untagged,
    /// The daemon does not hold it.
    Absent,
}

/// Why the base could not be named: the daemon failed, or the build fails with these words.
#[derive(Debug, thiserror::Error)]
enum NameBaseError {
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    #[error(transparent)]
    Unnamed(#[from] BaseUnnamed),
}

/// Why meshtop builds with the daemon's legacy builder rather than its BuildKit.
#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum NoBuildKit {
    /// An earlier build found BuildKit out of reach (said once, then, with its words).
    #[error("{0}")]
    FellBack(String),
    #[error("DOCKER_BUILDKIT=0 asks for the legacy builder")]
    AskedFor,
    /// `DOCKER_HOST` names no socket meshtop can open a session on.
    #[error("{0}")]
    NoSessionAddress(std::sync::Arc<SessionAddressError>),
}

impl Daemon {
    /// Run one build, handing every output line to `on_line` as it comes.
    /// A daemon that goes away mid-build is an `Err`; a failed step is `Ok(BuildEnd::Failed)`.
    pub async fn build(
        &self,
        request: BuildRequest,
        mut on_line: impl FnMut(&str) + Send,
    ) -> Result<BuildEnd, DaemonError> {
        let legacy_why = match self.buildkit_address() {
            Ok(address) => {
                let api = self.docker.client_version().to_string();
                let context = match &request.context {
                    BuildContext::Served { context, .. } => Some(Served::new(context.clone())),
                    BuildContext::Tar(_) => None,
                };
                let serving = Serving {
                    secrets: request.secrets.clone(),
                    ssh_agent: request.ssh_agent.clone(),
                    context,
                };
                match session::open(&address, &api, serving).await {
                    Ok(session) => {
                        return self
                            .buildkit_build(&address, &api, request, session, &mut on_line)
                            .await;
                    }
                    Err(why @ SessionError::Unsupported(_)) => why.to_string(),
                    Err(source) => {
                        return Err(DaemonError::Session {
                            endpoint: self.endpoint.to_string(),
                            source,
                        });
                    }
                }
            }
            Err(why) => why.to_string(),
        };
        self.fall_back(&legacy_why, &mut on_line);
        if request.needs_buildkit() {
            return Ok(BuildEnd::Failed(format!(
                "the module's secrets and ssh are served through a BuildKit session, and the daemon cannot build with BuildKit: {legacy_why}"
            )));
        }
        let options = options(&request);
        let tar = request.context.into_tar();
        self.legacy_build(options, tar, &request.tag, &mut on_line)
            .await
    }

    /// One build on the daemon's BuildKit, in `session`; `BASE` names the base by a tag.
    async fn buildkit_build(
        &self,
        address: &Address,
        api: &str,
        mut request: BuildRequest,
        session: session::Session,
        on_line: &mut (dyn FnMut(&str) + Send),
    ) -> Result<BuildEnd, DaemonError> {
        let base = match self.name_base(&mut request.build_args, &request.tag).await {
            Ok(base) => base,
            Err(NameBaseError::Unnamed(why)) => return Ok(BuildEnd::Failed(why.to_string())),
            Err(NameBaseError::Daemon(error)) => return Err(error),
        };
        let mut options = options(&request);
        let tar = match request.context {
            BuildContext::Tar(body) => Some(body),
            // BuildKit reads the Dockerfile served under its own name (the pinned bytes').
            BuildContext::Served { context, .. } => {
                options.dockerfile = context.dockerfile.name.clone();
                None
            }
        };
        let built = buildkit::build(address, api, options, tar, session, on_line).await;
        let end = match built {
            Ok(end) => end,
            Err(BuildkitError::Unsupported(why)) => {
                self.fall_back(&why, on_line);
                return Ok(BuildEnd::Failed(why));
            }
            Err(BuildkitError::Failed(source)) => {
                return Err(DaemonError::Buildkit {
                    endpoint: self.endpoint.to_string(),
                    source,
                });
            }
        };
        match (end, base) {
            (BuildEnd::Built(id), Some(base)) => {
                let moved = self.base_moved(&base, &id, request.on_base).await?;
                Ok(moved.map_or(BuildEnd::Built(id), BuildEnd::Failed))
            }
            (end, _) => Ok(end),
        }
    }

    /// Why the image `built` may not be FROM the base BuildKit was given, if it may not: a tag that
    /// names another image at the end than at the start, or (the stage built being FROM the base,
    /// `on_base`) an image that does not begin with the base's layers (its `diff_ids`), whatever
    /// the tag named meanwhile.
    async fn base_moved(
        &self,
        base: &NamedBase,
        built: &str,
        on_base: bool,
    ) -> Result<Option<String>, DaemonError> {
        let NamedBase { name, artifact } = base;
        if let LocalName::Tagged(tag) = name {
            let now = self.image_id(tag).await?;
            if now.as_deref() != Some(artifact.as_str()) {
                return Ok(Some(format!(
                    "the base's tag {tag} named {artifact} when the build started and {} when it ended: the build may be FROM another image; build again",
                    now.as_deref().unwrap_or("nothing")
                )));
            }
        }
        if !on_base {
            return Ok(None);
        }
        let base_layers = self.image_layers(artifact).await?.unwrap_or_default();
        let built_layers = self.image_layers(built).await?.unwrap_or_default();
        if built_layers.starts_with(&base_layers) {
            return Ok(None);
        }
        let differs = built_layers
            .iter()
            .zip(&base_layers)
            .position(|(a, b)| a != b)
            .unwrap_or(built_layers.len().min(base_layers.len()));
        Ok(Some(format!(
            "the image built ({built}) does not begin with the layers of the base's artifact {artifact} (given to BuildKit as {}): layer {} is {} where the base has {}; it was built FROM another image, which someone on the daemon put under that name during the build; build again",
            name.name(),
            differs + 1,
            built_layers.get(differs).map_or("missing", String::as_str),
            base_layers.get(differs).map_or("none", String::as_str),
        )))
    }

    /// BuildKit finds a `FROM` image by name only: moby's builder looks a name up in the daemon's
    /// references, then asks a registry (`builder-next/adapters/containerimage/pull.go`,
    /// `resolveLocal`), so an image id reads as the repository `docker.io/library/sha256` and is
    /// pulled. `BASE` (the base's artifact id) is therefore replaced by a name the daemon resolves
    /// to that very image ([`Daemon::local_name`]): a digest reference it recorded where it has
    /// one (pinned: nobody can move it during the build), else a tag, checked again when the
    /// build ends with the result's layers. Returns the name and the artifact, or why the base
    /// cannot be named (a failed build).
    async fn name_base(
        &self,
        args: &mut HashMap<String, String>,
        building: &str,
    ) -> Result<Option<NamedBase>, NameBaseError> {
        let Some(artifact) = args
            .get("BASE")
            .filter(|b| b.starts_with("sha256:"))
            .cloned()
        else {
            return Ok(None);
        };
        let name = match self.local_name(&artifact, building).await? {
            LocalNaming::Named(name) => name,
            LocalNaming::Absent => return Err(BaseUnnamed::NotOnDaemon { artifact }.into()),
            LocalNaming::Untagged => return Err(BaseUnnamed::Untagged { artifact }.into()),
        };
        args.insert("BASE".into(), name.name().to_string());
        Ok(Some(NamedBase { name, artifact }))
    }

    /// The name the daemon's BuildKit is given for the image `id`: a digest reference the daemon
    /// recorded for it (`RepoDigests`: pushed or pulled by digest), else a tag on it other than
    /// `building` (the tag a build lands under: anyone may have tagged another image so).
    pub async fn local_name(&self, id: &str, building: &str) -> Result<LocalNaming, DaemonError> {
        let image = match self.docker.inspect_image(id).await {
            Ok(image) => image,
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => return Ok(LocalNaming::Absent),
            Err(source) => return Err(self.call_error("inspect an image")(source)),
        };
        let named = |names: Option<Vec<String>>| {
            let mut names: Vec<String> = names
                .unwrap_or_default()
                .into_iter()
                .filter(|n| !n.contains("<none>") && n != building)
                .collect();
            names.sort();
            names.into_iter().next()
        };
        Ok(match named(image.repo_digests) {
            Some(pinned) => LocalNaming::Named(LocalName::Pinned(pinned)),
            None => match named(image.repo_tags) {
                Some(tag) => LocalNaming::Named(LocalName::Tagged(tag)),
                None => LocalNaming::Untagged,
            },
        })
    }

    /// The layers (`RootFS.Layers`, the config's `diff_ids`) of the image `id`; None: the daemon
    /// does not hold it.
    pub async fn image_layers(&self, id: &str) -> Result<Option<Vec<String>>, DaemonError> {
        match self.docker.inspect_image(id).await {
            Ok(image) => Ok(Some(
                image.root_fs.and_then(|fs| fs.layers).unwrap_or_default(),
            )),
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(source) => Err(self.call_error("inspect an image")(source)),
        }
    }

    /// Whether builds go to the daemon's BuildKit (through a session), as far as is known before
    /// one is tried: a daemon that refuses the session then builds with its legacy builder.
    pub fn builds_with_buildkit(&self) -> bool {
        self.buildkit_address().is_ok()
    }

    /// Where a BuildKit session can be opened, or why meshtop builds with the legacy builder.
    pub(super) fn buildkit_address(&self) -> Result<Address, NoBuildKit> {
        if let Some(why) = self.legacy.get() {
            return Err(NoBuildKit::FellBack(why.clone()));
        }
        if std::env::var("DOCKER_BUILDKIT").is_ok_and(|v| v == "0" || v == "false") {
            return Err(NoBuildKit::AskedFor);
        }
        self.session_address
            .clone()
            .map_err(NoBuildKit::NoSessionAddress)
    }

    /// Build with the legacy builder from now on; say so, with why, the first time only.
    fn fall_back(&self, why: &str, on_line: &mut (dyn FnMut(&str) + Send)) {
        if self.legacy.set(why.to_string()).is_ok() {
            tracing::warn!("building with the daemon's legacy builder: {why}");
            on_line(&format!(
                "meshtop: building with the daemon's legacy builder: {why}"
            ));
        }
    }

    pub(super) fn refused(&self, message: String) -> DaemonError {
        DaemonError::Refused {
            endpoint: self.endpoint.to_string(),
            message,
        }
    }

    /// A build on the legacy builder (`/build`, version 1).
    async fn legacy_build(
        &self,
        options: BuildImageOptions,
        context: ContextBody,
        tag: &str,
        on_line: &mut (dyn FnMut(&str) + Send),
    ) -> Result<BuildEnd, DaemonError> {
        let chunks = futures_util::stream::unfold(context, |mut rx| async move {
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
            if let Some(BuildInfoAux::Default(ImageId { id: Some(id) })) = info.aux {
                built = Some(id);
            }
        }
        match built {
            Some(id) => Ok(BuildEnd::Built(id)),
            // Older daemons only print "Successfully built <short id>": ask for the tag's id.
            // A daemon that went away is an error, not a failed build.
            None => match self.image_id(tag).await? {
                Some(id) => Ok(BuildEnd::Built(id)),
                None => Ok(BuildEnd::Failed(format!(
                    "the build ended without an image (last output: {last_line})"
                ))),
            },
        }
    }

    /// The image id a tag names, if the daemon holds it.
    /// The tags of the image `id` (None: the daemon does not hold it), sorted.
    pub async fn image_tags(&self, id: &str) -> Result<Option<Vec<String>>, DaemonError> {
        match self.docker.inspect_image(id).await {
            Ok(image) => {
                let mut tags: Vec<String> = image
                    .repo_tags
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|t| !t.starts_with("<none>"))
                    .collect();
                tags.sort();
                Ok(Some(tags))
            }
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 404, ..
            }) => Ok(None),
            Err(source) => Err(self.call_error("inspect an image")(source)),
        }
    }

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

/// The build's query, the same for both builders (BuildKit adds its version and session).
/// Labels are image metadata under BuildKit: no step of their own.
fn options(request: &BuildRequest) -> BuildImageOptions {
    BuildImageOptionsBuilder::default()
        .dockerfile(&request.dockerfile)
        .target(request.target.as_deref().unwrap_or(""))
        .t(&request.tag)
        .buildargs(&request.build_args)
        .labels(&request.labels)
        .nocache(request.no_cache)
        .rm(true)
        .forcerm(true)
        .platform(request.platforms.first().map_or("", String::as_str))
        .build()
}
