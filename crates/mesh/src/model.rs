//! The mesh as the rest of meshtop sees it, once `mesh.toml` was parsed and validated.
//! Plain data: no I/O here.

pub use super::platform::{KNOWN_ARCHES, Platform};
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The label meshtop stamps on every image it builds and looks for on machines.
pub const MODULE_LABEL: &str = "jr2.dev/module";
/// The label naming the mesh an image was built for.
pub const MESH_LABEL: &str = "jr2.dev/mesh";
/// The label carrying the full input digest of the ref an image was built under: the ref's 12 hex
/// characters are a name, this is the proof a registry answer is checked against.
pub const INPUTS_LABEL: &str = "jr2.dev/inputs";
/// The mark of a machine on the Docker target: a container label naming the machine, set when the
/// container is created (by meshtop for a declared machine, by hand with `--label` otherwise). Images
/// never carry it, so a builder's container (which inherits its image's labels) is never a machine.
pub const MACHINE_LABEL: &str = "jr2.dev/machine";
/// On a mesh with several docker targets (one host daemon): the container label naming the target
/// a machine runs on. A machine without it is the mesh's first docker target's (as before targets
/// had names).
pub const TARGET_LABEL: &str = "jr2.dev/target";

/// One validated mesh: its modules are sorted by (tier, name).
#[derive(Debug, Clone)]
pub struct Mesh {
    pub name: String,
    /// Absolute path of the mesh file.
    pub file: PathBuf,
    /// The repository the mesh lives in (git work tree holding the file, or the file's directory).
    /// No context may leave it.
    pub root: PathBuf,
    pub registry: Option<Registry>,
    /// Docker target: push each build to `registry` so that other machines reuse it (`publish =
    /// true` in [mesh], `meshtop converge --publish`, `MESHTOP_PUBLISH=1`); otherwise a Docker-target
    /// converge only reads the registry.
    pub publish: bool,
    /// How a module with several platforms builds (`multi_platform` in [mesh]).
    pub multi_platform: MultiPlatform,
    /// The keys whose signatures let the registry vouch, and the key a publishing converge signs with.
    pub signing: Signing,
    /// The targets of this mesh, by name (a mesh file's single `[target]` table is
    /// [`DEFAULT_TARGET`]; `[[target]]` tables name theirs). Every caller asks for the one it acts on.
    pub targets: BTreeMap<String, Target>,
    /// What each target adds beside its kind, in the order the mesh file declares them: the first
    /// is the one a command acts on when it names none. Empty for a mesh made by hand: then the
    /// targets' names in order stand for it ([`Mesh::target_names`]).
    pub environments: Vec<Environment>,
    pub modules: Vec<Module>,
    pub machines: Vec<MachineSpec>,
    /// Kubernetes: how long a roll-out may go without progress before it reads as failed
    /// (`rollout_deadline` in [target]); None: each workload's own `progressDeadlineSeconds`, else 600 s.
    pub rollout_deadline: Option<std::time::Duration>,
    /// The daemons that build (`[[builder]]`, in file order); empty: the local daemon alone
    /// ([`Mesh::builders`]).
    pub builders: Vec<super::builders::Builder>,
}

/// How a module with several platforms builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MultiPlatform {
    /// Each platform on a builder of the pool that builds it (natively or emulated), pushed by
    /// digest, and the image index written by meshtop.
    #[default]
    Pool,
    /// This machine's `docker buildx build --platform … --push` (`multi_platform = "buildx"`).
    Buildx,
}

/// What the mesh trusts and, for a converge that publishes, the key it signs with.
#[derive(Debug, Clone, Default)]
pub struct Signing {
    /// `trust = [...]` in [mesh]: with any, the registry vouches only for a manifest one of these
    /// keys signed (a cosign signature naming its exact digest).
    pub trust: Vec<crate::cosign::TrustedKey>,
    /// `--sign-key` / `MESHTOP_SIGNING_KEY` (never the mesh file, which is committed): signs every
    /// artifact a converge pushes.
    pub key: Option<crate::cosign::SigningKey>,
    /// `trusted_builders = [...]` in [mesh]: the builder ids whose provenance lets the registry
    /// vouch, each with the keys that may claim it (empty: any builder a trusted key attested).
    pub trusted_builders: Vec<TrustedBuilder>,
    /// `builder_id = "…"` in [mesh]: the builder id this mesh's provenance names (else
    /// `MESHTOP_BUILDER_ID`, else `meshtop://host/<hostname>`).
    pub builder_id: Option<String>,
}

/// A builder id the mesh trusts, bound to the keys allowed to claim it: a provenance naming `id`
/// vouches only when one of `keys` signed it. A builder id is a word the signer writes (its mesh
/// file or `MESHTOP_BUILDER_ID`), so it means something only tied to a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedBuilder {
    pub id: String,
    /// The trust paths (as `trust` writes them) that may claim `id`; None: any key of `trust`
    /// (the plain-string form `trusted_builders = ["id"]`).
    pub keys: Option<Vec<String>>,
}

impl TrustedBuilder {
    /// Whether a provenance signed by `key` may name this builder.
    pub(crate) fn claimable_by(&self, key: &str) -> bool {
        self.keys
            .as_ref()
            .is_none_or(|keys| keys.iter().any(|k| k == key))
    }
}

/// The name of a mesh file's single `[target]` table (and of the embedded Docker default).
pub const DEFAULT_TARGET: &str = "default";

/// The targets of a mesh that has one: `target`, named [`DEFAULT_TARGET`].
pub fn single_target(target: Target) -> BTreeMap<String, Target> {
    BTreeMap::from([(DEFAULT_TARGET.to_string(), target)])
}

/// A target as one environment beside the others: what the mesh file adds beside its kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Environment {
    pub name: String,
    /// The target whose recorded artifacts this one takes by `meshtop promote` (`promote_from`).
    pub promote_from: Option<String>,
    /// `policy = "record"`: every module's machines there move only when a person sends or
    /// promotes (None: each module's own policy).
    pub policy: Option<Policy>,
    /// Declared by a `[[target]]` table: it always acts where it names (its context and namespace),
    /// never where `--context` / `--namespace` or the kubeconfig's current context point.
    pub named: bool,
    /// Kubernetes: how long a roll-out may go without progress (`rollout_deadline`).
    pub rollout_deadline: Option<std::time::Duration>,
    /// 1-based line of its table in the mesh file (0: none).
    pub line: usize,
    /// `require_signed = true`: a promote here refuses an artifact no trusted key signed.
    pub require_signed: bool,
    /// `require_provenance = true`: nothing reaches a machine here without a trusted provenance
    /// naming its inputs.
    pub require_provenance: bool,
}

impl Environment {
    /// The embedded default: the mesh file declares no target.
    pub fn default_one() -> Environment {
        Environment {
            name: DEFAULT_TARGET.to_string(),
            promote_from: None,
            policy: None,
            named: false,
            rollout_deadline: None,
            line: 0,
            require_signed: false,
            require_provenance: false,
        }
    }
}

impl Mesh {
    /// The builders of this mesh: those it declares, else the local daemon alone.
    pub fn builders(&self) -> Vec<super::builders::Builder> {
        if self.builders.is_empty() {
            return vec![super::builders::Builder::local()];
        }
        self.builders.clone()
    }

    /// The target named `name`, if the mesh names it.
    pub fn target(&self, name: &str) -> Option<&Target> {
        self.targets.get(name)
    }

    /// The target a command acts on when it names none: the first the mesh file declares, else the
    /// embedded default (the host daemon) for a mesh made by hand without one.
    pub fn default_target(&self) -> &Target {
        const HOST: Target = Target::Docker;
        self.target(self.first_target()).unwrap_or(&HOST)
    }

    /// The name of the target a command acts on when it names none: the first declared.
    pub fn first_target(&self) -> &str {
        match self.environments.first() {
            Some(first) => &first.name,
            None => self
                .targets
                .keys()
                .next()
                .map_or(DEFAULT_TARGET, String::as_str),
        }
    }

    /// The targets' names in the order the mesh file declares them.
    pub fn target_names(&self) -> Vec<&str> {
        if self.environments.is_empty() {
            return self.targets.keys().map(String::as_str).collect();
        }
        self.environments.iter().map(|e| e.name.as_str()).collect()
    }

    /// What the mesh file adds to target `name` beside its kind.
    pub fn environment(&self, name: &str) -> Option<&Environment> {
        self.environments.iter().find(|e| e.name == name)
    }

    /// Whether the mesh names its targets (`[[target]]`): each acts where it names, and a command
    /// may not point one elsewhere with `--context` / `--namespace`.
    pub fn names_targets(&self) -> bool {
        self.environments.iter().any(|e| e.named)
    }

    /// The chain of `promote_from` ending at `to`, source first (`dev → staging → prod` as names);
    /// stops at a target named twice (the reader refuses cycles).
    pub fn promote_chain(&self, to: &str) -> Vec<String> {
        let mut chain = vec![to.to_string()];
        let mut at = to;
        while let Some(from) = self.environment(at).and_then(|e| e.promote_from.as_deref()) {
            if chain.iter().any(|c| c == from) {
                break;
            }
            chain.push(from.to_string());
            at = from;
        }
        chain.reverse();
        chain
    }

    /// The mesh as target `name` sees it: each module's policy under the target's override, and
    /// only the declared machines that are the target's.
    pub fn on_target(&self, name: &str) -> Mesh {
        let mut mesh = self.clone();
        if let Some(policy) = self.environment(name).and_then(|e| e.policy) {
            for module in &mut mesh.modules {
                module.policy = policy;
            }
        }
        mesh.machines.retain(|m| m.target == name);
        if let Some(deadline) = self.environment(name).and_then(|e| e.rollout_deadline) {
            mesh.rollout_deadline = Some(deadline);
        }
        mesh
    }

    pub fn module(&self, name: &str) -> Option<&Module> {
        self.modules.iter().find(|m| m.name == name)
    }

    /// Module names per tier, tier 0 first, names sorted within a tier.
    pub fn tiers(&self) -> Vec<Vec<String>> {
        let mut tiers: Vec<Vec<String>> = Vec::new();
        for module in &self.modules {
            let tier = module.tier as usize;
            while tiers.len() <= tier {
                tiers.push(Vec::new());
            }
            tiers[tier].push(module.name.clone());
        }
        for names in &mut tiers {
            names.sort();
        }
        tiers
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registry {
    /// `host[:port]`, no scheme.
    pub host: String,
    /// Plain HTTP allowed (loopback registries are always allowed plain HTTP).
    pub insecure: bool,
}

/// A target as the mesh file declares it (its kind and settings); `converge::targets` connects it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Target {
    Docker,
    Kubernetes {
        namespace: String,
        context: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Policy {
    /// A converge sends new artifacts to the module's machines.
    Rollout,
    /// A converge records; machines stay behind (held) until someone sends.
    Record,
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Policy::Rollout => "rollout",
            Policy::Record => "record",
        })
    }
}

#[derive(Debug, Clone)]
pub struct Module {
    pub name: String,
    /// Absolute path of the build context (inside `Mesh::root`).
    pub context: PathBuf,
    /// The Dockerfile, relative to the context (default `Dockerfile`).
    pub dockerfile: String,
    /// The Dockerfile stage to build (`target`, as compose's and bake's); `None`: the last stage.
    pub target: Option<String>,
    /// The module this one builds FROM, by module name.
    pub base: Option<String>,
    /// Named contexts: a name the Dockerfile writes (`FROM lib`, `COPY --from=lib`) → the mesh
    /// module whose artifact it names, as bake's `contexts = { lib = "target:lib" }`.
    pub contexts: BTreeMap<String, String>,
    pub policy: Policy,
    /// Resolved platforms: the module's own, else the mesh's, else empty = the daemon's own.
    pub platforms: Vec<Platform>,
    /// Build args, sorted by name (BASE is added by meshtop, never declared).
    pub build_args: BTreeMap<String, String>,
    /// Secrets its build may mount (`RUN --mount=type=secret,id=…`): served to the builder for
    /// the build only, never part of the inputs, never logged or stored.
    pub secrets: Vec<BuildSecret>,
    /// Whether its build gets the ssh agent (`RUN --mount=type=ssh`).
    pub ssh: bool,
    pub tier: u32,
    /// 1-based line of the module's `[[module]]` table in the mesh file, for messages.
    pub line: usize,
    /// Kubernetes: when a back-off of the new pods fails a send of this module.
    pub backoff: Backoff,
    /// `max_unavailable` in its `[[module]]` table: how many of its machines a roll-out may move
    /// at once; None: all but one (at least one), see [`super::machine::side_by_side`].
    pub max_unavailable: Option<u32>,
}

impl Module {
    /// The modules this one builds on: its base, then its named contexts' modules (each once).
    pub fn builds_on(&self) -> Vec<&str> {
        let mut on: Vec<&str> = self.base.iter().map(String::as_str).collect();
        for module in self.contexts.values() {
            if !on.contains(&module.as_str()) {
                on.push(module);
            }
        }
        on
    }
}

/// When a new pod's back-off (`CrashLoopBackOff`, `ImagePullBackOff`, `CreateContainerConfigError`) fails
/// a roll-out: the kubelet retries each by itself, so a first sight is shown, never a verdict. Set per
/// module with `rollout_restarts` and `rollout_backoff` in its `[[module]]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// A container restarted this many times fails the roll-out.
    pub restarts: u32,
    /// The same back-off seen this long fails the roll-out.
    pub persists: std::time::Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            restarts: 3,
            persists: std::time::Duration::from_secs(60),
        }
    }
}

/// One secret of a module's build: the id its Dockerfile mounts, and where its value is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildSecret {
    pub id: String,
    pub source: SecretSource,
    /// 1-based line of its table in the mesh file (0: not from a file).
    pub line: usize,
}

/// Where a secret's value is read when a build starts (never earlier, never kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretSource {
    /// A file: the path as the mesh file writes it, and resolved (`~/` is the home directory, a
    /// relative path starts at the mesh file's directory).
    File { written: String, path: PathBuf },
    /// An environment variable of the process that builds.
    Env(String),
}

impl fmt::Display for SecretSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretSource::File { written, .. } => write!(f, "src = \"{written}\""),
            SecretSource::Env(name) => write!(f, "env = \"{name}\""),
        }
    }
}

/// A compose project's service, as compose's labels name it (`com.docker.compose.project`,
/// `com.docker.compose.service`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComposeService {
    pub project: String,
    pub service: String,
}

/// A machine the mesh file declares (a converge creates it when it does not exist yet, unless it
/// is a compose service's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineSpec {
    pub name: String,
    pub module: String,
    /// The target it runs on (a docker target of the mesh).
    pub target: String,
    /// The container's command; empty = the image's default.
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// `compose = { project, service }`: the machine is that compose service's containers, found
    /// by compose's labels; meshtop never makes them (`docker-compose up` does).
    pub compose: Option<ComposeService>,
    /// What it runs as, in compose's words (ports, volumes, networks, restart, healthcheck,
    /// stop_grace_period): used when meshtop makes it.
    pub service: super::service::Service,
}

/// What the target's record holds for one module: the ref, the artifact (image id), and — once it
/// was pushed or verified — the manifest digest every send deploys and who signed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordEntry {
    #[serde(rename = "ref")]
    pub reference: String,
    pub digest: String,
    /// The manifest digest the artifact was pushed as (by this machine) or verified as (hashed, its
    /// config the artifact, signed where the mesh trusts keys): what a send deploys
    /// (`ref@<manifest>`), never a tag looked up again. None: nothing was pushed (a Docker target
    /// without a registry), or a record from before meshtop kept it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest: Option<String>,
    /// The trusted key (its name in `trust`) whose signature named `manifest` when it was verified.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signed_by: Option<String>,
}

impl RecordEntry {
    /// An entry naming `reference` and its artifact `digest`, with no manifest known yet.
    pub fn new(reference: String, digest: String) -> RecordEntry {
        RecordEntry {
            reference,
            digest,
            manifest: None,
            signed_by: None,
        }
    }

    /// The same entry, naming the manifest it was pushed or verified as, and who signed it.
    pub fn with_manifest(self, manifest: Option<String>, signed_by: Option<String>) -> RecordEntry {
        RecordEntry {
            manifest,
            signed_by,
            ..self
        }
    }
}

/// The target's record: module → entry.
pub type Record = BTreeMap<String, RecordEntry>;
