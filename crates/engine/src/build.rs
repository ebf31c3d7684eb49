//! One build of a converge: recorded when it starts, the context tarred by the same walk that
//! computed the address, built on the daemon (its BuildKit, with the module's secrets served
//! through the build's session), recorded when it ends — failures too.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::converging::Converging;
use super::plan::PlannedModule;
use super::progress::{Emitter, Payload};
use super::sending::{TarSlot, context_for};
use super::targets::{Pushed, sign_pushed};
use crate::backends::buildx;
use crate::backends::credentials;
use crate::backends::daemon::build::{BuildRequest, LocalName, LocalNaming};
use crate::backends::daemon::session::SecretValues;
use crate::backends::daemon::{BuildEnd as DaemonBuildEnd, Daemon};
use crate::backends::git::{self, Revision};
use crate::backends::registry::{DOCKER_MANIFEST, IndexEntry, RegistryClient, repository_in};
use crate::backends::state::{BuildEnd, NewBuild, StateDb, StateError};
use crate::mesh::builds::BuildStatus;
use crate::mesh::decide::Decision;
use crate::mesh::model::{
    INPUTS_LABEL, MESH_LABEL, MODULE_LABEL, Mesh, Module, Platform, Registry,
};
use crate::mesh::refs::repository_of;
use crate::timefmt;
use crate::workspace::secrets;

/// How many lines of build output a failed build keeps.
pub const LOG_TAIL_LINES: usize = 50;

/// The last [`LOG_TAIL_LINES`] lines of a build's output, kept for its record.
#[derive(Default)]
struct LogTail(VecDeque<String>);

impl LogTail {
    fn push(&mut self, line: &str) {
        if self.0.len() == LOG_TAIL_LINES {
            self.0.pop_front();
        }
        self.0
            .push_back(crate::mesh::text::plain(line).into_owned());
    }

    fn text(&self) -> String {
        self.0.iter().cloned().collect::<Vec<_>>().join("\n")
    }
}

#[derive(Clone)]
pub struct BuildJob {
    pub module: Module,
    pub planned: PlannedModule,
    /// The target is delivered to by a push (the target's word): a multi-platform build can go there.
    pub pushes: bool,
}

pub struct Built {
    pub planned: PlannedModule,
    pub correlation_id: String,
    /// The image id, when the build succeeded.
    pub artifact: Option<String>,
    pub error: Option<String>,
    /// The manifest digest a build that pushed itself (buildx --push) published.
    pub published: Option<String>,
}

/// Where one build runs: the builder's daemon and name, the base as that builder reaches it, and
/// how long the builder may take.
pub struct BuildOn<'d> {
    /// None: a multi-platform module through the pool, whose platforms each build on a builder
    /// of their own (`platforms`).
    pub daemon: Option<&'d Daemon>,
    /// The pool's builder (None: the local daemon of a mesh without builders).
    pub builder: Option<&'d str>,
    /// `BASE` as this builder reaches the base (`registry/mesh/base@sha256:…`) when it does not
    /// hold the base's artifact; None: the artifact id, which the builder holds. Err: why the
    /// builder cannot reach the base (the build fails, its row says why).
    pub base: Result<Option<String>, super::error::BaseOutOfReach>,
    /// Each named context as this builder reaches its module's artifact, by the name the
    /// Dockerfile writes: as `base` (None: the builder holds the artifact; a name absent: the
    /// same). Err: why the builder cannot reach one.
    pub contexts: Result<BTreeMap<String, Option<String>>, super::error::BaseOutOfReach>,
    /// The build must end within this, or it reads as the builder gone (`MESHTOP_BUILD_DEADLINE`).
    pub deadline: std::time::Duration,
    /// A multi-platform module built through the pool: the slots its platforms take, each on a
    /// builder that builds it (Err: why it cannot build at all). None: one platform on `daemon`,
    /// or several through this machine's `docker buildx` (`multi_platform = "buildx"`).
    pub platforms: Option<Result<&'d dyn PlatformSlots, PlatformsUnbuilt>>,
}

/// How one platform's build ended, for the slot it held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartEnd {
    Built,
    /// Its own failure (a step, the push): the builder stays in rotation.
    Failed,
    /// The builder went away or did not end in time: out of rotation for a while.
    Gone(String),
}

/// The slots of a multi-platform module's platforms (`converge/place.rs` counts them): each
/// platform's build takes a slot of the builder it runs on, as any build does, so that the
/// platforms run at once where slots allow and another module's build waits for the slot.
#[async_trait::async_trait]
pub trait PlatformSlots: Send + Sync {
    /// A builder for `platform`, once one that builds it has a slot: held until [`give_back`].
    ///
    /// [`give_back`]: PlatformSlots::give_back
    async fn take(&self, platform: &Platform) -> Result<PlatformOn, PlatformsUnbuilt>;
    /// The build on `on` ended: its slot is free again (`Gone` takes the builder out of rotation).
    fn give_back(&self, on: &PlatformOn, end: PartEnd);
}

/// Why a multi-platform module's platforms cannot all be given a builder (its build fails with it).
#[derive(Debug, thiserror::Error)]
pub enum PlatformsUnbuilt {
    #[error(
        "module {module}: a multi-platform build pushes each platform and an image index to the mesh's registry, and the mesh has none: add registry = \"host:port\" to [mesh]"
    )]
    NoRegistry { module: String },
    /// `builders`: what each builder builds, for people.
    #[error("module {module}: no builder left builds {platform} ({builders})")]
    NoBuilder {
        module: String,
        platform: Platform,
        builders: String,
    },
    #[error("cannot build {platform}: {source}")]
    Host {
        platform: Platform,
        #[source]
        source: std::sync::Arc<crate::backends::daemon::DaemonError>,
    },
    /// The base out of a platform's builder's reach (`place.rs`, `base_for`).
    #[error(transparent)]
    Base(super::error::BaseOutOfReach),
    /// No builder could be given to the platform (every one that builds it is out).
    #[error("module {module}: {platform}: {why}")]
    NoSlot {
        module: String,
        platform: Platform,
        why: String,
    },
}

/// Why the image index of a multi-platform module could not be written.
#[derive(Debug, thiserror::Error)]
enum IndexError {
    #[error("the credentials for registry {registry}: {source}")]
    Credentials {
        registry: String,
        #[source]
        source: credentials::CredentialsError,
    },
    #[error("module {module}: writing its image index: {source}")]
    Write {
        module: String,
        #[source]
        source: crate::backends::registry::RegistryError,
    },
}

/// One platform of a multi-platform module and the builder that builds it.
pub struct PlatformOn {
    pub platform: Platform,
    pub builder: String,
    /// The builder runs it under emulation (not its own architecture).
    pub emulated: bool,
    pub daemon: Daemon,
    /// `BASE` as this builder reaches the base (None: the artifact id, which it holds).
    pub base: Option<String>,
    /// Where it is pushed by digest and the index is written.
    pub registry: Registry,
}

impl PlatformOn {
    /// `linux/arm64 on two (emulated)`.
    fn describe(&self) -> String {
        format!(
            "{} on {}{}",
            self.platform,
            self.builder,
            if self.emulated { " (emulated)" } else { "" }
        )
    }
}

pub use crate::backends::daemon::build::{DEFAULT_BUILD_DEADLINE, build_deadline};

/// What stops the whole converge (as opposed to one failed build).
pub enum BuildError {
    /// The build row could not be written: nothing is built silently.
    NoRecord(super::error::Unrecordable),
    /// The daemon went away mid-build.
    Daemon(String),
    /// The builder of one platform of a multi-platform module went away mid-build (or did not
    /// end in time): the module is retried once without it.
    PlatformGone { builder: String, message: String },
    /// The build ended but its end could not be written (e.g. a full disk): the message says
    /// what was built and that nothing was stamped.
    Unrecorded(String),
}

/// How a build's end is written when the first try fails: a few quick tries, then (the converge
/// fails, nothing is stamped) on in the background for as long as the process runs. A row the
/// process never completes is closed by the next open of the state (`StateDb::open`).
async fn finish_or_keep_trying(
    db: &Arc<Mutex<StateDb>>,
    id: &str,
    end: &BuildEnd,
    what: &str,
) -> Result<(), BuildError> {
    let write = |db: &Mutex<StateDb>| with_history(db, |h| h.finish_build(id, end).map(|_| ()));
    let mut last = String::new();
    for attempt in 0..3u64 {
        match write(db) {
            Ok(()) => return Ok(()),
            Err(error) => last = error.to_string(),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100 * (attempt + 1))).await;
    }
    let (db, id, end) = (db.clone(), id.to_string(), end.clone());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            let done = with_history(&db, |h| h.finish_build(&id, &end).map(|_| ()));
            if done.is_ok() {
                return;
            }
        }
    });
    Err(BuildError::Unrecorded(format!(
        "{what}; its record could not be written: {last}; nothing stamped"
    )))
}

fn with_history<T>(
    db: &Mutex<StateDb>,
    f: impl FnOnce(&StateDb) -> Result<T, StateError>,
) -> Result<T, StateError> {
    f(&*crate::backends::state::locked(db)?)
}

/// The builder a pooled multi-platform build names: `docker buildx` on the machine running meshtop.
pub const BUILDX_BUILDER: &str = "buildx (this machine)";

pub(crate) async fn build_module(
    job: BuildJob,
    cx: Converging<'_>,
    on: BuildOn<'_>,
) -> Result<Built, BuildError> {
    let (mesh, db, emitter) = (cx.mesh, cx.db, cx.emitter);
    let BuildJob {
        module,
        planned,
        pushes,
    } = job;
    let context = module.context.clone();
    let revision = tokio::task::spawn_blocking(move || git::revision(&context))
        .await
        .unwrap_or_default();
    // A multi-platform build runs through this machine's `docker buildx` (which has builders of its
    // own) wherever the pool placed it: its line and row say so, not a daemon that never saw it.
    // Through the pool, each platform is given its builder when one has a slot (the row then
    // names each).
    let through_pool = match &on.platforms {
        Some(Ok(_)) => Some(format!("the pool ({})", platforms_text(&planned))),
        _ => None,
    };
    let builder = match (&through_pool, on.builder) {
        (Some(list), _) => Some(list.as_str()),
        (None, Some(_)) if planned.multi_platform && on.platforms.is_none() => Some(BUILDX_BUILDER),
        (None, placed) => placed,
    };
    let run = Run::start(&module, planned, mesh, &revision, builder, db, emitter)?;
    if let Some(Err(why)) = &on.platforms {
        return run.failed(why, None);
    }
    let base = match &on.base {
        Ok(base) => base.clone(),
        Err(why) => return run.failed(why, None),
    };
    let contexts = match named_contexts(&on, &run.planned, &run.reference).await {
        Ok(contexts) => contexts,
        Err(why) => return run.failed(why, None),
    };
    // Read now, for this build only: never part of the inputs, never logged or stored.
    let served = match secrets::read(&module) {
        Ok(served) => served,
        Err(why) => return run.failed(why, None),
    };
    let multi_platform = run.planned.multi_platform;
    if let Some(Ok(slots)) = &on.platforms {
        let args = build_args(&module, &run.planned);
        let labels = labels(&module, mesh, &revision, &run.planned);
        let template = PlatformTemplate {
            module: &module,
            args,
            labels,
            secrets: SecretValues(served.values),
            ssh_agent: served.ssh_agent,
            deadline: on.deadline,
        };
        return run.on_platforms(mesh, template, *slots).await;
    }
    if multi_platform && let Err(why) = buildx_ready(&module, &run.planned, pushes).await {
        return run.failed(why, None);
    }
    let daemon = if multi_platform { None } else { on.daemon };
    let sent = context_for(daemon, &module, &run.planned, &contexts.images, db).await;
    let (tar, context) = match sent {
        Ok(sent) => sent,
        Err(why) => return run.failed(why, None),
    };
    let mut args = build_args(&module, &run.planned);
    if let Some(base) = base {
        args.insert("BASE".into(), base);
    }
    let request = BuildRequest {
        context,
        dockerfile: module.dockerfile.clone(),
        target: module.target.clone(),
        tag: run.reference.clone(),
        build_args: args,
        labels: labels(&module, mesh, &revision, &run.planned),
        no_cache: run.planned.decision == Decision::Forced,
        platforms: run
            .planned
            .platforms
            .iter()
            .map(ToString::to_string)
            .collect(),
        secrets: SecretValues(served.values),
        ssh_agent: served.ssh_agent,
        on_base: crate::workspace::lock_file::module_built_on_base(&module),
    };
    if multi_platform {
        run.on_buildx(mesh, request, tar).await
    } else {
        run.on_daemon(&on, request, tar, &contexts).await
    }
}

/// A module's named contexts as its builder reaches them: the name written into the Dockerfile it
/// is sent (`FROM lib` → that name), and the tags that must still name each artifact when the
/// build ends.
#[derive(Default)]
struct NamedContexts {
    images: BTreeMap<String, String>,
    /// (tag, artifact): names the daemon resolves by tag, checked again when the build ends.
    tags: Vec<(String, String)>,
}

/// Why a named context cannot be named to the builder (the build fails with it).
#[derive(Debug, thiserror::Error)]
enum ContextUnnamed {
    #[error(
        "module {module}: named contexts build for one platform on one daemon; this module builds for several ({platforms}): give it one platform, or build on its contexts by `base`"
    )]
    MultiPlatform { module: String, platforms: String },
    /// The pool could not bring a context's artifact to the builder (`BaseOutOfReach`, said).
    #[error("module {module}: named context: {why}")]
    OutOfReach { module: String, why: String },
    #[error(
        "module {module}: named context `{name}`: the artifact {} is not on the daemon at {endpoint}: converge the module it names first",
        crate::mesh::text::short_id(artifact)
    )]
    NotOnDaemon {
        module: String,
        name: String,
        artifact: String,
        endpoint: String,
    },
    #[error(
        "module {module}: named context `{name}`: the daemon at {endpoint} shows no tag on the artifact {}, and BuildKit finds an image by name only: converge the module it names again (it tags its artifact under its ref)",
        crate::mesh::text::short_id(artifact)
    )]
    Untagged {
        module: String,
        name: String,
        artifact: String,
        endpoint: String,
    },
    #[error("module {module}: named context `{name}`: asking the daemon: {source}")]
    Daemon {
        module: String,
        name: String,
        #[source]
        source: crate::backends::daemon::DaemonError,
    },
}

/// Each named context of `planned` as the builder of `on` reaches it: the name the pool pulled it
/// by (pinned by digest), else the name its daemon resolves to that very artifact
/// (`Daemon::local_name`, as the base's): a digest reference it recorded (pinned), else a tag
/// (never `building`, the tag this build lands under: anyone may have tagged another image so),
/// checked again when the build ends.
async fn named_contexts(
    on: &BuildOn<'_>,
    planned: &PlannedModule,
    building: &str,
) -> Result<NamedContexts, ContextUnnamed> {
    let mut named = NamedContexts::default();
    if planned.contexts.is_empty() {
        return Ok(named);
    }
    let module = planned.name.clone();
    let (Some(daemon), false) = (on.daemon, planned.multi_platform) else {
        return Err(ContextUnnamed::MultiPlatform {
            module,
            platforms: platforms_text(planned),
        });
    };
    let pulled = match &on.contexts {
        Ok(pulled) => pulled,
        Err(why) => {
            return Err(ContextUnnamed::OutOfReach {
                module,
                why: why.to_string(),
            });
        }
    };
    for (name, artifact) in &planned.contexts {
        if let Some(Some(image)) = pulled.get(name) {
            named.images.insert(name.clone(), image.clone());
            continue;
        }
        let endpoint = daemon.endpoint().to_string();
        let naming = daemon
            .local_name(artifact, building)
            .await
            .map_err(|source| ContextUnnamed::Daemon {
                module: module.clone(),
                name: name.clone(),
                source,
            })?;
        let (module, name, artifact) = (module.clone(), name.clone(), artifact.clone());
        match naming {
            LocalNaming::Named(LocalName::Pinned(pinned)) => {
                named.images.insert(name, pinned);
            }
            LocalNaming::Named(LocalName::Tagged(tag)) => {
                named.images.insert(name, tag.clone());
                named.tags.push((tag, artifact));
            }
            LocalNaming::Absent => {
                return Err(ContextUnnamed::NotOnDaemon {
                    module,
                    name,
                    artifact,
                    endpoint,
                });
            }
            LocalNaming::Untagged => {
                return Err(ContextUnnamed::Untagged {
                    module,
                    name,
                    artifact,
                    endpoint,
                });
            }
        }
    }
    Ok(named)
}

/// The first named context whose tag names another image now than when the build started.
async fn context_moved(daemon: &Daemon, contexts: &NamedContexts) -> Option<String> {
    for (tag, artifact) in &contexts.tags {
        let now = daemon.image_id(tag).await.ok().flatten();
        if now.as_deref() != Some(artifact.as_str()) {
            return Some(format!(
                "the named context's tag {tag} named {artifact} when the build started and {} when it ended: the build may be FROM another image; build again",
                now.as_deref().unwrap_or("nothing")
            ));
        }
    }
    None
}

/// Why a multi-platform build cannot run here (the build fails with it).
#[derive(Debug, thiserror::Error)]
enum NoMultiPlatform {
    #[error(
        "module {module}: a multi-platform build needs `docker buildx` and a registry to push to"
    )]
    NoPush { module: String },
    /// `platforms`: the module's, joined as the mesh file lists them.
    #[error(
        "module {module}: a multi-platform build ({platforms}) needs `docker buildx`, which does not work here ({why}): install the buildx plugin, or give the module one platform"
    )]
    NoBuildx {
        module: String,
        platforms: String,
        #[source]
        why: buildx::BuildxError,
    },
}

/// The module's platforms, as the mesh file lists them: `linux/amd64, linux/arm64`.
fn platforms_text(planned: &PlannedModule) -> String {
    planned
        .platforms
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a multi-platform build cannot run here, if it cannot.
async fn buildx_ready(
    module: &Module,
    planned: &PlannedModule,
    pushes: bool,
) -> Result<(), NoMultiPlatform> {
    if !pushes {
        return Err(NoMultiPlatform::NoPush {
            module: module.name.clone(),
        });
    }
    buildx::available()
        .await
        .map_err(|why| NoMultiPlatform::NoBuildx {
            module: module.name.clone(),
            platforms: platforms_text(planned),
            why,
        })
}

/// The module's build args, and `BASE` naming its base's artifact.
fn build_args(module: &Module, planned: &PlannedModule) -> HashMap<String, String> {
    let mut args: HashMap<String, String> = module.build_args.clone().into_iter().collect();
    if let Some(base) = &planned.base_artifact {
        args.insert("BASE".into(), base.clone());
    }
    args
}

/// meshtop's labels (module, mesh, the full input digest of the ref) and the OCI ones: build
/// labels, image metadata, never steps of the Dockerfile.
fn labels(
    module: &Module,
    mesh: &Mesh,
    revision: &Revision,
    planned: &PlannedModule,
) -> HashMap<String, String> {
    let mut labels = HashMap::from([
        (MODULE_LABEL.to_string(), module.name.clone()),
        (MESH_LABEL.to_string(), mesh.name.clone()),
    ]);
    if let Some(inputs) = &planned.inputs {
        labels.insert(INPUTS_LABEL.to_string(), inputs.digest.clone());
    }
    if let Some(commit) = &revision.commit {
        labels.insert("org.opencontainers.image.revision".into(), commit.clone());
    }
    if let Some(source) = &revision.source {
        labels.insert("org.opencontainers.image.source".into(), source.clone());
    }
    labels
}

/// One build attempt from its row's start to its end.
struct Run<'a> {
    module: String,
    mesh: &'a str,
    planned: PlannedModule,
    reference: String,
    correlation_id: String,
    db: &'a Arc<Mutex<StateDb>>,
    emitter: &'a Emitter,
}

impl<'a> Run<'a> {
    /// Write the build's row (nothing is built without one) and say it started.
    fn start(
        module: &Module,
        planned: PlannedModule,
        mesh: &'a Mesh,
        revision: &Revision,
        builder: Option<&str>,
        db: &'a Arc<Mutex<StateDb>>,
        emitter: &'a Emitter,
    ) -> Result<Run<'a>, BuildError> {
        let correlation_id = uuid::Uuid::now_v7().to_string();
        let reference = planned.reference.clone().unwrap_or_default();
        let new_build = NewBuild {
            id: correlation_id.clone(),
            mesh: mesh.name.clone(),
            module: Some(module.name.clone()),
            repository: repository_of(&reference).to_string(),
            commit: revision.commit.clone(),
            dirty: revision.dirty,
            base_module: module.base.clone(),
            base_digest: planned.base_artifact.clone(),
            reference: Some(reference.clone()),
            platforms: planned
                .platforms
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            forced: planned.decision == Decision::Forced,
            why: planned.why.clone(),
            host: gethostname::gethostname().to_string_lossy().into_owned(),
            started_ms: timefmt::now_ms(),
            operation_id: Some(emitter.operation_id.clone()),
            builder: builder.map(str::to_string),
        };
        with_history(db, |h| h.start_build(&new_build))
            .map_err(|e| BuildError::NoRecord(super::error::Unrecordable::BuildRow(e)))?;
        emitter.emit(
            Payload::Build {
                reference: reference.clone(),
                build: correlation_id.clone(),
                builder: builder.map(str::to_string),
            },
            Some(&module.name),
            match builder {
                Some(builder) => {
                    format!("building {reference} on builder {builder} (build {correlation_id})")
                }
                None => format!("building {reference} (build {correlation_id})"),
            },
        );
        Ok(Run {
            module: module.name.clone(),
            mesh: &mesh.name,
            planned,
            reference,
            correlation_id,
            db,
            emitter,
        })
    }

    /// The data of the step that says this build made `digest`.
    fn built_payload(&self, digest: &str) -> Payload {
        Payload::Built {
            reference: self.reference.clone(),
            digest: digest.to_string(),
        }
    }

    fn built(self, artifact: String, published: Option<String>) -> Built {
        Built {
            planned: self.planned,
            correlation_id: self.correlation_id,
            artifact: Some(artifact),
            error: None,
            published,
        }
    }

    /// The build failed: its row says why (and the log's tail), and so does the converge. The
    /// error is made words here, where it is recorded and shown.
    fn failed(
        &self,
        error: impl std::fmt::Display,
        tail: Option<String>,
    ) -> Result<Built, BuildError> {
        let error = crate::mesh::text::plain(&error.to_string()).into_owned();
        let end = BuildEnd {
            status: BuildStatus::Failed,
            digest: None,
            error: Some(error.clone()),
            log_tail: tail,
            ended_ms: timefmt::now_ms(),
        };
        with_history(self.db, |h| {
            h.finish_build(&self.correlation_id, &end).map(|_| ())
        })
        .map_err(|e| BuildError::NoRecord(e.into()))?;
        self.emitter.emit(
            Payload::Failed {
                error: error.clone(),
            },
            Some(&self.module),
            error.clone(),
        );
        Ok(Built {
            planned: self.planned.clone(),
            correlation_id: self.correlation_id.clone(),
            artifact: None,
            error: Some(error),
            published: None,
        })
    }

    /// The build succeeded: its row is completed (or the converge fails, nothing stamped), the
    /// inputs of its ref kept for the next address's why.
    async fn succeeded(&self, digest: &str, what: &str) -> Result<(), BuildError> {
        let end = BuildEnd {
            status: BuildStatus::Succeeded,
            digest: Some(digest.to_string()),
            error: None,
            log_tail: None,
            ended_ms: timefmt::now_ms(),
        };
        finish_or_keep_trying(self.db, &self.correlation_id, &end, what).await?;
        // Best effort: the build stands without it.
        if let Some(inputs) = &self.planned.inputs
            && let Ok(json) = serde_json::to_string(&inputs.manifest)
        {
            let _ = with_history(self.db, |h| {
                h.save_manifest(self.mesh, &self.module, &self.reference, &json)
            });
        }
        Ok(())
    }

    /// Build on the builder's daemon, within the build's deadline.
    async fn on_daemon(
        self,
        on: &BuildOn<'_>,
        request: BuildRequest,
        tar: TarSlot,
        contexts: &NamedContexts,
    ) -> Result<Built, BuildError> {
        let Some(daemon) = on.daemon else {
            let why = format!("module {}: no daemon to build it on", self.module);
            return self.failed(why, None);
        };
        let mut tail = LogTail::default();
        let (emitter, module) = (self.emitter, self.module.clone());
        let building = daemon.build(request, |line| {
            emitter.emit(Payload::output(line), Some(&module), line);
            tail.push(line);
        });
        let daemon_started = timefmt::now_ms();
        let result = match tokio::time::timeout(on.deadline, building).await {
            Ok(result) => result,
            Err(_) => {
                // The build's stream is dropped, and with its connection the daemon ends the
                // build, steps included (builder_daemons' deadline test sees the step go). The
                // tar's thread ends when its reader is gone.
                tar.abort();
                let message = format!(
                    "the daemon at {} did not end the build within {} s (MESHTOP_BUILD_DEADLINE)",
                    daemon.endpoint(),
                    on.deadline.as_secs()
                );
                let _ = self.failed(message.clone(), Some(tail.text()));
                return Err(BuildError::Daemon(message));
            }
        };
        // The daemon's time on the build; what the row spends besides is meshtop's own.
        let daemon_ms = timefmt::now_ms().saturating_sub(daemon_started).max(0);
        let _ = with_history(self.db, |h| {
            h.set_daemon_time(&self.correlation_id, daemon_ms)
        });
        let tail_text = Some(tail.text());
        if let Some(error) = tar.ended(&self.module).await {
            return self.failed(error, tail_text);
        }
        match result {
            Ok(DaemonBuildEnd::Built(id)) => {
                if let Some(moved) = context_moved(daemon, contexts).await {
                    return self.failed(moved, tail_text);
                }
                let what = format!("built {} → {id}", self.reference);
                self.succeeded(&id, &what).await?;
                self.emitter
                    .emit(self.built_payload(&id), Some(&self.module), what);
                Ok(self.built(id, None))
            }
            Ok(DaemonBuildEnd::Failed(message)) => self.failed(message, tail_text),
            Err(error) => {
                let message = error.to_string();
                let _ = self.failed(message.clone(), tail_text);
                Err(BuildError::Daemon(message))
            }
        }
    }

    /// Build for several platforms with buildx, which pushes; the index it pushed is signed as
    /// any push is (a push the converge does not sign would vouch for nothing where keys are
    /// trusted), or the build fails saying so.
    async fn on_buildx(
        self,
        mesh: &Mesh,
        request: BuildRequest,
        tar: TarSlot,
    ) -> Result<Built, BuildError> {
        let mut tail = LogTail::default();
        let (emitter, module) = (self.emitter, self.module.clone());
        let daemon_started = timefmt::now_ms();
        let result = buildx::build_and_push(request, |line| {
            emitter.emit(Payload::output(line), Some(&module), line);
            tail.push(line);
        })
        .await;
        // buildx's time on the build (its push included); the rest is meshtop's own.
        let daemon_ms = timefmt::now_ms().saturating_sub(daemon_started).max(0);
        let _ = with_history(self.db, |h| {
            h.set_daemon_time(&self.correlation_id, daemon_ms)
        });
        let tail_text = Some(tail.text());
        if let Some(error) = tar.ended(&self.module).await {
            return self.failed(error, tail_text);
        }
        match result {
            Ok(digest) => {
                if let Err(error) = self.sign_index(mesh, &digest).await {
                    return self.failed(
                        format!(
                            "module {}: buildx pushed {} as {digest}, which could not be signed: {error}",
                            self.module, self.reference
                        ),
                        tail_text,
                    );
                }
                let what = format!("built and pushed {} → {digest}", self.reference);
                self.succeeded(&digest, &what).await?;
                let _ = with_history(self.db, |h| {
                    h.set_published(&self.correlation_id, &self.reference, &digest)
                });
                self.emitter
                    .emit(self.built_payload(&digest), Some(&self.module), what);
                Ok(self.built(digest.clone(), Some(digest)))
            }
            Err(error) => self.failed(format!("module {}: {error}", self.module), tail_text),
        }
    }
}

/// What every platform's build of a multi-platform module shares.
struct PlatformTemplate<'m> {
    module: &'m Module,
    args: HashMap<String, String>,
    labels: HashMap<String, String>,
    secrets: SecretValues,
    ssh_agent: Option<std::path::PathBuf>,
    deadline: std::time::Duration,
}

/// How one platform's build ended, when it did not give a manifest for the index.
enum PlatformFault {
    /// The build's own failure (a step, the push): the module fails.
    Failed(String),
    /// The builder that built the platform went away or did not end in time: the module fails,
    /// and the build is retried once without that builder.
    Gone { builder: String, why: String },
}

/// One platform built and pushed: the builder it ran on in words, its index entry, the registry.
struct PlatformDone {
    described: String,
    entry: IndexEntry,
    registry: Registry,
}

/// The tag a platform's image is pushed under before the index names it by digest:
/// `<ref>.linux-arm64` (so that two platforms built on one daemon never share a tag).
pub fn platform_tag(reference: &str, platform: &Platform) -> String {
    let mut tag = format!("{reference}.{}-{}", platform.os, platform.arch);
    if let Some(variant) = &platform.variant {
        tag.push('-');
        tag.push_str(variant);
    }
    tag
}

impl Run<'_> {
    /// Build every platform at once, each on a builder given when one has a slot for it, push
    /// each by digest, and write the OCI image index naming them under the module's ref: the
    /// index's digest is the artifact (signed as any push is when the converge signs). A builder
    /// that went away is blamed by name (the module is retried once without it); a failed step
    /// fails the module.
    async fn on_platforms(
        self,
        mesh: &Mesh,
        template: PlatformTemplate<'_>,
        slots: &dyn PlatformSlots,
    ) -> Result<Built, BuildError> {
        let tail = Mutex::new(LogTail::default());
        let platforms = self.planned.platforms.clone();
        let named = Mutex::new(vec![None; platforms.len()]);
        let builds = platforms
            .iter()
            .enumerate()
            .map(|(at, platform)| self.on_slot(&template, slots, platform, (at, &named), &tail));
        let ended = futures_util::future::join_all(builds).await;
        let tail_text = || Some(tail.lock().map(|t| t.text()).unwrap_or_default());
        let (mut done, mut failed, mut gone) = (Vec::new(), None, None);
        for end in ended {
            match end {
                Ok(platform) => done.push(platform),
                Err(PlatformFault::Failed(why)) => failed = failed.or(Some(why)),
                Err(PlatformFault::Gone { builder, why }) => gone = gone.or(Some((builder, why))),
            }
        }
        // A failed step is the user's, whatever else happened: retrying would fail it again.
        if let Some(why) = failed {
            return self.failed(why, tail_text());
        }
        if let Some((builder, message)) = gone {
            let _ = self.failed(message.clone(), tail_text());
            return Err(BuildError::PlatformGone { builder, message });
        }
        let Some(registry) = done.first().map(|d| d.registry.clone()) else {
            return self.failed(
                format!("module {}: no platform to build", self.module),
                None,
            );
        };
        let entries: Vec<IndexEntry> = done.iter().map(|d| d.entry.clone()).collect();
        let digest = match self.put_index(&registry, &entries).await {
            Ok(digest) => digest,
            Err(why) => return self.failed(why, tail_text()),
        };
        if let Err(error) = self.sign_index(mesh, &digest).await {
            return self.failed(
                format!(
                    "module {}: the image index {} ({digest}) could not be signed: {error}",
                    self.module, self.reference
                ),
                tail_text(),
            );
        }
        let what = format!(
            "built {} for {} and wrote its image index → {digest}",
            self.reference,
            done.iter()
                .map(|d| d.described.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.succeeded(&digest, &what).await?;
        let _ = with_history(self.db, |h| {
            h.set_published(&self.correlation_id, &self.reference, &digest)
        });
        self.emitter
            .emit(self.built_payload(&digest), Some(&self.module), what);
        Ok(self.built(digest.clone(), Some(digest)))
    }

    /// One platform on a slot: a builder taken for it (waiting for one), the build and push, and
    /// the slot given back however it ended. `named`: each platform's builder in words, as the
    /// build's row names them (this one at `at`).
    async fn on_slot(
        &self,
        template: &PlatformTemplate<'_>,
        slots: &dyn PlatformSlots,
        platform: &Platform,
        (at, named): (usize, &Mutex<Vec<Option<String>>>),
        tail: &Mutex<LogTail>,
    ) -> Result<PlatformDone, PlatformFault> {
        let on = slots
            .take(platform)
            .await
            .map_err(|why| PlatformFault::Failed(why.to_string()))?;
        if let Ok(mut named) = named.lock() {
            named[at] = Some(on.describe());
            let text: Vec<String> = named.iter().flatten().cloned().collect();
            let _ = with_history(self.db, |h| {
                h.set_builder(&self.correlation_id, &text.join(", "))
            });
        }
        let started = format!(
            "{platform}: building on builder {}{}",
            on.builder,
            if on.emulated { " (emulated)" } else { "" }
        );
        self.emitter.emit(
            Payload::output(&started),
            Some(&self.module),
            started.clone(),
        );
        let result = self.one_platform(template, &on, tail).await;
        let end = match &result {
            Ok(_) => PartEnd::Built,
            Err(PlatformFault::Failed(_)) => PartEnd::Failed,
            Err(PlatformFault::Gone { why, .. }) => PartEnd::Gone(why.clone()),
        };
        slots.give_back(&on, end);
        result.map(|entry| PlatformDone {
            described: on.describe(),
            entry,
            registry: on.registry.clone(),
        })
    }

    /// One platform: built on its builder within the deadline, then pushed by that builder; the
    /// manifest as the index names it.
    async fn one_platform(
        &self,
        template: &PlatformTemplate<'_>,
        on: &PlatformOn,
        tail: &Mutex<LogTail>,
    ) -> Result<IndexEntry, PlatformFault> {
        let tag = platform_tag(&self.reference, &on.platform);
        let sent = context_for(
            Some(&on.daemon),
            template.module,
            &self.planned,
            &BTreeMap::new(),
            self.db,
        )
        .await;
        let (tar, context) = sent.map_err(|why| PlatformFault::Failed(why.to_string()))?;
        let mut args = template.args.clone();
        if let Some(base) = &on.base {
            args.insert("BASE".into(), base.clone());
        }
        let request = BuildRequest {
            context,
            dockerfile: template.module.dockerfile.clone(),
            target: template.module.target.clone(),
            tag: tag.clone(),
            build_args: args,
            labels: template.labels.clone(),
            no_cache: self.planned.decision == Decision::Forced,
            platforms: vec![on.platform.to_string()],
            secrets: template.secrets.clone(),
            ssh_agent: template.ssh_agent.clone(),
            on_base: crate::workspace::lock_file::module_built_on_base(template.module),
        };
        let (emitter, module) = (self.emitter, self.module.clone());
        let said = format!("{}: ", on.platform);
        let building = on.daemon.build(request, |line| {
            let line = format!("{said}{line}");
            emitter.emit(Payload::output(&line), Some(&module), &line);
            if let Ok(mut tail) = tail.lock() {
                tail.push(&line);
            }
        });
        let ended = match tokio::time::timeout(template.deadline, building).await {
            Ok(ended) => ended,
            Err(_) => {
                tar.abort();
                return Err(PlatformFault::Gone {
                    builder: on.builder.clone(),
                    why: format!(
                        "builder {} (the daemon at {}) did not end the {} build within {} s (MESHTOP_BUILD_DEADLINE)",
                        on.builder,
                        on.daemon.endpoint(),
                        on.platform,
                        template.deadline.as_secs()
                    ),
                });
            }
        };
        if let Some(error) = tar.ended(&self.module).await {
            return Err(PlatformFault::Failed(error));
        }
        let id = match ended {
            Ok(DaemonBuildEnd::Built(id)) => id,
            Ok(DaemonBuildEnd::Failed(message)) => {
                return Err(PlatformFault::Failed(format!(
                    "{}: {message}",
                    on.describe()
                )));
            }
            Err(error) => {
                return Err(PlatformFault::Gone {
                    builder: on.builder.clone(),
                    why: format!("builder {} ({}): {error}", on.builder, on.platform),
                });
            }
        };
        let creds = credentials::for_registry(&on.registry.host)
            .await
            .ok()
            .flatten();
        // Checked against the registry's manifest before the index names it: the image this
        // platform's build produced, not whatever the tag names when the daemon pushes.
        let pushing = on
            .daemon
            .push_built(&tag, &id, &on.registry, creds.as_ref());
        let (digest, size) = match tokio::time::timeout(template.deadline, pushing).await {
            Ok(Ok(pushed)) => pushed,
            Ok(Err(error)) => {
                return Err(PlatformFault::Failed(format!(
                    "builder {} could not push {tag}: {error}",
                    on.builder
                )));
            }
            Err(_) => {
                return Err(PlatformFault::Failed(format!(
                    "builder {} did not push {tag} within {} s (MESHTOP_BUILD_DEADLINE)",
                    on.builder,
                    template.deadline.as_secs()
                )));
            }
        };
        self.emitter.emit(
            Payload::output(&format!("{}: built {id}, pushed as {digest}", on.platform)),
            Some(&self.module),
            format!(
                "{} built {} ({}) and pushed it as {digest}",
                on.describe(),
                self.reference,
                crate::mesh::text::short_id(&id)
            ),
        );
        Ok(IndexEntry {
            digest,
            size,
            media_type: DOCKER_MANIFEST,
            os: on.platform.os.clone(),
            architecture: on.platform.arch.clone(),
            variant: on.platform.variant.clone(),
        })
    }

    /// Write the image index naming `entries` under the module's ref: its digest, or why not.
    async fn put_index(
        &self,
        registry: &Registry,
        entries: &[IndexEntry],
    ) -> Result<String, IndexError> {
        let creds = credentials::for_registry(&registry.host)
            .await
            .map_err(|source| IndexError::Credentials {
                registry: registry.host.clone(),
                source,
            })?;
        let write = |source| IndexError::Write {
            module: self.module.clone(),
            source,
        };
        let client = RegistryClient::new(registry, creds).map_err(write)?;
        let (repository, tag) = repository_in(&registry.host, &self.reference);
        client
            .put_index(repository, tag, entries)
            .await
            .map_err(write)
    }
}

impl Run<'_> {
    /// Sign the index buildx pushed to the mesh's registry, when the converge signs.
    async fn sign_index(&self, mesh: &Mesh, digest: &str) -> Result<(), SignIndexError> {
        let (Some(_), Some(registry)) = (&mesh.signing.key, &mesh.registry) else {
            return Ok(());
        };
        let creds = credentials::for_registry(&registry.host).await?;
        let pushed = Pushed {
            module: &self.module,
            reference: &self.reference,
            manifest: digest,
            inputs: self.planned.inputs.as_ref().map(|i| i.digest.as_str()),
        };
        sign_pushed(mesh, registry, creds, &pushed, self.emitter).await?;
        Ok(())
    }
}

/// Why the index a multi-platform build pushed could not be signed.
#[derive(Debug, thiserror::Error)]
enum SignIndexError {
    #[error(transparent)]
    Credentials(#[from] credentials::CredentialsError),
    #[error(transparent)]
    Sign(#[from] super::error::TargetError),
}
