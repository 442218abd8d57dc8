//! Exec credential plugins against a real kube-apiserver: a plugin written for the tests (a
//! python3 script) hands out the cluster's token with an expiry of a few seconds, or a client
//! certificate signed by the cluster's client CA; both backends, both protocol versions, and a
//! blocking program.
#![cfg(all(feature = "tokio", feature = "smol"))]

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use futures_util::StreamExt;
use informer_core::object::{DynamicObject, Object};
use informer_core::protocol::{ListRequest, WatchEvent, WatchRequest};
use informer_http::auth::exec_runs;
use informer_http::config::Auth;
use informer_http::{Backend, Client, Transport};
use informer_http::{Config, Resource};
use testcluster::{StartOptions, TestCluster};

fn cluster() -> &'static TestCluster {
    static C: OnceLock<TestCluster> = OnceLock::new();
    C.get_or_init(|| {
        let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ca.crt");
        TestCluster::start_with(StartOptions::new().apiserver_arg(format!("--client-ca-file={ca}")))
            .expect("start test cluster")
    })
}

const PLUGIN: &str = r#"#!/usr/bin/env python3
import datetime, json, os, sys, time
d = os.environ["PLUGIN_DIR"]
with open(os.path.join(d, "runs"), "a+") as f:
    f.seek(0)
    n = len(f.read().splitlines()) + 1
    f.write("run\n")
info = os.environ.get("KUBERNETES_EXEC_INFO", "")
with open(os.path.join(d, "info-%d.json" % n), "w") as f:
    f.write(info)
mode = os.environ["PLUGIN_MODE"]
sys.stderr.write("test plugin: run %d\n" % n)
sys.stderr.flush()
if mode == "slowfail":
    time.sleep(1)
    sys.stderr.write("slow failure\n")
    sys.exit(4)
if mode == "fail":
    sys.stderr.write("PLUGIN-STDERR-MARKER: please log in again\n")
    sys.exit(3)
if mode == "sleep":
    time.sleep(600)
status = {}
if mode == "token":
    name = "bad_token" if n == 1 and os.path.exists(os.path.join(d, "bad_token")) else "token"
    tok = open(os.path.join(d, name)).read().strip()
    exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=int(os.environ["PLUGIN_TTL"]))
    status = {"token": tok, "expirationTimestamp": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}
elif mode == "cert":
    status = {"clientCertificateData": open(os.path.join(d, "client.crt")).read(),
              "clientKeyData": open(os.path.join(d, "client.key")).read()}
elif mode == "rotate":
    # Odd runs: alice (system:masters); even runs: rotated-bob (no permissions).
    name = "client" if n % 2 == 1 else "client2"
    exp = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=int(os.environ["PLUGIN_TTL"]))
    status = {"clientCertificateData": open(os.path.join(d, name + ".crt")).read(),
              "clientKeyData": open(os.path.join(d, name + ".key")).read(),
              "expirationTimestamp": exp.strftime("%Y-%m-%dT%H:%M:%SZ")}
print(json.dumps({"apiVersion": json.loads(info)["apiVersion"], "kind": "ExecCredential", "status": status}))
"#;

/// A temp dir holding the plugin, its token files and a kubeconfig using it.
struct Setup {
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Setup {
    fn new(mode: &str, api_version: &str, command: Option<&str>) -> Setup {
        let tc = cluster();
        let dir = tempfile::tempdir().unwrap();
        let plugin = dir.path().join("plugin.py");
        std::fs::write(&plugin, PLUGIN).unwrap();
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(dir.path().join("token"), &tc.token).unwrap();
        std::fs::write(
            dir.path().join("client.crt"),
            include_bytes!("data/client.crt"),
        )
        .unwrap();
        std::fs::write(
            dir.path().join("client.key"),
            include_bytes!("data/client.key"),
        )
        .unwrap();
        use base64::Engine as _;
        let ca = base64::engine::general_purpose::STANDARD.encode(&tc.ca_pem);
        let command = command.map_or_else(|| plugin.display().to_string(), str::to_string);
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    \
                 server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: c\n  \
                 context:\n    cluster: k\n    user: plugin-user\nusers:\n- name: plugin-user\n  user:\n    \
                 exec:\n      apiVersion: {api_version}\n      command: {command}\n      \
                 interactiveMode: Never\n      provideClusterInfo: true\n      \
                 installHint: install the test plugin with TEST-INSTALL-HINT\n      env:\n      \
                 - name: PLUGIN_DIR\n        value: {dir}\n      - name: PLUGIN_MODE\n        \
                 value: {mode}\n      - name: PLUGIN_TTL\n        value: \"3\"\n",
                server = tc.server,
                dir = dir.path().display(),
            ),
        )
        .unwrap();
        Setup { dir, kubeconfig }
    }

    fn config(&self) -> Config {
        Config::from_kubeconfig_file(&self.kubeconfig, None).expect("kubeconfig with exec")
    }

    fn runs(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("runs"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    fn info(&self, n: usize) -> serde_json::Value {
        let text = std::fs::read_to_string(self.dir.path().join(format!("info-{n}.json"))).unwrap();
        serde_json::from_str(&text).unwrap()
    }
}

fn exec_of(cfg: &Config) -> &informer_http::config::ExecConfig {
    match &cfg.auth {
        Auth::Exec(e) => e,
        other => panic!("not exec: {other:?}"),
    }
}

/// Lists namespaces and watches ConfigMaps across two expiries of the plugin's token: the
/// first token the plugin hands out is refused (401), which runs it again; later ones expire
/// after 3 s, which runs it again before the next request. A watch opened with one token keeps
/// delivering events.
async fn token_scenario<B: Backend>(
    client: Client<B>,
    setup: &Setup,
    ns: &str,
    sleep: impl Fn(Duration) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) {
    let tc = cluster();
    std::fs::write(setup.dir.path().join("bad_token"), tc.invalid_token()).unwrap();
    let (status, body) = tc
        .request(
            "POST",
            "/api/v1/namespaces",
            Some(&format!(r#"{{"metadata":{{"name":"{ns}"}}}}"#)),
        )
        .unwrap();
    assert!((200..300).contains(&status), "{status} {body}");
    let namespaces = client.api::<DynamicObject>(Resource::NAMESPACES, None);
    let page = namespaces
        .list(&ListRequest::default())
        .await
        .expect("list after a 401 and a renewed token");
    assert!(page.items.iter().any(|n| n.name() == ns));
    // Run 1 answered 401, run 2 gave the good token.
    assert_eq!(setup.runs(), 2);
    assert_eq!(exec_runs(exec_of(client.config())), 2);

    let cms = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some(ns));
    let mut watch = cms
        .watch(&WatchRequest {
            resource_version: page.resource_version.clone(),
            timeout_seconds: Some(60),
            ..WatchRequest::default()
        })
        .await
        .expect("watch");
    for i in 0..3 {
        // Past the token's expiry: the next request runs the plugin again.
        sleep(Duration::from_millis(3200)).await;
        let before = setup.runs();
        namespaces
            .list(&ListRequest::default())
            .await
            .expect("list with a renewed token");
        assert!(setup.runs() > before, "the plugin ran again after expiry");
        let (status, body) = tc
            .request(
                "POST",
                &format!("/api/v1/namespaces/{ns}/configmaps"),
                Some(&format!(r#"{{"metadata":{{"name":"cm-{i}"}}}}"#)),
            )
            .unwrap();
        assert!((200..300).contains(&status), "{status} {body}");
        match watch.next().await {
            Some(WatchEvent::Added(cm)) => assert_eq!(cm.name(), format!("cm-{i}")),
            other => panic!("expected cm-{i} added, got {other:?}"),
        }
    }
    // What the plugin was told: not interactive, and the cluster (provideClusterInfo).
    let info = setup.info(1);
    assert_eq!(info["kind"], "ExecCredential");
    assert_eq!(info["spec"]["interactive"], false);
    assert_eq!(info["spec"]["cluster"]["server"], tc.server.as_str());
    assert!(
        info["spec"]["cluster"]["certificate-authority-data"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
}

#[test]
fn exec_v1_token_renewed_after_401_and_expiry_on_reqwest() {
    let setup = Setup::new("token", "client.authentication.k8s.io/v1", None);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = Client::reqwest(setup.config()).unwrap();
        token_scenario(client, &setup, "exec-reqwest", |d| {
            Box::pin(tokio::time::sleep(d))
        })
        .await;
    });
    assert_eq!(
        setup.info(1)["apiVersion"],
        "client.authentication.k8s.io/v1"
    );
}

#[test]
fn exec_v1beta1_token_renewed_after_401_and_expiry_on_smol() {
    let setup = Setup::new("token", "client.authentication.k8s.io/v1beta1", None);
    smol::block_on(async {
        let client = Client::smol(setup.config()).unwrap();
        token_scenario(client, &setup, "exec-smol", |d| {
            Box::pin(async move {
                smol::Timer::after(d).await;
            })
        })
        .await;
    });
    assert_eq!(
        setup.info(1)["apiVersion"],
        "client.authentication.k8s.io/v1beta1"
    );
}

#[test]
fn exec_in_a_blocking_program() {
    let setup = Setup::new("token", "client.authentication.k8s.io/v1", None);
    let cfg = setup.config();
    let first = cfg.authorization().unwrap().unwrap();
    assert_eq!(first.expose(), &format!("Bearer {}", cluster().token));
    // Cached until it expires: no second run.
    let again = cfg.authorization().unwrap().unwrap();
    assert_eq!(again, first);
    assert_eq!(setup.runs(), 1);
    std::thread::sleep(Duration::from_millis(3200));
    cfg.authorization().unwrap().unwrap();
    assert_eq!(setup.runs(), 2);
    // The header a blocking HTTP client would send is accepted by the server.
    let (status, body) = cluster()
        .request_as(
            first.expose().trim_start_matches("Bearer "),
            "GET",
            "/api/v1/namespaces",
            None,
        )
        .unwrap();
    assert_eq!(status, 200, "{body}");
}

async fn list_namespaces<B: Backend>(client: &Client<B>) -> Result<usize, String> {
    client
        .api::<DynamicObject>(Resource::NAMESPACES, None)
        .list(&ListRequest::default())
        .await
        .map(|p| p.items.len())
        .map_err(|f| f.to_string())
}

/// A second client certificate signed by the cluster's client CA (tests/data/ca.key): CN
/// `rotated-bob`, no group, so the apiserver names him when it refuses him.
fn second_client_cert(dir: &std::path::Path) {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "openssl {args:?}: {out:?}");
    };
    run(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        "client2.key",
    ]);
    run(&[
        "req",
        "-new",
        "-key",
        "client2.key",
        "-subj",
        "/CN=rotated-bob",
        "-out",
        "client2.csr",
    ]);
    run(&[
        "x509",
        "-req",
        "-in",
        "client2.csr",
        "-CA",
        &format!("{data}/ca.crt"),
        "-CAkey",
        &format!("{data}/ca.key"),
        "-CAcreateserial",
        "-CAserial",
        "client2.srl",
        "-days",
        "2",
        "-out",
        "client2.crt",
    ]);
}

/// The plugin hands out alice's certificate, then (after its 3 s expiry) rotated-bob's: the
/// request after the rotation goes over a new TLS connection with bob's certificate (the
/// apiserver refuses bob by name) instead of reusing alice's connection.
async fn rotation_scenario<B: Backend>(client: &Client<B>, setup: &Setup, name: &str) {
    assert!(list_namespaces(client).await.unwrap() > 0, "as alice");
    assert!(
        list_namespaces(client).await.unwrap() > 0,
        "as alice, again"
    );
    assert_eq!(setup.runs(), 1);
    // Past the expiry (3 s, renewed within a tenth of it): the next request runs the plugin.
    std::thread::sleep(Duration::from_millis(3500));
    let e = list_namespaces(client)
        .await
        .expect_err(&format!("{name}: bob may not list namespaces"));
    assert!(e.contains("rotated-bob"), "{name}: {e}");
    assert_eq!(setup.runs(), 2);
}

#[test]
fn exec_certificate_rotation_closes_old_connections_on_both_backends() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let setup = Setup::new("rotate", "client.authentication.k8s.io/v1", None);
    second_client_cert(setup.dir.path());
    rt.block_on(rotation_scenario(
        &Client::reqwest(setup.config()).unwrap(),
        &setup,
        "reqwest",
    ));
    // smol: over HTTP/2 (the default) and over HTTP/1.1.
    for http2 in [true, false] {
        let setup = Setup::new("rotate", "client.authentication.k8s.io/v1", None);
        second_client_cert(setup.dir.path());
        let mut cfg = setup.config();
        cfg.http2 = http2;
        let name = if http2 {
            "smol HTTP/2"
        } else {
            "smol HTTP/1.1"
        };
        smol::block_on(rotation_scenario(&Client::smol(cfg).unwrap(), &setup, name));
    }
}

#[test]
fn exec_client_certificate_on_both_backends() {
    let setup = Setup::new("cert", "client.authentication.k8s.io/v1", None);
    let cfg = setup.config();
    // No token: the plugin's certificate (CN alice, O system:masters, signed by the client CA
    // the apiserver trusts) is what authenticates.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = rt
        .block_on(list_namespaces(&Client::reqwest(cfg.clone()).unwrap()))
        .expect("reqwest with the plugin's certificate");
    assert!(n > 0);
    // Clones share the plugin's cached answer: the smol client does not run it again.
    let n = smol::block_on(list_namespaces(&Client::smol(cfg).unwrap()))
        .expect("smol with the plugin's certificate");
    assert!(n > 0);
    assert_eq!(setup.runs(), 1);
}

fn plugin_error(setup: &Setup, cfg: Config) -> (String, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let a = rt
        .block_on(list_namespaces(&Client::reqwest(cfg.clone()).unwrap()))
        .unwrap_err();
    let b = smol::block_on(list_namespaces(&Client::smol(cfg).unwrap())).unwrap_err();
    let _ = setup;
    (a, b)
}

#[test]
fn exec_failure_shows_the_plugins_stderr_user_and_command() {
    let setup = Setup::new("fail", "client.authentication.k8s.io/v1", None);
    let (a, b) = plugin_error(&setup, setup.config());
    for e in [&a, &b] {
        assert!(
            e.contains("PLUGIN-STDERR-MARKER: please log in again"),
            "{e}"
        );
        assert!(e.contains("\"plugin-user\""), "{e}");
        assert!(e.contains("plugin.py"), "{e}");
        assert!(e.contains("exit status: 3"), "{e}");
    }
    // A failing plugin is not re-run in a loop: once per request.
    assert_eq!(setup.runs(), 2);
}

#[test]
fn exec_missing_command_shows_the_install_hint() {
    let missing = "/nonexistent/kubectl-test-login";
    let setup = Setup::new("token", "client.authentication.k8s.io/v1", Some(missing));
    let (a, b) = plugin_error(&setup, setup.config());
    for e in [&a, &b] {
        assert!(e.contains("executable not found"), "{e}");
        assert!(e.contains(missing), "{e}");
        assert!(e.contains("TEST-INSTALL-HINT"), "{e}");
        assert!(e.contains("\"plugin-user\""), "{e}");
    }
    let e = setup.config().authorization().unwrap_err().to_string();
    assert!(e.contains("TEST-INSTALL-HINT"), "{e}");
}

#[test]
fn exec_hanging_plugin_is_killed_after_its_timeout() {
    let setup = Setup::new("sleep", "client.authentication.k8s.io/v1", None);
    let mut cfg = setup.config();
    if let Auth::Exec(e) = &mut cfg.auth {
        e.timeout = Duration::from_millis(1500);
    }
    let (a, b) = plugin_error(&setup, cfg);
    for e in [&a, &b] {
        assert!(e.contains("still running after 1.5s: killed"), "{e}");
    }
}

#[test]
fn kubeconfig_client_certificate_on_both_backends() {
    // The same client CA, the certificate given in the kubeconfig itself (no token).
    let tc = cluster();
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    \
             server: {}\n    certificate-authority-data: {}\ncontexts:\n- name: c\n  context:\n    \
             cluster: k\n    user: alice\nusers:\n- name: alice\n  user:\n    \
             client-certificate-data: {}\n    client-key-data: {}\n",
            tc.server,
            b64(&tc.ca_pem),
            b64(include_bytes!("data/client.crt")),
            b64(include_bytes!("data/client.key")),
        ),
    )
    .unwrap();
    let cfg = Config::from_kubeconfig_file(&path, None).unwrap();
    assert!(cfg.client_identity.is_some());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let n = rt
        .block_on(list_namespaces(&Client::reqwest(cfg.clone()).unwrap()))
        .expect("reqwest with the kubeconfig's certificate");
    assert!(n > 0);
    let n = smol::block_on(list_namespaces(&Client::smol(cfg).unwrap()))
        .expect("smol with the kubeconfig's certificate");
    assert!(n > 0);
}

#[test]
fn concurrent_requests_share_one_failing_run() {
    // Ten requests at once while the plugin takes a second to fail: they wait for that one run
    // and all get its failure, instead of running the plugin ten times.
    let setup = Setup::new("slowfail", "client.authentication.k8s.io/v1", None);
    let client = Client::reqwest(setup.config()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let errors = rt.block_on(async {
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let c = client.clone();
                tokio::spawn(async move { list_namespaces(&c).await })
            })
            .collect();
        let mut errors = Vec::new();
        for t in tasks {
            errors.push(t.await.unwrap().unwrap_err());
        }
        errors
    });
    assert_eq!(setup.runs(), 1, "{errors:?}");
    for e in &errors {
        assert!(e.contains("slow failure"), "{e}");
    }
}
