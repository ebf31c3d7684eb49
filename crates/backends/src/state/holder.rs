//! Who holds (or wants) a mesh's lock, and whether that holder is alive: its heartbeat, and on
//! this host its process. Below the lock and the errors, which both name a holder.

use serde::{Deserialize, Serialize};

/// A heartbeat older than this (2 minutes) means the holder is gone.
pub const LOCK_STALE_MS: i64 = 2 * 60 * 1000;

/// TEST HOOK ONLY: a shorter stale limit in milliseconds (the frozen-converge test sets it on the
/// processes it starts). Never set it in production: a converge would be taken over while alive.
pub const TEST_STALE_ENV: &str = "MESHTOP_TEST_LOCK_STALE_MS";

/// The shortest stale limit the test hook may set: under a loaded machine a shorter one would take
/// a lock from a converge that is alive but slow to beat.
pub(super) const TEST_STALE_FLOOR_MS: i64 = 1_000;

/// The stale limit in force: [`LOCK_STALE_MS`], unless the test hook [`TEST_STALE_ENV`] says
/// otherwise, in a debug build only (a release build never reads it), and never below
/// [`TEST_STALE_FLOOR_MS`].
pub fn lock_stale_ms() -> i64 {
    if !cfg!(debug_assertions) {
        return LOCK_STALE_MS;
    }
    stale_limit(std::env::var(TEST_STALE_ENV).ok().as_deref())
}

/// The stale limit the hook's value `given` sets (none, or not a positive number: the default).
fn stale_limit(given: Option<&str>) -> i64 {
    given
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|ms| *ms > 0)
        .map_or(LOCK_STALE_MS, |ms| ms.max(TEST_STALE_FLOOR_MS))
}

/// Who holds (or wants) a mesh's converge lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub operation_id: String,
    pub host: String,
    pub pid: u32,
    pub since_ms: i64,
    pub heartbeat_ms: i64,
}

impl Holder {
    /// This process on this host, now.
    pub fn here(operation_id: &str) -> Holder {
        let now = crate::timefmt::now_ms();
        Holder {
            operation_id: operation_id.to_string(),
            host: this_host(),
            pid: std::process::id(),
            since_ms: now,
            heartbeat_ms: now,
        }
    }

    /// Whether this holder can be taken to be dead at `now_ms`.
    pub fn is_dead(&self, now_ms: i64) -> bool {
        now_ms.saturating_sub(self.heartbeat_ms) > lock_stale_ms() || self.process_gone()
    }

    /// Whether this holder is certainly gone: it ran on this host and its process no longer
    /// exists (it can never wake up and write again, unlike one whose heartbeat is only stale).
    pub fn process_gone(&self) -> bool {
        self.host == this_host() && !process_exists(self.pid)
    }
}

/// This host's name, as holders record it.
pub fn this_host() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

/// Whether a process with this pid exists on this host.
fn process_exists(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    if cfg!(target_os = "linux") {
        return std::path::Path::new(&format!("/proc/{pid}")).exists();
    }
    signal_zero(pid)
}

/// `kill(pid, 0)`: true unless the process does not exist (ESRCH).
#[allow(unsafe_code)]
fn signal_zero(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 sends nothing; it only checks that the process exists and
    // touches no memory of ours.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_test_hook_has_a_floor_of_one_second() {
        assert_eq!(stale_limit(None), LOCK_STALE_MS);
        assert_eq!(stale_limit(Some("1500")), 1500);
        assert_eq!(stale_limit(Some("1")), TEST_STALE_FLOOR_MS);
        assert_eq!(stale_limit(Some("-5")), LOCK_STALE_MS);
        assert_eq!(stale_limit(Some("soon")), LOCK_STALE_MS);
    }
}
