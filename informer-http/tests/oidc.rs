//! OIDC against a real kube-apiserver started with `--oidc-issuer-url` pointing at a small
//! issuer written for the tests: discovery, JWKS and a token endpoint over HTTPS (a CA and a
//! serving certificate made with openssl), id-tokens signed ES256 with a key it makes (ring).
#![cfg(all(feature = "tokio", feature = "smol"))]

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use futures_util::StreamExt;
use informer_core::object::{DynamicObject, Object};
use informer_core::protocol::{ListRequest, WatchEvent, WatchRequest};
use informer_http::auth::oidc_refreshes;
use informer_http::config::Auth;
use informer_http::{Backend, Client, Transport};
use informer_http::{Config, Resource};
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair};
use testcluster::{StartOptions, TestCluster};

#[path = "support/connect_proxy.rs"]
mod connect_proxy;
use connect_proxy::TestProxy;

const CLIENT_ID: &str = "informer-test";

struct Issuer {
    url: String,
    ca_pem: Vec<u8>,
    key: EcdsaKeyPair,
    /// Refresh tokens handed out and not used yet.
    refresh_tokens: Mutex<HashSet<String>>,
    /// Refresh tokens presented, in order.
    used: Mutex<Vec<String>>,
    next: std::sync::atomic::AtomicU64,
    _dir: tempfile::TempDir,
}

fn b64url(b: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

impl Issuer {
    /// An id-token for `oidc-alice` (group system:masters) expiring `ttl` seconds from now
    /// (negative: already expired).
    fn id_token(&self, ttl: i64) -> String {
        let header = serde_json::json!({"alg": "ES256", "kid": "k1", "typ": "JWT"});
        let claims = serde_json::json!({
            "iss": self.url, "aud": CLIENT_ID, "sub": "oidc-alice",
            "groups": ["system:masters"], "iat": now(), "exp": (now() as i64 + ttl),
        });
        let input = format!(
            "{}.{}",
            b64url(header.to_string().as_bytes()),
            b64url(claims.to_string().as_bytes())
        );
        let rng = ring::rand::SystemRandom::new();
        let sig = self.key.sign(&rng, input.as_bytes()).unwrap();
        format!("{input}.{}", b64url(sig.as_ref()))
    }

    fn new_refresh_token(&self) -> String {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let t = format!("rt-{n}");
        self.refresh_tokens.lock().unwrap().insert(t.clone());
        t
    }

    fn jwks(&self) -> serde_json::Value {
        let pk = self.key.public_key().as_ref();
        serde_json::json!({"keys": [{
            "kty": "EC", "crv": "P-256", "kid": "k1", "alg": "ES256", "use": "sig",
            "x": b64url(&pk[1..33]), "y": b64url(&pk[33..65]),
        }]})
    }

    /// The answer to `method path`; `host` is the `Host` the client asked for (the token
    /// endpoint is named by it, so a client that found the issuer by another name than
    /// 127.0.0.1 goes on using that name).
    fn answer(&self, method: &str, path: &str, body: &str, host: Option<&str>) -> (u16, String) {
        match (method, path) {
            ("GET", "/.well-known/openid-configuration") => (
                200,
                serde_json::json!({
                    "issuer": self.url,
                    "jwks_uri": format!("{}/jwks", self.url),
                    "token_endpoint": match host {
                        Some(h) => format!("https://{h}/token"),
                        None => format!("{}/token", self.url),
                    },
                    "authorization_endpoint": format!("{}/auth", self.url),
                    "response_types_supported": ["id_token"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["ES256"],
                })
                .to_string(),
            ),
            ("GET", "/jwks") => (200, self.jwks().to_string()),
            ("POST", "/token") => {
                let form: Vec<(String, String)> = body
                    .split('&')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.replace('+', " ")))
                    .collect();
                let get = |k: &str| form.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
                let rt = get("refresh_token").unwrap_or("").to_string();
                self.used.lock().unwrap().push(rt.clone());
                let valid = get("grant_type") == Some("refresh_token")
                    && get("client_id") == Some(CLIENT_ID)
                    && self.refresh_tokens.lock().unwrap().remove(&rt);
                if !valid {
                    return (400, r#"{"error":"invalid_grant"}"#.into());
                }
                (
                    200,
                    serde_json::json!({
                        "access_token": "unused", "token_type": "Bearer", "expires_in": 12,
                        // Valid for 12 s: 2 s past client-go's 10 s expiry margin.
                        "id_token": self.id_token(12),
                        "refresh_token": self.new_refresh_token(),
                    })
                    .to_string(),
                )
            }
            _ => (404, "{}".into()),
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

fn start_issuer() -> Arc<Issuer> {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    openssl(
        d,
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key",
        ]
        .iter()
        .copied()
        .chain([
            "-out",
            "ca.crt",
            "-days",
            "2",
            "-subj",
            "/CN=test-issuer-ca",
        ])
        .collect::<Vec<_>>(),
    );
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "srv.key",
            "-out",
            "srv.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        d.join("ext"),
        "subjectAltName=IP:127.0.0.1,DNS:oidc-issuer.test\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "srv.crt",
            "-days",
            "2",
            "-extfile",
            "ext",
        ],
    );
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(d.join("srv.crt"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(d.join("srv.key")).unwrap();
    let tls = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "https://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
    let key =
        EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng).unwrap();
    let issuer = Arc::new(Issuer {
        url,
        ca_pem: std::fs::read(d.join("ca.crt")).unwrap(),
        key,
        refresh_tokens: Mutex::default(),
        used: Mutex::default(),
        next: 1.into(),
        _dir: dir,
    });
    let served = issuer.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(tcp) = conn else { continue };
            let (issuer, tls) = (served.clone(), tls.clone());
            std::thread::spawn(move || {
                let conn = rustls::ServerConnection::new(tls).unwrap();
                let mut s = rustls::StreamOwned::new(conn, tcp);
                let _ = serve(&issuer, &mut s);
            });
        }
    });
    issuer
}

/// Serves requests on one connection until the client closes it.
fn serve(issuer: &Issuer, s: &mut impl ReadWrite) -> std::io::Result<()> {
    loop {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if s.read(&mut b)? == 0 {
                return Ok(());
            }
            head.push(b[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let mut words = head.split_whitespace();
        let method = words.next().unwrap_or("").to_string();
        let path = words.next().unwrap_or("").to_string();
        let len = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())?
            })
            .unwrap_or(0);
        let host = head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("host").then(|| v.trim().to_string())
        });
        let mut body = vec![0u8; len];
        s.read_exact(&mut body)?;
        let (status, answer) = issuer.answer(
            &method,
            &path,
            &String::from_utf8_lossy(&body),
            host.as_deref(),
        );
        write!(
            s,
            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
            answer.len()
        )?;
        s.flush()?;
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

struct Env {
    issuer: Arc<Issuer>,
    cluster: TestCluster,
}

fn env() -> &'static Env {
    static E: OnceLock<Env> = OnceLock::new();
    E.get_or_init(|| {
        let issuer = start_issuer();
        let ca = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(ca.path(), &issuer.ca_pem).unwrap();
        let (_, ca_path) = ca.keep().unwrap();
        let cluster = TestCluster::start_with(
            StartOptions::new()
                .apiserver_arg(format!("--oidc-issuer-url={}", issuer.url))
                .apiserver_arg(format!("--oidc-client-id={CLIENT_ID}"))
                .apiserver_arg(format!("--oidc-ca-file={}", ca_path.display()))
                .apiserver_arg("--oidc-username-claim=sub")
                .apiserver_arg("--oidc-username-prefix=-")
                .apiserver_arg("--oidc-groups-claim=groups")
                .apiserver_arg("--oidc-signing-algs=ES256"),
        )
        .expect("start test cluster");
        // The apiserver reads the issuer's discovery document in the background: wait until
        // it accepts an id-token (readiness, not a timed assertion).
        let token = issuer.id_token(3600);
        let mut last = None;
        for _ in 0..300 {
            let r = cluster.request_as(&token, "GET", "/api/v1/namespaces", None);
            if matches!(r, Ok((200, _))) {
                last = None;
                break;
            }
            last = Some(r);
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(
            last.is_none(),
            "the apiserver never accepted an id-token: {last:?}"
        );
        Env { issuer, cluster }
    })
}

fn kubeconfig(dir: &Path, id_token: &str, refresh_token: Option<&str>) -> Config {
    let e = env();
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let refresh = refresh_token
        .map(|t| format!("        refresh-token: {t}\n"))
        .unwrap_or_default();
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    \
         server: {server}\n    certificate-authority-data: {ca}\ncontexts:\n- name: c\n  context:\n    \
         cluster: k\n    user: alice\nusers:\n- name: alice\n  user:\n    auth-provider:\n      \
         name: oidc\n      config:\n        client-id: {CLIENT_ID}\n        \
         idp-issuer-url: {issuer}\n        idp-certificate-authority-data: {issuer_ca}\n        \
         id-token: {id_token}\n{refresh}",
        server = e.cluster.server,
        ca = b64(&e.cluster.ca_pem),
        issuer = e.issuer.url,
        issuer_ca = b64(&e.issuer.ca_pem),
    );
    let path = dir.join("kubeconfig");
    std::fs::write(&path, text).unwrap();
    Config::from_kubeconfig_file(&path, None).unwrap()
}

fn oidc_of(cfg: &Config) -> &informer_http::config::OidcConfig {
    match &cfg.auth {
        Auth::Oidc(o) => o,
        other => panic!("not oidc: {other:?}"),
    }
}

/// An expired id-token is refreshed with the refresh token before the first request; the
/// refreshed one expires (for the client) 2 s later and is refreshed again, with the rotated
/// refresh token; a watch keeps delivering meanwhile.
async fn refresh_scenario<B: Backend>(
    client: Client<B>,
    first_refresh_token: &str,
    ns: &str,
    sleep: impl Fn(Duration) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) {
    let e = env();
    let (status, body) = e
        .cluster
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
        .expect("list after refreshing an expired id-token");
    assert!(page.items.iter().any(|n| n.name() == ns));
    assert_eq!(oidc_refreshes(oidc_of(client.config())), 1);
    assert!(
        e.issuer
            .used
            .lock()
            .unwrap()
            .contains(&first_refresh_token.to_string())
    );
    let cms = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some(ns));
    let mut watch = cms
        .watch(&WatchRequest {
            resource_version: page.resource_version.clone(),
            timeout_seconds: Some(60),
            ..WatchRequest::default()
        })
        .await
        .expect("watch");
    sleep(Duration::from_millis(2500)).await;
    namespaces
        .list(&ListRequest::default())
        .await
        .expect("list after the second refresh");
    assert_eq!(oidc_refreshes(oidc_of(client.config())), 2);
    let (status, body) = e
        .cluster
        .request(
            "POST",
            &format!("/api/v1/namespaces/{ns}/configmaps"),
            Some(r#"{"metadata":{"name":"after-refresh"}}"#),
        )
        .unwrap();
    assert!((200..300).contains(&status), "{status} {body}");
    match watch.next().await {
        Some(WatchEvent::Added(cm)) => assert_eq!(cm.name(), "after-refresh"),
        other => panic!("expected the configmap, got {other:?}"),
    }
}

#[test]
fn expired_id_token_is_refreshed_on_reqwest() {
    let e = env();
    let dir = tempfile::tempdir().unwrap();
    let rt_token = e.issuer.new_refresh_token();
    let cfg = kubeconfig(dir.path(), &e.issuer.id_token(-60), Some(&rt_token));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(refresh_scenario(
        Client::reqwest(cfg).unwrap(),
        &rt_token,
        "oidc-reqwest",
        |d| Box::pin(tokio::time::sleep(d)),
    ));
}

#[test]
fn expired_id_token_is_refreshed_on_smol() {
    let e = env();
    let dir = tempfile::tempdir().unwrap();
    let rt_token = e.issuer.new_refresh_token();
    let cfg = kubeconfig(dir.path(), &e.issuer.id_token(-60), Some(&rt_token));
    smol::block_on(refresh_scenario(
        Client::smol(cfg).unwrap(),
        &rt_token,
        "oidc-smol",
        |d| {
            Box::pin(async move {
                smol::Timer::after(d).await;
            })
        },
    ));
}

#[test]
fn a_valid_id_token_is_used_as_is_and_an_expired_one_without_refresh_token_is_a_clear_error() {
    let e = env();
    let dir = tempfile::tempdir().unwrap();
    let cfg = kubeconfig(dir.path(), &e.issuer.id_token(3600), None);
    let n = smol::block_on(async {
        Client::smol(cfg.clone())
            .unwrap()
            .api::<DynamicObject>(Resource::NAMESPACES, None)
            .list(&ListRequest::default())
            .await
            .map(|p| p.items.len())
    })
    .expect("a valid id-token");
    assert!(n > 0);
    assert_eq!(oidc_refreshes(oidc_of(&cfg)), 0);
    // The blocking path too.
    assert!(cfg.authorization().unwrap().is_some());

    let expired = e.issuer.id_token(-60);
    let cfg = kubeconfig(dir.path(), &expired, None);
    let err = smol::block_on(async {
        Client::smol(cfg.clone())
            .unwrap()
            .api::<DynamicObject>(Resource::NAMESPACES, None)
            .list(&ListRequest::default())
            .await
            .unwrap_err()
    })
    .to_string();
    assert!(err.contains("\"alice\""), "{err}");
    assert!(err.contains("lacks refresh-token"), "{err}");
    assert!(!err.contains(&expired), "{err}");
    let err = cfg.authorization().unwrap_err().to_string();
    assert!(err.contains("lacks refresh-token"), "{err}");

    // A refresh token the issuer does not know: the OAuth2 error code, no token quoted.
    let cfg = kubeconfig(dir.path(), &expired, Some("rt-unknown"));
    let err = cfg.authorization().unwrap_err().to_string();
    assert!(err.contains("HTTP 400 invalid_grant"), "{err}");
    assert!(!err.contains("rt-unknown"), "{err}");
}

/// The refresh (discovery and token endpoint) goes through the client's proxy like every other
/// request: the kubeconfig's `proxy-url` (even to an issuer on 127.0.0.1), else `HTTPS_PROXY`
/// for an issuer by a name only the test proxy resolves, and directly (so failing to resolve
/// that name) when `NO_PROXY` names the issuer.
#[test]
fn the_oidc_refresh_goes_through_the_configured_proxy() {
    let e = env();
    let proxy = TestProxy::start();
    let dir = tempfile::tempdir().unwrap();
    let issuer_authority = e.issuer.url.trim_start_matches("https://").to_string();
    let issuer_port = issuer_authority.rsplit(':').next().unwrap().to_string();
    let set_issuer = |cfg: &mut Config, url: String| match &mut cfg.auth {
        Auth::Oidc(o) => o.issuer_url = Some(url),
        other => panic!("not oidc: {other:?}"),
    };
    let to_issuer = |name: &str| {
        proxy
            .connects()
            .iter()
            .filter(|t| **t == format!("{name}:{issuer_port}"))
            .count()
    };

    // proxy-url: every request, the apiserver's and the issuer's, through the proxy.
    let rt_token = e.issuer.new_refresh_token();
    let mut cfg = kubeconfig(dir.path(), &e.issuer.id_token(-60), Some(&rt_token));
    cfg.proxy_url = Some(proxy.url());
    cfg.proxy_env = Some(informer_http::config::ProxyEnv::default());
    let n = smol::block_on(async {
        Client::smol(cfg.clone())
            .unwrap()
            .api::<DynamicObject>(Resource::NAMESPACES, None)
            .list(&ListRequest::default())
            .await
            .map(|p| p.items.len())
    })
    .expect("a list after a refresh through proxy-url");
    assert!(n > 0);
    assert_eq!(oidc_refreshes(oidc_of(&cfg)), 1);
    assert_eq!(
        proxy
            .connects()
            .iter()
            .filter(|t| **t == issuer_authority)
            .count(),
        2,
        "discovery and token endpoint through the proxy: {:?}",
        proxy.connects()
    );

    // HTTPS_PROXY: an issuer named `oidc-issuer.test`, which only the proxy resolves.
    let rt_token = e.issuer.new_refresh_token();
    let mut cfg = kubeconfig(dir.path(), &e.issuer.id_token(-60), Some(&rt_token));
    set_issuer(&mut cfg, format!("https://oidc-issuer.test:{issuer_port}"));
    cfg.proxy_env = Some(informer_http::config::ProxyEnv {
        https_proxy: Some(proxy.url()),
        ..Default::default()
    });
    assert!(
        cfg.authorization()
            .expect("refresh via HTTPS_PROXY")
            .is_some()
    );
    assert_eq!(oidc_refreshes(oidc_of(&cfg)), 1);
    assert_eq!(to_issuer("oidc-issuer.test"), 2, "{:?}", proxy.connects());

    // NO_PROXY names the issuer: a direct connection, which cannot resolve the name.
    let rt_token = e.issuer.new_refresh_token();
    let mut cfg = kubeconfig(dir.path(), &e.issuer.id_token(-60), Some(&rt_token));
    set_issuer(&mut cfg, format!("https://oidc-issuer.test:{issuer_port}"));
    cfg.proxy_env = Some(informer_http::config::ProxyEnv {
        https_proxy: Some(proxy.url()),
        no_proxy: Some(".test".into()),
        ..Default::default()
    });
    let err = cfg.authorization().unwrap_err().to_string();
    assert!(
        err.contains("discovery") && err.contains("oidc-issuer.test"),
        "{err}"
    );
    assert_eq!(to_issuer("oidc-issuer.test"), 2, "no new CONNECT");
}
