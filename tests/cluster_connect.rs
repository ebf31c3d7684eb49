//! `Cluster::connect` configured as kubectl is: KUBECONFIG and its current context.
//! Its own test binary: it sets KUBECONFIG for the whole process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::kube_api::KubeApi;
use meshtop::backends::cluster::{Cluster, ClusterError, RECORD_ANNOTATION};

#[tokio::test]
async fn connect_uses_the_current_context_of_kubeconfig() {
    let api = KubeApi::start().await;
    api.put_namespace("demo", &[(RECORD_ANNOTATION, "{}")]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::write(
        &config,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: kind-dev\nclusters:\n- name: dev\n  cluster:\n    server: http://{}\n\
contexts:\n- name: kind-dev\n  context:\n    cluster: dev\n    user: dev\n- name: other\n  context:\n    cluster: dev\n    user: dev\n\
users:\n- name: dev\n  user: {{}}\n",
            api.addr
        ),
    )
    .unwrap();
    // SAFETY: this test binary has a single test and no other thread reads the environment now.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("KUBECONFIG", &config)
    };

    let cluster = Cluster::connect(None, "demo").await.unwrap();
    assert_eq!(cluster.context, "kind-dev");
    assert_eq!(cluster.kind_cluster(), Some("dev"));
    assert_eq!(cluster.place(), "kind-dev/demo");
    let read = cluster.read_record().await.unwrap();
    assert!(read.record.is_empty() && read.warning.is_none());
    assert_eq!(api.requests("/api/v1/namespaces/demo"), 1);

    let other = Cluster::connect(Some("other"), "demo").await.unwrap();
    assert_eq!(
        (other.context.as_str(), other.kind_cluster()),
        ("other", None)
    );

    let err = Cluster::connect(Some("nope"), "demo").await.unwrap_err();
    assert!(matches!(err, ClusterError::Config { .. }), "{err}");
    assert!(err.to_string().contains("\"nope\""), "{err}");
}
