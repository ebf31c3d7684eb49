//! A module's secrets read when its build starts, from their files or the environment, and the
//! ssh agent it forwards. Values live in memory for that build only; every message names the
//! module, the secret's id and its source, never its value.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::mesh::model::{Module, SecretSource};

/// What a module's build is served through its session.
#[derive(Default)]
pub struct ModuleSecrets {
    pub values: HashMap<String, Vec<u8>>,
    /// The ssh agent's socket, when the module forwards it.
    pub ssh_agent: Option<PathBuf>,
}

/// A secret (or the ssh agent) a module's build cannot have: each names the module, the secret's
/// id and where it comes from (`given`, as the mesh file writes it), and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error(
        "module {module}: secret {id} ({given}) cannot be read: {}: {error} — create the file, or point `src` at it",
        path.display()
    )]
    Unreadable {
        module: String,
        id: String,
        given: String,
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error(
        "module {module}: secret {id} ({given}) is missing: {name} is not set in meshtop's environment — export it before the converge"
    )]
    Unset {
        module: String,
        id: String,
        given: String,
        name: String,
    },
    #[error(
        "module {module}: ssh = true, but SSH_AUTH_SOCK is not set: start an agent (eval $(ssh-agent); ssh-add) before the converge"
    )]
    NoAgent { module: String },
    #[error(
        "module {module}: ssh = true, but the ssh agent's socket {} (SSH_AUTH_SOCK) does not exist: start the agent again",
        socket.display()
    )]
    AgentGone { module: String, socket: PathBuf },
}

/// Read every secret of `module` now. Err: the first that cannot be had.
pub fn read(module: &Module) -> Result<ModuleSecrets, SecretError> {
    let mut values = HashMap::with_capacity(module.secrets.len());
    for secret in &module.secrets {
        let value = match &secret.source {
            SecretSource::File { path, .. } => {
                std::fs::read(path).map_err(|error| SecretError::Unreadable {
                    module: module.name.clone(),
                    id: secret.id.clone(),
                    given: secret.source.to_string(),
                    path: path.clone(),
                    error,
                })?
            }
            SecretSource::Env(name) => match std::env::var_os(name) {
                Some(value) => value.into_encoded_bytes(),
                None => {
                    return Err(SecretError::Unset {
                        module: module.name.clone(),
                        id: secret.id.clone(),
                        given: secret.source.to_string(),
                        name: name.clone(),
                    });
                }
            },
        };
        values.insert(secret.id.clone(), value);
    }
    let ssh_agent = if module.ssh {
        Some(agent(&module.name)?)
    } else {
        None
    };
    Ok(ModuleSecrets { values, ssh_agent })
}

/// Whether every secret of `module` can be had now (their values are dropped at once).
pub fn check(module: &Module) -> Result<(), SecretError> {
    read(module).map(|_| ())
}

/// The ssh agent `module` forwards: `SSH_AUTH_SOCK`, which must exist.
fn agent(module: &str) -> Result<PathBuf, SecretError> {
    let Some(socket) = std::env::var_os("SSH_AUTH_SOCK").filter(|s| !s.is_empty()) else {
        return Err(SecretError::NoAgent {
            module: module.to_string(),
        });
    };
    let socket = PathBuf::from(socket);
    if !socket.exists() {
        return Err(SecretError::AgentGone {
            module: module.to_string(),
            socket,
        });
    }
    Ok(socket)
}

/// A secret that would hand a build a file of meshtop's own (its signing key, the registry
/// logins), named at its line.
#[derive(Debug, thiserror::Error)]
#[error(
    "{}:{line}: module {module}: secret {id} ({given}) names {what} ({}): a build may not be given it — give the build a credential of its own",
    mesh_file.display(),
    path.display()
)]
pub struct GuardedSecret {
    pub mesh_file: PathBuf,
    pub line: usize,
    pub module: String,
    pub id: String,
    pub given: String,
    pub what: String,
    pub path: PathBuf,
}

/// Whether `a` and `b` are one file (links followed where they exist).
pub(crate) fn same_file(a: &std::path::Path, b: &std::path::Path) -> bool {
    let real = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    real(a) == real(b)
}

/// No module of `mesh` may be given the file at `path` (`what` it is: meshtop's signing key, the
/// registry logins) as a secret: the first secret that names it, at its line.
pub fn refuse_naming(
    mesh: &crate::mesh::model::Mesh,
    path: &std::path::Path,
    what: &str,
) -> Result<(), Box<GuardedSecret>> {
    for module in &mesh.modules {
        for secret in &module.secrets {
            if let SecretSource::File { path: file, .. } = &secret.source
                && same_file(file, path)
            {
                return Err(Box::new(GuardedSecret {
                    mesh_file: mesh.file.clone(),
                    line: secret.line,
                    module: module.name.clone(),
                    id: secret.id.clone(),
                    given: secret.source.to_string(),
                    what: what.to_string(),
                    path: path.to_path_buf(),
                }));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::mesh::model::{BuildSecret, Policy};

    fn module(secrets: Vec<BuildSecret>) -> Module {
        Module {
            name: "api".into(),
            context: PathBuf::from("/nowhere"),
            dockerfile: "Dockerfile".into(),
            target: None,
            base: None,
            policy: Policy::Rollout,
            platforms: Vec::new(),
            build_args: Default::default(),
            secrets,
            ssh: false,
            tier: 0,
            line: 1,
            backoff: Default::default(),
            contexts: Default::default(),
            max_unavailable: None,
        }
    }

    #[test]
    fn a_missing_secret_is_named_with_its_module_and_source() {
        let dir = tempfile::tempdir().unwrap();
        let present = dir.path().join("npmrc");
        std::fs::write(&present, "token=abc").unwrap();
        let ok = module(vec![BuildSecret {
            id: "npmrc".into(),
            source: SecretSource::File {
                written: "npmrc".into(),
                path: present,
            },
            line: 0,
        }]);
        assert_eq!(read(&ok).unwrap().values["npmrc"], b"token=abc");

        let missing = module(vec![BuildSecret {
            id: "tok".into(),
            source: SecretSource::File {
                written: "~/.no-such-npmrc".into(),
                path: dir.path().join("no-such-npmrc"),
            },
            line: 0,
        }]);
        let why = check(&missing).unwrap_err().to_string();
        assert!(
            why.starts_with("module api: secret tok (src = \"~/.no-such-npmrc\")"),
            "{why}"
        );

        let unset = module(vec![BuildSecret {
            id: "tok".into(),
            source: SecretSource::Env("MESHTOP_TEST_SURELY_UNSET_VAR".into()),
            line: 0,
        }]);
        let why = check(&unset).unwrap_err().to_string();
        assert!(
            why.contains("secret tok (env = \"MESHTOP_TEST_SURELY_UNSET_VAR\")"),
            "{why}"
        );
        assert!(why.contains("is not set"), "{why}");
    }
}
