//! The provenance of what a converge pushes: what meshtop knows of the build (its plan's inputs,
//! this machine's build row, the operation; never the pushed image's labels) as a SLSA v1 provenance, signed with the key
//! that signs the artifact and attached as cosign attaches attestations. The format is
//! `mesh::provenance`'s; signing goes through `targets::sign_pushed`, which calls here.

use crate::backends::registry::{RegistryClient, RegistryError, repository_in};
use crate::mesh::builds::BuildRow;
use crate::mesh::cosign::SigningKey;
use crate::mesh::model::Mesh;
use crate::mesh::provenance::{self, BaseDependency, Provenance, SourceDependency};
use crate::progress::Emitter;

use crate::timefmt::rfc3339_utc as rfc3339;

/// What a push left in the registry, as the signature and provenance name it: the module, its
/// ref, the manifest digest (checked to be the image the build produced before it gets here:
/// `Daemon::push_built`), and the inputs digest this converge's plan computed for the ref when the
/// caller holds it (else the one kept with this machine's build of the ref).
pub(crate) struct Pushed<'a> {
    pub module: &'a str,
    pub reference: &'a str,
    pub manifest: &'a str,
    pub inputs: Option<&'a str>,
}

/// This machine's builder id: the mesh's `builder_id` (else `MESHTOP_BUILDER_ID`, read with the
/// mesh file), else the default.
pub(crate) fn builder_id(mesh: &Mesh) -> String {
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    provenance::builder_id(mesh.signing.builder_id.as_deref(), None, &host)
}

/// Sign and attach the provenance of `pushed`'s manifest. Written from what this machine knows
/// of the build — the plan's inputs digest, the build row's commit and times, the base its row
/// names by the manifest that base was published as — never from the pushed image's labels (the
/// image says what it likes of itself).
pub(crate) async fn attest_pushed(
    client: &RegistryClient,
    mesh: &Mesh,
    key: &SigningKey,
    pushed: &Pushed<'_>,
    emitter: &Emitter,
) -> Result<(), RegistryError> {
    let (reference, digest, module) = (pushed.reference, pushed.manifest, pushed.module);
    let (repository, _) = repository_in(client.host(), reference);
    let build = emitter
        .last_build(module)
        .filter(|b| b.reference.as_deref() == Some(reference));
    let inputs = pushed
        .inputs
        .map(str::to_string)
        .or_else(|| emitter.planned_inputs(module, reference))
        .unwrap_or_default();
    let base = base_dependency(mesh, module, build.as_ref(), emitter);
    let source = source_dependency(mesh, module, build.as_ref());
    let definition = mesh.modules.iter().find(|m| m.name == module);
    // What the build was made from beyond its context: the upstreams it was pinned to and the
    // artifacts its named contexts named, from the input manifest this machine saved with it.
    let made_from = emitter.planned_manifest(module, reference);
    let provenance = Provenance {
        subject: format!("{}/{repository}", client.host()),
        manifest: digest.to_string(),
        module: module.to_string(),
        inputs,
        platforms: definition
            .map(|m| m.platforms.iter().map(ToString::to_string).collect())
            .unwrap_or_default(),
        base,
        build_args: definition
            .map(|m| m.build_args.keys().cloned().collect())
            .unwrap_or_default(),
        source,
        upstreams: made_from
            .as_ref()
            .map(|m| m.upstreams.clone())
            .unwrap_or_default(),
        contexts: made_from.map(|m| m.contexts).unwrap_or_default(),
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

/// The base the build's row names (the image id it was built FROM), by the ref and manifest
/// digest that base's own build was published as, else the ref and manifest this machine pulled
/// it as after verifying it (a base the registry vouched for); a ref's tag is never looked up (it
/// says what the registry holds now, not what was built from). Without a row, the module's
/// declared base.
fn base_dependency(
    mesh: &Mesh,
    module: &str,
    build: Option<&BuildRow>,
    emitter: &Emitter,
) -> Option<BaseDependency> {
    let declared = mesh
        .modules
        .iter()
        .find(|m| m.name == module)?
        .base
        .clone()?;
    let base = build
        .and_then(|b| b.base_module.clone())
        .unwrap_or(declared);
    let id = build.and_then(|b| b.base_digest.as_deref());
    let of_base = id.and_then(|id| emitter.build_of(id));
    let published = of_base
        .as_ref()
        .and_then(|b| Some((b.reference.clone()?, b.published_digest.clone()?)))
        .or_else(|| id.and_then(|id| emitter.verified_pull_of(id)));
    let (uri, digest) = match published {
        Some((uri, digest)) => (Some(uri), Some(digest)),
        None => (of_base.and_then(|b| b.reference), None),
    };
    Some(BaseDependency {
        uri: uri.unwrap_or_else(|| format!("module:{base}")),
        module: base,
        digest,
    })
}

/// The git commit the module's context came from, as the build's row says it.
fn source_dependency(
    mesh: &Mesh,
    module: &str,
    build: Option<&BuildRow>,
) -> Option<SourceDependency> {
    let build = build?;
    let commit = build.commit.clone()?;
    let context = mesh
        .modules
        .iter()
        .find(|m| m.name == module)
        .map_or(mesh.root.clone(), |m| m.context.clone());
    let remote = crate::backends::git::revision(&context).source;
    Some(SourceDependency {
        uri: match remote {
            Some(remote) => format!("git+{remote}"),
            None => format!("git+file://{}", mesh.root.display()),
        },
        commit,
        dirty: build.dirty,
    })
}
