//! A copy of the example mesh on the Kubernetes target (the API test server, the real registry on
//! 127.0.0.1:5000 and the real daemon), and the real binary run against it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use meshtop::backends::cluster::RECORD_ANNOTATION;
use serde_json::Value;

use super::ExampleMesh;
use super::kube_api::KubeApi;
use super::kube_objects::{pod, workload};

pub(crate) const REGISTRY: &str = "127.0.0.1:5000";

/// A copy of the example mesh on the Kubernetes target, with a kubeconfig for the API test server.
pub(crate) struct KubeMesh {
    pub(crate) mesh: ExampleMesh,
    pub(crate) namespace: String,
    pub(crate) kubeconfig: PathBuf,
    /// `DOCKER_CONFIG` for the binary (a registry login), when set.
    docker_config: Option<PathBuf>,
}

impl KubeMesh {
    /// `registry`: push there; `context`: the kubeconfig's current context; `extra`: appended TOML.
    pub(crate) fn new(
        tag: &str,
        api: &KubeApi,
        registry: bool,
        context: &str,
        extra: &str,
    ) -> KubeMesh {
        let mesh = ExampleMesh::new(tag);
        let namespace = format!("ns-{}", mesh.name);
        let file = mesh.mesh_file();
        let text = std::fs::read_to_string(&file).unwrap();
        // Machines are declared for the Docker target only: workloads live in the cluster.
        let text = text.split("[[machine]]").next().unwrap().to_string();
        let registry_line = if registry {
            format!("registry = \"{REGISTRY}\"\n")
        } else {
            String::new()
        };
        let text = text
            .replace(
                &format!("name = \"{}\"\n", mesh.name),
                &format!("name = \"{}\"\n{registry_line}", mesh.name),
            )
            .replace(
                "kind = \"docker\"",
                &format!("kind = \"kubernetes\"\nnamespace = \"{namespace}\""),
            );
        std::fs::write(&file, format!("{text}\n{extra}")).unwrap();
        let kubeconfig = mesh.dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: {context}\nclusters:\n- name: test\n  cluster:\n    server: http://{}\n\
contexts:\n- name: {context}\n  context:\n    cluster: test\n    user: test\nusers:\n- name: test\n  user: {{}}\n",
                api.addr
            ),
        )
        .unwrap();
        api.put_namespace(&namespace, &[]);
        KubeMesh {
            mesh,
            namespace,
            kubeconfig,
            docker_config: None,
        }
    }

    /// Push to `proxy` (the real registry behind a login) with its login in `DOCKER_CONFIG`.
    pub(crate) fn behind_login(self, proxy: &super::registry_proxy::RegistryProxy) -> KubeMesh {
        let mut k = self.through(proxy);
        k.docker_config = Some(proxy.docker_config(k.mesh.dir.path()));
        k
    }

    /// Push to `proxy` (the real registry behind it) instead of the registry itself.
    pub(crate) fn through(self, proxy: &super::registry_proxy::RegistryProxy) -> KubeMesh {
        let file = self.mesh.mesh_file();
        let text = std::fs::read_to_string(&file).unwrap().replace(
            &format!("registry = \"{REGISTRY}\""),
            &format!("registry = \"{}\"", proxy.host),
        );
        std::fs::write(&file, text).unwrap();
        self
    }

    pub(crate) fn name(&self) -> &str {
        &self.mesh.name
    }

    pub(crate) async fn run_with_state(&self, state: &Path, args: &[&str]) -> Output {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_meshtop"));
        if let Some(config) = &self.docker_config {
            command.env("DOCKER_CONFIG", config);
        }
        command
            .env("KUBECONFIG", &self.kubeconfig)
            .arg("--mesh")
            .arg(self.mesh.mesh_file())
            .arg("--state")
            .arg(state)
            .args(args)
            .output()
            .await
            .unwrap()
    }

    pub(crate) async fn run(&self, args: &[&str]) -> Output {
        self.run_with_state(&self.mesh.state(), args).await
    }

    pub(crate) async fn json(&self, args: &[&str]) -> (Value, String) {
        let output = self.run(args).await;
        super::json_of(args, &output)
    }

    /// A one-replica Deployment of `module` running `image`, whose pod reports `image_id`.
    pub(crate) fn deploy(&self, api: &KubeApi, module: &str, image: &str, image_id: &str) {
        let name = format!("{module}-1");
        api.put(
            "deployments",
            &self.namespace,
            workload("deployments", &name, module, &[("app", image)], 1),
        );
        api.put(
            "pods",
            &self.namespace,
            pod(&format!("{name}-pod"), &name, "app", image, image_id),
        );
    }

    pub(crate) fn image(&self, api: &KubeApi, module: &str) -> String {
        api.get("deployments", &self.namespace, &format!("{module}-1"))
            .unwrap()["spec"]["template"]["spec"]["containers"][0]["image"]
            .as_str()
            .unwrap()
            .to_string()
    }

    /// The record as another tool reads it: the namespace's annotation, parsed; or, once the record
    /// is in shards, the `images` of every shard its index names.
    pub(crate) fn annotation(&self, api: &KubeApi) -> Value {
        let ns = api.get("namespaces", "", &self.namespace).unwrap();
        if let Some(index) =
            ns["metadata"]["annotations"][meshtop::backends::cluster::INDEX_ANNOTATION].as_str()
        {
            let index: Value = serde_json::from_str(index).unwrap();
            let mut record = serde_json::Map::new();
            for shard in index["shards"].as_array().unwrap() {
                let name = shard["name"].as_str().unwrap();
                let map = api.get("configmaps", &self.namespace, name).unwrap();
                let key = meshtop::backends::cluster::SHARD_KEY;
                let part: Value = serde_json::from_str(map["data"][key].as_str().unwrap()).unwrap();
                record.extend(part["images"].as_object().unwrap().clone());
            }
            return Value::Object(record);
        }
        let text = ns["metadata"]["annotations"][RECORD_ANNOTATION]
            .as_str()
            .unwrap_or_else(|| panic!("no record annotation on {ns}"));
        serde_json::from_str(text).unwrap()
    }

    pub(crate) fn set_annotation(&self, api: &KubeApi, text: &str) {
        api.put_namespace(&self.namespace, &[(RECORD_ANNOTATION, text)]);
    }
}

pub(crate) fn old_id(n: u8) -> String {
    format!(
        "docker-pullable://{REGISTRY}/old@sha256:{}",
        format!("{n:02x}").repeat(32)
    )
}
