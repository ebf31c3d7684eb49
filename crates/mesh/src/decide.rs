//! The skip decision (DESIGN.md, "Which record vouches"): a pure function over snapshots of the
//! sources. The planner asks the host lazily — only when [`needs_host`] says a record check missed —
//! and the registry only for what the record and the host left to build ([`needs_registry`]).

use std::collections::{BTreeSet, HashMap};
use std::fmt;

use serde::{Deserialize, Serialize};

use super::cosign::SignatureVerdict;
use super::model::{INPUTS_LABEL, MODULE_LABEL, Record};
use super::text::short_id;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// The target's record names this exact ref: skip the build and the delivery.
    Record,
    /// The host daemon holds a meshtop-labelled image tagged with the ref: skip the build, deliver.
    Host,
    /// The mesh's registry holds a manifest under this exact ref labelled by meshtop with the ref's
    /// full input digest: skip the build; pull it where the target needs it on the host.
    Registry,
    /// Nothing vouches: build and deliver.
    Build,
    /// `--force`: build and deliver whatever any record says.
    Forced,
    /// The base has no artifact in the mesh: nothing can be built.
    Refused,
    /// Rolled back by hand: keep the pinned artifact (no build, no delivery) until the module's own
    /// inputs differ from both sides', an unpin, or `--force` (see `mesh::pin`).
    Pinned,
}

impl Decision {
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Record => "record",
            Decision::Host => "host",
            Decision::Registry => "registry",
            Decision::Build => "build",
            Decision::Forced => "forced",
            Decision::Refused => "refused",
            Decision::Pinned => "pinned",
        }
    }

    /// The decision named by [`Decision::as_str`].
    pub fn parse(word: &str) -> Option<Decision> {
        [
            Decision::Record,
            Decision::Host,
            Decision::Registry,
            Decision::Build,
            Decision::Forced,
            Decision::Refused,
            Decision::Pinned,
        ]
        .into_iter()
        .find(|d| d.as_str() == word)
    }

    /// Whether a converge runs a build for this decision.
    pub fn builds(self) -> bool {
        matches!(self, Decision::Build | Decision::Forced)
    }

    /// Whether a converge delivers the artifact to the target.
    #[cfg(test)]
    pub(crate) fn delivers(self) -> bool {
        matches!(
            self,
            Decision::Host | Decision::Registry | Decision::Build | Decision::Forced
        )
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// One image the host daemon holds, as its listing gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostImage {
    /// The image id (`sha256:…`): the artifact.
    pub id: String,
    pub tags: Vec<String>,
    pub labels: HashMap<String, String>,
    /// The refs this machine vouches for it as (its build rows and verified pulls naming this id
    /// and that ref); None: not asked, as where the mesh trusts no key.
    #[serde(skip)]
    pub vouched_as: Option<BTreeSet<String>>,
}

impl HostImage {
    /// Who vouches for this image as `reference`: with `trust`, only a build row or a verified pull
    /// of this machine that names this id under this exact ref.
    pub(crate) fn origin_for(&self, reference: &str) -> HostOrigin {
        match &self.vouched_as {
            None => HostOrigin::Unchecked,
            Some(refs) if refs.contains(reference) => HostOrigin::Vouched,
            Some(_) => HostOrigin::Unknown,
        }
    }
}

/// Who can vouch for an image on the host daemon as one ref. Anyone who can reach the daemon can
/// build, tag and label an image as meshtop does, so with `trust` a label is no proof: only what
/// this machine's build records made under that ref, or what meshtop pulled under it after
/// verifying it, answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum HostOrigin {
    /// Not asked: the mesh trusts no key, so an image labelled by meshtop for this module and
    /// these inputs answers.
    #[default]
    Unchecked,
    /// Made under this ref by one of this machine's builds, or pulled under it by meshtop after
    /// verifying it.
    Vouched,
    /// Neither: it answers for nothing (said, and the module goes on to the registry or builds).
    Unknown,
}

/// Mark each of `images` with the refs this machine vouches for it as (`vouched`: (ref, image id)
/// of its build records and of what it pulled after verifying it): what the host answers with
/// `trust` set.
pub fn mark_origins(images: &mut [HostImage], vouched: &BTreeSet<(String, String)>) {
    for image in images {
        image.vouched_as = Some(
            vouched
                .iter()
                .filter(|(_, id)| *id == image.id)
                .map(|(reference, _)| reference.clone())
                .collect(),
        );
    }
}

/// What the host daemon answered, once per converge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostAnswer {
    /// Not asked (yet): every record check so far hit.
    NotAsked,
    /// The labelled images it holds.
    Holds(Vec<HostImage>),
    /// Its listing failed: reads as "holds nothing", the error is kept for display.
    Failed(String),
}

/// The meshtop-labelled image tagged exactly `reference` among `images`, if any (whether it
/// answers for a module is [`host_says`]'s). An image wearing the name without meshtop's label
/// never answers.
pub(crate) fn labelled_image_tagged<'a>(
    images: &'a [HostImage],
    reference: &str,
) -> Option<&'a HostImage> {
    images
        .iter()
        .filter(|image| image.labels.contains_key(MODULE_LABEL))
        .find(|image| image.tags.iter().any(|tag| tag == reference))
}

/// What the host holds under one module's ref.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostSays<'a> {
    /// No meshtop-labelled image wears the ref.
    Nothing,
    /// One does, labelled for this module and these inputs, and (with `trust`) vouched for as
    /// this ref: it answers.
    Answers(&'a HostImage),
    /// One wears the ref but is labelled for another module or other inputs: it answers for
    /// nothing (the words say why).
    OtherLabels(&'a HostImage),
    /// One wears the ref with the right labels, but with `trust` this machine neither built nor
    /// verified it under this ref.
    NotVouched(&'a HostImage),
}

/// What `images` hold for `module`'s `reference`: the one rule of the host voucher, the same
/// labels the registry voucher requires ([`labels_mismatch`]: the module label naming `module`,
/// the inputs label equal to `inputs`, the ref's full input digest) and, with `trust`, a build
/// row or verified pull of this machine naming this exact ref. `inputs` None: the caller (a
/// screen showing a plan it did not make) does not know them, and only the module is compared;
/// the decision always knows them ([`decide`] refuses a ref whose inputs it does not know).
pub fn host_says<'a>(
    images: &'a [HostImage],
    module: &str,
    reference: &str,
    inputs: Option<&str>,
) -> HostSays<'a> {
    let Some(image) = labelled_image_tagged(images, reference) else {
        return HostSays::Nothing;
    };
    let mismatch = match inputs {
        Some(_) => labels_mismatch(module, inputs, &image.labels),
        None => module_mismatch(module, &image.labels),
    };
    if mismatch.is_some() {
        return HostSays::OtherLabels(image);
    }
    match image.origin_for(reference) {
        HostOrigin::Unknown => HostSays::NotVouched(image),
        HostOrigin::Unchecked | HostOrigin::Vouched => HostSays::Answers(image),
    }
}

impl HostAnswer {
    /// What the host holds for `module`'s `reference` (nothing when it was not asked or failed).
    pub(crate) fn says(&self, module: &str, reference: &str, inputs: Option<&str>) -> HostSays<'_> {
        match self {
            HostAnswer::Holds(images) => host_says(images, module, reference, inputs),
            HostAnswer::NotAsked | HostAnswer::Failed(_) => HostSays::Nothing,
        }
    }
}

/// What the mesh's registry holds under one ref: the manifest's digest, the artifact (the image
/// config digest; for a multi-platform index, the index's digest) and the image config's labels.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegistryImage {
    pub manifest: String,
    pub artifact: String,
    pub labels: HashMap<String, String>,
}

/// What the registry answered for one module's ref.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegistryAnswer {
    /// The mesh has no registry, or the module was not asked (the record or the host answered).
    NotAsked,
    /// No manifest under the ref.
    Absent { registry: String },
    Holds {
        registry: String,
        image: RegistryImage,
        /// What its signatures say of its manifest digest (Unverified when the mesh trusts no key).
        signature: SignatureVerdict,
    },
    /// It could not be asked (down, timed out, refused the login, garbage): reads as "holds nothing".
    Failed { registry: String, error: String },
}

/// Where a module's ref stands when it is decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefState {
    /// The ref is known (the base's artifact, if any, is known).
    Known(String),
    /// The base is about to be built in this converge: the ref is known only after that build.
    Pending { base: String },
    /// The base has no artifact in the mesh: not in the record, not built in this converge.
    BaseMissing { base: String },
}

/// The question asked of the sources for one module.
#[derive(Debug, Clone)]
pub struct Question {
    pub module: String,
    pub reference: RefState,
    pub forced: bool,
    /// More than one platform: pushed straight to a registry, never in the daemon.
    pub multi_platform: bool,
    /// The full input digest the ref's 12 hex characters abbreviate (known with the ref): what a
    /// registry image's [`INPUTS_LABEL`] must equal.
    pub inputs: Option<String>,
}

/// What the registry held under a module's ref, labelled by meshtop for its inputs, and what its
/// signatures say of it: kept beside the reason so that the screen says a refusal (or that nothing
/// was verified) from data, never from the reason's words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RegistryHeld {
    pub registry: String,
    /// The manifest digest the ref resolved to.
    pub manifest: String,
    pub signature: SignatureVerdict,
}

impl RegistryHeld {
    /// Whether the registry held something and its signatures refused it.
    pub fn refused(&self) -> bool {
        !self.signature.vouches()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub decision: Decision,
    /// One line naming the record that vouched, or why none did.
    pub reason: String,
    /// The artifact the vouching source holds (record digest or host image id).
    pub artifact: Option<String>,
    /// What the registry held for this ref with meshtop's labels for its inputs (whether it
    /// vouched or its signatures refused it); None when it was not asked or held nothing such.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry: Option<RegistryHeld>,
}

/// Whether deciding `question` needs the host's answer (the record check missed).
pub fn needs_host(question: &Question, record: &Record) -> bool {
    match &question.reference {
        RefState::Known(reference) => {
            !question.forced
                && !question.multi_platform
                && record_names(record, &question.module, reference).is_none()
        }
        RefState::Pending { .. } | RefState::BaseMissing { .. } => false,
    }
}

fn record_names<'a>(record: &'a Record, module: &str, reference: &str) -> Option<&'a str> {
    record
        .get(module)
        .filter(|entry| entry.reference == reference)
        .map(|entry| entry.digest.as_str())
}

/// The reason a record hit is rebuilt on the Docker target (where the host is the target).
pub(crate) const GONE_FROM_TARGET: &str = "the record's artifact is gone from the target";

/// Whether the host, asked, no longer holds the artifact a `record` verdict vouches for. Only
/// meaningful where the host is the target (Docker, one platform); a failed or missing listing
/// never says gone.
pub fn gone_from_host(verdict: &Verdict, host: &HostAnswer) -> bool {
    let (Decision::Record, Some(artifact), HostAnswer::Holds(images)) =
        (verdict.decision, &verdict.artifact, host)
    else {
        return false;
    };
    !images.iter().any(|image| &image.id == artifact)
}

/// A `record` verdict whose artifact the target lost becomes a build, saying so.
pub fn rebuild_gone(verdict: &Verdict, record_source: &str) -> Verdict {
    Verdict {
        decision: Decision::Build,
        reason: format!(
            "{GONE_FROM_TARGET}: {record_source} names this ref as {}, which the host daemon no longer holds",
            verdict
                .artifact
                .as_deref()
                .map(short_id)
                .unwrap_or_default()
        ),
        artifact: None,
        registry: None,
    }
}

/// Whether deciding `question` needs the registry's answer: the record and the host (as answered)
/// leave a build, and the ref is known.
pub fn needs_registry(question: &Question, record: &Record, host: &HostAnswer) -> bool {
    matches!(question.reference, RefState::Known(_))
        && question.inputs.is_some()
        && decide(question, record, host, "").decision == Decision::Build
}

/// Why `image` does not answer for `question`, or None when it does: [`labels_mismatch`].
pub(crate) fn registry_mismatch(question: &Question, image: &RegistryImage) -> Option<String> {
    labels_mismatch(&question.module, question.inputs.as_deref(), &image.labels)
}

/// Why an image labelled `labels` is not `module`'s: meshtop's module label missing or naming
/// another module.
fn module_mismatch(module: &str, labels: &HashMap<String, String>) -> Option<String> {
    match labels.get(MODULE_LABEL) {
        None => Some("without meshtop's labels".into()),
        Some(labelled) if labelled != module => Some(format!("labelled for module {labelled}")),
        Some(_) => None,
    }
}

/// Why an image labelled `labels` does not answer for `module` built from `inputs` (the ref's
/// full input digest), or None when it does: meshtop's module label naming the module and the
/// inputs label equal to the full digest (the 12 hex characters of a tag are a name, not proof).
/// One rule for every voucher that reads an image's labels (the host, the registry). Unknown
/// inputs never match.
pub(crate) fn labels_mismatch(
    module: &str,
    inputs: Option<&str>,
    labels: &HashMap<String, String>,
) -> Option<String> {
    if let Some(why) = module_mismatch(module, labels) {
        return Some(why);
    }
    match (labels.get(INPUTS_LABEL), inputs) {
        (None, _) => Some(format!("without the label {INPUTS_LABEL}")),
        (Some(found), Some(wanted)) if found == wanted => None,
        (Some(found), _) => Some(format!(
            "built from other inputs ({INPUTS_LABEL} {})",
            found.chars().take(12).collect::<String>()
        )),
    }
}

/// [`decide_with_registry`], the registry not asked.
pub(crate) fn decide(
    question: &Question,
    record: &Record,
    host: &HostAnswer,
    record_source: &str,
) -> Verdict {
    decide_with_registry(
        question,
        record,
        host,
        &RegistryAnswer::NotAsked,
        record_source,
    )
}

/// Decide one module: `force → record → host → registry → build`. `record_source` names the record
/// in reasons (e.g. "the docker record").
pub fn decide_with_registry(
    question: &Question,
    record: &Record,
    host: &HostAnswer,
    registry: &RegistryAnswer,
    record_source: &str,
) -> Verdict {
    let verdict = decide_without_registry(question, record, host, record_source);
    if verdict.decision != Decision::Build || !matches!(question.reference, RefState::Known(_)) {
        return verdict;
    }
    let held =
        |registry: &str, what: String| format!("{}; registry {registry} {what}", verdict.reason);
    match registry {
        RegistryAnswer::NotAsked => verdict,
        RegistryAnswer::Absent { registry } => Verdict {
            reason: held(registry, "holds no manifest under this ref".into()),
            ..verdict
        },
        RegistryAnswer::Failed { registry, error } => Verdict {
            reason: held(
                registry,
                format!("could not answer ({error}), read as holding nothing"),
            ),
            ..verdict
        },
        RegistryAnswer::Holds {
            registry,
            image,
            signature,
        } => held_verdict(question, verdict, registry, image, signature),
    }
}

/// The verdict when the registry holds a manifest under the ref: it vouches with meshtop's labels
/// for these inputs and a signature the mesh accepts; else the build stands, saying why.
fn held_verdict(
    question: &Question,
    verdict: Verdict,
    registry: &str,
    image: &RegistryImage,
    signature: &SignatureVerdict,
) -> Verdict {
    let held = |what: String| format!("{}; registry {registry} {what}", verdict.reason);
    if let Some(why) = registry_mismatch(question, image) {
        return Verdict {
            reason: held(format!(
                "holds manifest {} under this ref {why}: it does not answer",
                short_id(&image.manifest)
            )),
            ..verdict
        };
    }
    let registry_held = Some(RegistryHeld {
        registry: registry.to_string(),
        manifest: image.manifest.clone(),
        signature: signature.clone(),
    });
    if !signature.vouches() {
        return Verdict {
            reason: held(format!(
                "holds manifest {} labelled by meshtop with these inputs, {}: {}; it does not vouch",
                short_id(&image.manifest),
                signature.words(),
                refusal_detail(signature)
            )),
            registry: registry_held,
            ..verdict
        };
    }
    Verdict {
        decision: Decision::Registry,
        reason: held(format!(
            "holds manifest {} labelled by meshtop with these inputs, {}",
            image.manifest,
            match signature {
                SignatureVerdict::Trusted { key } => format!("signed by {key}"),
                _ => "unverified (the mesh trusts no key)".into(),
            }
        )),
        artifact: Some(image.artifact.clone()),
        registry: registry_held,
    }
}

/// What a refused signature means, for the reason line and the detail pane (empty when it vouches).
pub fn refusal_detail(signature: &SignatureVerdict) -> String {
    match signature {
        SignatureVerdict::Unsigned => "no signature under its .sig tag".into(),
        SignatureVerdict::UntrustedKey => "no signature by a key the mesh trusts".into(),
        SignatureVerdict::OtherDigest { names } => {
            format!(
                "a trusted signature names {}, not this manifest",
                short_id(names)
            )
        }
        SignatureVerdict::OtherBuildType { names } => format!(
            "its signed provenance is of build type {names}, not meshtop's ({})",
            super::provenance::BUILD_TYPE
        ),
        SignatureVerdict::OtherModule { names } => {
            format!("its signed provenance is module {names}'s, not this ref's")
        }
        SignatureVerdict::OtherInputs { names } => format!(
            "its signed provenance names inputs {}, not this ref's",
            short_id(names)
        ),
        SignatureVerdict::UntrustedBuilder { builder } => {
            format!("its signed provenance names builder {builder}, not one of trusted_builders")
        }
        SignatureVerdict::UnboundBuilder { builder, key } => format!(
            "its signed provenance names builder {builder}, but signed by {key}, a key trusted_builders does not bind to it"
        ),
        SignatureVerdict::NoProvenance => {
            "no provenance signed by a trusted key under its .att tag (the target requires one)"
                .into()
        }
        SignatureVerdict::Unverified | SignatureVerdict::Trusted { .. } => String::new(),
    }
}

/// A verdict the registry had no part in.
fn verdict(decision: Decision, reason: String, artifact: Option<String>) -> Verdict {
    Verdict {
        decision,
        reason,
        artifact,
        registry: None,
    }
}

fn decide_without_registry(
    question: &Question,
    record: &Record,
    host: &HostAnswer,
    record_source: &str,
) -> Verdict {
    let reference = match &question.reference {
        RefState::BaseMissing { base } => {
            return verdict(
                Decision::Refused,
                format!(
                    "base {base} has no artifact (not in {record_source}, not built in this converge): converge {base} first"
                ),
                None,
            );
        }
        RefState::Pending { base } if question.forced => {
            return verdict(
                Decision::Forced,
                format!("forced; ref pending on the build of base {base}"),
                None,
            );
        }
        RefState::Pending { base } => {
            return verdict(
                Decision::Build,
                format!("ref pending: base {base} is built first in this converge"),
                None,
            );
        }
        RefState::Known(reference) => reference,
    };
    if question.forced {
        return verdict(
            Decision::Forced,
            "forced: build and deliver whatever any record says".into(),
            None,
        );
    }
    if let Some(digest) = record_names(record, &question.module, reference) {
        return verdict(
            Decision::Record,
            format!("{record_source} names this ref"),
            Some(digest.to_string()),
        );
    }
    let record_said = match record.get(&question.module) {
        Some(entry) => format!("{record_source} names {}", entry.reference),
        None => format!("{record_source} has no entry"),
    };
    if question.multi_platform {
        return verdict(
            Decision::Build,
            format!(
                "{record_said}; a multi-platform ref is never in the host daemon, so the host cannot answer"
            ),
            None,
        );
    }
    match host {
        HostAnswer::Failed(error) => verdict(
            Decision::Build,
            format!("{record_said}; the host could not answer ({error}), read as holding nothing"),
            None,
        ),
        HostAnswer::NotAsked => verdict(
            Decision::Build,
            format!("{record_said}; the host was not asked"),
            None,
        ),
        HostAnswer::Holds(_) => host_verdict(question, reference, host, &record_said),
    }
}

/// The verdict of a host that answered: the image tagged with the ref answers only for its own
/// module and inputs and, with `trust`, only as a ref this machine built or verified it under.
fn host_verdict(
    question: &Question,
    reference: &str,
    host: &HostAnswer,
    record_said: &str,
) -> Verdict {
    let Some(inputs) = question.inputs.as_deref() else {
        return verdict(
            Decision::Build,
            format!("{record_said}; the ref's inputs are not known, so no host image answers"),
            None,
        );
    };
    match host.says(&question.module, reference, Some(inputs)) {
        HostSays::OtherLabels(image) => verdict(
            Decision::Build,
            format!(
                "{record_said}; ✗ host image {} wears this ref {}: it does not answer",
                short_id(&image.id),
                labels_mismatch(&question.module, Some(inputs), &image.labels).unwrap_or_default()
            ),
            None,
        ),
        HostSays::NotVouched(image) => verdict(
            Decision::Build,
            format!(
                "{record_said}; ✗ host image {} not built here and unsigned as this ref: with trust set, only an image this machine built or pulled after verifying it under this ref answers",
                short_id(&image.id)
            ),
            None,
        ),
        HostSays::Answers(image) => verdict(
            Decision::Host,
            format!(
                "{record_said}; the host holds {} labelled by meshtop for this module and these inputs",
                short_id(&image.id)
            ),
            Some(image.id.clone()),
        ),
        HostSays::Nothing => verdict(
            Decision::Build,
            format!("{record_said}; the host holds no meshtop-labelled image with this tag"),
            None,
        ),
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
