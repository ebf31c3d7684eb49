//! Signing what a converge pushes (`--sign-key`, `MESHTOP_SIGNING_KEY`): a cosign signature of the
//! pushed manifest digest, appended beside any other signer's under its `.sig` tag, and its SLSA
//! provenance signed with the same key under its `.att` tag (`converge::attest`). Every push
//! signs through here: the target's (`--publish`, a Kubernetes delivery), the pool's hand-overs
//! and base pushes (`converge/place.rs`), and the index a multi-platform build pushed
//! (`converge/build.rs`).

use crate::attest::Pushed;
use crate::backends::credentials::Credentials;
use crate::backends::registry::{RegistryClient, repository_in};
use crate::error::TargetError;
use crate::mesh::model::{Mesh, Registry};
use crate::mesh::progress::DeliveredBy;
use crate::mesh::text::short_id;
use crate::progress::{Emitter, Payload};

/// Sign `pushed`'s manifest, just pushed to `registry`, when the converge has a signing key.
/// A signature that cannot be written fails the push: an unsigned artifact would not vouch.
pub(crate) async fn sign_pushed(
    mesh: &Mesh,
    registry: &Registry,
    creds: Option<Credentials>,
    pushed: &Pushed<'_>,
    emitter: &Emitter,
) -> Result<(), TargetError> {
    let Some(key) = &mesh.signing.key else {
        return Ok(());
    };
    let (reference, digest, module) = (pushed.reference, pushed.manifest, pushed.module);
    let client = RegistryClient::new(registry, creds)?;
    let (repository, _) = repository_in(&registry.host, reference);
    client.sign(repository, digest, key).await?;
    crate::attest::attest_pushed(&client, mesh, key, pushed, emitter).await?;
    emitter.emit(
        Payload::Delivered {
            reference: reference.to_string(),
            by: DeliveredBy::Signed {
                digest: digest.to_string(),
            },
        },
        Some(module),
        format!(
            "signed {repository}@{} and attested its provenance (cosign, tags sha256-{}….sig and .att)",
            short_id(digest),
            short_id(digest)
        ),
    );
    Ok(())
}
