//! A send carries exactly what the person confirmed: when the record moves between the confirm and
//! the run, nothing is sent and the error says what the record names now (issue 9's bug: the action
//! carried machine names only and sent whatever the record named by then). Real daemon.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::{Arc, Mutex};

use common::ExampleMesh;
use meshtop::backends::daemon::LazyDaemon;
use meshtop::backends::state::StateDb;
use meshtop::converge::send;
use meshtop::converge::targets;
use meshtop::mesh::model::{Record, RecordEntry};
use serde_json::Value;

fn machine(mesh: &ExampleMesh, name: &str) -> Value {
    mesh.json(&["status", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no machine {name}"))
}

fn digest(summary: &Value, module: &str) -> String {
    summary["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == module)
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Another converge takes the mesh, stamps, and lets it go.
fn stamp_as_another_converge(db: &Mutex<StateDb>, mesh: &str, record: &Record) {
    let db = db.lock().unwrap();
    let holder = meshtop::backends::state::Holder::here("another-converge");
    db.lock_mesh(mesh, "default", &holder).unwrap().unwrap();
    db.stamp_record(mesh, "default", "another-converge", record)
        .unwrap();
    db.unlock_mesh(mesh, "default", "another-converge").unwrap();
}

#[test]
fn a_send_whose_record_moved_after_the_confirm_sends_nothing_and_says_so() {
    let mesh = ExampleMesh::new("confirm");
    let first = mesh.json(&["converge", "--json"]);
    let running = digest(&first, "api");
    // A forced rebuild moves api's artifact; its machine (policy record) is held on the old one.
    let forced = mesh.json(&["converge", "--json", "--force", "api"]);
    let confirmed_digest = digest(&forced, "api");
    assert_ne!(running, confirmed_digest);
    let api_machine = format!("{}-api-1", mesh.name);
    assert_eq!(machine(&mesh, &api_machine)["state"], "held");

    let runtime = tokio::runtime::Runtime::new().unwrap();
    let loaded = meshtop::workspace::file::load(&mesh.mesh_file()).unwrap();
    let db = Arc::new(Mutex::new(StateDb::open(&mesh.state()).unwrap()));
    let daemon = LazyDaemon::new();
    let target = targets::docker();
    // What the confirm showed: api-1 from the running artifact to the record's.
    let confirmed = runtime
        .block_on(send::prepare(&loaded, "api", &daemon, target.as_ref(), &db))
        .unwrap();
    assert_eq!(confirmed.len(), 1, "{confirmed:?}");
    assert_eq!(confirmed[0].to_digest, confirmed_digest);

    // Between the confirm and the run, another converge stamps another artifact for api.
    let record = db.lock().unwrap().record(&mesh.name, "default").unwrap();
    let elsewhere = record["worker"].digest.clone();
    let mut moved = Record::new();
    moved.insert(
        "api".into(),
        RecordEntry::new(record["api"].reference.clone(), elsewhere.clone()),
    );
    stamp_as_another_converge(&db, &mesh.name, &moved);

    let refused = runtime.block_on(send::send_confirmed(
        &loaded,
        "api",
        &confirmed,
        &daemon,
        target.as_ref(),
        &db,
        None,
    ));
    let error = refused
        .expect_err("a send to an artifact nobody confirmed")
        .to_string();
    assert!(
        error.contains("moved since the send was confirmed")
            && error.contains(meshtop::mesh::text::short_id(&elsewhere))
            && error.contains("nothing was sent"),
        "{error}"
    );
    let after = machine(&mesh, &api_machine);
    assert_eq!(
        after["running"][0].as_str(),
        Some(running.as_str()),
        "{after}"
    );
    assert!(
        db.lock()
            .unwrap()
            .sends(&mesh.name, None, 10)
            .unwrap()
            .is_empty(),
        "no send was recorded"
    );

    // The record back on the confirmed artifact: the same confirmed moves now go through.
    let mut back = Record::new();
    back.insert(
        "api".into(),
        RecordEntry::new(record["api"].reference.clone(), confirmed_digest.clone()),
    );
    stamp_as_another_converge(&db, &mesh.name, &back);
    let report = runtime
        .block_on(send::send_confirmed(
            &loaded,
            "api",
            &confirmed,
            &daemon,
            target.as_ref(),
            &db,
            None,
        ))
        .unwrap();
    assert!(report.ok(), "{}", report.headline());
    assert_eq!(report.outcomes.len(), 1);
    let after = machine(&mesh, &api_machine);
    assert_eq!(after["state"], "current", "{after}");
    assert_eq!(
        after["running"][0].as_str(),
        Some(confirmed_digest.as_str())
    );
}
