//! Credentials: where each request's `Authorization` (and an exec plugin's client
//! certificate) comes from, and the state of the sources that keep some. The one credential
//! source of both backends.
//!
//! - `token`: a static token, a token file (read again for every request), basic auth;
//! - `exec`: exec credential plugins, whose result (a token, or a client certificate and key,
//!   which `cert` hands to the backends' TLS) is cached until its `expirationTimestamp`,
//!   renewed shortly before it and after a 401; a [`ProcessRunner`] runs them (`process`);
//! - `oidc`: OIDC identities, their id-token refreshed through the issuer once expired, over
//!   the small blocking HTTP client of `http`.
//!
//! The configuration ([`crate::config`]) is data only: an
//! [`ExecConfig`](crate::config::ExecConfig) or [`OidcConfig`](crate::config::OidcConfig)
//! carries an identity its clones share; the state lives here, one per identity (`state`), so
//! the clones of a configuration and every client and backend built from them share one cached
//! credential.

#[cfg(any(feature = "tokio", feature = "smol"))]
mod cert;
mod exec;
mod http;
mod oidc;
mod process;
mod state;
mod token;

use std::sync::Arc;

use exec::ExecCache;
use oidc::OidcCache;

use crate::config::{Auth, Config, Secret};
use crate::error::ConfigError;

#[cfg(any(feature = "tokio", feature = "smol"))]
pub(crate) use cert::ExecCert;
pub use exec::exec_runs;
pub use oidc::oidc_refreshes;
pub use process::{ProcessOutput, ProcessRunner, ProcessSpec, ThreadRunner, run_blocking};

pub use crate::error::CredentialError;

/// The credential source of one configuration, with its state: what a client asks before each
/// request for the `Authorization` header. Built from a configuration by
/// [`Credentials::of`]; its methods take that same configuration.
#[derive(Clone, Debug)]
pub(crate) enum Credentials {
    /// A token, a token file, basic auth, or nothing: all in the configuration.
    Plain,
    /// An exec plugin and its cached result.
    Exec(Arc<ExecCache>),
    /// An OIDC identity and its refreshed tokens.
    Oidc(Arc<OidcCache>),
}

impl Credentials {
    /// The source `config` names, with the state its clones share.
    pub(crate) fn of(config: &Config) -> Credentials {
        match &config.auth {
            Auth::Exec(exec) => Credentials::Exec(ExecCache::of(exec)),
            Auth::Oidc(oidc) => Credentials::Oidc(OidcCache::of(oidc)),
            _ => Credentials::Plain,
        }
    }

    /// The `Authorization` header value for the next request of `config`, reading a token file,
    /// running a plugin (through `runner`) or refreshing an id-token as needed, without
    /// blocking the calling task.
    pub(crate) async fn authorization(
        &self,
        config: &Config,
        runner: &dyn ProcessRunner,
    ) -> Result<Option<Secret<String>>, CredentialError> {
        match (self, &config.auth) {
            (Credentials::Exec(cache), Auth::Exec(exec)) => {
                exec::authorization(exec, cache, runner).await
            }
            (Credentials::Oidc(cache), Auth::Oidc(oidc)) => {
                oidc::authorization(oidc, cache, config).await
            }
            _ => token::authorization(config),
        }
    }

    /// As [`authorization`](Self::authorization), on this thread (a plugin runs with
    /// `std::process`).
    pub(crate) fn authorization_blocking(
        &self,
        config: &Config,
    ) -> Result<Option<Secret<String>>, CredentialError> {
        match (self, &config.auth) {
            (Credentials::Exec(cache), Auth::Exec(exec)) => {
                exec::authorization_blocking(exec, cache)
            }
            (Credentials::Oidc(cache), Auth::Oidc(oidc)) => {
                oidc::authorization_blocking(oidc, cache, config)
            }
            _ => token::authorization(config),
        }
    }

    /// Whether a 401 may be cured by asking the source again (and so the request retried
    /// once): an exec plugin's credential, forgotten here when it is still the one `used`.
    pub(crate) fn renew_after_unauthorized(&self, used: Option<&Secret<String>>) -> bool {
        match self {
            Credentials::Exec(cache) => {
                exec::renew_after_unauthorized(cache, used);
                true
            }
            _ => false,
        }
    }
}

impl Config {
    /// The `Authorization` header value for the next request, if any: reads a token file, or
    /// runs an exec plugin on this thread when its cached credential has expired (for blocking
    /// programs; a `Client` does the same without blocking).
    pub fn authorization(&self) -> Result<Option<Secret<String>>, ConfigError> {
        Credentials::of(self)
            .authorization_blocking(self)
            .map_err(ConfigError::Credential)
    }
}
