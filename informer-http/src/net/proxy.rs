//! Which proxy a connection to the API server goes through, with client-go's precedence:
//!
//! 1. the kubeconfig cluster's `proxy-url` ([`Config::proxy_url`]), for every request, whatever
//!    the environment says;
//! 2. else the environment, as Go's `http.ProxyFromEnvironment`: `HTTPS_PROXY` (or
//!    `https_proxy`) for an `https://` server, `HTTP_PROXY` (or `http_proxy`) for an `http://`
//!    one, unless `NO_PROXY` (or `no_proxy`) matches the server; a server on `localhost` or a
//!    loopback address is never proxied through the environment;
//! 3. else a direct connection.
//!
//! Proxies are `http://` or `https://` and are asked to `CONNECT` to the server. A `socks5://`
//! proxy is refused with [`ClientError::Proxy`] rather than ignored.

use std::net::IpAddr;

use crate::addr::ServerAddr;
use crate::config::Config;
use crate::error::ClientError;

pub use crate::config::{Proxy, ProxyEnv};

/// The proxy for `config`'s server (see the module documentation), `None` for a direct
/// connection. The environment is `config.proxy_env` when set, else this process's.
pub fn proxy_for(config: &Config) -> Result<Option<Proxy>, ClientError> {
    proxy_for_url(config, &config.server)
}

/// The proxy for a request of `config`'s client to `url` (another host than the API server:
/// an OIDC issuer's discovery document and token endpoint), with the same precedence as
/// [`proxy_for`]: the kubeconfig's `proxy-url`, else `HTTPS_PROXY` / `HTTP_PROXY` (by `url`'s
/// scheme) unless `NO_PROXY` matches `url`'s host or it is a loopback address.
pub fn proxy_for_url(config: &Config, url: &str) -> Result<Option<Proxy>, ClientError> {
    ProxySettings::of(config).for_url(url)
}

/// What of a configuration decides the proxy: the kubeconfig's `proxy-url` and the
/// environment (owned, to take to another thread).
#[derive(Clone, Debug, Default)]
pub(crate) struct ProxySettings {
    proxy_url: Option<String>,
    env: Option<ProxyEnv>,
}

impl ProxySettings {
    pub(crate) fn of(config: &Config) -> ProxySettings {
        ProxySettings {
            proxy_url: config.proxy_url.clone(),
            env: config.proxy_env.clone(),
        }
    }

    /// The proxy for `url` (see [`proxy_for_url`]).
    pub(crate) fn for_url(&self, url: &str) -> Result<Option<Proxy>, ClientError> {
        if let Some(url) = self.proxy_url.as_deref().filter(|u| !u.is_empty()) {
            return Proxy::parse(url, "proxy-url").map(Some);
        }
        let env = match &self.env {
            Some(e) => e.clone(),
            None => ProxyEnv::from_process(),
        };
        let addr = ServerAddr::parse(url)?;
        let (var, url) = if addr.tls {
            ("HTTPS_PROXY", env.https_proxy.as_deref())
        } else {
            ("HTTP_PROXY", env.http_proxy.as_deref())
        };
        let Some(url) = url.filter(|u| !u.is_empty()) else {
            return Ok(None);
        };
        if is_loopback(&addr.host)
            || no_proxy_matches(env.no_proxy.as_deref(), &addr.host, addr.port)
        {
            return Ok(None);
        }
        // Go accepts a bare `host:port` in the variable, meaning http.
        let url = if url.contains("://") {
            url.to_string()
        } else {
            format!("http://{url}")
        };
        Proxy::parse(&url, var).map(Some)
    }
}

fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Whether `NO_PROXY` exempts `host:port`, with Go's rules: `*` matches everything; an entry
/// is an IP address, a CIDR range, or a domain (`example.com` and `.example.com` both match
/// the domain's subdomains; without the dot also the name itself), each optionally with a
/// `:port`.
pub fn no_proxy_matches(no_proxy: Option<&str>, host: &str, port: u16) -> bool {
    let Some(list) = no_proxy else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    let ip = host.parse::<IpAddr>().ok();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        if entry == "*" {
            return true;
        }
        let entry = entry.to_ascii_lowercase();
        if let Some((net, bits)) = entry.split_once('/') {
            if let (Some(ip), Ok(net), Ok(bits)) = (ip, net.parse::<IpAddr>(), bits.parse::<u8>()) {
                if in_cidr(ip, net, bits) {
                    return true;
                }
            }
            continue;
        }
        // An optional port: `host:port`, `[v6]:port`.
        let (name, entry_port) = split_port(&entry);
        if entry_port.is_some_and(|p| p != port) {
            continue;
        }
        if let (Some(ip), Ok(e)) = (ip, name.parse::<IpAddr>()) {
            if ip == e {
                return true;
            }
            continue;
        }
        let name = name.trim_start_matches("*.");
        if let Some(suffix) = name.strip_prefix('.') {
            if host.ends_with(&format!(".{suffix}")) {
                return true;
            }
        } else if host == name || host.ends_with(&format!(".{name}")) {
            return true;
        }
    }
    false
}

fn split_port(entry: &str) -> (&str, Option<u16>) {
    if let Some(rest) = entry.strip_prefix('[') {
        if let Some((h, p)) = rest.split_once(']') {
            return (h, p.strip_prefix(':').and_then(|p| p.parse().ok()));
        }
    }
    match entry.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, p.parse().ok()),
        _ => (entry, None),
    }
}

fn in_cidr(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) if bits <= 32 => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) if bits <= 128 => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(server: &str, https: Option<&str>, no: Option<&str>) -> Config {
        let mut c = Config::new(server);
        c.proxy_env = Some(ProxyEnv {
            https_proxy: https.map(str::to_string),
            http_proxy: Some("http://plain-proxy:3128".into()),
            no_proxy: no.map(str::to_string),
        });
        c
    }

    #[test]
    fn precedence_is_client_gos() {
        // Environment: HTTPS_PROXY for an https server.
        let p = proxy_for(&cfg("https://api.example.com", Some("proxy:8080"), None))
            .unwrap()
            .unwrap();
        assert_eq!((p.host.as_str(), p.port, p.tls), ("proxy", 8080, false));
        // HTTP_PROXY for an http server.
        let p = proxy_for(&cfg("http://api.example.com", None, None))
            .unwrap()
            .unwrap();
        assert_eq!(p.host, "plain-proxy");
        // No HTTPS_PROXY: HTTP_PROXY does not apply to an https server.
        assert!(
            proxy_for(&cfg("https://api.example.com", None, None))
                .unwrap()
                .is_none()
        );
        // NO_PROXY matches; loopback is never proxied through the environment.
        assert!(
            proxy_for(&cfg(
                "https://api.example.com",
                Some("p:1"),
                Some("example.com")
            ))
            .unwrap()
            .is_none()
        );
        assert!(
            proxy_for(&cfg("https://127.0.0.1:6443", Some("p:1"), None))
                .unwrap()
                .is_none()
        );
        assert!(
            proxy_for(&cfg("https://localhost:6443", Some("p:1"), None))
                .unwrap()
                .is_none()
        );
        // The kubeconfig's proxy-url wins over everything, loopback and NO_PROXY included.
        let mut c = cfg("https://127.0.0.1:6443", Some("http://env:1"), Some("*"));
        c.proxy_url = Some("https://user:pa%40ss@kc-proxy:8443".into());
        let p = proxy_for(&c).unwrap().unwrap();
        assert_eq!((p.host.as_str(), p.port, p.tls), ("kc-proxy", 8443, true));
        use base64::Engine as _;
        let want = base64::engine::general_purpose::STANDARD.encode("user:pa@ss");
        assert_eq!(
            p.authorization.as_ref().unwrap().expose(),
            &format!("Basic {want}")
        );
        // The password is never shown.
        assert!(!format!("{p:?}").contains("pa%40ss"), "{p:?}");
        assert!(!format!("{c:?}").contains("pa%40ss"), "{c:?}");
        // SOCKS is refused, not ignored.
        c.proxy_url = Some("socks5://127.0.0.1:1080".into());
        assert!(matches!(proxy_for(&c), Err(ClientError::Proxy(m)) if m.contains("SOCKS")));
    }

    #[test]
    fn no_proxy_rules() {
        let m = |list: &str, host: &str, port: u16| no_proxy_matches(Some(list), host, port);
        assert!(m("*", "anything", 1));
        assert!(m("example.com", "example.com", 443));
        assert!(m("example.com", "api.example.com", 443));
        assert!(m(".example.com", "api.example.com", 443));
        assert!(!m(".example.com", "example.com", 443));
        assert!(!m("example.com", "notexample.com", 443));
        assert!(m("10.0.0.0/8", "10.1.2.3", 443));
        assert!(!m("10.0.0.0/8", "11.1.2.3", 443));
        assert!(m("10.1.2.3", "10.1.2.3", 443));
        assert!(m("api.example.com:6443", "api.example.com", 6443));
        assert!(!m("api.example.com:6443", "api.example.com", 443));
        assert!(m(" foo , Example.COM ", "x.example.com", 1));
        assert!(m("fd00::/8", "fd00::2", 1));
        assert!(!no_proxy_matches(None, "x", 1));
    }
}
