//! Watching the build contexts: the native API (inotify here), or polling when the native
//! watches run out (with a message saying so). Changes come in bursts (an editor's save is several
//! events; a checkout is thousands): [`ContextWatcher::next_burst`] waits for a quiet period and
//! answers once with every module touched.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{Config, Event, EventKind, PollWatcher, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::mesh::model::Mesh;

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
    _watcher: Box<dyn Watcher + Send>,
}

fn handler(
    tx: mpsc::UnboundedSender<PathBuf>,
) -> impl FnMut(notify::Result<Event>) + Send + 'static {
    move |event: notify::Result<Event>| {
        let Ok(event) = event else { return };
        if matches!(event.kind, EventKind::Access(_)) {
            return;
        }
        for path in event.paths {
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
    ) -> Result<ContextWatcher, String> {
        let contexts: Vec<(String, PathBuf)> = mesh
            .modules
            .iter()
            .filter(|m| modules.is_none_or(|names| names.contains(&m.name)))
            .map(|m| (m.name.clone(), m.context.clone()))
            .collect();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut fallback = None;
        let watcher: Box<dyn Watcher + Send> = match native(&contexts, tx.clone()) {
            Ok(watcher) => watcher,
            Err(error) => {
                fallback = Some(format!(
                    "the system's file watches ran out or failed ({error}); watching by polling every {}s instead (raise fs.inotify.max_user_watches to watch natively)",
                    POLL_EVERY.as_secs()
                ));
                let config = Config::default().with_poll_interval(POLL_EVERY);
                let mut poller = PollWatcher::new(handler(tx), config)
                    .map_err(|e| format!("cannot watch the contexts: {e}"))?;
                for (_, context) in &contexts {
                    poller
                        .watch(context, RecursiveMode::Recursive)
                        .map_err(|e| format!("cannot watch {}: {e}", context.display()))?;
                }
                Box::new(poller)
            }
        };
        Ok(ContextWatcher {
            rx,
            contexts,
            ignored,
            fallback,
            _watcher: watcher,
        })
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
                touched.insert(module.clone());
            }
        }
    }
}

fn native(
    contexts: &[(String, PathBuf)],
    tx: mpsc::UnboundedSender<PathBuf>,
) -> Result<Box<dyn Watcher + Send>, notify::Error> {
    let mut watcher = RecommendedWatcher::new(handler(tx), Config::default())?;
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
