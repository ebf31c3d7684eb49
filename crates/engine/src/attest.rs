//! The provenance of what a converge pushes: what meshtop knows of the build (the pushed image's
//! labels, this machine's build row, the operation) as a SLSA v1 provenance, signed with the key
//! that signs the artifact and attached as cosign attaches attestations. The format is
//! `mesh::provenance`'s; signing goes through `targets::sign_pushed`, which calls here.

use crate::backends::registry::{RegistryClient, RegistryError, repository_in};
use crate::mesh::builds::BuildRow;
use crate::mesh::cosign::SigningKey;
use crate::mesh::model::{INPUTS_LABEL, Mesh};
use crate::mesh::provenance::{self, BaseDependency, Provenance, SourceDependency};
use crate::progress::Emitter;

use crate::timefmt::rfc3339_utc as rfc3339;

/// This machine's builder id: the mesh's `builder_id` (else `MESHTOP_BUILDER_ID`, read with the
/// mesh file), else the default.
pub fn builder_id(mesh: &Mesh) -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    provenance::builder_id(mesh.signing.builder_id.as_deref(), None, &host)
}

/// Sign and attach the provenance of manifest `digest`, just pushed as `reference`.
pub(crate) async fn attest_pushed(
    client: &RegistryClient,
    mesh: &Mesh,
    key: &SigningKey,
    reference: &str,
    digest: &str,
    module: &str,
    emitter: &Emitter,
) -> Result<(), RegistryError> {
    let (repository, _) = repository_in(client.host(), reference);
    // The pushed image's own labels say its full input digest (what the ref abbreviates).
    let labels = client
        .image(repository, digest)
        .await?
        .map(|image| image.labels)
        .unwrap_or_default();
    let build = emitter
        .last_build(module)
        .filter(|b| b.reference.as_deref() == Some(reference));
    let base = base_dependency(client, mesh, module, emitter).await;
    let source = source_dependency(mesh, module, build.as_ref(), &labels);
    let definition = mesh.modules.iter().find(|m| m.name == module);
    let provenance = Provenance {
        subject: format!("{}/{repository}", client.host()),
        manifest: digest.to_string(),
        module: module.to_string(),
        inputs: labels.get(INPUTS_LABEL).cloned().unwrap_or_default(),
        platforms: definition
            .map(|m| m.platforms.iter().map(ToString::to_string).collect())
            .unwrap_or_default(),
        base,
        build_args: definition
            .map(|m| m.build_args.keys().cloned().collect())
            .unwrap_or_default(),
        source,
        builder_id: builder_id(mesh),
        invocation_id: build
            .as_ref()
            .and_then(|b| b.operation_id.clone())
            .unwrap_or_else(|| emitter.operation_id.clone()),
        started_on: rfc3339(build.as_ref().map_or(emitter.started_ms, |b| b.started_ms)),
        finished_on: rfc3339(
            build
                .as_ref()
                .and_then(|b| b.ended_ms)
                .unwrap_or_else(crate::timefmt::now_ms),
        ),
        host: Some(build.as_ref().map_or_else(
            || gethostname::gethostname().to_string_lossy().into_owned(),
            |b| b.host.clone(),
        )),
        mesh: mesh.name.clone(),
        operation: emitter.operation,
    };
    let envelope = provenance::envelope(&provenance::statement(&provenance), key);
    client.attest(repository, digest, envelope).await
}

/// The base module's artifact: its newest build's ref, by the manifest digest it was published
/// as (else the one its ref resolves to in the registry now).
async fn base_dependency(
    client: &RegistryClient,
    mesh: &Mesh,
    module: &str,
    emitter: &Emitter,
) -> Option<BaseDependency> {
    let base = mesh
        .modules
        .iter()
        .find(|m| m.name == module)?
        .base
        .clone()?;
    let build = emitter.last_build(&base);
    let uri = build.as_ref().and_then(|b| b.reference.clone());
    let mut digest = build.as_ref().and_then(|b| b.published_digest.clone());
    if let (None, Some(reference)) = (&digest, &uri) {
        let (repository, tag) = repository_in(client.host(), reference);
        if let Ok(crate::backends::registry::Published::Present { digest: found }) =
            client.manifest(repository, tag).await
        {
            digest = Some(found);
        }
    }
    Some(BaseDependency {
        uri: uri.unwrap_or_else(|| format!("module:{base}")),
        module: base,
        digest,
    })
}

/// The git commit the module's context came from: the build row's, else the image's OCI label.
fn source_dependency(
    mesh: &Mesh,
    module: &str,
    build: Option<&BuildRow>,
    labels: &std::collections::HashMap<String, String>,
) -> Option<SourceDependency> {
    let commit = build
        .and_then(|b| b.commit.clone())
        .or_else(|| labels.get("org.opencontainers.image.revision").cloned())?;
    let context = mesh
        .modules
        .iter()
        .find(|m| m.name == module)
        .map_or(mesh.root.clone(), |m| m.context.clone());
    let remote = labels
        .get("org.opencontainers.image.source")
        .cloned()
        .or_else(|| crate::backends::git::revision(&context).source);
    Some(SourceDependency {
        uri: match remote {
            Some(remote) => format!("git+{remote}"),
            None => format!("git+file://{}", mesh.root.display()),
        },
        commit,
        dirty: build.is_some_and(|b| b.dirty),
    })
}
