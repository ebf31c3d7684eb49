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
use crate::mesh::logs::{LogAsk, LogItem, Stream, at_or_after, newest, split_runs, split_time};

/// The first wait after a cut stream; it doubles up to [`LONGEST_WAIT`].
const FIRST_WAIT: Duration = Duration::from_millis(250);
/// The longest wait between two tries of a cut stream.
const LONGEST_WAIT: Duration = Duration::from_secs(4);

/// What the daemon says of the container a name stands for now.
struct Seen {
    id: String,
    image: String,
    running: bool,
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
    let running = state.running.unwrap_or(false) || state.restarting.unwrap_or(false);
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
        // The finish already said (a stopped container is said once, not at every poll).
        let mut said_exit: Option<String> = None;
        let mut replacement = false;
        let mut wait = FIRST_WAIT;
        loop {
            let reading = self
                .read(name, &now, ask, &mut last, replacement, out)
                .await?;
            if reading.is_ok() {
                wait = FIRST_WAIT;
            }
            let finished = match self.inspect_seen(name).await {
                Ok(seen) => Ok(seen),
                Err(e) => Err(e.to_string()),
            };
            match finished {
                Ok(seen) if seen.id != now.id => {
                    say(out, replaced(&seen)).await?;
                    now = seen;
                    last = None;
                    said_exit = None;
                    replacement = true;
                    continue;
                }
                Ok(seen) if !seen.running => {
                    let finish = seen.finished_at.clone().unwrap_or_default();
                    if said_exit.as_ref() != Some(&finish) {
                        say(
                            out,
                            LogItem::Exited {
                                code: seen.exit_code,
                                at: seen.finished_at.clone(),
                            },
                        )
                        .await?;
                        said_exit = Some(finish);
                    }
                    now = seen;
                    if !ask.follow {
                        return Ok(());
                    }
                }
                Ok(seen) => {
                    if !ask.follow {
                        return Ok(());
                    }
                    if let Err(why) = reading {
                        say(out, cut(why, wait)).await?;
                    } else if seen.started_at != now.started_at {
                        say(
                            out,
                            LogItem::RunStarted {
                                at: seen.started_at.clone(),
                                restarts: seen.restarts,
                            },
                        )
                        .await?;
                        said_exit = None;
                        now = seen;
                        continue;
                    }
                    now = seen;
                }
                Err(why) => {
                    if !ask.follow {
                        say(out, cut(why, Duration::ZERO)).await?;
                        return Ok(());
                    }
                    say(out, cut(why, wait)).await?;
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
    ) -> Result<Result<(), String>, Closed> {
        let first_read = last.is_none();
        // What is cut by run or by tail is read whole and cut here (the first read of the first
        // container only); a follow's later reads start at the second of the newest line seen.
        let whole = ask.previous || !ask.follow && first_read && ask.tail.is_some();
        // A follow's first read asks the daemon for the tail itself, and streams on from there.
        let tail = match ask.tail {
            Some(n) if ask.follow && first_read && !replacement && !ask.previous => n.to_string(),
            _ => "all".to_string(),
        };
        let since = match (&*last, ask.since_seconds) {
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
                Some(Err(e)) => break Err(format!("reading the log of {name}: {e}")),
            };
            for (stream_of, line) in lines {
                let item = item_of(stream_of, &line);
                // A stream read again starts at the second it was cut: skip what was said.
                if let (Some(seen), Some(time)) = (last.as_deref(), item.time())
                    && at_or_after(seen, time)
                {
                    continue;
                }
                if whole {
                    held.push(item);
                    continue;
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
        for (stream_of, line) in pieces.rest() {
            let item = item_of(stream_of, &line);
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

fn cut(why: String, wait: Duration) -> LogItem {
    LogItem::Cut {
        why,
        retry_in_ms: (!wait.is_zero()).then(|| u64::try_from(wait.as_millis()).unwrap_or(0)),
    }
}
