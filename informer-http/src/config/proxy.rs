//! The proxy settings as configured: the kubeconfig's `proxy-url` parsed ([`Proxy`]) and the
//! proxy environment variables ([`ProxyEnv`]). Which proxy a connection takes is the network
//! layer's decision (`net::proxy`).

use std::fmt;

use super::Secret;
use crate::error::ClientError;

/// The proxy environment variables (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`, upper or lower
/// case, upper case first as in Go).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyEnv {
    /// `HTTPS_PROXY`.
    pub https_proxy: Option<String>,
    /// `HTTP_PROXY`.
    pub http_proxy: Option<String>,
    /// `NO_PROXY`.
    pub no_proxy: Option<String>,
}

impl ProxyEnv {
    /// The variables of this process.
    pub fn from_process() -> ProxyEnv {
        let get = |upper: &str, lower: &str| {
            std::env::var(upper)
                .ok()
                .filter(|v| !v.is_empty())
                .or_else(|| std::env::var(lower).ok().filter(|v| !v.is_empty()))
        };
        ProxyEnv {
            https_proxy: get("HTTPS_PROXY", "https_proxy"),
            http_proxy: get("HTTP_PROXY", "http_proxy"),
            no_proxy: get("NO_PROXY", "no_proxy"),
        }
    }
}

/// A proxy to go through. `Debug` hides its password.
#[derive(Clone, PartialEq, Eq)]
pub struct Proxy {
    /// The proxy is reached over TLS (`https://`).
    pub tls: bool,
    /// Its host (IPv6 without brackets).
    pub host: String,
    /// Its port (default 80 for http, 443 for https).
    pub port: u16,
    /// `Proxy-Authorization` value, from user and password in the URL.
    pub authorization: Option<Secret<String>>,
    /// The URL as configured, with any password replaced.
    pub shown: String,
}

impl fmt::Debug for Proxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Proxy").field("url", &self.shown).finish()
    }
}

impl Proxy {
    /// Parses `http://[user:password@]host[:port]` or `https://...`.
    pub fn parse(url: &str, origin: &str) -> Result<Proxy, ClientError> {
        let bad = |m: &str| ClientError::Proxy(format!("{origin}: {m}"));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| bad("not a URL (scheme://host:port)"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            "socks5" | "socks5h" | "socks4" | "socks" => {
                return Err(bad(
                    "SOCKS proxies are not supported (use an HTTP CONNECT proxy)",
                ));
            }
            _ => return Err(bad("the scheme must be http or https")),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let shown = match userinfo {
            Some(u) => {
                let user = u.split(':').next().unwrap_or("");
                format!("{scheme}://{user}:<redacted>@{hostport}")
            }
            None => format!("{scheme}://{hostport}"),
        };
        let uri: http::Uri = format!("{scheme}://{hostport}")
            .parse()
            .map_err(|_| bad("not a valid URL"))?;
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| bad("no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let authorization = userinfo.map(|u| {
            use base64::Engine as _;
            let (user, pass) = u.split_once(':').unwrap_or((u, ""));
            let raw = format!("{}:{}", percent_decode(user), percent_decode(pass));
            Secret::new(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(raw)
            ))
        });
        Ok(Proxy {
            tls,
            host,
            port,
            authorization,
            shown,
        })
    }

    /// The proxy's `host:port` (IPv6 bracketed).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
