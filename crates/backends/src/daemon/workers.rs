//! The platforms a daemon builds, read from the daemon itself: its BuildKit's workers, asked over
//! the daemon's `/grpc` endpoint (upgraded to h2c, as moby's `api/server/router/grpc` serves it)
//! with BuildKit's `Control.ListWorkers`. BuildKit's worker answers its own platform first, then
//! every platform it found it can run by executing a probe binary of that architecture
//! (`util/archutil`: an emulator registered through binfmt_misc counts) — so an emulated platform
//! is one the daemon has just run, never one assumed from the host.

use bollard::moby::buildkit::v1::ListWorkersRequest;
use bollard::moby::buildkit::v1::control_client::ControlClient;

use super::socket;
use super::{Daemon, DaemonError};
use crate::mesh::model::Platform;

impl Daemon {
    /// Every platform the daemon's BuildKit workers build, its own first (duplicates dropped);
    /// Err: the daemon cannot say (no BuildKit, or the call failed), with why.
    pub async fn worker_platforms(&self) -> Result<Vec<Platform>, DaemonError> {
        let address = self
            .buildkit_address()
            .map_err(|why| self.refused(why.to_string()))?;
        let api = self.docker.client_version().to_string();
        let request = http::Request::post(format!("/v{api}/grpc"))
            .header(http::header::HOST, "docker")
            .header(http::header::CONNECTION, "Upgrade")
            .header(http::header::UPGRADE, "h2c")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| self.refused(e.to_string()))?;
        let (response, driver) = socket::send(&address, request)
            .await
            .map_err(|e| self.refused(e.to_string()))?;
        let result = self.list_workers(response).await;
        driver.abort();
        result
    }

    async fn list_workers(
        &self,
        response: http::Response<hyper::body::Incoming>,
    ) -> Result<Vec<Platform>, DaemonError> {
        if response.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            return Err(self.refused(format!(
                "the daemon answered BuildKit's /grpc with {}: it cannot say which platforms it builds",
                response.status()
            )));
        }
        let upgraded = hyper::upgrade::on(response)
            .await
            .map_err(|e| self.refused(format!("/grpc was not upgraded: {e}")))?;
        let connector = Once(std::sync::Mutex::new(Some(upgraded)));
        let channel = tonic::transport::Endpoint::from_static("http://docker")
            .connect_with_connector(connector)
            .await
            .map_err(|e| self.refused(format!("BuildKit's /grpc did not speak gRPC: {e}")))?;
        let answer = ControlClient::new(channel)
            .list_workers(ListWorkersRequest { filter: Vec::new() })
            .await
            .map_err(|e| self.refused(format!("BuildKit's ListWorkers failed: {}", e.message())))?;
        let mut platforms: Vec<Platform> = Vec::new();
        for worker in answer.into_inner().record {
            for p in worker.platforms {
                let variant = (!p.variant.is_empty()).then_some(format!("/{}", p.variant));
                let text = format!("{}/{}{}", p.os, p.architecture, variant.unwrap_or_default());
                // An architecture meshtop cannot name is one no module can ask for.
                if let Ok(platform) = Platform::parse(&text)
                    && !platforms.contains(&platform)
                {
                    platforms.push(platform);
                }
            }
        }
        Ok(platforms)
    }
}

/// The one upgraded connection there is, handed to tonic's client once.
struct Once(std::sync::Mutex<Option<hyper::upgrade::Upgraded>>);

impl tonic::codegen::Service<http::Uri> for Once {
    type Response = hyper::upgrade::Upgraded;
    type Error = std::io::Error;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let io = self.0.lock().ok().and_then(|mut slot| slot.take());
        std::future::ready(io.ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the daemon's /grpc connection is used up",
            )
        }))
    }
}
