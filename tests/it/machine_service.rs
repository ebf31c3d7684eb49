//! A declared machine can run a service by itself (issue 53): its `[[machine]]` ports, volumes,
//! networks with aliases, restart policy, healthcheck and stop grace, with compose's names and
//! meanings, are what the container meshtop makes has. Real daemon: `docker inspect` of the machine a
//! converge created, a client reaching it by its alias, the published port answering on the host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use common::httpd::docker;

use std::process::Command;
use std::time::Duration;

use common::{remove_from_daemon, require_docker, said, test_name};

/// A mesh of one module `web` (busybox httpd) and its machine `<mesh>-web` with every service key.
struct Service {
    dir: tempfile::TempDir,
    mesh: String,
}

impl Service {
    fn new() -> Service {
        require_docker();
        let service = Service {
            dir: tempfile::tempdir().unwrap(),
            mesh: test_name("svc"),
        };
        let web = service.dir.path().join("mesh/web");
        common::httpd::httpd_context(&web);
        std::fs::write(web.join("www/version.txt"), "v1\n").unwrap();
        common::httpd::httpd_dockerfile(
            &web,
            "CMD [\"httpd\", \"-f\", \"-p\", \"8080\", \"-h\", \"/www\"]",
        );
        std::fs::create_dir_all(service.dir.path().join("mesh/shared")).unwrap();
        std::fs::write(
            service.dir.path().join("mesh/shared/note.txt"),
            "from the host\n",
        )
        .unwrap();
        let mesh = &service.mesh;
        std::fs::write(
            service.dir.path().join("mesh/mesh.toml"),
            format!(
                "[mesh]\nname = \"{mesh}\"\n\n[[module]]\nname = \"web\"\ncontext = \"web\"\n\n\
                 [[machine]]\nname = \"{mesh}-web\"\nmodule = \"web\"\n\
                 ports = [\"127.0.0.1::8080\"]\n\
                 volumes = [\"{mesh}-data:/data\", \"./shared:/www/shared:ro\"]\n\
                 networks = {{ {mesh}-front = {{ aliases = [\"api\"] }}, {mesh}-back = {{}} }}\n\
                 restart = \"on-failure:2\"\n\
                 healthcheck = {{ test = \"cat /www/version.txt\", interval = \"1s\", timeout = \"1s\", retries = 2, start_period = \"500ms\" }}\n\
                 stop_grace_period = \"1500ms\"\n"
            ),
        )
        .unwrap();
        service
    }

    fn machine(&self) -> String {
        format!("{}-web", self.mesh)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let left = remove_from_daemon(&self.mesh);
        for network in ["front", "back"] {
            let _ = Command::new("docker")
                .args(["network", "rm", &format!("{}-{network}", self.mesh)])
                .output();
        }
        let _ = Command::new("docker")
            .args(["volume", "rm", &format!("{}-data", self.mesh)])
            .output();
        if !left.is_empty() {
            eprintln!("mesh {}: images left on the daemon: {left:?}", self.mesh);
        }
    }
}

#[test]
fn a_declared_machine_is_made_with_its_service_keys_as_compose_means_them() {
    let service = Service::new();
    let converge = common::httpd::meshtop_in(service.dir.path(), &["converge"]);
    assert!(converge.status.success(), "{}", said(&converge));
    let machine = service.machine();
    let inspect: serde_json::Value =
        serde_json::from_str::<serde_json::Value>(&docker(&["inspect", &machine])).unwrap()[0]
            .clone();
    let host = &inspect["HostConfig"];
    assert_eq!(host["RestartPolicy"]["Name"], "on-failure", "{host}");
    assert_eq!(host["RestartPolicy"]["MaximumRetryCount"], 2, "{host}");
    let binds: Vec<&str> = host["Binds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_str().unwrap())
        .collect();
    let shared = service.dir.path().join("mesh/shared");
    assert_eq!(
        binds,
        [
            format!("{}-data:/data", service.mesh),
            format!("{}:/www/shared:ro", shared.display())
        ],
        "{host}"
    );
    assert_eq!(
        host["PortBindings"]["8080/tcp"][0]["HostIp"], "127.0.0.1",
        "{host}"
    );
    let config = &inspect["Config"];
    // 1500 ms of grace is 2 whole seconds: never cut short.
    assert_eq!(config["StopTimeout"], 2, "{config}");
    assert_eq!(
        config["Healthcheck"]["Test"],
        serde_json::json!(["CMD-SHELL", "cat /www/version.txt"]),
        "{config}"
    );
    assert_eq!(config["Healthcheck"]["Interval"], 1_000_000_000i64);
    assert_eq!(config["Healthcheck"]["StartPeriod"], 500_000_000i64);
    assert_eq!(config["Healthcheck"]["Retries"], 2);
    let networks = &inspect["NetworkSettings"]["Networks"];
    let front = &networks[format!("{}-front", service.mesh)];
    assert!(
        front["Aliases"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "api")),
        "{networks}"
    );
    assert!(
        networks[format!("{}-back", service.mesh)].is_object(),
        "{networks}"
    );

    // Healthy by its healthcheck; on the host, its published port answers.
    common::wait_for("the machine healthy", Duration::from_secs(30), || {
        let status = docker(&["inspect", "-f", "{{.State.Health.Status}}", &machine]);
        (status.trim() == "healthy").then_some(()).ok_or(status)
    });
    let port = docker(&["port", &machine, "8080/tcp"]);
    let address = port.lines().next().unwrap().trim().to_string();
    let mut stream = std::net::TcpStream::connect(&address).unwrap();
    use std::io::{Read, Write};
    write!(stream, "GET /shared/note.txt HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.contains("from the host"), "{answer}");
    // A client on the network reaches it by its alias.
    let client = docker(&[
        "run",
        "--rm",
        "--network",
        &format!("{}-front", service.mesh),
        "--label",
        &format!("jr2.dev/mesh={}", service.mesh),
        inspect["Config"]["Image"].as_str().unwrap(),
        "wget",
        "-q",
        "-O",
        "-",
        "http://api:8080/version.txt",
    ]);
    assert_eq!(client.trim(), "v1");
}
