//! A send on the Docker target keeps a compose service's container whole and waits as compose and
//! Kubernetes do (issue 53). Real daemon, Debian's `docker-compose` (1.29): a stack runs `backend`
//! (a module's artifact, meshtop's module label under `labels:`, a healthcheck, a named volume, two
//! networks with aliases, a hostname, `stop_grace_period`) and a `client` on both networks. After
//! `meshtop send`, the client reaches `backend` by every alias, the volume's data is there, `docker
//! inspect` is the old container's but for an explicit list, the container is `healthy` and
//! `docker-compose ps` lists it. A new artifact that turns `unhealthy` (or, without a healthcheck,
//! dies within the watch) leaves the old container running, and the send says why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use common::httpd::docker;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{remove_from_daemon, require_docker, run_id, said};
use serde_json::Value;

/// The compose stack's backend as compose names its container.
const BACKEND: &str = "backend_1";

/// A mesh of one module (`backend`, policy record: a converge records, `send` moves) and a compose
/// project running it, every name carrying a fresh run id. Dropping it takes the project down
/// (containers, networks, the named volume) and removes the mesh's images.
struct Stack {
    dir: tempfile::TempDir,
    mesh: String,
    project: String,
}

impl Stack {
    fn new(tag: &str) -> Stack {
        require_docker();
        let id = run_id();
        let stack = Stack {
            dir: tempfile::tempdir().unwrap(),
            mesh: format!("tc{tag}-{id}"),
            project: format!("mtc{tag}{id}"),
        };
        common::httpd::httpd_context(&stack.root().join("backend"));
        std::fs::write(
            stack.root().join("mesh.toml"),
            format!(
                "[mesh]\nname = \"{}\"\n\n[target]\nkind = \"docker\"\n\n\
                 [[module]]\nname = \"backend\"\ncontext = \"backend\"\npolicy = \"record\"\n",
                stack.mesh
            ),
        )
        .unwrap();
        stack.artifact("v1", true, "");
        stack
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("mesh")
    }

    /// The backend's next artifact: what `/www/version.txt` says, whether `/www/ok` (what the
    /// stack's healthcheck reads) is there, and shell lines run before the server.
    fn artifact(&self, version: &str, ok_file: bool, before: &str) {
        let www = self.root().join("backend/www");
        std::fs::write(www.join("version.txt"), format!("{version}\n")).unwrap();
        let ok = www.join("ok");
        if ok_file {
            std::fs::write(&ok, "ok\n").unwrap();
        } else if ok.exists() {
            std::fs::remove_file(&ok).unwrap();
        }
        // httpd as PID 1 ignores SIGTERM: a stop waits out the whole grace.
        let cmd = if before.is_empty() {
            "CMD [\"httpd\", \"-f\", \"-p\", \"8080\", \"-h\", \"/www\"]".to_string()
        } else {
            format!("CMD [\"sh\", \"-c\", \"{before} httpd -f -p 8080 -h /www\"]")
        };
        common::httpd::httpd_dockerfile(&self.root().join("backend"), &cmd);
    }

    fn meshtop(&self, args: &[&str]) -> Output {
        common::httpd::meshtop_in(self.dir.path(), args)
    }

    /// Converge the mesh; the backend's (ref, artifact).
    fn converge(&self) -> (String, String) {
        let args = ["converge", "--json"];
        let (summary, _) = common::json_of(&args, &self.meshtop(&args));
        let module = &summary["modules"][0];
        (
            module["ref"].as_str().unwrap().to_string(),
            module["digest"].as_str().unwrap().to_string(),
        )
    }

    fn compose_file(&self) -> PathBuf {
        self.dir.path().join("docker-compose.yml")
    }

    fn compose(&self, args: &[&str]) -> Output {
        Command::new("docker-compose")
            .arg("-p")
            .arg(&self.project)
            .arg("-f")
            .arg(self.compose_file())
            .args(args)
            .output()
            .expect("these tests need Debian's docker-compose: apt-get install docker-compose")
    }

    /// Write the compose file on `reference` and bring the stack up; the backend is declared a
    /// machine of the mesh (compose named it) once it runs, and is healthy (or running) when this returns.
    fn up(&self, reference: &str, healthcheck: bool) {
        let health = if healthcheck {
            "    healthcheck:\n      test: [\"CMD-SHELL\", \"cat /www/ok\"]\n      \
             interval: 1s\n      timeout: 1s\n      retries: 3\n"
        } else {
            ""
        };
        let file = format!(
            "version: \"2.4\"\nservices:\n  backend:\n    image: {reference}\n    \
             hostname: backend-host\n    domainname: stack.test\n    \
             labels:\n      jr2.dev/module: backend\n      team.example/owner: payments\n    \
             environment:\n      ROLE: backend\n{health}    stop_grace_period: 2s\n    \
             volumes:\n      - data:/data\n    networks:\n      front:\n        aliases: [api-front]\n      \
             back:\n        aliases: [api-back]\n  client:\n    image: {reference}\n    \
             command: [\"sleep\", \"3600\"]\n    networks: [front, back]\n\
             volumes:\n  data: {{}}\nnetworks:\n  front: {{}}\n  back: {{}}\n"
        );
        std::fs::write(self.compose_file(), file).unwrap();
        let up = self.compose(&["up", "-d"]);
        assert!(up.status.success(), "docker-compose up: {}", said(&up));
        let mesh_file = self.root().join("mesh.toml");
        let mut text = std::fs::read_to_string(&mesh_file).unwrap();
        text.push_str(&format!(
            "\n[[machine]]\nname = \"{}\"\nmodule = \"backend\"\n",
            self.container(BACKEND)
        ));
        std::fs::write(&mesh_file, text).unwrap();
        let want = if healthcheck { "healthy" } else { "running" };
        wait_for(Duration::from_secs(60), &format!("backend {want}"), || {
            let state = &self.inspect(BACKEND)["State"];
            (state["Health"]["Status"] == want || (!healthcheck && state["Running"] == true))
                .then_some(())
        });
    }

    /// The stack as a team runs it, meshtop nowhere in its compose file: `backend` scaled to
    /// `scale` containers on `reference` (a healthcheck, a 1 s grace, an alias) and a client; the
    /// mesh file declares the service as the module's machine, by compose's labels. Returns once
    /// every backend is healthy.
    fn up_service(&self, reference: &str, scale: usize) {
        let file = format!(
            "version: \"2.4\"\nservices:\n  backend:\n    image: {reference}\n    \
             healthcheck:\n      test: [\"CMD-SHELL\", \"cat /www/ok\"]\n      \
             interval: 1s\n      timeout: 1s\n      retries: 3\n    stop_grace_period: 1s\n    \
             networks:\n      front:\n        aliases: [api-front]\n  client:\n    \
             image: {reference}\n    command: [\"sleep\", \"3600\"]\n    networks: [front]\n\
             networks:\n  front: {{}}\n"
        );
        std::fs::write(self.compose_file(), file).unwrap();
        let scale = format!("backend={scale}");
        let up = self.compose(&["up", "-d", "--scale", &scale]);
        assert!(up.status.success(), "docker-compose up: {}", said(&up));
        self.all_healthy();
    }

    /// Wait until every backend container of the project is healthy.
    fn all_healthy(&self) {
        wait_for(Duration::from_secs(60), "every backend healthy", || {
            let ps = docker(&[
                "ps",
                "-a",
                "--filter",
                &format!("label=com.docker.compose.project={}", self.project),
                "--filter",
                "label=com.docker.compose.service=backend",
                "--format",
                "{{.Status}}",
            ]);
            (!ps.trim().is_empty() && ps.lines().all(|l| l.contains("(healthy)"))).then_some(())
        });
    }

    /// Declare the compose service `backend` of the project as the module's machine, and make
    /// the module roll out (a converge sends).
    fn declare_service(&self) {
        let mesh_file = self.root().join("mesh.toml");
        let text = std::fs::read_to_string(&mesh_file)
            .unwrap()
            .replace("policy = \"record\"", "policy = \"rollout\"");
        std::fs::write(
            &mesh_file,
            format!(
                "{text}\n[[machine]]\nname = \"backend\"\nmodule = \"backend\"\n\
                 compose = {{ project = \"{}\", service = \"backend\" }}\n",
                self.project
            ),
        )
        .unwrap();
    }

    /// machine name → (state, health) from `meshtop status --json`.
    fn status(&self) -> BTreeMap<String, (String, String)> {
        let args = ["status", "--json"];
        common::httpd::machine_states(&common::json_of(&args, &self.meshtop(&args)).0)
    }

    /// A container of the project by its service's name (`backend_1`).
    fn container(&self, service: &str) -> String {
        format!("{}_{service}", self.project)
    }

    fn inspect(&self, service: &str) -> Value {
        let out = docker(&["inspect", &self.container(service)]);
        serde_json::from_str::<Value>(&out).unwrap()[0].clone()
    }

    /// `meshtop send backend`: whether it succeeded, and its outcome's message; what it said on
    /// the way (its progress, on stderr) in `live`.
    fn send_saying(&self, live: &mut String) -> (bool, String) {
        let output = self.meshtop(&["send", "backend", "--yes", "--json"]);
        let outcomes: Value = serde_json::from_slice(&output.stdout)
            .unwrap_or_else(|e| panic!("send --json is not JSON ({e}): {}", said(&output)));
        assert_eq!(outcomes.as_array().map(Vec::len), Some(1), "{outcomes}");
        let ok = outcomes[0]["ok"] == true;
        assert_eq!(ok, output.status.success(), "{}", said(&output));
        *live = String::from_utf8_lossy(&output.stderr).into_owned();
        (ok, outcomes[0]["message"].as_str().unwrap().to_string())
    }

    fn send(&self) -> (bool, String) {
        self.send_saying(&mut String::new())
    }

    /// What the client gets from `url` (wget through the stack's networks).
    fn client_gets(&self, url: &str) -> Result<String, String> {
        let out = Command::new("docker")
            .args([
                "exec",
                &self.container("client_1"),
                "wget",
                "-q",
                "-O",
                "-",
                url,
            ])
            .output()
            .unwrap();
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(said(&out))
        }
    }

    /// Every alias of the backend, on each network, answers with `version` (waited for: the
    /// daemon's DNS answers once the endpoint is up).
    fn reaches(&self, version: &str) {
        for host in ["backend", "api-front", "api-back"] {
            let url = format!("http://{host}:8080/version.txt");
            wait_for(
                Duration::from_secs(20),
                &format!("{url} → {version}"),
                || (self.client_gets(&url).ok()? == version).then_some(()),
            );
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // A container a send left under another name would keep the project's networks.
        let _ = Command::new("docker")
            .args([
                "rm",
                "-f",
                "-v",
                &format!("{}_{BACKEND}.meshtop-previous", self.project),
            ])
            .output();
        if self.compose_file().exists() {
            let down = self.compose(&["down", "-v", "--remove-orphans", "-t", "1"]);
            if !down.status.success() {
                eprintln!("docker-compose down {}: {}", self.project, said(&down));
            }
        }
        let left = remove_from_daemon(&self.mesh);
        if !left.is_empty() {
            eprintln!("mesh {}: images left on the daemon: {left:?}", self.mesh);
        }
    }
}

/// Poll `check` until it answers, panicking after `within` with what was awaited.
fn wait_for<T>(within: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(found) = check() {
            return found;
        }
        assert!(Instant::now() < deadline, "waited {within:?} for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What may differ between the container a send replaced and the one it made, each with why. A
/// path is a JSON pointer into `docker inspect`; `*` stands for one key (a network's name).
const MAY_DIFFER: &[(&str, &str)] = &[
    ("/Id", "a new container"),
    ("/Created", "made by the send"),
    ("/Image", "the new artifact: the one thing a send changes"),
    ("/Config/Image", "the artifact it was made from"),
    (
        "/State/*",
        "running since the send: pid, start time, its own health checks",
    ),
    (
        "/ResolvConfPath",
        "a file in the new container's own directory (named by its id)",
    ),
    ("/HostnamePath", "idem"),
    ("/HostsPath", "idem"),
    ("/LogPath", "idem"),
    (
        "/GraphDriver/Data/*",
        "its own writable layer on the new image's layers",
    ),
    (
        "/ExecIDs/*",
        "the commands running in it when inspected: the test's, and its healthcheck's own probes",
    ),
    ("/NetworkSettings/SandboxID", "a new network namespace"),
    ("/NetworkSettings/SandboxKey", "idem"),
    (
        "/NetworkSettings/Networks/*/EndpointID",
        "a new endpoint on each network",
    ),
    (
        "/NetworkSettings/Networks/*/IPAddress",
        "an address the network's IPAM gave the endpoint",
    ),
    ("/NetworkSettings/Networks/*/MacAddress", "idem"),
    ("/NetworkSettings/Networks/*/GlobalIPv6Address", "idem"),
];

/// Whether `path` is one of [`MAY_DIFFER`].
fn may_differ(path: &str) -> bool {
    MAY_DIFFER.iter().any(|(pattern, _)| {
        let want: Vec<&str> = pattern.split('/').collect();
        let got: Vec<&str> = path.split('/').collect();
        // A pattern ending in `*` covers everything under that key, and the key itself: a list
        // that was `["…"]` (one healthcheck probe running when inspected) reads `/ExecIDs/0`, and
        // the same list `null` a moment later reads `/ExecIDs`.
        let prefix = want.last() == Some(&"*") && got.len() + 1 >= want.len();
        (got.len() == want.len() || prefix)
            && want.iter().zip(&got).all(|(w, g)| *w == "*" || w == g)
    })
}

/// The full suite once failed here: the old container was inspected while its healthcheck's probe
/// ran (`ExecIDs: ["…"]`), the new one after (`ExecIDs: null`).
#[test]
fn a_list_that_emptied_between_two_looks_may_differ_and_the_rest_may_not() {
    assert!(may_differ("/ExecIDs/0"));
    assert!(
        may_differ("/ExecIDs"),
        "the list, null or gone, as well as its items"
    );
    assert!(may_differ("/State"));
    assert!(!may_differ("/Config/Env/0"));
    assert!(!may_differ("/Config"));
    assert!(!may_differ("/Execs"));
}

/// `docker inspect` as pointer → leaf, each network's aliases without the container's own short id
/// (the daemon adds it to every user-defined network's aliases) and sorted (their order means nothing).
fn flatten(inspect: &Value) -> BTreeMap<String, Value> {
    let mut inspect = inspect.clone();
    let short: String = inspect["Id"].as_str().unwrap()[..12].to_string();
    if let Some(networks) = inspect["NetworkSettings"]["Networks"].as_object_mut() {
        for endpoint in networks.values_mut() {
            if let Some(aliases) = endpoint["Aliases"].as_array_mut() {
                aliases.retain(|a| a.as_str() != Some(short.as_str()));
                aliases.sort_by_key(|a| a.as_str().map(str::to_string));
            }
        }
    }
    let mut leaves = BTreeMap::new();
    fn walk(prefix: String, value: &Value, leaves: &mut BTreeMap<String, Value>) {
        match value {
            Value::Object(map) if !map.is_empty() => {
                for (key, value) in map {
                    walk(format!("{prefix}/{key}"), value, leaves);
                }
            }
            Value::Array(items) if !items.is_empty() => {
                for (index, value) in items.iter().enumerate() {
                    walk(format!("{prefix}/{index}"), value, leaves);
                }
            }
            leaf => {
                leaves.insert(prefix, leaf.clone());
            }
        }
    }
    walk(String::new(), &inspect, &mut leaves);
    leaves
}

/// Every field where `after` is not `before` and no entry of [`MAY_DIFFER`] allows it; a label the
/// new artifact itself carries (meshtop stamps its inputs on every image) may take the new value.
fn unexplained_differences(before: &Value, after: &Value, new_image: &Value) -> Vec<String> {
    let (old, new) = (flatten(before), flatten(after));
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|key| old.get(*key) != new.get(*key) && !may_differ(key))
        .filter(|key| {
            let label = key.strip_prefix("/Config/Labels/");
            !label.is_some_and(|l| new.get(*key) == new_image["Config"]["Labels"].get(l))
        })
        .map(|key| format!("{key}: {:?} → {:?}", old.get(key), new.get(key)))
        .collect()
}

#[test]
fn a_send_keeps_the_compose_service_whole_and_counts_it_sent_once_healthy() {
    let stack = Stack::new("whole");
    let (first_ref, first) = stack.converge();
    stack.up(&first_ref, true);
    stack.reaches("v1");
    let backend = stack.container(BACKEND);
    docker(&["exec", &backend, "sh", "-c", "echo kept > /data/mark"]);
    let before = stack.inspect(BACKEND);

    stack.artifact("v2", true, "");
    let (_, second) = stack.converge();
    assert_ne!(first, second, "the new www/version.txt moves the artifact");
    let mut live = String::new();
    let (ok, message) = stack.send_saying(&mut live);
    assert!(ok, "the send failed: {message}");
    // What it waited on was said as it began: the old one's grace, then the healthcheck.
    assert!(live.contains("its grace: 2 s"), "{live}");
    assert!(live.contains("waiting until it reports healthy"), "{live}");

    let after = stack.inspect(BACKEND);
    assert_eq!(after["Image"], second, "{after}");
    // Sent once healthy: the send waited for the healthcheck, not for a moment.
    assert_eq!(after["State"]["Health"]["Status"], "healthy", "{after}");
    assert!(
        message.contains("healthy"),
        "the send says what it waited for: {message}"
    );
    // The client still reaches it by the service's name and by its alias on each network.
    stack.reaches("v2");
    assert_eq!(
        docker(&["exec", &backend, "cat", "/data/mark"]).trim(),
        "kept"
    );
    let new_image: Value =
        serde_json::from_str::<Value>(&docker(&["image", "inspect", &second])).unwrap()[0].clone();
    let differences = unexplained_differences(&before, &after, &new_image);
    assert!(
        differences.is_empty(),
        "the sent container differs from the old one beyond its image:\n{}",
        differences.join("\n")
    );
    // compose still knows its service: `ps` lists it, up and healthy.
    let ps = stack.compose(&["ps"]);
    assert!(ps.status.success(), "{}", said(&ps));
    let listed = String::from_utf8_lossy(&ps.stdout);
    let line = listed.lines().find(|l| l.starts_with(&backend));
    assert!(
        line.is_some_and(|l| l.contains("Up (healthy)")),
        "docker-compose ps does not list {backend} up and healthy:\n{listed}"
    );
    // Nothing of the old container stays.
    let all = docker(&["ps", "-a", "--format", "{{.Names}}"]);
    assert!(
        !all.contains(&format!("{backend}.meshtop-previous")),
        "{all}"
    );
}

#[test]
fn a_new_artifact_that_turns_unhealthy_leaves_the_old_container_running_and_says_why() {
    let stack = Stack::new("sick");
    let (first_ref, first) = stack.converge();
    stack.up(&first_ref, true);
    let old_id = stack.inspect(BACKEND)["Id"].clone();

    // The stack's healthcheck reads /www/ok: the new artifact does not have it.
    stack.artifact("v2", false, "");
    let (_, second) = stack.converge();
    assert_ne!(first, second);
    let (ok, message) = stack.send();
    assert!(!ok, "a send to an unhealthy artifact succeeded: {message}");
    assert!(message.contains("unhealthy"), "{message}");
    // Its last health log lines say why.
    assert!(message.contains("/www/ok"), "{message}");

    let after = stack.inspect(BACKEND);
    assert_eq!(
        after["Id"], old_id,
        "the old container is back under its name"
    );
    assert_eq!(after["Image"], first, "{after}");
    assert_eq!(after["State"]["Running"], true, "{after}");
    stack.reaches("v1");
    let all = docker(&["ps", "-a", "--format", "{{.Names}}"]);
    let backend = stack.container(BACKEND);
    assert_eq!(
        all.lines().filter(|n| n.starts_with(&backend)).count(),
        1,
        "the failed new container is gone, the old one alone has the name:\n{all}"
    );
}

#[test]
fn a_send_stops_the_old_container_with_its_own_grace_not_ten_seconds() {
    let stack = Stack::new("grace");
    let (first_ref, _) = stack.converge();
    stack.up(&first_ref, true);
    let old_id = stack.inspect(BACKEND)["Id"].as_str().unwrap().to_string();
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();

    stack.artifact("v2", true, "");
    stack.converge();
    let (ok, message) = stack.send();
    assert!(ok, "{message}");

    // The daemon's events of the old container: SIGTERM (httpd as PID 1 ignores it), then it dies
    // when the grace (compose's stop_grace_period: 2s) is over and the daemon kills it.
    let until = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1;
    let events = docker(&[
        "events",
        "--since",
        &since.to_string(),
        "--until",
        &until.to_string(),
        "--filter",
        &format!("container={old_id}"),
        "--format",
        "{{json .}}",
    ]);
    let events: Vec<Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = |action: &str, signal: Option<&str>| {
        events
            .iter()
            .find(|e| {
                e["Action"] == action
                    && signal.is_none_or(|s| e["Actor"]["Attributes"]["signal"] == s)
            })
            .and_then(|e| e["timeNano"].as_i64())
            .unwrap_or_else(|| panic!("no {action} event of the old container: {events:?}"))
    };
    let grace = Duration::from_nanos((at("die", None) - at("kill", Some("15"))) as u64);
    assert!(
        grace >= Duration::from_millis(1500) && grace < Duration::from_secs(6),
        "the old container died {grace:?} after SIGTERM; its stop_grace_period is 2s"
    );
}

#[test]
fn without_a_healthcheck_a_new_container_that_dies_within_the_watch_is_not_sent() {
    let stack = Stack::new("brief");
    let (first_ref, _) = stack.converge();
    stack.up(&first_ref, false);
    let old_id = stack.inspect(BACKEND)["Id"].clone();

    // Up for two seconds, then it fails: a 1 s look would call it sent.
    stack.artifact("v2", true, "sleep 2; exit 3;");
    stack.converge();
    let mut live = String::new();
    let (ok, message) = stack.send_saying(&mut live);
    assert!(!ok, "a container that died after 2 s was sent: {message}");
    assert!(
        live.contains("no healthcheck: it must keep running 5.0 s"),
        "{live}"
    );
    assert!(message.contains("exit code 3"), "{message}");

    let after = stack.inspect(BACKEND);
    assert_eq!(
        after["Id"], old_id,
        "the old container is back under its name"
    );
    assert_eq!(after["State"]["Running"], true, "{after}");
    stack.reaches("v1");
}

#[test]
fn a_compose_service_declared_in_the_mesh_file_is_its_machines_and_a_converge_moves_them() {
    let stack = Stack::new("svc");
    let (first_ref, _) = stack.converge();
    stack.declare_service();
    // Not up yet: missing, and meshtop says how to bring it up (it never runs compose itself).
    let status = stack.status();
    assert_eq!(status.len(), 1, "{status:?}");
    let (state, health) = &status["backend"];
    assert_eq!(state, "missing", "{status:?}");
    assert!(
        health.contains(&format!(
            "docker-compose -p {} up -d backend",
            stack.project
        )),
        "{health}"
    );

    // Scaled to two: two machines, named by compose's container numbers, current.
    stack.up_service(&first_ref, 2);
    let status = stack.status();
    assert_eq!(
        status.keys().collect::<Vec<_>>(),
        ["backend-1", "backend-2"],
        "{status:?}"
    );
    assert!(status.values().all(|(s, _)| s == "current"), "{status:?}");

    // A new artifact: the converge sends it to both, which stay compose's.
    stack.artifact("v2", true, "");
    let (_, second) = stack.converge();
    let status = stack.status();
    assert!(status.values().all(|(s, _)| s == "current"), "{status:?}");
    for number in ["1", "2"] {
        let inspect = stack.inspect(&format!("backend_{number}"));
        assert_eq!(inspect["Image"], second, "{inspect}");
        let labels = &inspect["Config"]["Labels"];
        assert_eq!(labels["com.docker.compose.project"], stack.project.as_str());
        assert_eq!(labels["com.docker.compose.service"], "backend");
        assert_eq!(labels["com.docker.compose.container-number"], number);
    }
    stack.all_healthy();
    let ps = stack.compose(&["ps"]);
    assert!(ps.status.success(), "{}", said(&ps));
    let listed = String::from_utf8_lossy(&ps.stdout);
    for number in ["1", "2"] {
        let name = stack.container(&format!("backend_{number}"));
        assert!(
            listed
                .lines()
                .any(|l| l.starts_with(&name) && l.contains("Up (healthy)")),
            "docker-compose ps does not list {name} up and healthy:\n{listed}"
        );
    }
    // The client reaches the service by its alias, on the new artifact.
    wait_for(Duration::from_secs(20), "api-front → v2", || {
        (stack
            .client_gets("http://api-front:8080/version.txt")
            .ok()?
            == "v2")
            .then_some(())
    });
    // Its logs are any machine's.
    let logs = stack.meshtop(&["logs", "backend", "--machine", "backend-2", "--tail", "5"]);
    assert!(logs.status.success(), "{}", said(&logs));
}

#[test]
fn a_compose_machine_refuses_the_keys_only_a_machine_meshtop_makes_has() {
    let stack = Stack::new("svckeys");
    stack.declare_service();
    let mesh_file = stack.root().join("mesh.toml");
    let text = std::fs::read_to_string(&mesh_file).unwrap();
    std::fs::write(&mesh_file, format!("{text}command = [\"sleep\", \"1\"]\n")).unwrap();
    let out = stack.meshtop(&["status"]);
    assert!(!out.status.success(), "{}", said(&out));
    assert_ne!(out.status.code(), Some(101), "a panic: {}", said(&out));
    let text = said(&out);
    assert!(text.contains("mesh.toml:"), "{text}");
    assert!(
        text.contains("`command` cannot be set here: docker-compose makes its containers"),
        "{text}"
    );
    assert!(!text.contains("panicked"), "{text}");
}
