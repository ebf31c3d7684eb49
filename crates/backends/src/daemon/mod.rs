//! The host daemon, through bollard: connection, the labelled-image listing, builds and containers.
//! Connects as Docker's own CLI does: `DOCKER_HOST`, else the default socket, negotiating the API version.

pub mod build;
pub mod buildkit;
mod clone;
pub mod containers;
pub mod endpoint;
pub mod filesync;
pub mod images;
pub mod logs;
pub mod made;
pub mod proof;
pub mod push;
pub mod session;
pub mod socket;
pub mod ssh;
pub mod workers;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bollard::Docker;
use bollard::query_parameters::ListImagesOptionsBuilder;

use crate::mesh::builders::{Endpoint, EndpointProblem};
use crate::mesh::decide::HostImage;
use crate::mesh::model::{MODULE_LABEL, Platform};

/// Errors talking to the daemon; each says where meshtop looked.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(
        "cannot reach the Docker daemon at {endpoint}: {source} — is it running, and may this user use it (DOCKER_HOST, docker group)?"
    )]
    Connect {
        endpoint: String,
        source: bollard::errors::Error,
    },
    #[error("the Docker daemon at {endpoint} failed to {action}: {source}")]
    Call {
        endpoint: String,
        action: &'static str,
        source: bollard::errors::Error,
    },
    #[error("the Docker daemon at {endpoint}: {message}")]
    Refused { endpoint: String, message: String },
    /// Its BuildKit session could not be opened, or its BuildKit build broke off.
    #[error("the Docker daemon at {endpoint} failed to build: {source}")]
    Session {
        endpoint: String,
        source: session::SessionError,
    },
    #[error("the Docker daemon at {endpoint} failed to build: {source}")]
    Buildkit {
        endpoint: String,
        source: buildkit::BuildkitFailure,
    },
}

/// How a build ended on the daemon.
#[derive(Debug)]
pub enum BuildEnd {
    /// The image id the daemon built.
    Built(String),
    /// The daemon said the build failed (a step failed): its message.
    Failed(String),
}

/// A daemon connection made on first use, at most once: a converge the record answers in full
/// never talks to the daemon. A failed connection is remembered, shared (an `Arc`) so that every
/// caller keeps its type.
#[derive(Default)]
pub struct LazyDaemon {
    cell: tokio::sync::OnceCell<Result<Daemon, Arc<DaemonError>>>,
}

impl LazyDaemon {
    pub fn new() -> LazyDaemon {
        LazyDaemon::default()
    }

    /// A daemon already connected (tests, the dashboard's shared connection).
    pub fn with(daemon: Daemon) -> LazyDaemon {
        LazyDaemon {
            cell: tokio::sync::OnceCell::new_with(Some(Ok(daemon))),
        }
    }

    /// The connection, made now if it was never asked for; Err: why it could not be made (the
    /// same error to every caller).
    pub async fn get(&self) -> Result<&Daemon, Arc<DaemonError>> {
        let connect = || async { Daemon::connect().await.map_err(Arc::new) };
        let result = self.cell.get_or_init(connect).await;
        result.as_ref().map_err(Arc::clone)
    }

    /// Whether a connection was attempted.
    pub fn was_asked(&self) -> bool {
        self.cell.initialized()
    }
}

/// Why meshtop cannot open its own connection (the BuildKit session) where bollard connects.
#[derive(Debug, thiserror::Error)]
pub enum SessionAddressError {
    #[error(transparent)]
    Address(#[from] socket::AddressError),
    #[error(transparent)]
    DockerHost(#[from] EndpointProblem),
}

/// A connection to the host daemon.
#[derive(Clone)]
pub struct Daemon {
    docker: Docker,
    /// Where it listens, typed: a builder's endpoint, or `DOCKER_HOST` read by the same grammar.
    endpoint: Endpoint,
    /// Where meshtop's own connections (the BuildKit session, its build) go: bollard's transport,
    /// made from the typed endpoint once, when the daemon is connected.
    session_address: Result<socket::Address, Arc<SessionAddressError>>,
    /// Asked on first use: most meshes set their platforms, and connecting is one round trip.
    platform: tokio::sync::OnceCell<Platform>,
    /// Set once BuildKit proved impossible here: why builds use the legacy builder.
    legacy: std::sync::Arc<std::sync::OnceLock<String>>,
    /// Reached over ssh: the socket that dials it, kept as long as the daemon is.
    ssh: Option<std::sync::Arc<ssh::SshDialer>>,
}

/// The local daemon as the docker CLI resolves it: `DOCKER_HOST` (else the default socket), TLS
/// with `DOCKER_CERT_PATH` (else `~/.docker`) when `DOCKER_TLS_VERIFY` is set.
pub fn local_endpoint() -> Result<Endpoint, EndpointProblem> {
    let host = std::env::var("DOCKER_HOST").ok().filter(|h| !h.is_empty());
    let tls = std::env::var("DOCKER_TLS_VERIFY").is_ok_and(|v| !v.is_empty());
    let cert_dir = tls.then(|| {
        std::env::var_os("DOCKER_CERT_PATH")
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from)
            .or_else(|| directories::BaseDirs::new().map(|d| d.home_dir().join(".docker")))
            .unwrap_or_default()
    });
    Endpoint::of_docker_host(host.as_deref(), cert_dir)
}

impl Daemon {
    /// Connect and negotiate the API version (one call).
    pub async fn connect() -> Result<Daemon, DaemonError> {
        let local = local_endpoint();
        let shown = match &local {
            Ok(endpoint) => endpoint.to_string(),
            Err(_) => std::env::var("DOCKER_HOST").unwrap_or_default(),
        };
        let connect_error = |source| DaemonError::Connect {
            endpoint: shown.clone(),
            source,
        };
        let docker = Docker::connect_with_defaults()
            .map_err(connect_error)?
            .with_timeout(Duration::from_secs(600))
            .negotiate_version()
            .await
            .map_err(connect_error)?;
        Ok(match local {
            Ok(endpoint) => {
                let address = socket::Address::of(&endpoint).map_err(|e| Arc::new(e.into()));
                Daemon::from_parts(docker, endpoint, address)
            }
            Err(problem) => {
                Daemon::from_parts(docker, Endpoint::Local, Err(Arc::new(problem.into())))
            }
        })
    }

    /// A daemon over a connection made and negotiated already.
    fn from_parts(
        docker: Docker,
        endpoint: Endpoint,
        session_address: Result<socket::Address, Arc<SessionAddressError>>,
    ) -> Daemon {
        Daemon {
            docker,
            endpoint,
            session_address,
            platform: tokio::sync::OnceCell::new(),
            legacy: std::sync::Arc::default(),
            ssh: None,
        }
    }

    /// Map a failed call doing `action` to an error naming the daemon.
    fn call_error(
        &self,
        action: &'static str,
    ) -> impl FnOnce(bollard::errors::Error) -> DaemonError + '_ {
        move |source| DaemonError::Call {
            endpoint: self.endpoint.to_string(),
            action,
            source,
        }
    }

    /// The bollard client, for the other parts of this backend.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The daemon's own platform: what an unset `platforms` means (asked once).
    pub async fn platform(&self) -> Result<&Platform, DaemonError> {
        self.platform
            .get_or_try_init(|| async {
                let version = self
                    .docker
                    .version()
                    .await
                    .map_err(self.call_error("ask its platform"))?;
                let arch = version.arch.unwrap_or_default();
                let os = version.os.unwrap_or_else(|| "linux".into());
                Ok(Platform::parse(&format!("{os}/{arch}")).unwrap_or_else(|_| Platform::local()))
            })
            .await
    }

    /// Every image stamped with meshtop's module label, in ONE call (no per-image inspect).
    pub async fn labelled_images(&self) -> Result<Vec<HostImage>, DaemonError> {
        // `all`: an untagged image that is still a parent (a base whose tag was removed) is held too.
        Ok(self
            .labelled_summaries(true)
            .await?
            .into_iter()
            .map(|summary| HostImage {
                id: summary.id,
                tags: real_tags(summary.repo_tags),
                labels: summary.labels,
                vouched_as: None,
            })
            .collect())
    }

    /// The daemon's listing of the images carrying meshtop's module label (one call); `all` keeps
    /// untagged parents too.
    pub(super) async fn labelled_summaries(
        &self,
        all: bool,
    ) -> Result<Vec<bollard::models::ImageSummary>, DaemonError> {
        let filters: HashMap<&str, Vec<&str>> = HashMap::from([("label", vec![MODULE_LABEL])]);
        let options = ListImagesOptionsBuilder::default()
            .all(all)
            .filters(&filters)
            .build();
        self.docker
            .list_images(Some(options))
            .await
            .map_err(self.call_error("list images"))
    }
}

/// An image's tags without the daemon's `<none>:<none>` placeholder.
pub(super) fn real_tags(tags: Vec<String>) -> Vec<String> {
    tags.into_iter()
        .filter(|tag| tag != "<none>:<none>")
        .collect()
}
