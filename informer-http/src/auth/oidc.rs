//! OIDC identities (kubeconfig `auth-provider: oidc`), as client-go's
//! `plugin/pkg/client/auth/oidc` uses them: the id-token is the bearer token; once expired it
//! is refreshed with the refresh-token at the issuer's token endpoint (found in its discovery
//! document), over [`super::http`] and through the client's proxy.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use base64::Engine as _;

use super::process::on_thread;
use super::state::States;
use super::token::bearer;
use crate::config::{Config, OidcConfig, Secret};
use crate::error::CredentialError;
use crate::net::proxy::ProxySettings;

/// A refreshed id-token and the refresh token to use next.
type OidcTokens = (Secret<String>, Option<Secret<String>>);

/// The state of an OIDC identity: its refreshed tokens, shared by the clones of its
/// [`OidcConfig`] (see [`super::state`]).
#[derive(Default)]
pub(crate) struct OidcCache {
    tokens: Mutex<Option<OidcTokens>>,
    running: futures_util::lock::Mutex<()>,
    refreshes: std::sync::atomic::AtomicU64,
}

impl fmt::Debug for OidcCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OidcCache(<redacted>)")
    }
}

/// The states of the OIDC identities.
static STATES: States<OidcCache> = States::new();

impl OidcCache {
    /// The state of `oidc`'s identity.
    pub(super) fn of(oidc: &OidcConfig) -> Arc<OidcCache> {
        STATES.of(&oidc.source)
    }
}

/// How many times `oidc`'s id-token has been refreshed.
pub fn oidc_refreshes(oidc: &OidcConfig) -> u64 {
    OidcCache::of(oidc)
        .refreshes
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// An id-token within this long of its `exp` counts as expired (client-go's `expiryDelta`).
const OIDC_EXPIRY_DELTA: Duration = Duration::from_secs(10);

/// The `Authorization` header value of `oidc`: its id-token while it has not expired, else a
/// new one from the issuer (one refresh at a time, on a helper thread; requests arriving
/// meanwhile wait for it). `config` gives the proxy settings the refresh goes through.
pub(super) async fn authorization(
    oidc: &OidcConfig,
    cache: &Arc<OidcCache>,
    config: &Config,
) -> Result<Option<Secret<String>>, CredentialError> {
    if let Some(t) = oidc_current(oidc, cache) {
        return Ok(Some(bearer(&t)));
    }
    let _running = cache.running.lock().await;
    if let Some(t) = oidc_current(oidc, cache) {
        return Ok(Some(bearer(&t)));
    }
    let req = oidc_refresh_request(oidc, cache)?;
    let (o, c) = (oidc.clone(), cache.clone());
    let proxy = ProxySettings::of(config);
    let out = on_thread("informer-oidc", move || {
        Ok(oidc_refresh(&o, &c, &req, &proxy))
    })
    .await
    .map_err(|e| oidc_error(oidc, e.to_string()))??;
    Ok(Some(bearer(&out)))
}

/// As [`authorization`], on this thread.
pub(super) fn authorization_blocking(
    oidc: &OidcConfig,
    cache: &OidcCache,
    config: &Config,
) -> Result<Option<Secret<String>>, CredentialError> {
    if let Some(t) = oidc_current(oidc, cache) {
        return Ok(Some(bearer(&t)));
    }
    let req = oidc_refresh_request(oidc, cache)?;
    let proxy = ProxySettings::of(config);
    Ok(Some(bearer(&oidc_refresh(oidc, cache, &req, &proxy)?)))
}

/// The id-token to use now, when it has not expired.
fn oidc_current(oidc: &OidcConfig, cache: &OidcCache) -> Option<Secret<String>> {
    let cached = cache
        .tokens
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|(id, _)| id.clone());
    let token = cached.or_else(|| oidc.id_token.clone())?;
    let exp = jwt_expiry(token.expose())?;
    (SystemTime::now() + OIDC_EXPIRY_DELTA < exp).then_some(token)
}

/// The `exp` claim of a JWT (`None` when it is not a JWT with one: treated as expired).
fn jwt_expiry(jwt: &str) -> Option<SystemTime> {
    let payload = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let exp = claims.get("exp")?.as_f64()?;
    (exp >= 0.0).then(|| SystemTime::UNIX_EPOCH + Duration::from_secs_f64(exp))
}

fn oidc_error(oidc: &OidcConfig, message: String) -> CredentialError {
    CredentialError::OidcRefresh {
        user: oidc.user.clone(),
        issuer: oidc.issuer_url.clone().unwrap_or_default(),
        message,
    }
}

/// What a refresh needs: the refresh token, the issuer and the client id.
struct RefreshRequest {
    refresh_token: Secret<String>,
    issuer: String,
    client_id: String,
}

fn oidc_refresh_request(
    oidc: &OidcConfig,
    cache: &OidcCache,
) -> Result<RefreshRequest, CredentialError> {
    let refresh_token = cache
        .tokens
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .and_then(|(_, r)| r.clone())
        .or_else(|| oidc.refresh_token.clone());
    let mut missing = Vec::new();
    if refresh_token.is_none() {
        missing.push("refresh-token");
    }
    if oidc.issuer_url.is_none() {
        missing.push("idp-issuer-url");
    }
    if oidc.client_id.is_none() {
        missing.push("client-id");
    }
    match (refresh_token, &oidc.issuer_url, &oidc.client_id) {
        (Some(refresh_token), Some(issuer), Some(client_id)) => Ok(RefreshRequest {
            refresh_token,
            issuer: issuer.trim_end_matches('/').to_string(),
            client_id: client_id.clone(),
        }),
        _ => Err(CredentialError::OidcCannotRefresh {
            user: oidc.user.clone(),
            missing,
        }),
    }
}

/// Refreshes the id-token: the token endpoint from the issuer's discovery document, then the
/// `refresh_token` grant, both through the client's proxy for their URLs (`proxy-url`, else
/// `HTTPS_PROXY` unless `NO_PROXY` matches). Keeps the new id-token (and refresh token, when
/// the issuer rotates it).
fn oidc_refresh(
    oidc: &OidcConfig,
    cache: &OidcCache,
    req: &RefreshRequest,
    proxy: &ProxySettings,
) -> Result<Secret<String>, CredentialError> {
    let fail = |m: String| oidc_error(oidc, m);
    let ca = oidc.issuer_ca_pem.as_deref();
    let discovery_url = format!("{}/.well-known/openid-configuration", req.issuer);
    let proxy_for = |url: &str| proxy.for_url(url).map_err(|e| e.to_string());
    let (status, body) = proxy_for(&discovery_url)
        .and_then(|p| super::http::request(&discovery_url, ca, p.as_ref(), "GET", &[], None))
        .map_err(|m| fail(format!("discovery: {m}")))?;
    if status != 200 {
        return Err(fail(format!("discovery document: HTTP {status}")));
    }
    let doc: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|_| fail("the discovery document is not JSON".into()))?;
    let endpoint = doc
        .get("token_endpoint")
        .and_then(|v| v.as_str())
        .ok_or_else(|| fail("the discovery document has no token_endpoint".into()))?
        .to_string();
    let mut scopes = vec!["openid".to_string()];
    scopes.extend(oidc.extra_scopes.iter().cloned());
    let mut form = vec![
        ("grant_type", "refresh_token".to_string()),
        ("refresh_token", req.refresh_token.expose().clone()),
        ("client_id", req.client_id.clone()),
        ("scope", scopes.join(" ")),
    ];
    if let Some(secret) = &oidc.client_secret {
        form.push(("client_secret", secret.expose().clone()));
    }
    let body = form
        .iter()
        .map(|(k, v)| format!("{k}={}", form_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let (status, answer) = proxy_for(&endpoint)
        .and_then(|p| {
            super::http::request(
                &endpoint,
                ca,
                p.as_ref(),
                "POST",
                &[(
                    "Content-Type",
                    "application/x-www-form-urlencoded".to_string(),
                )],
                Some(body.as_bytes()),
            )
        })
        .map_err(|m| fail(format!("token endpoint {endpoint}: {m}")))?;
    let json: Option<serde_json::Value> = serde_json::from_slice(&answer).ok();
    if status != 200 {
        // The OAuth2 error code (`invalid_grant`, ...) is safe to show; the rest is not quoted.
        let code = json
            .as_ref()
            .and_then(|j| j.get("error"))
            .and_then(|e| e.as_str())
            .unwrap_or("");
        return Err(fail(format!(
            "token endpoint {endpoint}: HTTP {status} {code}"
        )));
    }
    let json = json.ok_or_else(|| fail(format!("token endpoint {endpoint}: not JSON")))?;
    let id_token = json
        .get("id_token")
        .and_then(|v| v.as_str())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            fail(format!(
                "token endpoint {endpoint}: no id_token in the answer"
            ))
        })?;
    let id_token = Secret::new(id_token.to_string());
    let refresh = json
        .get("refresh_token")
        .and_then(|v| v.as_str())
        .filter(|t| !t.is_empty())
        .map(|t| Secret::new(t.to_string()))
        .unwrap_or_else(|| req.refresh_token.clone());
    *cache.tokens.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((id_token.clone(), Some(refresh)));
    cache
        .refreshes
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Ok(id_token)
}

fn form_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
