//! A container's log through the daemon's logs stream (`GET /containers/{name}/logs`, read with
//! timestamps: the json-file driver keeps every run of a container, so the time of each line
//! against the container's `State.StartedAt` tells the current run from the earlier ones).
//!
//! A follow keeps going across what happens to the container: a stop (its exit code and time are
//! said, and the follow waits for it to run again), a send (the name now belongs to another
//! container: that one is followed and the line says so), a removal or a dropped connection (said,
//! and tried again with backoff up to [`LONGEST_WAIT`], never in a busy loop).

use std::time::Duration;

use bollard::container::LogOutput;
use bollard::models::ContainerInspectResponse;
use bollard::query_parameters::LogsOptionsBuilder;
use futures_util::StreamExt;
use tokio::sync::mpsc::Sender;

use super::{Daemon, DaemonError};
use crate::mesh::logs::{
    LogAsk, LogItem, RunEnd, RunEnds, Stream, at_or_after, newest, split_runs, split_time,
};

/// The first wait after a cut stream; it doubles up to [`LONGEST_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(250);
/// The longest wait between two tries of a cut stream.
const LONGEST_WAIT: Duration = Duration::from_secs(4);

/// What the daemon says of the container a name stands for now.
struct Seen {
    id: String,
    image: String,
    /// Running, or between two runs of its restart policy.
    running: bool,
    /// Between two runs of its restart policy (its last run ended: `Restarting (3)`).
    restarting: bool,
    /// When the container was made (its first run's events come after).
    created: String,
    started_at: String,
    finished_at: Option<String>,
    exit_code: i64,
    restarts: i64,
    /// Where the current run's lines begin in the log (see [`run_cut`]).
    cut: String,
}

/// How long before `State.StartedAt` a run's first lines may be taken: the daemon sets it once
/// the process runs, and a process that prints at once is heard before that.
const START_SLACK: chrono::Duration = chrono::Duration::seconds(1);

/// Where the current run's lines begin: after the previous run's finish when the daemon still
/// says it (a running container's `FinishedAt` is its previous run's), else a second before the
/// run's start (the runs of a stopped container are told apart by that second).
fn run_cut(started_at: &str, finished_at: Option<&str>, running: bool) -> String {
    let parse = |t: &str| chrono::DateTime::parse_from_rfc3339(t).ok();
    let Some(started) = parse(started_at) else {
        return started_at.to_string();
    };
    let cut = match finished_at.and_then(parse) {
        Some(finished) if running && finished < started => finished,
        // A running container that never finished is on its first run: every line is of it.
        None if running => return String::new(),
        _ => started - START_SLACK,
    };
    cut.with_timezone(&chrono::Utc)
        .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
}

fn seen(inspect: ContainerInspectResponse) -> Seen {
    let state = inspect.state.unwrap_or_default();
    let restarting = state.restarting.unwrap_or(false);
    let running = state.running.unwrap_or(false) || restarting;
    let started_at = state.started_at.unwrap_or_default();
    let finished_at = state.finished_at.filter(|t| !t.starts_with("0001-01-01"));
    Seen {
        cut: run_cut(&started_at, finished_at.as_deref(), running),
        id: inspect.id.unwrap_or_default(),
        image: inspect
            .config
            .and_then(|c| c.image)
            .unwrap_or_else(|| inspect.image.unwrap_or_default()),
        running,
        restarting,
        created: inspect
            .created
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
            .unwrap_or_default(),
        started_at,
        finished_at,
        exit_code: state.exit_code.unwrap_or(0),
        restarts: inspect.restart_count.unwrap_or(0),
    }
}

/// The receiver went away (the view closed, the command ended): stop reading.
struct Closed;

async fn say(out: &Sender<LogItem>, item: LogItem) -> Result<(), Closed> {
    out.send(item).await.map_err(|_| Closed)
}

/// Lines of a stream chunk: a chunk may hold several lines, or part of one (a TTY's raw stream).
#[derive(Default)]
struct Pieces {
    stdout: String,
    stderr: String,
}

impl Pieces {
    fn lines(&mut self, output: LogOutput) -> Vec<(Stream, String)> {
        let (stream, message) = match output {
            LogOutput::StdErr { message } => (Stream::Stderr, message),
            LogOutput::StdOut { message } | LogOutput::Console { message } => {
                (Stream::Stdout, message)
            }
            LogOutput::StdIn { .. } => return Vec::new(),
        };
        let held = match stream {
            Stream::Stdout => &mut self.stdout,
            Stream::Stderr => &mut self.stderr,
        };
        held.push_str(&String::from_utf8_lossy(&message));
        let mut lines = Vec::new();
        while let Some(end) = held.find('\n') {
            let line: String = held.drain(..=end).collect();
            lines.push((stream, line));
        }
        lines
    }

    /// What is left without a newline at the stream's end.
    fn rest(&mut self) -> Vec<(Stream, String)> {
        [
            (Stream::Stdout, std::mem::take(&mut self.stdout)),
            (Stream::Stderr, std::mem::take(&mut self.stderr)),
        ]
        .into_iter()
        .filter(|(_, text)| !text.is_empty())
        .collect()
    }
}

/// A time as the events API takes it: `seconds.nanoseconds` since the epoch.
fn events_time(time: &str) -> String {
    match chrono::DateTime::parse_from_rfc3339(time) {
        Ok(t) => format!("{}.{:09}", t.timestamp(), t.timestamp_subsec_nanos()),
        Err(_) => "0".to_string(),
    }
}

/// A fallback end (the container's `FinishedAt`, its die event not read) stands for the die
/// event that the daemon logs just after it: an event this close after it is the same end.
const SAME_END: chrono::Duration = chrono::Duration::seconds(1);

fn item_of(stream: Stream, line: &str) -> LogItem {
    let (time, text) = split_time(line);
    LogItem::line(stream, time.map(str::to_string), text)
}

impl Daemon {
    async fn inspect_seen(&self, name: &str) -> Result<Seen, DaemonError> {
        self.docker
            .inspect_container(name, None)
            .await
            .map(seen)
            .map_err(self.call_error("inspect a container"))
    }

    /// Send what container `name` says to `out`, as `ask` asks; a follow runs until `out` closes.
    /// An error before anything was read (no such container, the daemon does not answer) is
    /// returned; once following, faults are said on the stream and tried again.
    pub async fn container_logs(
        &self,
        name: &str,
        ask: &LogAsk,
        out: &Sender<LogItem>,
    ) -> Result<(), DaemonError> {
        let first = self.inspect_seen(name).await?;
        let _ = self.logs_of(name, first, ask, out).await;
        Ok(())
    }

    /// The ends of container `id`'s runs from `since` (RFC 3339) to now, oldest first: the
    /// daemon's `die` events, which say each run's exit code (its state says only the last one).
    /// The daemon keeps its newest 256 events: ends older than those are not known (None: the
    /// daemon could not be asked).
    async fn run_ends(&self, id: &str, since: &str) -> Option<Vec<RunEnd>> {
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        let filters = std::collections::HashMap::from([
            ("type", vec!["container"]),
            ("container", vec![id]),
            ("event", vec!["die"]),
        ]);
        let options = bollard::query_parameters::EventsOptionsBuilder::default()
            .since(&events_time(since))
            .until(&events_time(&now))
            .filters(&filters)
            .build();
        let mut events = Box::pin(self.docker.events(Some(options)));
        let mut ends = Vec::new();
        while let Some(event) = events.next().await {
            let event = event.ok()?;
            let code = event
                .actor
                .as_ref()
                .and_then(|a| a.attributes.as_ref())
                .and_then(|a| a.get("exitCode"))
                .and_then(|c| c.parse().ok());
            let at = event
                .time_nano
                .map(chrono::DateTime::from_timestamp_nanos)
                .or_else(|| {
                    event
                        .time
                        .and_then(|t| chrono::DateTime::from_timestamp(t, 0))
                });
            if let (Some(code), Some(at)) = (code, at) {
                let at = at.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
                ends.push(RunEnd {
                    at,
                    code,
                    reason: None,
                });
            }
        }
        Some(ends)
    }

    /// Say how the runs since `run` began ended (the run followed, and any that began and ended
    /// since), each once: `said` is the newest end said. When the daemon no longer has the
    /// events, a stopped or restarting container's own last end is said.
    async fn say_ends(
        &self,
        run: &Seen,
        seen: &Seen,
        said: &mut Option<String>,
        out: &Sender<LogItem>,
    ) -> Result<(), Closed> {
        let mut ends = self
            .run_ends(&seen.id, &run.started_at)
            .await
            .unwrap_or_default();
        ends.retain(|end| said.as_deref().is_none_or(|s| !at_or_after(s, &end.at)));
        let stopped = !seen.running || seen.restarting;
        if ends.is_empty()
            && stopped
            && let Some(finish) = &seen.finished_at
            && at_or_after(finish, &run.started_at)
            && said.as_deref().is_none_or(|s| !at_or_after(s, finish))
        {
            say(
                out,
                LogItem::Exited {
                    code: seen.exit_code,
                    at: Some(finish.clone()),
                    reason: None,
                },
            )
            .await?;
            *said = chrono::DateTime::parse_from_rfc3339(finish)
                .map(|t| {
                    (t + SAME_END)
                        .with_timezone(&chrono::Utc)
                        .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true)
                })
                .ok()
                .or_else(|| Some(finish.clone()));
            return Ok(());
        }
        for end in ends {
            say(out, end.item()).await?;
            *said = Some(end.at);
        }
        Ok(())
    }

    async fn logs_of(
        &self,
        name: &str,
        first: Seen,
        ask: &LogAsk,
        out: &Sender<LogItem>,
    ) -> Result<(), Closed> {
        let mut now = first;
        // The newest line's time: a stream read again after a cut starts after it.
        let mut last: Option<String> = None;
        // The newest run end said (each is said once, not at every poll).
        let mut said_end: Option<String> = None;
        let mut replacement = false;
        let mut wait = FIRST_WAIT;
        loop {
            let reading = self
                .read(name, &now, ask, &mut last, replacement, out)
                .await?;
            if reading.is_ok() {
                wait = FIRST_WAIT;
            }
            match self.inspect_seen(name).await {
                Ok(seen) if seen.id != now.id => {
                    say(out, replaced(&seen)).await?;
                    now = seen;
                    last = None;
                    said_end = None;
                    replacement = true;
                    continue;
                }
                Ok(seen) if !seen.running => {
                    self.say_ends(&now, &seen, &mut said_end, out).await?;
                    now = seen;
                    if !ask.follow {
                        return Ok(());
                    }
                }
                Ok(seen) => {
                    // A run that ended: restarting, or already running again.
                    if seen.restarting || seen.started_at != now.started_at {
                        self.say_ends(&now, &seen, &mut said_end, out).await?;
                    }
                    if !ask.follow {
                        return Ok(());
                    }
                    if let Err(why) = reading {
                        say(out, cut(&why, wait)).await?;
                    } else if seen.started_at != now.started_at {
                        say(
                            out,
                            LogItem::RunStarted {
                                at: seen.started_at.clone(),
                                restarts: seen.restarts,
                            },
                        )
                        .await?;
                        now = seen;
                        continue;
                    }
                    now = seen;
                }
                Err(why) => {
                    if !ask.follow {
                        say(out, cut(&why, Duration::ZERO)).await?;
                        return Ok(());
                    }
                    say(out, cut(&why, wait)).await?;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = out.closed() => return Err(Closed),
            }
            wait = (wait * 2).min(LONGEST_WAIT);
        }
    }

    /// One read of the stream to its end (a follow: until the container stops or the stream is
    /// cut). Err(why) when it was cut by a fault.
    async fn read(
        &self,
        name: &str,
        now: &Seen,
        ask: &LogAsk,
        last: &mut Option<String>,
        replacement: bool,
        out: &Sender<LogItem>,
    ) -> Result<Result<(), StreamCut>, Closed> {
        let first_read = last.is_none();
        let (options, whole) = read_options(now, ask, last.as_deref(), replacement);
        // The first read says where each earlier run ended, among its lines (the last run's end
        // is said after the read).
        let mut ends = RunEnds::default();
        if first_read && !replacement {
            let mut earlier = self
                .run_ends(&now.id, &now.created)
                .await
                .unwrap_or_default();
            earlier.retain(|end| !at_or_after(&end.at, &now.started_at));
            ends = RunEnds::new(earlier);
        }
        let mut stream = Box::pin(self.docker.logs(&now.id, Some(options)));
        let mut pieces = Pieces::default();
        let mut held = Vec::new();
        let mut started_marked = !first_read || ask.previous;
        let mut earlier_seen = false;
        let outcome = loop {
            let next = tokio::select! {
                next = stream.next() => next,
                () = out.closed() => return Err(Closed),
            };
            let lines = match next {
                None => break Ok(()),
                Some(Ok(output)) => pieces.lines(output),
                Some(Err(source)) => {
                    break Err(StreamCut {
                        name: name.to_string(),
                        source,
                    });
                }
            };
            for (stream_of, line) in lines {
                let item = item_of(stream_of, &line);
                // A stream read again starts at the second it was cut: skip what was said.
                if let (Some(seen), Some(time)) = (last.as_deref(), item.time())
                    && at_or_after(seen, time)
                {
                    continue;
                }
                let ended = item.time().map(|t| ends.before(t)).unwrap_or_default();
                if whole {
                    held.extend(ended);
                    held.push(item);
                    continue;
                }
                for end in ended {
                    say(out, end).await?;
                }
                if let Some(time) = item.time() {
                    *last = Some(time.to_string());
                    if !started_marked {
                        if at_or_after(time, &now.cut) {
                            started_marked = true;
                            if earlier_seen {
                                say(out, run_started(now)).await?;
                            }
                        } else {
                            earlier_seen = true;
                        }
                    }
                }
                say(out, item).await?;
            }
        };
        let rest = pieces.rest().into_iter().map(|(s, line)| item_of(s, &line));
        for item in rest.chain(ends.rest()) {
            if whole {
                held.push(item);
            } else {
                say(out, item).await?;
            }
        }
        if whole {
            self.say_whole(name, now, ask, held, last, out).await?;
        }
        Ok(outcome)
    }

    /// A log read whole, cut to what was asked: the earlier runs (`--previous`) or the newest
    /// lines (`--tail`), the current run's start marked where it shows.
    async fn say_whole(
        &self,
        name: &str,
        now: &Seen,
        ask: &LogAsk,
        held: Vec<LogItem>,
        last: &mut Option<String>,
        out: &Sender<LogItem>,
    ) -> Result<(), Closed> {
        let (earlier, current) = split_runs(held, &now.cut);
        if ask.previous {
            if earlier.is_empty() {
                return say(
                    out,
                    LogItem::Note {
                        text: format!("container {name} has no earlier run in its log"),
                    },
                )
                .await;
            }
            for item in newest(earlier, ask.tail) {
                say(out, item).await?;
            }
            return Ok(());
        }
        let tail = ask.tail.and_then(|t| usize::try_from(t).ok()).unwrap_or(0);
        let from_current = current.len().min(tail);
        let from_earlier = tail - from_current;
        let earlier = newest(earlier, Some(from_earlier as u64));
        let show_start = !earlier.is_empty();
        for item in earlier {
            say(out, item).await?;
        }
        if show_start {
            say(out, run_started(now)).await?;
        }
        let current = newest(current, Some(from_current as u64));
        if let Some(time) = current.last().and_then(LogItem::time) {
            *last = Some(time.to_string());
        }
        for item in current {
            say(out, item).await?;
        }
        if last.is_none() {
            // Nothing to start after: a follow's next read starts now.
            *last = Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Nanos, true));
        }
        Ok(())
    }
}

fn run_started(now: &Seen) -> LogItem {
    LogItem::RunStarted {
        at: now.started_at.clone(),
        restarts: now.restarts,
    }
}

fn replaced(seen: &Seen) -> LogItem {
    LogItem::Replaced {
        now: format!(
            "container {} ({})",
            crate::mesh::text::first_chars(&seen.id, 12),
            seen.image
        ),
    }
}

/// What one read asks the daemon for, and whether it is read whole. What is cut by run or by tail
/// is read whole and cut here (the first read of the first container only); a follow's later reads
/// start at the second of the newest line seen (`last`).
fn read_options(
    now: &Seen,
    ask: &LogAsk,
    last: Option<&str>,
    replacement: bool,
) -> (bollard::query_parameters::LogsOptions, bool) {
    let first_read = last.is_none();
    let whole = ask.previous || !ask.follow && first_read && ask.tail.is_some();
    // A follow's first read asks the daemon for the tail itself, and streams on from there.
    let tail = match ask.tail {
        Some(n) if ask.follow && first_read && !replacement && !ask.previous => n.to_string(),
        _ => "all".to_string(),
    };
    let since = match (last, ask.since_seconds) {
        (Some(seen), _) => chrono::DateTime::parse_from_rfc3339(seen)
            .map(|t| t.timestamp())
            .unwrap_or(0),
        (None, Some(seconds)) if !replacement => chrono::Utc::now().timestamp() - seconds,
        _ => 0,
    };
    let since = i32::try_from(since.max(0)).unwrap_or(0);
    let options = LogsOptionsBuilder::default()
        .follow(ask.follow && !whole && now.running)
        .stdout(true)
        .stderr(true)
        .timestamps(true)
        .since(since)
        .tail(&tail)
        .build();
    (options, whole)
}

/// A log stream cut by a fault, said on the cut line.
#[derive(Debug, thiserror::Error)]
#[error("reading the log of {name}: {source}")]
struct StreamCut {
    name: String,
    source: bollard::errors::Error,
}

/// The line that says a stream was cut: the fault is made words here, where it is shown.
fn cut(why: &dyn std::error::Error, wait: Duration) -> LogItem {
    LogItem::Cut {
        why: why.to_string(),
        retry_in_ms: (!wait.is_zero()).then(|| u64::try_from(wait.as_millis()).unwrap_or(0)),
    }
}
