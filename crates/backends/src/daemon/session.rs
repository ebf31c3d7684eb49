//! The BuildKit session of one build: meshtop asks the daemon to upgrade `/session` to h2c and
//! serves gRPC on it — the daemon is the client. BuildKit asks it for the module's secrets
//! (`RUN --mount=type=secret`) and, when the module asks for it, for the ssh agent
//! (`RUN --mount=type=ssh`). The protocol is moby's `session/manager.go` (headers) and BuildKit's
//! `session/secrets/secrets.proto`, `session/sshforward/ssh.proto`; the daemon checks the session's
//! health (`grpc.health.v1`) while it holds it. When the build's context is served rather than sent
//! as a tar, BuildKit asks the session for it too (see [`super::filesync`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::pin::Pin;

use bollard::health::health_server::{Health, HealthServer};
use bollard::health::{
    HealthCheckRequest, HealthCheckResponse, HealthListRequest, HealthListResponse,
    health_check_response::ServingStatus,
};
use bollard::moby::buildkit::secrets::v1::secrets_server::{Secrets, SecretsServer};
use bollard::moby::buildkit::secrets::v1::{GetSecretRequest, GetSecretResponse};
use bollard::moby::sshforward::v1::ssh_server::{Ssh, SshServer};
use bollard::moby::sshforward::v1::{BytesMessage, CheckAgentRequest, CheckAgentResponse};
use futures_util::{Stream, StreamExt};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinHandle;
use tonic::server::NamedService;
use tonic::{Request, Response, Status, Streaming};

use super::filesync::{ContextSync, Served};
use super::socket::{self, Address};
use bollard::moby::filesync::v1::file_sync_server::FileSyncServer;

/// Secret values by id, held in memory for one build only. Its `Debug` never shows a value.
#[derive(Default, Clone)]
pub struct SecretValues(pub HashMap<String, Vec<u8>>);

impl std::fmt::Debug for SecretValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut ids: Vec<&String> = self.0.keys().collect();
        ids.sort();
        write!(f, "SecretValues({ids:?})")
    }
}

/// An open session: its id names it to `/build`; dropping it ends it.
pub struct Session {
    pub id: String,
    /// The context it serves, if it serves one (`/build` then names no tar).
    pub(super) served: Option<Served>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Session {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Why a session could not be opened: the daemon cannot (it has no BuildKit session endpoint),
/// or the call failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The daemon itself serves no BuildKit session: the legacy builder is all it has.
    #[error("the daemon answered a BuildKit session with {0}")]
    Unsupported(http::StatusCode),
    #[error("cannot write the session's request: {0}")]
    Request(#[source] http::Error),
    #[error("the BuildKit session could not be opened: {0}")]
    Socket(#[source] socket::SocketError),
    #[error("the session was not upgraded: {0}")]
    Upgrade(#[source] hyper::Error),
}

/// What one session serves besides its health.
pub struct Serving {
    pub secrets: SecretValues,
    /// The ssh agent's socket, when the module asks for it.
    pub ssh_agent: Option<PathBuf>,
    /// The build context, when it is served rather than sent as a tar.
    pub context: Option<Served>,
}

/// Open a session serving `secrets`, the ssh agent when `ssh_agent` names a socket, and the build
/// context when there is one to serve.
pub async fn open(address: &Address, api: &str, serving: Serving) -> Result<Session, SessionError> {
    let Serving {
        secrets,
        ssh_agent,
        context,
    } = serving;
    let id = uuid::Uuid::now_v7().simple().to_string();
    let mut methods = vec![
        format!("/{}/Check", HealthServer::<Alive>::NAME),
        format!("/{}/GetSecret", SecretsServer::<SecretStore>::NAME),
    ];
    if ssh_agent.is_some() {
        methods.push(format!("/{}/CheckAgent", SshServer::<Agent>::NAME));
        methods.push(format!("/{}/ForwardAgent", SshServer::<Agent>::NAME));
    }
    if context.is_some() {
        methods.push(format!("/{}/DiffCopy", FileSyncServer::<ContextSync>::NAME));
    }
    // BuildKit keeps a received context under its local's name and this key: the same context
    // sent again is compared with what it kept.
    let shared_key = context
        .as_ref()
        .map_or("", |served| served.context.cache_key.as_str())
        .to_string();
    let mut request = http::Request::post(format!("/v{api}/session"))
        .header(http::header::HOST, "docker")
        .header(http::header::CONNECTION, "Upgrade")
        .header(http::header::UPGRADE, "h2c")
        .header("X-Docker-Expose-Session-Uuid", &id)
        .header("X-Docker-Expose-Session-Name", "meshtop")
        .header("X-Docker-Expose-Session-Sharedkey", shared_key);
    for method in &methods {
        request = request.header("X-Docker-Expose-Session-Grpc-Method", method);
    }
    let request = request
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(SessionError::Request)?;
    let (response, driver) = socket::send(address, request)
        .await
        .map_err(SessionError::Socket)?;
    if response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        driver.abort();
        return Err(SessionError::Unsupported(response.status()));
    }
    let upgraded = hyper::upgrade::on(response)
        .await
        .map_err(SessionError::Upgrade)?;
    let io = Upgraded(TokioIo::new(upgraded));
    let agent = ssh_agent.map(|socket| SshServer::new(Agent { socket }));
    let sync = context
        .clone()
        .map(|served| FileSyncServer::new(ContextSync(served)));
    let server = tokio::spawn(async move {
        let router = tonic::transport::Server::builder()
            .add_service(HealthServer::new(Alive))
            .add_service(SecretsServer::new(SecretStore(secrets)))
            .add_optional_service(agent)
            .add_optional_service(sync);
        let incoming = futures_util::stream::iter([Ok::<_, std::io::Error>(io)]);
        if let Err(error) = router.serve_with_incoming(incoming).await {
            tracing::debug!("the BuildKit session ended: {error}");
        }
    });
    Ok(Session {
        id,
        served: context,
        tasks: vec![server, driver],
    })
}

/// The upgraded connection, as tonic's server takes one.
struct Upgraded(TokioIo<hyper::upgrade::Upgraded>);

impl tonic::transport::server::Connected for Upgraded {
    type ConnectInfo = ();
    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for Upgraded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Upgraded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The session is alive as long as it answers.
struct Alive;

#[tonic::async_trait]
impl Health for Alive {
    async fn check(
        &self,
        _: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        Ok(Response::new(HealthCheckResponse {
            status: ServingStatus::Serving as i32,
        }))
    }

    async fn list(
        &self,
        _: Request<HealthListRequest>,
    ) -> Result<Response<HealthListResponse>, Status> {
        Err(Status::unimplemented("list"))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<HealthCheckResponse, Status>> + Send>>;

    async fn watch(
        &self,
        _: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("watch"))
    }
}

struct SecretStore(SecretValues);

#[tonic::async_trait]
impl Secrets for SecretStore {
    async fn get_secret(
        &self,
        request: Request<GetSecretRequest>,
    ) -> Result<Response<GetSecretResponse>, Status> {
        let id = &request.get_ref().id;
        // NotFound is what BuildKit expects of an unknown id (`required=false` mounts skip it).
        match self.0.0.get(id) {
            Some(value) => Ok(Response::new(GetSecretResponse {
                data: value.clone(),
            })),
            None => Err(Status::not_found(format!(
                "secret {id} is not declared in the module's `secrets`"
            ))),
        }
    }
}

/// The ssh agent at `socket` (`SSH_AUTH_SOCK`), forwarded as BuildKit's `default` id.
struct Agent {
    socket: PathBuf,
}

#[tonic::async_trait]
impl Ssh for Agent {
    async fn check_agent(
        &self,
        request: Request<CheckAgentRequest>,
    ) -> Result<Response<CheckAgentResponse>, Status> {
        let id = &request.get_ref().id;
        if !id.is_empty() && id != "default" {
            return Err(Status::not_found(format!(
                "ssh id {id}: meshtop forwards the agent as `default` only"
            )));
        }
        Ok(Response::new(CheckAgentResponse {}))
    }

    type ForwardAgentStream = Pin<Box<dyn Stream<Item = Result<BytesMessage, Status>> + Send>>;

    async fn forward_agent(
        &self,
        request: Request<Streaming<BytesMessage>>,
    ) -> Result<Response<Self::ForwardAgentStream>, Status> {
        let agent = tokio::net::UnixStream::connect(&self.socket)
            .await
            .map_err(|e| Status::unavailable(format!("the ssh agent: {e}")))?;
        let (from_agent, mut to_agent) = agent.into_split();
        let mut inbound = request.into_inner();
        tokio::spawn(async move {
            while let Some(Ok(message)) = inbound.next().await {
                if to_agent.write_all(&message.data).await.is_err() {
                    break;
                }
            }
            let _ = to_agent.shutdown().await;
        });
        let outbound = futures_util::stream::unfold(from_agent, |mut from_agent| async move {
            let mut buf = vec![0u8; 32 * 1024];
            match from_agent.read(&mut buf).await {
                Ok(0) | Err(_) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(BytesMessage { data: buf }), from_agent))
                }
            }
        });
        Ok(Response::new(Box::pin(outbound)))
    }
}
