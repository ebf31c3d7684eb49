//! A module that serves files over HTTP with Debian's busybox-static, FROM scratch (no registry
//! pull): what the tests that move running machines build, and the meshtop they run on it.

use std::path::Path;
use std::process::{Command, Output};

/// Make `context` a busybox httpd module's context: busybox copied in, `www/` made.
pub(crate) fn httpd_context(context: &Path) {
    let busybox = Path::new("/bin/busybox");
    assert!(
        busybox.exists(),
        "these tests need Debian's busybox-static (/bin/busybox): apt-get install busybox-static"
    );
    std::fs::create_dir_all(context.join("www")).unwrap();
    std::fs::copy(busybox, context.join("busybox")).unwrap();
}

/// Write the context's Dockerfile: busybox installed, `www/` at `/www`, then the `cmd` line.
pub(crate) fn httpd_dockerfile(context: &Path, cmd: &str) {
    std::fs::write(
        context.join("Dockerfile"),
        format!(
            "FROM scratch\nCOPY busybox /bin/busybox\n\
             RUN [\"/bin/busybox\", \"--install\", \"-s\", \"/bin\"]\n\
             ENV PATH=/bin\nCOPY www/ /www/\n{cmd}\n"
        ),
    )
    .unwrap();
}

/// meshtop on the mesh file `<dir>/mesh/mesh.toml` with the state `<dir>/state.db`.
pub(crate) fn meshtop_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .arg("--mesh")
        .arg(dir.join("mesh/mesh.toml"))
        .arg("--state")
        .arg(dir.join("state.db"))
        .args(args)
        .output()
        .unwrap()
}

/// machine name → (state, health) of `status --json`.
pub(crate) fn machine_states(
    status: &serde_json::Value,
) -> std::collections::BTreeMap<String, (String, String)> {
    let text = |m: &serde_json::Value, key: &str| m[key].as_str().unwrap().to_string();
    status
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (text(m, "name"), (text(m, "state"), text(m, "health"))))
        .collect()
}

/// The docker CLI's stdout; panics with what it said when it failed.
pub(crate) fn docker(args: &[&str]) -> String {
    let out = Command::new("docker").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        super::said(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
