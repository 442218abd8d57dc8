//! Where the API server is and how to talk to it: kubeconfig files (merged the way kubectl
//! merges them) and in-cluster service-account configuration.
//!
//! Secrets (tokens, passwords, private keys) are wrapped in [`Secret`], whose `Debug` output is
//! redacted, so a `Config` can be logged.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

mod exec;
mod incluster;
mod kubeconfig;
mod oidc;
mod proxy;

pub use exec::{ExecApiVersion, ExecClusterInfo, ExecConfig, InteractiveMode};

pub use incluster::incluster_from;
pub use kubeconfig::Kubeconfig;
pub use oidc::OidcConfig;
pub use proxy::{Proxy, ProxyEnv};

pub use crate::error::ConfigError;
pub use crate::well_known::SERVICE_ACCOUNT_DIR;

/// A value that must not be shown: `Debug` prints `Secret(<redacted>)`.
///
/// There is no `Display`; use [`Secret::expose`] where the value is really needed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret<T>(T);

impl<T> Secret<T> {
    /// Wraps a secret value.
    pub fn new(value: T) -> Secret<T> {
        Secret(value)
    }

    /// The secret value itself.
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> From<T> for Secret<T> {
    fn from(value: T) -> Self {
        Secret(value)
    }
}

impl<T> fmt::Debug for Secret<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl<'de, T: serde::Deserialize<'de>> serde::Deserialize<'de> for Secret<T> {
    /// Deserializes the value; an error does not repeat what was found (deserializers quote
    /// an unexpected scalar in their messages, and this one is a secret).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        T::deserialize(d)
            .map(Secret)
            .map_err(|_| D::Error::custom("invalid value (not shown: it is a credential)"))
    }
}

/// The identity of one credential source ([`ExecConfig`], [`OidcConfig`]): its clones carry the
/// same one, a newly parsed or built source a new one. It is no state: the credential layer
/// (`auth`) keeps each source's cached credential under it, so the clones of a
/// configuration, and the clients and backends built from them, share what a plugin run or a
/// refresh gave.
#[derive(Clone)]
pub(crate) struct SourceId(Arc<()>);

impl SourceId {
    /// A new source.
    pub(crate) fn new() -> SourceId {
        SourceId(Arc::new(()))
    }

    /// A number no other live source has.
    pub(crate) fn key(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    /// Tells, without keeping the source alive, whether a clone of it is left.
    pub(crate) fn watch(&self) -> SourceWatch {
        SourceWatch(Arc::downgrade(&self.0))
    }
}

/// See [`SourceId::watch`]. While it exists, no other source gets this one's
/// [`SourceId::key`].
pub(crate) struct SourceWatch(Weak<()>);

impl SourceWatch {
    /// Whether a clone of the source is left.
    pub(crate) fn is_live(&self) -> bool {
        self.0.strong_count() > 0
    }
}

/// How requests authenticate (besides a client certificate).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Auth {
    /// No `Authorization` header.
    #[default]
    None,
    /// A bearer token.
    Token(Secret<String>),
    /// A bearer token read from this file before every request (service-account tokens are
    /// rotated on disk).
    TokenFile(PathBuf),
    /// HTTP basic authentication.
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: Secret<String>,
    },
    /// A credential plugin (kubeconfig `exec`): its token or client certificate, cached until it
    /// expires and renewed before that and after a 401.
    Exec(Box<ExecConfig>),
    /// An OIDC identity (kubeconfig `auth-provider: oidc`): its id-token, refreshed with the
    /// refresh-token through the issuer once expired.
    Oidc(Box<OidcConfig>),
}

/// A client certificate and its private key, both PEM. `Debug` shows neither (the key is a
/// [`Secret`], the certificate only as its size).
#[derive(Clone, PartialEq, Eq)]
pub struct ClientIdentity {
    /// The certificate chain, PEM.
    pub cert_pem: Vec<u8>,
    /// The private key, PEM.
    pub key_pem: Secret<Vec<u8>>,
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("cert_pem", &Bytes(self.cert_pem.len()))
            .field("key_pem", &self.key_pem)
            .finish()
    }
}

/// Shows a byte string as its length.
struct Bytes(usize);

impl fmt::Debug for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.0)
    }
}

/// Everything needed to reach one API server as one user.
///
/// `Debug` shows no credential: tokens, passwords and the client key are [`Secret`]s, PEM data
/// appears as its size.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The server's base URL, e.g. `https://127.0.0.1:6443` (no trailing slash).
    pub server: String,
    /// Trusted CA certificates, PEM. `None`: the system's roots.
    pub root_ca_pem: Option<Vec<u8>>,
    /// Accept any server certificate. Off unless the kubeconfig asks for it.
    pub insecure_skip_tls_verify: bool,
    /// The name to verify the server certificate against, when not the URL's host.
    pub tls_server_name: Option<String>,
    /// Token, token file or basic auth.
    pub auth: Auth,
    /// Client certificate authentication.
    pub client_identity: Option<ClientIdentity>,
    /// The namespace of the context (or the service account), `default` when unset.
    pub default_namespace: String,
    /// The kubeconfig cluster's `proxy-url`: every request goes through it (see
    /// `net::proxy`).
    pub proxy_url: Option<String>,
    /// The proxy environment variables to honour; `None`: this process's, read when a backend
    /// is built.
    pub proxy_env: Option<ProxyEnv>,
    /// Offer HTTP/2 (ALPN `h2`) and, when the server takes it, send every request of the client
    /// over one multiplexed connection (on by default; both backends). `false`: HTTP/1.1 only,
    /// one connection per open watch.
    pub http2: bool,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("server", &self.server)
            .field(
                "root_ca_pem",
                &self.root_ca_pem.as_ref().map(|p| Bytes(p.len())),
            )
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("tls_server_name", &self.tls_server_name)
            .field("auth", &self.auth)
            .field("client_identity", &self.client_identity)
            .field("default_namespace", &self.default_namespace)
            .field(
                "proxy_url",
                &self
                    .proxy_url
                    .as_deref()
                    .map(|u| Proxy::parse(u, "proxy-url").map(|p| p.shown)),
            )
            .field("proxy_env", &self.proxy_env.as_ref().map(|_| "<set>"))
            .field("http2", &self.http2)
            .finish()
    }
}

impl Config {
    /// A configuration for `server` with system roots, no authentication and namespace
    /// `default`; adjust the public fields as needed.
    pub fn new(server: impl Into<String>) -> Config {
        let mut server = server.into();
        while server.ends_with('/') {
            server.pop();
        }
        Config {
            server,
            root_ca_pem: None,
            insecure_skip_tls_verify: false,
            tls_server_name: None,
            auth: Auth::None,
            client_identity: None,
            default_namespace: "default".into(),
            proxy_url: None,
            proxy_env: None,
            http2: true,
        }
    }

    /// From the kubeconfig files kubectl would use (`$KUBECONFIG`, else `~/.kube/config`),
    /// for `context` or the current context.
    pub fn from_kubeconfig(context: Option<&str>) -> Result<Config, ConfigError> {
        Kubeconfig::read_default()?.config(context)
    }

    /// From one kubeconfig file, for `context` or its current context.
    pub fn from_kubeconfig_file(
        path: impl AsRef<Path>,
        context: Option<&str>,
    ) -> Result<Config, ConfigError> {
        Kubeconfig::read_files(&[path.as_ref().to_path_buf()])?.config(context)
    }

    /// In a pod: the service account under [`SERVICE_ACCOUNT_DIR`] and
    /// `KUBERNETES_SERVICE_HOST` / `KUBERNETES_SERVICE_PORT`.
    pub fn incluster() -> Result<Config, ConfigError> {
        incluster_from(
            Path::new(SERVICE_ACCOUNT_DIR),
            std::env::var("KUBERNETES_SERVICE_HOST").ok().as_deref(),
            std::env::var("KUBERNETES_SERVICE_PORT").ok().as_deref(),
        )
    }

    /// What kubectl-based clients do: the kubeconfig when one exists, else in-cluster.
    ///
    /// A kubeconfig that exists but is unusable is an error of its own (no fallback). When
    /// there is no kubeconfig and in-cluster configuration fails too, the error is
    /// [`ConfigError::NoConfig`], which lists every kubeconfig path looked for and why
    /// in-cluster configuration failed.
    pub fn infer() -> Result<Config, ConfigError> {
        infer_from(
            std::env::var_os("KUBECONFIG").as_deref(),
            std::env::var_os("HOME").as_deref().map(Path::new),
            Config::incluster,
        )
    }
}

/// [`Config::infer`] given `$KUBECONFIG`, `$HOME` and the in-cluster attempt.
fn infer_from(
    kubeconfig_env: Option<&OsStr>,
    home: Option<&Path>,
    incluster: impl FnOnce() -> Result<Config, ConfigError>,
) -> Result<Config, ConfigError> {
    let paths = Kubeconfig::paths_from(kubeconfig_env, home);
    match Kubeconfig::read_existing(&paths) {
        Ok(k) => k.config(None),
        Err(ConfigError::NoKubeconfig { tried }) => {
            incluster().map_err(|e| ConfigError::NoConfig {
                kubeconfig_paths: tried,
                from_kubeconfig_env: kubeconfig_env.is_some_and(|v| !v.is_empty()),
                incluster: Box::new(e),
            })
        }
        Err(e) => Err(e),
    }
}

/// Checks that `pem` holds at least one certificate.
pub(crate) fn check_certs(pem: &[u8]) -> Result<usize, String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut n = 0;
    for c in CertificateDer::pem_slice_iter(pem) {
        c.map_err(|e| format!("bad PEM: {e}"))?;
        n += 1;
    }
    if n == 0 {
        return Err("no PEM certificate found".into());
    }
    Ok(n)
}

/// Checks that `pem` holds a private key. The message never quotes the key.
pub(crate) fn check_key(pem: &[u8]) -> Result<(), String> {
    use rustls_pki_types::PrivateKeyDer;
    use rustls_pki_types::pem::PemObject;
    PrivateKeyDer::from_pem_slice(pem)
        .map(|_| ())
        .map_err(|e| format!("no usable PEM private key: {}", pem_error(&e)))
}

/// What is wrong with a PEM private key, without any of its content (the PEM parser's own
/// messages quote lines and base64 symbols of the input).
pub(crate) fn pem_error(e: &rustls_pki_types::pem::Error) -> &'static str {
    use rustls_pki_types::pem::Error;
    match e {
        Error::MissingSectionEnd { .. } => "a PEM section has no END line",
        Error::IllegalSectionStart { .. } => "a PEM BEGIN line is malformed",
        Error::Base64Decode(_) => "a PEM section is not valid base64",
        Error::NoItemsFound => "no private key found",
        Error::SectionTooLarge => "a PEM section is too large",
        _ => "unreadable PEM",
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod infer_tests {
    use super::*;
    use std::error::Error as _;

    const KUBECONFIG: &str = "current-context: x\nclusters:\n- name: c\n  cluster: {server: 'http://127.0.0.1:8080'}\ncontexts:\n- name: x\n  context: {cluster: c}\n";

    #[test]
    fn infer_lists_every_place_it_tried() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let env = std::env::join_paths([&a, &b]).unwrap();
        // Nothing anywhere: the $KUBECONFIG entries and the in-cluster failure, all named.
        let sa = dir.path().join("sa");
        let err = infer_from(Some(&env), Some(dir.path()), || {
            incluster_from(&sa, None, Some("443"))
        })
        .unwrap_err();
        let ConfigError::NoConfig {
            kubeconfig_paths,
            from_kubeconfig_env,
            incluster,
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(kubeconfig_paths, &[a.clone(), b.clone()]);
        assert!(from_kubeconfig_env);
        assert!(matches!(
            **incluster,
            ConfigError::MissingEnv {
                var: "KUBERNETES_SERVICE_HOST"
            }
        ));
        let text = err.to_string();
        for part in [
            a.display().to_string(),
            b.display().to_string(),
            "(from $KUBECONFIG)".into(),
            SERVICE_ACCOUNT_DIR.into(),
            "KUBERNETES_SERVICE_HOST is not set".into(),
        ] {
            assert!(text.contains(&part), "{part:?} missing from {text}");
        }
        assert!(err.source().is_some());

        // $KUBECONFIG unset: ~/.kube/config; in-cluster env set but no token file.
        let err = infer_from(None, Some(dir.path()), || {
            incluster_from(&sa, Some("10.0.0.1"), Some("443"))
        })
        .unwrap_err();
        let home_config = dir.path().join(".kube").join("config");
        assert!(matches!(
            &err,
            ConfigError::NoConfig { kubeconfig_paths, from_kubeconfig_env: false, incluster }
                if kubeconfig_paths == std::slice::from_ref(&home_config)
                    && matches!(&**incluster, ConfigError::Io { path, .. } if path == &sa.join("token"))
        ));
        let text = err.to_string();
        assert!(text.contains(&home_config.display().to_string()), "{text}");
        assert!(text.contains("$KUBECONFIG unset"), "{text}");
        assert!(
            text.contains(&sa.join("token").display().to_string()),
            "{text}"
        );

        // Neither $KUBECONFIG nor $HOME.
        let err = infer_from(None, None, || incluster_from(&sa, None, None)).unwrap_err();
        assert!(
            err.to_string().contains("$KUBECONFIG and $HOME unset"),
            "{err}"
        );
    }

    #[test]
    fn infer_prefers_a_kubeconfig_and_does_not_hide_a_broken_one() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good");
        std::fs::write(&good, KUBECONFIG).unwrap();
        let never = || -> Result<Config, ConfigError> { panic!("in-cluster tried") };
        let cfg = infer_from(Some(good.as_os_str()), None, never).unwrap();
        assert_eq!(cfg.server, "http://127.0.0.1:8080");

        let bad = dir.path().join("bad");
        std::fs::write(&bad, "clusters: 7").unwrap();
        let err = infer_from(Some(bad.as_os_str()), None, never).unwrap_err();
        assert!(matches!(err, ConfigError::Parse { path, .. } if path == bad));

        // No kubeconfig, but in-cluster works.
        let cfg = infer_from(Some(dir.path().join("none").as_os_str()), None, || {
            Ok(Config::new("https://10.0.0.1:443"))
        })
        .unwrap();
        assert_eq!(cfg.server, "https://10.0.0.1:443");
    }
}
