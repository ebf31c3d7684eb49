//! Registry credentials as Docker finds them: `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`,
//! inline `auths`, and credential helpers (`credHelpers`, `credsStore`) run as `docker-credential-<helper> get`.
//! Secrets are never logged or stored: `Debug` redacts them.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::AsyncWriteExt;

#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    Basic {
        username: String,
        password: String,
    },
    /// An OAuth refresh token (a helper answered with username `<token>`).
    IdentityToken(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::Basic { username, .. } => {
                write!(f, "Credentials::Basic({username}, <redacted>)")
            }
            Credentials::IdentityToken(_) => f.write_str("Credentials::IdentityToken(<redacted>)"),
        }
    }
}

impl Credentials {
    /// The credentials as bollard passes them to the daemon for a push.
    pub fn for_daemon(&self, server: &str) -> bollard::auth::DockerCredentials {
        let mut creds = bollard::auth::DockerCredentials {
            serveraddress: Some(server.to_string()),
            ..Default::default()
        };
        match self {
            Credentials::Basic { username, password } => {
                creds.username = Some(username.clone());
                creds.password = Some(password.clone());
            }
            Credentials::IdentityToken(token) => creds.identitytoken = Some(token.clone()),
        }
        creds
    }
}

#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error(
        "cannot read Docker's config {path}: {message}; fix the file or set DOCKER_CONFIG to another directory"
    )]
    Config { path: PathBuf, message: String },
    #[error("the Docker credential helper docker-credential-{helper} failed for {host}: {message}")]
    Helper {
        helper: String,
        host: String,
        message: String,
    },
}

/// Docker's config directory: `$DOCKER_CONFIG`, else `~/.docker`.
pub(crate) fn docker_config_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    directories::BaseDirs::new().map(|b| b.home_dir().join(".docker"))
}

/// The file that holds the registry logins (Docker's `config.json`), and what to call it: no
/// build may be given it as a secret.
pub fn logins_file() -> Option<(PathBuf, &'static str)> {
    docker_config_dir().map(|dir| {
        (
            dir.join("config.json"),
            "the Docker config, which holds the registry logins",
        )
    })
}

/// The credentials Docker would use for `host` (`host[:port]`), if any.
pub async fn for_registry(host: &str) -> Result<Option<Credentials>, CredentialsError> {
    match docker_config_dir() {
        Some(dir) => from_config_dir(&dir, host, None).await,
        None => Ok(None),
    }
}

/// Docker Hub's names all mean the one index server.
fn normalise(server: &str) -> String {
    let server = server
        .strip_prefix("https://")
        .or_else(|| server.strip_prefix("http://"))
        .unwrap_or(server);
    let host = server.split('/').next().unwrap_or(server);
    match host {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => "index.docker.io".into(),
        other => other.to_string(),
    }
}

/// As `for_registry` over a given config directory; `helper_path` is a directory searched for helpers
/// before our PATH (None: our PATH only).
pub async fn from_config_dir(
    dir: &Path,
    host: &str,
    helper_path: Option<&OsStr>,
) -> Result<Option<Credentials>, CredentialsError> {
    let path = dir.join("config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CredentialsError::Config {
                path,
                message: e.to_string(),
            });
        }
    };
    let config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| CredentialsError::Config {
            path: path.clone(),
            message: e.to_string(),
        })?;
    let wanted = normalise(host);
    // The key Docker would use for this registry (Docker Hub's is its v1 URL).
    let server = if wanted == "index.docker.io" {
        "https://index.docker.io/v1/".to_string()
    } else {
        host.to_string()
    };

    let helpers = config.get("credHelpers").and_then(|h| h.as_object());
    let helper = helpers
        .and_then(|h| h.iter().find(|(k, _)| normalise(k) == wanted))
        .and_then(|(_, v)| v.as_str());
    if let Some(helper) = helper {
        return run_helper(helper, &server, helper_path).await;
    }
    if let Some(store) = config
        .get("credsStore")
        .and_then(|s| s.as_str())
        .filter(|s| !s.is_empty())
        && let Some(creds) = run_helper(store, &server, helper_path).await?
    {
        return Ok(Some(creds));
    }
    let auths = config.get("auths").and_then(|a| a.as_object());
    let Some(entry) = auths
        .and_then(|a| a.iter().find(|(k, _)| normalise(k) == wanted))
        .map(|(_, v)| v)
    else {
        return Ok(None);
    };
    if let Some(token) = entry
        .get("identitytoken")
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
    {
        return Ok(Some(Credentials::IdentityToken(token.to_string())));
    }
    let Some(auth) = entry
        .get("auth")
        .and_then(|a| a.as_str())
        .filter(|a| !a.is_empty())
    else {
        return Ok(None);
    };
    let bad = |why: &str| CredentialsError::Config {
        path: path.clone(),
        message: format!("the `auth` of {host:?} {why}; run `docker login {host}` again"),
    };
    let decoded = base64_decode(auth).ok_or_else(|| bad("is not base64"))?;
    let decoded = String::from_utf8(decoded).map_err(|_| bad("is not text"))?;
    let (username, password) = decoded
        .split_once(':')
        .ok_or_else(|| bad("is not user:password"))?;
    Ok(Some(Credentials::Basic {
        username: username.into(),
        password: password.into(),
    }))
}

async fn run_helper(
    helper: &str,
    server: &str,
    path: Option<&OsStr>,
) -> Result<Option<Credentials>, CredentialsError> {
    let fail = |message: String| CredentialsError::Helper {
        helper: helper.into(),
        host: server.into(),
        message,
    };
    let mut command = tokio::process::Command::new(format!("docker-credential-{helper}"));
    command
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(first) = path {
        let mut dirs = vec![std::path::PathBuf::from(first)];
        dirs.extend(
            std::env::var_os("PATH")
                .iter()
                .flat_map(std::env::split_paths),
        );
        if let Ok(joined) = std::env::join_paths(dirs) {
            command.env("PATH", joined);
        }
    }
    let mut child = command
        .spawn()
        .map_err(|e| fail(format!("cannot run it ({e}); is it installed?")))?;
    if let Some(mut stdin) = child.stdin.take() {
        // A helper that exits without reading is judged by its answer, not by the broken pipe.
        let _ = stdin.write_all(server.as_bytes()).await;
    }
    let output = child
        .wait_with_output()
        .await
        .map_err(|e| fail(e.to_string()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let said = format!("{stdout} {}", String::from_utf8_lossy(&output.stderr));
        if said.to_lowercase().contains("credentials not found") {
            return Ok(None);
        }
        // What a helper prints on failure is not a secret, but keep it short.
        return Err(fail(format!(
            "exited with {}: {}",
            output.status,
            said.trim().chars().take(200).collect::<String>()
        )));
    }
    let answer: serde_json::Value = serde_json::from_str(&stdout)
        .map_err(|_| fail("its answer is not the expected JSON".into()))?;
    let username = answer
        .get("Username")
        .and_then(|u| u.as_str())
        .unwrap_or_default();
    let secret = answer
        .get("Secret")
        .and_then(|s| s.as_str())
        .unwrap_or_default();
    if secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(if username == "<token>" {
        Credentials::IdentityToken(secret.into())
    } else {
        Credentials::Basic {
            username: username.into(),
            password: secret.into(),
        }
    }))
}

/// Standard base64 (padding optional); None when the text is not base64.
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    };
    let bytes: Vec<u8> = text.trim().trim_end_matches('=').bytes().collect();
    if bytes.len() % 4 == 1 {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        let n = chunk.len() - 1;
        out.extend_from_slice(&acc.to_be_bytes()[1..1 + n]);
    }
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_with_and_without_padding() {
        assert_eq!(base64_decode("dXNlcjpwYXNz").unwrap(), b"user:pass");
        assert_eq!(base64_decode("YQ==").unwrap(), b"a");
        assert_eq!(base64_decode("YWI").unwrap(), b"ab");
        assert_eq!(base64_decode("a!b="), None);
    }

    #[test]
    fn debug_never_shows_the_secret() {
        let creds = Credentials::Basic {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{creds:?}").contains("hunter2"));
    }

    #[test]
    fn docker_hub_names_are_one_server() {
        assert_eq!(
            normalise("https://index.docker.io/v1/"),
            normalise("docker.io")
        );
        assert_eq!(normalise("http://127.0.0.1:5000"), "127.0.0.1:5000");
    }
}
