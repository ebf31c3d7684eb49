//! How a new container proves that it runs, before the one it replaces is removed: with a
//! healthcheck, once it reports `healthy` (as compose's `service_healthy` and a Kubernetes
//! readiness probe wait), within a deadline its healthcheck's own timing gives; without one, by
//! running for [`STEADY`].

use std::time::{Duration, Instant};

use bollard::models::{ContainerInspectResponse, HealthConfig, HealthStatusEnum};

use super::{Daemon, DaemonError};

/// How long a new container without a healthcheck must keep running to count as sent.
pub const STEADY: Duration = Duration::from_secs(5);

/// The longest a send waits for a container to report `healthy`, whatever its healthcheck says.
pub const HEALTHY_CAP: Duration = Duration::from_secs(300);

/// How often the new container is looked at while it proves itself.
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// The health log lines a failure quotes.
const LOG_LINES: usize = 3;

/// How a new container proved itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proven {
    /// Its healthcheck reported `healthy`, this long after it started.
    Healthy(Duration),
    /// It has no healthcheck and kept running this long.
    Steady(Duration),
}

impl std::fmt::Display for Proven {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Proven::Healthy(after) => write!(f, "healthy after {}", seconds(*after)),
            Proven::Steady(ran) => write!(
                f,
                "no healthcheck: kept running {} after its start",
                seconds(*ran)
            ),
        }
    }
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// What a new container is watched for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Watch {
    /// `healthy`, within the deadline.
    Healthy { deadline: Duration, why: String },
    /// Running, for this long.
    Steady(Duration),
}

impl std::fmt::Display for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Watch::Healthy { deadline, why } => write!(
                f,
                "started; waiting until it reports healthy, at most {} ({why})",
                seconds(*deadline)
            ),
            Watch::Steady(steady) => write!(
                f,
                "started; no healthcheck: it must keep running {}",
                seconds(*steady)
            ),
        }
    }
}

/// The watch of a container whose (effective) healthcheck is `health`: the daemon's defaults
/// where a field is unset (interval 30 s, timeout 30 s, 3 retries, no start period). The deadline
/// is the start period and `retries + 1` rounds of interval and timeout, plus a margin of 5 s,
/// capped at [`HEALTHY_CAP`]: a container that can turn healthy has done so by then.
pub(super) fn watch_for(health: Option<&HealthConfig>) -> Watch {
    let Some(health) = health.filter(|h| {
        let test = h.test.as_deref().unwrap_or_default();
        !test.is_empty() && test.first().map(String::as_str) != Some("NONE")
    }) else {
        return Watch::Steady(STEADY);
    };
    let nanos = |value: Option<i64>, default: Duration| {
        value
            .filter(|n| *n > 0)
            .map(|n| Duration::from_nanos(n.unsigned_abs()))
            .unwrap_or(default)
    };
    let interval = nanos(health.interval, Duration::from_secs(30));
    let timeout = nanos(health.timeout, Duration::from_secs(30));
    let start = nanos(health.start_period, Duration::ZERO);
    let retries = health.retries.filter(|r| *r > 0).unwrap_or(3);
    let rounds = u32::try_from(retries + 1).unwrap_or(u32::MAX);
    let wanted = start + (interval + timeout).saturating_mul(rounds) + Duration::from_secs(5);
    let deadline = wanted.min(HEALTHY_CAP);
    let capped = if wanted > HEALTHY_CAP { ", capped" } else { "" };
    let why = format!(
        "its healthcheck: start period {} + {} × (interval {} + timeout {}) + 5 s{capped}",
        seconds(start),
        rounds,
        seconds(interval),
        seconds(timeout)
    );
    Watch::Healthy { deadline, why }
}

/// The last lines of a container's health log, each `exit N: output`, for a failure to quote.
fn health_log(inspect: &ContainerInspectResponse) -> String {
    let log = inspect
        .state
        .as_ref()
        .and_then(|s| s.health.as_ref())
        .and_then(|h| h.log.clone())
        .unwrap_or_default();
    if log.is_empty() {
        return "its healthcheck has not reported yet".into();
    }
    let lines: Vec<String> = log
        .iter()
        .skip(log.len().saturating_sub(LOG_LINES))
        .map(|result| {
            let output: String = result
                .output
                .as_deref()
                .unwrap_or_default()
                .trim()
                .replace('\n', " ⏎ ")
                .chars()
                .take(200)
                .collect();
            format!("exit {}: {output}", result.exit_code.unwrap_or(-1))
        })
        .collect();
    format!("its healthcheck said: {}", lines.join(" | "))
}

/// Why a look at the new container ends the watch with a failure, if it does: it stopped, or it
/// restarts, or its healthcheck said `unhealthy`.
fn failed(name: &str, now: &ContainerInspectResponse, ran: Duration) -> Option<String> {
    let restarts = now.restart_count.unwrap_or(0);
    let state = now.state.clone().unwrap_or_default();
    let exit_code = state.exit_code.unwrap_or(0);
    let ran = seconds(ran);
    let restarting = state.restarting.unwrap_or(false);
    if restarting || restarts > 0 {
        // Its exit code is the last run's only while it waits to restart: a start resets it.
        let exit = if restarting {
            format!(", last exit code {exit_code}")
        } else {
            String::new()
        };
        return Some(format!(
            "the new container {name} kept restarting (restarted {restarts} time(s) within {ran}{exit})"
        ));
    }
    if !state.running.unwrap_or(false) {
        let error = state
            .error
            .filter(|e| !e.is_empty())
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Some(format!(
            "the new container {name} stopped within {ran} of its start (exit code {exit_code}{error})"
        ));
    }
    let health = state.health.and_then(|h| h.status);
    (health == Some(HealthStatusEnum::UNHEALTHY)).then(|| {
        format!(
            "the new container {name} turned unhealthy {ran} after its start; {}",
            health_log(now)
        )
    })
}

impl Daemon {
    /// Watch the started container `id` (named `name`) until it proves itself or fails: Err says
    /// why (its exit, its restarts, `unhealthy` or the deadline, with its last health log lines).
    /// `said` hears what it is watched for.
    pub(super) async fn prove(
        &self,
        name: &str,
        id: &str,
        said: &(dyn Fn(&str) + Sync),
    ) -> Result<Proven, DaemonError> {
        let started = Instant::now();
        let mut watch = None;
        loop {
            tokio::time::sleep(LOOK_EVERY).await;
            let now = self
                .docker
                .inspect_container(id, None)
                .await
                .map_err(self.call_error("inspect the new container"))?;
            let ran = started.elapsed();
            let refused = |message| DaemonError::Refused {
                endpoint: self.endpoint.to_string(),
                message,
            };
            if let Some(message) = failed(name, &now, ran) {
                return Err(refused(message));
            }
            let watch = watch.get_or_insert_with(|| {
                let watch = watch_for(now.config.as_ref().and_then(|c| c.healthcheck.as_ref()));
                said(&watch.to_string());
                watch
            });
            let health = now
                .state
                .as_ref()
                .and_then(|s| s.health.as_ref())
                .and_then(|h| h.status);
            match watch {
                Watch::Steady(steady) if ran >= *steady => return Ok(Proven::Steady(ran)),
                Watch::Healthy { .. } if health == Some(HealthStatusEnum::HEALTHY) => {
                    return Ok(Proven::Healthy(ran));
                }
                Watch::Healthy { deadline, why } if ran >= *deadline => {
                    let status = health.map(|h| h.to_string()).unwrap_or_default();
                    return Err(refused(format!(
                        "the new container {name} was not healthy within {} ({why}), still {status}; {}",
                        seconds(*deadline),
                        health_log(&now)
                    )));
                }
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deadline_follows_the_healthcheck_and_is_capped() {
        let second = 1_000_000_000;
        let quick = HealthConfig {
            test: Some(vec!["CMD-SHELL".into(), "true".into()]),
            interval: Some(second),
            timeout: Some(second),
            retries: Some(3),
            start_period: Some(2 * second),
            ..Default::default()
        };
        let Watch::Healthy { deadline, .. } = watch_for(Some(&quick)) else {
            panic!("a healthcheck is watched for healthy");
        };
        assert_eq!(deadline, Duration::from_secs(2 + 4 * 2 + 5));
        let defaults = HealthConfig {
            test: Some(vec!["CMD".into(), "check".into()]),
            ..Default::default()
        };
        let Watch::Healthy { deadline, .. } = watch_for(Some(&defaults)) else {
            panic!("a healthcheck is watched for healthy");
        };
        assert_eq!(deadline, Duration::from_secs(4 * 60 + 5));
        let slow = HealthConfig {
            interval: Some(600 * second),
            ..defaults
        };
        let Watch::Healthy { deadline, why } = watch_for(Some(&slow)) else {
            panic!("a healthcheck is watched for healthy");
        };
        assert_eq!(deadline, HEALTHY_CAP);
        assert!(why.contains("capped"), "{why}");
    }

    #[test]
    fn no_healthcheck_or_a_disabled_one_is_watched_running() {
        assert_eq!(watch_for(None), Watch::Steady(STEADY));
        let disabled = HealthConfig {
            test: Some(vec!["NONE".into()]),
            ..Default::default()
        };
        assert_eq!(watch_for(Some(&disabled)), Watch::Steady(STEADY));
        assert!(Proven::Steady(STEADY).to_string().contains("5.0 s"));
        let said = watch_for(None).to_string();
        assert!(
            said.contains("no healthcheck: it must keep running 5.0 s"),
            "{said}"
        );
    }
}
