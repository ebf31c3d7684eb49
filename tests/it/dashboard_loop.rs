//! The loop with fake sources and a fake backend on a TestBackend terminal: keys reach `update`,
//! effects reach the backend, `q` ends the loop.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::dashboard::*;
use futures_util::StreamExt;
use meshtop::app::msg::{
    ActionRequest, LogRequest, PageRequest, PollParams, SourceData, SourceError, SourceId,
};
use meshtop::app::views::{ViewData, ViewRequest};
use meshtop::mesh::builds::BuildRow;
use meshtop::mesh::logs::{LogItem, Stream};
use meshtop::mesh::model::Target;
use meshtop::mesh::progress::{Progress, Step};
use meshtop::sources::{BoxFuture, FnSource, OnDemand, Source};
use meshtop::tui::run_loop;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};
use tokio::sync::{mpsc, oneshot};

#[derive(Default)]
struct Fake {
    started: Mutex<Option<oneshot::Sender<ActionRequest>>>,
    /// The logs view's request, when it came; told once its stream was closed.
    logs_asked: Mutex<Option<oneshot::Sender<LogRequest>>>,
    logs_closed: Mutex<Option<oneshot::Sender<()>>>,
}

impl OnDemand for Fake {
    fn builds_page(&self, _request: PageRequest) -> BoxFuture<Result<Vec<BuildRow>, SourceError>> {
        Box::pin(async { Ok(demo_builds()) })
    }
    fn start(
        &self,
        request: ActionRequest,
        _target: Option<String>,
        progress: mpsc::UnboundedSender<Progress>,
        _cancel: tokio::sync::watch::Receiver<bool>,
    ) -> BoxFuture<Result<String, SourceError>> {
        if let Some(tx) = self.started.lock().unwrap().take() {
            tx.send(request).unwrap();
        }
        progress
            .send(Progress {
                step: Step::Tier,
                module: None,
                text: "tier 0: base".into(),
                payload: meshtop::mesh::progress::Payload::Tier {
                    tier: 0,
                    modules: vec!["base".into()],
                },
            })
            .unwrap();
        Box::pin(async { Ok("done".to_string()) })
    }
    fn view(&self, request: ViewRequest) -> BoxFuture<Result<ViewData, SourceError>> {
        let data = match request {
            ViewRequest::Gc { .. } => ViewData::Gc(Box::new(demo_gc_report())),
            ViewRequest::Stats { .. } => ViewData::Stats(Box::new(demo_stats())),
            ViewRequest::Environments => ViewData::Environments(Box::default()),
            ViewRequest::Timeline { .. } => ViewData::Timeline(Box::default()),
        };
        Box::pin(async move { Ok(data) })
    }
    fn provenance(
        &self,
        _ask: meshtop::app::msg::ProvenanceAsk,
    ) -> BoxFuture<Result<Option<meshtop::mesh::provenance::ReadProvenance>, SourceError>> {
        Box::pin(async { Ok(None) })
    }
    /// Each machine says two lines, then the stream stays open until the view closes it.
    fn logs(
        &self,
        request: LogRequest,
        out: Vec<mpsc::Sender<LogItem>>,
    ) -> BoxFuture<Vec<(String, String)>> {
        let asked = self.logs_asked.lock().unwrap().take();
        let closed = self.logs_closed.lock().unwrap().take();
        Box::pin(async move {
            for (machine, out) in request.machines.iter().zip(&out) {
                for n in 1..=2 {
                    let item =
                        LogItem::line(Stream::Stdout, None, &format!("{} line {n}", machine.name));
                    out.send(item).await.unwrap();
                }
            }
            if let Some(asked) = asked {
                asked.send(request).unwrap();
            }
            futures_util::future::join_all(out.iter().map(|o| o.closed())).await;
            if let Some(closed) = closed {
                let _ = closed.send(());
            }
            Vec::new()
        })
    }
}

fn source(id: SourceId, answer: fn() -> Result<SourceData, SourceError>) -> Arc<dyn Source> {
    Arc::new(FnSource {
        id,
        interval: Duration::from_secs(3600),
        answer: move |_: &PollParams| answer(),
    })
}

/// A key pressed without modifiers, as the terminal's event stream yields it.
fn special(code: KeyCode) -> color_eyre::Result<Event> {
    Ok(Event::Key(KeyEvent::new(code, KeyModifiers::NONE)))
}

fn key(c: char) -> color_eyre::Result<Event> {
    special(KeyCode::Char(c))
}

/// The last frame drawn, as one string.
fn screen_of(terminal: &Terminal<TestBackend>) -> String {
    terminal
        .backend()
        .buffer()
        .content()
        .iter()
        .map(|c| c.symbol())
        .collect()
}

#[tokio::test]
async fn keys_reach_the_backend_and_q_quits() {
    let state = empty_state(&demo_mesh(Target::Docker), false);
    // No plan answers here: `c` cannot know the module would not build, so it asks first.
    let sources = vec![
        source(SourceId::Record, || {
            Ok(SourceData::Record(demo_record(), None))
        }),
        source(SourceId::Host, || Err(source_failed("no daemon here"))),
        source(SourceId::Machines, || Err(source_failed("not wired yet"))),
    ];
    let (started_tx, started_rx) = oneshot::channel();
    let backend: Arc<dyn OnDemand> = Arc::new(Fake {
        started: Mutex::new(Some(started_tx)),
        ..Fake::default()
    });
    // `c`, then → Enter on the confirm, converges the selected module; `q` comes once the backend
    // was asked.
    let quit_after_start = futures_util::stream::once(async move {
        let request = started_rx.await.unwrap();
        assert_eq!(
            request,
            ActionRequest::Converge {
                modules: Some(vec!["base".into()]),
                force: false
            }
        );
        key('q')
    });
    let events =
        futures_util::stream::iter([key('c'), special(KeyCode::Right), special(KeyCode::Enter)])
            .chain(quit_after_start)
            .boxed();
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        run_loop(&mut terminal, state, sources, backend, events, None),
    )
    .await
    .expect("the loop ends on q")
    .unwrap();
    let screen = screen_of(&terminal);
    assert!(
        screen.contains("meshtop · demo · target docker"),
        "{screen}"
    );
}

#[tokio::test]
async fn the_loop_ends_with_its_event_stream() {
    let state = empty_state(&demo_mesh(Target::Docker), true);
    let backend: Arc<dyn OnDemand> = Arc::new(Fake::default());
    let mut terminal = Terminal::new(TestBackend::new(60, 10)).unwrap();
    let events = futures_util::stream::iter(Vec::<color_eyre::Result<Event>>::new()).boxed();
    // No key, no source: the stream's end alone ends the loop (a loop that waited on would hang
    // here until the timeout), after one drawn frame.
    tokio::time::timeout(
        Duration::from_secs(30),
        run_loop(&mut terminal, state, Vec::new(), backend, events, None),
    )
    .await
    .expect("the loop ends when its event stream ends")
    .unwrap();
    let screen = screen_of(&terminal);
    assert!(screen.contains("meshtop · demo"), "{screen}");
}

/// `x` opens the gc view: the loop asks the backend for it (Effect::FetchView), the answer comes
/// back as a message, and `x` there, → and Enter start the sweep of exactly what it listed.
#[tokio::test]
async fn the_gc_view_is_read_through_the_backend_and_its_sweep_started() {
    let state = empty_state(&demo_mesh(Target::Docker), false);
    let (started_tx, started_rx) = oneshot::channel();
    let backend: Arc<dyn OnDemand> = Arc::new(Fake {
        started: Mutex::new(Some(started_tx)),
        ..Fake::default()
    });
    // Until the view's answer has arrived, `x` in it only says it is still reading (and → and
    // Enter mean nothing in a detail): the round is repeated until the sweep starts.
    let rounds =
        futures_util::stream::unfold((Some(started_rx), 0), move |(rx, round)| async move {
            let mut rx = rx?;
            assert!(round < 500, "the sweep never started");
            let started = tokio::select! {
                request = &mut rx => Some(request.unwrap()),
                () = tokio::time::sleep(Duration::from_millis(20)) => None,
            };
            match started {
                Some(request) => {
                    assert_eq!(
                        request,
                        ActionRequest::Gc {
                            keep_newest: 3,
                            grace_ms: 3_600_000,
                            confirmed: demo_gc_report().candidates,
                        }
                    );
                    Some((vec![key('q')], (None, round)))
                }
                None => Some((
                    vec![key('x'), special(KeyCode::Right), special(KeyCode::Enter)],
                    (Some(rx), round + 1),
                )),
            }
        })
        .flat_map(futures_util::stream::iter);
    let events = futures_util::stream::iter([key('x')]).chain(rounds).boxed();
    let mut terminal = Terminal::new(TestBackend::new(100, 30)).unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        run_loop(&mut terminal, state, Vec::new(), backend, events, None),
    )
    .await
    .expect("the loop ends on q")
    .unwrap();
}

/// `l` on base: the loop asks the backend for its machines' logs (Effect::FollowLogs); Esc closes
/// the view and its stream (the backend sees `out` closed); `l` again streams the lines to the screen
/// in batches.
#[tokio::test]
async fn l_streams_the_machines_lines_to_the_view_and_esc_closes_the_stream() {
    enum Stage {
        Asking(oneshot::Receiver<LogRequest>, oneshot::Receiver<()>, u32),
        Closing(oneshot::Receiver<()>),
        Reopened,
        Done,
    }
    let state = empty_state(&demo_mesh(Target::Docker), false);
    let sources = vec![source(SourceId::Machines, || {
        Ok(SourceData::MachinesAgainst(demo_record(), demo_machines()))
    })];
    let (asked_tx, asked_rx) = oneshot::channel();
    let (closed_tx, closed_rx) = oneshot::channel();
    let backend: Arc<dyn OnDemand> = Arc::new(Fake {
        logs_asked: Mutex::new(Some(asked_tx)),
        logs_closed: Mutex::new(Some(closed_tx)),
        ..Fake::default()
    });
    let esc = || Ok(Event::Key(KeyEvent::new(KeyCode::Esc, KeyModifiers::NONE)));
    const LINES: [&str; 2] = ["base-1 | base-1 line 2", "base-2 | base-2 line 2"];
    let (screen_backend, seen) = common::seen_screen::SeenBackend::new(100, 30);
    let events =
        futures_util::stream::unfold(Stage::Asking(asked_rx, closed_rx, 0), move |stage| {
            let seen = seen.clone();
            async move {
                match stage {
                    Stage::Asking(mut asked, closed, round) => {
                        assert!(round < 500, "the logs were never asked for");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        match asked.try_recv() {
                            Ok(request) => {
                                let names: Vec<String> =
                                    request.machines.iter().map(|m| m.name.clone()).collect();
                                assert_eq!(names, ["base-1", "base-2"]);
                                assert!(request.ask.follow);
                                Some((vec![esc()], Stage::Closing(closed)))
                            }
                            // Until the machines answered, `l` only says base has none.
                            Err(_) => {
                                Some((vec![key('l')], Stage::Asking(asked, closed, round + 1)))
                            }
                        }
                    }
                    Stage::Closing(closed) => {
                        // Its sender is dropped with the read (Esc aborts it) or sent once the read
                        // saw `out` closed: either way the stream stopped.
                        let _ = tokio::time::timeout(Duration::from_secs(10), closed)
                            .await
                            .expect("esc stops the stream");
                        Some((vec![key('l')], Stage::Reopened))
                    }
                    Stage::Reopened => {
                        // The stream ends (and the loop with it) once the reopened logs are drawn.
                        let started = std::time::Instant::now();
                        while !LINES.iter().all(|line| seen.text().contains(line)) {
                            assert!(
                                started.elapsed() < Duration::from_secs(20),
                                "the reopened logs were never drawn: {}",
                                seen.text()
                            );
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        Some((Vec::new(), Stage::Done))
                    }
                    Stage::Done => None,
                }
            }
        })
        .flat_map(futures_util::stream::iter)
        .boxed();
    let mut terminal = Terminal::new(screen_backend).unwrap();
    tokio::time::timeout(
        Duration::from_secs(30),
        run_loop(&mut terminal, state, sources, backend, events, None),
    )
    .await
    .expect("the loop ends with its events")
    .unwrap();
    let screen = common::dashboard::text(terminal.backend().buffer());
    assert!(
        screen.contains("logs · module base · 2 machines · following"),
        "{screen}"
    );
    for line in LINES {
        assert!(screen.contains(line), "{line}: {screen}");
    }
}
