//! The real registry the tests run against (scripts/start-registry.sh, 127.0.0.1:5000), and the
//! docker CLI that pushes to it.

use meshtop::mesh::model::Registry;

pub(crate) const LOCAL: &str = "127.0.0.1:5000";

pub(crate) fn registry(host: &str) -> Registry {
    Registry {
        host: host.into(),
        insecure: false,
    }
}

/// The real registry must run: it is never skipped.
pub(crate) async fn require_registry() {
    meshtop::backends::registry::install_crypto_provider();
    let answer = reqwest::Client::new()
        .get(format!("http://{LOCAL}/v2/"))
        .send()
        .await;
    if !answer.is_ok_and(|r| r.status().is_success()) {
        panic!(
            "no registry answers at http://{LOCAL}/v2/: start one with scripts/start-registry.sh"
        );
    }
}

/// The image id each of the mesh's machines runs, by machine name.
pub(crate) fn machine_images(mesh: &str) -> std::collections::BTreeMap<String, String> {
    let label = format!("label=jr2.dev/mesh={mesh}");
    docker(&["ps", "-q", "--filter", &label])
        .split_whitespace()
        .map(|id| {
            let out = docker(&["inspect", "-f", "{{.Name}} {{.Image}}", id]);
            let (name, image) = out.trim().split_once(' ').unwrap();
            (name.trim_start_matches('/').to_string(), image.to_string())
        })
        .collect()
}

/// Run the docker CLI; its stdout, or a panic with its stderr.
pub(crate) fn docker(args: &[&str]) -> String {
    let out = std::process::Command::new("docker")
        .args(args)
        .output()
        .expect("the docker CLI runs");
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
