//! Trust from the door to the machine, on the Docker target (the real daemon and registry): with
//! `trust` set, what a trusted key signed is what runs, whatever door the artifact came through —
//! the host voucher, a promote's pull, a send, a rollback, a converge into a `require_signed`
//! target. Signatures are made per cosign's spec with openssl (`common::signing`), not by meshtop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::example::{ExampleMesh, decisions, plan_reasons, said};
use common::local_registry::{docker, require_registry};
use common::run_id;
use common::signing::*;

/// The image id `name` (a ref, an id) has on the daemon, None when it names nothing.
fn image_id(name: &str) -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["image", "inspect", "-f", "{{.Id}}", name])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The image id container `name` runs, None when there is no such container.
fn container_image(name: &str) -> Option<String> {
    let out = std::process::Command::new("docker")
        .args(["inspect", "-f", "{{.Image}}", name])
        .output()
        .unwrap();
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `module`'s summary row in a converge's `--json`.
fn summary_row<'a>(summary: &'a serde_json::Value, module: &str) -> &'a serde_json::Value {
    summary["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == module)
        .unwrap_or_else(|| panic!("no {module} in {summary}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn with_trust_a_labelled_look_alike_on_the_host_never_answers_and_never_runs() {
    require_registry().await;
    let mesh = ExampleMesh::new("tdhost");
    let (ci_key, _) = trust_ci_key(&mesh);
    let ci = meshtop_env(
        &mesh,
        &mesh.state(),
        &[],
        &[
            "converge",
            "--publish",
            "--sign-key",
            ci_key.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(ci.status.success(), "{}", said(&ci));
    let ci: serde_json::Value = serde_json::from_slice(&ci.stdout).unwrap();
    let genuine = summary_row(&ci, "web")["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let reference = summary_row(&ci, "web")["ref"].as_str().unwrap().to_string();

    // A clean machine, where someone who can reach the daemon built an image with meshtop's labels
    // for web and its inputs and tagged it as web's ref (no push: only the host holds it).
    let inputs = docker(&[
        "image",
        "inspect",
        "-f",
        "{{index .Config.Labels \"jr2.dev/inputs\"}}",
        &genuine,
    ])
    .trim()
    .to_string();
    assert_eq!(inputs.len(), 64, "{inputs}");
    mesh.clean_daemon();
    let context = mesh
        .dir
        .path()
        .join(format!("host-look-alike-{}", run_id()));
    std::fs::create_dir_all(&context).unwrap();
    std::fs::write(context.join("evil"), "not built here").unwrap();
    std::fs::write(
        context.join("Dockerfile"),
        format!(
            "FROM scratch\nCOPY evil /evil\nLABEL jr2.dev/module=web jr2.dev/mesh={} jr2.dev/inputs={inputs}\n",
            mesh.name
        ),
    )
    .unwrap();
    let built = std::process::Command::new("docker")
        .env("DOCKER_BUILDKIT", "0")
        // No cache: the same steps' intermediate image is another test's too, and may go mid-build.
        .args(["build", "-q", "--no-cache", "-t", &reference])
        .arg(&context)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", said(&built));
    let look_alike = image_id(&reference).unwrap();
    assert_ne!(look_alike, genuine);

    let fresh = mesh.dir.path().join("clean-machine.db");
    let plan = plan_reasons(&mesh.json_with_state(&fresh, &["plan", "--json"]));
    let (decision, reason) = &plan["web"];
    assert_eq!(decision, "registry", "{reason}");
    assert!(
        reason.contains("✗ host image") && reason.contains("not built here and unsigned"),
        "{reason}"
    );
    assert!(reason.contains("signed by keys/ci.pub"), "{reason}");

    let clean = mesh.json_with_state(&fresh, &["converge", "--json"]);
    assert_eq!(decisions(&clean)["web"], "registry", "{clean}");
    let machine = format!("{}-web-1", mesh.name);
    assert_eq!(container_image(&machine).as_deref(), Some(genuine.as_str()));
    // The verified pull took the ref back: it names CI's artifact now.
    assert_eq!(image_id(&reference).as_deref(), Some(genuine.as_str()));

    // What this machine pulled after verifying it answers on the host from now on (no registry
    // needed): a plan on the same state file says host for web once the record forgets it.
    let db = rusqlite::Connection::open(&fresh).unwrap();
    db.execute("DELETE FROM records WHERE module = 'web'", [])
        .unwrap();
    drop(db);
    let plan = plan_reasons(&mesh.json_with_state(&fresh, &["plan", "--json"]));
    assert_eq!(plan["web"].0, "host", "{:?}", plan["web"]);
}

#[test]
fn another_modules_image_tagged_as_the_ref_never_answers_for_it() {
    // Issue 51, case 2: the host voucher answered for any module. Tools' real image, tagged as
    // api's next ref by anyone who can reach the daemon, was taken as api's artifact.
    let mesh = ExampleMesh::new("tdother");
    let first = mesh.json(&["converge", "--json"]);
    let tools = summary_row(&first, "tools")["digest"]
        .as_str()
        .unwrap()
        .to_string();
    // Api's inputs move: its next ref is not built yet.
    std::fs::write(mesh.root().join("api/extra.txt"), run_id()).unwrap();
    let planned = mesh.json(&["plan", "--json"]);
    let api = planned["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "api")
        .unwrap();
    assert_eq!(api["decision"], "build", "{api}");
    let api_ref = api["ref"].as_str().unwrap().to_string();
    docker(&["tag", &tools, &api_ref]);
    assert_eq!(image_id(&api_ref).as_deref(), Some(tools.as_str()));

    let plan = plan_reasons(&mesh.json(&["plan", "--json"]));
    let (decision, reason) = &plan["api"];
    assert_eq!(decision, "build", "{reason}");
    assert!(
        reason.contains("✗ host image") && reason.contains("labelled for module tools"),
        "{reason}"
    );
    let converged = mesh.json(&["converge", "--json"]);
    assert_eq!(decisions(&converged)["api"], "build", "{converged}");
    let built = summary_row(&converged, "api")["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(built, tools, "{converged}");
    assert_eq!(image_id(&api_ref).as_deref(), Some(built.as_str()));
}

/// The two docker targets of the example mesh, with the registry and `trust`; CI's key.
fn staging_and_prod(tag: &str) -> (ExampleMesh, std::path::PathBuf) {
    let mesh = ExampleMesh::two_docker_targets(tag);
    let (ci_key, _) = trust_ci_key(&mesh);
    (mesh, ci_key)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_promote_pulls_the_recorded_manifest_and_a_refused_pull_leaves_nothing_tagged() {
    require_registry().await;
    let (mesh, ci_key) = staging_and_prod("tdprom");
    let staging = common::provenance::ci_publishes_staging(&mesh, &ci_key);
    let artifact = |module: &str| {
        let row = summary_row(&staging, module);
        (
            row["ref"].as_str().unwrap().to_string(),
            row["digest"].as_str().unwrap().to_string(),
        )
    };
    let (web_ref, web_genuine) = artifact("web");
    let (api_ref, _) = artifact("api");
    // Someone with push access pushes look-alikes over both refs.
    let work = mesh.dir.path();
    let web_look_alike = look_alike_of(work, &web_ref);
    docker(&["push", &web_ref]);
    let api_look_alike = look_alike_of(work, &api_ref);
    docker(&["push", &api_ref]);
    // Prod's host holds nothing of it: the promote must fetch from the registry.
    mesh.clean_daemon();
    assert_eq!(image_id(&web_look_alike), None);

    // The record names the manifest CI pushed: the promote pulls that, never the tag.
    let promoted = mesh.meshtop(&["promote", "--to", "prod", "web", "--yes"]);
    assert!(promoted.status.success(), "{}", said(&promoted));
    let prod_web = format!("{}-prod-web-1", mesh.name);
    assert_eq!(
        container_image(&prod_web).as_deref(),
        Some(web_genuine.as_str())
    );
    assert_eq!(image_id(&web_ref).as_deref(), Some(web_genuine.as_str()));

    // A record from before manifests were kept: the tag is asked, it names the look-alike, and
    // the pull is refused before anything is tagged.
    let db = rusqlite::Connection::open(mesh.state()).unwrap();
    db.execute("UPDATE records SET manifest = NULL, signed_by = NULL", [])
        .unwrap();
    drop(db);
    let refused = mesh.meshtop(&["promote", "--to", "prod", "api", "--yes"]);
    let text = said(&refused);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(text.contains("not the artifact"), "{text}");
    assert_eq!(image_id(&api_ref), None, "nothing tagged under api's ref");
    assert_eq!(
        image_id(&api_look_alike),
        None,
        "the refused pull was removed"
    );

    // The next plan and converge of prod never take the look-alike: the host holds nothing under
    // the ref, and the registry's look-alike is unsigned.
    let plan = plan_reasons(&mesh.json(&["plan", "--target", "prod", "--json"]));
    let (decision, reason) = &plan["api"];
    assert_eq!(decision, "build", "{reason}");
    assert!(reason.contains("✗ unsigned"), "{reason}");
    let prod = mesh.json(&["converge", "--target", "prod", "--json"]);
    let prod_api = format!("{}-prod-api-1", mesh.name);
    let running = container_image(&prod_api).unwrap();
    assert_ne!(running, api_look_alike, "{prod}");
    // Built here from the module's own inputs (a rebuild need not be byte-identical to CI's once the
    // daemon's build cache is gone), never the look-alike.
    assert_eq!(decisions(&prod)["api"], "build", "{prod}");
    let built = summary_row(&prod, "api")["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(running, built, "{prod}");
}

/// The prod target of `mesh` requires signed artifacts from now on.
fn require_signed_on_prod(mesh: &ExampleMesh) {
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replacen(
            "promote_from = \"staging\"\n",
            "promote_from = \"staging\"\nrequire_signed = true\n",
            1,
        ),
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn require_signed_governs_every_action_that_moves_a_machine_of_the_target() {
    require_registry().await;
    let (mesh, ci_key) = staging_and_prod("tdreq");
    let prod_web = format!("{}-prod-web-1", mesh.name);
    // Before prod required signatures: two unsigned converges of prod, web changed between them
    // (so that there is something to roll back to).
    let first = mesh.json(&["converge", "--target", "prod", "--publish", "--json"]);
    let web_first = summary_row(&first, "web")["digest"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::write(mesh.root().join("web/extra.txt"), run_id()).unwrap();
    let second = mesh.json(&["converge", "--target", "prod", "--publish", "--json"]);
    let web_second = summary_row(&second, "web")["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(web_first, web_second);
    require_signed_on_prod(&mesh);
    let record = || {
        let status = mesh.meshtop(&["history", "web", "--target", "prod", "--json"]);
        String::from_utf8_lossy(&status.stdout).to_string()
    };
    let before = record();

    // A rollback to the first (unsigned) artifact: refused under its hold, nothing stamped.
    let rollback = mesh.meshtop(&["rollback", "web", "--target", "prod", "--yes"]);
    let text = said(&rollback);
    assert_ne!(rollback.status.code(), Some(0), "{text}");
    assert!(
        text.contains("requires signed artifacts") && text.contains("module web"),
        "{text}"
    );
    assert_eq!(record(), before, "nothing stamped");
    assert_eq!(
        container_image(&prod_web).as_deref(),
        Some(web_second.as_str())
    );

    // A send of a machine behind the record's (unsigned) artifact: refused, the machine untouched.
    docker(&["rm", "-f", &prod_web]);
    docker(&[
        "create",
        "--name",
        &prod_web,
        "--label",
        "jr2.dev/module=web",
        "--label",
        &format!("jr2.dev/mesh={}", mesh.name),
        "--label",
        &format!("jr2.dev/machine={prod_web}"),
        "--label",
        "jr2.dev/target=prod",
        &web_first,
    ]);
    let send = mesh.meshtop(&["send", "web", "--target", "prod", "--yes"]);
    let text = said(&send);
    assert_ne!(send.status.code(), Some(0), "{text}");
    assert!(text.contains("requires signed artifacts"), "{text}");
    assert_eq!(
        container_image(&prod_web).as_deref(),
        Some(web_first.as_str())
    );

    // A converge into prod: what it built is unsigned, so nothing is stamped or sent.
    std::fs::write(mesh.root().join("web/extra.txt"), run_id()).unwrap();
    let converge = mesh.meshtop(&["converge", "--target", "prod", "--publish"]);
    let text = said(&converge);
    assert_ne!(converge.status.code(), Some(0), "{text}");
    assert!(text.contains("requires signed artifacts"), "{text}");
    assert_eq!(record(), before, "nothing stamped");
    assert_eq!(
        container_image(&prod_web).as_deref(),
        Some(web_first.as_str())
    );

    // Signed by CI's key, the same converge stamps and sends; its record says who signed.
    let signed = meshtop_env(
        &mesh,
        &mesh.state(),
        &[],
        &[
            "converge",
            "--target",
            "prod",
            "--publish",
            "--sign-key",
            ci_key.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(signed.status.success(), "{}", said(&signed));
    let signed: serde_json::Value = serde_json::from_slice(&signed.stdout).unwrap();
    let web_signed = summary_row(&signed, "web")["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        container_image(&prod_web).as_deref(),
        Some(web_signed.as_str())
    );
    let db = rusqlite::Connection::open(mesh.state()).unwrap();
    let (manifest, signer): (Option<String>, Option<String>) = db
        .query_row(
            "SELECT manifest, signed_by FROM records WHERE target = 'prod' AND module = 'web'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(manifest.is_some_and(|m| m.starts_with("sha256:")));
    assert_eq!(signer.as_deref(), Some("keys/ci.pub"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_promote_verifies_the_signature_the_source_record_claims() {
    // Issue 51, case 3: a source record's `signed_by` is a claim, not a verdict. Whoever can write
    // staging's record names CI's key beside an unsigned manifest; a `require_signed` prod
    // believed it and took the unsigned artifact.
    require_registry().await;
    let (mesh, _ci_key) = staging_and_prod("tdclaim");
    let staging = mesh.json(&["converge", "--target", "staging", "--publish", "--json"]);
    let web = summary_row(&staging, "web")["digest"]
        .as_str()
        .unwrap()
        .to_string();
    require_signed_on_prod(&mesh);
    let db = rusqlite::Connection::open(mesh.state()).unwrap();
    let forged = db
        .execute(
            "UPDATE records SET signed_by = 'keys/ci.pub' \
             WHERE mesh = ?1 AND target = 'staging' AND module = 'web' AND manifest IS NOT NULL",
            [&mesh.name],
        )
        .unwrap();
    assert_eq!(forged, 1, "staging's record names web's pushed manifest");
    let manifest: String = db
        .query_row(
            "SELECT manifest FROM records WHERE mesh = ?1 AND target = 'staging' AND module = 'web'",
            [&mesh.name],
            |r| r.get(0),
        )
        .unwrap();
    drop(db);

    let promoted = mesh.meshtop(&["promote", "--to", "prod", "web", "--yes"]);
    let text = said(&promoted);
    assert_ne!(promoted.status.code(), Some(0), "{text}");
    assert!(
        text.contains("requires signed artifacts")
            && text.contains(&manifest)
            && text.contains("no signature by a key the mesh trusts"),
        "{text}"
    );
    let prod_web = format!("{}-prod-web-1", mesh.name);
    assert_ne!(container_image(&prod_web).as_deref(), Some(web.as_str()));
    let history = mesh.meshtop(&["history", "web", "--target", "prod", "--json"]);
    assert!(
        !String::from_utf8_lossy(&history.stdout).contains(&web),
        "nothing stamped on prod: {}",
        said(&history)
    );
}
