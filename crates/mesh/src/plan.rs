//! A plan: every module decided, tier by tier, nothing built. The planner (`converge::plan`) makes
//! it; `meshtop plan`, a converge and the dashboard read it.

use serde::Serialize;

use super::decide::{Decision, RegistryHeld};
use super::manifest::Inputs;
use super::model::{Platform, Policy};
use super::refs::ImageRef;
use super::why::Change;

/// One module, decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedModule {
    pub name: String,
    pub tier: u32,
    pub base: Option<String>,
    pub policy: Policy,
    /// None while pending on its base's build, or refused.
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub decision: Decision,
    pub reason: String,
    /// The artifact the base resolved to (what `BASE` names), when known.
    pub base_artifact: Option<String>,
    /// Each named context (the name its Dockerfile writes) → its module's artifact.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub contexts: std::collections::BTreeMap<String, String>,
    /// The modules it builds on: its base, then its named contexts' modules.
    #[serde(skip)]
    pub builds_on: Vec<String>,
    /// The artifact that vouched (record digest or host image id).
    pub artifact: Option<String>,
    /// What the registry held under the ref with meshtop's labels for its inputs, and what its
    /// signatures say (`trusted`, `unsigned`, `untrusted_key`, `other_digest`, `unverified`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry_held: Option<RegistryHeld>,
    /// One line: why the address is what it is.
    pub why: String,
    pub changes: Vec<Change>,
    pub multi_platform: bool,
    /// The resolved platforms the address was computed for.
    #[serde(skip)]
    pub platforms: Vec<Platform>,
    #[serde(skip)]
    pub inputs: Option<Inputs>,
    #[serde(skip)]
    pub image_ref: Option<ImageRef>,
}

/// The dry run: every selected module, tier by tier, nothing built.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub mesh: String,
    /// The target planned for, by name (`default` for a mesh file's single `[target]`).
    pub target: String,
    /// Its kind, in the target's word.
    pub target_kind: String,
    pub tiers: Vec<Vec<String>>,
    pub modules: Vec<PlannedModule>,
    /// The host's listing error, when it could not answer.
    pub host_error: Option<String>,
    /// Why the mesh's registry could not be asked, when it could not (read as holding nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registry_error: Option<String>,
    /// Each upstream this plan locked (resolved now and written to mesh.lock), said once.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub upstreams_locked: Vec<String>,
}
