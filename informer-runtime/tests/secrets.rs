//! Credentials never reach logs: every `tracing` event and span field at every level, TRACE
//! included (the informer's and its dependencies'), is captured while informers of both
//! runtimes, configured from a world-readable kubeconfig holding a bearer token and a client key,
//! run against a scripted server that fails them in every way that carries a message (401, 403,
//! 500, a redirect to another host, an undecodable event). Then the capture, and the `Debug` and
//! `Display` of everything a user might print, are searched for the token and for every line of
//! the key.

mod support;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use informer_http::config::Kubeconfig;
use informer_runtime::{BackoffConfig, DynamicObject, Failure, InformerBuilder, Object, Resource};
use support::{Env, Reply, Server, SmolEnv, TokioEnv, cm, event, list_of, status_json};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

const TOKEN: &str = "tok-3f9a1c77e2b64d0c9e5b8a21d4c6f0e8";

static CAPTURED: Mutex<String> = Mutex::new(String::new());

struct Capture;

struct Fields<'a>(&'a mut String);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={}", field.name(), value);
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(tracing::level_filters::LevelFilter::TRACE)
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut out = CAPTURED.lock().unwrap();
        let _ = write!(out, "\nSPAN {}", span.metadata().name());
        span.record(&mut Fields(&mut out));
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut out = CAPTURED.lock().unwrap();
        out.push_str("\nRECORD");
        values.record(&mut Fields(&mut out));
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        let mut out = CAPTURED.lock().unwrap();
        let _ = write!(
            out,
            "\n{} {}",
            event.metadata().level(),
            event.metadata().target()
        );
        event.record(&mut Fields(&mut out));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

fn data(name: &str) -> Vec<u8> {
    std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../informer-http/tests/data")
            .join(name),
    )
    .unwrap()
}

fn b64(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut s = String::new();
    for c in bytes.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                let _ = s.write_char(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// A kubeconfig holding the token and the client key, mode 0644 (client-go accepts it; so do
/// we, and never log it).
fn world_readable_kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let text = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    server: {server}\nusers:\n- name: u\n  user:\n    token: {TOKEN}\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: c\n  context: {{cluster: k, user: u}}\n",
        b64(&data("client.crt")),
        b64(&data("client.key")),
    );
    let path = dir.join("config");
    std::fs::write(&path, text).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    path
}

/// The scripted server: every failure with a message, then a good list and watch.
fn hostile() -> (Server, Server) {
    let other = Server::start(Box::new(|_| Reply::Ok(Vec::new())));
    let location = format!("{}/api/v1/configmaps", other.url);
    let server = Server::start(Box::new(move |r| match (r.watch, r.n) {
        (false, 0) => Reply::Status {
            code: 401,
            content_type: "application/json",
            headers: vec![],
            body: status_json(401, "Unauthorized", "Unauthorized"),
        },
        (false, 1) => Reply::Status {
            code: 403,
            content_type: "application/json",
            headers: vec![],
            body: status_json(
                403,
                "Forbidden",
                "configmaps is forbidden: User u cannot list",
            ),
        },
        (false, 2) => Reply::Status {
            code: 500,
            content_type: "text/plain",
            headers: vec![],
            body: b"internal error".to_vec(),
        },
        (false, 3) => Reply::Status {
            code: 302,
            content_type: "text/plain",
            headers: vec![format!("Location: {location}")],
            body: vec![],
        },
        (false, _) => Reply::Ok(list_of(&[cm("a", 5, "{}")], 5).into_bytes()),
        (true, 0) => Reply::Ok(event("MODIFIED", &cm("a", 6, r#"{"v":1}"#)).into_bytes()),
        (true, _) => Reply::ThenSilent(event("MODIFIED", &cm("a", 7, "{}")).into_bytes()),
    }));
    (server, other)
}

async fn run<E: Env>(config_path: &std::path::Path) -> Vec<Failure> {
    let (server, other) = hostile();
    // The kubeconfig names the scripted server.
    let dir = config_path.parent().unwrap();
    let path = world_readable_kubeconfig(dir, &server.url);
    let config = informer_http::Config::from_kubeconfig_file(&path, None).unwrap();
    let client = E::client(config);
    let failures: Arc<Mutex<Vec<Failure>>> = Arc::default();
    let f = failures.clone();
    let inf = InformerBuilder::<DynamicObject, E::R>::new(
        <E::R as Default>::default(),
        &client,
        Resource::CONFIGMAPS,
    )
    .on_watch_error(move |e| f.lock().unwrap().push(e.failure().clone()))
    .backoff(BackoffConfig {
        initial: Duration::from_millis(20),
        cap: Duration::from_millis(100),
        ..BackoffConfig::default()
    })
    .build()
    .unwrap();
    inf.start().unwrap();
    let store = inf.store();
    let done = support::eventually::<E>(Duration::from_secs(20), || {
        store
            .get("ns/a")
            .is_some_and(|a| a.resource_version() == Some("7"))
    })
    .await;
    assert!(done, "{:?}", failures.lock().unwrap());
    // Everything a user might print.
    let mut printed = format!("\n{client:?}\n{:?}\n{:?}", inf.metrics(), store.list());
    for f in failures.lock().unwrap().iter() {
        let _ = write!(printed, "\n{f}\n{f:?}");
    }
    CAPTURED.lock().unwrap().push_str(&printed);
    inf.shutdown().await;
    assert!(
        server
            .requests()
            .iter()
            .all(|r| r.headers.iter().any(|h| h.contains(TOKEN))),
        "the configured server got the token on every request"
    );
    assert!(other.requests().is_empty(), "the other origin got nothing");
    failures.lock().unwrap().clone()
}

/// The secrets: the token, and every line of the key's PEM body and of its base64 in the
/// kubeconfig (long enough not to occur by chance).
fn secrets() -> Vec<String> {
    let key = String::from_utf8(data("client.key")).unwrap();
    let mut s = vec![TOKEN.to_string()];
    s.extend(
        key.lines()
            .filter(|l| !l.starts_with("-----"))
            .map(str::to_string),
    );
    let encoded = b64(key.as_bytes());
    s.extend(
        encoded
            .as_bytes()
            .chunks(24)
            .map(|c| String::from_utf8(c.to_vec()).unwrap()),
    );
    s
}

#[test]
fn no_credential_in_trace_output_debug_or_display() {
    tracing::subscriber::set_global_default(Capture).unwrap();
    assert!(tracing::enabled!(Level::TRACE));
    let dir = tempdir();
    let cfg = dir.join("config");
    let tokio_failures = TokioEnv::block_on(run::<TokioEnv>(&cfg));
    let smol_failures = SmolEnv::block_on(run::<SmolEnv>(&cfg));
    for failures in [&tokio_failures, &smol_failures] {
        for kind in ["unauthorized", "forbidden", "other", "redirect", "decode"] {
            assert!(
                failures.iter().any(|f| f.kind() == kind),
                "{kind} missing from {failures:?}"
            );
        }
    }
    // Debug and Display of the configuration and of its errors.
    let path = world_readable_kubeconfig(&dir, "https://127.0.0.1:6443");
    let text = std::fs::read_to_string(&path).unwrap();
    let kubeconfig = Kubeconfig::from_yaml(&path, &text).unwrap();
    let config = kubeconfig.config(None).unwrap();
    assert!(config.client_identity.is_some(), "the key was loaded");
    let broken = text.replace(TOKEN, &format!("{TOKEN}\n    bogus: [unclosed"));
    let err = Kubeconfig::from_yaml(&path, &broken).unwrap_err();
    let mut out = CAPTURED.lock().unwrap();
    let _ = write!(out, "\n{kubeconfig:?}\n{config:?}\n{err}\n{err:?}");
    let captured = out.clone();
    drop(out);
    assert!(
        captured.matches('\n').count() > 20,
        "the capture holds the run"
    );
    assert!(captured.contains("list/watch failed"), "{captured}");
    for secret in secrets() {
        assert!(
            !captured.contains(&secret),
            "{secret:?} appears in:\n{captured}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("informer-secrets-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
