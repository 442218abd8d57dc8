//! Proxies against a real kube-apiserver: a small HTTP CONNECT proxy written for the tests
//! (`support/connect_proxy.rs`: it records every CONNECT and maps `kubernetes.default.svc`,
//! which does not resolve here, to 127.0.0.1). Both backends reach the apiserver through it when the kubeconfig's `proxy-url`
//! or `HTTPS_PROXY` says so, and directly when `NO_PROXY` matches.
#![cfg(all(feature = "tokio", feature = "smol"))]

use std::sync::OnceLock;

use informer_core::object::DynamicObject;
use informer_core::protocol::{ListRequest, WatchRequest};
use informer_http::config::ProxyEnv;
use informer_http::{Backend, Client, Transport};
use informer_http::{Config, Resource};
use testcluster::TestCluster;

#[path = "support/connect_proxy.rs"]
mod connect_proxy;
use connect_proxy::TestProxy;

fn cluster() -> &'static TestCluster {
    static C: OnceLock<TestCluster> = OnceLock::new();
    C.get_or_init(|| TestCluster::start().expect("start test cluster"))
}

/// Lists namespaces and opens a watch, on reqwest (tokio) and then on smol.
fn list_and_watch_on_both(cfg: &Config) -> [Result<(), String>; 2] {
    async fn run<B: Backend>(client: Client<B>) -> Result<(), String> {
        let api = client.api::<DynamicObject>(Resource::NAMESPACES, None);
        let page = api
            .list(&ListRequest::default())
            .await
            .map_err(|f| f.to_string())?;
        assert!(!page.items.is_empty());
        api.watch(&WatchRequest {
            resource_version: page.resource_version,
            timeout_seconds: Some(5),
            ..WatchRequest::default()
        })
        .await
        .map(drop)
        .map_err(|f| f.to_string())
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a = rt.block_on(run(Client::reqwest(cfg.clone()).unwrap()));
    let b = smol::block_on(run(Client::smol(cfg.clone()).unwrap()));
    [a, b]
}

fn no_env() -> Option<ProxyEnv> {
    Some(ProxyEnv::default())
}

#[test]
fn kubeconfig_proxy_url_is_used_by_both_backends() {
    let tc = cluster();
    let proxy = TestProxy::start();
    // The cluster's kubeconfig with a proxy-url added to its cluster entry.
    let text = std::fs::read_to_string(&tc.kubeconfig).unwrap();
    let text = text.replacen(
        "    server:",
        &format!("    proxy-url: {}\n    server:", proxy.url()),
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    let mut cfg = Config::from_kubeconfig_file(&path, None).unwrap();
    assert_eq!(cfg.proxy_url.as_deref(), Some(proxy.url().as_str()));
    cfg.proxy_env = no_env();
    for r in list_and_watch_on_both(&cfg) {
        r.expect("through the proxy");
    }
    let authority = tc.server.trim_start_matches("https://").to_string();
    let connects = proxy.connects();
    // At least one connection per backend, every one of them to the apiserver.
    assert!(connects.len() >= 2, "{connects:?}");
    assert!(connects.iter().all(|c| *c == authority), "{connects:?}");

    // Through the tunnel, TLS offers h2 and the apiserver takes it: on smol, a list and three
    // watches share one HTTP/2 connection, one CONNECT.
    let before = proxy.connects().len();
    let client = Client::smol(cfg).unwrap();
    smol::block_on(async {
        let api = client.api::<DynamicObject>(Resource::NAMESPACES, None);
        let page = api.list(&ListRequest::default()).await.unwrap();
        let mut watches = Vec::new();
        for _ in 0..3 {
            let req = WatchRequest {
                resource_version: page.resource_version.clone(),
                timeout_seconds: Some(60),
                ..WatchRequest::default()
            };
            watches.push(api.watch(&req).await.unwrap());
        }
        assert_eq!(client.backend().http2_connections(), vec![3]);
    });
    assert_eq!(proxy.connects().len(), before + 1, "one tunnel");
}

/// The cluster's admin configuration, addressed as `kubernetes.default.svc` (a name of its
/// serving certificate that does not resolve on this machine: only the proxy can reach it).
fn by_service_name(env: ProxyEnv) -> Config {
    let tc = cluster();
    let mut cfg = Config::from_kubeconfig_file(&tc.kubeconfig, None).unwrap();
    let port = tc.server.rsplit(':').next().unwrap();
    cfg.server = format!("https://kubernetes.default.svc:{port}");
    cfg.proxy_env = Some(env);
    cfg
}

#[test]
fn https_proxy_from_the_environment_is_used_unless_no_proxy_matches() {
    let tc = cluster();
    let port = tc.server.rsplit(':').next().unwrap().to_string();
    let proxy = TestProxy::start();
    let env = ProxyEnv {
        https_proxy: Some(proxy.url()),
        http_proxy: None,
        no_proxy: Some("example.com,10.0.0.0/8".into()),
    };
    for r in list_and_watch_on_both(&by_service_name(env.clone())) {
        r.expect("through HTTPS_PROXY");
    }
    let connects = proxy.connects();
    assert!(connects.len() >= 2, "{connects:?}");
    assert!(
        connects
            .iter()
            .all(|c| *c == format!("kubernetes.default.svc:{port}")),
        "{connects:?}"
    );

    // NO_PROXY matching the server: a direct connection, which cannot resolve the name; the
    // proxy sees nothing more.
    let direct = ProxyEnv {
        no_proxy: Some("example.com,.svc".into()),
        ..env.clone()
    };
    for r in list_and_watch_on_both(&by_service_name(direct)) {
        let e = r.unwrap_err();
        assert!(!e.contains("proxy"), "{e}");
    }
    assert_eq!(proxy.connects().len(), connects.len());

    // A loopback server is never proxied through the environment (Go's rule): direct, and it
    // works.
    let mut local = Config::from_kubeconfig_file(&tc.kubeconfig, None).unwrap();
    local.proxy_env = Some(env);
    for r in list_and_watch_on_both(&local) {
        r.expect("direct to 127.0.0.1");
    }
    assert_eq!(proxy.connects().len(), connects.len());
}

#[test]
fn a_proxy_that_refuses_is_an_error_naming_it() {
    // Port 9 on 127.0.0.1: nothing listens, the proxy connection is refused.
    let mut cfg = Config::from_kubeconfig_file(&cluster().kubeconfig, None).unwrap();
    cfg.proxy_url = Some("http://user:hunter2@127.0.0.1:9".into());
    for r in list_and_watch_on_both(&cfg) {
        let e = r.unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
    }
    cfg.proxy_url = Some("socks5://127.0.0.1:1080".into());
    let e = Client::smol(cfg.clone()).unwrap_err().to_string();
    assert!(e.contains("SOCKS"), "{e}");
    let e = Client::reqwest(cfg).unwrap_err().to_string();
    assert!(e.contains("SOCKS"), "{e}");
}
