//! TLS verification is on by default on both backends: the server's certificate must chain to
//! the configured CA (or the system roots when none is configured) and be valid for the
//! server's name. The certificates are the tests' own (`tests/data`: a CA, a server certificate
//! for 127.0.0.1 and localhost). A refused handshake sends no request, so no credential.

mod support;

use informer_http::config::{Auth, Secret};
use informer_http::{Client, Config};
use support::{response, serve, server_tls, tokio_run};

const BODY: &str = r#"{"kind":"NamespaceList","metadata":{"resourceVersion":"7"},"items":[]}"#;

/// The answer of each backend to one GET: the body, or the error's words.
fn get(config: &Config) -> [Result<Vec<u8>, String>; 2] {
    let tokio = Client::reqwest(config.clone()).expect("reqwest client");
    let smol = Client::smol(config.clone()).expect("smol client");
    [
        tokio_run(tokio.request(http::Method::GET, "/api/v1/namespaces", None))
            .map(|b| b.to_vec())
            .map_err(|e| e.to_string()),
        smol::block_on(smol.request(http::Method::GET, "/api/v1/namespaces", None))
            .map(|b| b.to_vec())
            .map_err(|e| e.to_string()),
    ]
}

#[test]
fn certificates_are_verified_by_ca_and_name_on_both_backends() {
    let answer =
        |_: u16, _: &str| response("200 OK", &[("Content-Type", "application/json")], BODY);
    let server = serve(Some(server_tls()), answer);
    let base = |host: &str| {
        let mut c = Config::new(format!("https://{host}:{}", server.port));
        c.auth = Auth::Token(Secret::new("tls-test-token".to_string()));
        c
    };
    let ca = include_bytes!("data/ca.crt").to_vec();

    // The right CA and name: both backends talk.
    let mut good = base("127.0.0.1");
    good.root_ca_pem = Some(ca.clone());
    for r in get(&good) {
        assert_eq!(r.unwrap(), BODY.as_bytes());
    }
    let mut by_name = base("localhost");
    by_name.root_ca_pem = Some(ca.clone());
    for r in get(&by_name) {
        assert_eq!(r.unwrap(), BODY.as_bytes());
    }
    let served = server.requests().len();
    assert_eq!(served, 4);

    // No CA configured: the system roots do not know the tests' CA.
    let system_roots = base("127.0.0.1");
    // A CA that did not sign the server certificate (the client certificate, not a CA).
    let mut wrong_ca = base("127.0.0.1");
    wrong_ca.root_ca_pem = Some(include_bytes!("data/client.crt").to_vec());
    // The right CA, the wrong name.
    let mut wrong_name = base("127.0.0.1");
    wrong_name.root_ca_pem = Some(ca.clone());
    wrong_name.tls_server_name = Some("apiserver.example".into());
    for (what, config) in [
        ("system roots", system_roots),
        ("wrong CA", wrong_ca),
        ("wrong name", wrong_name),
    ] {
        for r in get(&config) {
            let err = r.expect_err(what);
            assert!(
                err.to_lowercase().contains("certificate") || err.to_lowercase().contains("tls"),
                "{what}: {err}"
            );
            assert!(!err.contains("tls-test-token"), "{what}: {err}");
        }
    }
    assert_eq!(
        server.requests().len(),
        served,
        "a refused handshake carries no request"
    );
}
