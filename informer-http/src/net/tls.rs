//! The rustls client configuration both backends use: the configured CA (or the system's
//! roots), an optional client certificate, and verification on unless the configuration
//! explicitly turns it off. The crypto provider is ring, passed explicitly to every
//! configuration built here: nothing depends on a process-wide default provider being
//! installed (rustls panics, through reqwest, when none is). There is no OpenSSL anywhere.

use std::sync::Arc;

use rustls::client::ResolvesClientCert;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::{DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use crate::config::Config;
use crate::error::ClientError;

/// The crypto provider used for every connection (ring).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the TLS client configuration for `config`.
///
/// `alpn` is the list of ALPN protocols to offer (e.g. `[b"http/1.1"]`). `exec_cert` is the
/// client certificate of an exec plugin (from the credential layer), asked for at every
/// handshake as it can change; session resumption is then off. Without it, `config`'s own
/// client certificate, if any.
pub fn client_config(
    config: &Config,
    alpn: &[&[u8]],
    exec_cert: Option<Arc<dyn ResolvesClientCert>>,
) -> Result<rustls::ClientConfig, ClientError> {
    if config.insecure_skip_tls_verify && config.root_ca_pem.is_some() {
        // As client-go: which of the two was meant cannot be known.
        return Err(ClientError::Tls(
            "specifying a root certificates file with the insecure flag is not allowed".into(),
        ));
    }
    let provider = provider();
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))?;
    let builder = if config.insecure_skip_tls_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(
                provider.signature_verification_algorithms,
            )))
    } else {
        let mut roots = RootCertStore::empty();
        match &config.root_ca_pem {
            Some(pem) => {
                for cert in CertificateDer::pem_slice_iter(pem) {
                    let cert =
                        cert.map_err(|e| ClientError::Tls(format!("CA certificate: {e}")))?;
                    roots
                        .add(cert)
                        .map_err(|e| ClientError::Tls(format!("CA certificate: {e}")))?;
                }
            }
            None => {
                let native = rustls_native_certs::load_native_certs();
                let (added, _ignored) = roots.add_parsable_certificates(native.certs);
                if added == 0 {
                    return Err(ClientError::Tls(
                        "no certificate authority configured and no system roots found".into(),
                    ));
                }
            }
        }
        if roots.is_empty() {
            return Err(ClientError::Tls(
                "no CA certificate in the configuration".into(),
            ));
        }
        builder.with_root_certificates(roots)
    };
    let mut tls = match (exec_cert, &config.client_identity) {
        (Some(resolver), _) => {
            let mut tls = builder.with_client_cert_resolver(resolver);
            tls.resumption = rustls::client::Resumption::disabled();
            tls
        }
        (_, Some(id)) => {
            let certs = CertificateDer::pem_slice_iter(&id.cert_pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| ClientError::Tls(format!("client certificate: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(id.key_pem.expose()).map_err(|e| {
                ClientError::Tls(format!("client key: {}", crate::config::pem_error(&e)))
            })?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| ClientError::Tls(format!("client certificate: {e}")))?
        }
        (_, None) => builder.with_no_client_auth(),
    };
    tls.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(tls)
}

/// The client certificate of an exec plugin (none when it gives only tokens).
/// A TLS configuration for a client whose server is plain `http://`: no connection ever uses
/// it, but an HTTP library that supports TLS wants one, and without it would look for the
/// process-wide default provider (and panic when there is none). Trusts no root at all.
pub fn plain_http_config() -> Result<rustls::ClientConfig, ClientError> {
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| ClientError::Tls(e.to_string()))?
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth())
}

/// The server name to verify: `tls-server-name` when set, else the URL's host.
pub fn server_name(config: &Config, host: &str) -> Result<ServerName<'static>, ClientError> {
    let name = config.tls_server_name.as_deref().unwrap_or(host);
    let name = name.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(name.to_string())
        .map_err(|e| ClientError::Tls(format!("server name {name:?}: {e}")))
}

/// `insecure-skip-tls-verify: true`: any certificate is accepted (handshake signatures are
/// still checked, so the session keys belong to whoever presented the certificate).
#[derive(Debug)]
struct NoVerify(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ClientIdentity, Secret};

    #[test]
    fn a_ca_with_the_insecure_flag_is_refused() {
        let mut cfg = Config::new("https://127.0.0.1:6443");
        cfg.root_ca_pem = Some(include_bytes!("../../tests/data/ca.crt").to_vec());
        cfg.insecure_skip_tls_verify = true;
        let e = client_config(&cfg, &[], None).unwrap_err();
        assert!(
            matches!(&e, ClientError::Tls(m) if m.contains("insecure flag is not allowed")),
            "{e:?}"
        );
    }

    #[test]
    fn client_key_errors_do_not_quote_the_key() {
        let mut cfg = Config::new("https://127.0.0.1:6443");
        cfg.root_ca_pem = Some(include_bytes!("../../tests/data/ca.crt").to_vec());
        let key = b"-----BEGIN PRIVATE KEY-----\nKEYSECRETKEYSECRET!!\n-----END PRIVATE KEY-----\n";
        cfg.client_identity = Some(ClientIdentity {
            cert_pem: include_bytes!("../../tests/data/client.crt").to_vec(),
            key_pem: Secret::new(key.to_vec()),
        });
        let e = client_config(&cfg, &[], None).unwrap_err();
        // The PEM parser would quote the offending base64 symbol: the message is fixed text.
        assert!(
            matches!(&e, ClientError::Tls(m) if m == "client key: a PEM section is not valid base64"),
            "{e:?}"
        );
    }

    #[test]
    fn builds_with_ca_client_cert_and_insecure() {
        let mut cfg = Config::new("https://127.0.0.1:6443");
        cfg.root_ca_pem = Some(include_bytes!("../../tests/data/ca.crt").to_vec());
        cfg.client_identity = Some(ClientIdentity {
            cert_pem: include_bytes!("../../tests/data/client.crt").to_vec(),
            key_pem: Secret::new(include_bytes!("../../tests/data/client.key").to_vec()),
        });
        let tls = client_config(&cfg, &[b"http/1.1"], None).unwrap();
        assert!(tls.client_auth_cert_resolver.has_certs());
        cfg.root_ca_pem = Some(b"junk".to_vec());
        assert!(client_config(&cfg, &[], None).is_err());
        cfg.insecure_skip_tls_verify = true;
        cfg.root_ca_pem = None;
        assert!(client_config(&cfg, &[], None).is_ok());
        assert!(server_name(&cfg, "127.0.0.1").is_ok());
        assert!(server_name(&cfg, "[::1]").is_ok());
        cfg.tls_server_name = Some("kubernetes.default.svc".into());
        assert_eq!(
            server_name(&cfg, "10.0.0.1").unwrap(),
            ServerName::try_from("kubernetes.default.svc").unwrap()
        );
    }
}
