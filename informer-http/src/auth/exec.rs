//! Exec credential plugins (kubeconfig `exec`), as client-go's
//! `plugin/pkg/client/auth/exec` runs them: the plugin's result (a token, or a client
//! certificate and key) is cached until its `expirationTimestamp`, renewed shortly before it
//! and after a 401.

use std::fmt;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use rustls::sign::CertifiedKey;
use serde::Deserialize;

use super::process::{ProcessOutput, ProcessRunner, ProcessSpec, run_blocking};
use super::state::States;
use super::token::bearer;
use crate::config::{ExecConfig, InteractiveMode, Secret};
use crate::error::CredentialError;

/// The state of an exec plugin source: its cached result, shared by the clones of its
/// [`ExecConfig`] (see [`super::state`]).
#[derive(Default)]
pub(crate) struct ExecCache {
    state: Mutex<Option<Cached>>,
    /// One plugin run at a time: concurrent requests wait for it instead of running their own.
    running: futures_util::lock::Mutex<()>,
    /// The client certificate the plugin gave, if any (read at every TLS handshake).
    cert: RwLock<Option<Arc<CertifiedKey>>>,
    /// Bumped each time the plugin hands out a certificate or key different from the last:
    /// the backends tag their connections with it and reuse none made with an older one.
    cert_generation: std::sync::atomic::AtomicU64,
    runs: std::sync::atomic::AtomicU64,
    /// The run number and message of the last failed run: requests that waited for that run
    /// get its failure instead of running the plugin once each.
    last_failure: Mutex<Option<(u64, String)>>,
}

impl fmt::Debug for ExecCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ExecCache(<redacted>)")
    }
}

#[derive(Clone)]
struct Cached {
    token: Option<Secret<String>>,
    expires: Option<SystemTime>,
    issued: SystemTime,
}

impl Cached {
    /// Still good: no expiry, or not within the renewal margin of it (a tenth of the
    /// credential's lifetime, at most 10 s).
    fn fresh(&self, now: SystemTime) -> bool {
        let Some(exp) = self.expires else {
            return true;
        };
        let life = exp.duration_since(self.issued).unwrap_or_default();
        let margin = (life / 10).min(Duration::from_secs(10));
        now + margin < exp
    }
}

/// The states of the exec plugin sources.
static STATES: States<ExecCache> = States::new();

impl ExecCache {
    /// The state of `exec`'s source.
    pub(super) fn of(exec: &ExecConfig) -> Arc<ExecCache> {
        STATES.of(&exec.source)
    }

    /// The client certificate from the plugin's last answer.
    #[cfg(any(feature = "tokio", feature = "smol"))]
    pub(super) fn cert(&self) -> Option<Arc<CertifiedKey>> {
        self.cert.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes whenever the plugin's client certificate (or key) changes: a transport drops
    /// the connections made with an older one (none without a transport feature).
    #[cfg(any(feature = "tokio", feature = "smol"))]
    pub(super) fn cert_generation(&self) -> u64 {
        self.cert_generation
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Keeps `new` as the client certificate; a different one than before (its chain
    /// differs: a new key comes with a new certificate) starts a new `cert_generation`.
    fn set_cert(&self, new: CertifiedKey) {
        let mut cert = self.cert.write().unwrap_or_else(|e| e.into_inner());
        if cert.as_ref().is_none_or(|old| old.cert != new.cert) {
            self.cert_generation
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        *cert = Some(Arc::new(new));
    }

    fn current(&self) -> Option<Cached> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.as_ref().filter(|c| c.fresh(SystemTime::now())).cloned()
    }

    /// Forgets the cached credential when it is still the one `used` (a 401 answered it).
    fn invalidate(&self, used: Option<&Secret<String>>) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.as_ref().is_some_and(|c| c.token.as_ref() == used) {
            *s = None;
        }
    }
}

/// How many times `exec`'s plugin has run (for tests and diagnostics).
pub fn exec_runs(exec: &ExecConfig) -> u64 {
    ExecCache::of(exec)
        .runs
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// The `Authorization` header value from `exec`'s plugin: the cached token while it is fresh,
/// else a new run through `runner` (one at a time: requests arriving meanwhile wait for it and
/// share its result, or its failure).
pub(super) async fn authorization(
    exec: &ExecConfig,
    cache: &ExecCache,
    runner: &dyn ProcessRunner,
) -> Result<Option<Secret<String>>, CredentialError> {
    if let Some(c) = cache.current() {
        return Ok(c.token.as_ref().map(bearer));
    }
    let runs_before = cache.runs.load(std::sync::atomic::Ordering::Relaxed);
    let _running = cache.running.lock().await;
    if let Some(c) = cache.current() {
        return Ok(c.token.as_ref().map(bearer));
    }
    if let Some((run, message)) = cache
        .last_failure
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .filter(|(run, _)| *run > runs_before)
    {
        // The plugin failed while this request waited for it: one run, one failure.
        return Err(CredentialError::ExecOutput {
            user: exec.user.clone(),
            command: exec.command.clone(),
            message: format!("run {run} failed: {message}"),
        });
    }
    let spec = spec(exec)?;
    let out = runner.run(spec).await;
    let c = finish(exec, cache, out).inspect_err(|e| {
        let run = cache.runs.load(std::sync::atomic::Ordering::Relaxed);
        *cache.last_failure.lock().unwrap_or_else(|e| e.into_inner()) = Some((run, e.to_string()));
    })?;
    Ok(c.token.as_ref().map(bearer))
}

/// As [`authorization`], on this thread (the plugin runs with `std::process`).
pub(super) fn authorization_blocking(
    exec: &ExecConfig,
    cache: &ExecCache,
) -> Result<Option<Secret<String>>, CredentialError> {
    if let Some(c) = cache.current() {
        return Ok(c.token.as_ref().map(bearer));
    }
    let spec = spec(exec)?;
    let out = run_blocking(&spec);
    let c = finish(exec, cache, out)?;
    Ok(c.token.as_ref().map(bearer))
}

/// After a 401 answered `used` (the `Authorization` header sent): forgets the cached
/// credential if it is still that one, so the next request runs the plugin again.
pub(super) fn renew_after_unauthorized(cache: &ExecCache, used: Option<&Secret<String>>) {
    let used = used.map(|h| {
        Secret::new(
            h.expose()
                .strip_prefix("Bearer ")
                .unwrap_or_default()
                .to_string(),
        )
    });
    cache.invalidate(used.as_ref());
}

fn stdin_is_terminal() -> bool {
    use std::io::IsTerminal as _;
    std::io::stdin().is_terminal()
}

/// The command to run for `exec`, with `KUBERNETES_EXEC_INFO`.
fn spec(exec: &ExecConfig) -> Result<ProcessSpec, CredentialError> {
    let interactive = match exec.interactive_mode {
        InteractiveMode::Never => false,
        InteractiveMode::IfAvailable => stdin_is_terminal(),
        InteractiveMode::Always => {
            if !stdin_is_terminal() {
                return Err(CredentialError::ExecNeedsTerminal {
                    user: exec.user.clone(),
                    command: exec.command.clone(),
                });
            }
            true
        }
    };
    let mut spec_json = serde_json::json!({ "interactive": interactive });
    if let Some(c) = &exec.provide_cluster_info {
        let mut cluster = serde_json::json!({ "server": c.server });
        if let Some(n) = &c.tls_server_name {
            cluster["tls-server-name"] = n.clone().into();
        }
        if c.insecure_skip_tls_verify {
            cluster["insecure-skip-tls-verify"] = true.into();
        }
        if let Some(ca) = &c.certificate_authority_data {
            cluster["certificate-authority-data"] =
                base64::engine::general_purpose::STANDARD.encode(ca).into();
        }
        if let Some(p) = &c.proxy_url {
            cluster["proxy-url"] = p.clone().into();
        }
        spec_json["cluster"] = cluster;
    }
    let info = serde_json::json!({
        "apiVersion": exec.api_version.as_str(),
        "kind": "ExecCredential",
        "spec": spec_json,
    });
    let mut env: Vec<(String, String)> = exec
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.expose().clone()))
        .collect();
    env.push(("KUBERNETES_EXEC_INFO".into(), info.to_string()));
    Ok(ProcessSpec {
        program: exec.command.clone(),
        args: exec.args.iter().map(|a| a.expose().clone()).collect(),
        env,
        inherit_stdin: interactive,
        timeout: exec.timeout,
    })
}

#[derive(Deserialize)]
struct ExecCredentialOut {
    #[serde(rename = "apiVersion")]
    api_version: Option<String>,
    kind: Option<String>,
    status: Option<ExecStatusOut>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExecStatusOut {
    token: Option<String>,
    client_certificate_data: Option<String>,
    client_key_data: Option<String>,
    expiration_timestamp: Option<String>,
}

/// Checks a plugin run's outcome and caches its credential.
fn finish(
    exec: &ExecConfig,
    cache: &ExecCache,
    out: std::io::Result<ProcessOutput>,
) -> Result<Cached, CredentialError> {
    cache
        .runs
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let user = || exec.user.clone();
    let command = || exec.command.clone();
    let bad = |message: &str| CredentialError::ExecOutput {
        user: user(),
        command: command(),
        message: message.to_string(),
    };
    let out = match out {
        Ok(o) => o,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CredentialError::ExecNotFound {
                user: user(),
                command: command(),
                install_hint: exec.install_hint.clone(),
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            return Err(CredentialError::ExecTimedOut {
                user: user(),
                command: command(),
                timeout: exec.timeout,
            });
        }
        Err(source) => {
            return Err(CredentialError::ExecIo {
                user: user(),
                command: command(),
                source,
            });
        }
    };
    if !out.success {
        return Err(CredentialError::ExecFailed {
            user: user(),
            command: command(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    // serde_json's messages can quote the input: they are not passed on.
    let cred: ExecCredentialOut = serde_json::from_slice(&out.stdout)
        .map_err(|_| bad("its output is not an ExecCredential JSON object"))?;
    if cred.kind.as_deref() != Some("ExecCredential") {
        return Err(bad("its output's kind is not ExecCredential"));
    }
    let want = exec.api_version.as_str();
    if cred.api_version.as_deref() != Some(want) {
        return Err(CredentialError::ExecOutput {
            user: user(),
            command: command(),
            message: format!(
                "its output's apiVersion is {:?}, the kubeconfig says {want:?}",
                cred.api_version.as_deref().unwrap_or("")
            ),
        });
    }
    let status = cred
        .status
        .ok_or_else(|| bad("its output has no status field"))?;
    let token = status.token.filter(|t| !t.is_empty());
    let cert = status.client_certificate_data.filter(|c| !c.is_empty());
    let key = status.client_key_data.filter(|k| !k.is_empty());
    let certified = match (cert, key) {
        (None, None) => None,
        (Some(_), None) => {
            return Err(bad("status has clientCertificateData but no clientKeyData"));
        }
        (None, Some(_)) => {
            return Err(bad("status has clientKeyData but no clientCertificateData"));
        }
        (Some(c), Some(k)) => Some(certified_key(c.as_bytes(), k.as_bytes()).map_err(|m| bad(&m))?),
    };
    if token.is_none() && certified.is_none() {
        return Err(bad(
            "status has neither a token nor clientCertificateData and clientKeyData",
        ));
    }
    let expires = match status.expiration_timestamp.as_deref() {
        None | Some("") => None,
        Some(t) => Some(
            parse_rfc3339(t)
                .ok_or_else(|| bad("status.expirationTimestamp is not an RFC 3339 time"))?,
        ),
    };
    let cached = Cached {
        token: token.map(Secret::new),
        expires,
        issued: SystemTime::now(),
    };
    if let Some(ck) = certified {
        cache.set_cert(ck);
    }
    *cache.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(cached.clone());
    Ok(cached)
}

/// A client certificate and key (PEM) ready for rustls. Messages never quote the key.
fn certified_key(cert_pem: &[u8], key_pem: &[u8]) -> Result<CertifiedKey, String> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    crate::config::check_certs(cert_pem).map_err(|m| format!("clientCertificateData: {m}"))?;
    let certs = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("clientCertificateData: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("clientKeyData: {}", crate::config::pem_error(&e)))?;
    let signing = crate::net::tls::provider()
        .key_provider
        .load_private_key(key)
        .map_err(|_| "clientKeyData: unsupported private key".to_string())?;
    Ok(CertifiedKey::new(certs, signing))
}

/// Parses an RFC 3339 time (`2024-01-02T03:04:05Z`, fractions and offsets allowed).
fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos: u32 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &s[start..i.min(start + 9)];
        nanos = frac.parse::<u32>().ok()? * 10u32.pow(9 - frac.len() as u32);
    }
    let offset = match &s[i..] {
        "Z" | "z" => 0,
        rest if rest.len() == 6 && matches!(rest.as_bytes()[0], b'+' | b'-') => {
            if rest.as_bytes()[3] != b':' {
                return None;
            }
            let oh = num(i + 1..i + 3)?;
            let om = num(i + 4..i + 6)?;
            let o = oh * 3600 + om * 60;
            if rest.starts_with('-') { -o } else { o }
        }
        _ => return None,
    };
    // Days from the civil date (Howard Hinnant's algorithm).
    let (yy, m) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = yy.div_euclid(400);
    let yoe = yy - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset;
    let base = if secs >= 0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        SystemTime::UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    };
    Some(base + Duration::from_nanos(u64::from(nanos)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_parse() {
        let t = |s| {
            parse_rfc3339(s).map(|t| {
                t.duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap()
                    .as_secs_f64()
            })
        };
        assert_eq!(t("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(t("2024-02-29T12:30:15Z"), Some(1_709_209_815.0));
        assert_eq!(t("2024-02-29T13:30:15+01:00"), Some(1_709_209_815.0));
        assert_eq!(t("2024-02-29T12:30:15.5Z"), Some(1_709_209_815.5));
        assert_eq!(t("2024-02-29 12:30:15Z"), Some(1_709_209_815.0));
        assert_eq!(t("2024-13-01T00:00:00Z"), None);
        assert_eq!(t("2024-01-01T00:00:00"), None);
        assert_eq!(t("soon"), None);
        assert_eq!(t("2024-01-01T00:00:00.Z"), None);
    }

    #[test]
    fn freshness_keeps_a_margin_before_expiry() {
        let now = SystemTime::now();
        let c = Cached {
            token: None,
            expires: Some(now + Duration::from_secs(100)),
            issued: now,
        };
        assert!(c.fresh(now));
        assert!(c.fresh(now + Duration::from_secs(89)));
        assert!(!c.fresh(now + Duration::from_secs(91)));
        let forever = Cached { expires: None, ..c };
        assert!(forever.fresh(now + Duration::from_secs(1 << 30)));
    }
}
