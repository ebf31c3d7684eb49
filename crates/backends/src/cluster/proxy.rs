//! Which proxy a cluster connection goes through, decided as kubectl decides it.
//!
//! kubectl (client-go) takes the kubeconfig cluster's `proxy-url` when set; otherwise Go's
//! `http.ProxyFromEnvironment`, i.e. `golang.org/x/net/http/httpproxy/proxy.go`: `HTTPS_PROXY` for an https
//! server, `HTTP_PROXY` for an http one (upper case first, then lower case), never for `localhost` or a
//! loopback address, and not for a host `NO_PROXY` matches (`*`, an IP, a CIDR, or a domain that matches
//! itself and its subdomains; a leading `.` or `*.` matches subdomains only; an optional `:port`).
//! kube-client's own reading of the environment ignores `NO_PROXY` for the server (it matches it against
//! the proxy's address), so meshtop decides and hands kube the answer.

use std::net::IpAddr;

/// The proxy for the API server at `server`; `cluster_proxy` is the kubeconfig's `proxy-url`, `env` reads
/// an environment variable.
pub fn proxy_for(
    server: &http::Uri,
    cluster_proxy: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<http::Uri>, ProxyError> {
    if let Some(proxy) = cluster_proxy.filter(|p| !p.is_empty()) {
        return parse_proxy(proxy).map(Some);
    }
    let any = |names: [&str; 2]| names.iter().find_map(|n| env(n).filter(|v| !v.is_empty()));
    let proxy = if server.scheme_str() == Some("https") {
        any(["HTTPS_PROXY", "https_proxy"])
    } else {
        any(["HTTP_PROXY", "http_proxy"])
    };
    let Some(proxy) = proxy else {
        return Ok(None);
    };
    let host = server.host().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = server
        .port_u16()
        .unwrap_or(if server.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let no_proxy = any(["NO_PROXY", "no_proxy"]).unwrap_or_default();
    if !use_proxy(host, port, &no_proxy) {
        return Ok(None);
    }
    parse_proxy(&proxy).map(Some)
}

/// A proxy address that does not parse, as the kubeconfig or the environment wrote it.
#[derive(Debug, thiserror::Error)]
#[error("invalid proxy address {proxy:?}: {source}")]
pub struct ProxyError {
    pub proxy: String,
    source: http::uri::InvalidUri,
}

/// Go's `parseProxy`: a proxy without a scheme is `http://`.
fn parse_proxy(proxy: &str) -> Result<http::Uri, ProxyError> {
    let text = if proxy.contains("://") {
        proxy.to_string()
    } else {
        format!("http://{proxy}")
    };
    text.parse::<http::Uri>().map_err(|source| ProxyError {
        proxy: proxy.to_string(),
        source,
    })
}

/// `httpproxy.config.useProxy`.
fn use_proxy(host: &str, port: u16, no_proxy: &str) -> bool {
    let host = host.to_ascii_lowercase();
    if host == "localhost" {
        return false;
    }
    let ip = host.parse::<IpAddr>().ok();
    if ip.is_some_and(|ip| ip.is_loopback()) {
        return false;
    }
    for entry in no_proxy.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let entry = entry.to_ascii_lowercase();
        if entry == "*" {
            return false;
        }
        if let Some((net, bits)) = entry.split_once('/')
            && let (Ok(net), Ok(bits)) = (net.parse::<IpAddr>(), bits.parse::<u32>())
        {
            if ip.is_some_and(|ip| in_cidr(ip, net, bits)) {
                return false;
            }
            continue;
        }
        if let Ok(entry_ip) = entry
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            if ip == Some(entry_ip) {
                return false;
            }
            continue;
        }
        let (name, entry_port) = match entry.rsplit_once(':') {
            Some((name, p)) if p.parse::<u16>().is_ok() => (name, p.parse::<u16>().ok()),
            _ => (entry.as_str(), None),
        };
        if entry_port.is_some_and(|p| p != port) {
            continue;
        }
        let name = name.strip_prefix('*').unwrap_or(name);
        let matched = match name.strip_prefix('.') {
            Some(_) => host.ends_with(name),
            None => host == name || host.ends_with(&format!(".{name}")),
        };
        if matched {
            return false;
        }
    }
    true
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u32) -> bool {
    match (ip, net) {
        (IpAddr::V4(ip), IpAddr::V4(net)) if bits <= 32 => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(ip) & mask == u32::from(net) & mask
        }
        (IpAddr::V6(ip), IpAddr::V6(net)) if bits <= 128 => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(ip) & mask == u128::from(net) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn decide(server: &str, vars: &[(&str, &str)]) -> Option<String> {
        let env = |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        proxy_for(&server.parse().unwrap(), None, &env)
            .unwrap()
            .map(|u| u.to_string())
    }

    #[test]
    fn proxies_as_go_decides() {
        let proxy = [("HTTPS_PROXY", "proxy.corp:3128")];
        assert_eq!(
            decide("https://api.example.com:6443", &proxy).as_deref(),
            Some("http://proxy.corp:3128/")
        );
        // Loopback and localhost are never proxied, NO_PROXY or not.
        assert_eq!(decide("https://127.0.0.1:6443", &proxy), None);
        assert_eq!(decide("https://localhost:6443", &proxy), None);
        // An http server takes HTTP_PROXY, not HTTPS_PROXY.
        assert_eq!(decide("http://10.0.0.1:8080", &proxy), None);
        let with = |no: &'static str| [("HTTPS_PROXY", "http://p:1"), ("NO_PROXY", no)];
        assert_eq!(decide("https://10.1.2.3", &with("10.0.0.0/8")), None);
        assert_eq!(decide("https://10.1.2.3", &with("10.1.2.3")), None);
        assert_eq!(decide("https://k.example.com", &with("example.com")), None);
        assert_eq!(
            decide("https://example.com", &with(".example.com")).as_deref(),
            Some("http://p:1/")
        );
        assert_eq!(
            decide("https://k.example.com", &with("*.example.com")),
            None
        );
        assert_eq!(
            decide("https://k.example.com:6443", &with("k.example.com:443")).as_deref(),
            Some("http://p:1/")
        );
        assert_eq!(decide("https://anything", &with("*")), None);
        assert_eq!(
            decide("https://k.other.com", &with("example.com, 10.0.0.0/8")).as_deref(),
            Some("http://p:1/")
        );
    }

    #[test]
    fn the_kubeconfig_proxy_wins() {
        let env = |_: &str| Some("http://ignored:1".to_string());
        let server: http::Uri = "https://127.0.0.1:6443".parse().unwrap();
        assert_eq!(
            proxy_for(&server, Some("socks5://s:1080"), &env)
                .unwrap()
                .map(|u| u.to_string())
                .as_deref(),
            Some("socks5://s:1080/")
        );
    }
}
