//! The backend tests' use of the shared scripted server (`testcluster::scripted`): plain or
//! TLS (rustls with ring, given explicitly), keep-alive, answering each request with what a
//! script says for its path, and recording what it was asked.

#![allow(dead_code)]

use std::sync::Arc;

pub use testcluster::scripted::{Reply, Req, Server, response};

/// The TLS configuration of a server with `tests/data/server.crt` (for 127.0.0.1 and
/// localhost, signed by `tests/data/ca.crt`).
pub fn server_tls() -> Arc<rustls::ServerConfig> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_slice_iter(include_bytes!("../data/server.crt"))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(include_bytes!("../data/server.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    Arc::new(config)
}

/// Serves on a fresh port of 127.0.0.1 until the server is dropped: every request is answered
/// with `script(port, path)` on a kept-alive connection.
pub fn serve(
    tls: Option<Arc<rustls::ServerConfig>>,
    script: impl Fn(u16, &str) -> Vec<u8> + Send + Sync + 'static,
) -> Server {
    Server::start_tls(
        tls,
        Box::new(move |r: &Req| Reply::KeepAlive(script(r.port, &r.path))),
    )
}

/// Runs `f` on a current-thread tokio runtime.
pub fn tokio_run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}
