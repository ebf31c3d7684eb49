//! Provenance read and written from the specs alone, not meshtop's code: cosign's attestation
//! layout (sigstore/cosign `specs/ATTESTATION_SPEC.md`: an OCI manifest under `sha256-<hex>.att`,
//! one DSSE envelope per layer, `application/vnd.dsse.envelope.v1+json`, annotated with its
//! `predicateType`), the DSSE envelope and its signature over the PAE (secure-systems-lab/dsse
//! `envelope.md`, `protocol.md`), the in-toto Statement v1 (in-toto/attestation
//! `spec/v1/statement.md`) and SLSA provenance v1 (slsa-framework/slsa
//! `docs/spec/v1.0/provenance.md`). Verified with the p256 crate directly; written with openssl.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::example::{ExampleMesh, plan_reasons, said};
use super::signing::{OCI_MANIFEST, get, meshtop_env, put_blob, put_manifest, run, trust_ci_key};

/// Make the mesh's repository a git work tree with one commit; that commit.
pub(crate) fn commit_all(root: &Path) -> String {
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["-c", "user.name=ci", "-c", "user.email=ci@example.com"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            super::example::said(&out)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "ci"]);
    git(&["rev-parse", "HEAD"])
}

pub(crate) const DSSE_ENVELOPE: &str = "application/vnd.dsse.envelope.v1+json";
pub(crate) const IN_TOTO: &str = "application/vnd.in-toto+json";
pub(crate) const STATEMENT_V1: &str = "https://in-toto.io/Statement/v1";
pub(crate) const SLSA_V1: &str = "https://slsa.dev/provenance/v1";

pub(crate) fn att_tag(digest: &str) -> String {
    format!("{}.att", digest.replace(':', "-"))
}

/// DSSE `protocol.md`: `PAE(type, body) = "DSSEv1" + SP + LEN(type) + SP + type + SP + LEN(body) + SP + body`.
pub(crate) fn pae(payload_type: &str, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(body.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(body);
    out
}

/// Whether `sig` (base64 of an ASN.1 DER ECDSA P-256 signature) is `public`'s over `message`.
fn ecdsa_verifies(public: &Path, message: &[u8], sig: &str) -> bool {
    use p256::ecdsa::signature::Verifier;
    use p256::pkcs8::DecodePublicKey;
    let pem = std::fs::read_to_string(public).unwrap();
    let key = p256::ecdsa::VerifyingKey::from_public_key_pem(pem.trim()).unwrap();
    let Ok(der) = STANDARD.decode(sig) else {
        return false;
    };
    p256::ecdsa::Signature::from_der(&der).is_ok_and(|s| key.verify(message, &s).is_ok())
}

/// Every attestation under `repository@digest`'s `.att` tag, each checked per the specs (panics
/// on any that does not hold): the layer a DSSE envelope whose blob is the digest its descriptor
/// names, `payloadType` in-toto, a signature by `public` over the PAE, the payload an in-toto
/// Statement v1 whose `predicateType` is the layer's annotation and whose subject names `digest`.
/// The statements, in layer order (empty when there is no `.att` tag).
pub(crate) fn spec_attestations(repository: &str, digest: &str, public: &Path) -> Vec<Value> {
    let Some(manifest) = get(
        &format!("/v2/{repository}/manifests/{}", att_tag(digest)),
        OCI_MANIFEST,
    ) else {
        return Vec::new();
    };
    let manifest: Value = serde_json::from_slice(&manifest).unwrap();
    assert_eq!(manifest["mediaType"], OCI_MANIFEST, "{manifest}");
    let mut statements = Vec::new();
    for layer in manifest["layers"].as_array().unwrap() {
        assert_eq!(layer["mediaType"], DSSE_ENVELOPE, "{layer}");
        let blob_digest = layer["digest"].as_str().unwrap();
        // The blob, as cosign fetches it (never a field meshtop may add to the descriptor).
        let blob = get(&format!("/v2/{repository}/blobs/{blob_digest}"), "*/*")
            .unwrap_or_else(|| panic!("the envelope blob {blob_digest} is not in the registry"));
        use sha2::Digest;
        assert_eq!(
            format!("sha256:{}", hex::encode(sha2::Sha256::digest(&blob))),
            blob_digest
        );
        let envelope: Value = serde_json::from_slice(&blob).unwrap();
        assert_eq!(envelope["payloadType"], IN_TOTO, "{envelope}");
        let body = STANDARD
            .decode(envelope["payload"].as_str().unwrap())
            .unwrap();
        let message = pae(IN_TOTO, &body);
        let signed = envelope["signatures"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| ecdsa_verifies(public, &message, s["sig"].as_str().unwrap()));
        assert!(
            signed,
            "no signature by {} over the PAE: {envelope}",
            public.display()
        );
        let statement: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(statement["_type"], STATEMENT_V1, "{statement}");
        assert_eq!(
            layer["annotations"]["predicateType"], statement["predicateType"],
            "{layer}"
        );
        let hex = digest.strip_prefix("sha256:").unwrap();
        assert!(
            statement["subject"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["digest"]["sha256"] == hex),
            "the subject does not name {digest}: {statement}"
        );
        statements.push(statement);
    }
    statements
}

/// The full input digest `repository@digest` says of itself: its image config's `jr2.dev/inputs`
/// label (an index: its first platform's manifest), read with curl.
pub(crate) fn image_inputs(repository: &str, digest: &str) -> String {
    let accept = format!(
        "{OCI_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.index.v1+json"
    );
    let manifest: Value = serde_json::from_slice(
        &get(&format!("/v2/{repository}/manifests/{digest}"), &accept).unwrap(),
    )
    .unwrap();
    let manifest = match manifest["manifests"].as_array() {
        Some(entries) => {
            let first = entries[0]["digest"].as_str().unwrap();
            serde_json::from_slice(
                &get(&format!("/v2/{repository}/manifests/{first}"), &accept).unwrap(),
            )
            .unwrap()
        }
        None => manifest,
    };
    let config = manifest["config"]["digest"].as_str().unwrap();
    let config: Value =
        serde_json::from_slice(&get(&format!("/v2/{repository}/blobs/{config}"), "*/*").unwrap())
            .unwrap();
    config["config"]["Labels"]["jr2.dev/inputs"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A SLSA v1 provenance as another tool would write it for `subject@digest`: its own build type,
/// `inputs` under `externalParameters.inputs`, `builder` as its builder id.
pub(crate) fn other_tools_statement(
    subject: &str,
    digest: &str,
    inputs: &str,
    builder: &str,
) -> Value {
    json!({
        "_type": STATEMENT_V1,
        "subject": [{ "name": subject, "digest": { "sha256": digest.strip_prefix("sha256:").unwrap() } }],
        "predicateType": SLSA_V1,
        "predicate": {
            "buildDefinition": {
                "buildType": "https://other-tool.example/build@v1",
                "externalParameters": { "inputs": inputs, "module": "web" },
                "resolvedDependencies": [
                    { "uri": "git+https://example.com/repo", "digest": { "gitCommit": "0123456789abcdef0123456789abcdef01234567" } }
                ],
            },
            "runDetails": {
                "builder": { "id": builder },
                "metadata": { "invocationId": "other-tool-run-7", "startedOn": "2026-01-02T03:04:05Z" },
            },
        },
    })
}

/// meshtop's build type: what a provenance of a meshtop build says it is (another tool may write
/// one, naming meshtop's parameters).
pub(crate) const MESHTOP_BUILD: &str = "https://meshtop.dev/provenance/build/v1";

/// [`other_tools_statement`] written as a meshtop build of `module`: meshtop's build type.
pub(crate) fn meshtop_statement(
    subject: &str,
    digest: &str,
    module: &str,
    inputs: &str,
    builder: &str,
) -> Value {
    let mut statement = other_tools_statement(subject, digest, inputs, builder);
    let definition = &mut statement["predicate"]["buildDefinition"];
    definition["buildType"] = MESHTOP_BUILD.into();
    definition["externalParameters"]["module"] = module.into();
    statement
}

/// Attach `statements` to `repository@digest` per the specs, replacing its `.att` image: each a
/// DSSE envelope signed with `key` (openssl, over the PAE), one layer each (none: an `.att` that
/// holds no provenance).
pub(crate) fn spec_attest(
    work: &Path,
    repository: &str,
    digest: &str,
    key: &Path,
    statements: &[Value],
) {
    let mut layers = Vec::new();
    for statement in statements {
        let body = serde_json::to_vec(statement).unwrap();
        let message = work.join("pae.bin");
        let sig = work.join("pae.sig");
        std::fs::write(&message, pae(IN_TOTO, &body)).unwrap();
        run(
            "openssl",
            &[
                "dgst",
                "-sha256",
                "-sign",
                key.to_str().unwrap(),
                "-out",
                sig.to_str().unwrap(),
                message.to_str().unwrap(),
            ],
        );
        let envelope = serde_json::to_vec(&json!({
            "payloadType": IN_TOTO,
            "payload": STANDARD.encode(&body),
            "signatures": [{ "keyid": "", "sig": STANDARD.encode(std::fs::read(&sig).unwrap()) }],
        }))
        .unwrap();
        let blob = put_blob(work, repository, &envelope);
        layers.push(json!({
            "mediaType": DSSE_ENVELOPE,
            "size": envelope.len(),
            "digest": blob,
            "annotations": { "predicateType": statement["predicateType"] },
        }));
    }
    let config =
        br#"{"architecture":"","os":"","rootfs":{"type":"layers","diff_ids":[]},"config":{}}"#;
    let config_digest = put_blob(work, repository, config);
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": { "mediaType": "application/vnd.oci.image.config.v1+json", "size": config.len(), "digest": config_digest },
        "layers": layers,
    });
    put_manifest(
        work,
        repository,
        &att_tag(digest),
        &serde_json::to_vec(&manifest).unwrap(),
    );
}

/// A clean machine's plan of `mesh` (a fresh state file), `args` added: module → (decision, reason).
pub(crate) fn clean_plan(mesh: &ExampleMesh, args: &[&str]) -> BTreeMap<String, (String, String)> {
    let fresh = mesh
        .dir
        .path()
        .join(format!("clean-{}.db", super::run_id()));
    let mut all = vec!["plan", "--json"];
    all.extend_from_slice(args);
    plan_reasons(&mesh.json_with_state(&fresh, &all))
}

/// What a clean machine's plan says of `module`, which it must build: the registry did not vouch.
pub(crate) fn builds_saying(mesh: &ExampleMesh, module: &str) -> String {
    let (decision, reason) = clean_plan(mesh, &[]).remove(module).unwrap();
    assert_eq!(decision, "build", "{reason}");
    reason
}

/// The example mesh on staging and prod, with the registry and `trust`, prod requiring a signed
/// provenance; CI's key.
pub(crate) fn prod_requires_provenance(tag: &str) -> (ExampleMesh, std::path::PathBuf) {
    let mesh = ExampleMesh::two_docker_targets(tag);
    let (ci_key, _) = trust_ci_key(&mesh);
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        "promote_from = \"staging\"\n",
        "promote_from = \"staging\"\nrequire_provenance = true\n",
        1,
    );
    std::fs::write(&file, text).unwrap();
    (mesh, ci_key)
}

/// CI converges staging, publishing and signing with `key`: its summary.
pub(crate) fn ci_publishes_staging(mesh: &ExampleMesh, key: &Path) -> Value {
    let key = key.to_str().unwrap();
    let args = [
        "converge",
        "--target",
        "staging",
        "--publish",
        "--sign-key",
        key,
        "--json",
    ];
    let ci = meshtop_env(mesh, &mesh.state(), &[], &args);
    assert!(ci.status.success(), "{}", said(&ci));
    serde_json::from_slice(&ci.stdout).unwrap()
}
