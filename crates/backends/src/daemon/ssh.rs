//! A daemon reached over ssh, dialled as the docker CLI dials `ssh://` (docker/cli
//! `cli/connhelper/connhelper.go` and `cli/connhelper/ssh/ssh.go`): every connection is one
//! `ssh -T [-l user] [-p port] -- host docker system dial-stdio`, whose stdin and stdout are the
//! connection's bytes. bollard speaks to a unix socket of meshtop's own, in a private directory;
//! each connection accepted there runs its own ssh. ssh reads the user's own configuration
//! (`~/.ssh/config`, keys, the agent, known hosts); `BatchMode=yes` makes a missing key or an unknown
//! host key an error rather than a prompt nobody can answer.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::process::Command;

use super::DaemonError;

/// The socket bollard dials, serving each connection through its own ssh; closed when dropped.
#[derive(Debug)]
pub struct SshDialer {
    /// A directory of meshtop's own (mode 700): nobody else reaches the daemon through it.
    dir: PathBuf,
    socket: PathBuf,
    accepting: tokio::task::JoinHandle<()>,
    /// What the last ssh that failed said on stderr (why a call could not connect).
    last_error: Arc<Mutex<Option<String>>>,
}

impl Drop for SshDialer {
    fn drop(&mut self) {
        self.accepting.abort();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The ssh command line of one connection (without the program).
pub fn ssh_args(user: Option<&str>, host: &str, port: Option<u16>) -> Vec<String> {
    let mut args: Vec<String> = ["-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20"]
        .map(String::from)
        .to_vec();
    if let Some(user) = user {
        args.extend(["-l".to_string(), user.to_string()]);
    }
    if let Some(port) = port {
        args.extend(["-p".to_string(), port.to_string()]);
    }
    args.extend(["--", host, "docker", "system", "dial-stdio"].map(String::from));
    args
}

impl SshDialer {
    /// Listen on a fresh private socket; every connection runs `ssh` with `args`.
    pub fn start(endpoint: &str, args: Vec<String>) -> Result<SshDialer, DaemonError> {
        let refused = |message: String| DaemonError::Refused {
            endpoint: endpoint.to_string(),
            message,
        };
        let dir = std::env::temp_dir().join(format!("meshtop-ssh-{}", uuid::Uuid::now_v7()));
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| refused(format!("cannot make {}: {e}", dir.display())))?;
        }
        let socket = dir.join("docker.sock");
        let listener = UnixListener::bind(&socket)
            .map_err(|e| refused(format!("cannot listen on {}: {e}", socket.display())))?;
        let last_error = Arc::new(Mutex::new(None));
        let said = last_error.clone();
        let accepting = tokio::spawn(async move {
            while let Ok((connection, _)) = listener.accept().await {
                tokio::spawn(serve(connection, args.clone(), said.clone()));
            }
        });
        Ok(SshDialer {
            dir,
            socket,
            accepting,
            last_error,
        })
    }

    pub fn socket(&self) -> &std::path::Path {
        &self.socket
    }

    /// What the last failed ssh said, for the error a call ends with.
    pub fn said(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|said| said.clone())
    }
}

/// One connection: its bytes through one ssh's stdin and stdout until either side ends.
async fn serve(mut connection: UnixStream, args: Vec<String>, said: Arc<Mutex<Option<String>>>) {
    let child = Command::new("ssh")
        .args(&args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(error) => {
            if let Ok(mut said) = said.lock() {
                *said = Some(format!("cannot run ssh: {error}"));
            }
            return;
        }
    };
    let (Some(stdin), Some(stdout), Some(mut stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return;
    };
    let mut remote = tokio::io::join(stdout, stdin);
    let _ = tokio::io::copy_bidirectional(&mut connection, &mut remote).await;
    drop(remote);
    // ssh ends once its stdin is closed; one that does not is ended, not left behind.
    let mut text = String::new();
    let ended = async {
        let _ = stderr.read_to_string(&mut text).await;
        child.wait().await
    };
    let status = match tokio::time::timeout(std::time::Duration::from_secs(10), ended).await {
        Ok(status) => status,
        Err(_) => {
            let _ = child.kill().await;
            return;
        }
    };
    if status.is_ok_and(|s| !s.success())
        && !text.trim().is_empty()
        && let Ok(mut said) = said.lock()
    {
        *said = Some(text.trim().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_the_docker_clis() {
        assert_eq!(
            ssh_args(Some("ci"), "farm-1", Some(2222)).join(" "),
            "-T -o BatchMode=yes -o ConnectTimeout=20 -l ci -p 2222 -- farm-1 docker system dial-stdio"
        );
        assert_eq!(
            ssh_args(None, "farm-1", None).join(" "),
            "-T -o BatchMode=yes -o ConnectTimeout=20 -- farm-1 docker system dial-stdio"
        );
    }
}
