#![allow(clippy::unwrap_used)]

use super::*;

const DIGEST: &str = "sha256:d34db33fd34db33fd34db33fd34db33fd34db33fd34db33fd34db33fd34db33f";
const OTHER: &str = "sha256:0000000000000000000000000000000000000000000000000000000000000001";

/// A fixed P-256 key (PKCS#8), made with `openssl ecparam -name prime256v1 -genkey -noout |
/// openssl pkcs8 -topk8 -nocrypt`.
const PRIVATE: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgO0Eif8/bIK2r5wUF
eBDnppvcinLtFtbI4x7YVOEbPK2hRANCAATI06zH5gBLAod1tGzdZ3RStXR3qQMn
ZLKDFrsW4eqUQ0TG2sybjhmSMktUL9QjNnt2pj2N4iWwuVm9i+LY0Fem
-----END PRIVATE KEY-----
";

fn key() -> SigningKey {
    read_private_key(PRIVATE).unwrap()
}

#[test]
fn the_payload_is_what_cosign_writes() {
    // sigstore pkg/signature/payload/payload_test.go, "no claims".
    assert_eq!(
        String::from_utf8(payload("example.com/test/image", DIGEST)).unwrap(),
        r#"{"critical":{"identity":{"docker-reference":"example.com/test/image"},"image":{"docker-manifest-digest":"sha256:d34db33fd34db33fd34db33fd34db33fd34db33fd34db33fd34db33fd34db33f"},"type":"cosign container image signature"},"optional":null}"#
    );
    assert_eq!(
        payload_digest(&payload("example.com/test/image", DIGEST)).as_deref(),
        Some(DIGEST)
    );
}

#[test]
fn a_payload_is_read_as_go_reads_it() {
    // The spec's own example spells the key `Docker-manifest-digest`; Go matches keys by case.
    let spelled = format!(
        r#"{{"critical":{{"identity":{{"docker-reference":"x"}},"image":{{"Docker-manifest-digest":"{DIGEST}"}},"type":"cosign container image signature"}},"optional":{{"creator":"atomic"}}}}"#
    );
    assert_eq!(payload_digest(spelled.as_bytes()).as_deref(), Some(DIGEST));
    let atomic = spelled.replace(
        "cosign container image signature",
        "atomic container signature",
    );
    assert_eq!(payload_digest(atomic.as_bytes()), None);
    assert_eq!(payload_digest(b"not json"), None);
}

#[test]
fn signature_tags_follow_the_digest() {
    assert_eq!(
        signature_tag(DIGEST).as_deref(),
        Some("sha256-d34db33fd34db33fd34db33fd34db33fd34db33fd34db33fd34db33fd34db33f.sig")
    );
    assert_eq!(signature_tag("sha256:abc"), None);
    assert_eq!(signature_tag("sha512:ab"), None);
}

fn signed_layer(key: &SigningKey, digest: &str) -> (SignatureLayer, Option<Vec<u8>>) {
    let body = payload("127.0.0.1:5000/demo/api", digest);
    let image = append_signature(None, &body, &key.sign(&body))
        .unwrap()
        .unwrap();
    let layer = signature_layers(&image.manifest).unwrap().remove(0);
    (layer, Some(body))
}

#[test]
fn a_trusted_signature_of_this_digest_vouches() {
    let key = key();
    let trusted = [key.public("keys/ci.pub")];
    assert_eq!(
        judge(DIGEST, &[signed_layer(&key, DIGEST)], &trusted),
        SignatureVerdict::Trusted {
            key: "keys/ci.pub".into()
        }
    );
}

#[test]
fn the_refusals() {
    let key = key();
    let trusted = [key.public("keys/ci.pub")];
    let stranger = SigningKey(EcdsaSigningKey::from(
        p256::SecretKey::from_slice(&[7u8; 32]).unwrap(),
    ));
    assert_eq!(judge(DIGEST, &[], &trusted), SignatureVerdict::Unsigned);
    assert_eq!(
        judge(DIGEST, &[signed_layer(&stranger, DIGEST)], &trusted),
        SignatureVerdict::UntrustedKey
    );
    // A genuine signature of another artifact, copied under this digest's tag.
    assert_eq!(
        judge(DIGEST, &[signed_layer(&key, OTHER)], &trusted),
        SignatureVerdict::OtherDigest {
            names: OTHER.into()
        }
    );
    // A payload that is not the blob the layer names proves nothing.
    let (layer, _) = signed_layer(&key, DIGEST);
    let forged = Some(payload("127.0.0.1:5000/demo/api", OTHER));
    assert_eq!(
        judge(DIGEST, &[(layer.clone(), forged)], &trusted),
        SignatureVerdict::UntrustedKey
    );
    assert_eq!(
        judge(DIGEST, &[(layer, None)], &trusted),
        SignatureVerdict::UntrustedKey
    );
    // One trusted signature among others vouches.
    assert!(
        judge(
            DIGEST,
            &[signed_layer(&stranger, DIGEST), signed_layer(&key, DIGEST)],
            &trusted
        )
        .vouches()
    );
}

#[test]
fn a_signature_is_appended_beside_another_signers() {
    let key = key();
    let stranger = SigningKey(EcdsaSigningKey::from(
        p256::SecretKey::from_slice(&[9u8; 32]).unwrap(),
    ));
    let body = payload("r/demo/api", DIGEST);
    let first = append_signature(None, &body, &stranger.sign(&body))
        .unwrap()
        .unwrap();
    let second = append_signature(Some(&first.manifest), &body, &key.sign(&body))
        .unwrap()
        .unwrap();
    let layers = signature_layers(&second.manifest).unwrap();
    assert_eq!(layers.len(), 2);
    assert_eq!(layers[0].signature, stranger.sign(&body));
    assert_eq!(layers[1].signature, key.sign(&body));
    // The config lists every layer, and the manifest names the config it is written with.
    let config: Value = serde_json::from_slice(&second.config).unwrap();
    assert_eq!(config["rootfs"]["diff_ids"].as_array().unwrap().len(), 2);
    let manifest: Value = serde_json::from_slice(&second.manifest).unwrap();
    assert_eq!(manifest["config"]["digest"], sha256_digest(&second.config));
    assert_eq!(manifest["mediaType"], OCI_MANIFEST_MEDIA_TYPE);
    assert_eq!(
        manifest["layers"][1]["mediaType"],
        SIMPLE_SIGNING_MEDIA_TYPE
    );
    // The same signature again changes nothing (ECDSA here is deterministic, RFC 6979).
    assert_eq!(
        append_signature(Some(&second.manifest), &body, &key.sign(&body)).unwrap(),
        None
    );
}

#[test]
fn keys_that_cannot_be_read_say_the_line() {
    let public = key().public("ci.pub").pem();
    assert!(read_public_key("ci.pub", &public).is_ok());
    let err = read_private_key(&public).unwrap_err();
    assert!(err.to_string().contains("public key"), "{err}");
    let err = read_private_key("\n\nhello").unwrap_err();
    assert!(err.to_string().starts_with("line 3:"), "{err}");
    // A key cosign sealed needs its password; a key encrypted otherwise is refused with advice.
    let sealed = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
    let err = read_private_key(sealed).unwrap_err();
    assert!(
        matches!(err, FormatError::NeedsPassword { line: 1, .. })
            && err.to_string().contains("COSIGN_PASSWORD"),
        "{err}"
    );
    let err = read_private_key_with(sealed, Some(b"pw")).unwrap_err();
    assert!(
        err.to_string().contains("not cosign's sealed-key JSON"),
        "{err}"
    );
    let err = read_private_key(
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap_err();
    assert!(
        matches!(err, FormatError::Encrypted { line: 1, .. })
            && err.to_string().contains("openssl"),
        "{err}"
    );
    let broken = PRIVATE.replace("ZLKDFrsW", "");
    let err = read_private_key(&broken).unwrap_err();
    assert!(err.to_string().starts_with("line 1: not a PKCS#8"), "{err}");
    let err = read_public_key("ci.pub", PRIVATE).unwrap_err();
    assert!(err.to_string().contains("not a public key"), "{err}");
}

#[test]
fn only_der_signatures_verify_as_cosign() {
    let key = key();
    let trusted = key.public("keys/ci.pub");
    let body = payload("127.0.0.1:5000/demo/api", DIGEST);
    let der = STANDARD.decode(key.sign(&body)).unwrap();
    assert!(trusted.verifies(&body, &STANDARD.encode(&der)));
    // The same signature as raw r‖s (64 bytes): Go's ecdsa.VerifyASN1 cannot read it, nor can meshtop.
    let raw = EcdsaSignature::from_der(&der).unwrap().to_bytes();
    assert_eq!(raw.len(), 64);
    assert!(!trusted.verifies(&body, &STANDARD.encode(raw)));
    let image = append_signature(None, &body, &STANDARD.encode(raw))
        .unwrap()
        .unwrap();
    let layer = signature_layers(&image.manifest).unwrap().remove(0);
    assert_eq!(
        judge(DIGEST, &[(layer, Some(body))], &[trusted]),
        SignatureVerdict::UntrustedKey
    );
}

/// A `.sig` manifest of `layers` simple-signing layers, each announcing `size` bytes.
fn sig_manifest(layers: usize, size: usize) -> Vec<u8> {
    let layers: Vec<Value> = (0..layers)
        .map(|n| {
            json!({
                "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
                "size": size,
                "digest": format!("sha256:{n:064x}"),
                "annotations": { SIGNATURE_ANNOTATION: "AAAA" },
            })
        })
        .collect();
    serde_json::to_vec(&json!({ "schemaVersion": 2, "layers": layers })).unwrap()
}

#[test]
fn a_sig_is_read_whole_within_its_bounds() {
    assert_eq!(signature_layers(&sig_manifest(5, 300)).unwrap().len(), 5);
    assert_eq!(
        signature_layers(&sig_manifest(MAX_SIGNATURE_LAYERS, 300))
            .unwrap()
            .len(),
        MAX_SIGNATURE_LAYERS
    );
    let err = signature_layers(&sig_manifest(70, 300)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the .sig manifest has 70 layers, more than 64"
    );
    let err = signature_layers(&sig_manifest(2, MAX_PAYLOAD_BYTES + 1)).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the signature payload sha256:{:064x} is 65537 bytes, more than 65536 (64 KiB)",
            0
        )
    );
    // Signing past the bound would write a `.sig` no reader judges: refused, said.
    let body = payload("r/demo/api", DIGEST);
    let full = sig_manifest(MAX_SIGNATURE_LAYERS, 300);
    let err = append_signature(Some(&full), &body, &key().sign(&body)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the .sig manifest has 65 layers, more than 64"
    );
}
