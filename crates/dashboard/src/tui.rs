//! The terminal and the loop at the top: it imports the app (state), the sources and the widgets.
//! The terminal side: set-up and restore (also on error and on panic), logging to a file, and the
//! select loop over key events, source messages and the clock. It redraws only when the state
//! changed or a key came.

use std::io::{self, BufWriter, Stdout};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use color_eyre::eyre::{WrapErr, eyre};
use futures_util::StreamExt;
use ratatui::Terminal;
use ratatui::backend::{Backend as TerminalBackend, CrosstermBackend};
use ratatui::crossterm::event::{Event, EventStream};
use ratatui::crossterm::execute;
use ratatui::crossterm::terminal::{EnterAlternateScreen, enable_raw_mode};
use tokio::sync::{mpsc, watch};

use crate::mesh::model::Mesh;
use crate::timefmt;
use crate::workspace::watch::{ContextWatcher, own_files};

use crate::app::keys::{KeyTable, Settings};
use crate::app::msg::{Effect, Msg};
use crate::app::state::{AppState, Context};
use crate::app::update::update;
use crate::sources::{self, OnDemand, Overrides, Pollers, Session, Source};

/// What `meshtop` with no subcommand opens.
#[derive(Debug, Clone)]
pub struct DashboardOptions {
    pub mesh: Mesh,
    pub state_path: PathBuf,
    pub readonly: bool,
    /// Ring the bell when a followed converge fails or a long one finishes (`--no-bell` off).
    pub bell: bool,
    /// Where the command line's flags point the targets (the seam reads them).
    pub overrides: Overrides,
    /// The target the main view shows first (`--target`, else the mesh's first).
    pub target: String,
}

/// `<config dir>/meshtop/keys.toml`.
pub(crate) fn keys_path() -> Option<PathBuf> {
    directories::BaseDirs::new().map(|dirs| dirs.config_dir().join("meshtop").join("keys.toml"))
}

/// The key table with the user's overrides, and what was wrong with them.
pub(crate) fn load_keys(readonly: bool, path: Option<&Path>) -> (KeyTable, Settings, Vec<String>) {
    let Some(path) = path else {
        return (KeyTable::new(readonly), Settings::default(), Vec::new());
    };
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let (table, mut warnings) = KeyTable::with_overrides(readonly, &text);
            let (settings, more) = KeyTable::settings_of(&text);
            warnings.extend(more);
            (table, settings, warnings)
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            (KeyTable::new(readonly), Settings::default(), Vec::new())
        }
        Err(error) => (
            KeyTable::new(readonly),
            Settings::default(),
            vec![format!(
                "cannot read {}: {error}; using the default keys",
                path.display()
            )],
        ),
    }
}

/// The header's context (the target is the state's own: [`Session::describe_target`]).
pub(crate) fn context_of(opts: &DashboardOptions) -> Context {
    Context {
        mesh: opts.mesh.name.clone(),
        state_path: opts.state_path.display().to_string(),
        registry: opts.mesh.registry.as_ref().map(|r| r.host.clone()),
    }
}

/// Logs go to `<state dir>/meshtop/meshtop.log` (the cache dir where there is no state dir),
/// owner-only as the state database: the directory 0700, the file 0600.
fn init_logging() -> Option<tracing_appender::non_blocking::WorkerGuard> {
    use crate::workspace::own_files;
    let dir = own_files::log_dir()?;
    own_files::prepare_log(&dir).ok()?;
    let (writer, guard) =
        tracing_appender::non_blocking(tracing_appender::rolling::never(&dir, own_files::LOG_FILE));
    let filter = tracing_subscriber::EnvFilter::try_from_env("MESHTOP_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let installed = tracing_subscriber::fmt()
        .with_writer(writer)
        .with_ansi(false)
        .with_env_filter(filter)
        .try_init();
    installed.ok().map(|()| guard)
}

/// A task that ends with the loop.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Restores the terminal when dropped: on quit, on error, and while unwinding.
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

fn install_hooks(no_color: bool) {
    let theme = if no_color {
        color_eyre::config::Theme::new()
    } else {
        color_eyre::config::Theme::dark()
    };
    let (panic_hook, eyre_hook) = color_eyre::config::HookBuilder::default()
        .theme(theme)
        .into_hooks();
    // A second dashboard in one process keeps the first hooks.
    let _ = eyre_hook.install();
    let panic_hook = panic_hook.into_panic_hook();
    std::panic::set_hook(Box::new(move |info| {
        ratatui::restore();
        panic_hook(info);
    }));
}

/// Open the dashboard on a mesh and run it until the user quits.
pub async fn run_dashboard(opts: DashboardOptions) -> color_eyre::Result<()> {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    install_hooks(no_color);
    let _log = init_logging();
    let (keys, settings, warnings) = load_keys(opts.readonly, keys_path().as_deref());
    let mesh = Arc::new(opts.mesh.clone());
    let session = Session::new(
        mesh.clone(),
        opts.state_path.clone(),
        opts.overrides.clone(),
    );
    let mut state = AppState::new(
        &opts.mesh,
        session.describe_target(&opts.target).await,
        context_of(&opts),
        opts.readonly,
        keys,
        timefmt::now_ms(),
    );
    state.warnings = warnings;
    state.no_color = no_color;
    // `--no-bell` wins; otherwise keys.toml's `bell` setting, otherwise on.
    state.bell = opts.bell && settings.bell.unwrap_or(true);
    state.targets = opts
        .mesh
        .target_names()
        .into_iter()
        .map(|name| {
            if name == state.target.name {
                state.target.clone()
            } else {
                session.describe_offline(name)
            }
        })
        .collect();
    let sources = sources::all(&session);
    let walks = session.walks.clone();
    let on_demand: Arc<dyn OnDemand> = Arc::new(sources::actions::Actions { session });
    tracing::info!(mesh = %mesh.name, state = %opts.state_path.display(), readonly = opts.readonly, "dashboard opens");

    enable_raw_mode().wrap_err("cannot put the terminal in raw mode (is this a terminal?)")?;
    let _restore = Restore;
    execute!(io::stdout(), EnterAlternateScreen).wrap_err("cannot enter the alternate screen")?;
    let mut terminal: Terminal<CrosstermBackend<BufWriter<Stdout>>> =
        Terminal::new(CrosstermBackend::new(frame_writer(io::stdout())))
            .wrap_err("cannot open the terminal")?;
    let size = terminal.size().wrap_err("cannot read the terminal size")?;
    state.size = (size.width, size.height);
    let events = EventStream::new()
        .map(|event| event.map_err(|e| eyre!("reading the terminal failed: {e}")));
    let quiet = std::time::Duration::from_millis(300);
    let watcher = match ContextWatcher::start(&mesh, None, own_files(&opts.state_path)) {
        Ok(mut watcher) => {
            state.warnings.extend(watcher.fallback.clone());
            // A save re-walks only the modules it touched.
            watcher.remember_walks(walks);
            Some(watcher)
        }
        Err(error) => {
            state.warnings.push(format!(
                "{error}: saves show with the next plan poll (every minute) instead"
            ));
            None
        }
    };
    // SIGTERM and SIGHUP (a closed terminal window, `kill`) end the dashboard as `q` does: the
    // loop stops, `_restore` puts the terminal back.
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).wrap_err("cannot listen for SIGTERM")?;
    let mut hangup = signal(SignalKind::hangup()).wrap_err("cannot listen for SIGHUP")?;
    let outcome = tokio::select! {
        outcome = run_loop(
            &mut terminal,
            state,
            sources,
            on_demand,
            events,
            watcher.map(|w| (w, quiet)),
        ) => outcome,
        _ = terminate.recv() => {
            tracing::info!("SIGTERM: the dashboard closes");
            Ok(())
        }
        _ = hangup.recv() => {
            tracing::info!("SIGHUP: the dashboard closes");
            Ok(())
        }
    };
    tracing::info!(ok = outcome.is_ok(), "dashboard closes");
    outcome
}

/// What a frame is written with: held until the frame ends (the draw flushes it), so it reaches
/// the terminal in one write. Stdout alone is line-buffered and a frame has no newline: it went out
/// in 1 KiB pieces, each a write and a wake-up of the terminal, which could show half a frame.
pub(crate) fn frame_writer<W: io::Write>(out: W) -> BufWriter<W> {
    BufWriter::with_capacity(FRAME_BYTES, out)
}

/// Room for a whole frame of a large terminal (a cell with its colours: about 20 bytes).
const FRAME_BYTES: usize = 256 * 1024;

/// The terminal bell, and the desktop-notification escape (OSC 777, understood by several
/// terminals and ignored by the rest) with what happened.
fn ring(text: &str) {
    use std::io::Write;
    let text: String = text.chars().filter(|c| !c.is_control()).take(200).collect();
    let mut out = io::stdout();
    let _ = write!(out, "\x07\x1b]777;notify;meshtop;{text}\x07");
    let _ = out.flush();
}

/// The loop: draw when dirty, then wait for a key, a source message or the clock.
pub async fn run_loop<B, E>(
    terminal: &mut Terminal<B>,
    mut state: AppState,
    sources: Vec<Arc<dyn Source>>,
    on_demand: Arc<dyn OnDemand>,
    mut events: E,
    watcher: Option<(ContextWatcher, Duration)>,
) -> color_eyre::Result<()>
where
    B: TerminalBackend,
    B::Error: Send + Sync + 'static,
    E: futures_util::Stream<Item = color_eyre::Result<Event>> + Unpin,
{
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (params_tx, params_rx) = watch::channel(state.poll_params());
    let pollers = Pollers::spawn(sources, tx.clone(), params_rx, timefmt::now_ms);
    // A save reaches the screen through a plan poll asked for now (the timed one is a safety net).
    let _watching = watcher.map(|(mut watcher, quiet)| {
        let tx = tx.clone();
        AbortOnDrop(tokio::spawn(async move {
            while let Some(modules) = watcher.next_burst(quiet).await {
                if tx
                    .send(Msg::InputsChanged(modules.into_iter().collect()))
                    .is_err()
                {
                    return;
                }
            }
        }))
    });
    let scope = state.builds.scope.clone();
    sources::poll::fetch_builds(&on_demand, state.builds.rescope(scope), tx.clone());
    // The signed provenance of running artifacts without a build row here, a few at once.
    let provenance = sources::provenance::ProvenanceReader::default();
    // Stops the action started here (quitting while it runs).
    let mut cancel: Option<watch::Sender<bool>> = None;
    // The logs view's streams, while it is open (dropped: they stop).
    let mut log_streams: Option<AbortOnDrop> = None;
    let mut clock = tokio::time::interval(Duration::from_secs(1));
    clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if state.dirty {
            terminal
                .draw(|frame| crate::widgets::draw(frame, &state))
                .map_err(|e| eyre!("drawing failed: {e}"))?;
            state.dirty = false;
        }
        let msg = tokio::select! {
            event = events.next() => match event {
                Some(Ok(Event::Key(key))) => Msg::Key(key),
                Some(Ok(Event::Resize(width, height))) => Msg::Resize(width, height),
                Some(Ok(_)) => continue,
                Some(Err(error)) => return Err(error),
                None => return Ok(()),
            },
            Some(msg) = rx.recv() => msg,
            _ = clock.tick() => Msg::Tick(timefmt::now_ms()),
        };
        for effect in update(&mut state, msg) {
            match effect {
                Effect::Quit => return Ok(()),
                Effect::Bell(text) => ring(&text),
                Effect::PollNow(ids) => pollers.poll_now(&ids),
                Effect::FetchBuilds(request) => {
                    sources::poll::fetch_builds(&on_demand, request, tx.clone())
                }
                Effect::FetchView(request) => {
                    sources::views::fetch(&on_demand, request, tx.clone())
                }
                Effect::Start(request) => {
                    tracing::info!(action = %request.label(), "action starts");
                    let shown = Some(state.target.name.clone());
                    cancel = Some(sources::poll::start_action(
                        &on_demand,
                        request,
                        shown,
                        tx.clone(),
                    ));
                }
                Effect::FollowLogs(request) => {
                    let streams = sources::logs::follow(&on_demand, request, tx.clone());
                    // The view's earlier streams (the other container) stop here.
                    drop(log_streams.replace(AbortOnDrop(streams)));
                }
                Effect::StopLogs => drop(log_streams.take()),
                Effect::FetchProvenance(asks) => provenance.fetch(&on_demand, asks, tx.clone()),
                Effect::CancelAction => {
                    if let Some(cancel) = &cancel {
                        tracing::info!("the running action is asked to stop");
                        let _ = cancel.send(true);
                    }
                }
            }
        }
        params_tx.send_if_modified(|params| {
            let now = state.poll_params();
            let changed = *params != now;
            *params = now;
            changed
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::cell::Cell;
    use std::io::{self, Write};
    use std::rc::Rc;

    use ratatui::Terminal;
    use ratatui::backend::CrosstermBackend;
    use ratatui::layout::Rect;
    use ratatui::style::{Color, Style};

    /// Counts the writes that reach it.
    struct Writes(Rc<Cell<usize>>);

    impl Write for Writes {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.set(self.0.get() + 1);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_whole_frame_reaches_the_terminal_in_one_write() {
        let writes = Rc::new(Cell::new(0));
        let backend = CrosstermBackend::new(super::frame_writer(Writes(writes.clone())));
        let mut terminal = Terminal::with_options(
            backend,
            ratatui::TerminalOptions {
                viewport: ratatui::Viewport::Fixed(Rect::new(0, 0, 160, 50)),
            },
        )
        .unwrap();
        // Every cell changes, in alternating colours: tens of KiB of output.
        let frame = |terminal: &mut Terminal<_>, shift: usize| {
            terminal
                .draw(|frame| {
                    let buf = frame.buffer_mut();
                    for y in 0..50u16 {
                        for x in 0..160u16 {
                            let n = usize::from(x) + usize::from(y) + shift;
                            let color = if n.is_multiple_of(2) {
                                Color::Red
                            } else {
                                Color::Blue
                            };
                            buf[(x, y)]
                                .set_char(char::from(b'a' + (n % 26) as u8))
                                .set_style(Style::default().fg(color));
                        }
                    }
                })
                .unwrap();
        };
        frame(&mut terminal, 0);
        let before = writes.get();
        frame(&mut terminal, 1);
        let writes = writes.get() - before;
        assert_eq!(
            writes, 1,
            "a frame of 8,000 changed cells went out in {writes} writes"
        );
    }
}
