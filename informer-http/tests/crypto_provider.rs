//! Building a client never depends on a process-wide rustls crypto provider: reqwest (built
//! with `rustls-no-provider`) used to panic ("No rustls crypto provider is configured") for an
//! `http://` server, the `kubectl proxy` setup, unless the application had installed one.
//!
//! Its own test binary: no other test in this process installs a provider.

mod support;

use informer_http::{Client, Config};
use support::{response, serve, server_tls, tokio_run};

const BODY: &str = r#"{"kind":"NamespaceList","metadata":{"resourceVersion":"7"},"items":[]}"#;

#[test]
fn clients_build_and_talk_without_a_default_crypto_provider() {
    assert!(
        rustls::crypto::CryptoProvider::get_default().is_none(),
        "the test needs a process without a default provider"
    );
    let answer =
        |_: u16, _: &str| response("200 OK", &[("Content-Type", "application/json")], BODY);
    let plain = serve(None, answer);
    let tls = serve(Some(server_tls()), answer);
    let mut https = Config::new(format!("https://127.0.0.1:{}", tls.port));
    https.root_ca_pem = Some(include_bytes!("data/ca.crt").to_vec());
    let configs = [
        Config::new(format!("http://127.0.0.1:{}", plain.port)),
        https,
    ];
    for config in configs {
        let server = config.server.clone();
        let tokio = Client::reqwest(config.clone()).expect("reqwest client");
        let body = tokio_run(tokio.request(http::Method::GET, "/api/v1/namespaces", None))
            .unwrap_or_else(|f| panic!("reqwest, {server}: {f}"));
        assert_eq!(body, BODY.as_bytes(), "reqwest, {server}");
        let smol = Client::smol(config).expect("smol client");
        let body = smol::block_on(smol.request(http::Method::GET, "/api/v1/namespaces", None))
            .unwrap_or_else(|f| panic!("smol, {server}: {f}"));
        assert_eq!(body, BODY.as_bytes(), "smol, {server}");
    }
    assert_eq!(plain.requests().len(), 2);
    assert_eq!(tls.requests().len(), 2);
    // Nothing installed one behind the application's back either.
    assert!(rustls::crypto::CryptoProvider::get_default().is_none());
}
