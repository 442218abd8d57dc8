//! HTTP/2 on the smol backend against a real kube-apiserver, in a test binary that never
//! creates a tokio runtime (this crate's dependencies hold none: `h2` comes with the tokio
//! crate built without its `rt`, `net` and `time` features, and would panic with "there is no
//! reactor running" if it needed one).
//!
//! - 20 informers (list + watch) of one client share one connection, all synced; their watches
//!   end every second or two (`timeoutSeconds`, the apiserver closing them) and are re-opened
//!   on that connection without a relist; after an apiserver restart they go on over a new
//!   connection.
//! - Behind a TLS relay that offers only HTTP/1.1 (ALPN), the same client falls back to
//!   HTTP/1.1: a connection per open watch.
#![cfg(target_os = "linux")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_core::informer::reflector::ReflectorConfig;
use informer_smol::{Config, DynamicObject, Informer, Resource, block_on, client, sleep};
use testcluster::TestCluster;

const INFORMERS: usize = 20;

fn create(tc: &TestCluster, path: &str, name: &str) {
    let (status, body) = tc
        .request(
            "POST",
            path,
            Some(&format!(r#"{{"metadata":{{"name":"{name}"}}}}"#)),
        )
        .unwrap();
    assert!((200..300).contains(&status), "{status} {body}");
}

/// Waits (up to a minute) until `cond` holds.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "gave up waiting: {what}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

/// Informers on ConfigMaps in namespaces `{prefix}-0..n`, their watches ending after 1-2 s.
async fn start_informers(
    client: &informer_smol::Client,
    prefix: &str,
    n: usize,
) -> Vec<Informer<DynamicObject>> {
    let mut informers = Vec::new();
    for i in 0..n {
        let rc = ReflectorConfig {
            test_min_watch_timeout: Some(Duration::from_secs(1)),
            very_short_watch: Duration::from_millis(10),
            ..ReflectorConfig::default()
        };
        let informer = Informer::<DynamicObject>::builder_for(client, Resource::CONFIGMAPS)
            .namespace(format!("{prefix}-{i}"))
            .reflector_config(rc)
            .build()
            .unwrap();
        informer.start().unwrap();
        informers.push(informer);
    }
    for (i, informer) in informers.iter().enumerate() {
        informer
            .wait_for_sync(Some(Duration::from_secs(60)))
            .await
            .unwrap();
        assert!(
            informer
                .store()
                .get_by_name(Some(&format!("{prefix}-{i}")), &format!("cm-{i}"))
                .is_some(),
            "informer {i} synced with its ConfigMap"
        );
    }
    informers
}

fn seed(tc: &TestCluster, prefix: &str, n: usize) {
    for i in 0..n {
        create(tc, "/api/v1/namespaces", &format!("{prefix}-{i}"));
        create(
            tc,
            &format!("/api/v1/namespaces/{prefix}-{i}/configmaps"),
            &format!("cm-{i}"),
        );
    }
}

#[test]
fn twenty_smol_informers_share_one_http2_connection_with_no_tokio_runtime() {
    let mut tc = TestCluster::start().expect("start test cluster");
    let port = tc.port();
    seed(&tc, "h2", INFORMERS);
    let cfg = Config::from_kubeconfig_file(&tc.kubeconfig, None).unwrap();
    assert!(cfg.http2, "HTTP/2 is offered by default");
    let client = client(cfg).unwrap();
    let informers = block_on(start_informers(&client, "h2", INFORMERS)).unwrap();
    assert_eq!(
        testcluster::connections_to(port),
        1,
        "one connection for {INFORMERS}"
    );
    assert_eq!(client.backend().http2_connections().len(), 1);

    // The apiserver ends every watch after 1-2 s: each is re-opened (same connection, no
    // relist) and still delivers.
    block_on(async {
        until(
            "every watch ended by the server and re-opened twice",
            || informers.iter().all(|i| i.metrics().watch_restarts >= 2),
        )
        .await;
        create(&tc, "/api/v1/namespaces/h2-7/configmaps", "late");
        until("the new ConfigMap reaches informer 7", || {
            informers[7]
                .store()
                .get_by_name(Some("h2-7"), "late")
                .is_some()
        })
        .await;
    })
    .unwrap();
    for (i, informer) in informers.iter().enumerate() {
        let m = informer.metrics();
        assert_eq!(m.lists, 1, "informer {i} listed once: {m:?}");
        assert_eq!(m.relists, 0, "informer {i}: {m:?}");
    }
    assert_eq!(testcluster::connections_to(port), 1);
    assert_eq!(client.backend().http2_connections().len(), 1);

    // The apiserver restarts: the connection ends with it; the informers go on over a new one.
    tc.stop_apiserver().unwrap();
    tc.start_apiserver().unwrap();
    create(&tc, "/api/v1/namespaces/h2-3/configmaps", "after-restart");
    block_on(async {
        until("the informer recovers after the restart", || {
            informers[3]
                .store()
                .get_by_name(Some("h2-3"), "after-restart")
                .is_some()
        })
        .await;
        for informer in &informers {
            let before = informer.metrics().watches;
            until("every informer watches again", || {
                informer.metrics().watches > before
            })
            .await;
        }
    })
    .unwrap();
    assert_eq!(testcluster::connections_to(port), 1, "one new connection");
    block_on(async {
        for informer in &informers {
            informer.shutdown().await;
        }
    })
    .unwrap();
}

/// A TLS relay on 127.0.0.1 in front of the apiserver that offers only HTTP/1.1 by ALPN,
/// presenting the apiserver's own serving certificate. Returns its port.
fn start_http1_relay(tc: &TestCluster) -> u16 {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    let certs_dir = tc.dir.join("certs");
    let chain = CertificateDer::pem_file_iter(certs_dir.join("apiserver.crt"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(certs_dir.join("apiserver.key")).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(&tc.ca_pem) {
        roots.add(c.unwrap()).unwrap();
    }
    let mut upstream = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    upstream.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = futures_rustls::TlsAcceptor::from(Arc::new(server));
    let connector = futures_rustls::TlsConnector::from(Arc::new(upstream));
    let apiserver = tc.port();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        smol::block_on(async move {
            let listener = smol::net::TcpListener::try_from(listener).unwrap();
            loop {
                let Ok((down, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, connector) = (acceptor.clone(), connector.clone());
                smol::spawn(async move {
                    let Ok(down) = acceptor.accept(down).await else {
                        return;
                    };
                    let Ok(up) = smol::net::TcpStream::connect(("127.0.0.1", apiserver)).await
                    else {
                        return;
                    };
                    let name = ServerName::try_from("127.0.0.1").unwrap();
                    let Ok(up) = connector.connect(name, up).await else {
                        return;
                    };
                    let (dr, dw) = smol::io::split(down);
                    let (ur, uw) = smol::io::split(up);
                    smol::future::or(
                        async {
                            let _ = smol::io::copy(dr, uw).await;
                        },
                        async {
                            let _ = smol::io::copy(ur, dw).await;
                        },
                    )
                    .await;
                })
                .detach();
            }
        })
    });
    port
}

#[test]
fn without_h2_in_alpn_the_smol_backend_falls_back_to_http1() {
    let tc = TestCluster::start().expect("start test cluster");
    const N: usize = 5;
    seed(&tc, "h1", N);
    let relay = start_http1_relay(&tc);
    let mut cfg = Config::from_kubeconfig_file(&tc.kubeconfig, None).unwrap();
    cfg.server = format!("https://127.0.0.1:{relay}");
    assert!(
        cfg.http2,
        "the client offers HTTP/2; the relay does not take it"
    );
    let client = client(cfg).unwrap();
    let informers = block_on(start_informers(&client, "h1", N)).unwrap();
    block_on(async {
        create(&tc, "/api/v1/namespaces/h1-2/configmaps", "late");
        until("the new ConfigMap reaches informer 2", || {
            informers[2]
                .store()
                .get_by_name(Some("h1-2"), "late")
                .is_some()
        })
        .await;
    })
    .unwrap();
    assert!(client.backend().http2_connections().is_empty());
    // HTTP/1.1: each open watch holds a connection of its own.
    let conns = testcluster::connections_to(relay);
    assert!(conns >= N, "HTTP/1.1: {conns} connections for {N} watches");
    block_on(async {
        for informer in &informers {
            informer.shutdown().await;
        }
    })
    .unwrap();
}
