//! The registry's word is checked, not taken, end to end on the real registry (127.0.0.1:5000,
//! alone or behind `crates/testkit/src/registry_proxy.rs`'s lying front) and the real daemon: a manifest's
//! digest is the hash of its bytes, every body fetched by digest is hashed, and a `.sig` is read
//! whole and bounded, DER signatures only (as cosign). Signatures here are made per sigstore/cosign
//! `specs/SIGNATURE_SPEC.md` with openssl and plain registry requests, not with meshtop's code.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine;
use common::example::{ExampleMesh, builds, decisions, plan_reasons, said};
use common::local_registry::{LOCAL, docker, machine_images, registry, require_registry};
use common::registry_proxy::{Lie, RegistryProxy};
use common::run_id;
use common::signing::{
    OCI_MANIFEST, SIGNATURE_KEY, SIMPLE_SIGNING, keypair, look_alike_of, run, sig_tag,
};
use meshtop::backends::registry::{RegistryClient, RegistryError, repository_in};
use sha2::Digest;

const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)))
}

/// The simple-signing payload of `repository@digest` (the spec's `critical` part), `optional` beside.
fn payload(repository: &str, digest: &str, optional: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": { "docker-reference": repository },
            "image": { "docker-manifest-digest": digest },
            "type": "cosign container image signature",
        },
        "optional": optional,
    }))
    .unwrap()
}

/// The DER ECDSA signature (SHA-256) of `payload` by `key`, made by `openssl dgst -sign`.
fn openssl_sign(work: &Path, key: &Path, payload: &[u8]) -> Vec<u8> {
    let name = run_id();
    let (input, output) = (
        work.join(format!("{name}.json")),
        work.join(format!("{name}.sig")),
    );
    std::fs::write(&input, payload).unwrap();
    run(
        "openssl",
        &[
            "dgst",
            "-sha256",
            "-sign",
            key.to_str().unwrap(),
            "-out",
            output.to_str().unwrap(),
            input.to_str().unwrap(),
        ],
    );
    std::fs::read(output).unwrap()
}

/// A DER `SEQUENCE { INTEGER r, INTEGER s }` as the raw 64 bytes r‖s (each left-padded to 32).
fn raw_r_s(der: &[u8]) -> Vec<u8> {
    assert_eq!(der[0], 0x30, "a DER sequence");
    let mut at = 2;
    let mut raw = Vec::new();
    for _ in 0..2 {
        assert_eq!(der[at], 0x02, "a DER integer");
        let length = der[at + 1] as usize;
        let integer = &der[at + 2..at + 2 + length];
        let integer = &integer[integer.iter().take_while(|b| **b == 0).count()..];
        raw.extend(std::iter::repeat_n(0u8, 32 - integer.len()));
        raw.extend_from_slice(integer);
        at += 2 + length;
    }
    assert_eq!(raw.len(), 64);
    raw
}

/// One layer of a `.sig` image: its payload and the base64 signature its annotation holds.
struct SigLayer {
    payload: Vec<u8>,
    signature: String,
}

/// A layer signed with `key` (DER, as cosign), over the payload naming `repository@digest`.
fn signed(work: &Path, key: &Path, repository: &str, digest: &str) -> SigLayer {
    let payload = payload(repository, digest, serde_json::Value::Null);
    let der = openssl_sign(work, key, &payload);
    SigLayer {
        payload,
        signature: base64::engine::general_purpose::STANDARD.encode(der),
    }
}

/// A junk layer: a payload naming `digest` under a signature that is no key's.
fn junk(digest: &str, n: usize) -> SigLayer {
    SigLayer {
        payload: payload("junk", digest, serde_json::json!({ "junk": n })),
        signature: base64::engine::general_purpose::STANDARD.encode([n as u8; 70]),
    }
}

fn http() -> reqwest::Client {
    meshtop::backends::registry::install_crypto_provider();
    reqwest::Client::new()
}

/// Upload `bytes` as a blob of `repository` in the real registry (POST, then PUT with its digest).
async fn put_blob(repository: &str, bytes: &[u8]) -> String {
    let digest = sha256(bytes);
    let started = http()
        .post(format!("http://{LOCAL}/v2/{repository}/blobs/uploads/"))
        .send()
        .await
        .unwrap();
    assert!(started.status().is_success(), "{started:?}");
    let location = started.headers()["location"].to_str().unwrap().to_string();
    let url = if location.starts_with("http") {
        location
    } else {
        format!("http://{LOCAL}{location}")
    };
    let joiner = if url.contains('?') { '&' } else { '?' };
    let put = http()
        .put(format!("{url}{joiner}digest={digest}"))
        .header("content-type", "application/octet-stream")
        .body(bytes.to_vec())
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{put:?}");
    digest
}

/// PUT `body` as the manifest `reference` of `repository` in the real registry; its digest.
async fn put_manifest(repository: &str, reference: &str, media_type: &str, body: &[u8]) -> String {
    let put = http()
        .put(format!(
            "http://{LOCAL}/v2/{repository}/manifests/{reference}"
        ))
        .header("content-type", media_type)
        .body(body.to_vec())
        .send()
        .await
        .unwrap();
    let status = put.status();
    assert!(
        status.is_success(),
        "{status}: {}",
        put.text().await.unwrap()
    );
    sha256(body)
}

/// The manifest digest `repository:tag` resolves to now (the real registry's own word).
async fn resolve(repository: &str, tag: &str) -> String {
    let answer = http()
        .head(format!("http://{LOCAL}/v2/{repository}/manifests/{tag}"))
        .header(
            "accept",
            format!("{OCI_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json"),
        )
        .send()
        .await
        .unwrap();
    answer.headers()["docker-content-digest"]
        .to_str()
        .unwrap()
        .to_string()
}

/// Write `layers` as the `.sig` image of `repository@digest`, replacing what was there.
async fn put_sig(repository: &str, digest: &str, layers: &[SigLayer]) {
    let config =
        br#"{"architecture":"","os":"","rootfs":{"type":"layers","diff_ids":[]},"config":{}}"#;
    let config_digest = put_blob(repository, config).await;
    let mut described = Vec::new();
    for layer in layers {
        described.push(serde_json::json!({
            "mediaType": SIMPLE_SIGNING,
            "size": layer.payload.len(),
            "digest": put_blob(repository, &layer.payload).await,
            "annotations": { SIGNATURE_KEY: layer.signature },
        }));
    }
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": { "mediaType": OCI_CONFIG, "size": config.len(), "digest": config_digest },
        "layers": described,
    });
    put_manifest(
        repository,
        &sig_tag(digest),
        OCI_MANIFEST,
        &serde_json::to_vec(&manifest).unwrap(),
    )
    .await;
}

/// The example mesh under a unique name, its registry `host`, trusting `keys/ci.pub` (made here).
fn trusting_mesh(tag: &str, host: &str) -> (ExampleMesh, PathBuf) {
    let mesh = ExampleMesh::new(tag);
    let (ci_key, _) = keypair(&mesh.root().join("keys"), "ci");
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!(
            "name = \"{}\"\nregistry = \"{host}\"\ntrust = [\"keys/ci.pub\"]\n",
            mesh.name
        ),
        1,
    );
    std::fs::write(&file, text).unwrap();
    (mesh, ci_key)
}

/// Trust no key (`trusted` false) or `keys/ci.pub` again.
fn set_trust(mesh: &ExampleMesh, trusted: bool) {
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let line = "trust = [\"keys/ci.pub\"]\n";
    let text = match (trusted, text.contains(line)) {
        (false, true) => text.replace(line, ""),
        (true, false) => text.replacen("registry = ", &format!("{line}registry = "), 1),
        _ => text,
    };
    std::fs::write(&file, text).unwrap();
}

/// Run meshtop on `mesh` with the state file `state`, off the runtime's threads (the test's
/// registry front answers meanwhile).
async fn meshtop(mesh: &ExampleMesh, state: &Path, args: &[&str]) -> Output {
    let (file, state) = (mesh.mesh_file(), state.to_path_buf());
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_meshtop"))
            .env_remove("MESHTOP_SIGNING_KEY")
            .env_remove("COSIGN_PASSWORD")
            .arg("--mesh")
            .arg(file)
            .arg("--state")
            .arg(state)
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// [`meshtop`] with `--json`, which must succeed: its output.
async fn json(mesh: &ExampleMesh, state: &Path, args: &[&str]) -> serde_json::Value {
    let output = meshtop(mesh, state, args).await;
    assert!(
        output.status.success(),
        "meshtop {args:?}: {}",
        said(&output)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

/// CI: every module built, published and signed with `ci_key`.
async fn ci_publishes_signed(mesh: &ExampleMesh, ci_key: &Path) {
    let key = ci_key.to_str().unwrap();
    let ci = json(
        mesh,
        &mesh.state(),
        &["converge", "--publish", "--sign-key", key, "--json"],
    )
    .await;
    assert!(decisions(&ci).values().all(|d| d == "build"), "{ci}");
}

/// What CI published of `module`: (its ref, the repository in the registry, the manifest digest).
fn published(mesh: &ExampleMesh, host: &str, module: &str) -> (String, String, String) {
    let build = builds(mesh)
        .into_iter()
        .find(|b| b.module.as_deref() == Some(module) && b.published_digest.is_some())
        .unwrap_or_else(|| panic!("CI published no {module}"));
    let reference = build.published_ref.unwrap();
    let (repository, _) = repository_in(host, &reference);
    (
        reference.clone(),
        repository.to_string(),
        build.published_digest.unwrap(),
    )
}

/// `meshtop plan --json` on `state`: module → (decision, reason).
async fn plan(mesh: &ExampleMesh, state: &Path) -> BTreeMap<String, (String, String)> {
    plan_reasons(&json(mesh, state, &["plan", "--json"]).await)
}

/// CI's signed mesh published through a lying front (honest so far), then a look-alike of web
/// (CI's image plus one file, the same labels) pushed over web's ref, unsigned.
struct LookAlike {
    mesh: ExampleMesh,
    proxy: RegistryProxy,
    /// web's tag, the signed manifest CI published under it, the look-alike's manifest and image id.
    tag: String,
    genuine: String,
    look_alike: String,
    look_alike_id: String,
}

async fn look_alike_over_web(tag: &str) -> LookAlike {
    require_registry().await;
    let proxy = RegistryProxy::lying().await;
    let (mesh, ci_key) = trusting_mesh(tag, &proxy.host);
    ci_publishes_signed(&mesh, &ci_key).await;
    let (reference, repository, genuine) = published(&mesh, &proxy.host, "web");
    let (_, tag) = repository_in(&proxy.host, &reference);
    let look_alike_id = look_alike_of(mesh.dir.path(), &reference);
    docker(&["push", &reference]);
    let look_alike = resolve(&repository, tag).await;
    assert_ne!(look_alike, genuine);
    LookAlike {
        tag: tag.to_string(),
        mesh,
        proxy,
        genuine,
        look_alike,
        look_alike_id,
    }
}

impl LookAlike {
    /// From now on the front names the signed manifest's digest for the look-alike's bytes, by tag
    /// (its `Docker-Content-Digest`) and by digest (the look-alike's bytes under the signed digest).
    fn lie(&self) {
        self.proxy.tell(Lie::DigestHeader {
            reference: self.tag.clone(),
            digest: self.genuine.clone(),
        });
        self.proxy.tell(Lie::Serves {
            asked: self.genuine.clone(),
            instead: self.look_alike.clone(),
        });
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_that_lies_about_a_manifests_digest_never_vouches_and_the_module_builds() {
    let l = look_alike_over_web("rilie").await;
    l.mesh.clean_daemon();
    l.lie();
    // A clean machine with trust: web builds, the reason names both digests; base is CI's, signed.
    let fresh = l.mesh.dir.path().join("clean-machine.db");
    let planned = plan(&l.mesh, &fresh).await;
    let (decision, reason) = &planned["web"];
    assert_eq!(decision, "build", "{reason}");
    assert!(
        reason.contains("digest did not match")
            && reason.contains(&l.genuine)
            && reason.contains(&l.look_alike),
        "{reason}"
    );
    assert_eq!(planned["base"].0, "registry", "{:?}", planned["base"]);
    let converged = json(&l.mesh, &fresh, &["converge", "--json"]).await;
    assert_eq!(decisions(&converged)["web"], "build", "{converged}");
    let running = machine_images(&l.mesh.name);
    let web = running
        .iter()
        .find(|(name, _)| name.contains("web"))
        .expect("web's machine runs");
    assert_ne!(web.1, &l.look_alike_id, "{running:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_never_says_signed_for_a_look_alike_served_under_a_signed_digest() {
    let l = look_alike_over_web("riverify").await;
    // A teammate who trusted no key yet took the look-alike: its record names it.
    l.mesh.clean_daemon();
    let teammate = l.mesh.dir.path().join("teammate.db");
    set_trust(&l.mesh, false);
    let took = json(&l.mesh, &teammate, &["converge", "--json"]).await;
    assert_eq!(decisions(&took)["web"], "registry", "{took}");
    set_trust(&l.mesh, true);
    l.lie();
    let output = meshtop(&l.mesh, &teammate, &["verify", "--json"]).await;
    let checked: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("verify --json: {e}: {}", said(&output)));
    let of_look_alike: Vec<&serde_json::Value> = checked
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["artifact"] == l.look_alike_id.as_str())
        .collect();
    assert!(!of_look_alike.is_empty(), "{checked}");
    for c in &of_look_alike {
        assert_eq!(c["signed"], false, "{c}");
        assert!(
            c["says"].as_str().unwrap().contains("digest did not match"),
            "{c}"
        );
    }
    assert_eq!(output.status.code(), Some(1), "{}", said(&output));
}

/// CI's signed mesh published through a lying front (honest), the daemon clean.
struct Published {
    mesh: ExampleMesh,
    ci_key: PathBuf,
    proxy: RegistryProxy,
    /// web's repository and manifest digest.
    repository: String,
    digest: String,
    /// A fresh state file (a clean machine).
    fresh: PathBuf,
}

async fn published_signed(tag: &str) -> Published {
    require_registry().await;
    let proxy = RegistryProxy::lying().await;
    let (mesh, ci_key) = trusting_mesh(tag, &proxy.host);
    ci_publishes_signed(&mesh, &ci_key).await;
    let (_, repository, digest) = published(&mesh, &proxy.host, "web");
    mesh.clean_daemon();
    let fresh = mesh.dir.path().join("clean-machine.db");
    Published {
        mesh,
        ci_key,
        proxy,
        repository,
        digest,
        fresh,
    }
}

impl Published {
    /// `repository` as a payload's `docker-reference` names it.
    fn docker_reference(&self) -> String {
        format!("{}/{}", self.proxy.host, self.repository)
    }

    /// CI's signature of web's digest, made per the spec.
    fn genuine(&self) -> SigLayer {
        signed(
            self.mesh.dir.path(),
            &self.ci_key,
            &self.docker_reference(),
            &self.digest,
        )
    }

    /// web's `.sig` written as `layers`, then the plan's (decision, reason) of web.
    async fn web_after(&self, layers: &[SigLayer]) -> (String, String) {
        put_sig(&self.repository, &self.digest, layers).await;
        plan(&self.mesh, &self.fresh).await["web"].clone()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_registry_answering_500_while_a_signature_is_read_makes_the_module_build_and_says_so() {
    let p = published_signed("ri500").await;
    let planned = plan(&p.mesh, &p.fresh).await;
    assert_eq!(planned["web"].0, "registry", "{:?}", planned["web"]);
    // The `.sig` manifest, then (answering again) its payload blob, answered 500.
    p.proxy.tell(Lie::Fails {
        part: format!("/manifests/{}", sig_tag(&p.digest)),
    });
    let (decision, reason) = plan(&p.mesh, &p.fresh).await["web"].clone();
    assert_eq!(decision, "build", "{reason}");
    assert!(
        reason.contains("signatures could not be read") && reason.contains("500"),
        "{reason}"
    );
    p.proxy.honest();
    let sig = http()
        .get(format!(
            "http://{LOCAL}/v2/{}/manifests/{}",
            p.repository,
            sig_tag(&p.digest)
        ))
        .header("accept", OCI_MANIFEST)
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap();
    let payload_blob = sig["layers"][0]["digest"].as_str().unwrap().to_string();
    p.proxy.tell(Lie::Fails {
        part: format!("/blobs/{payload_blob}"),
    });
    let (decision, reason) = plan(&p.mesh, &p.fresh).await["web"].clone();
    assert_eq!(decision, "build", "{reason}");
    assert!(reason.contains("500"), "{reason}");
    // The converge builds it (never reuses).
    let converged = json(&p.mesh, &p.fresh, &["converge", "--json"]).await;
    assert_eq!(decisions(&converged)["web"], "build", "{converged}");
}

#[tokio::test(flavor = "multi_thread")]
async fn four_junk_layers_before_the_signature_do_not_hide_it() {
    let p = published_signed("rijunk").await;
    let mut layers: Vec<SigLayer> = (0..4).map(|n| junk(&p.digest, n)).collect();
    layers.push(p.genuine());
    let (decision, reason) = p.web_after(&layers).await;
    assert_eq!(decision, "registry", "{reason}");
    assert!(reason.contains("signed by keys/ci.pub"), "{reason}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sig_of_more_than_64_layers_is_refused_with_the_reason() {
    let p = published_signed("rimany").await;
    let mut layers: Vec<SigLayer> = (0..69).map(|n| junk(&p.digest, n)).collect();
    layers.push(p.genuine());
    let (decision, reason) = p.web_after(&layers).await;
    assert_eq!(decision, "build", "{reason}");
    assert!(
        reason.contains("the .sig manifest has 70 layers, more than 64"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signature_payload_past_64_kib_is_refused_with_the_reason() {
    let p = published_signed("rilarge").await;
    // Signed by CI's key and naming the digest, but past the bound.
    let large = payload(
        &p.docker_reference(),
        &p.digest,
        serde_json::json!({ "pad": "x".repeat(70_000) }),
    );
    let signature = base64::engine::general_purpose::STANDARD.encode(openssl_sign(
        p.mesh.dir.path(),
        &p.ci_key,
        &large,
    ));
    let size = large.len();
    let (decision, reason) = p
        .web_after(&[SigLayer {
            payload: large,
            signature,
        }])
        .await;
    assert_eq!(decision, "build", "{reason}");
    assert!(
        reason.contains(&format!("is {size} bytes, more than 65536")),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_raw_r_s_signature_does_not_vouch() {
    let p = published_signed("riraw").await;
    // CI's key over the right payload, as raw r‖s rather than DER: cosign refuses it.
    let right = payload(&p.docker_reference(), &p.digest, serde_json::Value::Null);
    let raw = raw_r_s(&openssl_sign(p.mesh.dir.path(), &p.ci_key, &right));
    let (decision, reason) = p
        .web_after(&[SigLayer {
            payload: right,
            signature: base64::engine::general_purpose::STANDARD.encode(raw),
        }])
        .await;
    assert_eq!(decision, "build", "{reason}");
    assert!(reason.contains("✗ untrusted key"), "{reason}");
}

/// A small image pushed straight to the real registry: (its manifest digest, its config digest,
/// its manifest's size).
async fn push_small_image(repository: &str, tag: &str, label: &str) -> (String, String, usize) {
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": { "Labels": { "test.label": label } },
        "rootfs": { "type": "layers", "diff_ids": [] },
    }))
    .unwrap();
    let config_digest = put_blob(repository, &config).await;
    let layer = put_blob(repository, format!("layer {label}").as_bytes()).await;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": { "mediaType": OCI_CONFIG, "size": config.len(), "digest": config_digest },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "size": format!("layer {label}").len(),
            "digest": layer,
        }],
    }))
    .unwrap();
    let digest = put_manifest(repository, tag, OCI_MANIFEST, &manifest).await;
    (digest, config_digest, manifest.len())
}

/// Two small images (`signed`, `other`) and an index (`multi`) naming `signed`, pushed straight to
/// the real registry, read through a lying front (honest so far).
struct Small {
    proxy: RegistryProxy,
    client: RegistryClient,
    repository: String,
    signed: (String, String),
    other: (String, String),
}

async fn small_images() -> Small {
    require_registry().await;
    let proxy = RegistryProxy::lying().await;
    let repository = format!("{}/app", common::test_name("tridigest"));
    let (signed_manifest, signed_config, signed_size) =
        push_small_image(&repository, "signed", "a").await;
    let (other_manifest, other_config, _) = push_small_image(&repository, "other", "b").await;
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_INDEX,
        "manifests": [{
            "mediaType": OCI_MANIFEST,
            "size": signed_size,
            "digest": signed_manifest,
            "platform": { "architecture": "amd64", "os": "linux" },
        }],
    }))
    .unwrap();
    let index_digest = put_manifest(&repository, "multi", OCI_INDEX, &index).await;
    let client = RegistryClient::new(&registry(&proxy.host), None).unwrap();
    // Honest, everything reads.
    let image = client.image(&repository, "signed").await.unwrap().unwrap();
    assert_eq!(
        (&image.manifest, &image.artifact),
        (&signed_manifest, &signed_config)
    );
    let multi = client.image(&repository, "multi").await.unwrap().unwrap();
    assert_eq!(multi.artifact, index_digest);
    Small {
        proxy,
        client,
        repository,
        signed: (signed_manifest, signed_config),
        other: (other_manifest, other_config),
    }
}

/// `result` is the error of bytes hashing to `got` under the digest `expected`, said so.
fn mismatch<T: std::fmt::Debug>(result: Result<T, RegistryError>, expected: &str, got: &str) {
    match result {
        Err(
            ref error @ RegistryError::DigestMismatch {
                expected: ref e,
                got: ref g,
                ..
            },
        ) if e == expected && g == got => {
            let said = error.to_string();
            assert!(
                said.contains("digest did not match")
                    && said.contains(expected)
                    && said.contains(got),
                "{said}"
            );
        }
        other => panic!("not the mismatch of {expected} and {got}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_manifest_fetched_by_digest_is_hashed() {
    let s = small_images().await;
    s.proxy.tell(Lie::Serves {
        asked: s.signed.0.clone(),
        instead: s.other.0.clone(),
    });
    mismatch(
        s.client.artifact_of(&s.repository, &s.signed.0).await,
        &s.signed.0,
        &s.other.0,
    );
    // An index's platform manifest, fetched by digest.
    mismatch(
        s.client.image(&s.repository, "multi").await,
        &s.signed.0,
        &s.other.0,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_config_blob_is_hashed() {
    let s = small_images().await;
    s.proxy.tell(Lie::Serves {
        asked: s.signed.1.clone(),
        instead: s.other.1.clone(),
    });
    mismatch(
        s.client.image(&s.repository, "signed").await,
        &s.signed.1,
        &s.other.1,
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_docker_content_digest_that_is_not_the_bodys_names_both() {
    let s = small_images().await;
    s.proxy.tell(Lie::DigestHeader {
        reference: "other".into(),
        digest: s.signed.0.clone(),
    });
    match s.client.image(&s.repository, "other").await {
        Err(
            ref error @ RegistryError::HeaderMismatch {
                ref header,
                ref body,
                ..
            },
        ) => {
            assert_eq!((header, body), (&s.signed.0, &s.other.0));
            assert!(
                error.to_string().contains("digest did not match"),
                "{error}"
            );
        }
        other => panic!("not a header mismatch: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signature_payload_is_hashed() {
    let s = small_images().await;
    let work = tempfile::tempdir().unwrap();
    let (key, public) = keypair(work.path(), "ci");
    let layer = signed(work.path(), &key, &s.repository, &s.signed.0);
    let payload_digest = sha256(&layer.payload);
    put_sig(&s.repository, &s.signed.0, &[layer]).await;
    let trusted = [meshtop::mesh::cosign::read_public_key(
        "ci.pub",
        &std::fs::read_to_string(public).unwrap(),
    )
    .unwrap()];
    let verdict = s
        .client
        .signature_verdict(&s.repository, &s.signed.0, &trusted)
        .await
        .unwrap();
    assert!(verdict.vouches(), "{verdict:?}");
    s.proxy.tell(Lie::Serves {
        asked: payload_digest.clone(),
        instead: s.other.1.clone(),
    });
    mismatch(
        s.client
            .signature_verdict(&s.repository, &s.signed.0, &trusted)
            .await,
        &payload_digest,
        &s.other.1,
    );
}
