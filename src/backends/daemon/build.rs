//! Builds on the host daemon: the context tar goes in, the daemon's output streams out as lines.

use std::collections::HashMap;

use bollard::query_parameters::BuildImageOptionsBuilder;
use futures_util::StreamExt;

use super::{Daemon, DaemonError};

/// What one build asks of the builder (the daemon, or `docker buildx` for several platforms).
pub struct BuildRequest {
    /// The tar of the context (from the same walk that computed the address).
    pub context_tar: Vec<u8>,
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
        let body = bollard::body_full(request.context_tar.into());
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
            if let Some(id) = info.aux.and_then(|aux| aux.id) {
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
