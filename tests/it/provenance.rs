//! Provenance that travels (issue 40), on the real registry and daemon: CI's publish attaches a
//! SLSA v1 provenance beside each signature, which a reader written from the DSSE, in-toto and
//! SLSA specs (`common::provenance`, not meshtop's code) verifies; with `trust`, a registry
//! artifact vouches only when its signed provenance names the ref's inputs and a trusted builder.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::example::said;
use common::local_registry::{LOCAL, require_registry};
use common::provenance::*;
use common::run_id;
use common::signing::*;

#[tokio::test(flavor = "multi_thread")]
async fn ci_publishes_a_provenance_that_a_reader_of_the_specs_verifies() {
    require_registry().await;
    let signed = signed_mesh("pvci");
    let commit = commit_all(&signed.mesh.root());
    let builder = format!("https://ci.test/builders/{}", run_id());
    ci_publishes_signed_with(&signed, &signed.ci_key, &[("MESHTOP_BUILDER_ID", &builder)]);
    let published = published(&signed.mesh);
    assert_eq!(published.len(), 5, "every module published: {published:?}");
    for (module, (repository, digest)) in &published {
        let statements = spec_attestations(repository, digest, &signed.ci_pub);
        assert_eq!(
            statements.len(),
            1,
            "{module}: one provenance: {statements:?}"
        );
        let statement = &statements[0];
        assert_eq!(statement["predicateType"], SLSA_V1, "{statement}");
        assert_eq!(
            statement["subject"][0]["name"],
            format!("{LOCAL}/{repository}"),
            "{statement}"
        );
        let predicate = &statement["predicate"];
        let definition = &predicate["buildDefinition"];
        assert!(
            definition["buildType"]
                .as_str()
                .unwrap()
                .starts_with("https://meshtop.dev/"),
            "{statement}"
        );
        let parameters = &definition["externalParameters"];
        assert_eq!(parameters["module"], module.as_str(), "{statement}");
        assert_eq!(
            parameters["inputs"],
            image_inputs(repository, digest),
            "the provenance names the artifact's own inputs: {statement}"
        );
        assert_eq!(predicate["runDetails"]["builder"]["id"], builder.as_str());
        let metadata = &predicate["runDetails"]["metadata"];
        assert!(!metadata["invocationId"].as_str().unwrap().is_empty());
        assert!(metadata["startedOn"].as_str().unwrap().ends_with('Z'));
        assert!(metadata["finishedOn"].as_str().unwrap().ends_with('Z'));
        let dependencies = definition["resolvedDependencies"].as_array().unwrap();
        assert!(
            dependencies
                .iter()
                .any(|d| d["digest"]["gitCommit"] == commit.as_str()),
            "{module}: the source commit: {statement}"
        );
        if module != "base" {
            let base = parameters["base"].as_str().unwrap();
            let (_, base_digest) = &published[base];
            let hex = base_digest.strip_prefix("sha256:").unwrap();
            assert!(
                dependencies.iter().any(|d| d["digest"]["sha256"] == hex),
                "{module}: its base {base} by manifest digest: {statement}"
            );
        }
        assert!(parameters["buildArgs"].as_array().is_some(), "{statement}");
    }
    let api = &spec_attestations(&published["api"].0, &published["api"].1, &signed.ci_pub)[0];
    assert_eq!(
        api["predicate"]["buildDefinition"]["externalParameters"]["buildArgs"],
        serde_json::json!(["GREETING"]),
        "the build args' names, never their values"
    );

    // A clean machine (no images, a fresh state file) converges from the registry: BUILT BY
    // answers from the signed provenance, and `meshtop provenance` says what it holds.
    let mesh = &signed.mesh;
    mesh.clean_daemon();
    let fresh = mesh.dir.path().join("clean-machine.db");
    let clean = mesh.json_with_state(&fresh, &["converge", "--json"]);
    assert_eq!(
        common::example::decisions(&clean)["web"],
        "registry",
        "{clean}"
    );
    let status = mesh.meshtop_with_state(&fresh, &["status"]);
    assert!(status.status.success(), "{}", said(&status));
    let table = String::from_utf8_lossy(&status.stdout);
    let web_row = table
        .lines()
        .find(|l| l.starts_with(&format!("{}-web-1", mesh.name)))
        .unwrap_or_else(|| panic!("no web machine in {table}"));
    assert!(web_row.contains("(from the signed provenance)"), "{table}");
    assert!(web_row.contains(&builder), "{web_row}");
    assert!(web_row.contains(&commit[..7]), "{web_row}");
    let said_json = mesh.json_with_state(&fresh, &["status", "--json"]);
    let web = said_json
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["module"] == "web")
        .unwrap();
    assert_eq!(web["provenance"]["builder_id"], builder.as_str(), "{web}");
    assert_eq!(
        web["provenance"]["inputs"],
        image_inputs(&published["web"].0, &published["web"].1)
    );
    let verified = mesh.json_with_state(&fresh, &["verify", "web", "--json"]);
    let record = verified
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["of"] == "record")
        .unwrap_or_else(|| panic!("web's record checked: {verified}"));
    assert_eq!(record["signed"], true, "{record}");
    let built_by = record["built_by"].as_str().unwrap();
    assert!(
        built_by.ends_with("(from the signed provenance)") && built_by.contains(&builder),
        "{record}"
    );
    assert_eq!(record["provenance"]["commit"], commit.as_str(), "{record}");
    let by_digest = mesh.json_with_state(
        &fresh,
        &["builds", "--digest", &published["web"].1, "--json"],
    );
    assert_eq!(by_digest[0]["builder_id"], builder.as_str(), "{by_digest}");
    assert_eq!(by_digest[0]["commit"], commit.as_str(), "{by_digest}");
    let asked = mesh.json_with_state(&fresh, &["provenance", "web", "--json"]);
    assert_eq!(asked["verified"], true, "{asked}");
    assert_eq!(asked["manifest"], published["web"].1.as_str(), "{asked}");
    assert_eq!(
        asked["provenances"][0]["commit"],
        commit.as_str(),
        "{asked}"
    );
}

/// The example mesh with `trust`, published and signed by CI (builder id `builder`).
fn published_by_ci(tag: &str, builder: &str) -> SignedMesh {
    let signed = signed_mesh(tag);
    ci_publishes_signed_with(&signed, &signed.ci_key, &[("MESHTOP_BUILDER_ID", builder)]);
    signed
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trusted_signature_whose_provenance_names_other_inputs_or_builder_never_vouches() {
    require_registry().await;
    let ci_builder = format!("https://ci.test/builders/{}", run_id());
    let signed = published_by_ci("pvother", &ci_builder);
    let mesh = &signed.mesh;
    let published = published(mesh);
    let (repository, digest) = &published["web"];
    let subject = format!("{LOCAL}/{repository}");
    let inputs = image_inputs(repository, digest);
    let work = mesh.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();

    // Before: CI's own provenance names these inputs: the registry vouches.
    let plan = clean_plan(mesh, &[]);
    assert_eq!(plan["web"].0, "registry", "{:?}", plan["web"]);

    // The trusted key signed a provenance of web's manifest that names other inputs.
    let other = format!("sha256:{}", "e".repeat(64));
    spec_attest(
        &work,
        repository,
        digest,
        &signed.ci_key,
        &[meshtop_statement(
            &subject,
            digest,
            "web",
            &other,
            &ci_builder,
        )],
    );
    let plan = clean_plan(mesh, &[]);
    let (decision, reason) = &plan["web"];
    assert_eq!(decision, "build", "{reason}");
    assert!(reason.contains("✗ built from other inputs"), "{reason}");
    assert!(reason.contains("eeeeeeeeeeee"), "{reason}");
    assert_eq!(plan["api"].0, "registry", "{:?}", plan["api"]);

    // Another tool's provenance of its own build type, naming these inputs: its parameters are
    // that tool's words, so it never vouches (issue 51, case 5), said with its build type.
    let tool = "https://other-tool.example/builder";
    spec_attest(
        &work,
        repository,
        digest,
        &signed.ci_key,
        &[other_tools_statement(&subject, digest, &inputs, tool)],
    );
    let reason = builds_saying(mesh, "web");
    assert!(
        reason.contains("✗ not a meshtop build")
            && reason.contains("https://other-tool.example/build@v1"),
        "{reason}"
    );
    // Written per the spec with meshtop's build type, module and these inputs: read, and it vouches.
    spec_attest(
        &work,
        repository,
        digest,
        &signed.ci_key,
        &[meshtop_statement(&subject, digest, "web", &inputs, tool)],
    );
    let plan = clean_plan(mesh, &[]);
    assert_eq!(plan["web"].0, "registry", "{:?}", plan["web"]);

    // With trusted_builders, that tool's builder is not one the mesh trusts: said, never vouches.
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        "trust = [\"keys/ci.pub\"]\n",
        &format!("trust = [\"keys/ci.pub\"]\ntrusted_builders = [\"{ci_builder}\"]\n"),
        1,
    );
    std::fs::write(&file, text).unwrap();
    let plan = clean_plan(mesh, &[]);
    let (decision, reason) = &plan["web"];
    assert_eq!(decision, "build", "{reason}");
    assert!(reason.contains("✗ untrusted builder"), "{reason}");
    assert!(
        reason.contains("https://other-tool.example/builder"),
        "{reason}"
    );
    // CI's own (api's) names the trusted builder: it vouches.
    assert_eq!(plan["api"].0, "registry", "{:?}", plan["api"]);

    // The same provenance signed by a key the mesh does not trust says nothing: CI's signature
    // vouches as before (no provenance is required here).
    let (stranger, _) = keypair(&work.join("keys"), "stranger");
    spec_attest(
        &work,
        repository,
        digest,
        &stranger,
        &[other_tools_statement(&subject, digest, &other, &ci_builder)],
    );
    let plan = clean_plan(mesh, &[]);
    assert_eq!(plan["web"].0, "registry", "{:?}", plan["web"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn require_provenance_refuses_a_signed_artifact_without_one() {
    require_registry().await;
    let (mesh, ci_key) = prod_requires_provenance("pvreq");
    ci_publishes_staging(&mesh, &ci_key);
    let published = published(&mesh);
    let (repository, digest) = &published["web"];
    let plan = clean_plan(&mesh, &["--target", "prod"]);
    assert_eq!(plan["web"].0, "registry", "{:?}", plan["web"]);

    // Its `.att` holds no provenance now: still signed by the trusted key.
    let work = mesh.dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    spec_attest(&work, repository, digest, &ci_key, &[]);
    let plan = clean_plan(&mesh, &["--target", "prod"]);
    let (decision, reason) = &plan["web"];
    assert_eq!(decision, "build", "{reason}");
    assert!(reason.contains("✗ no provenance"), "{reason}");
    assert_eq!(plan["api"].0, "registry", "{:?}", plan["api"]);
    // Where it is not required, the signature alone vouches.
    let plan = clean_plan(&mesh, &["--target", "staging"]);
    assert_eq!(plan["web"].0, "registry", "{:?}", plan["web"]);

    // Every door into prod checks it too: a promote of staging's signed web is refused, said.
    let promoted = mesh.meshtop(&["promote", "--to", "prod", "web", "--yes"]);
    let text = said(&promoted);
    assert_eq!(promoted.status.code(), Some(1), "{text}");
    assert!(
        text.contains("requires a signed provenance (require_provenance = true)")
            && text.contains("✗ no provenance"),
        "{text}"
    );
    let machine = format!("{}-prod-web-1", mesh.name);
    let exists = std::process::Command::new("docker")
        .args(["inspect", &machine])
        .output()
        .unwrap();
    assert!(!exists.status.success(), "nothing was sent to prod");
    // api's provenance is CI's: its promote goes through.
    let promoted = mesh.meshtop(&["promote", "--to", "prod", "api", "--yes"]);
    assert!(promoted.status.success(), "{}", said(&promoted));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_delivery_attaches_a_provenance_the_specs_verify() {
    use common::kube_api::KubeApi;
    use common::team::Team;
    let api = KubeApi::start().await;
    let team = Team::new("pvkube", &api).await;
    let (ci_key, ci_pub) = trust_ci_key(&team.mesh);
    let ci = team
        .run(
            &team.alice(),
            &["converge", "--sign-key", ci_key.to_str().unwrap(), "--json"],
        )
        .await;
    assert!(ci.status.success(), "{}", said(&ci));
    let record = api.cluster(&team.namespace).read_record().await.unwrap();
    assert!(!record.record.is_empty());
    for (module, entry) in &record.record {
        let manifest = entry
            .manifest
            .clone()
            .unwrap_or_else(|| panic!("{module}: the record keeps the manifest CI pushed"));
        let (repository, _) = meshtop::backends::registry::repository_in(LOCAL, &entry.reference);
        let statements = spec_attestations(repository, &manifest, &ci_pub);
        assert_eq!(statements.len(), 1, "{module}: {statements:?}");
        let parameters = &statements[0]["predicate"]["buildDefinition"]["externalParameters"];
        assert_eq!(parameters["module"], module.as_str());
        assert_eq!(parameters["inputs"], image_inputs(repository, &manifest));
    }
}
