//! Times as people read them, with the clock they are read against: now, local clock times and
//! RFC 3339. The pure formatting (ages, running times) is the domain's, re-exported here so that
//! every room above the domain names one module.

use chrono::{Local, TimeZone};

pub use meshtop_mesh::timefmt::{age, age_since, elapsed};

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
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
    fn a_local_time_and_rfc3339_round_trip() {
        assert!(local_time(0).starts_with("19"));
        let text = rfc3339_utc(1_796_303_045_000);
        assert_eq!(text.as_deref(), Some("2026-12-03T13:04:05Z"));
        assert_eq!(rfc3339_ms("2026-12-03T13:04:05Z"), Some(1_796_303_045_000));
        assert_eq!(rfc3339_ms("yesterday"), None);
    }
}
