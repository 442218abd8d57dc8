//! An informer with no async runtime: `informer-core` driven from a plain blocking loop.
//!
//! ```sh
//! cargo xtask cluster up
//! KUBECONFIG=.cluster/cluster/kubeconfig cargo run -p informer-http --example blocking_loop -- --seconds 20
//! ```
//!
//! The pieces:
//! - the configuration (kubeconfig), the request URLs, the decoders and the `Status` mapping come
//!   from `informer-http`; the HTTP client is `ureq` (blocking);
//! - each request the informer asks for (a list page or a watch) runs on its own thread, which
//!   performs the GET, decodes the answer and sends the results, tagged with the request's id,
//!   over one `std::sync::mpsc` channel;
//! - the main thread owns the informer and obeys its rule: after every input, drain `poll()`
//!   until it is empty, then wait for the next input or `poll_timeout()`, whichever is first.
//!   Handlers run right there, inline.
//!
//! Options: `--seconds N` (default 20), `--namespace NS` (default: all namespaces).

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant as StdInstant};

use informer_core::cache::processor::Notification;
use informer_core::informer::{InformerConfig, Output, SharedIndexInformer};
use informer_core::protocol::RequestId;
use informer_core::protocol::{Failure, Input, Request, WatchEvent};
use informer_core::{object::DynamicObject, object::Object, time::Instant};
use informer_http::backend::transport_failure;
use informer_http::decode::{WatchDecoder, decode_list};
use informer_http::request::{list_url, watch_url};
use informer_http::status::failure_from_response;
use informer_http::{Config, Resource};

/// What a reader thread sends the loop: the core's input, tagged with its request.
type Tagged = (RequestId, Input<DynamicObject>);

/// Lists and watches ConfigMaps for `run_for`, calling `seen` with one line per thing the
/// handler saw (`synced …`, `add …`, `update …`, `delete …`). Stops early when `seen` returns
/// true.
pub fn run(
    config: &Config,
    namespace: Option<&str>,
    run_for: Duration,
    mut seen: impl FnMut(String) -> bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let http = agent(config)?;
    let epoch = StdInstant::now();
    let now = || Instant::from_epoch(epoch.elapsed());
    let deadline = epoch + run_for;

    let mut informer = SharedIndexInformer::<DynamicObject>::new(InformerConfig::default());
    let (handler, _) = informer
        .add_handler(Duration::ZERO, now())
        .expect("the informer has not stopped");
    informer.start(now());

    let (tx, rx) = mpsc::channel::<Tagged>();
    // The id of the request in flight: a reader thread whose id is no longer current stops.
    let current = Arc::new(AtomicU64::new(0));
    let mut reported_sync = false;

    loop {
        // Drain every output before waiting again.
        while let Some(out) = informer.poll() {
            match out {
                Output::Request { id, request } => {
                    current.store(id.0, Ordering::SeqCst);
                    let (http, config, tx, current) =
                        (http.clone(), config.clone(), tx.clone(), current.clone());
                    let namespace = namespace.map(str::to_string);
                    thread::spawn(move || {
                        perform(
                            &http,
                            &config,
                            namespace.as_deref(),
                            id,
                            request,
                            &tx,
                            &current,
                        )
                    });
                }
                Output::WatchError(failure) => eprintln!("watch error: {failure}"),
            }
        }
        // The handler runs inline, on this thread: every pending notification, in order.
        let mut stop = false;
        informer.deliver(|_, notification| stop |= seen(describe(notification)));
        if stop {
            return Ok(());
        }
        if !reported_sync && informer.handler_has_synced(handler) {
            reported_sync = true;
            if seen(format!("synced {} configmaps", informer.indexer().len())) {
                return Ok(());
            }
        }

        // Wait for a result or the informer's next deadline (or ours).
        let wake = informer
            .poll_timeout()
            .map(|t| epoch + t.since_epoch())
            .map_or(deadline, |t| t.min(deadline));
        let timeout = wake.saturating_duration_since(StdInstant::now());
        match rx.recv_timeout(timeout) {
            Ok((id, input)) => informer.handle_input(now(), id, input),
            Err(RecvTimeoutError::Timeout) if StdInstant::now() >= deadline => break,
            Err(RecvTimeoutError::Timeout) => informer.handle_timeout(now()),
            Err(RecvTimeoutError::Disconnected) => unreachable!("the loop holds a sender"),
        }
    }
    informer.stop();
    println!("cache: {} configmaps", informer.indexer().len());
    Ok(())
}

/// One line describing a notification.
fn describe(n: &Notification<DynamicObject>) -> String {
    let key = |o: &DynamicObject| format!("{}/{}", o.namespace().unwrap_or(""), o.name());
    let rv = |o: &DynamicObject| o.resource_version().unwrap_or("").to_string();
    match n {
        Notification::Add {
            obj,
            in_initial_list,
        } => {
            let initial = if *in_initial_list {
                " (initial list)"
            } else {
                ""
            };
            format!("add {} rv={}{initial}", key(obj), rv(obj))
        }
        Notification::Update { old, new } => {
            format!("update {} rv={}->{}", key(new), rv(old), rv(new))
        }
        Notification::Delete(gone) => format!("delete {}", key(gone.object())),
    }
}

/// A reader thread: performs one request and sends its results to the loop.
fn perform(
    http: &ureq::Agent,
    config: &Config,
    namespace: Option<&str>,
    id: RequestId,
    request: Request,
    tx: &Sender<Tagged>,
    current: &AtomicU64,
) {
    let resource = &Resource::CONFIGMAPS;
    let path = match &request {
        Request::List(r) => list_url(resource, namespace, r),
        Request::Watch(r) => watch_url(resource, namespace, r),
    };
    let body = match get(http, config, &path) {
        Ok(body) => body,
        Err(failure) => {
            let _ = tx.send((id, Input::Failed(failure)));
            return;
        }
    };
    if let Request::List(_) = request {
        let input = match body.into_with_config().limit(1 << 30).read_to_vec() {
            Ok(bytes) => match decode_list(&bytes) {
                Ok(page) => (id, Input::ListPage(page)),
                Err(e) => (id, Input::Failed(e.to_failure())),
            },
            Err(e) => (
                id,
                Input::Failed(Failure::other(format!("reading the list: {e}"))),
            ),
        };
        let _ = tx.send(input);
        return;
    }
    // A watch: feed the body to the decoder chunk by chunk, send every event.
    let mut reader = body.into_reader();
    let mut decoder = WatchDecoder::<DynamicObject>::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(n) => n,
            Err(e) => {
                let _ = tx.send((id, Input::Failed(transport_failure("watch", &e))));
                return;
            }
        };
        if n == 0 {
            match decoder.finish() {
                Some(Ok(event)) => {
                    let _ = tx.send((id, Input::Event(event)));
                }
                Some(Err(e)) => {
                    let _ = tx.send((id, Input::Event(WatchEvent::Error(e.to_failure()))));
                    return;
                }
                None => {}
            }
            let _ = tx.send((id, Input::StreamEnd));
            return;
        }
        decoder.feed(&buf[..n]);
        while let Some(result) = decoder.next_event() {
            match result {
                Ok(event) => {
                    // Stop when the informer has moved on or the loop is gone.
                    if current.load(Ordering::SeqCst) != id.0
                        || tx.send((id, Input::Event(event))).is_err()
                    {
                        return;
                    }
                }
                // An undecodable line ends the watch (the informer relists after a backoff):
                // skipping it would move the informer past a change it never applied.
                Err(e) => {
                    let _ = tx.send((id, Input::Event(WatchEvent::Error(e.to_failure()))));
                    return;
                }
            }
        }
    }
}

/// GET `path` with the configured credentials; an error status becomes its `Failure`.
fn get(http: &ureq::Agent, config: &Config, path: &str) -> Result<ureq::Body, Failure> {
    let mut req = http
        .get(format!("{}{path}", config.server))
        .header("Accept", "application/json");
    if let Some(auth) = config
        .authorization()
        .map_err(|e| Failure::other(e.to_string()))?
    {
        req = req.header("Authorization", auth.expose());
    }
    let resp = req.call().map_err(|e| match e {
        ureq::Error::Io(io) => transport_failure("GET", &io),
        other => Failure::other(format!("GET: {other}")),
    })?;
    let status = resp.status().as_u16();
    if (200..300).contains(&status) {
        return Ok(resp.into_body());
    }
    let retry_after = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = resp.into_body().read_to_vec().unwrap_or_default();
    Err(failure_from_response(status, retry_after.as_deref(), &body))
}

/// A ureq agent trusting the configured CA, presenting the client certificate if any, and
/// answering error statuses as responses (so their `Status` body can be read).
fn agent(config: &Config) -> Result<ureq::Agent, Box<dyn std::error::Error>> {
    use ureq::tls::{ClientCert, PemItem, RootCerts, TlsConfig, parse_pem};
    let mut tls = TlsConfig::builder().disable_verification(config.insecure_skip_tls_verify);
    if let Some(pem) = &config.root_ca_pem {
        let mut roots = Vec::new();
        for item in parse_pem(pem) {
            if let PemItem::Certificate(c) = item? {
                roots.push(c);
            }
        }
        tls = tls.root_certs(RootCerts::new_with_certs(&roots));
    }
    if let Some(id) = &config.client_identity {
        let (mut certs, mut key) = (Vec::new(), None);
        for item in parse_pem(&id.cert_pem).chain(parse_pem(id.key_pem.expose())) {
            match item? {
                PemItem::Certificate(c) => certs.push(c),
                PemItem::PrivateKey(k) => key = Some(k),
                _ => {}
            }
        }
        let key = key.ok_or("client key: no private key in the PEM")?;
        tls = tls.client_cert(Some(ClientCert::new_with_certs(&certs, key)));
    }
    Ok(ureq::Agent::config_builder()
        .tls_config(tls.build())
        .http_status_as_error(false)
        .build()
        .into())
}

#[allow(dead_code)] // unused when tests/blocking_example.rs includes this file
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
    };
    let seconds: u64 = flag("--seconds").map_or(Ok(20), |s| s.parse())?;
    let namespace = flag("--namespace").map(String::as_str);
    let config = Config::infer()?;
    println!("watching configmaps on {} for {seconds} s", config.server);
    run(&config, namespace, Duration::from_secs(seconds), |line| {
        println!("{line}");
        false
    })
}
