//! The machine's real ssh agent (`ssh-agent -D`, Debian's openssh-client) on a socket of its own,
//! holding one fresh key named with the run id; killed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::said;

pub(crate) struct Agent {
    child: std::process::Child,
    pub(crate) socket: PathBuf,
    /// The key's comment, as `ssh-add -l` lists it.
    pub(crate) comment: String,
}

impl Agent {
    pub(crate) fn start(dir: &Path) -> Agent {
        let socket = dir.join("agent.sock");
        let comment = format!("meshtop-test-key-{}", super::run_id());
        let key = dir.join("agent_key");
        let keygen = Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-C", &comment, "-f"])
            .arg(&key)
            .output()
            .expect(
                "ssh-keygen (Debian's openssh-client) is needed: apt-get install openssh-client",
            );
        assert!(keygen.status.success(), "{}", said(&keygen));
        let child = Command::new("ssh-agent")
            .arg("-D")
            .arg("-a")
            .arg(&socket)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("ssh-agent (openssh-client)");
        // The socket exists from the agent's bind, before its listen: wait until it answers
        // (`ssh-add -l` exits 2 only when it cannot reach the agent; 1 is "no identities"). A wait
        // on the socket file alone lost that race under load ("Connection refused").
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let listed = Command::new("ssh-add")
                .arg("-l")
                .env("SSH_AUTH_SOCK", &socket)
                .output()
                .unwrap();
            if listed.status.code() != Some(2) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "ssh-agent never answered on {}: {}",
                socket.display(),
                said(&listed)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let add = Command::new("ssh-add")
            .arg("-q")
            .arg(&key)
            .env("SSH_AUTH_SOCK", &socket)
            .output()
            .unwrap();
        assert!(add.status.success(), "{}", said(&add));
        Agent {
            child,
            socket,
            comment,
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
