//! Shared by the integration tests: a private copy of the example mesh, the real binary, and
//! cleanup of everything a test left on the real daemon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

// What a command said: the test kit's, named here too, where the tests have always found it.
pub(crate) use meshtop_testkit::said;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A copy of `assets/example` under a unique mesh name (machines renamed to match), with its own
/// state database. Dropping it removes the mesh's containers and images from the daemon.
pub(crate) struct ExampleMesh {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) name: String,
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// Fails loudly when the daemon is not there: these tests never skip.
pub(crate) fn require_docker() {
    let ok = Command::new("docker")
        .arg("info")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ok,
        "these tests need the Docker daemon: `docker info` failed — start it (CI: .ci/run checks it)"
    );
}

impl ExampleMesh {
    pub(crate) fn new(tag: &str) -> ExampleMesh {
        require_docker();
        let busybox = Path::new("/bin/busybox");
        assert!(
            busybox.exists(),
            "the example mesh needs Debian's busybox-static (/bin/busybox): apt-get install busybox-static"
        );
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/example");
        copy_tree(&root, &dir.path().join("mesh"));
        std::fs::copy(busybox, dir.path().join("mesh/base/busybox")).unwrap();
        let name = super::test_name(tag);
        let file = dir.path().join("mesh/mesh.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        let text = text
            .replace("name = \"demo\"", &format!("name = \"{name}\""))
            .replace("name = \"demo-", &format!("name = \"{name}-"));
        std::fs::write(&file, text).unwrap();
        ExampleMesh { dir, name }
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.dir.path().join("mesh")
    }

    pub(crate) fn mesh_file(&self) -> PathBuf {
        self.root().join("mesh.toml")
    }

    pub(crate) fn state(&self) -> PathBuf {
        self.dir.path().join("state.db")
    }

    /// Run the real binary on this mesh and state database.
    pub(crate) fn meshtop(&self, args: &[&str]) -> Output {
        self.meshtop_with_state(&self.state(), args)
    }

    pub(crate) fn meshtop_with_state(&self, state: &Path, args: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_meshtop"))
            .arg("--mesh")
            .arg(self.mesh_file())
            .arg("--state")
            .arg(state)
            .args(args)
            .output()
            .unwrap()
    }

    /// `meshtop converge ARGS` on this mesh with `env` added to its environment.
    pub(crate) fn converge_with(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_meshtop"))
            .arg("--mesh")
            .arg(self.mesh_file())
            .arg("--state")
            .arg(self.state())
            .arg("converge")
            .args(args)
            .envs(env.iter().copied())
            .output()
            .unwrap()
    }

    /// Start `meshtop converge` on this mesh in the background, its stderr going to `log`;
    /// `docker_host` points it at another daemon socket.
    pub(crate) fn spawn_converge(&self, log: &Path, envs: &[(&str, &str)]) -> std::process::Child {
        let mut command = Command::new(env!("CARGO_BIN_EXE_meshtop"));
        command.envs(envs.iter().copied());
        command
            .arg("--mesh")
            .arg(self.mesh_file())
            .arg("--state")
            .arg(self.state())
            .arg("converge")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap()
    }

    /// Run and parse `--json` output; panics with stderr when the command failed.
    pub(crate) fn json(&self, args: &[&str]) -> serde_json::Value {
        json_of(args, &self.meshtop(args)).0
    }

    /// [`ExampleMesh::json`] with another state database (another machine, a clean one).
    pub(crate) fn json_with_state(&self, state: &Path, args: &[&str]) -> serde_json::Value {
        json_of(args, &self.meshtop_with_state(state, args)).0
    }
}

impl ExampleMesh {
    /// A clean machine: the mesh's containers and images gone from the daemon.
    pub(crate) fn clean_daemon(&self) {
        let left = remove_from_daemon(&self.name);
        assert!(
            left.is_empty(),
            "the images of mesh {} could not be removed: {left:?}",
            self.name
        );
    }
}

/// Remove every container and image of mesh `name` from the daemon; the images that stayed.
/// Containers first (an image a container was made from is not removed), then images dependents
/// first: `docker rmi` of a base with a dependent image is refused even with `-f` ("image has
/// dependent child images"), so each image is removed on its own, round after round, until a round
/// removes nothing. One `rmi` of every id at once (as before) left `tbldr-*`, `tonce-*`, … behind.
/// Images are found by the mesh's label and by its repositories (`[host/][x]<name>/…`: a test's own
/// tags, pushed copies).
pub(crate) fn remove_from_daemon(name: &str) -> Vec<String> {
    remove_from_daemon_at(None, name)
}

/// As [`remove_from_daemon`], on the daemon at `host` (`unix:///…`; None: the CLI's own).
pub(crate) fn remove_from_daemon_at(host: Option<&str>, name: &str) -> Vec<String> {
    let docker = || {
        let mut command = Command::new("docker");
        if let Some(host) = host {
            command.args(["-H", host]);
        }
        command
    };
    let ids = |args: &[&str]| {
        let out = docker()
            .args(args)
            .output()
            .map(|o| o.stdout)
            .unwrap_or_default();
        String::from_utf8_lossy(&out)
            .split_whitespace()
            .map(str::to_string)
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<String>>()
    };
    let label = format!("label=jr2.dev/mesh={name}");
    let containers = [
        ids(&["ps", "-aq", "--filter", &label]),
        ids(&["ps", "-aq", "--filter", &format!("name=^/?{name}-")]),
    ]
    .concat();
    if !containers.is_empty() {
        let _ = docker().args(["rm", "-f", "-v"]).args(&containers).output();
    }
    let images = || {
        let mut found = ids(&["images", "-aq", "--filter", &label]);
        for pattern in [format!("*{name}/*"), format!("*/*{name}/*")] {
            found.extend(ids(&[
                "images",
                "-q",
                "--filter",
                &format!("reference={pattern}"),
            ]));
        }
        found.sort();
        found.dedup();
        found
    };
    let mut left = images();
    while !left.is_empty() {
        for image in &left {
            let _ = docker().args(["rmi", "-f", image]).output();
        }
        let now = images();
        if now.len() >= left.len() {
            return now;
        }
        left = now;
    }
    left
}
/// Removes mesh `name`'s containers and images when dropped, when the test passes and when it
/// fails: for a test that writes its own mesh file instead of an [`ExampleMesh`].
pub(crate) struct DaemonGuard(pub(crate) String);

impl Drop for DaemonGuard {
    fn drop(&mut self) {
        let left = remove_from_daemon(&self.0);
        if !left.is_empty() {
            eprintln!("mesh {}: images left on the daemon: {left:?}", self.0);
        }
    }
}

impl Drop for ExampleMesh {
    /// Runs when a test passes and when it fails (unwinding): nothing of the mesh stays.
    fn drop(&mut self) {
        let left = remove_from_daemon(&self.name);
        if !left.is_empty() {
            eprintln!(
                "mesh {}: images left on the daemon after the test: {left:?}",
                self.name
            );
        }
    }
}

/// A file of an image, read by running its busybox (`--rm`: the container does not stay).
pub(crate) fn read_in_image(reference: &str, path: &str) -> String {
    let out = Command::new("docker")
        .args(["run", "--rm", reference, "/bin/busybox", "cat", path])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "docker run {reference}: {}",
        said(&out)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// module → decision of a converge summary (`converge --json`). Never empty: a check over every
/// decision (`.values().all(..)`) must have decisions to check.
pub(crate) fn decisions(summary: &serde_json::Value) -> std::collections::BTreeMap<String, String> {
    let modules = summary["modules"].as_array().unwrap();
    assert!(!modules.is_empty(), "a summary without modules: {summary}");
    modules
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                m["decision"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// module → (decision, reason) of a plan (`plan --json`). Never empty, as [`decisions`].
pub(crate) fn plan_reasons(
    plan: &serde_json::Value,
) -> std::collections::BTreeMap<String, (String, String)> {
    let modules = plan["modules"].as_array().unwrap();
    assert!(!modules.is_empty(), "a plan without modules: {plan}");
    modules
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap().to_string(),
                (
                    m["decision"].as_str().unwrap().to_string(),
                    m["reason"].as_str().unwrap().to_string(),
                ),
            )
        })
        .collect()
}

/// Every build row of the mesh (newest first), read straight from the state database.
pub(crate) fn builds(mesh: &ExampleMesh) -> Vec<meshtop::mesh::builds::BuildRow> {
    use meshtop::backends::state::{BuildQuery, StateDb};
    StateDb::open(&mesh.state())
        .and_then(|h| {
            h.builds(&BuildQuery {
                mesh: mesh.name.clone(),
                limit: 100,
                ..BuildQuery::default()
            })
        })
        .unwrap_or_else(|e| panic!("cannot read the builds of mesh {}: {e}", mesh.name))
}

/// Poll the state database until a build of this mesh is running; panics (with the child's
/// output) when the child exits first or nothing runs within a minute.
pub(crate) fn wait_for_running_build(
    mesh: &ExampleMesh,
    child: &mut std::process::Child,
    log: &Path,
) -> meshtop::mesh::builds::BuildRow {
    use meshtop::mesh::builds::BuildStatus;
    use std::time::{Duration, Instant};
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(row) = builds(mesh)
            .into_iter()
            .find(|b| b.status == BuildStatus::Running)
        {
            return row;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "converge ended ({status}) before any build ran:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no build started within a minute:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Wait for a child to end; kills it and panics after `within`, saying what it waited for.
pub(crate) fn wait_exit(
    child: &mut std::process::Child,
    within: std::time::Duration,
    after: &str,
) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the converge did not end within {within:?} of {after}");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

impl ExampleMesh {
    /// The example mesh on two docker targets: its machines staging's, a web and an api machine prod's.
    pub(crate) fn two_docker_targets(tag: &str) -> ExampleMesh {
        let mesh = ExampleMesh::new(tag);
        let file = mesh.mesh_file();
        let text = std::fs::read_to_string(&file).unwrap();
        let (head, machines) = text.split_once("[[machine]]").unwrap();
        let head = head.replace(
            "[target]\nkind = \"docker\"\n",
            "[[target]]\nname = \"staging\"\n\n[[target]]\nname = \"prod\"\npromote_from = \"staging\"\n",
        );
        let machines = format!("[[machine]]{machines}")
            .replace("\nmodule = \"", "\ntarget = \"staging\"\nmodule = \"");
        let name = &mesh.name;
        let prod = format!(
            "\n[[machine]]\nname = \"{name}-prod-web-1\"\nmodule = \"web\"\ntarget = \"prod\"\n\
             \n[[machine]]\nname = \"{name}-prod-api-1\"\nmodule = \"api\"\ntarget = \"prod\"\n"
        );
        std::fs::write(&file, format!("{head}{machines}{prod}")).unwrap();
        mesh
    }
}

/// One cell of `status --all-targets --json`'s grid: `module`'s row, `target`'s column.
pub(crate) fn grid_cell<'a>(
    grid: &'a serde_json::Value,
    module: &str,
    target: &str,
) -> &'a serde_json::Value {
    grid["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["module"] == module)
        .unwrap_or_else(|| panic!("no row {module} in {grid}"))["cells"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["target"] == target)
        .unwrap_or_else(|| panic!("no cell {target} of {module} in {grid}"))
}

/// A `--json` run's answer and its stderr; panics with both when it failed or is not JSON.
pub(crate) fn json_of(args: &[&str], output: &std::process::Output) -> (serde_json::Value, String) {
    assert!(
        output.status.success(),
        "meshtop {args:?} failed ({:?}):\n{}",
        output.status.code(),
        said(output)
    );
    let value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("meshtop {args:?}: not JSON ({e}):\n{}", said(output)));
    (value, String::from_utf8_lossy(&output.stderr).into_owned())
}
