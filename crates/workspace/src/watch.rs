//! Watching the build contexts: the native API (inotify here), or polling when the native
//! watches run out (with a message saying so). Changes come in bursts (an editor's save is several
//! events; a checkout is thousands): [`ContextWatcher::next_burst`] waits for a quiet period and
//! answers once with every module touched.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use notify::{Config, Event, EventKind, PollWatcher, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use super::walks::WalkMemo;
use crate::mesh::model::Mesh;

/// Why the contexts cannot be watched, even by polling.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot watch the contexts: {0}")]
    Start(#[source] notify::Error),
    #[error("cannot watch {}: {error}", context.display())]
    Context {
        context: PathBuf,
        #[source]
        error: notify::Error,
    },
}

/// How often the polling fallback scans the contexts.
const POLL_EVERY: Duration = Duration::from_secs(2);

/// The watches on a mesh's contexts.
pub struct ContextWatcher {
    rx: mpsc::UnboundedReceiver<PathBuf>,
    /// (module, context) pairs, to map a changed path to the modules it is an input of.
    contexts: Vec<(String, PathBuf)>,
    /// Paths that are never inputs (meshtop's own state database and log, beside a context).
    ignored: Vec<PathBuf>,
    /// Why watching fell back to polling, when it did.
    pub fallback: Option<String>,
    /// Told of every change as it is seen (before the quiet period ends): see [`Self::remember_walks`].
    memo: Option<Arc<WalkMemo>>,
    _watcher: Box<dyn Watcher + Send>,
}

/// Passes on the paths of every event; an event the watcher could not follow (an error, or
/// events lost in an overflowing queue) counts as a change of every context.
fn handler(
    tx: mpsc::UnboundedSender<PathBuf>,
    roots: Vec<PathBuf>,
) -> impl FnMut(notify::Result<Event>) + Send + 'static {
    move |event: notify::Result<Event>| {
        let paths = match event {
            Ok(event) if event.need_rescan() => roots.clone(),
            Ok(event) if matches!(event.kind, EventKind::Access(_)) => return,
            Ok(event) => event.paths,
            Err(error) => {
                tracing::debug!("the context watcher erred: {error}");
                roots.clone()
            }
        };
        for path in paths {
            let _ = tx.send(path);
        }
    }
}

impl ContextWatcher {
    /// Watch every context of `mesh` (or of `modules` only). `ignored` are files whose changes
    /// never count (the state database and its `-wal`/`-shm`, the log).
    pub fn start(
        mesh: &Mesh,
        modules: Option<&BTreeSet<String>>,
        ignored: Vec<PathBuf>,
    ) -> Result<ContextWatcher, WatchError> {
        let contexts: Vec<(String, PathBuf)> = mesh
            .modules
            .iter()
            .filter(|m| modules.is_none_or(|names| names.contains(&m.name)))
            .map(|m| (m.name.clone(), m.context.clone()))
            .collect();
        let (tx, rx) = mpsc::unbounded_channel();
        let roots: Vec<PathBuf> = contexts.iter().map(|(_, c)| c.clone()).collect();
        let mut fallback = None;
        let watcher: Box<dyn Watcher + Send> = match native(&contexts, tx.clone(), roots.clone()) {
            Ok(watcher) => watcher,
            Err(error) => {
                fallback = Some(format!(
                    "the system's file watches ran out or failed ({error}); watching by polling every {}s instead (raise fs.inotify.max_user_watches to watch natively)",
                    POLL_EVERY.as_secs()
                ));
                let config = Config::default().with_poll_interval(POLL_EVERY);
                let mut poller =
                    PollWatcher::new(handler(tx, roots), config).map_err(WatchError::Start)?;
                for (_, context) in &contexts {
                    poller
                        .watch(context, RecursiveMode::Recursive)
                        .map_err(|error| WatchError::Context {
                            context: context.clone(),
                            error,
                        })?;
                }
                Box::new(poller)
            }
        };
        Ok(ContextWatcher {
            rx,
            contexts,
            ignored,
            fallback,
            memo: None,
            _watcher: watcher,
        })
    }

    /// Plans may keep their walks in `memo` while this watcher runs: every change it sees makes
    /// the touched modules walk again (told at once, not after the quiet period).
    pub fn remember_walks(&mut self, memo: Arc<WalkMemo>) {
        memo.set_watching(true);
        self.memo = Some(memo);
    }

    /// The modules whose contexts changed, once `quiet` passed with no further change.
    /// None when the watcher stopped.
    pub async fn next_burst(&mut self, quiet: Duration) -> Option<BTreeSet<String>> {
        loop {
            let mut touched = BTreeSet::new();
            let first = self.rx.recv().await?;
            self.note(&first, &mut touched);
            loop {
                match tokio::time::timeout(quiet, self.rx.recv()).await {
                    Ok(Some(path)) => self.note(&path, &mut touched),
                    Ok(None) => return None,
                    Err(_) => break,
                }
            }
            if !touched.is_empty() {
                return Some(touched);
            }
        }
    }

    fn note(&self, path: &Path, touched: &mut BTreeSet<String>) {
        if self.ignored.iter().any(|ignored| path == ignored) {
            return;
        }
        for (module, context) in &self.contexts {
            if path.starts_with(context) {
                if let Some(memo) = &self.memo {
                    memo.changed([module.as_str()]);
                }
                touched.insert(module.clone());
            }
        }
    }
}

impl Drop for ContextWatcher {
    /// Nothing watches any more: plans walk every context again.
    fn drop(&mut self) {
        if let Some(memo) = &self.memo {
            memo.set_watching(false);
        }
    }
}

fn native(
    contexts: &[(String, PathBuf)],
    tx: mpsc::UnboundedSender<PathBuf>,
    roots: Vec<PathBuf>,
) -> Result<Box<dyn Watcher + Send>, notify::Error> {
    let mut watcher = RecommendedWatcher::new(handler(tx, roots), Config::default())?;
    for (_, context) in contexts {
        watcher.watch(context, RecursiveMode::Recursive)?;
    }
    Ok(Box::new(watcher))
}

/// meshtop's own files beside `state`: never inputs, whatever context holds them.
pub fn own_files(state: &Path) -> Vec<PathBuf> {
    let mut files = vec![state.to_path_buf()];
    for suffix in ["-wal", "-shm", "-journal"] {
        let mut name = state.as_os_str().to_owned();
        name.push(suffix);
        files.push(PathBuf::from(name));
    }
    files
}
