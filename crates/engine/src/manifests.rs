//! What the planner remembers between plans: the previous inputs of a module (the why of its
//! address), the pins, and the stat cache that spares reading unchanged files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rayon::prelude::*;

use crate::backends::state::{StateDb, decode_input_stats};
use crate::error::PlanError;
use crate::mesh::manifest::Manifest;
use crate::mesh::pin::Pin;
use crate::workspace::stat_cache::ContextCache;

/// What the planner remembers between plans: the previous inputs of a module (the why of its
/// address) and the stat cache that spares reading unchanged files.
pub trait ManifestSource: Sync {
    /// The manifest of `reference` if known, else the module's latest one.
    fn previous(&self, module: &str, reference: Option<&str>) -> Option<Manifest>;

    /// The mesh's pinned modules (rolled back by hand); none by default. Err: they cannot be read,
    /// and a plan must not go on as if there were none.
    fn pins(&self) -> Result<BTreeMap<String, Pin>, PlanError> {
        Ok(BTreeMap::new())
    }
    /// The stat cache of the files below `context` (empty: every file is read).
    fn input_cache(&self, _context: &Path) -> ContextCache {
        ContextCache::default()
    }

    /// The stat caches of `contexts` (all at or below `root`), in their order: one read of the
    /// store where it can (a plan of thousands of contexts), else one per context.
    fn input_caches(&self, _root: &Path, contexts: &[&Path]) -> Vec<ContextCache> {
        contexts.iter().map(|c| self.input_cache(c)).collect()
    }

    /// Keep what walks left in their caches, all at once (best effort: a cache that cannot be
    /// written costs time only).
    fn keep_input_caches(&self, _caches: Vec<(PathBuf, ContextCache)>) {}

    /// The (ref, image id) pairs this machine vouches for on its host daemon (its builds'
    /// artifacts, what it pulled after verifying, each under the ref it was made or pulled as):
    /// with `trust`, the host answers for these only. None known: the host vouches for nothing,
    /// which may only cost a build.
    fn vouched_here(&self) -> BTreeSet<(String, String)> {
        BTreeSet::new()
    }
}

/// No history: every module reads as new.
pub struct NoManifests;
impl ManifestSource for NoManifests {
    fn previous(&self, _module: &str, _reference: Option<&str>) -> Option<Manifest> {
        None
    }
}

/// Previous manifests from the state database.
pub struct StateManifests<'a> {
    pub db: &'a Mutex<StateDb>,
    pub mesh: &'a str,
    /// The target whose pins hold (the manifests are the mesh's, whatever the target).
    pub target: &'a str,
}

impl ManifestSource for StateManifests<'_> {
    fn previous(&self, module: &str, reference: Option<&str>) -> Option<Manifest> {
        let db = self.db.lock().ok()?;
        let by_ref = reference.and_then(|r| db.manifest(self.mesh, module, r).ok().flatten());
        let json = match by_ref {
            Some(json) => json,
            None => db.latest_manifest(self.mesh, module).ok().flatten()?.1,
        };
        serde_json::from_str(&json).ok()
    }

    /// Pins that cannot be read stop the plan (a converge deciding without them would send a
    /// rolled-back module forward again).
    fn pins(&self) -> Result<BTreeMap<String, Pin>, PlanError> {
        let failed = |message: String| PlanError::Pins {
            target: self.target.to_string(),
            message,
        };
        let db = self
            .db
            .lock()
            .map_err(|_| failed("the state database handle was poisoned".into()))?;
        db.pins(self.mesh, self.target)
            .map_err(|error| failed(error.to_string()))
    }

    fn vouched_here(&self) -> BTreeSet<(String, String)> {
        match self.db.lock() {
            Ok(db) => db.vouched_here(self.mesh).unwrap_or_else(|error| {
                tracing::warn!("what this machine built or verified cannot be read ({error}): the host vouches for nothing");
                BTreeSet::new()
            }),
            Err(_) => BTreeSet::new(),
        }
    }

    fn input_cache(&self, context: &Path) -> ContextCache {
        // The row is read under the lock, decoded outside it: contexts load side by side.
        let row = self
            .db
            .lock()
            .ok()
            .and_then(|h| h.input_stats_row(context).ok())
            .flatten();
        ContextCache::of(row.and_then(|b| decode_input_stats(&b)).unwrap_or_default())
    }

    /// One read of every row below `root`, decoded side by side outside the lock.
    fn input_caches(&self, root: &Path, contexts: &[&Path]) -> Vec<ContextCache> {
        let rows = match self.db.lock().map(|db| db.input_stats_rows_under(root)) {
            Ok(Ok(rows)) => rows,
            _ => return contexts.iter().map(|c| self.input_cache(c)).collect(),
        };
        contexts
            .par_iter()
            .map(|context| {
                let known = rows.get(*context).and_then(|b| decode_input_stats(b));
                ContextCache::of(known.unwrap_or_default())
            })
            .collect()
    }

    /// One transaction for every context whose entries changed.
    fn keep_input_caches(&self, caches: Vec<(PathBuf, ContextCache)>) {
        let sets: Vec<(PathBuf, Vec<_>)> = caches
            .into_iter()
            .filter_map(|(context, cache)| cache.into_entries().map(|e| (context, e)))
            .collect();
        if let Ok(db) = self.db.lock()
            && let Err(error) = db.save_input_stats(&sets)
        {
            tracing::debug!("the stat cache was not written: {error}");
        }
    }
}
