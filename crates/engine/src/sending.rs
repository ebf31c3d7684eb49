//! How a build's context reaches its builder: served through the build's BuildKit session, where
//! BuildKit asks only for what changed since its last build of the same context, or as a tar
//! written by the same walk that hashes it (the legacy builder, `docker buildx`). Either way what
//! goes is the planned inputs: a context that changed since the plan fails the build.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::plan::PlannedModule;
use crate::backends::daemon::Daemon;
use crate::backends::daemon::build::{
    BuildContext, ContextBody, ContextWriter, context_pipe, tar_asked_for,
};
use crate::backends::state::{StateDb, decode_input_stats};
use crate::mesh::model::Module;
use crate::workspace::inputs::{self, InputSpec, Inputs, InputsError};
use crate::workspace::inputs::{NO_CONTEXTS, NO_UPSTREAMS};
use crate::workspace::stat_cache::ContextCache;

/// The tar being written on a blocking thread: what it sent, or why it stopped.
type Tarring = tokio::task::JoinHandle<Result<Inputs, InputsError>>;

/// The tar of one build, once one is written (a served context writes none unless the daemon
/// turns out to build with its legacy builder): checked when the build ends.
#[derive(Clone, Default)]
pub(crate) struct TarSlot(Arc<Mutex<Option<Tarring>>>);

impl TarSlot {
    fn put(&self, tarring: Tarring) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(tarring);
        }
    }

    fn take(&self) -> Option<Tarring> {
        self.0.lock().ok().and_then(|mut slot| slot.take())
    }

    /// The build was given up: the tar's thread ends.
    pub(crate) fn abort(&self) {
        if let Some(tarring) = self.take() {
            tarring.abort();
        }
    }

    /// What stopped the tar, unless only the builder stopped reading it (then the builder says
    /// why); None as well when no tar was written.
    pub(crate) async fn ended(&self, module: &str) -> Option<String> {
        let tarring = self.take()?;
        match tarring.await {
            Ok(Ok(_)) | Ok(Err(InputsError::Write(_))) => None,
            Ok(Err(error)) => Some(format!("module {module}: {error}")),
            Err(error) => Some(format!(
                "module {module}: packing the context stopped: {error}"
            )),
        }
    }
}

/// Why a build's context cannot be served: said as the build's failure.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Unserved {
    /// Not what was planned, or not readable.
    #[error("module {module}: {source}")]
    Inputs {
        module: String,
        #[source]
        source: InputsError,
    },
    #[error("module {module}: reading the context stopped: {source}")]
    Stopped {
        module: String,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// The context of one build on `daemon` (None: `docker buildx`, which reads a tar): served when
/// the daemon builds with BuildKit, else a tar. Err: the context is not what was planned (or
/// cannot be read).
pub(crate) async fn context_for(
    daemon: Option<&Daemon>,
    module: &Module,
    planned: &PlannedModule,
    images: &BTreeMap<String, String>,
    db: &Arc<Mutex<StateDb>>,
) -> Result<(TarSlot, BuildContext), Unserved> {
    let slot = TarSlot::default();
    let serve = daemon.is_some_and(Daemon::builds_with_buildkit) && !tar_asked_for();
    let Some(secret) = serve.then(|| context_secret(db)).flatten() else {
        let (tarring, body) = start_tar(module, planned, images);
        slot.put(tarring);
        return Ok((slot, BuildContext::Tar(body)));
    };
    let (spec_module, spec_planned, spec_images) =
        (module.clone(), planned.clone(), images.clone());
    let db = db.clone();
    let sent = tokio::task::spawn_blocking(move || {
        let cache = stat_cache(&db, &spec_module.context);
        let key = cache_key(&spec_module.context, &secret);
        let spec = spec_of(&spec_module, &spec_planned, &spec_images);
        inputs::sent_context(&spec, spec_planned.inputs.as_ref(), &cache, key)
    })
    .await
    .map_err(|source| Unserved::Stopped {
        module: module.name.clone(),
        source,
    })?
    .map_err(|source| Unserved::Inputs {
        module: module.name.clone(),
        source,
    })?;
    let (module, planned, images) = (module.clone(), planned.clone(), images.clone());
    let tar_slot = slot.clone();
    let tar = Box::new(move || {
        let (tarring, body) = start_tar(&module, &planned, &images);
        tar_slot.put(tarring);
        body
    });
    Ok((
        slot,
        BuildContext::Served {
            context: Arc::new(sent),
            tar,
        },
    ))
}

/// What the stat cache knows of `context` (as the plan read it): files whose stat data it
/// answers for are not read again to check the plan.
fn stat_cache(db: &Mutex<StateDb>, context: &Path) -> ContextCache {
    let row = db
        .lock()
        .ok()
        .and_then(|db| db.input_stats_row(context).ok())
        .flatten();
    ContextCache::of(row.and_then(|b| decode_input_stats(&b)).unwrap_or_default())
}

/// The state file's context secret; None (said in the log): the context goes as a tar, since a
/// key without it is one anyone could send a look-alike copy under.
fn context_secret(db: &Mutex<StateDb>) -> Option<Vec<u8>> {
    let secret = match crate::backends::state::locked(db) {
        Ok(db) => db.context_secret(),
        Err(poisoned) => {
            tracing::warn!("the context goes as a tar: {poisoned}");
            return None;
        }
    };
    secret
        .map_err(|error| tracing::warn!("the context goes as a tar: {error}"))
        .ok()
}

/// Names a context to BuildKit's cache of received contexts: this machine, the context's
/// directory (as `docker build` keys a local context) and the state file's secret.
fn cache_key(context: &Path, secret: &[u8]) -> String {
    let host = gethostname::gethostname();
    inputs::context_cache_key(context, host.as_encoded_bytes(), secret)
}

fn spec_of<'a>(
    module: &'a Module,
    planned: &'a PlannedModule,
    context_images: &'a BTreeMap<String, String>,
) -> InputSpec<'a> {
    let expected = planned.inputs.as_ref();
    InputSpec {
        context: &module.context,
        dockerfile: &module.dockerfile,
        build_args: &module.build_args,
        base_digest: planned.base_artifact.as_deref(),
        platforms: &planned.platforms,
        // What the plan locked, whatever the tags name by now.
        upstreams: expected.map_or(&NO_UPSTREAMS, |planned| &planned.manifest.upstreams),
        target: module.target.as_deref(),
        contexts: expected.map_or(&NO_CONTEXTS, |planned| &planned.manifest.contexts),
        context_images,
    }
}

/// The same walk that computed the address writes the tar, streamed to the builder as it is
/// written (bounded memory); a file that changed since the plan aborts the body and fails the build.
pub(crate) fn start_tar(
    module: &Module,
    planned: &PlannedModule,
    context_images: &BTreeMap<String, String>,
) -> (Tarring, ContextBody) {
    let (module, planned) = (module.clone(), planned.clone());
    let context_images = context_images.clone();
    let (writer, context) = context_pipe();
    let tarring = tokio::task::spawn_blocking(move || {
        let spec = spec_of(&module, &planned, &context_images);
        write_tar(&spec, planned.inputs.as_ref(), writer)
    });
    (tarring, context)
}

fn write_tar(
    spec: &InputSpec,
    expected: Option<&Inputs>,
    mut writer: ContextWriter,
) -> Result<Inputs, InputsError> {
    match inputs::tar_inputs(spec, expected, &mut writer) {
        Ok(inputs) => writer.finish().map(|()| inputs).map_err(InputsError::Write),
        Err(error) => {
            writer.abort(&error.to_string());
            Err(error)
        }
    }
}
