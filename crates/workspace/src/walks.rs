//! What a watched plan remembers of each module's walk: while the contexts are watched, a module
//! whose context reported no change since its last walk is not walked again (not even its stat
//! data looked at); a save walks only the modules it touched. A walk is trusted for
//! [`TRUST_FOR`] at most: past that the next plan walks again (a slow safety net for a change
//! the watcher missed). Without a watcher nothing is remembered: every plan walks every context.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::inputs::Walked;

/// How long a walk answers for a watched context that reported no change.
pub(crate) const TRUST_FOR: Duration = Duration::from_secs(300);

/// The walks of a mesh's modules, kept between plans while their contexts are watched.
#[derive(Default)]
pub struct WalkMemo {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    watching: bool,
    /// Per module: bumped by every reported change (a walk that began before it is not kept).
    generation: HashMap<String, u64>,
    kept: HashMap<String, Kept>,
    /// Per module: how many walks were made (what a test counts).
    walks: HashMap<String, u64>,
}

struct Kept {
    context: PathBuf,
    dockerfile: String,
    generation: u64,
    at: Instant,
    walked: Walked,
}

/// Taken before a walk begins: the module's generation then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ticket(u64);

impl WalkMemo {
    pub fn new() -> WalkMemo {
        WalkMemo::default()
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The contexts are watched (walks are kept), or no longer (everything is forgotten).
    pub(crate) fn set_watching(&self, watching: bool) {
        let mut inner = self.inner();
        inner.watching = watching;
        if !watching {
            inner.kept.clear();
        }
    }

    /// The watcher saw `modules`' contexts change: their next plan walks them again.
    pub(crate) fn changed<'a>(&self, modules: impl IntoIterator<Item = &'a str>) {
        let mut inner = self.inner();
        for module in modules {
            *inner.generation.entry(module.to_string()).or_default() += 1;
            inner.kept.remove(module);
        }
    }

    /// The walk kept for `module`, when its context (and Dockerfile) are the same, no change was
    /// reported since, and it is younger than [`TRUST_FOR`].
    pub fn get(&self, module: &str, context: &Path, dockerfile: &str) -> Option<Walked> {
        let inner = self.inner();
        if !inner.watching {
            return None;
        }
        let generation = inner.generation.get(module).copied().unwrap_or(0);
        inner
            .kept
            .get(module)
            .filter(|k| {
                k.generation == generation
                    && k.context == context
                    && k.dockerfile == dockerfile
                    && k.at.elapsed() < TRUST_FOR
            })
            .map(|k| k.walked.clone())
    }

    /// Take before walking `module`: a change reported during the walk leaves it unkept.
    pub fn ticket(&self, module: &str) -> Ticket {
        Ticket(self.inner().generation.get(module).copied().unwrap_or(0))
    }

    /// A walk of `module` ended (counted); it is kept unless a change was reported since `ticket`.
    pub fn keep(
        &self,
        module: &str,
        context: &Path,
        dockerfile: &str,
        ticket: Ticket,
        walked: &Walked,
    ) {
        let mut inner = self.inner();
        *inner.walks.entry(module.to_string()).or_default() += 1;
        let generation = inner.generation.get(module).copied().unwrap_or(0);
        if !inner.watching || generation != ticket.0 {
            return;
        }
        inner.kept.insert(
            module.to_string(),
            Kept {
                context: context.to_path_buf(),
                dockerfile: dockerfile.to_string(),
                generation,
                at: Instant::now(),
                walked: walked.clone(),
            },
        );
    }

    /// How many times `module`'s context was walked through this memo.
    pub fn walks(&self, module: &str) -> u64 {
        self.inner().walks.get(module).copied().unwrap_or(0)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn walked(dockerfile: &str) -> Walked {
        Walked {
            files: BTreeMap::new().into(),
            dockerfile: dockerfile.into(),
        }
    }

    #[test]
    fn a_walk_is_kept_only_while_watched_and_until_a_change_is_reported() {
        let memo = WalkMemo::new();
        let ctx = Path::new("/c/api");
        let ticket = memo.ticket("api");
        memo.keep("api", ctx, "Dockerfile", ticket, &walked("a"));
        assert_eq!(memo.get("api", ctx, "Dockerfile"), None, "not watching");

        memo.set_watching(true);
        let ticket = memo.ticket("api");
        memo.keep("api", ctx, "Dockerfile", ticket, &walked("a"));
        assert_eq!(memo.get("api", ctx, "Dockerfile"), Some(walked("a")));
        assert_eq!(memo.get("api", ctx, "other/Dockerfile"), None);
        assert_eq!(memo.get("api", Path::new("/c/other"), "Dockerfile"), None);

        memo.changed(["api"]);
        assert_eq!(memo.get("api", ctx, "Dockerfile"), None, "changed");

        // A change reported while a walk ran: what it read may predate the change.
        let ticket = memo.ticket("api");
        memo.changed(["api"]);
        memo.keep("api", ctx, "Dockerfile", ticket, &walked("b"));
        assert_eq!(memo.get("api", ctx, "Dockerfile"), None, "raced");
        assert_eq!(memo.walks("api"), 3);

        let ticket = memo.ticket("api");
        memo.keep("api", ctx, "Dockerfile", ticket, &walked("c"));
        memo.set_watching(false);
        assert_eq!(memo.get("api", ctx, "Dockerfile"), None, "watching stopped");
    }
}
