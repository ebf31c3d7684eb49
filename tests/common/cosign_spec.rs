//! Cosign signatures as sigstore/cosign `specs/SIGNATURE_SPEC.md` writes them, checked with openssl
//! and curl against the real registry, never with meshtop's code: a key pair made by openssl, and
//! whether a manifest digest carries a signature that verifies with a public key.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::said;

pub const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
pub const SIGNATURE_KEY: &str = "dev.cosignproject.cosign/signature";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn run(program: &str, args: &[&str]) -> Output {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{program} {args:?} failed: {}",
        said(&output)
    );
    output
}

/// An ECDSA P-256 key pair made by openssl: `<name>.key` (PKCS#8, mode 600) and `<name>.pub`.
pub fn keypair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).unwrap();
    let sec1 = dir.join(format!("{name}.sec1"));
    let key = dir.join(format!("{name}.key"));
    let public = dir.join(format!("{name}.pub"));
    let (sec1, key_path, public_path) = (
        sec1.to_str().unwrap(),
        key.to_str().unwrap(),
        public.to_str().unwrap(),
    );
    run(
        "openssl",
        &[
            "ecparam",
            "-name",
            "prime256v1",
            "-genkey",
            "-noout",
            "-out",
            sec1,
        ],
    );
    run(
        "openssl",
        &["pkcs8", "-topk8", "-nocrypt", "-in", sec1, "-out", key_path],
    );
    run(
        "openssl",
        &["ec", "-in", key_path, "-pubout", "-out", public_path],
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    (key, public)
}

/// GET `path` from the plain-HTTP registry at `host`: the body, or None on 404.
pub fn get(host: &str, path: &str, accept: &str) -> Option<Vec<u8>> {
    let output = Command::new("curl")
        .args([
            "-s",
            "-w",
            "\n%{http_code}",
            "-H",
            &format!("Accept: {accept}"),
        ])
        .arg(format!("http://{host}{path}"))
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

/// The tag cosign keeps the signatures of `digest` under.
pub fn sig_tag(digest: &str) -> String {
    format!("{}.sig", digest.replace(':', "-"))
}

/// Verify per the spec: under `sha256-<hex>.sig` in `host/repository`, some simple-signing layer
/// whose payload blob verifies with `public` (`openssl dgst -sha256 -verify`, the annotation
/// base64-decoded) and whose payload names `host/repository` and `digest` as a cosign container
/// image signature. `work`: a directory for openssl's files.
pub fn spec_verifies(
    work: &Path,
    host: &str,
    repository: &str,
    digest: &str,
    public: &Path,
) -> bool {
    let Some(manifest) = get(
        host,
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
        let payload = get(host, &format!("/v2/{repository}/blobs/{blob}"), "*/*").unwrap();
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
            && body["critical"]["identity"]["docker-reference"] == format!("{host}/{repository}")
        {
            return true;
        }
    }
    false
}
