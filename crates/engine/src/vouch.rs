//! The registry as the third voucher: what the mesh's registry holds under the refs the record and
//! the host left to build, asked concurrently (bounded), once per ref per converge. Every fault
//! (down, timeouts, a refused login, garbage) reads as "holds nothing", kept as the warning.
//! What a registry answer asks of the target (a pull where it needs the artifact) and `--publish`
//! are the seam's (`Target::fetch_vouched`, `Target::publish`).

use std::collections::HashMap;
use std::time::Duration;

use futures_util::StreamExt;
use serde::Serialize;

use crate::backends::credentials::{self, CredentialsError};
use crate::backends::registry::{RegistryClient, RegistryError, repository_in};
use crate::mesh::cosign::{SignatureVerdict, TrustedKey};
use crate::mesh::decide::RegistryAnswer;
use crate::mesh::model::{Mesh, TrustedBuilder};
use crate::mesh::provenance::Wanted;

/// One question's time limit: a registry that does not answer in time holds nothing, and the
/// module builds (the plan is not held for the client's default 30 s).
pub(crate) const QUESTION_TIMEOUT: Duration = Duration::from_secs(5);
/// Questions in flight at once.
pub const QUESTIONS_AT_ONCE: usize = 8;

/// Why the mesh's registry could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    #[error("the mesh names no registry, where signatures live")]
    NoRegistry,
    /// Docker's credentials for it could not be read.
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// The client for `registry`, with the credentials a push uses and [`QUESTION_TIMEOUT`].
async fn client_for(registry: &crate::mesh::model::Registry) -> Result<RegistryClient, AskError> {
    let creds = credentials::for_registry(&registry.host).await?;
    Ok(RegistryClient::new(registry, creds)?.with_timeout(QUESTION_TIMEOUT))
}

/// The mesh's registry, asked for refs; its answers kept by ref.
pub(crate) struct RegistryVoucher {
    host: String,
    /// Err: the client could not be made (its credentials unreadable): every answer is this failure.
    client: Result<RegistryClient, AskError>,
    answers: HashMap<String, RegistryAnswer>,
    /// The keys the mesh trusts: with any, each manifest found is judged by its signatures too
    /// (the `.sig` manifest and its payload: two more small reads).
    trust: Vec<TrustedKey>,
    /// What a trusted signature's provenance must say (builders, whether one is required here).
    provenance: ProvenancePolicy,
    /// Whether [`RegistryVoucher::warn_once`] gave the warning already.
    warned: bool,
}

impl RegistryVoucher {
    /// The voucher for `mesh`'s registry on `target`, with the credentials a push uses; None
    /// without a registry.
    pub(crate) async fn for_mesh(mesh: &Mesh, target: &str) -> Option<RegistryVoucher> {
        let registry = mesh.registry.as_ref()?;
        let client = client_for(registry).await;
        Some(RegistryVoucher {
            host: registry.host.clone(),
            client,
            answers: HashMap::new(),
            trust: mesh.signing.trust.clone(),
            provenance: ProvenancePolicy::of(mesh, target),
            warned: false,
        })
    }

    /// Whether `reference` was answered already.
    pub(crate) fn knows(&self, reference: &str) -> bool {
        self.answers.contains_key(reference)
    }

    /// The answer for `reference` (NotAsked until [`RegistryVoucher::ask`] asked it).
    pub(crate) fn answer(&self, reference: &str) -> RegistryAnswer {
        self.answers
            .get(reference)
            .cloned()
            .unwrap_or(RegistryAnswer::NotAsked)
    }

    /// The first fault met, for the warning shown once per converge.
    pub(crate) fn warning(&self) -> Option<String> {
        let mut faults: Vec<&String> = self
            .answers
            .values()
            .filter_map(|a| match a {
                RegistryAnswer::Failed { error, .. } => Some(error),
                _ => None,
            })
            .collect();
        faults.sort();
        faults.first().map(|error| {
            format!(
                "registry {} could not be asked ({error}): read as holding nothing, the modules it might have answered for are built",
                self.host
            )
        })
    }

    /// The warning, the first time it is asked for once there is one (a converge says it once).
    pub(crate) fn warn_once(&mut self) -> Option<String> {
        if self.warned {
            return None;
        }
        let warning = self.warning()?;
        self.warned = true;
        Some(warning)
    }

    /// Ask the registry for every ref of `refs` not answered yet, up to [`QUESTIONS_AT_ONCE`] at
    /// once; each with what a provenance must say of it.
    pub(crate) async fn ask(&mut self, refs: Vec<(String, Wanted)>) {
        let mut wanted: Vec<(String, Wanted)> =
            refs.into_iter().filter(|(r, _)| !self.knows(r)).collect();
        wanted.sort_by(|a, b| a.0.cmp(&b.0));
        wanted.dedup_by(|a, b| a.0 == b.0);
        if wanted.is_empty() {
            return;
        }
        let host = self.host.clone();
        let client = match &self.client {
            Ok(client) => client,
            Err(error) => {
                for (reference, _) in wanted {
                    let failed = RegistryAnswer::Failed {
                        registry: host.clone(),
                        error: error.to_string(),
                    };
                    self.answers.insert(reference, failed);
                }
                return;
            }
        };
        let trust = &self.trust;
        let policy = &self.provenance;
        let answers: Vec<(String, RegistryAnswer)> = futures_util::stream::iter(wanted)
            .map(|(reference, wanted)| {
                let host = host.clone();
                async move {
                    let asking = Asking {
                        client,
                        host: &host,
                        trust,
                        policy,
                    };
                    let answer = asking.ask(&reference, &wanted).await;
                    (reference, answer)
                }
            })
            .buffer_unordered(QUESTIONS_AT_ONCE)
            .collect()
            .await;
        self.answers.extend(answers);
    }
}

/// What a trusted signature's provenance must say: built by one of `builders` (empty: any; each
/// claimed only by the keys bound to it), and whether the target requires a provenance at all
/// (`require_provenance = true`).
#[derive(Debug, Clone, Default)]
pub(crate) struct ProvenancePolicy {
    pub builders: Vec<TrustedBuilder>,
    pub required: bool,
}

impl ProvenancePolicy {
    pub(crate) fn of(mesh: &Mesh, target: &str) -> ProvenancePolicy {
        ProvenancePolicy {
            builders: mesh.signing.trusted_builders.clone(),
            required: requires_provenance(mesh, target),
        }
    }

    /// A trusted signature's verdict once its provenance is judged against the ref being decided
    /// (`wanted`: meshtop's build type, its module, its inputs) and
    /// [`ProvenancePolicy::builders`].
    pub(crate) fn judge(
        &self,
        signed: SignatureVerdict,
        provenances: &[crate::mesh::provenance::ReadProvenance],
        wanted: &Wanted,
    ) -> SignatureVerdict {
        use crate::mesh::provenance::{ProvenanceVerdict, judge};
        match judge(provenances, wanted, &self.builders) {
            ProvenanceVerdict::Matches { .. } => signed,
            ProvenanceVerdict::Absent if !self.required => signed,
            ProvenanceVerdict::Absent => SignatureVerdict::NoProvenance,
            ProvenanceVerdict::OtherBuildType { names } => {
                SignatureVerdict::OtherBuildType { names }
            }
            ProvenanceVerdict::OtherModule { names } => SignatureVerdict::OtherModule { names },
            ProvenanceVerdict::OtherInputs { names } => SignatureVerdict::OtherInputs { names },
            ProvenanceVerdict::UntrustedBuilder { builder } => {
                SignatureVerdict::UntrustedBuilder { builder }
            }
            ProvenanceVerdict::UnboundBuilder { builder, key } => {
                SignatureVerdict::UnboundBuilder { builder, key }
            }
        }
    }
}

/// Whether `target` of `mesh` requires a trusted provenance (`require_provenance = true`).
pub(crate) fn requires_provenance(mesh: &Mesh, target: &str) -> bool {
    mesh.environments
        .iter()
        .any(|e| e.name == target && e.require_provenance)
}

/// One question to the registry: the client, its host, what the mesh trusts and what a
/// provenance must say.
struct Asking<'a> {
    client: &'a RegistryClient,
    host: &'a str,
    trust: &'a [TrustedKey],
    policy: &'a ProvenancePolicy,
}

impl Asking<'_> {
    /// What the registry holds under `reference` and, with `trust`, what its signatures say of
    /// the manifest digest the ref resolves to now, and what the provenance a trusted key signed
    /// says of it against `wanted` (one more read: the `.att` manifest, which embeds meshtop's
    /// envelopes). A fault anywhere reads as "holds nothing" (said).
    async fn ask(&self, reference: &str, wanted: &Wanted) -> RegistryAnswer {
        let Asking {
            client,
            host,
            trust,
            policy,
        } = *self;
        let registry = host.to_string();
        let (path, tag) = repository_in(host, reference);
        let image = match client.image(path, tag).await {
            Ok(Some(image)) => image,
            Ok(None) => return RegistryAnswer::Absent { registry },
            Err(error) => {
                return RegistryAnswer::Failed {
                    registry,
                    error: error.to_string(),
                };
            }
        };
        let signature = if trust.is_empty() {
            SignatureVerdict::Unverified
        } else {
            match client.signature_verdict(path, &image.manifest, trust).await {
                Ok(verdict) => verdict,
                Err(error) => {
                    return RegistryAnswer::Failed {
                        registry,
                        error: format!("its signatures could not be read: {error}"),
                    };
                }
            }
        };
        let signature = match signature {
            SignatureVerdict::Trusted { .. } => {
                match client.provenance(path, &image.manifest, trust).await {
                    Ok(read) => policy.judge(signature, &read, wanted),
                    Err(error) => {
                        return RegistryAnswer::Failed {
                            registry,
                            error: format!("its provenance could not be read: {error}"),
                        };
                    }
                }
            }
            other => other,
        };
        RegistryAnswer::Holds {
            registry,
            image,
            signature,
        }
    }
}

/// What the registry says of one recorded artifact's signatures: the manifest that carries it (None:
/// the registry holds no manifest of this artifact) and the verdict of its signatures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactSignature {
    pub manifest: Option<String>,
    pub verdict: SignatureVerdict,
}

impl ArtifactSignature {
    pub fn trusted(&self) -> bool {
        matches!(self.verdict, SignatureVerdict::Trusted { .. })
    }

    /// Why it is not trusted, in words (or whom it is signed by).
    pub fn words(&self) -> String {
        match &self.manifest {
            None => "the registry holds no manifest of this artifact, so no signature".into(),
            Some(manifest) => format!("manifest {manifest}: {}", self.verdict.words()),
        }
    }
}

/// Whether a key `mesh` trusts signed `entry`'s artifact. Each manifest that may carry it is judged
/// only when it is that very artifact: the one the record names (pushed or verified when stamped),
/// the one its build `published`, the one its ref resolves to now; a manifest whose config is the
/// artifact, or whose own digest is it (what a pod pulled from a registry reports, an index).
/// Err: the registry could not be asked (the caller refuses: this answer decides).
pub async fn artifact_signature(
    mesh: &Mesh,
    entry: &crate::mesh::model::RecordEntry,
    published: Option<&str>,
) -> Result<ArtifactSignature, AskError> {
    let registry = mesh.registry.as_ref().ok_or(AskError::NoRegistry)?;
    let client = client_for(registry).await?;
    let (repository, tag) = repository_in(&registry.host, &entry.reference);
    let mut candidates: Vec<String> = entry.manifest.iter().cloned().collect();
    candidates.extend(published.map(str::to_string));
    if let crate::backends::registry::Published::Present { digest } =
        client.manifest(repository, tag).await?
    {
        candidates.push(digest);
    }
    // A digest that is a manifest itself (what a pod pulled reports, an index) is its own
    // candidate, asked last: an image id is no manifest, and a registry may answer that with an
    // error (distribution: 500) rather than a 404.
    candidates.push(entry.digest.clone());
    let mut refused: Option<ArtifactSignature> = None;
    let mut seen = std::collections::BTreeSet::new();
    for manifest in candidates {
        if !seen.insert(manifest.clone()) {
            continue;
        }
        if !is_the_artifact(&client, repository, &manifest, &entry.digest).await? {
            continue;
        }
        let verdict = client
            .signature_verdict(repository, &manifest, &mesh.signing.trust)
            .await?;
        let answer = ArtifactSignature {
            manifest: Some(manifest),
            verdict,
        };
        if answer.trusted() {
            return Ok(answer);
        }
        refused.get_or_insert(answer);
    }
    Ok(refused.unwrap_or(ArtifactSignature {
        manifest: None,
        verdict: SignatureVerdict::Unsigned,
    }))
}

/// Whether `manifest` in `repository` is the artifact `digest`: its config is the image, or it is
/// the artifact itself (an index, what a pod reports). The one rule the signature and the
/// provenance of a recorded artifact are read under. The artifact asked as a manifest may be an
/// image id, which a registry may answer with an error (distribution: 500) rather than a 404.
async fn is_the_artifact(
    client: &RegistryClient,
    repository: &str,
    manifest: &str,
    digest: &str,
) -> Result<bool, AskError> {
    let names = match client.artifact_of(repository, manifest).await {
        Ok(names) => names,
        Err(_) if manifest == digest => None,
        Err(error) => return Err(error.into()),
    };
    Ok(names.as_deref() == Some(digest) || (names.is_some() && manifest == digest))
}

/// What the signed provenance of a recorded artifact says: the manifest it was read for, and the
/// provenances a trusted key signed for it (empty: none).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArtifactProvenance {
    pub manifest: String,
    pub provenances: Vec<crate::mesh::provenance::ReadProvenance>,
    /// Envelopes under its `.att` tag that no trusted key signed for this manifest (or that are
    /// no SLSA v1 provenance): present, but they say nothing here.
    pub unverified: usize,
}

/// The provenance of `entry`'s artifact in the mesh's registry: the first manifest that carries
/// it (the one the record names, the one its ref resolves to, the artifact itself when it is a
/// manifest) and what its `.att` holds, verified against `trust`. None: the registry holds no
/// manifest of this artifact.
pub async fn artifact_provenance(
    mesh: &Mesh,
    entry: &crate::mesh::model::RecordEntry,
) -> Result<Option<ArtifactProvenance>, AskError> {
    let registry = mesh.registry.as_ref().ok_or(AskError::NoRegistry)?;
    let client = client_for(registry).await?;
    let (repository, tag) = repository_in(&registry.host, &entry.reference);
    let mut candidates: Vec<String> = entry.manifest.iter().cloned().collect();
    if let crate::backends::registry::Published::Present { digest } =
        client.manifest(repository, tag).await?
    {
        candidates.push(digest);
    }
    candidates.push(entry.digest.clone());
    let mut seen = std::collections::BTreeSet::new();
    for manifest in candidates {
        if !seen.insert(manifest.clone()) {
            continue;
        }
        if !is_the_artifact(&client, repository, &manifest, &entry.digest).await? {
            continue;
        }
        let envelopes = client.attestations(repository, &manifest).await?;
        let provenances =
            crate::mesh::provenance::verified_for(&manifest, &envelopes, &mesh.signing.trust);
        return Ok(Some(ArtifactProvenance {
            unverified: envelopes.len().saturating_sub(provenances.len()),
            manifest,
            provenances,
        }));
    }
    Ok(None)
}

/// The signed provenance of the artifact `digest` a machine runs (the record's entry when it
/// names that artifact: its ref and verified manifest; else the ref the machine's `image` names):
/// what `meshtop status` and the dashboard's BUILT BY answer where this machine has no build row.
/// Ok(None): the mesh trusts no key or names no registry, the machine's image names no ref, or no
/// provenance a trusted key signed for that very artifact is there. Err: the registry could not be
/// asked.
pub async fn running_provenance(
    mesh: &Mesh,
    recorded: Option<crate::mesh::model::RecordEntry>,
    image: &str,
    digest: &str,
) -> Result<Option<ArtifactProvenance>, AskError> {
    if mesh.signing.trust.is_empty() || mesh.registry.is_none() {
        return Ok(None);
    }
    let entry = match recorded.filter(|e| e.digest == digest) {
        Some(entry) => entry,
        None if image.starts_with("sha256:") => return Ok(None),
        None => {
            let reference = image.split('@').next().unwrap_or_default();
            crate::mesh::model::RecordEntry::new(reference.to_string(), digest.to_string())
        }
    };
    Ok(artifact_provenance(mesh, &entry)
        .await?
        .filter(|f| !f.provenances.is_empty()))
}

/// The provenances a trusted key signed for manifest `digest` of one of `modules`' repositories
/// in the mesh's registry (`registry/mesh/module`), asked a few at once: the first module whose
/// repository holds one, and what it says. None: no such provenance.
pub async fn provenance_of_manifest(
    mesh: &Mesh,
    modules: &[String],
    digest: &str,
) -> Result<Option<crate::mesh::provenance::ReadProvenance>, AskError> {
    let registry = mesh.registry.as_ref().ok_or(AskError::NoRegistry)?;
    let client = client_for(registry).await?;
    let client = &client;
    let found: Vec<Option<crate::mesh::provenance::ReadProvenance>> =
        futures_util::stream::iter(modules.iter())
            .map(|module| async move {
                let repository = format!("{}/{module}", mesh.name);
                client
                    .provenance(&repository, digest, &mesh.signing.trust)
                    .await
                    .ok()
                    .and_then(|read| read.into_iter().next())
            })
            .buffered(QUESTIONS_AT_ONCE)
            .collect()
            .await;
    Ok(found.into_iter().flatten().next())
}

/// An artifact that may not move a machine of a `require_signed` (or `require_provenance`)
/// target; boxed, as the errors that carry it stay small.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.0.text())]
pub struct Unsigned(pub Box<Refused>);

/// What [`Unsigned`] says: the module, its artifact, the target and why.
#[derive(Debug)]
pub struct Refused {
    pub module: String,
    /// `ref@short digest`.
    pub artifact: String,
    pub reference: String,
    pub target: String,
    pub why: String,
    /// Which requirement refused it.
    pub requirement: Requirement,
}

/// What a target requires of every artifact that moves a machine there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// `require_signed = true`: a signature by a trusted key.
    Signature,
    /// `require_provenance = true`: a provenance a trusted key signed, naming the ref's inputs
    /// and (with `trusted_builders`) a trusted builder.
    Provenance,
}

impl Refused {
    fn text(&self) -> String {
        let Refused {
            module,
            artifact,
            reference,
            target,
            why,
            requirement,
        } = self;
        match requirement {
            Requirement::Signature => format!(
                "target {target} requires signed artifacts (require_signed = true): module {module}'s artifact {artifact} carries no signature by a key the mesh trusts ({why}); nothing was changed. Sign it where it is published (meshtop converge --publish --sign-key FILE, or cosign sign --key FILE {reference}@<manifest digest>)"
            ),
            Requirement::Provenance => format!(
                "target {target} requires a signed provenance (require_provenance = true): module {module}'s artifact {artifact} does not carry one that vouches ({why}); nothing was changed. Publish it where it is built (meshtop converge --publish --sign-key FILE attests it), or attach one: cosign attest --key FILE --type slsaprovenance1 --predicate FILE {reference}@<manifest digest>"
            ),
        }
    }
}

/// Whether `target` of `mesh` requires signed artifacts (`require_signed = true`).
pub(crate) fn requires_signed(mesh: &Mesh, target: &str) -> bool {
    mesh.environments
        .iter()
        .any(|e| e.name == target && e.require_signed)
}

/// On a `require_signed` target, every artifact that would move a machine there must carry a
/// signature by a key the mesh trusts; checked by every action that moves one (converge, send,
/// rollback, promote), under its hold, before anything is written. The target's own record's word
/// — the trusted key that signed its manifest when it was verified — answers without a call; else
/// the registry is asked (a registry that cannot be asked refuses: this answer decides what runs).
/// Another target's word is a claim: a promote passes its source's entries without `signed_by`.
/// Returns each entry as verified (its manifest and signer, for the record to keep).
pub(crate) async fn require_signed(
    mesh: &Mesh,
    target: &str,
    entries: Vec<(String, crate::mesh::model::RecordEntry)>,
    db: &std::sync::Mutex<crate::backends::state::StateDb>,
) -> Result<Vec<(String, crate::mesh::model::RecordEntry)>, Unsigned> {
    let attested = requires_provenance(mesh, target);
    if !requires_signed(mesh, target) && !attested {
        return Ok(entries);
    }
    let trusted = |key: &str| mesh.signing.trust.iter().any(|k| k.name == key);
    let mut verified = Vec::with_capacity(entries.len());
    for (module, entry) in entries {
        if entry.manifest.is_some() && entry.signed_by.as_deref().is_some_and(trusted) {
            if attested {
                check_provenance(mesh, target, &module, &entry).await?;
            }
            verified.push((module, entry));
            continue;
        }
        let published = crate::backends::state::locked(db)
            .ok()
            .and_then(|db| db.build_by_digest(&mesh.name, &entry.digest).ok().flatten())
            .and_then(|b| b.published_digest);
        let why = match artifact_signature(mesh, &entry, published.as_deref()).await {
            Ok(ArtifactSignature {
                manifest: Some(manifest),
                verdict: SignatureVerdict::Trusted { key },
            }) => {
                let entry = entry.with_manifest(Some(manifest), Some(key));
                if attested {
                    check_provenance(mesh, target, &module, &entry).await?;
                }
                verified.push((module, entry));
                continue;
            }
            Ok(signature) => signature.words(),
            Err(error) => format!("its signatures could not be read: {error}"),
        };
        return Err(Unsigned(Box::new(Refused {
            artifact: crate::mesh::environments::artifact_text(Some(&entry)),
            reference: entry.reference.clone(),
            target: target.to_string(),
            module,
            why,
            requirement: Requirement::Signature,
        })));
    }
    Ok(verified)
}

/// On a `require_provenance` target: the verified manifest of `entry` must carry a provenance a
/// trusted key signed of meshtop's build type, naming `module` and the inputs of the entry's ref
/// (its tag's hash, and the full digest the manifest's own inputs label says) and, with
/// `trusted_builders`, a trusted builder claimed by a key bound to it. Two small reads (the
/// image's config for its inputs label, the `.att` manifest); a registry that cannot be asked
/// refuses.
async fn check_provenance(
    mesh: &Mesh,
    target: &str,
    module: &str,
    entry: &crate::mesh::model::RecordEntry,
) -> Result<(), Unsigned> {
    let refuse = |why: String| {
        Unsigned(Box::new(Refused {
            artifact: crate::mesh::environments::artifact_text(Some(entry)),
            reference: entry.reference.clone(),
            target: target.to_string(),
            module: module.to_string(),
            why,
            requirement: Requirement::Provenance,
        }))
    };
    let Some(manifest) = entry.manifest.as_deref() else {
        return Err(refuse("no manifest of it is known".into()));
    };
    let asked = async {
        let registry = mesh.registry.as_ref().ok_or(AskError::NoRegistry)?;
        let client = client_for(registry).await?;
        let (repository, _) = repository_in(&registry.host, &entry.reference);
        let inputs = client
            .image(repository, manifest)
            .await?
            .and_then(|image| image.labels.get(crate::mesh::model::INPUTS_LABEL).cloned());
        let read = client
            .provenance(repository, manifest, &mesh.signing.trust)
            .await?;
        Ok::<_, AskError>((inputs, read))
    };
    let (inputs, read) = asked
        .await
        .map_err(|error| refuse(format!("its provenance could not be read: {error}")))?;
    let policy = ProvenancePolicy {
        builders: mesh.signing.trusted_builders.clone(),
        required: true,
    };
    let signed = SignatureVerdict::Trusted { key: String::new() };
    let wanted = Wanted::of_ref(module, &entry.reference, inputs.as_deref());
    match policy.judge(signed, &read, &wanted) {
        SignatureVerdict::Trusted { .. } => Ok(()),
        refused => Err(refuse(format!(
            "manifest {}: {}: {}",
            crate::mesh::text::short_id(manifest),
            refused.words(),
            crate::mesh::decide::refusal_detail(&refused)
        ))),
    }
}
