//! End-to-end: both backends against a real kube-apiserver v1.20.2 (+ etcd) from `testcluster`.
//!
//! One cluster for the whole binary, started and seeded once (2,100 ConfigMaps in three
//! namespaces, a CRD with three objects); each backend then runs the same scenarios in its own
//! namespaces, on its own runtime: reqwest on tokio, the smol backend under `smol::block_on`.
#![cfg(all(feature = "tokio", feature = "smol"))]

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use informer_core::object::{DynamicObject, Object};
use informer_core::protocol::{
    DecodeKind, Failure, ListRequest, ResourceVersionMatch, Selectors, WatchEvent, WatchRequest,
};
use informer_http::config::{Auth, ClientIdentity};
use informer_http::{Backend, Client, ClientError, Transport};
use informer_http::{Config, ReqwestBackend, Resource, Secret, SmolBackend};
use serde_json::json;
use testcluster::{StartOptions, TestCluster};

const NAMESPACES: usize = 3;
const PER_NAMESPACE: usize = 700;
const PAGE: u32 = 500;

struct Shared {
    cluster: TestCluster,
    /// A resourceVersion from before the seeding (compacted away later).
    early_rv: String,
}

fn widgets() -> Resource {
    Resource::new("e2e.informer.rs", "v1", "Widget", "widgets", true)
}

fn admin_config(tc: &TestCluster) -> Config {
    // The cluster's own kubeconfig: token + certificate-authority-data.
    Config::from_kubeconfig_file(&tc.kubeconfig, None).expect("testcluster kubeconfig")
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let t0 = Instant::now();
        let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ca.crt");
        let cluster = TestCluster::start_with(
            StartOptions::new()
                .apiserver_arg(format!("--client-ca-file={ca}"))
                // Secrets bypass the watch cache, so a watch of them goes to etcd and meets
                // compaction (a cached watch is served from memory whatever etcd compacted).
                .apiserver_arg("--watch-cache-sizes=secrets#0"),
        )
        .expect("start test cluster");
        eprintln!("cluster up in {:?}", t0.elapsed());
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let early_rv = rt.block_on(seed(&cluster));
        eprintln!("seeded in {:?}", t0.elapsed());
        Shared { cluster, early_rv }
    })
}

async fn seed(tc: &TestCluster) -> String {
    let c = Client::reqwest(admin_config(tc)).unwrap();
    let early_rv = c
        .api::<DynamicObject>(Resource::CONFIGMAPS, None)
        .list_page(&ListRequest {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .resource_version;
    let mut namespaces: Vec<String> = (0..NAMESPACES).map(|i| format!("e2e-{i}")).collect();
    namespaces.extend(["watch-reqwest", "watch-smol"].map(String::from));
    for ns in &namespaces {
        let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        c.request(
            http::Method::POST,
            "/api/v1/namespaces",
            Some(body.to_string().into()),
        )
        .await
        .unwrap();
    }
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.e2e.informer.rs"},
        "spec": {
            "group": "e2e.informer.rs", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    });
    c.request(
        http::Method::POST,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        Some(crd.to_string().into()),
    )
    .await
    .unwrap();
    let posts = futures_util::stream::iter(0..NAMESPACES * PER_NAMESPACE)
        .map(|i| {
            let c = c.clone();
            async move {
                let ns = format!("e2e-{}", i % NAMESPACES);
                let body = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i:05}"), "labels": {"seed": "e2e", "bucket": (i % 7).to_string()}},
                    "data": {"i": i.to_string()}
                });
                c.request(
                    http::Method::POST,
                    &format!("/api/v1/namespaces/{ns}/configmaps"),
                    Some(body.to_string().into()),
                )
                .await
            }
        })
        .buffer_unordered(16);
    let results: Vec<_> = posts.collect().await;
    assert!(
        results.iter().all(Result::is_ok),
        "{:?}",
        results.iter().find(|r| r.is_err())
    );
    // Wait until the CRD is served, then create three widgets.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = c
            .request(
                http::Method::GET,
                "/apis/e2e.informer.rs/v1/namespaces/e2e-0/widgets",
                None,
            )
            .await;
        if r.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "CRD never served: {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for i in 0..3 {
        let w = json!({"apiVersion": "e2e.informer.rs/v1", "kind": "Widget",
            "metadata": {"name": format!("w{i}")}, "spec": {"size": i}});
        c.request(
            http::Method::POST,
            "/apis/e2e.informer.rs/v1/namespaces/e2e-0/widgets",
            Some(w.to_string().into()),
        )
        .await
        .unwrap();
    }
    early_rv
}

fn rv(s: &str) -> u64 {
    s.parse()
        .unwrap_or_else(|_| panic!("resourceVersion {s:?}"))
}

async fn list_all(
    api: &impl Transport<DynamicObject>,
    label: Option<&str>,
) -> (Vec<std::sync::Arc<DynamicObject>>, String, usize) {
    let mut req = ListRequest {
        limit: Some(PAGE),
        selectors: Selectors {
            label: label.map(String::from),
            field: None,
            shard: None,
        },
        ..Default::default()
    };
    let mut items = Vec::new();
    let mut list_rv: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = api.list(&req).await.expect("list page");
        pages += 1;
        match &list_rv {
            None => list_rv = Some(page.resource_version.clone()),
            Some(r) => assert_eq!(r, &page.resource_version, "every page has the list's RV"),
        }
        if let Some(left) = page.remaining_item_count {
            assert!(page.continue_token.is_some() || left == 0);
        }
        items.extend(page.items);
        match page.continue_token {
            Some(c) => req.continue_token = Some(c),
            None => break,
        }
    }
    (items, list_rv.unwrap(), pages)
}

/// Everything each backend must do against the real server.
async fn scenarios<B: MakeClient>(c: Client<B>, name: &str) {
    let sh = shared();
    let tc = &sh.cluster;

    // 1. Paged list of 2,100 ConfigMaps over three namespaces, one resourceVersion.
    let cms = c.api::<DynamicObject>(Resource::CONFIGMAPS, None);
    let (items, list_rv, pages) = list_all(&cms, Some("seed=e2e")).await;
    assert_eq!(items.len(), NAMESPACES * PER_NAMESPACE, "[{name}]");
    assert_eq!(pages, (NAMESPACES * PER_NAMESPACE).div_ceil(PAGE as usize));
    let mut keys: Vec<String> = items
        .iter()
        .map(|o| informer_core::object::Key::of(&**o).to_string())
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), items.len(), "no duplicates across pages");
    for o in &items {
        assert!(rv(o.resource_version().unwrap()) <= rv(&list_rv));
        assert_eq!(o.label("seed"), Some("e2e"));
        assert_eq!(o.kind.as_deref(), Some("ConfigMap"));
    }
    let one_ns = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some("e2e-1"));
    let (items, _, _) = list_all(&one_ns, Some("seed=e2e")).await;
    assert_eq!(items.len(), PER_NAMESPACE);
    assert!(items.iter().all(|o| o.namespace() == Some("e2e-1")));

    // Typed objects: k8s-openapi's ConfigMap through the K8s newtype.
    #[cfg(feature = "k8s-openapi")]
    {
        use k8s_openapi::api::core::v1::ConfigMap;
        let typed = c.k8s_api::<ConfigMap>(Some("e2e-2"));
        let page = typed
            .list(&ListRequest {
                limit: Some(PAGE),
                selectors: Selectors {
                    label: Some("seed=e2e".into()),
                    field: None,
                    shard: None,
                },
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(page.items.len(), PAGE as usize);
        assert!(
            page.items
                .iter()
                .all(|cm| cm.data.as_ref().is_some_and(|d| d.contains_key("i")))
        );
    }

    // 2. Label selector honoured.
    let (items, _, _) = list_all(&cms, Some("seed=e2e,bucket=3")).await;
    assert_eq!(
        items.len(),
        (0..NAMESPACES * PER_NAMESPACE)
            .filter(|i| i % 7 == 3)
            .count()
    );
    assert!(items.iter().all(|o| o.label("bucket") == Some("3")));

    // 3. Watch: create, update, delete in order; a non-matching object stays out; bookmarks.
    let ns = format!("watch-{name}");
    let wapi = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns));
    let start = wapi
        .list(&ListRequest {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .resource_version;
    let t0 = Instant::now();
    let mut stream = wapi
        .watch(&WatchRequest {
            resource_version: start.clone(),
            allow_watch_bookmarks: true,
            timeout_seconds: Some(5),
            selectors: Selectors {
                label: Some("w=yes".into()),
                field: None,
                shard: None,
            },
            ..Default::default()
        })
        .await
        .expect("watch");
    let base = format!("/api/v1/namespaces/{ns}/configmaps");
    let cm = |name: &str, w: &str, v: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {"w": w}}, "data": {"v": v}})
        .to_string()
        .into_bytes()
    };
    c.request(http::Method::POST, &base, Some(cm("a", "yes", "1")))
        .await
        .unwrap();
    c.request(http::Method::POST, &base, Some(cm("b", "no", "1")))
        .await
        .unwrap();
    c.request(
        http::Method::PUT,
        &format!("{base}/a"),
        Some(cm("a", "yes", "2")),
    )
    .await
    .unwrap();
    c.request(http::Method::DELETE, &format!("{base}/a"), None)
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut bookmarks = 0;
    let mut last = rv(&start);
    while let Some(ev) = stream.next().await {
        match ev {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o)
                if o.name() == "b" =>
            {
                panic!("[{name}] label selector ignored: {o:?}")
            }
            WatchEvent::Added(o) => seen.push(("ADDED", o)),
            WatchEvent::Modified(o) => seen.push(("MODIFIED", o)),
            WatchEvent::Deleted(o) => seen.push(("DELETED", o)),
            WatchEvent::Bookmark {
                resource_version,
                initial_events_end,
            } => {
                assert!(!initial_events_end);
                assert!(rv(&resource_version) >= last);
                bookmarks += 1;
            }
            WatchEvent::Error(f) => panic!("[{name}] watch error {f:?}"),
        }
        if let Some((_, o)) = seen.last() {
            let r = rv(o.resource_version().unwrap());
            assert!(r > last || bookmarks > 0, "increasing resourceVersions");
            last = last.max(r);
        }
    }
    let kinds: Vec<&str> = seen.iter().map(|(k, _)| *k).collect();
    assert_eq!(kinds, ["ADDED", "MODIFIED", "DELETED"], "[{name}]");
    assert_eq!(seen[0].1.fields.to_map()["data"]["v"], "1");
    assert_eq!(seen[1].1.fields.to_map()["data"]["v"], "2");
    assert!(
        bookmarks >= 1,
        "[{name}] no bookmark before the 5 s timeout"
    );
    assert!(
        t0.elapsed() >= Duration::from_secs(4),
        "the server ended the watch at its timeout"
    );

    // An object that does not decode into the requested type ends the watch with a typed
    // decode failure naming it; nothing after it is delivered (so no later bookmark can move
    // an informer past the change it could not apply).
    let picky = c.api::<Picky>(Resource::CONFIGMAPS, Some(&ns));
    // (The resourceVersion comes from a DynamicObject list: a list fails as a whole when an
    // item does not decode.)
    let start = wapi
        .list(&ListRequest {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap()
        .resource_version;
    let mut stream = picky
        .watch(&WatchRequest {
            resource_version: start,
            timeout_seconds: Some(10),
            allow_watch_bookmarks: true,
            selectors: Selectors {
                label: Some("picky=yes".into()),
                field: None,
                shard: None,
            },
            ..Default::default()
        })
        .await
        .unwrap();
    for (n, data) in [
        ("good-1", json!({"v": "1"})),
        ("bad", json!({"x": "1"})),
        ("good-2", json!({"v": "2"})),
    ] {
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": n, "labels": {"picky": "yes"}}, "data": data});
        c.request(http::Method::POST, &base, Some(body.to_string().into()))
            .await
            .unwrap();
    }
    let mut names = Vec::new();
    let failure = loop {
        match stream.next().await.expect("event") {
            WatchEvent::Added(o) => names.push(o.metadata.name().to_string()),
            WatchEvent::Error(f) => break f,
            other => panic!("[{name}] {other:?}"),
        }
    };
    assert!(stream.next().await.is_none(), "[{name}] the watch ended");
    drop(stream);
    assert_eq!(names, ["good-1"]);
    assert!(
        matches!(&failure, Failure::Decode(d) if d.kind == DecodeKind::Object
            && d.message.contains(&format!("ConfigMap {ns}/bad"))),
        "[{name}] {failure:?}"
    );

    // 4. Custom resources as DynamicObject: list and watch.
    let wd = c.api::<DynamicObject>(widgets(), Some("e2e-0"));
    let page = wd.list(&ListRequest::default()).await.unwrap();
    let mut names: Vec<&str> = page.items.iter().map(|o| o.name()).collect();
    names.sort();
    assert!(
        page.items
            .iter()
            .all(|o| o.kind.as_deref() == Some("Widget")
                && o.api_version.as_deref() == Some("e2e.informer.rs/v1"))
    );
    for w in ["w0", "w1", "w2"] {
        assert!(names.contains(&w), "{names:?}");
    }
    assert!(
        page.items[0].fields.to_map()["spec"]["size"]
            .as_i64()
            .is_some()
    );
    let mut ws = wd
        .watch(&WatchRequest {
            resource_version: page.resource_version.clone(),
            timeout_seconds: Some(10),
            ..Default::default()
        })
        .await
        .unwrap();
    let w = json!({"apiVersion": "e2e.informer.rs/v1", "kind": "Widget",
        "metadata": {"name": format!("from-{name}")}, "spec": {"size": 42}});
    c.request(
        http::Method::POST,
        "/apis/e2e.informer.rs/v1/namespaces/e2e-0/widgets",
        Some(w.to_string().into()),
    )
    .await
    .unwrap();
    loop {
        match ws.next().await.expect("widget event") {
            WatchEvent::Added(o) if o.name() == format!("from-{name}") => {
                assert_eq!(o.kind.as_deref(), Some("Widget"));
                assert_eq!(o.fields.to_map()["spec"]["size"], 42);
                break;
            }
            WatchEvent::Error(f) => panic!("{f:?}"),
            _ => {}
        }
    }
    drop(ws);

    // 5. After compaction: stale continue token, exact list at an old RV, watch from an old RV.
    let first = cms
        .list(&ListRequest {
            limit: Some(PAGE),
            selectors: Selectors {
                label: Some("seed=e2e".into()),
                field: None,
                shard: None,
            },
            ..Default::default()
        })
        .await
        .unwrap();
    let token = first.continue_token.clone().expect("more pages");
    // A write after the page, then compaction at the current revision, so the page's
    // revision is gone.
    c.request(
        http::Method::POST,
        &base,
        Some(cm(
            &format!("compact-{}", rv(&first.resource_version)),
            "no",
            "x",
        )),
    )
    .await
    .unwrap();
    tc.compact().expect("compact");
    let f = cms
        .list(&ListRequest {
            limit: Some(PAGE),
            continue_token: Some(token),
            selectors: Selectors {
                label: Some("seed=e2e".into()),
                field: None,
                shard: None,
            },
            ..Default::default()
        })
        .await
        .expect_err("stale continue");
    let Failure::Expired(s) = &f else {
        panic!("[{name}] {f:?}")
    };
    assert_eq!(s.code, 410);
    assert!(
        s.continue_token.is_some(),
        "inconsistent continue carries a token: {s:?}"
    );
    let f = cms
        .list(&ListRequest {
            resource_version: Some(sh.early_rv.clone()),
            resource_version_match: Some(ResourceVersionMatch::Exact),
            limit: Some(1),
            ..Default::default()
        })
        .await
        .expect_err("compacted RV");
    assert!(
        matches!(&f, Failure::Expired(s) if s.code == 410),
        "[{name}] {f:?}"
    );
    // A watch (served by etcd: see --watch-cache-sizes) from a compacted resourceVersion.
    let secrets = c.api::<DynamicObject>(Resource::SECRETS, Some(&ns));
    let old = secrets
        .list(&ListRequest::default())
        .await
        .unwrap()
        .resource_version;
    let sbase = format!("/api/v1/namespaces/{ns}/secrets");
    for i in 0..2 {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("s{i}-{old}")}, "stringData": {"k": "v"}});
        c.request(http::Method::POST, &sbase, Some(secret.to_string().into()))
            .await
            .unwrap();
    }
    tc.compact().expect("compact");
    let expired = match secrets
        .watch(&WatchRequest {
            resource_version: old.clone(),
            timeout_seconds: Some(10),
            ..Default::default()
        })
        .await
    {
        Err(f) => f,
        Ok(mut s) => match s.next().await {
            Some(WatchEvent::Error(f)) => f,
            other => panic!("[{name}] expected an ERROR event, got {other:?}"),
        },
    };
    assert!(
        matches!(&expired, Failure::Expired(s) if s.code == 410),
        "[{name}] {expired:?}"
    );

    // 6. Credentials: a wrong token (401), a valid user without rights (403), a client
    // certificate (accepted), a refused connection.
    let mut bad = admin_config(tc);
    bad.auth = Auth::Token(Secret::new(tc.invalid_token()));
    let bad = B::make(bad);
    let f = bad
        .api::<DynamicObject>(Resource::CONFIGMAPS, None)
        .list(&ListRequest::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&f, Failure::Unauthorized(s) if s.code == 401 && s.message == "Unauthorized"),
        "[{name}] {f:?}"
    );
    let mut weak = admin_config(tc);
    weak.auth = Auth::Token(Secret::new(tc.extra_token().to_string()));
    let weak = B::make(weak);
    let f = weak
        .api::<DynamicObject>(Resource::CONFIGMAPS, None)
        .watch(&WatchRequest::default())
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&f, Failure::Forbidden(s) if s.code == 403 && s.message.contains("forbidden")),
        "[{name}] {f:?}"
    );
    let mut cert = Config::new(tc.server.clone());
    cert.root_ca_pem = Some(tc.ca_pem.clone());
    cert.client_identity = Some(ClientIdentity {
        cert_pem: include_bytes!("data/client.crt").to_vec(),
        key_pem: Secret::new(include_bytes!("data/client.key").to_vec()),
    });
    let cert = B::make(cert);
    let ns = cert
        .api::<DynamicObject>(Resource::NAMESPACES, None)
        .list(&ListRequest::default())
        .await
        .expect("client certificate accepted");
    assert!(ns.items.iter().any(|n| n.name() == "e2e-0"));
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut down = admin_config(tc);
    down.server = format!("https://127.0.0.1:{port}");
    let down = B::make(down);
    let f = down
        .api::<DynamicObject>(Resource::PODS, None)
        .list(&ListRequest::default())
        .await
        .unwrap_err();
    assert!(matches!(f, Failure::ConnectionRefused(_)), "[{name}] {f:?}");

    // 7. TLS: verified by default (the system roots do not know the test CA); tls-server-name
    // (connect to 127.0.0.1, verify a DNS name of the serving certificate); an explicit
    // insecure-skip-tls-verify.
    let mut no_ca = admin_config(tc);
    no_ca.root_ca_pem = None;
    match B::try_make(no_ca) {
        Err(e) => assert!(matches!(e, ClientError::Tls(_)), "{e:?}"),
        Ok(c) => {
            let f = c
                .api::<DynamicObject>(Resource::NAMESPACES, None)
                .list(&ListRequest::default())
                .await
                .unwrap_err();
            assert!(
                matches!(&f, Failure::Other(s) if s.message.contains("certificate")),
                "[{name}] {f:?}"
            );
        }
    }
    let mut named = admin_config(tc);
    named.tls_server_name = Some("kubernetes.default.svc".into());
    B::make(named.clone())
        .api::<DynamicObject>(Resource::NAMESPACES, None)
        .list(&ListRequest::default())
        .await
        .expect("tls-server-name kubernetes.default.svc");
    named.tls_server_name = Some("elsewhere.example".into());
    let f = B::make(named)
        .api::<DynamicObject>(Resource::NAMESPACES, None)
        .list(&ListRequest::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&f, Failure::Other(s) if s.message.contains("certificate")),
        "[{name}] {f:?}"
    );
    let mut insecure = admin_config(tc);
    insecure.root_ca_pem = None;
    insecure.insecure_skip_tls_verify = true;
    B::make(insecure)
        .api::<DynamicObject>(Resource::NAMESPACES, None)
        .list(&ListRequest::default())
        .await
        .expect("insecure-skip-tls-verify");

    // 8. A resourceVersion from the future (the server waits ~3 s for it, then answers 504
    // Timeout with cause ResourceVersionTooLarge).
    let f = cms
        .list(&ListRequest {
            resource_version: Some("99999999".into()),
            resource_version_match: Some(ResourceVersionMatch::NotOlderThan),
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert!(
        matches!(f, Failure::TooLargeResourceVersion(_)),
        "[{name}] {f:?}"
    );
}

/// A typed object that only fits ConfigMaps whose data has a `v`.
#[derive(Debug, serde::Deserialize)]
struct Picky {
    metadata: informer_core::object::ObjectMeta,
    #[allow(dead_code)]
    data: PickyData,
}

#[derive(Debug, serde::Deserialize)]
struct PickyData {
    #[allow(dead_code)]
    v: String,
}

informer_core::impl_object!(Picky);

/// A client of the backend under test for another configuration.
trait MakeClient: Backend + Sized {
    fn try_make(config: Config) -> Result<Client<Self>, ClientError>;
    fn make(config: Config) -> Client<Self> {
        Self::try_make(config).unwrap()
    }
}

impl MakeClient for ReqwestBackend {
    fn try_make(config: Config) -> Result<Client<Self>, ClientError> {
        Client::reqwest(config)
    }
}

impl MakeClient for SmolBackend {
    fn try_make(config: Config) -> Result<Client<Self>, ClientError> {
        Client::smol(config)
    }
}

#[test]
fn reqwest_backend_against_kube_apiserver() {
    let sh = shared();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let c = Client::reqwest(admin_config(&sh.cluster)).unwrap();
    rt.block_on(scenarios(c, "reqwest"));
}

#[test]
fn smol_backend_against_kube_apiserver() {
    let sh = shared();
    let c = Client::smol(admin_config(&sh.cluster)).unwrap();
    smol::block_on(scenarios(c, "smol"));
}
