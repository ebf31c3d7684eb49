//! Daemons other than the one `DOCKER_HOST` names: a builder's endpoint from the mesh file
//! (`unix://`, `tcp://` with or without a `DOCKER_CERT_PATH`-style TLS directory), what the daemon
//! is (its identity, version, platform), and whether it can push to the mesh's registry.

use std::time::Duration;

use bollard::{API_DEFAULT_VERSION, Docker};
use bytes::Bytes;
use futures_util::StreamExt;

use super::push::push_image;
use super::socket::{Address, host_port};
use super::{Daemon, DaemonError};
use crate::credentials::Credentials;
use crate::mesh::builders::Endpoint;
use crate::mesh::model::Platform;

/// How long a call to a builder may take before it reads as unreachable (a build streams for
/// longer: its own deadline is the engine's).
const CALL_TIMEOUT_SECS: u64 = 600;

/// What tells two daemons apart. Daemons cloned from one image (or started beside each other on
/// one host) can share the engine `ID`, so its root directory goes with it: two daemons of one
/// host never share a data root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub id: String,
    pub root_dir: String,
    /// The host name it reports, for people.
    pub name: String,
}

/// What a builder says of itself when asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub identity: Identity,
    /// The engine's version (`27.3.1`) and its API version.
    pub version: String,
    pub api_version: String,
    /// Its own platform (what it runs natively).
    pub platform: Platform,
    /// Every platform it builds, its own first, then those it emulates: read from its BuildKit's
    /// workers (`workers.rs`); its own alone when it cannot say (`platforms_unread` says why).
    pub builds: Vec<Platform>,
    pub platforms_unread: Option<String>,
}

impl Described {
    /// The platforms it builds under emulation: an architecture its CPU does not run (BuildKit
    /// also names its own architecture's variants, `linux/amd64/v2`, and the 32-bit one an amd64
    /// or arm64 CPU runs itself, `linux/386`, `linux/arm`).
    pub fn emulated(&self) -> Vec<Platform> {
        self.builds
            .iter()
            .filter(|p| !runs_natively(&self.platform, p))
            .cloned()
            .collect()
    }
}

/// Whether a CPU of `own` runs `other`'s binaries itself.
pub fn runs_natively(own: &Platform, other: &Platform) -> bool {
    own.os == other.os
        && (own.arch == other.arch
            || matches!(
                (own.arch.as_str(), other.arch.as_str()),
                ("amd64", "386") | ("arm64", "arm")
            ))
}

impl Daemon {
    /// Connect to the daemon at `endpoint` and negotiate the API version. `Endpoint::Local` is the
    /// daemon `DOCKER_HOST` names (as [`Daemon::connect`]). An ssh endpoint is dialled as the docker
    /// CLI dials it (`ssh.rs`); when ssh fails, its own words are the error. A TLS endpoint whose
    /// certificate does not verify, or that refuses the client's, says which.
    pub async fn connect_at(endpoint: &Endpoint) -> Result<Daemon, DaemonError> {
        let shown = endpoint.to_string();
        let refused = |message: String| DaemonError::Refused {
            endpoint: shown.clone(),
            message,
        };
        let mut dialer = None;
        let (docker, address) = match endpoint {
            Endpoint::Local => return Daemon::connect().await,
            Endpoint::Unix(path) => (
                Docker::connect_with_unix(
                    &path.to_string_lossy(),
                    CALL_TIMEOUT_SECS,
                    API_DEFAULT_VERSION,
                ),
                Address::of(endpoint),
            ),
            Endpoint::Tcp {
                host,
                port,
                tls_dir: None,
            } => (
                Docker::connect_with_http(
                    &format!("tcp://{}", host_port(host, *port)),
                    CALL_TIMEOUT_SECS,
                    API_DEFAULT_VERSION,
                ),
                Address::of(endpoint),
            ),
            Endpoint::Tcp {
                host,
                port,
                tls_dir: Some(dir),
            } => {
                // The session's TLS client first: a tls_dir bollard cannot read either is said
                // naming the file.
                let address = Address::of(endpoint).map_err(|e| refused(e.to_string()))?;
                let docker = Docker::connect_with_ssl(
                    &host_port(host, *port),
                    &dir.join("key.pem"),
                    &dir.join("cert.pem"),
                    &dir.join("ca.pem"),
                    CALL_TIMEOUT_SECS,
                    API_DEFAULT_VERSION,
                );
                (docker, Ok(address))
            }
            Endpoint::Ssh { user, host, port } => {
                let args = super::ssh::ssh_args(user.as_deref(), host, *port);
                let ssh = super::ssh::SshDialer::start(&shown, args)?;
                let docker = Docker::connect_with_unix(
                    &ssh.socket().to_string_lossy(),
                    CALL_TIMEOUT_SECS,
                    API_DEFAULT_VERSION,
                );
                // The session goes where bollard goes: through the dialer, one ssh per connection.
                let address = Address::Unix(ssh.socket().to_path_buf());
                dialer = Some(std::sync::Arc::new(ssh));
                (docker, Ok(address))
            }
        };
        let connect_error = |source| DaemonError::Connect {
            endpoint: shown.clone(),
            source,
        };
        let negotiated = docker
            .map_err(connect_error)?
            .with_timeout(Duration::from_secs(CALL_TIMEOUT_SECS))
            .negotiate_version()
            .await;
        if negotiated.is_err()
            && let Some(ssh) = &dialer
        {
            // The ssh that failed says why as it exits, a moment after the socket closed.
            for _ in 0..20 {
                if ssh.said().is_some() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        let docker = match (negotiated, &dialer) {
            (Ok(docker), _) => docker,
            // What ssh said (a refused key, an unknown host) is the reason, not the socket's EOF.
            (Err(_), Some(ssh)) if ssh.said().is_some() => {
                return Err(refused(format!(
                    "ssh could not reach its daemon: {}",
                    ssh.said().unwrap_or_default()
                )));
            }
            (Err(error), _) => match (tls_refusal(&error), endpoint) {
                (
                    Some(why),
                    Endpoint::Tcp {
                        tls_dir: Some(dir), ..
                    },
                ) => {
                    return Err(refused(why.say(dir, &error)));
                }
                _ => return Err(connect_error(error)),
            },
        };
        let address = address.map_err(|e| std::sync::Arc::new(e.into()));
        let mut daemon = Daemon::from_parts(docker, endpoint.clone(), address);
        daemon.ssh = dialer;
        Ok(daemon)
    }

    /// Who the daemon is, its version and its own platform (two calls).
    pub async fn describe(&self) -> Result<Described, DaemonError> {
        let identity = self.identity().await?;
        let version = self
            .docker
            .version()
            .await
            .map_err(self.call_error("say its version"))?;
        let platform = self.platform().await?.clone();
        let (mut builds, platforms_unread) = match self.worker_platforms().await {
            Ok(builds) => (builds, None),
            Err(why) => (Vec::new(), Some(why.to_string())),
        };
        if !builds.contains(&platform) {
            builds.insert(0, platform.clone());
        }
        Ok(Described {
            identity,
            version: version.version.unwrap_or_default(),
            api_version: version.api_version.unwrap_or_default(),
            platform,
            builds,
            platforms_unread,
        })
    }

    /// The daemon's identity: its `ID` and its `DockerRootDir` (one call).
    pub async fn identity(&self) -> Result<Identity, DaemonError> {
        let info = self
            .docker
            .info()
            .await
            .map_err(self.call_error("say who it is"))?;
        Ok(Identity {
            id: info.id.unwrap_or_default(),
            root_dir: info.docker_root_dir.unwrap_or_default(),
            name: info.name.unwrap_or_default(),
        })
    }

    /// Whether the daemon can push to the registry with `creds`: an image made of one empty layer
    /// and no label (so no check of meshtop's ever takes it for a module's artifact) is imported,
    /// tagged `reference` and pushed; its manifest digest.
    pub async fn check_push(
        &self,
        reference: &str,
        creds: Option<&Credentials>,
    ) -> Result<String, DaemonError> {
        let (repository, tag) = crate::registry::split_reference(reference);
        let options = bollard::query_parameters::CreateImageOptionsBuilder::new()
            .from_src("-")
            .repo(repository)
            .tag(tag)
            .build();
        // An empty tar: two zero blocks of 512 bytes.
        let body = bollard::body_full(Bytes::from(vec![0u8; 1024]));
        let mut stream = self.docker.create_image(Some(options), Some(body), None);
        while let Some(item) = stream.next().await {
            let info = item.map_err(self.call_error("import the push check's image"))?;
            if let Some(message) = info.error_detail.and_then(|d| d.message) {
                return Err(self.refused(format!("importing the push check's image: {message}")));
            }
        }
        push_image(&self.docker, reference, creds)
            .await
            .map_err(|e| self.refused(e.to_string()))
    }

    /// Where it listens: the mesh file's endpoint, or `DOCKER_HOST` read by the same grammar.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// How a TLS handshake failed, as rustls says it (bollard keeps rustls' error in its source chain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TlsRefusal {
    /// The daemon's certificate does not verify against the `ca.pem` (and the system's roots).
    ServerCertificate,
    /// The daemon refused the client's certificate (an alert during or right after the handshake).
    ClientCertificate,
}

impl TlsRefusal {
    fn say(self, dir: &std::path::Path, error: &(dyn std::error::Error + 'static)) -> String {
        let cause = rustls_error(error).map_or_else(|| error.to_string(), |e| e.to_string());
        match self {
            TlsRefusal::ServerCertificate => format!(
                "its TLS certificate does not verify against {} ({cause}): put the CA that signed the daemon's certificate there",
                dir.join("ca.pem").display()
            ),
            TlsRefusal::ClientCertificate => format!(
                "it refused the client certificate {} ({cause}): the daemon's --tlscacert must have signed it",
                dir.join("cert.pem").display()
            ),
        }
    }
}

/// The rustls error somewhere in `error`'s chain: io errors hide theirs behind `get_ref`.
fn rustls_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(found) = e.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            && let Some(found) = rustls_error(inner)
        {
            return Some(found);
        }
        next = e.source();
    }
    None
}

fn tls_refusal(error: &(dyn std::error::Error + 'static)) -> Option<TlsRefusal> {
    use rustls::AlertDescription as Alert;
    match rustls_error(error)? {
        rustls::Error::InvalidCertificate(_) => Some(TlsRefusal::ServerCertificate),
        rustls::Error::AlertReceived(
            Alert::BadCertificate
            | Alert::UnknownCA
            | Alert::CertificateRequired
            | Alert::CertificateUnknown
            | Alert::UnsupportedCertificate
            | Alert::CertificateExpired
            | Alert::AccessDenied,
        ) => Some(TlsRefusal::ClientCertificate),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_ssh_endpoint_that_ssh_cannot_reach_says_sshs_own_reason() {
        // A host name no resolver knows (`.invalid`, RFC 2606): ssh itself says why it failed.
        let endpoint = Endpoint::parse("ssh://ci@farm-1.invalid").unwrap();
        let Err(error) = Daemon::connect_at(&endpoint).await else {
            panic!("an unreachable ssh endpoint connected");
        };
        let text = error.to_string();
        assert!(text.contains("ssh://ci@farm-1.invalid"), "{text}");
        assert!(text.contains("ssh could not reach its daemon"), "{text}");
        assert!(text.contains("farm-1.invalid"), "{text}");
    }

    #[tokio::test]
    async fn a_socket_that_is_not_there_is_said_with_its_path() {
        let endpoint = Endpoint::parse("unix:///nonexistent/meshtop/docker.sock").unwrap();
        let Err(error) = Daemon::connect_at(&endpoint).await else {
            panic!("a missing socket connected");
        };
        assert!(
            error
                .to_string()
                .contains("unix:///nonexistent/meshtop/docker.sock"),
            "{error}"
        );
    }
}
