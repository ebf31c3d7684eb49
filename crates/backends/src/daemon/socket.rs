//! A raw HTTP/1.1 connection to the daemon, for what bollard does not offer: a BuildKit session that
//! meshtop serves itself (`/session`, upgraded to h2c) and the `/build` that names it. It goes where
//! bollard goes, over the same transport: a unix socket, TCP, TCP with TLS (the builder's `tls_dir`,
//! verified as bollard verifies it) or ssh (the dialer's socket, each connection one ssh).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hyper::body::{Body, Incoming};
use hyper_util::rt::TokioIo;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;

use crate::mesh::builders::Endpoint;

/// Where a raw connection to the daemon is opened: made from the daemon's typed endpoint once,
/// when it is connected, never read back from text.
#[derive(Clone)]
pub enum Address {
    Unix(PathBuf),
    /// `host:port`.
    Tcp(String),
    /// `host:port`, the name its certificate must carry, and the client set-up of its `tls_dir`.
    Tls {
        host_port: String,
        server_name: ServerName<'static>,
        connector: tokio_rustls::TlsConnector,
    },
}

impl fmt::Debug for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Address::Unix(path) => write!(f, "unix://{}", path.display()),
            Address::Tcp(host_port) => write!(f, "tcp://{host_port}"),
            Address::Tls { host_port, .. } => write!(f, "tcp://{host_port} (TLS)"),
        }
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Why a builder's TLS set-up could not be read: the file and what is wrong with it.
#[derive(Debug, thiserror::Error)]
pub enum TlsFilesError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds no PEM {what}")]
    Empty { path: PathBuf, what: &'static str },
    #[error("{path} is not PEM: {source}")]
    Pem {
        path: PathBuf,
        source: rustls_pki_types::pem::Error,
    },
    #[error("{path}: {source}")]
    Rustls {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("the host {host} is not a name a certificate can carry: {source}")]
    ServerName {
        host: String,
        source: rustls_pki_types::InvalidDnsNameError,
    },
}

/// Why no raw connection can be opened at an endpoint.
#[derive(Debug, thiserror::Error)]
pub enum AddressError {
    #[error(transparent)]
    Tls(#[from] TlsFilesError),
    /// The local daemon is resolved from `DOCKER_HOST` first, an ssh endpoint reached through its
    /// dialer's socket: neither names a socket by itself.
    #[error("{0} names no socket by itself")]
    Indirect(String),
}

impl Address {
    /// The address of an endpoint that names its socket (`unix://`, `tcp://` with or without TLS).
    pub fn of(endpoint: &Endpoint) -> Result<Address, AddressError> {
        Ok(match endpoint {
            Endpoint::Unix(path) => Address::Unix(path.clone()),
            Endpoint::Tcp {
                host,
                port,
                tls_dir: None,
            } => Address::Tcp(host_port(host, *port)),
            Endpoint::Tcp {
                host,
                port,
                tls_dir: Some(dir),
            } => {
                let server_name = ServerName::try_from(host.clone()).map_err(|source| {
                    TlsFilesError::ServerName {
                        host: host.clone(),
                        source,
                    }
                })?;
                Address::Tls {
                    host_port: host_port(host, *port),
                    server_name,
                    connector: tokio_rustls::TlsConnector::from(Arc::new(client_config(dir)?)),
                }
            }
            Endpoint::Local | Endpoint::Ssh { .. } => {
                return Err(AddressError::Indirect(endpoint.to_string()));
            }
        })
    }
}

/// `host:port`, an IPv6 host in brackets.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// The TLS client of a `tls_dir` as the docker CLI reads one (`DOCKER_CERT_PATH`: `ca.pem`,
/// `cert.pem`, `key.pem`) and as bollard builds it (`Docker::connect_with_ssl`, bollard
/// `src/docker.rs`): the system's roots and `ca.pem`, the client certificate and key.
pub fn client_config(dir: &Path) -> Result<rustls::ClientConfig, TlsFilesError> {
    crate::registry::install_crypto_provider();
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path)
            .map(|bytes| (path.clone(), bytes))
            .map_err(|source| TlsFilesError::Read { path, source })
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let (ca_path, ca) = read("ca.pem")?;
    let cas = certificates(&ca_path, &ca)?;
    roots.add_parsable_certificates(cas);
    let (cert_path, cert) = read("cert.pem")?;
    let chain = certificates(&cert_path, &cert)?;
    let (key_path, key) = read("key.pem")?;
    let key = PrivateKeyDer::from_pem_slice(&key).map_err(|source| match source {
        rustls_pki_types::pem::Error::NoItemsFound => TlsFilesError::Empty {
            path: key_path.clone(),
            what: "private key",
        },
        source => TlsFilesError::Pem {
            path: key_path.clone(),
            source,
        },
    })?;
    rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(|source| TlsFilesError::Rustls {
            path: cert_path,
            source,
        })
}

fn certificates(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsFilesError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsFilesError::Pem {
            path: path.to_path_buf(),
            source,
        })?;
    if certs.is_empty() {
        return Err(TlsFilesError::Empty {
            path: path.to_path_buf(),
            what: "certificate",
        });
    }
    Ok(certs)
}

/// Why a raw request to the daemon did not get its answer.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    #[error("cannot connect to the daemon at {address}: {source}")]
    Connect {
        address: String,
        source: std::io::Error,
    },
    #[error("the TLS handshake with the daemon at {address} failed: {source}")]
    Handshake {
        address: String,
        source: std::io::Error,
    },
    #[error("the daemon did not speak HTTP: {0}")]
    Http(#[source] hyper::Error),
    #[error("the daemon dropped the request: {0}")]
    Dropped(#[source] hyper::Error),
}

/// What one connection carries both ways.
pub trait Conn: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Conn for T {}

async fn connect(address: &Address) -> Result<Box<dyn Conn>, SocketError> {
    let refused = |source| SocketError::Connect {
        address: address.to_string(),
        source,
    };
    Ok(match address {
        Address::Unix(path) => Box::new(
            tokio::net::UnixStream::connect(path)
                .await
                .map_err(refused)?,
        ),
        Address::Tcp(host) => Box::new(
            tokio::net::TcpStream::connect(host.as_str())
                .await
                .map_err(refused)?,
        ),
        Address::Tls {
            host_port,
            server_name,
            connector,
        } => {
            let tcp = tokio::net::TcpStream::connect(host_port.as_str())
                .await
                .map_err(refused)?;
            let tls = connector
                .connect(server_name.clone(), tcp)
                .await
                .map_err(|source| SocketError::Handshake {
                    address: address.to_string(),
                    source,
                })?;
            Box::new(tls)
        }
    })
}

/// Send one request on a connection of its own. The connection is driven by a task (upgrades
/// allowed) that lives as long as the returned handle: abort it to drop the connection.
pub async fn send<B>(
    address: &Address,
    request: http::Request<B>,
) -> Result<(http::Response<Incoming>, JoinHandle<()>), SocketError>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let io = connect(address).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(SocketError::Http)?;
    let driver = tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    match sender.send_request(request).await {
        Ok(response) => Ok((response, driver)),
        Err(e) => {
            driver.abort();
            Err(SocketError::Dropped(e))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_from_the_typed_endpoint() {
        let of = |text: &str| Address::of(&Endpoint::parse(text).unwrap()).unwrap();
        assert_eq!(
            of("unix:///var/run/docker.sock").to_string(),
            "unix:///var/run/docker.sock"
        );
        assert_eq!(
            of("tcp://127.0.0.1:2375").to_string(),
            "tcp://127.0.0.1:2375"
        );
        assert_eq!(
            of("tcp://[fd00::2]:2375").to_string(),
            "tcp://[fd00::2]:2375"
        );
        let ssh = Endpoint::parse("ssh://me@host").unwrap();
        assert!(Address::of(&ssh).is_err());
    }

    #[test]
    fn a_tls_dir_without_its_files_says_which_file() {
        let dir = tempfile::tempdir().unwrap();
        let Err(error) = client_config(dir.path()) else {
            panic!("an empty tls_dir made a client");
        };
        assert!(error.to_string().contains("ca.pem"), "{error}");
    }

    #[test]
    fn v6_hosts_get_brackets() {
        assert_eq!(host_port("fd00::2", 2376), "[fd00::2]:2376");
        assert_eq!(host_port("farm", 2376), "farm:2376");
    }
}
