//! An exec plugin's client certificate as the backends' TLS asks for it (only with a
//! transport feature: nothing else asks).

use std::sync::Arc;

use rustls::SignatureScheme;
use rustls::client::ResolvesClientCert;
use rustls::sign::CertifiedKey;

use super::exec::ExecCache;
use crate::config::{Auth, Config};

/// An exec plugin's client certificate, as a TLS client asks for it at every handshake: the
/// one from the plugin's last answer. Backends also watch its generation, to make no new
/// request on a connection made with an older certificate.
#[derive(Clone, Debug)]
pub(crate) struct ExecCert(Arc<ExecCache>);

impl ExecCert {
    /// The certificate source of `config`'s exec plugin; `None` without one.
    pub(crate) fn of(config: &Config) -> Option<ExecCert> {
        match &config.auth {
            Auth::Exec(exec) => Some(ExecCert(ExecCache::of(exec))),
            _ => None,
        }
    }

    /// Changes whenever the plugin hands out a different certificate (or key).
    pub(crate) fn generation(&self) -> u64 {
        self.0.cert_generation()
    }

    /// This source as the resolver a rustls client configuration takes.
    pub(crate) fn resolver(&self) -> Arc<dyn ResolvesClientCert> {
        Arc::new(self.clone())
    }
}

impl ResolvesClientCert for ExecCert {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.0.cert()
    }

    fn has_certs(&self) -> bool {
        true
    }
}
