//! What a machine meshtop makes runs as, in compose's words: `ports`, `volumes`, `networks` (with
//! aliases), `restart`, `healthcheck` and `stop_grace_period` of a `[[machine]]`, with compose's
//! meanings (the compose specification's short syntaxes and durations). Pure: each reader says what
//! is wrong with a value in words a mesh-file error can carry.

use std::time::Duration;

/// The service keys of a `[[machine]]` (all empty: the image's and the daemon's defaults, with
/// `restart = "unless-stopped"`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Service {
    pub ports: Vec<Port>,
    pub volumes: Vec<Volume>,
    /// The networks it joins, in file order (the first at create, the others connected after);
    /// empty: the daemon's default bridge.
    pub networks: Vec<Network>,
    pub restart: Option<Restart>,
    pub healthcheck: Option<Healthcheck>,
    /// How long a stop waits after SIGTERM before SIGKILL (the container's StopTimeout, in whole
    /// seconds, rounded up).
    pub stop_grace_period: Option<Duration>,
}

/// `ports = ["127.0.0.1:8080:80/tcp"]`: `[HOST_IP:][HOST_PORT:]CONTAINER_PORT[/PROTOCOL]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Port {
    pub host_ip: Option<String>,
    /// None: the daemon picks a free port.
    pub host_port: Option<u16>,
    pub container_port: u16,
    /// `tcp`, `udp` or `sctp`.
    pub protocol: String,
}

impl Port {
    /// The container side as the daemon keys it: `80/tcp`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.container_port, self.protocol)
    }
}

/// `volumes = ["data:/data", "/srv/www:/www:ro"]`: `SOURCE:TARGET[:ro|rw]`, a named volume (made by
/// the daemon when missing) or an absolute host path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Volume {
    pub source: String,
    pub target: String,
    pub read_only: bool,
}

impl Volume {
    /// As the daemon's `Binds` take it: `data:/data:ro`.
    pub fn bind(&self) -> String {
        let mode = if self.read_only { ":ro" } else { "" };
        format!("{}:{}{mode}", self.source, self.target)
    }
}

/// A network the machine joins, with its aliases there (compose's `networks.<name>.aliases`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Network {
    pub name: String,
    pub aliases: Vec<String>,
}

/// `restart`: compose's (and the daemon's) restart policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    No,
    Always,
    /// `on-failure[:N]`: at most N restarts when given.
    OnFailure(Option<u32>),
    UnlessStopped,
}

/// `healthcheck = { test = [...], interval = "5s", timeout = "2s", retries = 3, start_period = "10s" }`,
/// or `{ disable = true }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Healthcheck {
    /// As the daemon takes it: `["CMD", …]`, `["CMD-SHELL", "…"]`, or `["NONE"]` (disabled).
    pub test: Vec<String>,
    pub interval: Option<Duration>,
    pub timeout: Option<Duration>,
    pub retries: Option<u32>,
    pub start_period: Option<Duration>,
}

/// A compose duration: `1m30s`, `10s`, `500ms`, `2h`, `1.5s` (units `us`, `ms`, `s`, `m`, `h`,
/// summed in order as written).
pub fn parse_duration(text: &str) -> Result<Duration, &'static str> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err("is empty");
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or("has a number without a unit (us, ms, s, m or h)")?;
        let number: f64 = rest[..digits]
            .parse()
            .map_err(|_| "has no number before a unit")?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "us" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err("has a unit other than us, ms, s, m or h"),
        };
        rest = &rest[unit_len..];
        total += Duration::try_from_secs_f64(number * seconds).map_err(|_| "is too long")?;
    }
    Ok(total)
}

/// A port mapping's short syntax (no ranges).
pub fn parse_port(text: &str) -> Result<Port, &'static str> {
    let (address, protocol) = match text.rsplit_once('/') {
        Some((address, protocol @ ("tcp" | "udp" | "sctp"))) => (address, protocol),
        Some(_) => return Err("has a protocol other than tcp, udp or sctp"),
        None => (text, "tcp"),
    };
    if address.contains('-') {
        return Err("is a range of ports, which meshtop does not take: write one port per entry");
    }
    // An IPv6 host address is bracketed: `[::1]:8080:80`.
    let (host_ip, ports) = match address.strip_prefix('[') {
        Some(bracketed) => {
            let (ip, rest) = bracketed
                .split_once("]:")
                .ok_or("has a bracketed address without `]:` after it")?;
            (Some(ip.to_string()), rest)
        }
        None => match address.matches(':').count() {
            2 => {
                let (ip, rest) = address.split_once(':').ok_or("is not a port mapping")?;
                (Some(ip.to_string()), rest)
            }
            0 | 1 => (None, address),
            _ => return Err("has too many `:` (bracket an IPv6 address: [::1]:8080:80)"),
        },
    };
    let number = |text: &str| -> Result<u16, &'static str> {
        text.parse::<u16>()
            .ok()
            .filter(|n| *n > 0)
            .ok_or("has a port that is not a number from 1 to 65535")
    };
    let (host_port, container_port) = match ports.split_once(':') {
        Some(("", container)) => (None, number(container)?),
        Some((host, container)) => (Some(number(host)?), number(container)?),
        None => (None, number(ports)?),
    };
    Ok(Port {
        host_ip: host_ip.filter(|ip| !ip.is_empty()),
        host_port,
        container_port,
        protocol: protocol.to_string(),
    })
}

/// A volume's short syntax: `SOURCE:TARGET[:ro|rw]`, the source a volume name or a host path (a
/// relative one, `./www`, is resolved by the caller, which knows the mesh file's directory).
pub fn parse_volume(text: &str) -> Result<Volume, &'static str> {
    let parts: Vec<&str> = text.split(':').collect();
    let (source, target, read_only) = match parts.as_slice() {
        [source, target] => (*source, *target, false),
        [source, target, "ro"] => (*source, *target, true),
        [source, target, "rw"] => (*source, *target, false),
        [_, _, _] => return Err("has a mode other than ro or rw"),
        [_] => {
            return Err(
                "has no source: an anonymous volume is not kept across a send's new container; name one (data:/data)",
            );
        }
        _ => return Err("is not SOURCE:TARGET[:ro|rw]"),
    };
    if !target.starts_with('/') {
        return Err("has a target that is not an absolute path in the container");
    }
    let named = source
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && source
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    // A path: absolute, or relative (`./www`, resolved by the caller under the mesh file's directory).
    if !(named || source.starts_with('/') || source.starts_with('.')) {
        return Err(
            "has a source that is neither a volume name ([a-zA-Z0-9][a-zA-Z0-9_.-]*) nor a path",
        );
    }
    Ok(Volume {
        source: source.to_string(),
        target: target.to_string(),
        read_only,
    })
}

/// `restart`: `no`, `always`, `on-failure[:N]`, `unless-stopped`.
pub fn parse_restart(text: &str) -> Result<Restart, &'static str> {
    match text {
        "no" => Ok(Restart::No),
        "always" => Ok(Restart::Always),
        "unless-stopped" => Ok(Restart::UnlessStopped),
        "on-failure" => Ok(Restart::OnFailure(None)),
        other => match other.strip_prefix("on-failure:") {
            Some(n) => n
                .parse()
                .map(|n| Restart::OnFailure(Some(n)))
                .map_err(|_| "has a retry count that is not a whole number"),
            None => Err("is not no, always, on-failure[:N] or unless-stopped"),
        },
    }
}

/// Whether `name` is a network (or alias) name the daemon takes.
pub fn is_network_name(name: &str) -> bool {
    name.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_composes() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("10").is_err());
        assert!(parse_duration("10x").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn ports_take_composes_short_syntax() {
        let port = |host_ip: Option<&str>, host: Option<u16>, container, protocol: &str| Port {
            host_ip: host_ip.map(str::to_string),
            host_port: host,
            container_port: container,
            protocol: protocol.into(),
        };
        assert_eq!(parse_port("80"), Ok(port(None, None, 80, "tcp")));
        assert_eq!(parse_port("8080:80"), Ok(port(None, Some(8080), 80, "tcp")));
        assert_eq!(
            parse_port("127.0.0.1:8080:80/udp"),
            Ok(port(Some("127.0.0.1"), Some(8080), 80, "udp"))
        );
        assert_eq!(
            parse_port("127.0.0.1::80"),
            Ok(port(Some("127.0.0.1"), None, 80, "tcp"))
        );
        assert_eq!(
            parse_port("[::1]:8080:80"),
            Ok(port(Some("::1"), Some(8080), 80, "tcp"))
        );
        assert!(parse_port("8080-8081:80").is_err());
        assert!(parse_port("80/http").is_err());
        assert!(parse_port("0").is_err());
        assert!(parse_port("70000").is_err());
        assert!(parse_port("a:b:c:d").is_err());
    }

    #[test]
    fn volumes_take_composes_short_syntax() {
        assert_eq!(
            parse_volume("data:/data"),
            Ok(Volume {
                source: "data".into(),
                target: "/data".into(),
                read_only: false
            })
        );
        assert!(parse_volume("/srv/www:/www:ro").unwrap().read_only);
        assert_eq!(
            parse_volume("/srv/www:/www:ro").unwrap().bind(),
            "/srv/www:/www:ro"
        );
        assert!(parse_volume("/data").is_err());
        assert!(parse_volume("data:data").is_err());
        assert!(parse_volume("data:/data:rx").is_err());
        assert!(parse_volume("my data:/data").is_err());
    }

    #[test]
    fn restart_policies_are_composes() {
        assert_eq!(parse_restart("no"), Ok(Restart::No));
        assert_eq!(
            parse_restart("on-failure:3"),
            Ok(Restart::OnFailure(Some(3)))
        );
        assert_eq!(parse_restart("on-failure"), Ok(Restart::OnFailure(None)));
        assert!(parse_restart("sometimes").is_err());
        assert!(parse_restart("on-failure:x").is_err());
    }
}
