//! The planner's walks: a module's context read (through the stat cache and the watch's memo)
//! into its inputs, and the inputs into its address.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::{ManifestSource, PlanError, Planner};
use crate::mesh::decide::RefState;
use crate::mesh::model::{Module, Platform};
use crate::mesh::refs::ImageRef;
use crate::workspace::inputs::{self, InputSpec, Inputs, Walked};
use crate::workspace::stat_cache::ContextCache;
use crate::workspace::walks::WalkMemo;

/// Run blocking work (reading files) from async code: inline on a current-thread runtime (the
/// command's own thread), else without blocking the other tasks of a worker.
fn blocking_here<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(work),
        _ => work(),
    }
}

/// The artifacts of the modules a module builds on: its base's and its named contexts'.
#[derive(Clone, Copy)]
pub(super) struct BuiltOn<'a> {
    pub base: Option<&'a str>,
    pub contexts: &'a BTreeMap<String, String>,
}

impl Planner<'_> {
    /// Walk the contexts of `modules` now, all at once (a context's walk does not depend on its
    /// base: only the address does), for the decisions that follow; through `memo`, a watched
    /// context that reported no change is not walked again.
    pub(crate) fn walk_ahead(
        &mut self,
        modules: &[&Module],
        manifests: &dyn ManifestSource,
        memo: Option<&WalkMemo>,
    ) {
        let root = self.ctx.mesh.root.as_path();
        let walked: Vec<(String, Walk)> = blocking_here(|| {
            // What the memo answers is not walked; the rest have their stat caches read at once.
            let (kept, to_walk): (Vec<_>, Vec<_>) = modules
                .iter()
                .map(|module| (*module, memo.and_then(|memo| remembered(module, memo))))
                .partition(|(_, kept)| kept.is_some());
            let contexts: Vec<&Path> = to_walk.iter().map(|(m, _)| m.context.as_path()).collect();
            let caches = manifests.input_caches(root, &contexts);
            let mut walked: Vec<(String, Walk)> = to_walk
                .par_iter()
                .zip(caches)
                .map(|((module, _), cache)| (module.name.clone(), walk(module, cache, memo)))
                .collect();
            walked.extend(kept.into_iter().filter_map(|(module, kept)| {
                kept.map(|walked| (module.name.clone(), (Ok(walked), None)))
            }));
            walked
        });
        let mut caches = Vec::new();
        for (module, (walked, cache)) in walked {
            caches.extend(cache);
            self.walked.insert(module, walked);
        }
        manifests.keep_input_caches(caches);
    }

    /// The module's platforms; unset means the daemon's own (the local machine's when the daemon
    /// cannot be reached, so that a plan still runs).
    pub(super) async fn platforms(&mut self, module: &Module) -> Vec<Platform> {
        if !module.platforms.is_empty() {
            return module.platforms.clone();
        }
        if self.platform.is_none() {
            let own = match self.daemon.get().await {
                Ok(daemon) => daemon
                    .platform()
                    .await
                    .cloned()
                    .unwrap_or_else(|_| Platform::local()),
                Err(_) => Platform::local(),
            };
            self.platform = Some(own);
        }
        self.platform.clone().into_iter().collect()
    }

    /// The module's inputs and the address they give (its base's artifact is known).
    pub(super) fn address(
        &mut self,
        module: &Module,
        platforms: &[Platform],
        on: BuiltOn<'_>,
        manifests: &dyn ManifestSource,
    ) -> Result<(RefState, Option<Inputs>, Option<ImageRef>), PlanError> {
        let spec = InputSpec {
            context: &module.context,
            dockerfile: &module.dockerfile,
            build_args: &module.build_args,
            base_digest: on.base,
            platforms,
            upstreams: self
                .upstreams
                .get(&module.name)
                .unwrap_or(&inputs::NO_UPSTREAMS),
            target: module.target.as_deref(),
            contexts: on.contexts,
            context_images: &inputs::NO_CONTEXTS,
        };
        // Kept (not taken): a module may be decided again once the registry answered.
        let walked = match self.walked.get(&module.name) {
            Some(walked) => walked.clone(),
            // Hashing reads files (those the stat cache does not answer for): see `blocking_here`.
            None => {
                let (walked, cache) =
                    blocking_here(|| walk(module, manifests.input_cache(&module.context), None));
                manifests.keep_input_caches(cache.into_iter().collect());
                walked
            }
        };
        let inputs = inputs::inputs_of(&spec, walked?);
        let mesh = self.ctx.mesh;
        let registry = mesh.registry.as_ref().map(|r| r.host.as_str());
        let image_ref = ImageRef::new(
            registry,
            &mesh.name,
            &module.name,
            &inputs.digest,
            platforms,
        );
        Ok((
            RefState::Known(image_ref.to_string()),
            Some(inputs),
            Some(image_ref),
        ))
    }
}

/// A walk's result, and the stat cache it went through with its context (to keep; none when
/// `memo` answered).
type Walk = (Result<Walked, PlanError>, Option<(PathBuf, ContextCache)>);

/// The walk `memo` kept for `module`, when it answers for its context.
fn remembered(module: &Module, memo: &WalkMemo) -> Option<Walked> {
    memo.get(&module.name, &module.context, &module.dockerfile)
}

/// Walk `module`'s context through its stat cache (kept in `memo`, when given).
fn walk(module: &Module, cache: ContextCache, memo: Option<&WalkMemo>) -> Walk {
    let (context, dockerfile) = (module.context.as_path(), module.dockerfile.as_str());
    let ticket = memo.map(|memo| memo.ticket(&module.name));
    // What was read before a failure is still worth keeping: the cache is kept either way.
    let walked = inputs::walk_cached(context, dockerfile, &cache).map_err(|e| PlanError::Inputs {
        module: module.name.clone(),
        why: e.to_string(),
    });
    if let (Ok(walked), Some(memo), Some(ticket)) = (&walked, memo, ticket) {
        memo.keep(&module.name, context, dockerfile, ticket, walked);
    }
    (walked, Some((context.to_path_buf(), cache)))
}
