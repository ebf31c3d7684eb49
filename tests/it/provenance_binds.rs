//! Provenance that binds (issue 51, case 5), on the real registry and daemon: a provenance a
//! trusted key signed answers only for the ref being decided — meshtop's build type, the ref's
//! module, the inputs its tag abbreviates — and a trusted builder id only from the keys
//! `trusted_builders` binds to it. Attestations and signatures are written and checked with
//! openssl and a reader of the specs (`common::provenance`, `common::signing`), not meshtop's code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use serde_json::Value;

use crate::common;

use common::example::said;
use common::local_registry::{LOCAL, require_registry};
use common::mesh_file::{line_of, refused_in, write};
use common::provenance::*;
use common::run_id;
use common::signing::*;

/// The example mesh with `trust`, published and signed by CI under builder id `builder`, and
/// what web was published as.
struct WebPublished {
    signed: SignedMesh,
    builder: String,
    repository: String,
    digest: String,
    inputs: String,
    work: std::path::PathBuf,
}

impl WebPublished {
    fn new(tag: &str) -> WebPublished {
        let builder = format!("https://ci.test/builders/{}", run_id());
        let signed = signed_mesh(tag);
        ci_publishes_signed_with(&signed, &signed.ci_key, &[("MESHTOP_BUILDER_ID", &builder)]);
        let (repository, digest) = published(&signed.mesh).remove("web").unwrap();
        let inputs = image_inputs(&repository, &digest);
        let work = signed.mesh.dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        WebPublished {
            signed,
            builder,
            repository,
            digest,
            inputs,
            work,
        }
    }

    /// A meshtop provenance of web's manifest naming `module`, web's inputs and CI's builder.
    fn statement(&self, module: &str) -> Value {
        let subject = format!("{LOCAL}/{}", self.repository);
        meshtop_statement(&subject, &self.digest, module, &self.inputs, &self.builder)
    }

    /// Replace web's `.att` by `statements`, each signed with `key`.
    fn attest(&self, key: &Path, statements: &[Value]) {
        spec_attest(&self.work, &self.repository, &self.digest, key, statements);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trusted_provenance_of_another_module_or_build_type_never_vouches_naming_it() {
    require_registry().await;
    let web = WebPublished::new("pbmod");
    let mesh = &web.signed.mesh;
    let ci_key = &web.signed.ci_key;
    assert_eq!(clean_plan(mesh, &[])["web"].0, "registry");

    // The trusted key signed, for web's manifest, a meshtop provenance of module api (web's own
    // inputs, CI's builder): it answers for api's ref, not web's.
    web.attest(ci_key, &[web.statement("api")]);
    let plan = clean_plan(mesh, &[]);
    let (decision, reason) = &plan["web"];
    assert_eq!(decision, "build", "{reason}");
    assert!(
        reason.contains("✗ built as another module") && reason.contains("module api's"),
        "{reason}"
    );
    // api's own provenance (CI's) still vouches for api.
    assert_eq!(plan["api"].0, "registry", "{:?}", plan["api"]);

    // Of another build type, naming web and its inputs: its parameters are another tool's words.
    let foreign = "https://other-tool.example/build@v1";
    let mut other_type = web.statement("web");
    other_type["predicate"]["buildDefinition"]["buildType"] = foreign.into();
    web.attest(ci_key, &[other_type]);
    let reason = builds_saying(mesh, "web");
    assert!(
        reason.contains("✗ not a meshtop build") && reason.contains(foreign),
        "{reason}"
    );

    // Meshtop's build type, web, its inputs (another tool wrote it): it vouches.
    web.attest(ci_key, &[web.statement("web")]);
    assert_eq!(clean_plan(mesh, &[])["web"].0, "registry");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trusted_builder_id_vouches_only_from_the_keys_bound_to_it() {
    require_registry().await;
    let web = WebPublished::new("pbkey");
    let mesh = &web.signed.mesh;
    let builder = &web.builder;
    // A developer's key is trusted too (a laptop's own publishes), and its mesh file (or
    // MESHTOP_BUILDER_ID) may name any builder id: here CI's, for web's manifest.
    let (dev_key, dev_pub) = keypair(&mesh.root().join("keys"), "dev");
    spec_sign(&web.work, &web.repository, &web.digest, &dev_key);
    assert!(spec_verifies(
        &web.work,
        &web.repository,
        &web.digest,
        &dev_pub
    ));
    web.attest(&dev_key, &[web.statement("web")]);

    // The plain form: any key of trust may claim the id (what a plain string means, said in
    // docs/trust.md), so the developer's claim vouches.
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let with_builders = |builders: &str| {
        let trust = "trust = [\"keys/ci.pub\", \"keys/dev.pub\"]";
        let lines = format!("{trust}\ntrusted_builders = [{builders}]\n");
        let changed = text.replacen("trust = [\"keys/ci.pub\"]\n", &lines, 1);
        std::fs::write(&file, changed).unwrap();
    };
    with_builders(&format!("\"{builder}\""));
    assert_eq!(clean_plan(mesh, &[])["web"].0, "registry");

    // Bound to CI's key: the developer's key claiming CI's builder never vouches, named.
    with_builders(&format!(
        "{{ id = \"{builder}\", keys = [\"keys/ci.pub\"] }}"
    ));
    let plan = clean_plan(mesh, &[]);
    let (decision, reason) = &plan["web"];
    assert_eq!(decision, "build", "{reason}");
    assert!(
        reason.contains("✗ builder claimed by another key")
            && reason.contains(builder.as_str())
            && reason.contains("keys/dev.pub"),
        "{reason}"
    );
    // CI's own provenance of api names its builder with CI's key: it vouches.
    assert_eq!(plan["api"].0, "registry", "{:?}", plan["api"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn require_provenance_refuses_an_older_signed_artifact_recorded_under_a_newer_ref() {
    // A record that names web's newer ref beside its older artifact (CI signed and attested both,
    // each for its own inputs): the provenance was compared with the artifact's own label, so a
    // downgrade to any artifact CI ever signed went through the require_provenance door.
    require_registry().await;
    let (mesh, ci_key) = prod_requires_provenance("pbold");
    let web_of = |summary: Value| {
        let rows = summary["modules"].as_array().unwrap().clone();
        let web = rows.into_iter().find(|m| m["name"] == "web").unwrap();
        let text = |key: &str| web[key].as_str().unwrap().to_string();
        (text("ref"), text("digest"))
    };
    let (old_ref, old_artifact) = web_of(ci_publishes_staging(&mesh, &ci_key));
    let old_manifest = published(&mesh)["web"].1.clone();
    std::fs::write(mesh.root().join("web/www/new.html"), "newer").unwrap();
    let (new_ref, new_artifact) = web_of(ci_publishes_staging(&mesh, &ci_key));
    assert_ne!(old_ref, new_ref);
    assert_ne!(old_artifact, new_artifact);

    let db = rusqlite::Connection::open(mesh.state()).unwrap();
    let changed = db
        .execute(
            "UPDATE records SET digest = ?2, manifest = ?3, signed_by = NULL \
             WHERE mesh = ?1 AND target = 'staging' AND module = 'web'",
            [&mesh.name, &old_artifact, &old_manifest],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(db);

    let promoted = mesh.meshtop(&["promote", "--to", "prod", "web", "--yes"]);
    let text = said(&promoted);
    assert_eq!(promoted.status.code(), Some(1), "{text}");
    let (_, old_tag) = meshtop::mesh::refs::split_reference(&old_ref);
    let old_hash = &old_tag[..12];
    assert!(
        text.contains("requires a signed provenance")
            && text.contains("✗ built from other inputs")
            && text.contains(old_hash),
        "{text}"
    );
    let prod = mesh.json(&["status", "--target", "prod", "--json"]);
    assert!(
        !prod.to_string().contains(&old_artifact),
        "nothing was sent to prod: {prod}"
    );
}

/// A directory with a trusted key and one module: where `trusted_builders` shapes are read.
fn keyed_repo() -> tempfile::TempDir {
    let dir = common::mesh_file::repo();
    keypair(&dir.path().join("keys"), "ci");
    dir
}

fn loads(dir: &Path, text: &str) -> meshtop::mesh::model::Mesh {
    let path = write(dir, "mesh.toml", text);
    meshtop::workspace::file::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn trusted_builders_bind_ids_to_keys_and_bad_shapes_are_refused_at_their_line() {
    use common::mesh_file::{HEAD, ONE};
    let dir = keyed_repo();
    let trust = "trust = [\"keys/ci.pub\"]\n";
    let text = format!(
        "{HEAD}{trust}trusted_builders = [\n  \"https://plain\",\n  {{ id = \"https://ci\", keys = [\"keys/ci.pub\"] }},\n]\n{ONE}"
    );
    let mesh = loads(dir.path(), &text);
    let builders = &mesh.signing.trusted_builders;
    assert_eq!(builders.len(), 2);
    assert_eq!(
        (builders[0].id.as_str(), builders[0].keys.clone()),
        ("https://plain", None)
    );
    assert_eq!(
        (builders[1].id.as_str(), builders[1].keys.clone()),
        ("https://ci", Some(vec!["keys/ci.pub".to_string()]))
    );

    let bad = |entry: &str, needle: &str, names: &[&str]| {
        let text = format!("{HEAD}{trust}trusted_builders = [\n  {entry},\n]\n{ONE}");
        refused_in(dir.path(), &text, line_of(&text, needle), names);
    };
    bad(
        "{ id = \"https://ci\", keys = [\"keys/other.pub\"] }",
        "keys/other.pub",
        &["keys/other.pub", "not one of trust", "\"keys/ci.pub\""],
    );
    bad(
        "{ id = \"https://ci\" }",
        "https://ci",
        &["has no `keys`", "keys = "],
    );
    bad(
        "{ id = \"https://ci\", keys = [] }",
        "https://ci",
        &["no keys", "https://ci"],
    );
    bad("{ keys = [\"keys/ci.pub\"] }", "{ keys", &["has no `id`"]);
    bad(
        "{ id = \"https://ci\", key = [\"keys/ci.pub\"] }",
        "https://ci",
        &["unknown key `key`", "did you mean `keys`"],
    );
    bad("42", "42", &["an entry of trusted_builders", "an integer"]);
    bad("\"\"", "\"\"", &["empty", "builder id"]);
    let text =
        format!("{HEAD}{trust}trusted_builders = [\"https://ci\",\n  \"https://ci\"]\n{ONE}");
    refused_in(
        dir.path(),
        &text,
        line_of(&text, "  \"https://ci\"]"),
        &["listed twice"],
    );
    let text = format!("{HEAD}{trust}trusted_builders = \"https://ci\"\n{ONE}");
    refused_in(
        dir.path(),
        &text,
        line_of(&text, "trusted_builders"),
        &["must be an array", "keys = [\"keys/ci.pub\"]"],
    );
    let text = format!("{HEAD}trusted_builders = [\"https://ci\"]\n{ONE}");
    refused_in(
        dir.path(),
        &text,
        line_of(&text, "trusted_builders"),
        &["`trust` is not"],
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provenance_names_a_base_the_registry_vouched_for_by_the_manifest_it_was_verified_as() {
    // CI on a clean machine takes the base from the registry (verified, signed) and builds web on
    // it: web's provenance names that base by the manifest digest it was pulled as, never a tag.
    require_registry().await;
    let signed = signed_mesh("pbbase");
    ci_publishes_signed(&signed);
    let mesh = &signed.mesh;
    let (_, base_manifest) = published(mesh).remove("base").unwrap();
    mesh.clean_daemon();
    std::fs::write(mesh.root().join("web/www/later.html"), "a later web").unwrap();
    let fresh = mesh.dir.path().join("clean-ci.db");
    let key = signed.ci_key.to_str().unwrap();
    let args = ["converge", "--publish", "--sign-key", key, "--json"];
    let ci = meshtop_env(mesh, &fresh, &[], &args);
    assert!(ci.status.success(), "{}", said(&ci));
    let summary: Value = serde_json::from_slice(&ci.stdout).unwrap();
    let decided = common::example::decisions(&summary);
    assert_eq!(
        (decided["base"].as_str(), decided["web"].as_str()),
        ("registry", "build")
    );

    let db = rusqlite::Connection::open(&fresh).unwrap();
    let (reference, manifest): (String, String) = db
        .query_row(
            "SELECT published_ref, published_digest FROM builds \
             WHERE mesh = ?1 AND module = 'web' AND published_digest IS NOT NULL",
            [&mesh.name],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let (repository, _) = meshtop::backends::registry::repository_in(LOCAL, &reference);
    let statements = spec_attestations(repository, &manifest, &signed.ci_pub);
    assert_eq!(statements.len(), 1, "{statements:?}");
    let dependencies = &statements[0]["predicate"]["buildDefinition"]["resolvedDependencies"];
    let base = dependencies
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "base:base")
        .unwrap_or_else(|| panic!("no base in {dependencies}"));
    let hex = base_manifest.strip_prefix("sha256:").unwrap();
    assert_eq!(base["digest"]["sha256"], hex, "{base}");
}
