#![allow(clippy::unwrap_used)]

use super::*;

fn key() -> SigningKey {
    // A fixed P-256 key (PKCS#8), for tests only.
    let secret = p256::SecretKey::from_slice(&[7u8; 32]).unwrap();
    let pem =
        p256::pkcs8::EncodePrivateKey::to_pkcs8_pem(&secret, p256::pkcs8::LineEnding::LF).unwrap();
    cosign::read_private_key(&pem).unwrap()
}

fn provenance() -> Provenance {
    Provenance {
        subject: "127.0.0.1:5000/demo/web".into(),
        manifest: format!("sha256:{}", "a".repeat(64)),
        module: "web".into(),
        inputs: format!("sha256:{}", "b".repeat(64)),
        builder_id: "https://ci.example/builder".into(),
        invocation_id: "op-1".into(),
        ..Provenance::default()
    }
}

#[test]
fn pae_is_dsse_protocols_example() {
    // secure-systems-lab/dsse protocol.md, "Test Vectors".
    assert_eq!(
        pae("http://example.com/HelloWorld", b"hello world"),
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
    );
}

#[test]
fn a_signed_provenance_reads_back_and_judges_by_inputs_and_builder() {
    let key = key();
    let trusted = [key.public("keys/ci.pub")];
    let p = provenance();
    let envelope = envelope(&statement(&p), &key);
    let read = verified_for(&p.manifest, std::slice::from_ref(&envelope), &trusted);
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].inputs.as_deref(), Some(p.inputs.as_str()));
    let wanted = Wanted {
        module: "web".into(),
        hash: p.inputs[..12].to_string(),
        inputs: Some(p.inputs.clone()),
    };
    assert_eq!(
        judge(&read, &wanted, &[]),
        ProvenanceVerdict::Matches {
            builder: p.builder_id.clone()
        }
    );
    let other_inputs = Wanted {
        inputs: Some("sha256:other".into()),
        ..wanted.clone()
    };
    assert!(matches!(
        judge(&read, &other_inputs, &[]),
        ProvenanceVerdict::OtherInputs { .. }
    ));
    let builder = |id: &str, keys: Option<&[&str]>| TrustedBuilder {
        id: id.into(),
        keys: keys.map(|k| k.iter().map(|k| k.to_string()).collect()),
    };
    assert!(matches!(
        judge(&read, &wanted, &[builder("https://other", None)]),
        ProvenanceVerdict::UntrustedBuilder { .. }
    ));
    assert!(matches!(
        judge(&read, &wanted, &[builder(&p.builder_id, None)]),
        ProvenanceVerdict::Matches { .. }
    ));
    assert!(matches!(
        judge(
            &read,
            &wanted,
            &[builder(&p.builder_id, Some(&["keys/ci.pub"]))]
        ),
        ProvenanceVerdict::Matches { .. }
    ));
    assert_eq!(
        judge(
            &read,
            &wanted,
            &[builder(&p.builder_id, Some(&["keys/dev.pub"]))]
        ),
        ProvenanceVerdict::UnboundBuilder {
            builder: p.builder_id.clone(),
            key: "keys/ci.pub".into()
        }
    );
    // Another digest's provenance, or an untrusted key's, says nothing of this one.
    assert!(
        verified_for(
            &format!("sha256:{}", "c".repeat(64)),
            std::slice::from_ref(&envelope),
            &trusted
        )
        .is_empty()
    );
    let other = cosign::read_private_key(
        &p256::pkcs8::EncodePrivateKey::to_pkcs8_pem(
            &p256::SecretKey::from_slice(&[9u8; 32]).unwrap(),
            p256::pkcs8::LineEnding::LF,
        )
        .unwrap(),
    )
    .unwrap();
    assert!(verified_for(&p.manifest, &[envelope], &[other.public("x")]).is_empty());
    assert_eq!(judge(&[], &wanted, &[]), ProvenanceVerdict::Absent);
}

/// A provenance answers only for the ref being decided: meshtop's build type, the ref's module,
/// and inputs the ref's tag abbreviates (issue 51, case 5).
#[test]
fn a_provenance_answers_only_for_its_own_module_inputs_and_build_type() {
    let key = key();
    let trusted = [key.public("keys/ci.pub")];
    // An input digest as the plan writes it: hex, the ref's tag its first 12 characters.
    let p = Provenance {
        inputs: "b".repeat(64),
        ..provenance()
    };
    let read = verified_for(&p.manifest, &[envelope(&statement(&p), &key)], &trusted);
    let hex = p.inputs.clone();
    let reference = format!("127.0.0.1:5000/demo/web:{}-amd64", &hex[..12]);
    let wanted = Wanted::of_ref("web", &reference, None);
    assert_eq!(wanted.hash, hex[..12]);
    assert!(matches!(
        judge(&read, &wanted, &[]),
        ProvenanceVerdict::Matches { .. }
    ));
    assert_eq!(
        judge(&read, &Wanted::of_ref("api", &reference, None), &[]),
        ProvenanceVerdict::OtherModule {
            names: "web".into()
        }
    );
    let other_ref = format!("127.0.0.1:5000/demo/web:{}-amd64", "c".repeat(12));
    assert!(matches!(
        judge(&read, &Wanted::of_ref("web", &other_ref, None), &[]),
        ProvenanceVerdict::OtherInputs { .. }
    ));
    let mut foreign = read.clone();
    foreign[0].build_type = Some("https://other-tool.example/build@v1".into());
    assert_eq!(
        judge(&foreign, &wanted, &[]),
        ProvenanceVerdict::OtherBuildType {
            names: "https://other-tool.example/build@v1".into()
        }
    );
}

#[test]
fn attestation_layers_carry_the_envelope_and_are_appended_once() {
    let envelope = envelope(&statement(&provenance()), &key());
    let image = append_attestation(None, &envelope).unwrap().unwrap();
    let layers = attestation_layers(&image.manifest).unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0].embedded.as_deref(), Some(envelope.as_slice()));
    assert!(
        append_attestation(Some(&image.manifest), &envelope)
            .unwrap()
            .is_none()
    );
    assert_eq!(
        attestation_tag(&format!("sha256:{}", "a".repeat(64))).unwrap(),
        format!("sha256-{}.att", "a".repeat(64))
    );
}

/// The upstreams a build was pinned to and its named contexts' artifacts are resolved dependencies,
/// by digest: what it was made from beyond its context (issue 52: "provenance names the upstream
/// digests").
#[test]
fn the_statement_names_each_upstream_and_named_context_by_digest() {
    let mut p = provenance();
    p.upstreams.insert(
        "python:3.12-slim".into(),
        format!("sha256:{}", "d".repeat(64)),
    );
    p.contexts
        .insert("lib".into(), format!("sha256:{}", "e".repeat(64)));
    let statement: serde_json::Value = serde_json::from_slice(&statement(&p)).unwrap();
    let dependencies = &statement["predicate"]["buildDefinition"]["resolvedDependencies"];
    assert_eq!(
        dependencies[0],
        serde_json::json!({
            "name": "upstream:python:3.12-slim",
            "uri": "python:3.12-slim",
            "digest": { "sha256": "d".repeat(64) },
        })
    );
    assert_eq!(
        dependencies[1],
        serde_json::json!({ "name": "context:lib", "digest": { "sha256": "e".repeat(64) } })
    );
}
