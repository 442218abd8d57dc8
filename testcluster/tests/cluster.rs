//! End-to-end tests against a real kube-apiserver v1.20.2 + etcd (built on first use).

use std::net::TcpStream;
use std::time::Instant;

use testcluster::{StartOptions, TestCluster, ensure_built};

fn start() -> TestCluster {
    let t = Instant::now();
    let c = TestCluster::start().unwrap_or_else(|e| panic!("TestCluster::start: {e}"));
    eprintln!("cluster {} ready in {:.1?}", c.server, t.elapsed());
    c
}

/// The string value of the first `"key":"..."` in a JSON text.
fn json_str<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let after = &text[text.find(&pat)? + pat.len()..];
    let value = after.trim_start().strip_prefix('"')?;
    Some(&value[..value.find('"')?])
}

fn ok(c: &TestCluster, method: &str, path: &str, body: Option<&str>) -> String {
    let (code, text) = c
        .request(method, path, body)
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    assert!(
        (200..300).contains(&code),
        "{method} {path}: HTTP {code}: {text}"
    );
    text
}

fn create_namespace(c: &TestCluster, name: &str) {
    let body =
        format!(r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{name}"}}}}"#);
    ok(c, "POST", "/api/v1/namespaces", Some(&body));
}

fn configmap(name: &str, value: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}"}},"data":{{"k":"{value}"}}}}"#
    )
}

#[test]
fn ensure_built_is_cached_and_complete() {
    let b = ensure_built().expect("ensure_built");
    let t = Instant::now();
    let again = ensure_built().expect("ensure_built (cached)");
    assert_eq!(b, again);
    assert!(
        t.elapsed().as_secs() < 5,
        "cached call took {:?}",
        t.elapsed()
    );
    for p in [&b.kube_apiserver, &b.etcd, &b.etcdctl] {
        assert!(p.is_file(), "{} missing", p.display());
    }
}

#[test]
fn serves_namespaces_and_configmaps_with_auth() {
    let c = start();
    assert!(c.server.starts_with("https://127.0.0.1:"));
    assert!(
        String::from_utf8_lossy(&c.ca_pem).contains("BEGIN CERTIFICATE"),
        "ca_pem is not a PEM certificate"
    );
    let kubeconfig = std::fs::read_to_string(&c.kubeconfig).expect("kubeconfig");
    assert!(kubeconfig.contains(&c.server) && kubeconfig.contains(&c.token));

    // `request` verifies the serving certificate against ca_pem (curl --cacert).
    assert_eq!(ok(&c, "GET", "/readyz", None), "ok");
    // Tests write to `default` as soon as `start` returns: it must exist by then (the
    // bootstrap controller creates it after `/readyz` may already say `ok`).
    let default = ok(&c, "GET", "/api/v1/namespaces/default", None);
    assert_eq!(json_str(&default, "name"), Some("default"), "{default}");

    create_namespace(&c, "informer-test");
    let created = ok(
        &c,
        "POST",
        "/api/v1/namespaces/informer-test/configmaps",
        Some(&configmap("cm-1", "v1")),
    );
    assert_eq!(json_str(&created, "name"), Some("cm-1"));
    let got = ok(
        &c,
        "GET",
        "/api/v1/namespaces/informer-test/configmaps/cm-1",
        None,
    );
    assert_eq!(json_str(&got, "k"), Some("v1"));
    let list = ok(
        &c,
        "GET",
        "/api/v1/namespaces/informer-test/configmaps",
        None,
    );
    assert!(list.contains("\"kind\":\"ConfigMapList\""), "{list}");
    assert!(json_str(&list, "resourceVersion").is_some(), "{list}");

    // A valid non-admin token is authenticated but not authorized; an unknown one is not.
    let path = "/api/v1/namespaces/informer-test/configmaps";
    let (code, _) = c.request_as(c.extra_token(), "GET", path, None).unwrap();
    assert_eq!(code, 403);
    let (code, _) = c.request_as(&c.invalid_token(), "GET", path, None).unwrap();
    assert_eq!(code, 401);
}

#[test]
fn compaction_makes_older_resource_versions_gone() {
    // Only our compaction, not the apiserver's periodic one (also checks extra flags work).
    let c =
        TestCluster::start_with(StartOptions::new().apiserver_arg("--etcd-compaction-interval=0"))
            .expect("start_with");
    let log = std::fs::read_to_string(c.apiserver_log()).unwrap_or_default();
    assert!(!log.contains("unknown flag"), "{log}");
    create_namespace(&c, "compact");
    let path = "/api/v1/namespaces/compact/configmaps";
    ok(&c, "POST", path, Some(&configmap("cm", "0")));
    let list = ok(&c, "GET", path, None);
    let old_rv: i64 = json_str(&list, "resourceVersion")
        .expect("list resourceVersion")
        .parse()
        .expect("numeric resourceVersion");
    // An exact list at that revision works before compaction.
    let exact = format!("{path}?resourceVersion={old_rv}&resourceVersionMatch=Exact");
    ok(&c, "GET", &exact, None);
    for i in 1..=3 {
        ok(
            &c,
            "PUT",
            &format!("{path}/cm"),
            Some(&configmap("cm", &i.to_string())),
        );
    }
    let compacted = c.compact().expect("compact");
    assert!(
        compacted > old_rv,
        "compacted to {compacted}, old rv {old_rv}"
    );
    let (code, body) = c.request("GET", &exact, None).unwrap();
    assert_eq!(code, 410, "{body}");
    assert_eq!(json_str(&body, "reason"), Some("Expired"), "{body}");
    // Current data is still there.
    let got = ok(&c, "GET", &format!("{path}/cm"), None);
    assert_eq!(json_str(&got, "k"), Some("3"));
    // Compacting again at the same revision is fine.
    assert_eq!(c.compact().expect("second compact"), compacted);
}

#[test]
fn apiserver_restarts_on_same_port_with_same_data() {
    let mut c = start();
    create_namespace(&c, "restart");
    let path = "/api/v1/namespaces/restart/configmaps/cm";
    ok(
        &c,
        "POST",
        "/api/v1/namespaces/restart/configmaps",
        Some(&configmap("cm", "before")),
    );
    let server = c.server.clone();
    let port: u16 = server.rsplit(':').next().unwrap().parse().unwrap();

    let t = Instant::now();
    c.stop_apiserver().expect("stop_apiserver");
    eprintln!("apiserver stopped in {:.1?}", t.elapsed());
    assert!(!c.apiserver_running());
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "port still open"
    );
    assert!(c.request("GET", path, None).is_err());

    let t = Instant::now();
    c.start_apiserver().expect("start_apiserver");
    eprintln!("apiserver restarted in {:.1?}", t.elapsed());
    assert_eq!(c.server, server);
    let got = ok(&c, "GET", path, None);
    assert_eq!(json_str(&got, "k"), Some("before"));
    // Idempotent when already running.
    c.start_apiserver().expect("start_apiserver again");
}

#[test]
fn detach_attach_and_drop_clean_up() {
    let base = std::env::temp_dir().join(format!("testcluster-detach-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let dir = base.join("cluster");
    let c = TestCluster::start_with(StartOptions::new().dir(&dir)).expect("start_with");
    let server = c.server.clone();
    let port: u16 = server.rsplit(':').next().unwrap().parse().unwrap();
    let detached_dir = c.detach();
    assert!(detached_dir.join("state").is_file());
    // Still running after the value is gone.
    assert!(TcpStream::connect(("127.0.0.1", port)).is_ok());

    let mut c = TestCluster::attach(&detached_dir).expect("attach");
    assert_eq!(c.server, server);
    assert!(c.apiserver_running());
    assert_eq!(ok(&c, "GET", "/readyz", None), "ok");
    // Restarting works on an attached cluster too (its apiserver is known only by pid).
    c.stop_apiserver().expect("stop_apiserver (attached)");
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    c.start_apiserver().expect("start_apiserver (attached)");
    assert_eq!(ok(&c, "GET", "/readyz", None), "ok");
    drop(c);
    assert!(!detached_dir.exists(), "dir not removed");
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "apiserver still listening"
    );
    assert!(TestCluster::attach(&detached_dir).is_err());
    let _ = std::fs::remove_dir_all(&base);
}
