//! Builders as the mesh file declares them (`[[builder]]`): a name, where its Docker daemon listens,
//! how many builds it takes at once, which platforms it builds. Without any, the local daemon is the
//! one builder, as before builders had names.

use std::fmt;
use std::path::PathBuf;

use super::platform::Platform;

/// The name the local daemon goes by when the mesh declares no builder.
pub const LOCAL_BUILDER: &str = "local";

/// The docker CLI's default socket (and its `/run` spelling: `/var/run` is a link to `/run`).
const LOCAL_SOCKETS: &[&str] = &[DEFAULT_SOCKET, "/run/docker.sock"];

/// Where the docker CLI looks when `DOCKER_HOST` is unset.
pub(crate) const DEFAULT_SOCKET: &str = "/var/run/docker.sock";

/// One builder of the mesh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Builder {
    pub name: String,
    pub endpoint: Endpoint,
    /// Builds it takes at once (`max_builds`, default 1); meshtop counts them itself.
    pub max_builds: u32,
    /// What it builds (`platforms`); empty: its daemon's own.
    pub platforms: Vec<Platform>,
    /// 1-based line of its `[[builder]]` table (0: the implicit local builder).
    pub line: usize,
    /// It may be given modules' secrets and the forwarded ssh agent (`takes_secrets = true`; the
    /// implicit local builder does). Honoured only over a private transport
    /// ([`Builder::may_take_secrets`]).
    pub takes_secrets: bool,
}

impl Builder {
    /// The local daemon as the one builder of a mesh that declares none.
    pub fn local() -> Builder {
        Builder {
            name: LOCAL_BUILDER.to_string(),
            endpoint: Endpoint::Local,
            max_builds: 1,
            platforms: Vec::new(),
            line: 0,
            takes_secrets: true,
        }
    }

    /// A module's secrets and the ssh agent go to this builder: it opted in, and its daemon is
    /// reached over unix, TLS or ssh (never plain `tcp://`, which anyone on the path reads).
    pub(crate) fn may_take_secrets(&self) -> bool {
        self.takes_secrets && self.endpoint.is_private()
    }
}

/// Where a builder's daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The daemon meshtop reaches anyway (`DOCKER_HOST`, else the default socket).
    Local,
    /// `unix:///path/to/docker.sock`.
    Unix(PathBuf),
    /// `tcp://host:port`; with TLS, the directory that holds `ca.pem`, `cert.pem`, `key.pem` (as
    /// `DOCKER_CERT_PATH` does).
    Tcp {
        host: String,
        port: u16,
        tls_dir: Option<PathBuf>,
    },
    /// `ssh://[user@]host[:port]`: dialled as the docker CLI does (`ssh … docker system dial-stdio`).
    Ssh {
        user: Option<String>,
        host: String,
        port: Option<u16>,
    },
}

/// Why an endpoint was refused: what is wrong and how to write it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what}: {fix}")]
pub struct EndpointProblem {
    pub what: String,
    pub fix: &'static str,
}

const ENDPOINT_FIX: &str = "write endpoint = \"unix:///var/run/docker.sock\", \"tcp://host:2376\" (with tls_dir = \"certs\" for TLS) or \"ssh://user@host\"";

impl Endpoint {
    /// Reached over a transport no one on the network path reads: a unix socket, TLS or ssh
    /// (the local daemon counts: it is the user's own).
    pub fn is_private(&self) -> bool {
        !matches!(self, Endpoint::Tcp { tls_dir: None, .. })
    }

    /// Read an endpoint as the docker CLI's `-H` takes it: `unix://`, `tcp://`, `ssh://`.
    pub fn parse(text: &str) -> Result<Endpoint, EndpointProblem> {
        let bad = |what: String| EndpointProblem {
            what,
            fix: ENDPOINT_FIX,
        };
        if let Some(path) = text.strip_prefix("unix://") {
            if !path.starts_with('/') {
                return Err(bad("a unix endpoint names an absolute path".into()));
            }
            return Ok(Endpoint::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = text.strip_prefix("tcp://") {
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            let (host, port) = split_host_port(rest).map_err(|p| bad(p.to_string()))?;
            let port = port.ok_or_else(|| bad("a tcp endpoint names its port".into()))?;
            return Ok(Endpoint::Tcp {
                host,
                port,
                tls_dir: None,
            });
        }
        if let Some(rest) = text.strip_prefix("ssh://") {
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            let (user, at) = match rest.split_once('@') {
                Some(("", at)) => {
                    return Err(bad(format!("the user before '@' in {at} is empty")));
                }
                Some((user, at)) => (Some(user.to_string()), at),
                None => (None, rest),
            };
            let (host, port) = split_host_port(at).map_err(|p| bad(p.to_string()))?;
            return Ok(Endpoint::Ssh { user, host, port });
        }
        Err(bad("it is neither unix://, tcp:// nor ssh://".into()))
    }

    /// The local daemon as the docker CLI resolves it: `DOCKER_HOST` (else the default socket) read
    /// by the same grammar as a builder's endpoint, with `DOCKER_CERT_PATH` as its `tls_dir` when
    /// `DOCKER_TLS_VERIFY` asks for TLS (`cert_dir`).
    pub fn of_docker_host(
        host: Option<&str>,
        cert_dir: Option<PathBuf>,
    ) -> Result<Endpoint, EndpointProblem> {
        let text = host.map_or_else(|| format!("unix://{DEFAULT_SOCKET}"), str::to_string);
        let mut endpoint = Endpoint::parse(&text).map_err(|problem| EndpointProblem {
            what: format!("DOCKER_HOST {text}: {}", problem.what),
            fix: problem.fix,
        })?;
        if let Endpoint::Tcp { tls_dir, .. } = &mut endpoint {
            *tls_dir = cert_dir;
        }
        Ok(endpoint)
    }

    /// Whether this is the daemon meshtop reaches for the Docker target anyway: then a single
    /// builder needs no registry to hand its artifacts over.
    pub fn is_local_daemon(&self) -> bool {
        match self {
            Endpoint::Local => true,
            Endpoint::Unix(path) => LOCAL_SOCKETS.iter().any(|s| path.as_os_str() == *s),
            _ => false,
        }
    }
}

/// What is wrong with an endpoint's `host[:port]` (said as an [`EndpointProblem`]'s what).
#[derive(Debug, thiserror::Error)]
enum HostPortProblem {
    #[error("{0} has a path")]
    Path(String),
    #[error("{0} has an unclosed '['")]
    Unclosed(String),
    #[error("the host is empty")]
    EmptyHost,
    #[error("the port {0:?} is not a number from 1 to 65535")]
    Port(String),
}

fn split_host_port(text: &str) -> Result<(String, Option<u16>), HostPortProblem> {
    if text.contains('/') {
        return Err(HostPortProblem::Path(text.to_string()));
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (v6, after) = rest
            .split_once(']')
            .ok_or_else(|| HostPortProblem::Unclosed(text.to_string()))?;
        (v6, after.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(HostPortProblem::EmptyHost);
    }
    let port = match port {
        None => None,
        Some(p) => Some(
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| HostPortProblem::Port(p.to_string()))?,
        ),
    };
    Ok((host.to_string(), port))
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Local => f.write_str("the local daemon"),
            Endpoint::Unix(path) => write!(f, "unix://{}", path.display()),
            Endpoint::Tcp { host, port, .. } if host.contains(':') => {
                write!(f, "tcp://[{host}]:{port}")
            }
            Endpoint::Tcp { host, port, .. } => write!(f, "tcp://{host}:{port}"),
            Endpoint::Ssh { user, host, port } => {
                f.write_str("ssh://")?;
                if let Some(user) = user {
                    write!(f, "{user}@")?;
                }
                f.write_str(host)?;
                if let Some(port) = port {
                    write!(f, ":{port}")?;
                }
                Ok(())
            }
        }
    }
}

/// Why builders need the mesh's registry: None when they do not (no builder, or the single one is
/// the local daemon). Artifacts cross between builders and to the target through it.
pub fn registry_needed(builders: &[Builder]) -> Option<&'static str> {
    match builders {
        [] => None,
        [one] if one.endpoint.is_local_daemon() => None,
        [_] => Some("its builder is not the local daemon"),
        _ => Some("it declares more than one builder"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_read_as_the_docker_cli_writes_them() {
        assert_eq!(
            Endpoint::parse("unix:///run/b2/docker.sock").unwrap(),
            Endpoint::Unix("/run/b2/docker.sock".into())
        );
        assert_eq!(
            Endpoint::parse("tcp://10.0.0.5:2376").unwrap(),
            Endpoint::Tcp {
                host: "10.0.0.5".into(),
                port: 2376,
                tls_dir: None
            }
        );
        assert_eq!(
            Endpoint::parse("tcp://[fd00::2]:2375").unwrap().to_string(),
            "tcp://[fd00::2]:2375"
        );
        assert_eq!(
            Endpoint::parse("ssh://ci@farm-1:2222").unwrap(),
            Endpoint::Ssh {
                user: Some("ci".into()),
                host: "farm-1".into(),
                port: Some(2222)
            }
        );
        assert_eq!(
            Endpoint::parse("ssh://farm-1").unwrap().to_string(),
            "ssh://farm-1"
        );
        for bad in [
            "unix://relative.sock",
            "tcp://host",
            "tcp://host:0",
            "tcp://host:99999",
            "tcp://:2375",
            "tcp://h:1/path",
            "ssh://@farm",
            "http://host:2375",
            "/var/run/docker.sock",
            "",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad:?} was read");
        }
    }

    #[test]
    fn docker_host_is_read_by_the_same_grammar() {
        assert_eq!(
            Endpoint::of_docker_host(None, None).unwrap(),
            Endpoint::Unix(DEFAULT_SOCKET.into())
        );
        assert_eq!(
            Endpoint::of_docker_host(Some("tcp://h:2376"), Some("/c".into())).unwrap(),
            Endpoint::Tcp {
                host: "h".into(),
                port: 2376,
                tls_dir: Some("/c".into())
            }
        );
        let problem = Endpoint::of_docker_host(Some("npipe:////./pipe/x"), None).unwrap_err();
        assert!(problem.what.contains("DOCKER_HOST npipe"), "{problem:?}");
    }

    #[test]
    fn a_registry_is_needed_past_the_local_daemon() {
        let at = |endpoint: &str| Builder {
            endpoint: Endpoint::parse(endpoint).unwrap(),
            ..Builder::local()
        };
        assert_eq!(registry_needed(&[]), None);
        assert_eq!(registry_needed(&[at("unix:///var/run/docker.sock")]), None);
        assert!(registry_needed(&[at("unix:///run/b2/docker.sock")]).is_some());
        assert!(registry_needed(&[at("tcp://h:2375")]).is_some());
        assert!(
            registry_needed(&[
                at("unix:///var/run/docker.sock"),
                at("unix:///run/docker.sock")
            ])
            .is_some()
        );
    }
}
