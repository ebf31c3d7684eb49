//! Converges that fail: the daemon going away mid-build, and a failed step as `meshtop builds
//! --failed` shows it (issue 3, "Done when").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::time::Duration;

use common::daemon_proxy::{DOCKER_SOCKET, DaemonProxy};
use common::{ExampleMesh, builds, said, wait_exit, wait_for_running_build};
use meshtop::backends::state::StateDb;
use meshtop::mesh::builds::{BuildRow, BuildStatus};

#[test]
fn a_daemon_that_goes_away_mid_converge_fails_the_running_builds_clearly() {
    let mesh = ExampleMesh::new("gone");
    let file = mesh.root().join("base/Dockerfile");
    let original = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        format!("{original}{}", common::fresh_run("sleep 30")),
    )
    .unwrap();

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let _entered = runtime.enter();
    let proxy = DaemonProxy::start(
        &mesh.dir.path().join("proxy.sock"),
        Path::new(DOCKER_SOCKET),
    );
    let log = mesh.dir.path().join("converge.log");
    let mut child = mesh.spawn_converge(&log, &[("DOCKER_HOST", &proxy.docker_host())]);
    let running = wait_for_running_build(&mesh, &mut child, &log);
    let operation_id = running.operation_id.clone().unwrap();
    // The build reaches the daemon, then the daemon goes away.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while proxy.builds() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no build request reached the daemon through the proxy ({} requests)",
            proxy.requests()
        );
        assert!(child.try_wait().unwrap().is_none(), "the converge ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy.shut();

    let status = wait_exit(&mut child, Duration::from_secs(20), "the daemon going away");
    let stderr = std::fs::read_to_string(&log).unwrap();
    eprintln!("{stderr}");
    assert_eq!(status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or("");
    assert!(
        last.starts_with("meshtop: ")
            && last.contains("Docker daemon")
            && last.contains(&proxy.docker_host()),
        "the error names the daemon: {stderr}"
    );

    let history = StateDb::open(&mesh.state()).unwrap();
    let rows: Vec<BuildRow> = builds(&mesh)
        .into_iter()
        .filter(|b| b.operation_id.as_deref() == Some(operation_id.as_str()))
        .collect();
    assert!(!rows.is_empty(), "the converge recorded its builds");
    assert!(
        rows.iter().all(|b| b.status != BuildStatus::Running),
        "{rows:#?}"
    );
    let base = history.build(&running.id).unwrap().unwrap();
    assert_eq!(base.status, BuildStatus::Failed, "{base:#?}");
    let error = base.error.clone().unwrap_or_default();
    assert!(error.contains("Docker daemon"), "{base:#?}");
    assert!(history.record(&mesh.name, "default").unwrap().is_empty());
    let holder = history.mesh_holder(&mesh.name, "default").unwrap();
    assert!(holder.is_none(), "the lock is released: {holder:?}");
}

#[test]
fn builds_failed_shows_the_first_line_of_the_error() {
    let mesh = ExampleMesh::new("failtext");
    let file = mesh.root().join("base/Dockerfile");
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("COPY no-such-file /nowhere\n");
    std::fs::write(&file, text).unwrap();
    let output = mesh.meshtop(&["converge"]);
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));

    let rows = mesh.json(&["builds", "--failed", "--json"]);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let error = rows[0]["error"].as_str().unwrap();
    let first_line = error.lines().next().unwrap();
    assert!(first_line.contains("no-such-file"), "{error}");

    let listing = mesh.meshtop(&["builds", "--failed"]);
    assert!(listing.status.success(), "{}", said(&listing));
    let stdout = String::from_utf8_lossy(&listing.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "a header and the failed build:\n{stdout}");
    assert!(lines[0].contains("ERROR"), "{stdout}");
    assert!(
        lines[1].contains("failed") && lines[1].contains("base"),
        "{stdout}"
    );
    assert!(
        lines[1].trim_end().ends_with(first_line.trim_end()),
        "the row ends with the error's first line {first_line:?}:\n{stdout}"
    );
}

/// The proxy's request counting, which the zero-call figures rest on.
#[test]
fn the_daemon_proxy_counts_request_lines_at_line_starts() {
    use common::daemon_proxy::count_requests;
    assert_eq!(count_requests(b"GET /_ping HTTP/1.1\r\nHost: x\r\n\r\n"), 1);
    assert_eq!(
        count_requests(b"GET /a HTTP/1.1\r\n\r\nPOST /b HTTP/1.1\r\n\r\n"),
        2
    );
    assert_eq!(count_requests(b"body with GET /x inside"), 0);
    use common::daemon_proxy::count_builds;
    assert_eq!(
        count_builds(b"POST /v1.41/build?t=x HTTP/1.1\r\n\r\nPOST /build?q=1 HTTP/1.1\r\n"),
        2
    );
    assert_eq!(
        count_builds(b"POST /v1.41/builder/prune HTTP/1.1\r\nGET /build?x HTTP/1.1\r\n"),
        0
    );
}
