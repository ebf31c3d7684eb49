//! One mesh, many hands (issue 19, the pins): Alice rolls a module back on Kubernetes; Bob, with a
//! state file of his own and the same sources, converges: the pin lives on the namespace, so his
//! converge keeps the rolled-back artifact, also after the module's base moved, and ends the pin
//! only when the module's own inputs bring a fix. The real binary, registry and daemon; the API
//! test server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::kube_api::KubeApi;
use common::team::Team;
use common::{decisions, said};

fn summary(output: &std::process::Output) -> serde_json::Value {
    assert!(output.status.success(), "{}", said(output));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| panic!("{e}: {}", said(output)))
}

/// The reason a plan (`plan --json`) gives for one module.
fn reason(summary: &serde_json::Value, module: &str) -> String {
    summary["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == module)
        .map(|m| m["reason"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

async fn recorded(api: &KubeApi, team: &Team, module: &str) -> String {
    let read = api.cluster(&team.namespace).read_record().await.unwrap();
    read.record[module].reference.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_holds_against_a_teammates_converge_and_a_base_move_until_a_fix() {
    let api = KubeApi::start().await;
    let team = Team::new("pins", &api).await;
    let web_file = team.mesh.root().join("web/www/index.html");
    let write_web = |text: &str| std::fs::write(&web_file, text).unwrap();

    // Alice: web v1, then v2.
    write_web("v1\n");
    summary(
        &team
            .run(&team.alice(), &["converge", "--json", "base", "web"])
            .await,
    );
    let v1 = recorded(&api, &team, "web").await;
    write_web("v2 (bad)\n");
    summary(
        &team
            .run(&team.alice(), &["converge", "--json", "web"])
            .await,
    );
    let v2 = recorded(&api, &team, "web").await;
    assert_ne!(v1, v2);

    // Alice rolls web back to v1: pinned, on the namespace.
    let rolled = team
        .run(&team.alice(), &["rollback", "web", "--yes", "--json"])
        .await;
    assert!(rolled.status.success(), "{}", said(&rolled));
    assert_eq!(recorded(&api, &team, "web").await, v1);
    let on_namespace = api.cluster(&team.namespace).read_record().await.unwrap();
    let pin = &on_namespace.pins["web"];
    assert_eq!(pin.to_ref, v1);
    assert!(
        pin.from_inputs.is_some() && pin.to_inputs.is_some(),
        "{pin:?}"
    );

    // Bob, his own state file, the same (bad) sources: the pin holds; nothing undoes the rollback.
    let bob = summary(&team.run(&team.bob(), &["converge", "--json", "web"]).await);
    assert_eq!(decisions(&bob)["web"], "pinned", "{bob}");
    assert_eq!(recorded(&api, &team, "web").await, v1);
    // His history shows Alice's rollback, read from the namespace.
    let history = team.run(&team.bob(), &["history", "web"]).await;
    assert!(history.status.success(), "{}", said(&history));
    assert!(said(&history).contains("rollback"), "{}", said(&history));
    assert!(
        said(&history).contains("pinned: rolled back from"),
        "{}",
        said(&history)
    );

    // The base moves: web's address moves with it, its own inputs do not. Still pinned.
    std::fs::write(team.mesh.root().join("base/moved.txt"), "a new base\n").unwrap();
    let moved = summary(
        &team
            .run(&team.bob(), &["converge", "--json", "base", "web"])
            .await,
    );
    assert_eq!(decisions(&moved)["base"], "build", "{moved}");
    assert_eq!(decisions(&moved)["web"], "pinned", "{moved}");
    // The plan says why: the pin holds because only the base moved.
    let plan = team.run(&team.bob(), &["plan", "--json", "web"]).await;
    let plan = summary(&plan);
    assert!(reason(&plan, "web").contains("base moved"), "{plan}");
    assert_eq!(recorded(&api, &team, "web").await, v1);

    // A fix arrives in web's own files: the pin ends, the fix is built and stamped.
    write_web("v3 (fixed)\n");
    let fixed = summary(&team.run(&team.bob(), &["converge", "--json", "web"]).await);
    assert_eq!(decisions(&fixed)["web"], "build", "{fixed}");
    let v3 = recorded(&api, &team, "web").await;
    assert!(v3 != v1 && v3 != v2, "{fixed}");
    let after = api.cluster(&team.namespace).read_record().await.unwrap();
    assert!(after.pins.is_empty(), "{:?}", after.pins);
    assert_eq!(after.history["web"][0].to_ref, v3);
}
