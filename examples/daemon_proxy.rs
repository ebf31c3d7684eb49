//! Run a command with `DOCKER_HOST` pointing at a counting proxy in front of the Docker daemon, and
//! print how many connections and HTTP requests it made:
//!
//! `cargo run --example daemon_proxy -- meshtop converge` → `daemon calls: 0 request(s), 0 connection(s)`
//!
//! Exits with the command's own status. Used by `scripts/bench-converge.sh`.

#[path = "../tests/it/common/daemon_proxy.rs"]
#[allow(
    dead_code,
    reason = "the tests' helpers: this takes a few, the test binary judges the rest"
)]
mod daemon_proxy;

use std::path::Path;
use std::process::ExitCode;

use daemon_proxy::{DOCKER_SOCKET, DaemonProxy};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((program, rest)) = args.split_first() else {
        eprintln!("usage: daemon_proxy COMMAND [ARG...]");
        return ExitCode::from(2);
    };
    let upstream = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(str::to_string))
        .unwrap_or_else(|| DOCKER_SOCKET.to_string());
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("daemon_proxy: cannot start the async runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let dir = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(error) => {
            eprintln!("daemon_proxy: cannot make a temporary directory: {error}");
            return ExitCode::from(1);
        }
    };
    let _entered = runtime.enter();
    let proxy = DaemonProxy::start(&dir.path().join("docker.sock"), Path::new(&upstream));
    let status = std::process::Command::new(program)
        .args(rest)
        .env("DOCKER_HOST", proxy.docker_host())
        .status();
    proxy.shut();
    eprintln!(
        "daemon calls: {} request(s), {} connection(s)",
        proxy.requests(),
        proxy.connections()
    );
    match status {
        Ok(status) => ExitCode::from(u8::try_from(status.code().unwrap_or(1)).unwrap_or(1)),
        Err(error) => {
            eprintln!("daemon_proxy: cannot run {program}: {error}");
            ExitCode::from(1)
        }
    }
}
