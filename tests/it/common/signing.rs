//! Signing as cosign's spec says, with openssl and curl (not meshtop's code): keys, the simple-signing
//! payload and its `.sig` manifest, a verifier, and the example mesh with `trust` and CI's key
//! (sigstore/cosign `specs/SIGNATURE_SPEC.md`). Shared by the tests of signed vouchers and doors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::example::{ExampleMesh, builds, decisions, said};
use super::local_registry::LOCAL;
use super::run_id;
use meshtop::backends::registry::repository_in;

pub(crate) const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub(crate) const SIGNATURE_KEY: &str = "dev.cosignproject.cosign/signature";
pub(crate) const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

pub(crate) fn run(program: &str, args: &[&str]) -> Output {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        said(&output)
    );
    output
}

/// An ECDSA P-256 key pair made by openssl: `<name>.key` (PKCS#8, mode 600) and `<name>.pub`.
pub(crate) fn keypair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let sec1 = dir.join(format!("{name}.sec1"));
    let key = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let s = |p: &Path| p.to_str().unwrap().to_string();
    run(
        "openssl",
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            &s(&sec1),
        ],
    );
    run(
        "openssl",
        &[
            "pkcs8",
            "-topk8",
            "-nocrypt",
            "-in",
            &s(&sec1),
            "-out",
            &s(&key),
        ],
    );
    run(
        "openssl",
        &["ec", "-in", &s(&key), "-pubout", "-out", &s(&public)],
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    (key, public)
}

/// `key` (a PKCS#8 PEM) sealed with `password` as `cosign generate-key-pair` writes a key, made here
/// from the format (go-securesystemslib `encrypted`, as sigstore/cosign `pkg/cosign/keys.go` uses
/// it): the PKCS#8 DER sealed by NaCl secretbox under a key scrypt derives (N 32768, r 8, p 1, a
/// 32-byte salt), the JSON of kdf, cipher and ciphertext in base64, under the PEM label
/// `ENCRYPTED SIGSTORE PRIVATE KEY`. Mode 600.
pub(crate) fn cosign_sealed(key: &Path, password: &str) -> PathBuf {
    use base64::Engine;
    use crypto_secretbox::aead::{Aead, KeyInit};
    use sha2::Digest;
    let b64 = base64::engine::general_purpose::STANDARD;
    let pem = std::fs::read_to_string(key).unwrap();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = b64.decode(body).unwrap();
    // Salt and nonce: any bytes serve; made from the key's path so that each run differs.
    let seed = sha2::Sha256::digest(format!("{}{}", key.display(), run_id()));
    let salt: Vec<u8> = seed.to_vec();
    let nonce: Vec<u8> = sha2::Sha256::digest(seed)[..24].to_vec();
    let params = scrypt::Params::new(15, 8, 1, 32).unwrap();
    let mut secret = [0u8; 32];
    scrypt::scrypt(password.as_bytes(), &salt, &params, &mut secret).unwrap();
    let ciphertext =
        crypto_secretbox::XSalsa20Poly1305::new(crypto_secretbox::Key::from_slice(&secret))
            .encrypt(crypto_secretbox::Nonce::from_slice(&nonce), der.as_slice())
            .unwrap();
    let sealed = serde_json::to_vec(&serde_json::json!({
        "kdf": {
            "name": "scrypt",
            "params": { "N": 32768, "r": 8, "p": 1 },
            "salt": b64.encode(&salt),
        },
        "cipher": { "name": "nacl/secretbox", "nonce": b64.encode(&nonce) },
        "ciphertext": b64.encode(&ciphertext),
    }))
    .unwrap();
    let encoded = b64.encode(&sealed);
    let mut pem = String::from("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n");
    for line in encoded.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap());
        pem.push('\n');
    }
    pem.push_str("-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n");
    let file = key.with_extension("cosign.key");
    std::fs::write(&file, pem).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    file
}

/// Run meshtop on `mesh` and `state` with `envs` (COSIGN_PASSWORD and MESHTOP_SIGNING_KEY of the
/// caller's environment removed first).
pub(crate) fn meshtop_env(
    mesh: &ExampleMesh,
    state: &Path,
    envs: &[(&str, &str)],
    args: &[&str],
) -> Output {
    Command::new(env!("CARGO_BIN_EXE_meshtop"))
        .env_remove("COSIGN_PASSWORD")
        .env_remove("MESHTOP_SIGNING_KEY")
        .envs(envs.iter().copied())
        .arg("--mesh")
        .arg(mesh.mesh_file())
        .arg("--state")
        .arg(state)
        .args(args)
        .output()
        .unwrap()
}

/// The example mesh with the registry, trusting `keys/ci.pub` (made here); the CI key beside it.
pub(crate) struct SignedMesh {
    pub(crate) mesh: ExampleMesh,
    pub(crate) ci_key: PathBuf,
    pub(crate) ci_pub: PathBuf,
}

pub(crate) fn signed_mesh(tag: &str) -> SignedMesh {
    let mesh = ExampleMesh::new(tag);
    let (ci_key, ci_pub) = keypair(&mesh.root().join("keys"), "ci");
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap().replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!(
            "name = \"{}\"\nregistry = \"{LOCAL}\"\ntrust = [\"keys/ci.pub\"]\n",
            mesh.name
        ),
        1,
    );
    std::fs::write(&file, text).unwrap();
    SignedMesh {
        mesh,
        ci_key,
        ci_pub,
    }
}

/// module → (repository in the registry, manifest digest) of what CI published.
pub(crate) fn published(mesh: &ExampleMesh) -> BTreeMap<String, (String, String)> {
    builds(mesh)
        .into_iter()
        .filter_map(|b| {
            let reference = b.published_ref?;
            let (repository, _) = repository_in(LOCAL, &reference);
            Some((b.module?, (repository.to_string(), b.published_digest?)))
        })
        .collect()
}

pub(crate) fn registry_url(path: &str) -> String {
    format!("http://{LOCAL}{path}")
}

/// GET from the registry: the body, or None on 404.
pub(crate) fn get(path: &str, accept: &str) -> Option<Vec<u8>> {
    let output = Command::new("curl")
        .args([
            "-s",
            "-w",
            "\n%{http_code}",
            "-H",
            &format!("Accept: {accept}"),
        ])
        .arg(registry_url(path))
        .output()
        .unwrap();
    let text = output.stdout;
    let cut = text.iter().rposition(|b| *b == b'\n').unwrap();
    let code = String::from_utf8_lossy(&text[cut + 1..]).to_string();
    match code.as_str() {
        "200" => Some(text[..cut].to_vec()),
        "404" => None,
        other => panic!(
            "GET {path}: HTTP {other}: {}",
            String::from_utf8_lossy(&text)
        ),
    }
}

/// The manifest digest `repository:tag` resolves to now.
pub(crate) fn resolve(repository: &str, tag: &str) -> String {
    let output = run(
        "curl",
        &[
            "-sfI",
            "-H",
            &format!(
                "Accept: {OCI_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json"
            ),
            &registry_url(&format!("/v2/{repository}/manifests/{tag}")),
        ],
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("docker-content-digest")
                .then(|| v.trim().to_string())
        })
        .expect("the registry names the digest")
}

pub(crate) fn sig_tag(digest: &str) -> String {
    format!("{}.sig", digest.replace(':', "-"))
}

/// Verify per the spec: under `sha256-<hex>.sig`, some simple-signing layer whose payload blob
/// verifies with `public` (`openssl dgst -sha256 -verify`, the annotation base64-decoded) and whose
/// payload names `repository` and `digest` as a cosign container image signature.
pub(crate) fn spec_verifies(work: &Path, repository: &str, digest: &str, public: &Path) -> bool {
    let Some(manifest) = get(
        &format!("/v2/{repository}/manifests/{}", sig_tag(digest)),
        OCI_MANIFEST,
    ) else {
        return false;
    };
    let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    for layer in manifest["layers"].as_array().unwrap() {
        if layer["mediaType"] != SIMPLE_SIGNING {
            continue;
        }
        let blob = layer["digest"].as_str().unwrap();
        let payload = get(&format!("/v2/{repository}/blobs/{blob}"), "*/*").unwrap();
        let signature = layer["annotations"][SIGNATURE_KEY].as_str().unwrap();
        let payload_file = work.join("payload.json");
        let sig_file = work.join("payload.sig");
        std::fs::write(&payload_file, &payload).unwrap();
        use base64::Engine;
        let der = base64::engine::general_purpose::STANDARD
            .decode(signature)
            .unwrap();
        std::fs::write(&sig_file, der).unwrap();
        let verified = Command::new("openssl")
            .args(["dgst", "-sha256", "-verify"])
            .arg(public)
            .arg("-signature")
            .arg(&sig_file)
            .arg(&payload_file)
            .output()
            .unwrap();
        if !String::from_utf8_lossy(&verified.stdout).contains("Verified OK") {
            continue;
        }
        let body: serde_json::Value = serde_json::from_slice(&payload).unwrap();
        if body["critical"]["image"]["docker-manifest-digest"] == digest
            && body["critical"]["type"] == "cosign container image signature"
            && body["critical"]["identity"]["docker-reference"] == format!("{LOCAL}/{repository}")
        {
            return true;
        }
    }
    false
}

/// Upload `bytes` as a blob of `repository` (POST, then PUT with the digest); its digest.
pub(crate) fn put_blob(work: &Path, repository: &str, bytes: &[u8]) -> String {
    use sha2::Digest;
    let digest = format!("sha256:{}", hex::encode(sha2::Sha256::digest(bytes)));
    let headers = run(
        "curl",
        &[
            "-sf",
            "-X",
            "POST",
            "-D",
            "-",
            "-o",
            "/dev/null",
            &registry_url(&format!("/v2/{repository}/blobs/uploads/")),
        ],
    );
    let location = String::from_utf8_lossy(&headers.stdout)
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("location")
                .then(|| v.trim().to_string())
        })
        .unwrap();
    let url = if location.starts_with("http") {
        location
    } else {
        registry_url(&location)
    };
    let joiner = if url.contains('?') { '&' } else { '?' };
    let file = work.join("blob");
    std::fs::write(&file, bytes).unwrap();
    run(
        "curl",
        &[
            "-sf",
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/octet-stream",
            "--data-binary",
            &format!("@{}", file.display()),
            &format!("{url}{joiner}digest={digest}"),
        ],
    );
    digest
}

pub(crate) fn put_manifest(work: &Path, repository: &str, tag: &str, bytes: &[u8]) {
    let file = work.join("manifest.json");
    std::fs::write(&file, bytes).unwrap();
    run(
        "curl",
        &[
            "-sf",
            "-X",
            "PUT",
            "-H",
            &format!("Content-Type: {OCI_MANIFEST}"),
            "--data-binary",
            &format!("@{}", file.display()),
            &registry_url(&format!("/v2/{repository}/manifests/{tag}")),
        ],
    );
}

/// Sign `repository@digest` per the spec with openssl and `key`: the simple-signing payload, its
/// signature in the annotation, the `.sig` manifest written with curl (replacing what was there).
pub(crate) fn spec_sign(work: &Path, repository: &str, digest: &str, key: &Path) {
    let payload = serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": { "docker-reference": format!("{LOCAL}/{repository}") },
            "image": { "docker-manifest-digest": digest },
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .unwrap();
    let payload_file = work.join("to-sign.json");
    let sig_file = work.join("to-sign.sig");
    std::fs::write(&payload_file, &payload).unwrap();
    run(
        "openssl",
        &[
            "dgst",
            "-sha256",
            "-sign",
            key.to_str().unwrap(),
            "-out",
            sig_file.to_str().unwrap(),
            payload_file.to_str().unwrap(),
        ],
    );
    use base64::Engine;
    let signature =
        base64::engine::general_purpose::STANDARD.encode(std::fs::read(&sig_file).unwrap());
    let payload_digest = put_blob(work, repository, &payload);
    let config =
        br#"{"architecture":"","os":"","rootfs":{"type":"layers","diff_ids":[]},"config":{}}"#;
    let config_digest = put_blob(work, repository, config);
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": { "mediaType": "application/vnd.oci.image.config.v1+json", "size": config.len(), "digest": config_digest },
        "layers": [{
            "mediaType": SIMPLE_SIGNING,
            "size": payload.len(),
            "digest": payload_digest,
            "annotations": { SIGNATURE_KEY: signature },
        }],
    });
    put_manifest(
        work,
        repository,
        &sig_tag(digest),
        &serde_json::to_vec(&manifest).unwrap(),
    );
}

/// CI: every module built, published and signed with the CI key.
pub(crate) fn ci_publishes_signed(signed: &SignedMesh) {
    ci_publishes_signed_with(signed, &signed.ci_key, &[]);
}

/// CI: every module built, published and signed with `key` (`--sign-key`), `envs` set.
pub(crate) fn ci_publishes_signed_with(signed: &SignedMesh, key: &Path, envs: &[(&str, &str)]) {
    let key = key.to_str().unwrap();
    let mesh = &signed.mesh;
    let output = meshtop_env(
        mesh,
        &mesh.state(),
        envs,
        &["converge", "--publish", "--sign-key", key, "--json"],
    );
    assert!(output.status.success(), "CI's converge: {}", said(&output));
    let ci: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(decisions(&ci).values().all(|d| d == "build"), "{ci}");
}

/// `meshtop verify --json` on the state file `state`: exits `code`, says one object per artifact.
pub(crate) fn verified(mesh: &ExampleMesh, state: &Path, code: i32) -> Vec<serde_json::Value> {
    let output = mesh.meshtop_with_state(state, &["verify", "--json"]);
    assert_eq!(output.status.code(), Some(code), "{}", said(&output));
    let checked: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    checked.as_array().unwrap().clone()
}

/// Write `trust = ["keys/ci.pub"]` and the registry into `mesh`'s file (after its name), and make
/// CI's key pair beside it: the key and its public half.
pub(crate) fn trust_ci_key(mesh: &ExampleMesh) -> (PathBuf, PathBuf) {
    let keys = keypair(&mesh.root().join("keys"), "ci");
    let file = mesh.mesh_file();
    let text = std::fs::read_to_string(&file).unwrap();
    let with_registry = if text.contains("registry = ") {
        String::new()
    } else {
        format!("registry = \"{LOCAL}\"\n")
    };
    let text = text.replacen(
        &format!("name = \"{}\"\n", mesh.name),
        &format!(
            "name = \"{}\"\n{with_registry}trust = [\"keys/ci.pub\"]\n",
            mesh.name
        ),
        1,
    );
    std::fs::write(&file, text).unwrap();
    keys
}

/// Build a look-alike of `reference` (the image it names plus one file; the labels inherited) in
/// `work`, tagged as `reference` on this daemon: what someone with push access would push over it.
/// Its image id.
pub(crate) fn look_alike_of(work: &Path, reference: &str) -> String {
    let context = work.join(format!("look-alike-{}", run_id()));
    std::fs::create_dir_all(&context).unwrap();
    std::fs::write(context.join("evil"), "not CI's").unwrap();
    std::fs::write(
        context.join("Dockerfile"),
        format!("FROM {reference}\nCOPY evil /evil\n"),
    )
    .unwrap();
    let built = Command::new("docker")
        .env("DOCKER_BUILDKIT", "0")
        // No cache: another test's intermediate images may go while this build uses them.
        .args(["build", "-q", "--no-cache", "-t", reference])
        .arg(&context)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", said(&built));
    super::local_registry::docker(&["inspect", "-f", "{{.Id}}", reference])
        .trim()
        .to_string()
}

/// An image that is not what any build made: busybox imported as one layer, under `name`.
/// Removed when dropped.
pub(crate) struct LookAlike {
    pub(crate) name: String,
    pub(crate) id: String,
}

impl LookAlike {
    pub(crate) fn make(work: &Path) -> LookAlike {
        let name = super::test_name("lookalike");
        let dir = work.join("lookalike");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy("/bin/busybox", dir.join("busybox")).unwrap();
        let tar = work.join("lookalike.tar");
        run(
            "tar",
            &[
                "-cf",
                tar.to_str().unwrap(),
                "-C",
                dir.to_str().unwrap(),
                "busybox",
            ],
        );
        super::local_registry::docker(&[
            "import",
            tar.to_str().unwrap(),
            &format!("{name}:latest"),
        ]);
        let id = super::local_registry::docker(&["image", "inspect", "-f", "{{.Id}}", &name])
            .trim()
            .to_string();
        LookAlike { name, id }
    }
}

impl Drop for LookAlike {
    fn drop(&mut self) {
        let _ = Command::new("docker")
            .args(["image", "rm", "-f", &self.name])
            .output();
    }
}
