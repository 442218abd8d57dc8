//! The one credential source every backend uses: static tokens, token files, basic auth, and
//! exec credential plugins, whose result (a token, or a client certificate and key) is cached
//! until its `expirationTimestamp`, renewed shortly before it and after a 401.
//!
//! Running a plugin is a [`ProcessRunner`]'s job. The default, [`ThreadRunner`], runs it with
//! `std::process` on a helper thread and wakes the awaiting task when it is done, so it serves
//! tokio, smol and blocking programs alike without blocking an executor thread. The plugin's
//! standard error is forwarded, line by line as it arrives, to this program's standard error
//! (prompts and warnings reach the user as with kubectl); a plugin still running after its
//! timeout is killed.

use std::fmt;
use std::future::Future;
use std::io::{BufRead as _, Read as _};
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use rustls::sign::CertifiedKey;
use serde::Deserialize;

use crate::config::{Auth, Config, ExecConfig, InteractiveMode, OidcConfig, Secret};
use crate::transport::BoxFuture;

pub use crate::error::CredentialError;

/// A command to run. `Debug` shows the program only.
#[non_exhaustive]
pub struct ProcessSpec {
    /// The program.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables added to the program's own.
    pub env: Vec<(String, String)>,
    /// Give it this program's standard input (else an empty one).
    pub inherit_stdin: bool,
    /// Kill it after this long.
    pub timeout: Duration,
}

impl fmt::Debug for ProcessSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessSpec")
            .field("program", &self.program)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// What a finished command left.
#[non_exhaustive]
pub struct ProcessOutput {
    /// It exited with status 0.
    pub success: bool,
    /// How it exited, for messages (`exit status: 1`).
    pub status: String,
    /// Its standard output (the credential: never logged).
    pub stdout: Vec<u8>,
    /// Its standard error (already forwarded to this program's standard error).
    pub stderr: Vec<u8>,
}

impl fmt::Debug for ProcessOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessOutput")
            .field("status", &self.status)
            .field("stdout", &format_args!("<{} bytes>", self.stdout.len()))
            .finish_non_exhaustive()
    }
}

/// Runs credential plugins: "run this command with this environment and standard input, with a
/// timeout". An error of kind `NotFound` means the program does not exist, `TimedOut` that it
/// was killed after the timeout.
pub trait ProcessRunner: Send + Sync + fmt::Debug {
    /// Runs `spec` to completion.
    fn run(&self, spec: ProcessSpec) -> BoxFuture<'static, std::io::Result<ProcessOutput>>;
}

/// Runs the command with `std::process` on a helper thread; the returned future completes when
/// it is done (works under any executor, and with `futures::executor::block_on`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadRunner;

impl ProcessRunner for ThreadRunner {
    fn run(&self, spec: ProcessSpec) -> BoxFuture<'static, std::io::Result<ProcessOutput>> {
        on_thread("informer-exec", move || run_blocking(&spec))
    }
}

/// Runs `f` on a new thread; the future completes with its result.
fn on_thread<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> BoxFuture<'static, std::io::Result<T>> {
    let slot: Arc<Mutex<OneShot<std::io::Result<T>>>> = Arc::default();
    let tx = slot.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            let out = f();
            let mut s = tx.lock().unwrap_or_else(|e| e.into_inner());
            s.value = Some(out);
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        });
    match spawned {
        Ok(_) => Box::pin(Receive(slot)),
        Err(e) => Box::pin(std::future::ready(Err(e))),
    }
}

struct OneShot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

impl<T> Default for OneShot<T> {
    fn default() -> Self {
        OneShot {
            value: None,
            waker: None,
        }
    }
}

struct Receive<T>(Arc<Mutex<OneShot<T>>>);

impl<T> Future for Receive<T> {
    type Output = T;
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        let mut s = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match s.value.take() {
            Some(v) => Poll::Ready(v),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

/// Most of a plugin's standard error kept for an error message.
const STDERR_KEPT: usize = 4096;
/// Largest standard output read from a plugin.
const MAX_STDOUT: u64 = 1 << 20;

/// Runs `spec` on this thread: standard error forwarded line by line as it arrives, killed
/// after the timeout.
pub fn run_blocking(spec: &ProcessSpec) -> std::io::Result<ProcessOutput> {
    use std::process::{Command, Stdio};
    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spec.inherit_stdin {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let out_thread = std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(s) = stdout {
            let _ = s.take(MAX_STDOUT).read_to_end(&mut buf);
        }
        buf
    });
    let err_thread = std::thread::spawn(move || {
        let mut kept: Vec<u8> = Vec::new();
        if let Some(s) = stderr {
            let mut r = std::io::BufReader::new(s);
            let mut line = Vec::new();
            while matches!(r.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                {
                    use std::io::Write as _;
                    let mut e = std::io::stderr().lock();
                    let _ = e.write_all(&line);
                    if !line.ends_with(b"\n") {
                        let _ = e.write_all(b"\n");
                    }
                }
                kept.extend_from_slice(&line);
                if kept.len() > STDERR_KEPT {
                    kept.drain(..kept.len() - STDERR_KEPT);
                }
                line.clear();
            }
        }
        kept
    });
    let deadline = Instant::now() + spec.timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "credential plugin timed out",
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out_thread.join().unwrap_or_default();
    let stderr = err_thread.join().unwrap_or_default();
    Ok(ProcessOutput {
        success: status.success(),
        status: status.to_string(),
        stdout,
        stderr,
    })
}

/// The cached result of an exec plugin, shared by the clones of its [`ExecConfig`].
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

impl ExecCache {
    /// The client certificate from the plugin's last answer.
    pub(crate) fn cert(&self) -> Option<Arc<CertifiedKey>> {
        self.cert.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Changes whenever the plugin's client certificate (or key) changes: a transport drops
    /// the connections made with an older one (none without a transport feature).
    #[cfg(any(feature = "tokio", feature = "smol"))]
    pub(crate) fn cert_generation(&self) -> u64 {
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
    exec.cache.runs.load(std::sync::atomic::Ordering::Relaxed)
}

fn bearer(token: &Secret<String>) -> Secret<String> {
    Secret::new(format!("Bearer {}", token.expose()))
}

/// The `Authorization` header value for `config`, reading a token file or running a plugin as
/// needed (asynchronously, through `runner`).
pub(crate) async fn authorization(
    config: &Config,
    runner: &dyn ProcessRunner,
) -> Result<Option<Secret<String>>, CredentialError> {
    match &config.auth {
        Auth::Exec(exec) => {
            if let Some(c) = exec.cache.current() {
                return Ok(c.token.as_ref().map(bearer));
            }
            let runs_before = exec.cache.runs.load(std::sync::atomic::Ordering::Relaxed);
            let _running = exec.cache.running.lock().await;
            if let Some(c) = exec.cache.current() {
                return Ok(c.token.as_ref().map(bearer));
            }
            if let Some((run, message)) = exec
                .cache
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
            let c = finish(exec, out).inspect_err(|e| {
                let run = exec.cache.runs.load(std::sync::atomic::Ordering::Relaxed);
                *exec
                    .cache
                    .last_failure
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = Some((run, e.to_string()));
            })?;
            Ok(c.token.as_ref().map(bearer))
        }
        Auth::Oidc(oidc) => {
            if let Some(t) = oidc_current(oidc) {
                return Ok(Some(bearer(&t)));
            }
            let _running = oidc.cache.running.lock().await;
            if let Some(t) = oidc_current(oidc) {
                return Ok(Some(bearer(&t)));
            }
            let req = oidc_refresh_request(oidc)?;
            let o = oidc.clone();
            let proxy = crate::proxy::ProxySettings::of(config);
            let out = on_thread("informer-oidc", move || Ok(oidc_refresh(&o, &req, &proxy)))
                .await
                .map_err(|e| oidc_error(oidc, e.to_string()))??;
            Ok(Some(bearer(&out)))
        }
        _ => static_authorization(config),
    }
}

/// As [`authorization`], on this thread (a plugin runs with `std::process`).
pub(crate) fn authorization_blocking(
    config: &Config,
) -> Result<Option<Secret<String>>, CredentialError> {
    match &config.auth {
        Auth::Exec(exec) => {
            if let Some(c) = exec.cache.current() {
                return Ok(c.token.as_ref().map(bearer));
            }
            let spec = spec(exec)?;
            let out = run_blocking(&spec);
            let c = finish(exec, out)?;
            Ok(c.token.as_ref().map(bearer))
        }
        Auth::Oidc(oidc) => {
            if let Some(t) = oidc_current(oidc) {
                return Ok(Some(bearer(&t)));
            }
            let req = oidc_refresh_request(oidc)?;
            let proxy = crate::proxy::ProxySettings::of(config);
            Ok(Some(bearer(&oidc_refresh(oidc, &req, &proxy)?)))
        }
        _ => static_authorization(config),
    }
}

/// Whether a 401 may be cured by asking the source again (and so the request retried once).
pub(crate) fn renew_after_unauthorized(config: &Config, used: Option<&Secret<String>>) -> bool {
    match &config.auth {
        Auth::Exec(exec) => {
            let used = used.map(|h| {
                Secret::new(
                    h.expose()
                        .strip_prefix("Bearer ")
                        .unwrap_or_default()
                        .to_string(),
                )
            });
            exec.cache.invalidate(used.as_ref());
            true
        }
        _ => false,
    }
}

fn static_authorization(config: &Config) -> Result<Option<Secret<String>>, CredentialError> {
    Ok(match &config.auth {
        Auth::Token(t) => Some(bearer(t)),
        Auth::TokenFile(path) => {
            let token =
                std::fs::read_to_string(path).map_err(|source| CredentialError::TokenFile {
                    path: path.clone(),
                    source,
                })?;
            Some(Secret::new(format!("Bearer {}", token.trim())))
        }
        Auth::Basic { username, password } => {
            let raw = format!("{username}:{}", password.expose());
            Some(Secret::new(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(raw)
            )))
        }
        _ => None,
    })
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
    out: std::io::Result<ProcessOutput>,
) -> Result<Cached, CredentialError> {
    exec.cache
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
        exec.cache.set_cert(ck);
    }
    *exec.cache.state.lock().unwrap_or_else(|e| e.into_inner()) = Some(cached.clone());
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
    let signing = crate::tls::provider()
        .key_provider
        .load_private_key(key)
        .map_err(|_| "clientKeyData: unsupported private key".to_string())?;
    Ok(CertifiedKey::new(certs, signing))
}

/// A refreshed id-token and the refresh token to use next.
type OidcTokens = (Secret<String>, Option<Secret<String>>);

/// The refreshed tokens of an OIDC identity, shared by the clones of its [`OidcConfig`].
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

/// How many times `oidc`'s id-token has been refreshed.
pub fn oidc_refreshes(oidc: &OidcConfig) -> u64 {
    oidc.cache
        .refreshes
        .load(std::sync::atomic::Ordering::Relaxed)
}

/// An id-token within this long of its `exp` counts as expired (client-go's `expiryDelta`).
const OIDC_EXPIRY_DELTA: Duration = Duration::from_secs(10);

/// The id-token to use now, when it has not expired.
fn oidc_current(oidc: &OidcConfig) -> Option<Secret<String>> {
    let cached = oidc
        .cache
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

fn oidc_refresh_request(oidc: &OidcConfig) -> Result<RefreshRequest, CredentialError> {
    let refresh_token = oidc
        .cache
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
    req: &RefreshRequest,
    proxy: &crate::proxy::ProxySettings,
) -> Result<Secret<String>, CredentialError> {
    let fail = |m: String| oidc_error(oidc, m);
    let ca = oidc.issuer_ca_pem.as_deref();
    let discovery_url = format!("{}/.well-known/openid-configuration", req.issuer);
    let proxy_for = |url: &str| proxy.for_url(url).map_err(|e| e.to_string());
    let (status, body) = proxy_for(&discovery_url)
        .and_then(|p| crate::minihttp::request(&discovery_url, ca, p.as_ref(), "GET", &[], None))
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
            crate::minihttp::request(
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
    *oidc.cache.tokens.lock().unwrap_or_else(|e| e.into_inner()) =
        Some((id_token.clone(), Some(refresh)));
    oidc.cache
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

/// Parses an RFC 3339 time (`2024-01-02T03:04:05Z`, fractions and offsets allowed).
pub(crate) fn parse_rfc3339(s: &str) -> Option<SystemTime> {
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
