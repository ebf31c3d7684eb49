//! Ages and running times as people read them ("3m", "1h02m"): pure arithmetic on milliseconds.
//! The clock itself (now, local time) is `meshtop-timefmt`'s, above the domain.

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
        assert_eq!(elapsed(42_900), "42s");
        assert_eq!(elapsed(185_000), "3m05s");
        assert_eq!(elapsed(3_720_000), "1h02m");
    }
}
