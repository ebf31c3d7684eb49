//! Two people (and CI) on one mesh: the example mesh on the Kubernetes API test server, pushing
//! to the real registry, each person with a state file of their own; the mesh's stale limit
//! shortened through the test hook `MESHTOP_TEST_LOCK_STALE_MS`.

use std::path::{Path, PathBuf};
use std::process::Output;

use meshtop::backends::state::TEST_STALE_ENV;

use super::ExampleMesh;
use super::kube_api::KubeApi;
use super::kube_objects::{pod, workload};

pub(crate) const REGISTRY: &str = "127.0.0.1:5000";
pub(crate) const STALE_MS: &str = "1500";

/// The example mesh on Kubernetes (namespace `ns-<mesh>`), pushing to the real registry; a roll-out
/// is followed for at most 6 s.
pub(crate) struct Team {
    pub(crate) mesh: ExampleMesh,
    pub(crate) namespace: String,
    pub(crate) kubeconfig: PathBuf,
}

impl Team {
    pub(crate) async fn new(tag: &str, api: &KubeApi) -> Team {
        super::local_registry::require_registry().await;
        let mesh = ExampleMesh::new(tag);
        let namespace = format!("ns-{}", mesh.name);
        let file = mesh.mesh_file();
        let text = std::fs::read_to_string(&file).unwrap();
        let text = text.split("[[machine]]").next().unwrap().to_string();
        let text = text
            .replace(
                &format!("name = \"{}\"\n", mesh.name),
                &format!("name = \"{}\"\nregistry = \"{REGISTRY}\"\n", mesh.name),
            )
            .replace(
                "kind = \"docker\"",
                &format!(
                    "kind = \"kubernetes\"\nnamespace = \"{namespace}\"\nrollout_deadline = \"6s\""
                ),
            );
        std::fs::write(&file, text).unwrap();
        let kubeconfig = mesh.dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, api.kubeconfig("test-ctx")).unwrap();
        api.put_namespace(&namespace, &[]);
        Team {
            mesh,
            namespace,
            kubeconfig,
        }
    }

    /// Follow roll-outs for at most `deadline` (the mesh file's `rollout_deadline`).
    pub(crate) fn rollout_deadline(&self, deadline: &str) {
        let file = self.mesh.mesh_file();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(text.contains("rollout_deadline = \"6s\""));
        let text = text.replace(
            "rollout_deadline = \"6s\"",
            &format!("rollout_deadline = \"{deadline}\""),
        );
        std::fs::write(&file, text).unwrap();
    }

    /// A one-replica Deployment `<module>-1` (labelled for `module`) and its pod, running an older
    /// image of the module (`…/<module>:old`), as a teammate's cluster would.
    pub(crate) fn runs_old(&self, api: &KubeApi, module: &str) {
        let old = format!("{REGISTRY}/{}/{module}:old", self.mesh.name);
        let name = format!("{module}-1");
        api.put(
            "deployments",
            &self.namespace,
            workload("deployments", &name, module, &[("app", &old)], 1),
        );
        api.put(
            "pods",
            &self.namespace,
            pod(
                &format!("{name}-pod"),
                &name,
                "app",
                &old,
                &format!("docker-pullable://{old}@sha256:{}", "01".repeat(32)),
            ),
        );
    }

    pub(crate) fn command(&self, state: &Path, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_meshtop"));
        command
            .env(TEST_STALE_ENV, STALE_MS)
            .env("KUBECONFIG", &self.kubeconfig)
            .arg("--mesh")
            .arg(self.mesh.mesh_file())
            .arg("--state")
            .arg(state)
            .args(args);
        command
    }

    pub(crate) async fn run(&self, state: &Path, args: &[&str]) -> Output {
        self.command(state, args).output().await.unwrap()
    }

    pub(crate) fn alice(&self) -> PathBuf {
        self.mesh.state()
    }

    pub(crate) fn bob(&self) -> PathBuf {
        self.mesh.dir.path().join("bob.db")
    }
}
