//! Times as people read them: ages ("3m", "1h") and local clock times. Pure formatting.

use chrono::{Local, TimeZone};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// A short age: `12s`, `3m`, `5h`, `2d`. Negative ages (clock skew) read as `0s`.
pub fn age(ms: i64) -> String {
    let seconds = (ms / 1000).max(0);
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// A running time to the second: `42s`, `3m05s`, `1h02m`.
pub fn elapsed(ms: i64) -> String {
    let seconds = (ms / 1000).max(0);
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The age of a moment given in ms since the epoch, against `now_ms`.
pub fn age_since(at_ms: i64, now_ms: i64) -> String {
    age(now_ms - at_ms)
}

/// Local `YYYY-MM-DD HH:MM:SS` of a moment in ms since the epoch.
pub fn local_time(at_ms: i64) -> String {
    match Local.timestamp_millis_opt(at_ms) {
        chrono::LocalResult::Single(time) | chrono::LocalResult::Ambiguous(time, _) => {
            time.format("%Y-%m-%d %H:%M:%S").to_string()
        }
        chrono::LocalResult::None => format!("@{at_ms}ms"),
    }
}

/// RFC 3339 in UTC to the second (`2026-12-03T13:04:05Z`) of `ms` since the epoch, as a
/// provenance's `startedOn`/`finishedOn` say it; None for a time chrono cannot hold.
pub fn rfc3339_utc(ms: i64) -> Option<String> {
    chrono::DateTime::<chrono::Utc>::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// Milliseconds since the epoch of an RFC 3339 time (a provenance's `finishedOn`); None when it
/// is not one.
pub fn rfc3339_ms(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_round_down_to_one_unit() {
        assert_eq!(age(-5), "0s");
        assert_eq!(age(59_999), "59s");
        assert_eq!(age(60_000), "1m");
        assert_eq!(age(3_600_000 * 5 + 1), "5h");
        assert_eq!(age(86_400_000 * 2), "2d");
        assert_eq!(age_since(1_000, 61_000), "1m");
        assert!(local_time(0).starts_with("19"));
        assert_eq!(elapsed(42_900), "42s");
        assert_eq!(elapsed(185_000), "3m05s");
        assert_eq!(elapsed(3_720_000), "1h02m");
    }
}
