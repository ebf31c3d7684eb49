//! Rollback, pins and gc on the real Docker daemon (issue 12's "done when").
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::Command;

use common::{ExampleMesh, decisions, said};
use serde_json::Value;

fn digest_of(summary: &Value, module: &str) -> String {
    summary["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == module)
        .unwrap_or_else(|| panic!("no module {module} in {summary}"))["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The artifact the machine `name` runs, read from `status --json`.
fn running(mesh: &ExampleMesh, name: &str) -> String {
    let status = mesh.json(&["status", "--json"]);
    let machine = status
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("no machine {name} in {status}"));
    machine["running"][0].as_str().unwrap().to_string()
}

/// Give `web` new inputs (a new address) and converge; returns web's new artifact.
fn change_web(mesh: &ExampleMesh, text: &str) -> String {
    std::fs::write(mesh.root().join("web/www/version.txt"), text).unwrap();
    let summary = mesh.json(&["converge", "--json"]);
    assert_eq!(decisions(&summary)["web"], "build", "{summary}");
    digest_of(&summary, "web")
}

fn docker(args: &[&str]) -> std::process::Output {
    Command::new("docker").args(args).output().unwrap()
}

fn image_present(id: &str) -> bool {
    docker(&["image", "inspect", id]).status.success()
}

#[test]
fn rollback_moves_the_machine_back_and_pins_until_a_third_address() {
    let mesh = ExampleMesh::new("rb");
    let machine = format!("{}-web-1", mesh.name);
    let v1 = digest_of(&mesh.json(&["converge", "--json"]), "web");
    let v2 = change_web(&mesh, "two");
    assert_ne!(v1, v2);
    assert_eq!(running(&mesh, &machine), v2, "policy rollout sent web");

    // The record's history: two stamps of web, the second from v1 to v2.
    let history = mesh.json(&["history", "web", "--json"]);
    let stamps = history.as_array().unwrap();
    assert_eq!(stamps.len(), 2, "{history}");
    assert_eq!(stamps[0]["from_digest"], v1.as_str(), "{history}");
    assert_eq!(stamps[0]["to_digest"], v2.as_str(), "{history}");
    assert_eq!(stamps[0]["kind"], "converge", "{history}");
    assert!(stamps[1]["from_digest"].is_null(), "{history}");

    // Roll back: the machine runs v1 again, the record names it, the module is pinned.
    let report = mesh.json(&["rollback", "web", "--yes", "--json"]);
    assert_eq!(report["to"]["digest"], v1.as_str(), "{report}");
    assert_eq!(report["pinned"], true, "{report}");
    assert_eq!(running(&mesh, &machine), v1, "{report}");
    let history = mesh.json(&["history", "web", "--json"]);
    assert_eq!(history[0]["kind"], "rollback", "{history}");
    assert_eq!(history[0]["from_digest"], v2.as_str(), "{history}");

    // A converge with unchanged sources keeps the pinned artifact and says why.
    let plan = mesh.json(&["plan", "--json"]);
    let web = plan["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "web")
        .unwrap()
        .clone();
    assert_eq!(web["decision"], "pinned", "{plan}");
    let reason = web["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("pinned: rolled back from ") && reason.contains(" (#"),
        "{reason}"
    );
    let kept = mesh.json(&["converge", "--json"]);
    assert_eq!(decisions(&kept)["web"], "pinned", "{kept}");
    assert_eq!(running(&mesh, &machine), v1, "the pin keeps the machine");
    let text = mesh.meshtop(&["history", "web"]);
    assert!(
        said(&text).contains("pinned: rolled back from"),
        "{}",
        said(&text)
    );

    // The rolled-back-to address (the sources of v1 again) keeps the pin too.
    std::fs::remove_file(mesh.root().join("web/www/version.txt")).unwrap();
    let back = mesh.json(&["converge", "--json"]);
    assert_eq!(decisions(&back)["web"], "pinned", "{back}");

    // A third address ends the pin: built, stamped, sent.
    let v3 = change_web(&mesh, "three, the fix");
    assert_ne!(v3, v1);
    assert_eq!(running(&mesh, &machine), v3);
    let unpin = mesh.meshtop(&["unpin", "web"]);
    assert!(said(&unpin).contains("was not pinned"), "{}", said(&unpin));
}

#[test]
fn rollback_to_a_swept_artifact_is_refused_with_the_rebuild_offered_and_unpin_and_force_end_pins() {
    let mesh = ExampleMesh::new("rbs");
    let v1 = digest_of(&mesh.json(&["converge", "--json"]), "web");
    let v2 = change_web(&mesh, "two");
    // Pin, then unpin: the next converge decides as usual.
    mesh.json(&["rollback", "web", "--yes", "--json"]);
    let unpin = mesh.meshtop(&["unpin", "web"]);
    assert!(said(&unpin).contains("unpinned web"), "{}", said(&unpin));
    let after = mesh.json(&["converge", "--json"]);
    assert_ne!(decisions(&after)["web"], "pinned", "{after}");
    // Pin again, then --force ends it.
    let v_now = running(&mesh, &format!("{}-web-1", mesh.name));
    let to = if v_now == v1 { &v2 } else { &v1 };
    mesh.json(&["rollback", "web", "--to", to, "--yes", "--json"]);
    let forced = mesh.json(&["converge", "--force", "--json", "web"]);
    assert_eq!(decisions(&forced)["web"], "forced", "{forced}");
    let plan = mesh.json(&["plan", "--json", "web"]);
    assert_ne!(plan["modules"][0]["decision"], "pinned", "{plan}");

    // Sweep an artifact by hand, then ask to roll back to it: refused, the rebuild offered.
    let current = running(&mesh, &format!("{}-web-1", mesh.name));
    let gone = if current == v1 { &v2 } else { &v1 };
    let rmi = docker(&["rmi", "-f", gone]);
    assert!(rmi.status.success(), "{}", said(&rmi));
    let refused = mesh.meshtop(&["rollback", "web", "--to", gone, "--yes"]);
    assert_eq!(refused.status.code(), Some(1), "{}", said(&refused));
    let text = said(&refused);
    assert!(
        text.contains("is no longer held by the host daemon"),
        "{text}"
    );
    assert!(text.contains("converge --force web"), "{text}");
    assert_eq!(running(&mesh, &format!("{}-web-1", mesh.name)), current);

    // Bad input: exit 2, naming what is wrong.
    let bad = mesh.meshtop(&["rollback", "nosuch", "--yes"]);
    assert_eq!(bad.status.code(), Some(2), "{}", said(&bad));
    assert!(
        said(&bad).contains("no module \"nosuch\""),
        "{}",
        said(&bad)
    );
    let bad = mesh.meshtop(&["stats", "--since", "soon"]);
    assert_eq!(bad.status.code(), Some(2), "{}", said(&bad));
}

/// Build a tiny image FROM scratch with `labels`, tagged `tag`; returns its id.
fn tiny_image(dir: &Path, tag: &str, labels: &[&str]) -> String {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("f"), tag).unwrap();
    std::fs::write(dir.join("Dockerfile"), "FROM scratch\nCOPY f /f\n").unwrap();
    let mut args = vec!["build", "-q", "-t", tag];
    for label in labels {
        args.extend(["--label", label]);
    }
    let dir = dir.to_str().unwrap();
    args.push(dir);
    // The legacy builder (the CLI has no buildx here) loses a step's image now and then while
    // other tests remove theirs from the same daemon ("unable to find image sha256:…"): that race
    // is the daemon's, not gc's, so such a build is tried again (twice at most).
    let mut out = docker(&args);
    for _ in 0..2 {
        if out.status.success() || !said(&out).contains("unable to find image") {
            break;
        }
        out = docker(&args);
    }
    assert!(out.status.success(), "{}", said(&out));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn gc_keeps_the_record_the_running_the_pinned_and_the_newest_and_nothing_else() {
    let mesh = ExampleMesh::new("gc");
    let v1 = digest_of(&mesh.json(&["converge", "--json"]), "web");
    let v2 = change_web(&mesh, "two");
    let v3 = change_web(&mesh, "three");
    let v4 = change_web(&mesh, "four");
    let v5 = change_web(&mesh, "five");
    // Pinned and the record's: v2. Run by a machine started by hand: v3. Newest 2: v5, v4.
    mesh.json(&["rollback", "web", "--to", &v2, "--yes", "--json"]);
    let by_hand = format!("{}-by-hand", mesh.name);
    let run = docker(&[
        "run",
        "-d",
        "--name",
        &by_hand,
        "--label",
        "jr2.dev/module=web",
        // A hand-started machine carries the machine mark (issue 14: images never carry it).
        "--label",
        &format!("jr2.dev/machine={by_hand}"),
        &v3,
        "httpd",
        "-f",
        "-p",
        "8080",
        "-h",
        "/www",
    ]);
    assert!(run.status.success(), "{}", said(&run));
    // Another mesh's image and an unlabelled one in this mesh's repository: never candidates.
    let other = tiny_image(
        &mesh.dir.path().join("other"),
        &format!("other{}/web:abc-amd64", mesh.name),
        &["jr2.dev/module=web", "jr2.dev/mesh=someone-else"],
    );
    let unlabelled = tiny_image(
        &mesh.dir.path().join("unlabelled"),
        &format!("{}/web:unlabelled", mesh.name),
        &[],
    );

    let dry = mesh.json(&["gc", "--dry-run", "--grace", "0s", "--keep", "2", "--json"]);
    let names: Vec<&str> = dry["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["module"] == "web")
        .map(|c| c["artifact"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec![v1.as_str()], "{dry}");
    let why = dry["candidates"][0]["why"].as_str().unwrap();
    assert!(why.contains("run by no machine"), "{why}");
    assert!(image_present(&v1), "a dry run removes nothing");
    let text = mesh.meshtop(&["gc", "--dry-run", "--grace", "0s", "--keep", "2"]);
    assert!(said(&text).contains("would take"), "{}", said(&text));

    // Without a terminal and without --yes: refused as bad input, nothing taken.
    let asked = mesh.meshtop(&["gc", "--grace", "0s", "--keep", "2"]);
    assert_eq!(asked.status.code(), Some(2), "{}", said(&asked));
    assert!(image_present(&v1));

    let swept = mesh.json(&["gc", "--grace", "0s", "--keep", "2", "--yes", "--json"]);
    assert!(!image_present(&v1), "{swept}");
    for kept in [&v2, &v3, &v4, &v5] {
        assert!(image_present(kept), "{kept} must be kept: {swept}");
    }
    assert!(
        image_present(&other),
        "another mesh's image is never touched"
    );
    assert!(
        image_present(&unlabelled),
        "an unlabelled image is never touched"
    );
    assert!(swept["bytes_freed"].as_i64().unwrap() > 0, "{swept}");
    // The rest of the mesh (other modules' older builds: none) is untouched: a second gc takes nothing.
    let again = mesh.json(&["gc", "--grace", "0s", "--keep", "2", "--yes", "--json"]);
    assert_eq!(again["candidates"].as_array().unwrap().len(), 0, "{again}");

    let _ = docker(&["rm", "-f", &by_hand]);
    let _ = docker(&["rmi", "-f", &other, &unlabelled]);
}

#[test]
fn gc_takes_nothing_when_a_root_cannot_be_read() {
    let mesh = ExampleMesh::new("gcroot");
    let v1 = digest_of(&mesh.json(&["converge", "--json"]), "web");
    change_web(&mesh, "two");
    change_web(&mesh, "three");
    let closed = mesh.dir.path().join("closed.sock");
    let output = Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env("DOCKER_HOST", format!("unix://{}", closed.display()))
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(mesh.state())
        .args(["gc", "--grace", "0s", "--keep", "1", "--yes"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
    let text = said(&output);
    assert!(
        text.contains("gc took nothing") && text.contains("cannot be read"),
        "{text}"
    );
    assert!(image_present(&v1), "nothing was taken");
    // With the daemon back, --keep 1 would take v1 (and v2).
    let dry = mesh.json(&["gc", "--dry-run", "--grace", "0s", "--keep", "1", "--json"]);
    assert_eq!(dry["candidates"].as_array().unwrap().len(), 2, "{dry}");
}

#[test]
fn builds_report_formats_and_stats() {
    let mesh = ExampleMesh::new("fmt");
    mesh.json(&["converge", "--json"]);
    mesh.json(&["converge", "--json"]);
    let csv = mesh.meshtop(&["builds", "--format", "csv"]);
    let csv = String::from_utf8_lossy(&csv.stdout).into_owned();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 6, "{csv}");
    assert!(lines[0].starts_with("id,module,status,ref,digest"), "{csv}");
    let md = mesh.meshtop(&["builds", "--format", "markdown"]);
    let md = String::from_utf8_lossy(&md.stdout).into_owned();
    assert!(md.lines().nth(1).unwrap().starts_with("| --- |"), "{md}");
    let json = mesh.json(&["builds", "--format", "json"]);
    assert_eq!(json.as_array().unwrap().len(), 5);
    let stats = mesh.json(&["stats", "--json"]);
    assert_eq!(stats["converges"], 2, "{stats}");
    assert_eq!(stats["modules"]["web"]["builds"], 1, "{stats}");
    assert_eq!(stats["modules"]["web"]["decisions"]["build"], 1, "{stats}");
    assert_eq!(stats["modules"]["web"]["decisions"]["record"], 1, "{stats}");
    let stats = mesh.json(&["stats", "--since", "1h", "--json"]);
    assert_eq!(stats["converges"], 2, "{stats}");
}

#[test]
fn gc_keeps_the_base_a_kept_artifact_was_built_from_and_removes_dependents_first() {
    let mesh = ExampleMesh::new("gcbase");
    let first = mesh.json(&["converge", "--json"]);
    let (base1, web1, tools1) = (
        digest_of(&first, "base"),
        digest_of(&first, "web"),
        digest_of(&first, "tools"),
    );
    // Two more bases: every dependent is rebuilt on each.
    let dockerfile = mesh.root().join("base/Dockerfile");
    let mut text = std::fs::read_to_string(&dockerfile).unwrap();
    text.push_str("COPY version.txt /version.txt\n");
    std::fs::write(&dockerfile, text).unwrap();
    let mut bases = Vec::new();
    for text in ["two", "three"] {
        std::fs::write(mesh.root().join("base/version.txt"), text).unwrap();
        let summary = mesh.json(&["converge", "--json"]);
        assert_eq!(decisions(&summary)["base"], "build", "{summary}");
        bases.push(digest_of(&summary, "base"));
    }
    // web back on its first artifact: it needs base1, which is not among base's newest 1.
    mesh.json(&["rollback", "web", "--to", &web1, "--yes", "--json"]);
    let swept = mesh.meshtop(&["gc", "--grace", "0s", "--keep", "1", "--yes", "--json"]);
    assert!(swept.status.success(), "{}", said(&swept));
    assert!(
        image_present(&base1),
        "web's base is kept: {}",
        said(&swept)
    );
    assert!(image_present(&web1));
    // api's machine (policy record) still runs api's first artifact, built on tools1 on base1.
    assert!(image_present(&tools1), "{}", said(&swept));
    assert!(
        !image_present(&bases[0]),
        "base two is unreachable: {}",
        said(&swept)
    );
    assert!(image_present(&bases[1]), "base three is the record's");
    let report: Value = serde_json::from_slice(&swept.stdout).unwrap();
    assert!(
        !report["candidates"].as_array().unwrap().is_empty(),
        "base two was a candidate: {report}"
    );
    assert!(
        report["candidates"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["outcome"] == "removed" || c["outcome"] == "untagged"),
        "{report}"
    );
}

/// Issue 19: a gc (here the image removed by hand) between a rollback's confirm and its stamp.
/// The rollback asks again, holding the mesh, just before it stamps: refused, the record and the
/// machine untouched (before, the record was stamped onto a swept artifact).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gc_between_a_rollbacks_confirm_and_its_stamp_leaves_the_record_alone() {
    use meshtop::backends::daemon::LazyDaemon;
    use meshtop::backends::state::StateDb;
    use meshtop::converge::{rollback, targets};
    use std::sync::{Arc, Mutex};
    let mesh = ExampleMesh::new("rbg");
    let v1 = digest_of(&mesh.json(&["converge", "--json"]), "web");
    let v2 = change_web(&mesh, "two");
    let loaded = meshtop::workspace::file::load(&mesh.mesh_file()).unwrap();
    let db = Arc::new(Mutex::new(StateDb::open(&mesh.state()).unwrap()));
    let daemon = LazyDaemon::new();
    let connected = targets::connect(
        &loaded,
        meshtop::mesh::model::DEFAULT_TARGET,
        &targets::Overrides::default(),
    )
    .await
    .unwrap();
    // The confirm: the plan goes back to v1, which the host still holds.
    let plan = rollback::prepare(&loaded, "web", None, &daemon, connected.as_ref(), &db)
        .await
        .unwrap();
    assert_eq!(plan.to.digest, v1);
    // Then, before the stamp, the artifact is swept.
    let rmi = docker(&["rmi", "-f", &v1]);
    assert!(rmi.status.success(), "{}", said(&rmi));
    let result = rollback::rollback(&loaded, &plan, &daemon, connected.as_ref(), &db, None).await;
    let error = result
        .expect_err("a rollback onto a swept artifact must be refused")
        .to_string();
    assert!(
        error.contains("is no longer held by the host daemon"),
        "{error}"
    );
    let record = db.lock().unwrap().record(&mesh.name, "default").unwrap();
    assert_eq!(
        record["web"].digest, v2,
        "the record must not name the swept artifact"
    );
    assert!(
        db.lock()
            .unwrap()
            .pins(&mesh.name, "default")
            .unwrap()
            .is_empty()
    );
    assert_eq!(running(&mesh, &format!("{}-web-1", mesh.name)), v2);
}
