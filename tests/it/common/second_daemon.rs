//! The second Docker daemon the builder-pool tests build on (`scripts/start-second-daemon.sh`: its
//! own socket, data-root and bridge), and the clean-up of a mesh's images there.

use super::example::remove_from_daemon_at;

/// The second daemon's socket.
pub(crate) const SECOND_SOCKET: &str = "/run/meshtop-test-dockerd2/docker.sock";
/// The second daemon as the docker CLI (`-H`) and a mesh file's endpoint name it.
pub(crate) const SECOND: &str = "unix:///run/meshtop-test-dockerd2/docker.sock";

/// The second daemon must answer: these tests never skip.
pub(crate) fn require_second_daemon() {
    let ok = std::process::Command::new("docker")
        .args(["-H", SECOND, "version", "--format", "{{.Server.Version}}"])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "no second Docker daemon answers at {SECOND}: start it with scripts/start-second-daemon.sh"
    );
}

/// Removes mesh `.0`'s images from the second daemon when the test ends, passed or failed.
pub(crate) struct SecondDaemonGuard(pub(crate) String);

impl Drop for SecondDaemonGuard {
    fn drop(&mut self) {
        let left = remove_from_daemon_at(Some(SECOND), &self.0);
        if !left.is_empty() {
            eprintln!(
                "mesh {}: images left on the second daemon: {left:?}",
                self.0
            );
        }
    }
}

/// The mesh pushes to the local registry and builds on one builder, the second daemon, not the
/// target's: every build crosses through the registry.
pub(crate) fn build_on_second_only(mesh: &super::ExampleMesh) {
    use super::local_registry::LOCAL;
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!("name = \"{}\"\nregistry = \"{LOCAL}\"\n", mesh.name),
        1,
    );
    let text =
        format!("{text}\n[[builder]]\nname = \"two\"\nendpoint = \"{SECOND}\"\nmax_builds = 2\n");
    std::fs::write(&file, text).unwrap();
}
