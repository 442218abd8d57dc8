//! [`ServerAddr`]: the `scheme`, `host` and `port` a server URL names.

use crate::error::ClientError;

/// The `scheme`, `host` and `port` of a server URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerAddr {
    /// `https` (or `http`).
    pub tls: bool,
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// Port (443 / 80 by default).
    pub port: u16,
    /// The `Host` header value (`host:port`, IPv6 bracketed).
    pub authority: String,
    /// A path prefix in the server URL (e.g. behind a proxy), without trailing `/`.
    pub path_prefix: String,
}

impl ServerAddr {
    /// Parses `https://host:port[/prefix]`.
    pub fn parse(server: &str) -> Result<ServerAddr, ClientError> {
        let uri: http::Uri = server
            .parse()
            .map_err(|e| ClientError::InvalidServer(format!("{server:?}: {e}")))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(ClientError::InvalidServer(format!(
                    "{server:?}: scheme must be https or http"
                )));
            }
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| ClientError::InvalidServer(format!("{server:?}: no host")))?;
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let authority = if bare.contains(':') {
            format!("[{bare}]:{port}")
        } else {
            format!("{bare}:{port}")
        };
        Ok(ServerAddr {
            tls,
            host: bare,
            port,
            authority,
            path_prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_addresses() {
        let a = ServerAddr::parse("https://127.0.0.1:6443").unwrap();
        assert_eq!(
            (a.tls, a.host.as_str(), a.port, a.authority.as_str()),
            (true, "127.0.0.1", 6443, "127.0.0.1:6443")
        );
        let a = ServerAddr::parse("https://[::1]:8443/prefix/").unwrap();
        assert_eq!(
            (
                a.host.as_str(),
                a.authority.as_str(),
                a.path_prefix.as_str()
            ),
            ("::1", "[::1]:8443", "/prefix")
        );
        let a = ServerAddr::parse("http://kube").unwrap();
        assert_eq!((a.tls, a.port), (false, 80));
        assert_eq!(ServerAddr::parse("https://kube").unwrap().port, 443);
        assert!(ServerAddr::parse("ftp://x").is_err());
        assert!(ServerAddr::parse("not a url").is_err());
    }
}
