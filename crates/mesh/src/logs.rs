//! What a machine says: its log lines (stdout and stderr, with their time), where a run began,
//! how it ended, what replaced it, and what the target said of it. Pure: the target reads the
//! lines (`converge/targets/`), the command prints them and the dashboard's logs view holds them
//! here, at most [`HELD_PER_MACHINE`] items and [`HELD_BYTES_PER_MACHINE`] bytes per machine, each
//! line cut at [`LINE_HELD_BYTES`].

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use super::text::plain;

/// How many items a machine keeps; older ones are dropped (and counted, and said).
pub(crate) const HELD_PER_MACHINE: usize = 5_000;

/// How many bytes a machine's held items take at most (their text and the items themselves):
/// older ones are dropped (and counted, and said) so that a machine printing long lines holds
/// as little memory as one printing short ones. 5,000 lines of 200 bytes fit.
pub(crate) const HELD_BYTES_PER_MACHINE: usize = 2 * 1024 * 1024;

/// How many bytes of one line's text are held; the rest is cut, and the line says how much
/// (`… [12.3 KiB cut]`). A screen shows a few hundred characters of a line at most; Docker's
/// json-file driver splits lines at 16 KiB.
pub(crate) const LINE_HELD_BYTES: usize = 4 * 1024;

/// Which of a machine's streams a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// What to read of a machine's log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogAsk {
    /// Keep reading as lines come, across restarts and sends.
    pub follow: bool,
    /// The run before the last restart instead of the current one.
    pub previous: bool,
    /// The newest N lines only (None: all there is).
    pub tail: Option<u64>,
    /// Lines of the last N seconds only.
    pub since_seconds: Option<i64>,
}

/// One thing a machine's log says, in the order it says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LogItem {
    Line {
        stream: Stream,
        /// When the target took the line (RFC 3339), when it says.
        #[serde(skip_serializing_if = "Option::is_none")]
        time: Option<String>,
        /// The pod it came from, where a machine has several.
        #[serde(skip_serializing_if = "Option::is_none")]
        source: Option<String>,
        text: String,
    },
    /// A run of the machine began here (the log keeps earlier runs' lines before it).
    RunStarted { at: String, restarts: i64 },
    /// The machine exited after its last line.
    Exited {
        code: i64,
        at: Option<String>,
        /// Why, where the target says (a pod's `lastState.terminated.reason`: Error, OOMKilled).
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A send (or a person) replaced what the lines come from: they come from `now` from here on.
    Replaced { now: String },
    /// What the target says of a machine that is not running (a pod's recent events).
    Event { text: String },
    /// The stream was cut (the container removed, the connection dropped); when it is tried again.
    Cut {
        why: String,
        retry_in_ms: Option<u64>,
    },
    /// Something to know about what is (not) shown, e.g. no earlier run to show.
    Note { text: String },
    /// Older items dropped to keep at most [`HELD_PER_MACHINE`] items and
    /// [`HELD_BYTES_PER_MACHINE`] bytes.
    Dropped { count: usize },
}

impl LogItem {
    /// A line of text, made safe to print (no terminal escapes, no control characters).
    pub fn line(stream: Stream, time: Option<String>, text: &str) -> LogItem {
        LogItem::Line {
            stream,
            time,
            source: None,
            text: plain(text.trim_end_matches(['\n', '\r'])).into_owned(),
        }
    }

    /// The item as one line of text (without the machine's prefix).
    pub fn render(&self, timestamps: bool) -> String {
        match self {
            LogItem::Line {
                stream,
                time,
                source,
                text,
            } => {
                let mut out = String::new();
                if timestamps && let Some(time) = time {
                    out.push_str(time);
                    out.push(' ');
                }
                if let Some(source) = source {
                    out.push_str(source);
                    out.push_str(": ");
                }
                if *stream == Stream::Stderr {
                    out.push_str(STDERR_MARK);
                }
                out.push_str(text);
                out
            }
            LogItem::RunStarted { at, restarts } => {
                format!("── run started {at} (restart count {restarts}) ──")
            }
            LogItem::Exited { code, at, reason } => {
                let why = reason
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default();
                match at {
                    Some(at) => format!("── exited with code {code}{why} at {at} ──"),
                    None => format!("── exited with code {code}{why} ──"),
                }
            }
            LogItem::Replaced { now } => format!("── now {now} ──"),
            LogItem::Event { text } => format!("event: {text}"),
            LogItem::Cut { why, retry_in_ms } => match retry_in_ms {
                Some(ms) => format!("── stream cut: {why}; trying again in {ms} ms ──"),
                None => format!("── stream cut: {why} ──"),
            },
            LogItem::Note { text } => format!("── {text} ──"),
            LogItem::Dropped { count } => format!(
                "── {count} older line(s) dropped (at most {HELD_PER_MACHINE} lines, {} kept) ──",
                super::text::binary_bytes(HELD_BYTES_PER_MACHINE)
            ),
        }
    }

    /// The item with its text cut at `max` bytes (a line's text; other items are short).
    pub(crate) fn cut_to(mut self, max: usize) -> LogItem {
        if let LogItem::Line { text, .. } = &mut self {
            super::text::cut_long_line(text, max);
        }
        self
    }

    /// The bytes the item takes where it is held: its slot and the text it owns.
    pub(crate) fn held_bytes(&self) -> usize {
        let owned = match self {
            LogItem::Line {
                time, source, text, ..
            } => {
                text.capacity()
                    + time.as_ref().map_or(0, String::capacity)
                    + source.as_ref().map_or(0, String::capacity)
            }
            LogItem::RunStarted { at, .. } => at.capacity(),
            LogItem::Exited { at, reason, .. } => {
                at.as_ref().map_or(0, String::capacity)
                    + reason.as_ref().map_or(0, String::capacity)
            }
            LogItem::Replaced { now: text }
            | LogItem::Event { text }
            | LogItem::Note { text }
            | LogItem::Cut { why: text, .. } => text.capacity(),
            LogItem::Dropped { .. } => 0,
        };
        std::mem::size_of::<(u64, LogItem)>() + owned
    }

    /// The time the target gave the item, when it gave one.
    pub fn time(&self) -> Option<&str> {
        match self {
            LogItem::Line { time, .. } => time.as_deref(),
            _ => None,
        }
    }
}

/// How a stderr line is marked (the line's stream is in `--json`).
pub(crate) const STDERR_MARK: &str = "stderr| ";

/// Split a line read with timestamps into its time and its text (`2026-12-02T05:44:09.12Z text`).
pub fn split_time(line: &str) -> (Option<&str>, &str) {
    match line.split_once(' ') {
        Some((time, text)) if looks_like_time(time) => (Some(time), text),
        _ if looks_like_time(line.trim_end()) => (Some(line.trim_end()), ""),
        _ => (None, line),
    }
}

fn looks_like_time(word: &str) -> bool {
    let bytes = word.as_bytes();
    bytes.len() >= 20
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[10] == b'T'
        && (word.ends_with('Z') || word[19..].contains(['+', '-']))
}

/// A UTC RFC 3339 time in a form that sorts as text: the fraction made nine digits (Docker
/// writes RFC3339Nano, which drops trailing zeros, so `…09.1Z` would sort after `…09.12Z`).
pub(crate) fn sortable_time(time: &str) -> String {
    let body = time.trim_end_matches('Z');
    let (seconds, fraction) = body.split_once('.').unwrap_or((body, ""));
    let digits: String = fraction
        .chars()
        .take_while(char::is_ascii_digit)
        .chain(std::iter::repeat('0'))
        .take(9)
        .collect();
    format!("{seconds}.{digits}Z")
}

/// Whether `time` is at or after `since` (both UTC RFC 3339).
pub fn at_or_after(time: &str, since: &str) -> bool {
    sortable_time(time) >= sortable_time(since)
}

/// The lines of a log read with timestamps, cut where the current run began (`started_at`): the
/// runs before it (what `--previous` shows) and the current run.
pub fn split_runs(lines: Vec<LogItem>, started_at: &str) -> (Vec<LogItem>, Vec<LogItem>) {
    let cut = lines
        .iter()
        .position(|item| item.time().is_some_and(|t| at_or_after(t, started_at)))
        .unwrap_or(lines.len());
    let mut earlier = lines;
    let current = earlier.split_off(cut);
    (earlier, current)
}

/// The newest `tail` lines of `items` and the markers among and after them (all of them without
/// a tail): a run's end after the last line is kept with it.
pub fn newest(mut items: Vec<LogItem>, tail: Option<u64>) -> Vec<LogItem> {
    let Some(tail) = tail.and_then(|t| usize::try_from(t).ok()) else {
        return items;
    };
    if tail == 0 {
        items.clear();
        return items;
    }
    let lines = items
        .iter()
        .enumerate()
        .rev()
        .filter(|(_, item)| matches!(item, LogItem::Line { .. }))
        .map(|(at, _)| at)
        .nth(tail - 1);
    if let Some(first) = lines {
        items.drain(..first);
    }
    items
}

/// Where a run of a machine ended: when (UTC RFC 3339), with which exit code and, where the
/// target says, why (Docker's `die` event of the run: `docker ps` says only the last one; a pod's
/// `lastState.terminated`, what `kubectl describe pod` shows as its Last State).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEnd {
    pub at: String,
    pub code: i64,
    pub reason: Option<String>,
}

impl RunEnd {
    pub fn item(&self) -> LogItem {
        LogItem::Exited {
            code: self.code,
            at: Some(self.at.clone()),
            reason: self.reason.clone(),
        }
    }
}

/// Earlier runs' ends, each said where it falls among the lines: before the first line taken
/// after it.
#[derive(Debug, Clone, Default)]
pub struct RunEnds {
    pending: VecDeque<RunEnd>,
}

impl RunEnds {
    pub fn new(mut ends: Vec<RunEnd>) -> RunEnds {
        ends.sort_by_cached_key(|end| sortable_time(&end.at));
        RunEnds {
            pending: ends.into(),
        }
    }

    /// The ends before a line taken at `time`, as their markers, in order.
    pub fn before(&mut self, time: &str) -> Vec<LogItem> {
        let mut said = Vec::new();
        while let Some(end) = self.pending.front()
            && !at_or_after(&end.at, time)
        {
            said.push(end.item());
            self.pending.pop_front();
        }
        said
    }

    /// The ends no line came after.
    pub fn rest(&mut self) -> Vec<LogItem> {
        self.pending.drain(..).map(|end| end.item()).collect()
    }
}

/// One machine's items, at most [`HELD_PER_MACHINE`] and [`HELD_BYTES_PER_MACHINE`], each with its
/// place in the order they came.
#[derive(Debug, Clone, Default)]
struct Held {
    items: VecDeque<(u64, LogItem)>,
    /// What `items` take ([`LogItem::held_bytes`] summed).
    bytes: usize,
    dropped: usize,
}

/// What a logs view holds: each machine's items, bounded, in the order they came across machines.
#[derive(Debug, Clone, Default)]
pub struct LogBook {
    machines: BTreeMap<String, Held>,
    next: u64,
    cap: usize,
    byte_cap: usize,
    width: usize,
}

/// One shown line: the machine it is from (its prefix), the item, and whether it is a marker.
#[derive(Debug, Clone, Copy)]
pub struct Shown<'a> {
    pub machine: &'a str,
    pub item: &'a LogItem,
}

impl LogBook {
    /// A book for these machines (the prefix is shown when there are several).
    pub fn new<'a>(machines: impl IntoIterator<Item = &'a str>) -> LogBook {
        LogBook::with_cap(machines, HELD_PER_MACHINE)
    }

    /// As [`LogBook::new`], keeping at most `cap` items per machine.
    pub(crate) fn with_cap<'a>(machines: impl IntoIterator<Item = &'a str>, cap: usize) -> LogBook {
        LogBook::with_caps(machines, cap, HELD_BYTES_PER_MACHINE)
    }

    /// As [`LogBook::new`], keeping at most `cap` items and `byte_cap` bytes per machine.
    pub(crate) fn with_caps<'a>(
        machines: impl IntoIterator<Item = &'a str>,
        cap: usize,
        byte_cap: usize,
    ) -> LogBook {
        let machines: BTreeMap<String, Held> = machines
            .into_iter()
            .map(|m| (m.to_string(), Held::default()))
            .collect();
        let width = machines
            .keys()
            .map(|m| m.chars().count())
            .max()
            .unwrap_or(0);
        LogBook {
            machines,
            next: 0,
            cap: cap.max(1),
            byte_cap,
            width,
        }
    }

    /// Keep what `machine` said (a line cut at [`LINE_HELD_BYTES`]); its oldest items go while it
    /// holds more than the caps (the newest item always stays).
    pub fn push(&mut self, machine: &str, item: LogItem) {
        let item = item.cut_to(LINE_HELD_BYTES);
        if !self.machines.contains_key(machine) {
            self.width = self.width.max(machine.chars().count());
            self.machines.insert(machine.to_string(), Held::default());
        }
        let Some(held) = self.machines.get_mut(machine) else {
            return;
        };
        held.bytes += item.held_bytes();
        held.items.push_back((self.next, item));
        self.next += 1;
        while held.items.len() > 1 && (held.items.len() > self.cap || held.bytes > self.byte_cap) {
            if let Some((_, old)) = held.items.pop_front() {
                held.bytes -= old.held_bytes();
                held.dropped += 1;
            }
        }
    }

    /// The bytes `machine`'s held items take (the tests' measure of the caps).
    #[cfg(test)]
    pub(crate) fn held_bytes(&self, machine: &str) -> usize {
        self.machines.get(machine).map_or(0, |h| h.bytes)
    }

    /// How many items are shown (the dropped markers included).
    pub fn len(&self) -> usize {
        self.machines
            .values()
            .map(|h| h.items.len() + usize::from(h.dropped > 0))
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every shown item in the order they came (a machine's dropped marker first of its own).
    pub fn shown(&self) -> Vec<Shown<'_>> {
        let mut all: Vec<(u64, Shown<'_>)> = Vec::with_capacity(self.len());
        for (machine, held) in &self.machines {
            if held.dropped > 0 {
                let first = held.items.front().map_or(0, |(n, _)| *n);
                // The marker stands just before the machine's oldest kept item.
                all.push((
                    first.saturating_sub(1),
                    Shown {
                        machine,
                        item: &DROPPED,
                    },
                ));
            }
            all.extend(
                held.items
                    .iter()
                    .map(|(n, item)| (*n, Shown { machine, item })),
            );
        }
        all.sort_by_key(|(n, _)| *n);
        all.into_iter().map(|(_, shown)| shown).collect()
    }

    /// How many items `machine` dropped.
    pub fn dropped(&self, machine: &str) -> usize {
        self.machines.get(machine).map_or(0, |h| h.dropped)
    }

    /// A shown item as one line: the machine's name first when there are several.
    pub fn text(&self, shown: &Shown<'_>, timestamps: bool) -> String {
        let body = match shown.item {
            LogItem::Dropped { .. } => LogItem::Dropped {
                count: self.dropped(shown.machine),
            }
            .render(timestamps),
            item => item.render(timestamps),
        };
        match self.prefix(shown.machine) {
            Some(prefix) => format!("{prefix}{body}"),
            None => body,
        }
    }

    /// `api-1 | ` (padded to the longest name) when the book holds several machines.
    pub fn prefix(&self, machine: &str) -> Option<String> {
        (self.machines.len() > 1).then(|| prefix(machine, self.width))
    }

    /// The indexes (into [`LogBook::shown`]) of the lines containing `query`, case-insensitive.
    pub fn matches(&self, query: &str) -> Vec<usize> {
        if query.is_empty() {
            return Vec::new();
        }
        let query = query.to_lowercase();
        self.shown()
            .iter()
            .enumerate()
            .filter(|(_, shown)| self.text(shown, true).to_lowercase().contains(&query))
            .map(|(i, _)| i)
            .collect()
    }
}

/// The placeholder a machine's dropped marker is shown from (its count is the machine's).
static DROPPED: LogItem = LogItem::Dropped { count: 0 };

/// A machine's prefix padded to `width` characters, as `docker compose logs` writes it.
pub fn prefix(machine: &str, width: usize) -> String {
    format!("{machine:<width$} | ")
}

/// The match of `query` after (or, backwards, before) `from` among `matches`, wrapping round.
pub fn next_match(matches: &[usize], from: Option<usize>, forward: bool) -> Option<usize> {
    let first = *matches.first()?;
    let last = *matches.last()?;
    let Some(from) = from else {
        return Some(if forward { first } else { last });
    };
    if forward {
        Some(matches.iter().copied().find(|&m| m > from).unwrap_or(first))
    } else {
        Some(
            matches
                .iter()
                .rev()
                .copied()
                .find(|&m| m < from)
                .unwrap_or(last),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(text: &str) -> LogItem {
        LogItem::line(Stream::Stdout, None, text)
    }

    fn timed(time: &str, text: &str) -> LogItem {
        LogItem::line(Stream::Stdout, Some(time.to_string()), text)
    }

    #[test]
    fn a_machine_keeps_at_most_its_cap_and_says_how_many_it_dropped() {
        let mut book = LogBook::with_cap(["api-1"], 3);
        for n in 1..=5 {
            book.push("api-1", out(&format!("line {n}")));
        }
        let texts: Vec<String> = book.shown().iter().map(|s| book.text(s, false)).collect();
        assert_eq!(
            texts,
            [
                "── 2 older line(s) dropped (at most 5000 lines, 2.0 MiB kept) ──",
                "line 3",
                "line 4",
                "line 5"
            ]
        );
        assert_eq!(book.len(), 4);
    }

    fn long(bytes: usize) -> LogItem {
        out(&"x".repeat(bytes))
    }

    fn line_text(item: &LogItem) -> &str {
        match item {
            LogItem::Line { text, .. } => text,
            _ => "",
        }
    }

    #[test]
    fn a_line_at_the_cut_is_whole_and_one_above_says_what_was_cut() {
        let mut book = LogBook::new(["api-1"]);
        book.push("api-1", long(LINE_HELD_BYTES));
        book.push("api-1", long(LINE_HELD_BYTES + 1));
        book.push("api-1", long(LINE_HELD_BYTES + 12_595));
        let shown = book.shown();
        assert_eq!(line_text(shown[0].item), "x".repeat(LINE_HELD_BYTES));
        assert_eq!(
            line_text(shown[1].item),
            format!("{} … [1 B cut]", "x".repeat(LINE_HELD_BYTES))
        );
        assert_eq!(
            line_text(shown[2].item),
            format!("{} … [12.3 KiB cut]", "x".repeat(LINE_HELD_BYTES))
        );
    }

    #[test]
    fn a_cut_never_splits_a_character() {
        // 'é' is two bytes: the cut falls inside the last one and keeps it out whole.
        let item = out(&"é".repeat(LINE_HELD_BYTES)).cut_to(LINE_HELD_BYTES - 1);
        let text = line_text(&item);
        assert!(
            text.starts_with(&"é".repeat((LINE_HELD_BYTES - 2) / 2)),
            "{text}"
        );
        assert!(
            text.ends_with(" … [4.0 KiB cut]"),
            "{}",
            &text[text.len() - 30..]
        );
    }

    #[test]
    fn many_long_lines_never_hold_more_than_the_byte_cap() {
        let cap = 64 * 1024;
        let mut book = LogBook::with_caps(["api-1", "api-2"], HELD_PER_MACHINE, cap);
        for n in 0..500 {
            book.push("api-1", long(16 * 1024 + n));
            assert!(book.held_bytes("api-1") <= cap, "after {n} pushes");
        }
        book.push("api-2", out("quiet"));
        assert!(book.dropped("api-1") > 450, "{}", book.dropped("api-1"));
        assert_eq!(book.dropped("api-2"), 0);
        // What is held is what is counted.
        let counted: usize = book
            .shown()
            .iter()
            .filter(|s| s.machine == "api-1" && !matches!(s.item, LogItem::Dropped { .. }))
            .map(|s| s.item.held_bytes())
            .sum();
        assert_eq!(counted, book.held_bytes("api-1"));
        let texts: Vec<String> = book.shown().iter().map(|s| book.text(s, false)).collect();
        assert!(
            texts[0].starts_with("api-1 | ── 4") && texts[0].contains("older line(s) dropped"),
            "{}",
            texts[0]
        );
        // The default cap holds the default count of short lines.
        let mut book = LogBook::new(["m"]);
        for n in 0..HELD_PER_MACHINE {
            book.push("m", out(&format!("{n:0>150}")));
        }
        assert_eq!(book.dropped("m"), 0);
        assert!(book.held_bytes("m") <= HELD_BYTES_PER_MACHINE);
    }

    #[test]
    fn one_chatty_machine_never_drops_another_machines_lines() {
        let mut book = LogBook::with_cap(["api-1", "api-2"], 2);
        book.push("api-2", out("quiet"));
        for n in 0..10 {
            book.push("api-1", out(&format!("chatty {n}")));
        }
        let texts: Vec<String> = book.shown().iter().map(|s| book.text(s, false)).collect();
        assert_eq!(texts[0], "api-2 | quiet");
        assert!(texts.contains(&"api-1 | chatty 9".to_string()), "{texts:?}");
        assert_eq!(book.dropped("api-2"), 0);
        assert_eq!(book.dropped("api-1"), 8);
    }

    #[test]
    fn several_machines_are_prefixed_in_the_order_they_spoke() {
        let mut book = LogBook::new(["api-1", "api-22"]);
        book.push("api-22", out("b"));
        book.push("api-1", LogItem::line(Stream::Stderr, None, "a"));
        let texts: Vec<String> = book.shown().iter().map(|s| book.text(s, false)).collect();
        assert_eq!(texts, ["api-22 | b", "api-1  | stderr| a"]);
        let single = LogBook::new(["api-1"]);
        assert_eq!(single.prefix("api-1"), None);
    }

    #[test]
    fn escapes_and_control_characters_are_stripped() {
        let item = out("\x1b[31mred\x1b[0m \x07bell\r\n");
        assert_eq!(item.render(false), "red bell");
    }

    #[test]
    fn daemon_log_times_sort_whatever_their_fraction() {
        assert!(at_or_after(
            "2026-12-02T05:44:09.12Z",
            "2026-12-02T05:44:09.1Z"
        ));
        assert!(!at_or_after(
            "2026-12-02T05:44:09.1Z",
            "2026-12-02T05:44:09.12Z"
        ));
        assert!(at_or_after(
            "2026-12-02T05:44:10Z",
            "2026-12-02T05:44:09.9Z"
        ));
        assert_eq!(
            split_time("2026-12-02T05:44:09.123Z hello world"),
            (Some("2026-12-02T05:44:09.123Z"), "hello world")
        );
        assert_eq!(split_time("hello world"), (None, "hello world"));
    }

    #[test]
    fn runs_are_cut_where_the_current_one_began() {
        let lines = vec![
            timed("2026-12-02T05:00:00.5Z", "first run"),
            timed("2026-12-02T05:00:01Z", "first run ends"),
            timed("2026-12-02T05:00:02.25Z", "second run"),
        ];
        let (earlier, current) = split_runs(lines, "2026-12-02T05:00:02.000001Z");
        assert_eq!(earlier.len(), 2);
        assert_eq!(current.len(), 1);
        assert_eq!(current[0].render(false), "second run");
        assert_eq!(newest(earlier, Some(1))[0].render(false), "first run ends");
    }

    #[test]
    fn search_finds_lines_and_wraps_round() {
        let mut book = LogBook::new(["m"]);
        for text in ["alpha", "Beta", "gamma beta", "delta"] {
            book.push("m", out(text));
        }
        let found = book.matches("BETA");
        assert_eq!(found, [1, 2]);
        assert_eq!(next_match(&found, None, true), Some(1));
        assert_eq!(next_match(&found, Some(1), true), Some(2));
        assert_eq!(next_match(&found, Some(2), true), Some(1));
        assert_eq!(next_match(&found, Some(1), false), Some(2));
        assert!(book.matches("").is_empty());
    }

    #[test]
    fn each_run_end_is_said_before_the_first_line_after_it() {
        let end = |at: &str, code| RunEnd {
            at: at.to_string(),
            code,
            reason: None,
        };
        let mut ends = RunEnds::new(vec![
            end("2026-12-02T05:00:02.2Z", 3),
            end("2026-12-02T05:00:01.15Z", 3),
            end("2026-12-02T05:00:09Z", 1),
        ]);
        let lines = [
            "2026-12-02T05:00:01.1Z",
            "2026-12-02T05:00:01.2Z",
            "2026-12-02T05:00:03Z",
        ];
        let mut said = Vec::new();
        for time in lines {
            said.extend(ends.before(time).iter().map(|i| i.render(false)));
            said.push(timed(time, "line").render(true));
        }
        said.extend(ends.rest().iter().map(|i| i.render(false)));
        assert_eq!(
            said,
            [
                "2026-12-02T05:00:01.1Z line",
                "── exited with code 3 at 2026-12-02T05:00:01.15Z ──",
                "2026-12-02T05:00:01.2Z line",
                "── exited with code 3 at 2026-12-02T05:00:02.2Z ──",
                "2026-12-02T05:00:03Z line",
                "── exited with code 1 at 2026-12-02T05:00:09Z ──",
            ]
        );
    }

    #[test]
    fn markers_read_as_what_happened() {
        assert_eq!(
            LogItem::Exited {
                code: 3,
                at: Some("2026-12-02T05:00:00Z".into()),
                reason: None,
            }
            .render(false),
            "── exited with code 3 at 2026-12-02T05:00:00Z ──"
        );
        let end = RunEnd {
            at: "2026-12-02T05:00:00Z".into(),
            code: 137,
            reason: Some("OOMKilled".into()),
        };
        assert_eq!(
            end.item().render(false),
            "── exited with code 137 (OOMKilled) at 2026-12-02T05:00:00Z ──"
        );
        let json = serde_json::to_string(&end.item()).unwrap_or_default();
        assert_eq!(
            json,
            r#"{"kind":"exited","code":137,"at":"2026-12-02T05:00:00Z","reason":"OOMKilled"}"#
        );
        let json = serde_json::to_string(&out("hi")).unwrap_or_default();
        assert_eq!(json, r#"{"kind":"line","stream":"stdout","text":"hi"}"#);
    }
}
