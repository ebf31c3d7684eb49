//! Signed vouchers, end to end on the real registry (127.0.0.1:5000) and the real daemon: CI signs
//! what it publishes (cosign format), a clean machine with `trust` takes only what a trusted key
//! signed for that exact digest; a look-alike pushed over a ref never vouches, never runs.
//! The verifier and the signer here are written from sigstore/cosign `specs/SIGNATURE_SPEC.md`
//! with openssl and curl, not from meshtop's code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::example::{ExampleMesh, builds, decisions, plan_reasons, said};
use common::local_registry::{LOCAL, docker, machine_images, require_registry};
use common::signing::*;
use meshtop::backends::registry::repository_in;

#[tokio::test(flavor = "multi_thread")]
async fn ci_signs_every_artifact_and_a_clean_machine_with_trust_takes_them_all() {
    require_registry().await;
    let signed = signed_mesh("svci");
    let mesh = &signed.mesh;
    // CI's key as `cosign generate-key-pair` seals one, its password in COSIGN_PASSWORD.
    let sealed = cosign_sealed(&signed.ci_key, "ci's password");
    ci_publishes_signed_with(&signed, &sealed, &[("COSIGN_PASSWORD", "ci's password")]);
    let published = published(mesh);
    assert_eq!(published.len(), 5, "{published:?}");
    let work = mesh.dir.path();
    for (module, (repository, digest)) in &published {
        assert!(
            spec_verifies(work, repository, digest, &signed.ci_pub),
            "{module}: no signature of {repository}@{digest} verifies per the spec"
        );
    }
    // Publishing again signs nothing twice: one layer per signer.
    let (repository, digest) = &published["base"];
    let sig = get(
        &format!("/v2/{repository}/manifests/{}", sig_tag(digest)),
        OCI_MANIFEST,
    )
    .unwrap();
    let sig: serde_json::Value = serde_json::from_slice(&sig).unwrap();
    assert_eq!(sig["layers"].as_array().unwrap().len(), 1, "{sig}");

    mesh.clean_daemon();
    let fresh = mesh.dir.path().join("clean-machine.db");
    for (module, (decision, reason)) in
        plan_reasons(&mesh.json_with_state(&fresh, &["plan", "--json"]))
    {
        assert_eq!(decision, "registry", "{module}: {reason}");
        assert!(
            reason.contains("signed by keys/ci.pub"),
            "{module}: {reason}"
        );
    }
    let clean = mesh.json_with_state(&fresh, &["converge", "--json"]);
    assert!(
        decisions(&clean).values().all(|d| d == "registry"),
        "{clean}"
    );
    // On-call's question: every recorded artifact, and what each machine runs, is CI's signed one.
    let checked = verified(mesh, &fresh, 0);
    let recorded: Vec<&serde_json::Value> =
        checked.iter().filter(|c| c["of"] == "record").collect();
    assert_eq!(recorded.len(), 5, "{checked:?}");
    for c in &checked {
        assert_eq!(c["signed"], true, "{c}");
        assert!(c["says"].as_str().unwrap().contains("keys/ci.pub"), "{c}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_look_alike_pushed_over_a_ref_never_vouches_and_never_runs() {
    require_registry().await;
    let signed = signed_mesh("svlook");
    let mesh = &signed.mesh;
    ci_publishes_signed(&signed);
    let published = published(mesh);
    let (repository, genuine) = published["web"].clone();
    let reference = builds(mesh)
        .into_iter()
        .find(|b| b.module.as_deref() == Some("web"))
        .and_then(|b| b.published_ref)
        .unwrap();
    let (_, tag) = repository_in(LOCAL, &reference);

    // The look-alike: CI's image plus one file, the same labels (inherited), pushed over the ref.
    let look_alike_id = look_alike_of(mesh.dir.path(), &reference);
    docker(&["push", &reference]);
    let look_alike = resolve(&repository, tag);
    assert_ne!(look_alike, genuine);

    mesh.clean_daemon();
    let fresh = mesh.dir.path().join("clean-machine.db");
    let web_refused = |words: &str, state: &str| {
        let plan = plan_reasons(&mesh.json_with_state(&fresh, &["plan", "--json"]));
        let (decision, reason) = &plan["web"];
        assert_eq!(decision, "build", "{reason}");
        assert!(
            reason.contains(words) && reason.contains("holds manifest"),
            "{words}: {reason}"
        );
        assert_eq!(plan["base"].0, "registry", "{:?}", plan["base"]);
        // The same as data, which the screen reads: what the registry held, and the verdict.
        let json = mesh.json_with_state(&fresh, &["plan", "--json"]);
        let web = json["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "web")
            .unwrap();
        assert_eq!(
            web["registry_held"]["manifest"],
            look_alike.as_str(),
            "{web}"
        );
        assert_eq!(web["registry_held"]["signature"]["state"], state, "{web}");
    };
    // Unsigned.
    web_refused("✗ unsigned", "unsigned");
    // Signed by another key.
    let work = mesh.dir.path();
    let (other_key, _) = keypair(&work.join("other"), "other");
    spec_sign(work, &repository, &look_alike, &other_key);
    web_refused("✗ untrusted key", "untrusted_key");
    // CI's genuine signature copied onto the look-alike's tag.
    let genuine_sig = get(
        &format!("/v2/{repository}/manifests/{}", sig_tag(&genuine)),
        OCI_MANIFEST,
    )
    .unwrap();
    put_manifest(work, &repository, &sig_tag(&look_alike), &genuine_sig);
    web_refused("✗ signature names another digest", "other_digest");

    // The converge builds web, and its machine never runs the look-alike.
    let clean = mesh.json_with_state(&fresh, &["converge", "--json"]);
    let decided = decisions(&clean);
    assert_eq!(decided["web"], "build", "{clean}");
    let running = machine_images(&mesh.name);
    let web_machine = running
        .iter()
        .find(|(name, _)| name.contains("web"))
        .expect("web's machine runs");
    assert_ne!(web_machine.1, &look_alike_id, "{running:?}");
    // verify says so: web's artifact (built here) carries no trusted signature, base's is CI's.
    let checked = verified(mesh, &fresh, 1);
    let of = |module: &str| {
        checked
            .iter()
            .find(|c| c["module"] == module && c["of"] == "record")
            .unwrap_or_else(|| panic!("no record row of {module}: {checked:?}"))
    };
    assert_eq!(of("web")["signed"], false, "{checked:?}");
    assert_eq!(of("base")["signed"], true, "{checked:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signature_made_per_the_spec_by_another_tool_with_the_trusted_key_vouches() {
    require_registry().await;
    let signed = signed_mesh("svspec");
    let mesh = &signed.mesh;
    // CI publishes without signing.
    let ci = mesh.json_with_state(&mesh.state(), &["converge", "--publish", "--json"]);
    assert!(decisions(&ci).values().all(|d| d == "build"), "{ci}");
    mesh.clean_daemon();
    let fresh = mesh.dir.path().join("clean-machine.db");
    for (module, (decision, reason)) in
        plan_reasons(&mesh.json_with_state(&fresh, &["plan", "--json"]))
    {
        // A dependent's ref waits on its base, refused: only tier 0 is asked of the registry.
        if module == "base" {
            assert_eq!(decision, "build", "{module}: {reason}");
            assert!(reason.contains("✗ unsigned"), "{module}: {reason}");
        }
    }
    // Without trust the registry vouches, and the plan says it is unverified.
    let file = mesh.mesh_file();
    let with_trust = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, with_trust.replace("trust = [\"keys/ci.pub\"]\n", "")).unwrap();
    for (module, (decision, reason)) in
        plan_reasons(&mesh.json_with_state(&fresh, &["plan", "--json"]))
    {
        assert_eq!(decision, "registry", "{module}: {reason}");
        assert!(reason.contains("unverified"), "{module}: {reason}");
    }
    std::fs::write(&file, with_trust).unwrap();
    // openssl signs each published digest with the trusted key: now each vouches.
    let work = mesh.dir.path();
    for (repository, digest) in published(mesh).values() {
        spec_sign(work, repository, digest, &signed.ci_key);
    }
    for (module, (decision, reason)) in
        plan_reasons(&mesh.json_with_state(&fresh, &["plan", "--json"]))
    {
        assert_eq!(decision, "registry", "{module}: {reason}");
        assert!(
            reason.contains("signed by keys/ci.pub"),
            "{module}: {reason}"
        );
    }
}

#[test]
fn bad_keys_are_bad_input_naming_the_file_and_line() {
    let signed = signed_mesh("svkeys");
    let mesh = &signed.mesh;
    let converge_env = |key: &Path, envs: &[(&str, &str)]| {
        meshtop_env(
            mesh,
            &mesh.state(),
            envs,
            &["converge", "--publish", "--sign-key", key.to_str().unwrap()],
        )
    };
    let converge_with = |key: &Path| converge_env(key, &[]);
    let expect_2 = |output: Output, words: &[&str]| {
        let text = said(&output);
        assert_eq!(output.status.code(), Some(2), "{text}");
        for word in words {
            assert!(text.contains(word), "{word:?} in: {text}");
        }
    };
    // A key file that cannot be read: none there, a folder; named by --sign-key or the environment.
    let gone = mesh.dir.path().join("gone.key");
    expect_2(
        converge_with(&gone),
        &[&gone.display().to_string(), "cannot read the signing key"],
    );
    let folder = mesh.dir.path().join("folder.key");
    std::fs::create_dir(&folder).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&folder, std::fs::Permissions::from_mode(0o700)).unwrap();
    expect_2(
        converge_with(&folder),
        &[&folder.display().to_string(), "cannot read the signing key"],
    );
    expect_2(
        meshtop_env(
            mesh,
            &mesh.state(),
            &[("MESHTOP_SIGNING_KEY", gone.to_str().unwrap())],
            &["converge", "--publish"],
        ),
        &[&gone.display().to_string(), "cannot read the signing key"],
    );
    // A key others may read.
    std::fs::set_permissions(&signed.ci_key, std::fs::Permissions::from_mode(0o644)).unwrap();
    expect_2(
        converge_with(&signed.ci_key),
        &[&format!("chmod 600 {}", signed.ci_key.display())],
    );
    std::fs::set_permissions(&signed.ci_key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Malformed PEM, on its line.
    let broken = mesh.dir.path().join("broken.key");
    std::fs::write(
        &broken,
        "\n-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    std::fs::set_permissions(&broken, std::fs::Permissions::from_mode(0o600)).unwrap();
    expect_2(
        converge_with(&broken),
        &[&format!("{}:2", broken.display()), "not a PKCS#8"],
    );
    // A key cosign sealed: without COSIGN_PASSWORD, or with another password, on its line.
    let sealed = cosign_sealed(&signed.ci_key, "right");
    expect_2(
        converge_with(&sealed),
        &[&format!("{}:1", sealed.display()), "set COSIGN_PASSWORD"],
    );
    expect_2(
        converge_env(&sealed, &[("COSIGN_PASSWORD", "wrong")]),
        &[
            &format!("{}:1", sealed.display()),
            "COSIGN_PASSWORD does not open",
        ],
    );
    // A key encrypted otherwise (PKCS#8 with a password): refused with how to make one meshtop reads.
    let encrypted = mesh.dir.path().join("encrypted.key");
    std::fs::write(
        &encrypted,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    std::fs::set_permissions(&encrypted, std::fs::Permissions::from_mode(0o600)).unwrap();
    expect_2(
        converge_with(&encrypted),
        &["encrypted", "openssl pkcs8 -topk8 -nocrypt"],
    );
    // A trust path that does not exist, on the mesh file's line.
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let line = text.lines().position(|l| l.starts_with("trust")).unwrap() + 1;
    std::fs::write(&file, text.replace("keys/ci.pub", "keys/gone.pub")).unwrap();
    expect_2(
        mesh.meshtop(&["plan"]),
        &[
            &format!("mesh.toml:{line}"),
            "keys/gone.pub",
            "does not exist",
        ],
    );
    // A trust key that is no public key.
    std::fs::write(&file, text.replace("keys/ci.pub", "keys/ci.key")).unwrap();
    expect_2(
        mesh.meshtop(&["plan"]),
        &[
            &format!("{}:1", signed.ci_key.display()),
            "not a public key",
        ],
    );
    // verify without trust: nothing to verify against, bad input naming the fix.
    std::fs::write(&file, text.replace("trust = [\"keys/ci.pub\"]\n", "")).unwrap();
    expect_2(
        mesh.meshtop(&["verify"]),
        &["trusts no key", "trust = [\"keys/ci.pub\"]"],
    );
}

#[test]
fn pins_that_cannot_be_read_stop_a_converge_with_the_error() {
    let mesh = ExampleMesh::new("svpin");
    // The state database exists (a plan opens it), then its pins cannot be read.
    let plan = mesh.meshtop(&["plan"]);
    assert!(plan.status.success(), "{}", said(&plan));
    let db = rusqlite::Connection::open(mesh.state()).unwrap();
    db.execute_batch("DROP TABLE pins").unwrap();
    drop(db);
    let converge = mesh.meshtop(&["converge"]);
    let text = said(&converge);
    assert_eq!(converge.status.code(), Some(1), "{text}");
    assert!(text.contains("pinned modules of target"), "{text}");
    assert!(builds(&mesh).is_empty(), "nothing built: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn promote_to_a_target_that_requires_signed_refuses_an_unsigned_artifact_untouched() {
    require_registry().await;
    let mesh = ExampleMesh::two_docker_targets("svprod");
    let (_, _) = keypair(&mesh.root().join("keys"), "ci");
    let ci_key = mesh.root().join("keys/ci.key");
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let text = text
        .replacen(
            &format!("name = \"{}\"\n", mesh.name),
            &format!(
                "name = \"{}\"\nregistry = \"{LOCAL}\"\ntrust = [\"keys/ci.pub\"]\n",
                mesh.name
            ),
            1,
        )
        .replacen(
            "promote_from = \"staging\"\n",
            "promote_from = \"staging\"\nrequire_signed = true\n",
            1,
        );
    std::fs::write(&file, text).unwrap();
    // Staging converges and publishes, unsigned.
    let staging = mesh.json_with_state(
        &mesh.state(),
        &["converge", "--target", "staging", "--publish", "--json"],
    );
    assert!(
        decisions(&staging).values().all(|d| d == "build"),
        "{staging}"
    );
    let web_artifact = staging["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "web")
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let prod_record = || {
        let status = mesh.meshtop(&["status", "--target", "prod", "--json"]);
        String::from_utf8_lossy(&status.stdout).to_string()
    };
    let before = prod_record();
    let prod_web = format!("{}-prod-web-1", mesh.name);
    let refused = mesh.meshtop(&["promote", "--to", "prod", "web", "--yes"]);
    let text = said(&refused);
    assert_eq!(refused.status.code(), Some(1), "{text}");
    assert!(
        text.contains("requires signed artifacts")
            && text.contains("module web")
            && text.contains(&web_artifact[7..19])
            && text.contains("✗ unsigned"),
        "{text}"
    );
    assert_eq!(prod_record(), before, "prod untouched");
    let created = Command::new("docker")
        .args(["inspect", &prod_web])
        .output()
        .unwrap();
    assert!(
        !created.status.success(),
        "prod's web machine was not created"
    );

    // Signed per the spec with the trusted key, the same promote goes through.
    let (repository, digest) = published(&mesh)["web"].clone();
    spec_sign(mesh.dir.path(), &repository, &digest, &ci_key);
    let promoted = mesh.meshtop(&["promote", "--to", "prod", "web", "--yes"]);
    assert!(promoted.status.success(), "{}", said(&promoted));
    assert_eq!(
        docker(&["inspect", "-f", "{{.Image}}", &prod_web]).trim(),
        web_artifact
    );

    // verify answers per target: prod runs what CI's key signed (exit 0); staging's record names
    // artifacts published unsigned (exit 1), each said.
    let prod = mesh.meshtop(&["verify", "--target", "prod", "web"]);
    let text = said(&prod);
    assert_eq!(prod.status.code(), Some(0), "{text}");
    assert!(
        text.contains("✓ web (record)") && text.contains("signed (keys/ci.pub)"),
        "{text}"
    );
    let staging = mesh.meshtop(&["verify", "--target", "staging"]);
    let text = said(&staging);
    assert_eq!(staging.status.code(), Some(1), "{text}");
    assert!(
        text.contains("✗ base (record)") && text.contains("✗ unsigned"),
        "{text}"
    );
    assert!(text.contains("✓ web (record)"), "{text}");
}
