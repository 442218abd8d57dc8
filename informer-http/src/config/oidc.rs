//! The `auth-provider: {name: oidc}` section of a kubeconfig user, as client-go's
//! `plugin/pkg/client/auth/oidc` reads it.

use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;

use super::{Secret, SourceId};

/// An OIDC identity: an `id-token` used as the bearer token, refreshed through the issuer's
/// token endpoint (found in its discovery document) with the `refresh-token` once it has
/// expired.
///
/// `Debug` shows the client id and the issuer only. Clones share the refreshed tokens. New
/// tokens are kept in memory; the kubeconfig file is not rewritten.
#[derive(Clone)]
#[non_exhaustive]
pub struct OidcConfig {
    /// `client-id`.
    pub client_id: Option<String>,
    /// `client-secret`.
    pub client_secret: Option<Secret<String>>,
    /// `id-token`.
    pub id_token: Option<Secret<String>>,
    /// `refresh-token`.
    pub refresh_token: Option<Secret<String>>,
    /// `idp-issuer-url`.
    pub issuer_url: Option<String>,
    /// The issuer's CA bundle, PEM (`idp-certificate-authority(-data)`); `None`: the system's
    /// roots.
    pub issuer_ca_pem: Option<Vec<u8>>,
    /// `extra-scopes`, comma-separated in the kubeconfig.
    pub extra_scopes: Vec<String>,
    /// The kubeconfig user (named in errors).
    pub user: String,
    /// The kubeconfig file defining it.
    pub kubeconfig: PathBuf,
    /// Which source this is: shared by its clones, so they share its credential.
    pub(crate) source: SourceId,
}

impl OidcConfig {
    /// An OIDC identity for the kubeconfig user `user`, with nothing set.
    pub fn new(user: impl Into<String>) -> OidcConfig {
        OidcConfig {
            client_id: None,
            client_secret: None,
            id_token: None,
            refresh_token: None,
            issuer_url: None,
            issuer_ca_pem: None,
            extra_scopes: Vec::new(),
            user: user.into(),
            kubeconfig: PathBuf::new(),
            source: SourceId::new(),
        }
    }
}

impl PartialEq for OidcConfig {
    fn eq(&self, o: &Self) -> bool {
        self.client_id == o.client_id
            && self.client_secret == o.client_secret
            && self.id_token == o.id_token
            && self.refresh_token == o.refresh_token
            && self.issuer_url == o.issuer_url
            && self.issuer_ca_pem == o.issuer_ca_pem
            && self.extra_scopes == o.extra_scopes
            && self.user == o.user
            && self.kubeconfig == o.kubeconfig
    }
}

impl Eq for OidcConfig {}

impl fmt::Debug for OidcConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let present = |b: bool| if b { "<redacted>" } else { "<none>" };
        f.debug_struct("OidcConfig")
            .field("client_id", &self.client_id)
            .field("client_secret", &present(self.client_secret.is_some()))
            .field("id_token", &present(self.id_token.is_some()))
            .field("refresh_token", &present(self.refresh_token.is_some()))
            .field("issuer_url", &self.issuer_url)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "kebab-case")]
struct RawOidc {
    client_id: Option<String>,
    client_secret: Option<String>,
    id_token: Option<String>,
    refresh_token: Option<String>,
    idp_issuer_url: Option<String>,
    idp_certificate_authority: Option<String>,
    idp_certificate_authority_data: Option<String>,
    extra_scopes: Option<String>,
}

/// Reads `auth-provider.config` of an `oidc` provider. `Err`: the field and what is wrong
/// (never quoting a token or secret).
pub(crate) fn parse(
    config: Option<&serde_norway::Value>,
    user: &str,
    kubeconfig: PathBuf,
    dir: &std::path::Path,
) -> Result<OidcConfig, (String, String)> {
    let raw: RawOidc = match config {
        None => RawOidc::default(),
        Some(v) => serde_norway::from_value(v.clone()).map_err(|_| {
            (
                "auth-provider.config".to_string(),
                "not a map of strings".to_string(),
            )
        })?,
    };
    let nonempty = |s: Option<String>| s.filter(|s| !s.is_empty());
    let ca = if let Some(d) = nonempty(raw.idp_certificate_authority_data) {
        use base64::Engine as _;
        let clean: String = d.chars().filter(|c| !c.is_whitespace()).collect();
        Some(
            base64::engine::general_purpose::STANDARD
                .decode(clean)
                .map_err(|_| {
                    (
                        "auth-provider.config.idp-certificate-authority-data".to_string(),
                        "not base64".to_string(),
                    )
                })?,
        )
    } else if let Some(p) = nonempty(raw.idp_certificate_authority) {
        let p = dir.join(p);
        Some(std::fs::read(&p).map_err(|e| {
            (
                "auth-provider.config.idp-certificate-authority".to_string(),
                format!("{}: {e}", p.display()),
            )
        })?)
    } else {
        None
    };
    Ok(OidcConfig {
        client_id: nonempty(raw.client_id),
        client_secret: nonempty(raw.client_secret).map(Secret),
        id_token: nonempty(raw.id_token).map(Secret),
        refresh_token: nonempty(raw.refresh_token).map(Secret),
        issuer_url: nonempty(raw.idp_issuer_url),
        issuer_ca_pem: ca,
        extra_scopes: raw
            .extra_scopes
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        user: user.to_string(),
        kubeconfig,
        source: SourceId::new(),
    })
}
