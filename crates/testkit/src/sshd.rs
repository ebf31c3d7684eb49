//! A real OpenSSH server on a loopback port of its own, for builders reached over `ssh://`: its own
//! host key, one client key in its own `AuthorizedKeysFile`, nothing of the machine's ssh set-up.
//! meshtop runs `ssh` from PATH as the docker CLI does; [`Sshd::path`] puts first a wrapper that
//! gives it this server's client configuration (`-F`) and logs each connection.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Sshd {
    pub dir: tempfile::TempDir,
    pub port: u16,
    pub user: String,
    child: Child,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn keygen(file: &Path) {
    let ok = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(file)
        .status()
        .expect("ssh-keygen (openssh-client) runs")
        .success();
    assert!(ok, "ssh-keygen failed for {}", file.display());
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Sshd {
    pub fn start() -> Sshd {
        Sshd::start_with_env(&[])
    }

    /// An sshd whose sessions get `env` (sshd_config `SetEnv`): `DOCKER_HOST` there makes the remote
    /// `docker system dial-stdio` reach another daemon than the machine's own.
    pub fn start_with_env(env: &[(&str, &str)]) -> Sshd {
        assert!(
            Path::new("/usr/sbin/sshd").exists(),
            "no /usr/sbin/sshd: install openssh-server (scripts/test.sh does)"
        );
        // sshd's privilege separation directory (the package's service makes it at boot).
        let _ = std::fs::create_dir_all("/run/sshd");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        keygen(&d.join("host_key"));
        keygen(&d.join("client_key"));
        std::fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        let port = free_port();
        let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
            .unwrap()
            .trim()
            .to_string();
        std::fs::write(
            d.join("sshd_config"),
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {0}/host_key\nAuthorizedKeysFile {0}/authorized_keys\n\
                 PidFile {0}/sshd.pid\nStrictModes no\nUsePAM no\nPasswordAuthentication no\nPermitRootLogin prohibit-password\n{1}",
                d.display(),
                env.iter()
                    .map(|(k, v)| format!("SetEnv {k}={v}\n"))
                    .collect::<String>()
            ),
        )
        .unwrap();
        std::fs::write(
            d.join("ssh_config"),
            format!(
                "Host *\n  IdentityFile {0}/client_key\n  IdentitiesOnly yes\n  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  LogLevel ERROR\n",
                d.display()
            ),
        )
        .unwrap();
        let bin = d.join("bin");
        std::fs::create_dir(&bin).unwrap();
        let wrapper = bin.join("ssh");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\necho \"$*\" >> {0}/connections\nexec /usr/bin/ssh -F {0}/ssh_config \"$@\"\n",
                d.display()
            ),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
        let child = Command::new("/usr/sbin/sshd")
            .args(["-D", "-e", "-f"])
            .arg(d.join("sshd_config"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(d.join("sshd.log")).unwrap())
            .spawn()
            .unwrap();
        let sshd = Sshd {
            dir,
            port,
            user,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "sshd did not listen on {port}: {}",
                std::fs::read_to_string(sshd.dir.path().join("sshd.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        sshd
    }

    /// PATH with the wrapper first.
    pub fn path(&self) -> String {
        format!(
            "{}:{}",
            self.dir.path().join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    pub fn endpoint(&self) -> String {
        format!("ssh://{}@127.0.0.1:{}", self.user, self.port)
    }

    /// How many connections meshtop's ssh made.
    pub fn connections(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("connections"))
            .map(|t| t.lines().count())
            .unwrap_or(0)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }

    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client_key")
    }
}
