//! In-cluster configuration: the pod's service account.

use std::path::Path;

use super::{Auth, Config, check_certs};
use crate::error::ConfigError;

/// In-cluster configuration from a service-account directory `root` (normally
/// [`SERVICE_ACCOUNT_DIR`](super::SERVICE_ACCOUNT_DIR)) and the values of
/// `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT`.
///
/// The token is re-read from `root/token` before every request, as kubelet rotates it.
pub fn incluster_from(
    root: &Path,
    host: Option<&str>,
    port: Option<&str>,
) -> Result<Config, ConfigError> {
    let host = host
        .filter(|h| !h.is_empty())
        .ok_or(ConfigError::MissingEnv {
            var: "KUBERNETES_SERVICE_HOST",
        })?;
    let port = port
        .filter(|p| !p.is_empty())
        .ok_or(ConfigError::MissingEnv {
            var: "KUBERNETES_SERVICE_PORT",
        })?;
    if port.parse::<u16>().is_err() {
        return Err(ConfigError::InvalidField {
            path: "KUBERNETES_SERVICE_PORT".into(),
            field: "KUBERNETES_SERVICE_PORT".into(),
            message: format!("not a port: {port:?}"),
        });
    }
    let server = if host.contains(':') && !host.starts_with('[') {
        format!("https://[{host}]:{port}")
    } else {
        format!("https://{host}:{port}")
    };
    let token_path = root.join("token");
    let token = std::fs::read_to_string(&token_path).map_err(|source| ConfigError::Io {
        path: token_path.clone(),
        source,
    })?;
    if token.trim().is_empty() {
        return Err(ConfigError::InvalidField {
            path: token_path,
            field: "token".into(),
            message: "empty".into(),
        });
    }
    let ca_path = root.join("ca.crt");
    let ca = std::fs::read(&ca_path).map_err(|source| ConfigError::Io {
        path: ca_path.clone(),
        source,
    })?;
    check_certs(&ca).map_err(|message| ConfigError::InvalidField {
        path: ca_path,
        field: "ca.crt".into(),
        message,
    })?;
    let ns_path = root.join("namespace");
    let namespace = match std::fs::read_to_string(&ns_path) {
        Ok(ns) if !ns.trim().is_empty() => ns.trim().to_string(),
        Ok(_) => "default".to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "default".to_string(),
        Err(source) => {
            return Err(ConfigError::Io {
                path: ns_path,
                source,
            });
        }
    };
    let mut cfg = Config::new(server);
    cfg.root_ca_pem = Some(ca);
    cfg.auth = Auth::TokenFile(token_path);
    cfg.default_namespace = namespace;
    Ok(cfg)
}
