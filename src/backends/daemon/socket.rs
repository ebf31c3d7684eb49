//! A raw HTTP/1.1 connection to the daemon, for what bollard does not offer: a BuildKit session that
//! meshtop serves itself (`/session`, upgraded to h2c) and the `/build` that names it.

use std::path::PathBuf;

use hyper::body::{Body, Incoming};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::task::JoinHandle;

/// Where the daemon listens, as `DOCKER_HOST` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    Unix(PathBuf),
    Tcp(String),
}

impl Address {
    /// The address of `endpoint` (`unix:///…` or `tcp://host:port`); Err says why meshtop cannot
    /// open a raw connection there (a TLS endpoint: bollard speaks TLS, meshtop's session does not).
    pub fn parse(endpoint: &str, tls: bool) -> Result<Address, String> {
        if let Some(path) = endpoint.strip_prefix("unix://") {
            return Ok(Address::Unix(PathBuf::from(path)));
        }
        let host = endpoint
            .strip_prefix("tcp://")
            .or_else(|| endpoint.strip_prefix("http://"));
        match host {
            Some(_) if tls => Err(format!(
                "the daemon at {endpoint} is reached over TLS (DOCKER_TLS_VERIFY), which meshtop's BuildKit session does not speak"
            )),
            Some(host) => Ok(Address::Tcp(host.trim_end_matches('/').to_string())),
            None => Err(format!(
                "DOCKER_HOST {endpoint} is neither unix:// nor tcp://, where meshtop opens a BuildKit session"
            )),
        }
    }
}

/// What one connection carries both ways.
pub trait Conn: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Conn for T {}

async fn connect(address: &Address) -> std::io::Result<Box<dyn Conn>> {
    Ok(match address {
        Address::Unix(path) => Box::new(tokio::net::UnixStream::connect(path).await?),
        Address::Tcp(host) => Box::new(tokio::net::TcpStream::connect(host.as_str()).await?),
    })
}

/// Send one request on a connection of its own. The connection is driven by a task (upgrades
/// allowed) that lives as long as the returned handle: abort it to drop the connection.
pub async fn send<B>(
    address: &Address,
    request: http::Request<B>,
) -> Result<(http::Response<Incoming>, JoinHandle<()>), String>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let io = connect(address)
        .await
        .map_err(|e| format!("cannot connect to the daemon at {address:?}: {e}"))?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("the daemon did not speak HTTP: {e}"))?;
    let driver = tokio::spawn(async move {
        let _ = connection.with_upgrades().await;
    });
    match sender.send_request(request).await {
        Ok(response) => Ok((response, driver)),
        Err(e) => {
            driver.abort();
            Err(format!("the daemon dropped the request: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_as_docker_host_writes_them() {
        assert_eq!(
            Address::parse("unix:///var/run/docker.sock", false),
            Ok(Address::Unix("/var/run/docker.sock".into()))
        );
        assert_eq!(
            Address::parse("tcp://127.0.0.1:2375", false),
            Ok(Address::Tcp("127.0.0.1:2375".into()))
        );
        assert!(Address::parse("tcp://127.0.0.1:2376", true).is_err());
        assert!(Address::parse("ssh://me@host", false).is_err());
    }
}
