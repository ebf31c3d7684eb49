//! One build of a converge: recorded when it starts, the context tarred by the same walk that
//! computed the address, built on the daemon, recorded when it ends — failures too.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::plan::PlannedModule;
use super::progress::{Emitter, Step};
use crate::backends::buildx;
use crate::backends::daemon::Daemon;
use crate::backends::daemon::build::{BuildEnd as DaemonBuildEnd, BuildRequest, context_pipe};
use crate::backends::git;
use crate::backends::state::{BuildEnd, NewBuild, StateDb};
use crate::mesh::builds::BuildStatus;
use crate::mesh::decide::Decision;
use crate::mesh::model::{INPUTS_LABEL, MESH_LABEL, MODULE_LABEL, Mesh, Module};
use crate::mesh::refs::repository_of;
use crate::timefmt;
use crate::workspace::inputs::{self, InputSpec, InputsError};

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

/// What stops the whole converge (as opposed to one failed build).
pub enum BuildError {
    /// The build row could not be written: nothing is built silently.
    NoRecord(String),
    /// The daemon went away mid-build.
    Daemon(String),
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
            Err(error) => last = error,
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
    f: impl FnOnce(&StateDb) -> Result<T, crate::backends::state::StateError>,
) -> Result<T, String> {
    f(&*crate::backends::state::locked(db)?).map_err(|e| e.to_string())
}

pub async fn build_module(
    job: BuildJob,
    mesh: &Mesh,
    daemon: &Daemon,
    db: &Arc<Mutex<StateDb>>,
    emitter: &Emitter,
) -> Result<Built, BuildError> {
    let BuildJob {
        module,
        planned,
        pushes,
    } = job;
    let correlation_id = uuid::Uuid::now_v7().to_string();
    let reference = planned.reference.clone().unwrap_or_default();
    let context = module.context.clone();
    let revision = tokio::task::spawn_blocking(move || git::revision(&context))
        .await
        .unwrap_or_default();
    let host = gethostname::gethostname().to_string_lossy().into_owned();
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
        host: host.clone(),
        started_ms: timefmt::now_ms(),
        operation_id: Some(emitter.operation_id.clone()),
    };
    with_history(db, |h| h.start_build(&new_build))
        .map_err(|e| BuildError::NoRecord(format!("cannot write the build row: {e}")))?;
    emitter.emit(
        Step::Build,
        Some(&module.name),
        format!("building {reference} (build {correlation_id})"),
    );
    let finish = |status: BuildStatus,
                  digest: Option<String>,
                  error: Option<String>,
                  tail: Option<String>| {
        let end = BuildEnd {
            status,
            digest,
            error,
            log_tail: tail,
            ended_ms: timefmt::now_ms(),
        };
        with_history(db, |h| h.finish_build(&correlation_id, &end).map(|_| ()))
    };
    let ended = |status: BuildStatus, digest: Option<String>| BuildEnd {
        status,
        digest,
        error: None,
        log_tail: None,
        ended_ms: timefmt::now_ms(),
    };
    let failed = |error: String, tail: Option<String>| -> Result<Built, BuildError> {
        let error = crate::mesh::text::plain(&error).into_owned();
        finish(BuildStatus::Failed, None, Some(error.clone()), tail)
            .map_err(BuildError::NoRecord)?;
        emitter.emit(Step::Failed, Some(&module.name), error.clone());
        Ok(Built {
            planned: planned.clone(),
            correlation_id: correlation_id.clone(),
            artifact: None,
            error: Some(error),
            published: None,
        })
    };

    // The platforms the address was computed for (unset: the daemon's own).
    let multi_platform = planned.multi_platform;
    if multi_platform {
        let platforms: Vec<String> = planned.platforms.iter().map(ToString::to_string).collect();
        if !pushes {
            return failed(
                format!(
                    "module {}: a multi-platform build needs `docker buildx` and a registry to push to",
                    module.name
                ),
                None,
            );
        }
        if let Err(why) = buildx::available().await {
            return failed(
                format!(
                    "module {}: a multi-platform build ({}) needs `docker buildx`, which does not work here ({why}): install the buildx plugin, or give the module one platform",
                    module.name,
                    platforms.join(", ")
                ),
                None,
            );
        }
    }
    // The same walk that computed the address writes the tar, streamed to the builder as it is
    // written (bounded memory); a file that changed since the plan aborts the body and fails the build.
    let tar_module = module.clone();
    let expected = planned.inputs.clone();
    let base_digest = planned.base_artifact.clone();
    let platforms = planned.platforms.clone();
    let (writer, context) = context_pipe();
    let tarring = tokio::task::spawn_blocking(move || {
        let mut writer = writer;
        let spec = InputSpec {
            context: &tar_module.context,
            dockerfile: &tar_module.dockerfile,
            build_args: &tar_module.build_args,
            base_digest: base_digest.as_deref(),
            platforms: &platforms,
        };
        let tarred = inputs::tar_inputs(&spec, expected.as_ref(), &mut writer);
        match tarred {
            Ok(inputs) => writer.finish().map(|()| inputs).map_err(InputsError::Write),
            Err(error) => {
                writer.abort(&error.to_string());
                Err(error)
            }
        }
    });
    // What stopped the tar, unless only the builder stopped reading it (then the builder says why).
    let tar_error = |tarred: Result<Result<_, InputsError>, tokio::task::JoinError>| match tarred {
        Ok(Ok(_)) | Ok(Err(InputsError::Write(_))) => None,
        Ok(Err(error)) => Some(format!("module {}: {error}", module.name)),
        Err(error) => Some(format!(
            "module {}: packing the context stopped: {error}",
            module.name
        )),
    };
    let mut build_args: HashMap<String, String> = module.build_args.clone().into_iter().collect();
    if let Some(base) = &planned.base_artifact {
        build_args.insert("BASE".into(), base.clone());
    }
    let mut labels = HashMap::from([
        (MODULE_LABEL.to_string(), module.name.clone()),
        (MESH_LABEL.to_string(), mesh.name.clone()),
    ]);
    // The proof a registry answer is checked against (the tag's 12 hex characters are only a name).
    labels.extend(
        planned
            .inputs
            .as_ref()
            .map(|i| (INPUTS_LABEL.to_string(), i.digest.clone())),
    );
    if let Some(commit) = &revision.commit {
        labels.insert("org.opencontainers.image.revision".into(), commit.clone());
    }
    if let Some(source) = &revision.source {
        labels.insert("org.opencontainers.image.source".into(), source.clone());
    }
    // The inputs of a built ref, for the why of the next address (best effort: the build stands).
    let save_manifest = || {
        if let Some(inputs) = &planned.inputs
            && let Ok(json) = serde_json::to_string(&inputs.manifest)
        {
            let _ = with_history(db, |h| {
                h.save_manifest(&mesh.name, &module.name, &reference, &json)
            });
        }
    };
    let request = BuildRequest {
        context,
        dockerfile: module.dockerfile.clone(),
        tag: reference.clone(),
        build_args,
        labels,
        no_cache: planned.decision == Decision::Forced,
        platforms: planned.platforms.iter().map(ToString::to_string).collect(),
    };
    if multi_platform {
        let mut tail = LogTail::default();
        let result = buildx::build_and_push(request, |line| {
            emitter.emit(Step::Output, Some(&module.name), line);
            tail.push(line);
        })
        .await;
        let tail_text = Some(tail.text());
        if let Some(error) = tar_error(tarring.await) {
            return failed(error, tail_text);
        }
        return match result {
            Ok(digest) => {
                let end = ended(BuildStatus::Succeeded, Some(digest.clone()));
                finish_or_keep_trying(
                    db,
                    &correlation_id,
                    &end,
                    &format!("built and pushed {reference} → {digest}"),
                )
                .await?;
                save_manifest();
                let _ = with_history(db, |h| {
                    h.set_published(&correlation_id, &reference, &digest)
                });
                emitter.emit(
                    Step::Built,
                    Some(&module.name),
                    format!("built and pushed {reference} → {digest}"),
                );
                Ok(Built {
                    planned,
                    correlation_id,
                    artifact: Some(digest.clone()),
                    error: None,
                    published: Some(digest),
                })
            }
            Err(error) => failed(format!("module {}: {error}", module.name), tail_text),
        };
    }
    let mut tail = LogTail::default();
    let result = daemon
        .build(request, |line| {
            emitter.emit(Step::Output, Some(&module.name), line);
            tail.push(line);
        })
        .await;
    let tail_text = Some(tail.text());
    if let Some(error) = tar_error(tarring.await) {
        return failed(error, tail_text);
    }
    match result {
        Ok(DaemonBuildEnd::Built(id)) => {
            let end = ended(BuildStatus::Succeeded, Some(id.clone()));
            finish_or_keep_trying(
                db,
                &correlation_id,
                &end,
                &format!("built {reference} → {id}"),
            )
            .await?;
            save_manifest();
            emitter.emit(
                Step::Built,
                Some(&module.name),
                format!("built {reference} → {id}"),
            );
            Ok(Built {
                planned,
                correlation_id,
                artifact: Some(id),
                error: None,
                published: None,
            })
        }
        Ok(DaemonBuildEnd::Failed(message)) => failed(message, tail_text),
        Err(error) => {
            let message = error.to_string();
            let _ = failed(message.clone(), tail_text);
            Err(BuildError::Daemon(message))
        }
    }
}
