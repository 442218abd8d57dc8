//! The crate's errors before a request is sent: a configuration that cannot be loaded
//! ([`ConfigError`]), a credential that cannot be had ([`CredentialError`]), a client that
//! cannot be built ([`ClientError`]).
//!
//! The ground floor: every layer above returns these, and they depend on nothing above them
//! (an error of a request itself is the core's `Failure`).

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::well_known::SERVICE_ACCOUNT_DIR;

/// A configuration that could not be loaded. Names the file and the field at fault.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// No kubeconfig file exists at any of the places looked at.
    NoKubeconfig {
        /// The paths tried.
        tried: Vec<PathBuf>,
    },
    /// A file could not be read.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A kubeconfig file is not valid YAML of the expected shape.
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said (with the position and the field path where it knows them).
        message: String,
    },
    /// A required field is missing.
    MissingField {
        /// The kubeconfig file (the one defining the entry concerned).
        path: PathBuf,
        /// The field, e.g. `clusters[prod].cluster.server`.
        field: String,
    },
    /// A field has an unusable value.
    InvalidField {
        /// The kubeconfig file (or the in-cluster file).
        path: PathBuf,
        /// The field, e.g. `users[admin].user.client-key-data`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// A context, cluster or user referred to by name does not exist in any file.
    NotFound {
        /// The file holding the reference (the first kubeconfig file when it came from the
        /// caller).
        path: PathBuf,
        /// The referring field, e.g. `contexts[dev].context.cluster`.
        field: String,
        /// The name looked for.
        name: String,
    },
    /// A feature of the kubeconfig format this crate does not implement (an `auth-provider`
    /// other than `oidc`).
    Unsupported {
        /// The kubeconfig file.
        path: PathBuf,
        /// The field, e.g. `users[gke].user.exec`.
        field: String,
    },
    /// A cluster gives a certificate authority (`certificate-authority` or
    /// `certificate-authority-data`) and also `insecure-skip-tls-verify: true`: which one was
    /// meant is unknowable, so the configuration is refused, as kubectl refuses it.
    InsecureWithCertificateAuthority {
        /// The kubeconfig file defining the cluster.
        path: PathBuf,
        /// The cluster's name.
        cluster: String,
    },
    /// In-cluster configuration asked for outside a pod: an environment variable is unset.
    MissingEnv {
        /// The variable, e.g. `KUBERNETES_SERVICE_HOST`.
        var: &'static str,
    },
    /// `Config::infer` found nothing usable: no kubeconfig file exists and in-cluster
    /// configuration failed.
    NoConfig {
        /// The kubeconfig files looked for, none of which exists: the `$KUBECONFIG` entries,
        /// or `~/.kube/config` when `$KUBECONFIG` is unset or empty (none when `$HOME` is
        /// unset too).
        kubeconfig_paths: Vec<PathBuf>,
        /// Whether `kubeconfig_paths` came from `$KUBECONFIG`.
        from_kubeconfig_env: bool,
        /// Why in-cluster configuration failed: [`MissingEnv`](Self::MissingEnv) for
        /// `KUBERNETES_SERVICE_HOST`/`_PORT`, or an error naming the service-account file
        /// under [`SERVICE_ACCOUNT_DIR`].
        incluster: Box<ConfigError>,
    },
    /// No credential could be had (a token file unreadable, an exec plugin failing).
    Credential(CredentialError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoKubeconfig { tried } => {
                write!(f, "no kubeconfig found (tried {tried:?})")
            }
            ConfigError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            ConfigError::Parse { path, message } => write!(f, "{}: {message}", path.display()),
            ConfigError::MissingField { path, field } => {
                write!(f, "{}: missing field {field}", path.display())
            }
            ConfigError::InvalidField {
                path,
                field,
                message,
            } => write!(f, "{}: invalid {field}: {message}", path.display()),
            ConfigError::NotFound { path, field, name } => {
                write!(f, "{}: {field}: no entry named {name:?}", path.display())
            }
            ConfigError::Unsupported { path, field } => {
                write!(f, "{}: {field}: not supported", path.display())
            }
            ConfigError::InsecureWithCertificateAuthority { path, cluster } => write!(
                f,
                "{}: clusters[{cluster}].cluster: specifying a root certificates file with the \
                 insecure flag is not allowed: remove certificate-authority(-data) or \
                 insecure-skip-tls-verify",
                path.display()
            ),
            ConfigError::MissingEnv { var } => {
                write!(f, "not running in a cluster: {var} is not set")
            }
            ConfigError::NoConfig {
                kubeconfig_paths,
                from_kubeconfig_env,
                incluster,
            } => {
                f.write_str("no Kubernetes configuration found: ")?;
                match (kubeconfig_paths.as_slice(), from_kubeconfig_env) {
                    ([], true) => f.write_str("$KUBECONFIG names no file")?,
                    ([], false) => {
                        f.write_str("no kubeconfig to look for ($KUBECONFIG and $HOME unset)")?
                    }
                    (paths, env) => {
                        f.write_str("no kubeconfig at ")?;
                        for (i, p) in paths.iter().enumerate() {
                            let sep = if i > 0 { ", " } else { "" };
                            write!(f, "{sep}{}", p.display())?;
                        }
                        f.write_str(if *env {
                            " (from $KUBECONFIG)"
                        } else {
                            " ($KUBECONFIG unset)"
                        })?;
                    }
                }
                write!(f, "; in-cluster ({SERVICE_ACCOUNT_DIR}): {incluster}")
            }
            ConfigError::Credential(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigError::Io { source, .. } => Some(source),
            ConfigError::NoConfig { incluster, .. } => Some(&**incluster),
            ConfigError::Credential(e) => Some(e),
            _ => None,
        }
    }
}

/// Why no credential could be had. Names the kubeconfig user and the plugin's command; never
/// shows a credential or the plugin's standard output.
#[derive(Debug)]
#[non_exhaustive]
pub enum CredentialError {
    /// The plugin's command does not exist.
    ExecNotFound {
        /// The kubeconfig user.
        user: String,
        /// The command.
        command: String,
        /// The kubeconfig's `installHint`.
        install_hint: Option<String>,
    },
    /// The plugin exited with a failure status.
    ExecFailed {
        /// The kubeconfig user.
        user: String,
        /// The command.
        command: String,
        /// How it exited.
        status: String,
        /// The end of what it wrote to standard error.
        stderr: String,
    },
    /// The plugin did not finish within its timeout and was killed.
    ExecTimedOut {
        /// The kubeconfig user.
        user: String,
        /// The command.
        command: String,
        /// The timeout.
        timeout: Duration,
    },
    /// `interactiveMode: Always`, but standard input is not a terminal.
    ExecNeedsTerminal {
        /// The kubeconfig user.
        user: String,
        /// The command.
        command: String,
    },
    /// The plugin's output is not a usable `ExecCredential`.
    ExecOutput {
        /// The kubeconfig user.
        user: String,
        /// The command.
        command: String,
        /// What is wrong (never quoting the output).
        message: String,
    },
    /// The plugin could not be started or waited for.
    ExecIo {
        /// The kubeconfig user.
        user: String,
        /// The command.
        command: String,
        /// The error.
        source: std::io::Error,
    },
    /// An OIDC id-token has expired (or is absent) and cannot be refreshed: fields are missing.
    OidcCannotRefresh {
        /// The kubeconfig user.
        user: String,
        /// The `auth-provider.config` fields missing (`refresh-token`, `idp-issuer-url`,
        /// `client-id`).
        missing: Vec<&'static str>,
    },
    /// Refreshing an OIDC id-token failed.
    OidcRefresh {
        /// The kubeconfig user.
        user: String,
        /// The issuer.
        issuer: String,
        /// What went wrong (never quoting a token).
        message: String,
    },
    /// A token file could not be read.
    TokenFile {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl fmt::Display for CredentialError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = |f: &mut fmt::Formatter<'_>, user: &str, command: &str| {
            write!(
                f,
                "credential plugin {command:?} of kubeconfig user {user:?}: "
            )
        };
        match self {
            CredentialError::ExecNotFound {
                user,
                command,
                install_hint,
            } => {
                who(f, user, command)?;
                write!(f, "executable not found")?;
                if let Some(hint) = install_hint {
                    write!(f, "\n\n{hint}")?;
                }
                Ok(())
            }
            CredentialError::ExecFailed {
                user,
                command,
                status,
                stderr,
            } => {
                who(f, user, command)?;
                write!(f, "{status}")?;
                if !stderr.trim().is_empty() {
                    write!(f, "; its standard error said: {}", stderr.trim())?;
                }
                Ok(())
            }
            CredentialError::ExecTimedOut {
                user,
                command,
                timeout,
            } => {
                who(f, user, command)?;
                write!(f, "still running after {timeout:?}: killed")
            }
            CredentialError::ExecNeedsTerminal { user, command } => {
                who(f, user, command)?;
                write!(
                    f,
                    "interactiveMode is Always but standard input is not a terminal"
                )
            }
            CredentialError::ExecOutput {
                user,
                command,
                message,
            } => {
                who(f, user, command)?;
                write!(f, "{message}")
            }
            CredentialError::ExecIo {
                user,
                command,
                source,
            } => {
                who(f, user, command)?;
                write!(f, "{source}")
            }
            CredentialError::OidcCannotRefresh { user, missing } => write!(
                f,
                "OIDC credentials of kubeconfig user {user:?}: the id-token has expired or is \
                 absent and cannot be refreshed: auth-provider.config lacks {}",
                missing.join(", ")
            ),
            CredentialError::OidcRefresh {
                user,
                issuer,
                message,
            } => write!(
                f,
                "OIDC credentials of kubeconfig user {user:?}: refreshing the id-token at \
                 {issuer}: {message}"
            ),
            CredentialError::TokenFile { path, source } => {
                write!(f, "token file {}: {source}", path.display())
            }
        }
    }
}

impl std::error::Error for CredentialError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CredentialError::ExecIo { source, .. } | CredentialError::TokenFile { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
}

/// Why a client could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The configuration is unusable.
    Config(ConfigError),
    /// TLS settings (CA, client certificate, server name) are unusable.
    Tls(String),
    /// The server URL is unusable.
    InvalidServer(String),
    /// The HTTP library refused to build a client.
    Backend(String),
    /// The proxy configuration (kubeconfig `proxy-url`, `HTTPS_PROXY`, ...) is unusable.
    Proxy(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Config(e) => write!(f, "configuration: {e}"),
            ClientError::Tls(m) => write!(f, "TLS: {m}"),
            ClientError::InvalidServer(m) => write!(f, "server URL: {m}"),
            ClientError::Backend(m) => write!(f, "HTTP client: {m}"),
            ClientError::Proxy(m) => write!(f, "proxy: {m}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for ClientError {
    fn from(e: ConfigError) -> Self {
        ClientError::Config(e)
    }
}
