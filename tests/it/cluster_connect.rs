//! `Cluster::connect` configured as kubectl is: KUBECONFIG and its current context, proxies from the
//! environment with NO_PROXY, the in-cluster configuration when there is no kubeconfig.
//! Its own test binary: it sets KUBECONFIG, HOME and the proxy variables for the whole process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

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
    let proxy = "http://127.0.0.2:9".to_string();
    // SAFETY: this test binary has a single test and no other thread reads the environment now.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("KUBECONFIG", &config);
        // A proxy that nothing answers (127.0.0.2:9: every byte stays on loopback): kubectl would not
        // use it for 127.0.0.1 (NO_PROXY, and loopback is never proxied). Before, kube-client took HTTPS_PROXY
        // for every server (and matched NO_PROXY against the proxy's own address).
        std::env::set_var("HTTPS_PROXY", &proxy);
        std::env::set_var("HTTP_PROXY", &proxy);
        std::env::set_var("NO_PROXY", "127.0.0.1");
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

    // No kubeconfig at all and no context asked for: the in-cluster service account, as kubectl; outside
    // a cluster that says so.
    let home = tempfile::tempdir().unwrap();
    #[allow(unsafe_code)]
    unsafe {
        std::env::remove_var("KUBECONFIG");
        std::env::set_var("HOME", home.path());
        std::env::remove_var("KUBERNETES_SERVICE_HOST");
        std::env::remove_var("KUBERNETES_SERVICE_PORT");
    };
    let err = Cluster::connect(None, "demo").await.unwrap_err();
    assert!(err.to_string().contains("not inside a cluster"), "{err}");
}
