//! Which builder builds which module, and when: pure (the caller brings the clock as milliseconds).
//!
//! A module goes, in this order, to the builder that built its base in this converge (the base is
//! there and its cache warm), else to the builders in the order rendezvous hashing of the module's
//! name gives (the same module lands on the same builder across converges, whatever other builders
//! come and go), taking the first below its `max_builds`. `jobs` caps the builds running at once
//! over all builders. Only modules whose bases are delivered are queued (the engine walks the
//! dependency graph, not the tiers); the queue is ordered by the longest remaining chain (each
//! module's own build time plus its longest chain of dependents, weighted by median builds from
//! the history, as Bazel orders ready work by critical path), then by tier, then by how many modules
//! wait on each, then by name. meshtop counts in-flight builds itself: BuildKit
//! does not say how many it runs.
//!
//! A transport fault (the builder died, could not be reached, dropped the stream) takes the builder
//! out of rotation for a while and puts the build back once, to go elsewhere; a failed Dockerfile
//! step is the user's error and is never retried.
//!
//! A multi-platform module built through the pool is built as parts, one per platform
//! ([`Job::part`]): each part is a build like any other, taking a slot of the builder it runs on
//! (under `max_builds` and `jobs`), placed on a builder that builds its platform natively if one
//! is free, else on one that emulates it. The parts of one module run at once where slots allow.
//! A part is never put back on its own: its fault is the module's (`converge/place.rs` retries
//! the module once, avoiding the builder that failed it).

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

use super::builders::Builder;
use super::model::{Mesh, Platform};

/// How long a builder that had a transport fault stays out of rotation.
pub(crate) const OUT_OF_ROTATION_MS: u64 = 60_000;

/// One build waiting for a builder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub module: String,
    pub tier: u32,
    /// How many modules of the mesh build FROM this one, directly or further down.
    pub waiting: usize,
    /// Its longest remaining chain: its own expected build and its longest chain of dependents
    /// ([`chain_lengths`]), in milliseconds. The longest goes first.
    pub chain_ms: u64,
    pub base: Option<String>,
    /// What it must be built for (empty: any builder's own).
    pub platforms: Vec<Platform>,
    /// 0 for the first attempt, 1 for the retry after a transport fault.
    pub attempt: u32,
    /// Builders it must not go to (where its first attempt met a transport fault).
    pub avoid: Vec<String>,
    /// One platform of a multi-platform module (None: the whole module).
    pub part: Option<Platform>,
    /// It mounts secrets or forwards the ssh agent: only a builder that may take them builds it.
    pub secrets: bool,
}

impl Job {
    /// What names it among the placed: the module, and its part's platform.
    pub fn key(&self) -> String {
        part_key(&self.module, self.part.as_ref())
    }
}

/// `web`, or `web linux/arm64` for a part.
pub fn part_key(module: &str, part: Option<&Platform>) -> String {
    match part {
        Some(platform) => format!("{module} {platform}"),
        None => module.to_string(),
    }
}

/// A build given to a builder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub module: String,
    pub builder: String,
    pub attempt: u32,
    /// Why there: its base was built there, or the hash's first choice, or a spill.
    pub why: Why,
    /// The platform, when it is one part of a multi-platform module.
    pub part: Option<Platform>,
}

impl Placement {
    pub fn key(&self) -> String {
        part_key(&self.module, self.part.as_ref())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// Its base was built there in this converge.
    Base,
    /// The rendezvous hash's first choice among the builders in rotation.
    Hash,
    /// Its preferred builders were at their cap (or out): the next choice.
    Spill,
}

/// What [`Scheduler::next`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    Place(Placement),
    /// Nothing can start now: the cap is reached, or every fitting builder is busy or out for a
    /// while. Ask again when a build ends (or the earliest `until_ms` passes).
    Wait {
        until_ms: Option<u64>,
    },
    /// Nothing is queued.
    Idle,
    /// No builder of the pool can ever take this module (its platforms, or every one it may go to
    /// is out of the pool for good): the caller fails it.
    Unplaceable {
        module: String,
        reason: String,
        /// The platform, when it is one part of a multi-platform module.
        part: Option<Platform>,
    },
}

/// How a placed build ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Built,
    /// A Dockerfile step failed (or anything that is the build's own): never retried.
    Failed,
    /// The builder could not be reached or dropped the build: out of rotation, retried once elsewhere.
    Transport {
        error: String,
    },
}

/// What the caller does after [`Scheduler::done`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterDone {
    Finished,
    /// Queued again (attempt 1), to go to another builder.
    Requeued,
    /// It met a transport fault twice: the build fails.
    GaveUp,
}

/// One builder as the scheduler counts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Slot {
    pub name: String,
    pub max_builds: u32,
    pub platforms: Vec<Platform>,
    /// The platforms it builds on its own architecture (empty: every one it builds counts so).
    pub native: Vec<Platform>,
    pub running: u32,
    /// Out of rotation until then (ms), after a transport fault.
    pub out_until_ms: Option<u64>,
    /// Out of the pool for this converge (its check failed).
    pub left_out: bool,
    pub last_error: Option<String>,
    /// Builds it finished in this converge.
    pub built: u32,
    /// It may be given secrets and the ssh agent ([`Builder::may_take_secrets`]).
    pub takes_secrets: bool,
}

impl Slot {
    /// Builds `platform` on its own architecture (not under emulation).
    fn native(&self, platform: &Platform) -> bool {
        if self.native.is_empty() {
            return self.platforms.is_empty() || platform.built_by(&self.platforms);
        }
        platform.built_by(&self.native)
    }

    fn in_rotation(&self, now_ms: u64) -> bool {
        !self.left_out && self.out_until_ms.is_none_or(|until| now_ms >= until)
    }

    /// A one-platform job goes to a builder that builds it, a part to one that builds its
    /// platform. A whole multi-platform job (built through `docker buildx`, which has builders of
    /// its own) goes to one that builds any of its platforms.
    fn fits(&self, job: &Job) -> bool {
        if job.secrets && !self.takes_secrets {
            return false;
        }
        if self.platforms.is_empty() {
            return true;
        }
        if let Some(part) = &job.part {
            return part.built_by(&self.platforms);
        }
        let built = |p: &Platform| p.built_by(&self.platforms);
        if job.platforms.len() > 1 {
            job.platforms.iter().any(built)
        } else {
            job.platforms.iter().all(built)
        }
    }
}

/// The pool's state for one converge.
#[derive(Debug, Clone)]
pub struct Scheduler {
    slots: Vec<Slot>,
    queue: Vec<Job>,
    /// The jobs placed and not done yet, by module.
    placed: BTreeMap<String, Job>,
    built_on: BTreeMap<String, String>,
    jobs: usize,
}

impl Scheduler {
    /// `jobs`: builds at once over all builders (at least 1).
    pub fn new(builders: &[Builder], jobs: usize) -> Scheduler {
        Scheduler {
            slots: builders
                .iter()
                .map(|b| Slot {
                    name: b.name.clone(),
                    max_builds: b.max_builds.max(1),
                    platforms: b.platforms.clone(),
                    native: Vec::new(),
                    running: 0,
                    out_until_ms: None,
                    left_out: false,
                    last_error: None,
                    built: 0,
                    takes_secrets: b.may_take_secrets(),
                })
                .collect(),
            queue: Vec::new(),
            placed: BTreeMap::new(),
            built_on: BTreeMap::new(),
            jobs: jobs.max(1),
        }
    }

    /// Leave a builder out of this converge (its check failed), with why.
    pub fn leave_out(&mut self, builder: &str, error: impl Into<String>) {
        if let Some(slot) = self.slots.iter_mut().find(|s| s.name == builder) {
            slot.left_out = true;
            slot.last_error = Some(error.into());
        }
    }

    /// The platforms `builder` builds on its own architecture (as its daemon says): a part goes
    /// to a builder that builds its platform natively before one that emulates it.
    pub fn set_native(&mut self, builder: &str, native: Vec<Platform>) {
        if let Some(slot) = self.slots.iter_mut().find(|s| s.name == builder) {
            slot.native = native;
        }
    }

    /// Forget the parts of `module` still queued (its build ended without them).
    pub fn drop_parts(&mut self, module: &str) {
        self.queue
            .retain(|j| j.module != module || j.part.is_none());
    }

    /// A base built before this converge's scheduling (or vouched elsewhere) that is on `builder`.
    pub fn note_built(&mut self, module: &str, builder: &str) {
        self.built_on
            .insert(module.to_string(), builder.to_string());
    }

    pub fn enqueue(&mut self, job: Job) {
        let key = |j: &Job| {
            (
                std::cmp::Reverse(j.chain_ms),
                j.tier,
                std::cmp::Reverse(j.waiting),
                j.module.clone(),
                j.part.as_ref().map(ToString::to_string),
            )
        };
        let at = self.queue.partition_point(|q| key(q) <= key(&job));
        self.queue.insert(at, job);
    }

    #[cfg(test)]
    pub(crate) fn slots(&self) -> &[Slot] {
        &self.slots
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn running(&self) -> u32 {
        self.slots.iter().map(|s| s.running).sum()
    }

    /// Where `module` was built in this converge.
    #[cfg(test)]
    pub(crate) fn built_on(&self, module: &str) -> Option<&str> {
        self.built_on.get(module).map(String::as_str)
    }

    /// The next build to start, if one can start now.
    pub fn next(&mut self, now_ms: u64) -> Next {
        if self.queue.is_empty() {
            return Next::Idle;
        }
        if self.running() as usize >= self.jobs {
            return Next::Wait { until_ms: None };
        }
        for index in 0..self.queue.len() {
            let job = &self.queue[index];
            let order = self.preference(job);
            if order.is_empty() {
                let module = job.module.clone();
                let reason = self.why_unplaceable(job);
                let part = self.queue.remove(index).part;
                return Next::Unplaceable {
                    module,
                    reason,
                    part,
                };
            }
            let free = order.iter().enumerate().find(|(_, (slot, _))| {
                let slot = &self.slots[*slot];
                slot.in_rotation(now_ms) && slot.running < slot.max_builds
            });
            if let Some((rank, (slot, base))) = free {
                let why = match (rank, base) {
                    (0, true) => Why::Base,
                    (0, false) => Why::Hash,
                    _ => Why::Spill,
                };
                let slot = *slot;
                let job = self.queue.remove(index);
                self.slots[slot].running += 1;
                let placement = Placement {
                    module: job.module.clone(),
                    builder: self.slots[slot].name.clone(),
                    attempt: job.attempt,
                    why,
                    part: job.part.clone(),
                };
                self.placed.insert(job.key(), job);
                return Next::Place(placement);
            }
        }
        let until_ms = self
            .slots
            .iter()
            .filter(|s| !s.left_out)
            .filter_map(|s| s.out_until_ms.filter(|until| *until > now_ms))
            .min();
        Next::Wait { until_ms }
    }

    /// The builders `job` may go to, best first (slot index, whether it is the base's builder):
    /// the base's builder, then the rest in rendezvous order. Builders out for a while stay in the
    /// list (they come back); builders left out, avoided or of other platforms do not.
    fn preference(&self, job: &Job) -> Vec<(usize, bool)> {
        let usable: Vec<usize> = (0..self.slots.len())
            .filter(|i| {
                let slot = &self.slots[*i];
                !slot.left_out && !job.avoid.contains(&slot.name) && slot.fits(job)
            })
            .collect();
        if let Some(part) = &job.part {
            return self.part_preference(job, part, &usable);
        }
        let base_slot = job
            .base
            .as_ref()
            .and_then(|base| self.built_on.get(base))
            .and_then(|builder| {
                usable
                    .iter()
                    .copied()
                    .find(|i| self.slots[*i].name == *builder)
            });
        let mut order: Vec<(usize, bool)> = base_slot.map(|s| (s, true)).into_iter().collect();
        let names: Vec<&str> = usable
            .iter()
            .map(|i| self.slots[*i].name.as_str())
            .collect();
        for name in rendezvous(&job.module, &names) {
            if let Some(i) = usable.iter().copied().find(|i| self.slots[*i].name == name)
                && Some(i) != base_slot
            {
                order.push((i, false));
            }
        }
        order
    }

    /// A part's builders: those that build its platform natively, then those that emulate it,
    /// each in rendezvous order of the part (the same part lands on the same builder).
    fn part_preference(&self, job: &Job, part: &Platform, usable: &[usize]) -> Vec<(usize, bool)> {
        let names: Vec<&str> = usable
            .iter()
            .map(|i| self.slots[*i].name.as_str())
            .collect();
        let order: Vec<usize> = rendezvous(&job.key(), &names)
            .into_iter()
            .filter_map(|name| usable.iter().copied().find(|i| self.slots[*i].name == name))
            .collect();
        let (native, emulated): (Vec<usize>, Vec<usize>) =
            order.into_iter().partition(|i| self.slots[*i].native(part));
        native
            .into_iter()
            .chain(emulated)
            .map(|i| (i, false))
            .collect()
    }

    fn why_unplaceable(&self, job: &Job) -> String {
        let platforms: Vec<String> = job.platforms.iter().map(ToString::to_string).collect();
        if job.secrets && !self.slots.iter().any(|s| s.takes_secrets) {
            return "it mounts secrets or forwards the ssh agent, and no builder may be given them: add takes_secrets = true to a [[builder]] reached over unix://, ssh:// or tcp:// with tls_dir".into();
        }
        if !self.slots.iter().any(|s| s.fits(job)) {
            return format!("no builder builds {}", platforms.join(", "));
        }
        let left: Vec<String> = self
            .slots
            .iter()
            .filter(|s| s.fits(job))
            .map(|s| match (&s.last_error, job.avoid.contains(&s.name)) {
                (_, true) => format!("{} failed it", s.name),
                (Some(error), false) => format!("{} is out ({error})", s.name),
                (None, false) => format!("{} is out", s.name),
            })
            .collect();
        format!("no builder is left to build it: {}", left.join("; "))
    }

    /// A placed build ended on `builder`.
    pub fn done(&mut self, placement: &Placement, outcome: Outcome, now_ms: u64) -> AfterDone {
        let job = self.placed.remove(&placement.key());
        let Some(slot) = self.slots.iter_mut().find(|s| s.name == placement.builder) else {
            return AfterDone::Finished;
        };
        slot.running = slot.running.saturating_sub(1);
        match outcome {
            Outcome::Built => {
                slot.built += 1;
                if placement.part.is_none() {
                    self.built_on
                        .insert(placement.module.clone(), placement.builder.clone());
                }
                AfterDone::Finished
            }
            Outcome::Failed => AfterDone::Finished,
            Outcome::Transport { error } => {
                slot.out_until_ms = Some(now_ms.saturating_add(OUT_OF_ROTATION_MS));
                slot.last_error = Some(error);
                // A part's fault is its module's: the module is retried as a whole.
                if placement.part.is_some() {
                    return AfterDone::Finished;
                }
                let Some(mut again) = job.filter(|_| placement.attempt == 0) else {
                    return AfterDone::GaveUp;
                };
                again.attempt = placement.attempt + 1;
                again.avoid.push(placement.builder.clone());
                self.enqueue(again);
                AfterDone::Requeued
            }
        }
    }
}

/// Builder names in rendezvous order for `module`: highest score first, the score a hash of the
/// builder's and the module's names. A builder joining or leaving moves only the modules it wins or held.
pub fn rendezvous<'a>(module: &str, builders: &[&'a str]) -> Vec<&'a str> {
    let mut scored: Vec<(u64, &str)> = builders
        .iter()
        .map(|builder| {
            let mut hash = Sha256::new();
            hash.update(builder.as_bytes());
            hash.update([0]);
            hash.update(module.as_bytes());
            let digest = hash.finalize();
            let mut first = [0u8; 8];
            first.copy_from_slice(&digest[..8]);
            (u64::from_be_bytes(first), *builder)
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    scored.into_iter().map(|(_, name)| name).collect()
}

/// Per module, the modules of the mesh that build on it (its base or a named context).
fn dependents(mesh: &Mesh) -> BTreeMap<&str, Vec<&str>> {
    let mut on: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for module in &mesh.modules {
        for below in module.builds_on() {
            on.entry(below).or_default().push(module.name.as_str());
        }
    }
    on
}

/// The modules, deepest tier first: every dependent comes before what it builds on.
fn deepest_first(mesh: &Mesh) -> Vec<&str> {
    let mut order: Vec<(u32, &str)> = (mesh.modules.iter())
        .map(|m| (m.tier, m.name.as_str()))
        .collect();
    order.sort_unstable_by(|a, b| b.cmp(a));
    order.into_iter().map(|(_, name)| name).collect()
}

/// Per module, how many modules of the mesh build on it (FROM it or by a named context),
/// directly or further down.
pub fn waiting_counts(mesh: &Mesh) -> BTreeMap<String, usize> {
    let on = dependents(mesh);
    let mut below: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for name in deepest_first(mesh) {
        let mut mine = BTreeSet::new();
        for dependent in on.get(name).into_iter().flatten() {
            mine.insert(*dependent);
            mine.extend(below.get(dependent).into_iter().flatten().copied());
        }
        below.insert(name, mine);
    }
    below
        .into_iter()
        .map(|(name, set)| (name.to_string(), set.len()))
        .collect()
}

/// What a module without a build in the history counts as when no module has one either.
pub(crate) const UNKNOWN_BUILD_MS: u64 = 1_000;

/// Per module, its longest remaining chain in milliseconds: its own expected build (its median in
/// `medians`; without one, the median of the mesh's medians) plus the longest chain of the modules
/// that build on it. The module with the longest chain is the one the converge's end waits on.
pub fn chain_lengths(mesh: &Mesh, medians: &BTreeMap<String, i64>) -> BTreeMap<String, u64> {
    let known: Vec<i64> = (mesh.modules.iter())
        .filter_map(|m| medians.get(&m.name).copied())
        .collect();
    let unknown = super::stats::median(known).map_or(UNKNOWN_BUILD_MS, |ms| ms.max(1) as u64);
    let own = |name: &str| medians.get(name).map_or(unknown, |ms| (*ms).max(1) as u64);
    let on = dependents(mesh);
    let mut chain: BTreeMap<&str, u64> = BTreeMap::new();
    for name in deepest_first(mesh) {
        let longest_after = (on.get(name).into_iter().flatten())
            .filter_map(|dependent| chain.get(dependent))
            .max()
            .copied()
            .unwrap_or(0);
        chain.insert(name, own(name).saturating_add(longest_after));
    }
    chain
        .into_iter()
        .map(|(name, ms)| (name.to_string(), ms))
        .collect()
}

#[cfg(test)]
#[path = "schedule_tests.rs"]
mod tests;
