//! A multi-platform build: `docker buildx build --platform … --push`, a process with arguments (no
//! shell), its context the same tar the address was computed from, on stdin.

use std::process::{ExitStatus, Stdio};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::daemon::build::BuildRequest;

/// What can go wrong running buildx; each says which command and what it said.
#[derive(Debug, thiserror::Error)]
pub enum BuildxError {
    #[error("cannot run `{command}`: {source}")]
    Run {
        command: &'static str,
        source: std::io::Error,
    },
    #[error("`docker buildx version` exited with {status}: {last}")]
    Unavailable { status: ExitStatus, last: String },
    #[error("`docker buildx build` has no stdin")]
    NoStdin,
    #[error("`docker buildx build` did not finish: {0}")]
    Unfinished(std::io::Error),
    #[error("`docker buildx build` exited with {0}")]
    Failed(ExitStatus),
    #[error("buildx wrote no metadata ({0})")]
    NoMetadata(std::io::Error),
    #[error("buildx metadata is not JSON ({0})")]
    Metadata(serde_json::Error),
    #[error("buildx metadata names no containerimage.digest")]
    NoDigest,
}

/// Whether `docker buildx version` works; Err says why not.
pub async fn available() -> Result<(), BuildxError> {
    let output = tokio::process::Command::new("docker")
        .args(["buildx", "version"])
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|source| BuildxError::Run {
            command: "docker buildx version",
            source,
        })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let last = stderr.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
    Err(BuildxError::Unavailable {
        status: output.status,
        last: last.trim().to_string(),
    })
}

/// The command line of a build (without the program).
pub(crate) fn arguments(spec: &BuildRequest, metadata_file: &std::path::Path) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "buildx".into(),
        "build".into(),
        "--platform".into(),
        spec.platforms.join(","),
        "--push".into(),
        "--tag".into(),
        spec.tag.clone(),
        "--file".into(),
        spec.dockerfile.clone(),
        "--metadata-file".into(),
        metadata_file.display().to_string(),
        "--progress".into(),
        "plain".into(),
    ];
    if let Some(target) = &spec.target {
        args.push("--target".into());
        args.push(target.clone());
    }
    if spec.no_cache {
        args.push("--no-cache".into());
    }
    let mut labels: Vec<_> = spec.labels.iter().collect();
    labels.sort();
    for (k, v) in labels {
        args.push("--label".into());
        args.push(format!("{k}={v}"));
    }
    let mut build_args: Vec<_> = spec.build_args.iter().collect();
    build_args.sort();
    for (k, v) in build_args {
        args.push("--build-arg".into());
        args.push(format!("{k}={v}"));
    }
    // Secrets reach buildx through its environment (see `secret_env`), never on the command line.
    for (n, id) in secret_ids(spec).into_iter().enumerate() {
        args.push("--secret".into());
        args.push(format!("id={id},env={SECRET_ENV}{n}"));
    }
    if let Some(agent) = &spec.ssh_agent {
        args.push("--ssh".into());
        args.push(format!("default={}", agent.display()));
    }
    args.push("-".into());
    args
}

/// The environment variables buildx reads the secrets from: `MESHTOP_SECRET_<n>`.
const SECRET_ENV: &str = "MESHTOP_SECRET_";

fn secret_ids(spec: &BuildRequest) -> Vec<&String> {
    let mut ids: Vec<&String> = spec.secrets.0.keys().collect();
    ids.sort();
    ids
}

/// The child's environment carrying the secrets, in the order [`arguments`] names them.
fn secret_env(spec: &BuildRequest) -> Vec<(String, std::ffi::OsString)> {
    secret_ids(spec)
        .into_iter()
        .enumerate()
        .map(|(n, id)| {
            let value = spec.secrets.0.get(id).cloned().unwrap_or_default();
            // Unix environments carry bytes: a file's value is passed as it is.
            (format!("{SECRET_ENV}{n}"), os_string(value))
        })
        .collect()
}

fn os_string(bytes: Vec<u8>) -> std::ffi::OsString {
    use std::os::unix::ffi::OsStringExt;
    std::ffi::OsString::from_vec(bytes)
}

/// Build and push; returns the pushed index digest (the artifact of a multi-platform module).
pub async fn build_and_push(
    spec: BuildRequest,
    mut line: impl FnMut(&str),
) -> Result<String, BuildxError> {
    let metadata =
        std::env::temp_dir().join(format!("meshtop-buildx-{}.json", uuid::Uuid::now_v7()));
    let mut child = tokio::process::Command::new("docker")
        .args(arguments(&spec, &metadata))
        .envs(secret_env(&spec))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| BuildxError::Run {
            command: "docker buildx build",
            source,
        })?;
    let mut stdin = child.stdin.take().ok_or(BuildxError::NoStdin)?;
    let mut context = spec.context.into_tar();
    let writer = tokio::spawn(async move {
        while let Some(chunk) = context.recv().await {
            stdin.write_all(&chunk?).await?;
        }
        drop(stdin);
        Ok::<(), std::io::Error>(())
    });
    if let Some(stderr) = child.stderr.take() {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(text)) = lines.next_line().await {
            line(&text);
        }
    }
    let status = child.wait().await.map_err(BuildxError::Unfinished)?;
    let _ = writer.await;
    if !status.success() {
        return Err(BuildxError::Failed(status));
    }
    let read = std::fs::read_to_string(&metadata);
    let _ = std::fs::remove_file(&metadata);
    let text = read.map_err(BuildxError::NoMetadata)?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(BuildxError::Metadata)?;
    value["containerimage.digest"]
        .as_str()
        .filter(|d| d.starts_with("sha256:"))
        .map(str::to_string)
        .ok_or(BuildxError::NoDigest)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn arguments_push_every_platform_and_read_the_context_from_stdin() {
        let spec = BuildRequest {
            context: crate::daemon::build::BuildContext::Tar(tokio::sync::mpsc::channel(1).1),
            dockerfile: "Dockerfile".into(),
            target: None,
            tag: "127.0.0.1:5000/demo/api:abc-amd64-arm64".into(),
            build_args: HashMap::from([("BASE".to_string(), "sha256:1".to_string())]),
            labels: HashMap::from([("jr2.dev/module".to_string(), "api".to_string())]),
            no_cache: true,
            platforms: vec!["linux/amd64".into(), "linux/arm64".into()],
            on_base: false,
            secrets: crate::daemon::session::SecretValues(HashMap::from([(
                "npmrc".to_string(),
                b"token=abc".to_vec(),
            )])),
            ssh_agent: None,
        };
        let args = arguments(&spec, std::path::Path::new("/tmp/m.json"));
        let joined = args.join(" ");
        assert!(joined.starts_with("buildx build --platform linux/amd64,linux/arm64 --push --tag 127.0.0.1:5000/demo/api:abc-amd64-arm64"), "{joined}");
        assert!(joined.contains("--metadata-file /tmp/m.json") && joined.contains("--no-cache"));
        assert!(
            joined.contains("--label jr2.dev/module=api")
                && joined.contains("--build-arg BASE=sha256:1")
        );
        assert_eq!(args.last().map(String::as_str), Some("-"));
        assert!(
            joined.contains("--secret id=npmrc,env=MESHTOP_SECRET_0"),
            "{joined}"
        );
        assert!(
            !joined.contains("token=abc"),
            "a secret's value is never an argument"
        );
        assert_eq!(
            secret_env(&spec),
            [("MESHTOP_SECRET_0".to_string(), "token=abc".into())]
        );
    }
}
