//! The hostile-server table: the informer of each runtime crate against a scripted,
//! misbehaving HTTP server on loopback (`support/`), one test per behaviour, through the
//! public API and the real transports (reqwest on tokio, the own HTTP/1.1 client on smol).
//!
//! Every row states its expected outcome and checks it: a typed failure reported through the
//! watch-error hook and counted in `Metrics::watch_errors_by_kind`, or a retry whose rate the
//! backoff bounds (requests counted per second, generous bounds); always the cache intact (equal
//! to what the server last listed correctly), no panic, the informer still running, and memory
//! bounded (a line over the maximum event size is a typed error, never an allocation of its
//! size). The README's "Hostile servers" table lists the rows.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informer_core::protocol::DecodeKind;
use informer_http::config::{Auth, Secret};
use informer_http::{Config, Transport};
use informer_runtime::{
    BackoffConfig, DynamicObject, Failure, InformerBuilder, Object, ReflectorConfig, Resource,
    Runtime,
};
use support::{Env, Reply, Req, Server, bookmark, cm, event, eventually, list_of, status_json};

type Failures = Arc<Mutex<Vec<Failure>>>;

/// An informer on `server` whose watch-error hook records into the returned list.
fn informer<E: Env>(
    server: &Server,
) -> (informer_runtime::Informer<DynamicObject, E::R>, Failures) {
    let client = E::client(Config::new(server.url.clone()));
    let failures: Failures = Arc::default();
    let f = failures.clone();
    let informer =
        InformerBuilder::<DynamicObject, E::R>::new(E::R::default(), &client, Resource::CONFIGMAPS)
            .on_watch_error(move |e| f.lock().unwrap().push(e.failure().clone()))
            .build()
            .unwrap();
    (informer, failures)
}

/// One row of the table.
struct Row {
    /// The server's behaviour.
    script: Box<dyn Fn(&Req) -> Reply + Send + Sync>,
    /// The failure the hook must see (`None`: the row's outcome is a bounded retry, no report).
    expect: Option<fn(&Failure) -> bool>,
    /// Its `Failure::kind()`, counted in the metrics.
    kind: &'static str,
    /// The cache at the end: `(key, resourceVersion)`, sorted.
    cache: &'static [(&'static str, &'static str)],
    /// The maximum event size (default 16 MiB).
    max_line: Option<usize>,
    /// Requests per second allowed over the row (the backoff's bound, generously).
    max_rate: f64,
    /// Also wait until the server has seen this many requests.
    until_requests: usize,
}

impl Row {
    fn new(script: impl Fn(&Req) -> Reply + Send + Sync + 'static) -> Row {
        Row {
            script: Box::new(script),
            expect: None,
            kind: "",
            cache: &[("ns/a", "5")],
            max_line: None,
            max_rate: MAX_RATE,
            until_requests: 0,
        }
    }
    fn expect(mut self, kind: &'static str, f: fn(&Failure) -> bool) -> Row {
        self.kind = kind;
        self.expect = Some(f);
        self
    }
    fn cache(mut self, cache: &'static [(&'static str, &'static str)]) -> Row {
        self.cache = cache;
        self
    }
    fn until_requests(mut self, n: usize) -> Row {
        self.until_requests = n;
        self
    }
    fn max_line(mut self, n: usize) -> Row {
        self.max_line = Some(n);
        self
    }
}

/// Timeouts short enough for a test: watches ask `timeoutSeconds` of 1–2 s and are taken as
/// hung 1 s after; a list page unanswered for 2 s has failed; the backoff starts at 200 ms
/// (doubling, jittered, capped at 2 s), so a row's retries stay under [`MAX_RATE`] requests per
/// second where a hot loop would make thousands.
fn short_timeouts() -> ReflectorConfig {
    ReflectorConfig {
        test_min_watch_timeout: Some(Duration::from_secs(1)),
        watch_deadline_grace: Some(Duration::from_secs(1)),
        list_deadline: Some(Duration::from_secs(2)),
        backoff: BackoffConfig {
            initial: Duration::from_millis(200),
            cap: Duration::from_secs(2),
            ..BackoffConfig::default()
        },
        ..ReflectorConfig::default()
    }
}

/// Requests per second a row may make (list + watch per backoff step, generously).
const MAX_RATE: f64 = 8.0;

/// What a row left behind, for checks of its own.
struct Ran {
    server: Server,
    failures: Vec<Failure>,
}

/// Runs a row: the expected failure reported (hook and metrics), the cache as expected, the
/// request rate within the bound, the informer still running.
async fn run_row<E: Env>(row: Row) -> Ran {
    let server = Server::start(row.script);
    let mut config = Config::new(server.url.clone());
    config.auth = Auth::Token(Secret::new("hostile-row-token".to_string()));
    let client = E::client(config);
    let mut api = client.api::<DynamicObject>(Resource::CONFIGMAPS, None);
    if let Some(n) = row.max_line {
        api = api.with_max_line(n);
    }
    let transport: Arc<dyn Transport<DynamicObject>> = Arc::new(api);
    let failures: Failures = Arc::default();
    let f = failures.clone();
    let inf = InformerBuilder::<DynamicObject, E::R>::from_transport(
        E::R::default(),
        transport,
        "configmaps",
    )
    .on_watch_error(move |e| f.lock().unwrap().push(e.failure().clone()))
    .reflector_config(short_timeouts())
    .build()
    .unwrap();
    let t0 = Instant::now();
    inf.start().unwrap();
    let store = inf.store();
    let cache_ok = || {
        let mut got: Vec<(String, String)> = store
            .list()
            .iter()
            .map(|o| {
                (
                    format!("{}/{}", o.namespace().unwrap_or(""), o.name()),
                    o.resource_version().unwrap_or("").to_string(),
                )
            })
            .collect();
        got.sort();
        let want: Vec<(String, String)> = row
            .cache
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        got == want
    };
    let reported = || match row.expect {
        Some(f) => failures.lock().unwrap().iter().any(f),
        None => true,
    };
    let done = eventually::<E>(Duration::from_secs(25), || {
        reported() && cache_ok() && server.requests().len() >= row.until_requests
    })
    .await;
    let seen = failures.lock().unwrap().clone();
    assert!(
        done,
        "expected failure reported: {}, cache as expected: {}; failures {seen:?}; cache {:?}",
        reported(),
        cache_ok(),
        store.list()
    );
    if row.expect.is_some() {
        let m = inf.metrics();
        assert!(
            m.watch_errors_by_kind.get(row.kind).copied().unwrap_or(0) >= 1,
            "metrics count {}: {m:?}",
            row.kind
        );
    }
    assert!(!inf.is_stopped(), "the informer keeps running");
    let elapsed = t0.elapsed().as_secs_f64().max(1.0);
    let requests = server.requests().len();
    assert!(
        requests as f64 / elapsed <= row.max_rate,
        "{requests} requests in {elapsed:.1} s: not bounded by the backoff"
    );
    inf.shutdown().await;
    Ran {
        server,
        failures: seen,
    }
}

fn list_a() -> Vec<u8> {
    list_of(&[cm("a", 5, "{}")], 5).into_bytes()
}

/// A MODIFIED for `a` whose object does not decode (a label value that is a number), then a
/// BOOKMARK at a later resourceVersion: the informer must not move past the change. The watch
/// ends with a typed decode failure (hook and metrics), and the relist repairs the cache.
async fn undecodable_event_ends_the_watch_and_the_relist_repairs_the_cache<E: Env>() {
    let server = Server::lists_and_watches(
        |n| {
            if n == 0 {
                list_of(&[cm("a", 5, r#"{"v":"1"}"#)], 5)
            } else {
                list_of(&[cm("a", 7, r#"{"v":"2"}"#)], 10)
            }
        },
        |n| {
            (n == 0).then(|| {
                format!(
                    "{}{}",
                    event("MODIFIED", &cm("a", 7, r#"{"v":2}"#)),
                    bookmark(9)
                )
                .into_bytes()
            })
        },
    );
    let (inf, failures) = informer::<E>(&server);
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    let store = inf.store();
    // The backoff before the relist is 0.8–1.6 s.
    let repaired = eventually::<E>(Duration::from_secs(20), || {
        store
            .get("ns/a")
            .is_some_and(|a| a.resource_version() == Some("7"))
    })
    .await;
    assert!(repaired, "the relist brought the change");
    assert_eq!(inf.last_sync_resource_version(), "10");
    let failures = failures.lock().unwrap().clone();
    assert!(
        matches!(&failures[0], Failure::Decode(d) if d.message.contains("ConfigMap ns/a")),
        "{failures:?}"
    );
    assert_eq!(server.lists(), 2);
    let m = inf.metrics();
    assert_eq!(m.watch_errors_by_kind.get("decode"), Some(&1), "{m:?}");
    assert!(m.relists >= 1);
    inf.shutdown().await;
}

/// Other lines that used to be dropped in silence: an unknown event type, an ERROR whose
/// object is a string, a line over the 16 MiB limit. Each ends the watch and reaches the hook
/// as a typed decode failure; the cache keeps the listed state; nothing is applied past it.
async fn skipped_lines_are_reported_as_typed_failures<E: Env>() {
    let huge = format!(
        r#"{{"type":"ADDED","object":{{"metadata":{{"name":"big","namespace":"ns","annotations":{{"x":"{}"}}}}}}}}"#,
        "y".repeat(17 << 20)
    );
    let bad_lines = Arc::new(vec![
        r#"{"type":"FOO","object":{"metadata":{"name":"a"}}}"#.to_string(),
        r#"{"type":"ERROR","object":"boom"}"#.to_string(),
        huge,
    ]);
    let lines = bad_lines.clone();
    let server = Server::lists_and_watches(
        |_| list_of(&[cm("a", 5, "{}")], 5),
        move |n| {
            lines.get(n).map(|bad| {
                format!(
                    "{bad}\n{}{}",
                    event("ADDED", &cm("late", 8, "{}")),
                    bookmark(9)
                )
                .into_bytes()
            })
        },
    );
    let (inf, failures) = informer::<E>(&server);
    inf.start().unwrap();
    let all = eventually::<E>(Duration::from_secs(30), || {
        failures.lock().unwrap().len() >= bad_lines.len()
    })
    .await;
    let failures = failures.lock().unwrap().clone();
    assert!(all, "{failures:?}");
    assert!(
        failures.iter().all(|f| matches!(f, Failure::Decode(_))),
        "{failures:?}"
    );
    let store = inf.store();
    assert!(store.get("ns/late").is_none(), "nothing after a bad line");
    assert!(store.get("ns/a").is_some());
    assert_ne!(inf.last_sync_resource_version(), "9");
    inf.shutdown().await;
}

/// A server that ends every watch right after one BOOKMARK used to get thousands of watch
/// requests per second. The very-short-watch rule counts only objects now, so the request rate
/// is bounded by the backoff (800 ms, doubling, with jitter).
async fn watches_ending_after_a_bookmark_back_off<E: Env>() {
    let server = Server::lists_and_watches(
        |_| list_of(&[cm("a", 5, "{}")], 5),
        |n| Some(bookmark(6 + n as u64).into_bytes()),
    );
    let (inf, failures) = informer::<E>(&server);
    let t0 = Instant::now();
    inf.start().unwrap();
    let window = Duration::from_secs(4);
    <E::R as Default>::default().sleep(window).await;
    let watches = server.watches();
    let elapsed = t0.elapsed().as_secs_f64();
    inf.shutdown().await;
    // Delays of [0.8, 1.6) s, then [1.6, 3.2) s, ...: at most 3–4 watches in 4 s. Allow some
    // slack for scheduling, but nowhere near a hot loop.
    assert!(
        watches <= 8,
        "{watches} watches in {elapsed:.1} s ({:.1}/s)",
        watches as f64 / elapsed
    );
    assert!(watches >= 2, "it did re-watch: {watches}");
    let very_short = failures
        .lock()
        .unwrap()
        .iter()
        .filter(|f| matches!(f, Failure::VeryShortWatch))
        .count();
    assert!(very_short >= 1, "reported as very short watches");
}

/// Malformed list JSON (a body cut inside an item): `Decode(Malformed)`, backoff, relist.
async fn malformed_list_json<E: Env>() {
    run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, 0) => {
                Reply::Ok(br#"{"kind":"ConfigMapList","items":[{"metadata":{"na"#.to_vec())
            }
            (false, _) => Reply::Ok(list_a()),
            (true, _) => Reply::Silent,
        })
        .expect(
            "decode",
            |f| matches!(f, Failure::Decode(d) if d.kind == DecodeKind::Malformed),
        ),
    )
    .await;
}

/// A list item without a name: `InvalidObject` naming it; it is not stored, the rest is.
async fn list_item_without_a_name<E: Env>() {
    run_row::<E>(
        Row::new(|r| {
            if r.watch {
                Reply::Silent
            } else {
                Reply::Ok(
                    list_of(
                        &[
                            cm("a", 5, "{}"),
                            r#"{"kind":"ConfigMap","metadata":{"namespace":"ns","resourceVersion":"4"}}"#.to_string(),
                        ],
                        5,
                    )
                    .into_bytes(),
                )
            }
        })
        .expect("invalid_object", |f| matches!(f, Failure::InvalidObject(_))),
    )
    .await;
}

/// An HTML 502 from a proxy: `Other` with code 502 and the text as message; backoff, relist.
async fn html_502<E: Env>() {
    run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, 0) => Reply::Status {
                code: 502,
                content_type: "text/html",
                headers: vec![],
                body: b"<html><body><h1>502 Bad Gateway</h1></body></html>".to_vec(),
            },
            (false, _) => Reply::Ok(list_a()),
            (true, _) => Reply::Silent,
        })
        .expect("other", |f| {
            matches!(f, Failure::Other(s) if s.code == 502 && s.message.contains("Bad Gateway"))
        }),
    )
    .await;
}

/// A plain-text 500: `Other` with code 500; backoff, relist.
async fn plain_text_500<E: Env>() {
    run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, 0) => Reply::Status {
                code: 500,
                content_type: "text/plain",
                headers: vec![],
                body: b"internal error, try later".to_vec(),
            },
            (false, _) => Reply::Ok(list_a()),
            (true, _) => Reply::Silent,
        })
        .expect("other", |f| {
            matches!(f, Failure::Other(s) if s.code == 500 && s.message.contains("internal error"))
        }),
    )
    .await;
}

/// 429 with `Retry-After: 1`, three times: `TooManyRequests` carrying the 1 s; each retry waits
/// at least that long (three retries take at least 3 s, though the backoff alone would allow
/// them in about 1.4 s).
async fn too_many_requests_with_retry_after<E: Env>() {
    let ran = run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, 0..=2) => Reply::Status {
                code: 429,
                content_type: "application/json",
                headers: vec!["Retry-After: 1".into()],
                body: status_json(429, "TooManyRequests", "slow down"),
            },
            (false, _) => Reply::Ok(list_a()),
            (true, _) => Reply::Silent,
        })
        .expect("too_many_requests", |f| {
            matches!(f, Failure::TooManyRequests(s) if s.retry_after == Some(Duration::from_secs(1)))
        }),
    )
    .await;
    let lists: Vec<Instant> = ran
        .server
        .requests()
        .iter()
        .filter(|r| !r.watch)
        .map(|r| r.at)
        .collect();
    assert!(lists.len() >= 4, "{lists:?}");
    let span = lists[3].duration_since(lists[0]).as_secs_f64();
    assert!(
        span >= 2.9,
        "3 retries in {span:.1} s: Retry-After not honoured"
    );
}

/// A watch event of unknown type: `Decode(UnknownEventType)`; the watch ends, nothing after
/// it is applied, the relist brings the state.
async fn unknown_watch_event_type<E: Env>() {
    run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, 0) => Reply::Ok(list_a()),
            (false, _) => {
                Reply::Ok(list_of(&[cm("a", 5, "{}"), cm("late", 8, "{}")], 8).into_bytes())
            }
            (true, 0) => Reply::Ok(
                format!(
                    "{}{}",
                    event("FOO", &cm("x", 6, "{}")),
                    event("ADDED", &cm("late", 8, "{}"))
                )
                .into_bytes(),
            ),
            (true, _) => Reply::Silent,
        })
        .expect(
            "decode",
            |f| matches!(f, Failure::Decode(d) if d.kind == DecodeKind::UnknownEventType),
        )
        .cache(&[("ns/a", "5"), ("ns/late", "8")]),
    )
    .await;
}

/// A watch `ERROR` whose object is not a Status: `Decode(Malformed)`, relist.
async fn watch_error_that_is_not_a_status<E: Env>() {
    run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, _) => Reply::Ok(list_a()),
            (true, 0) => Reply::Ok(event("ERROR", r#"["not","a","status"]"#).into_bytes()),
            (true, _) => Reply::Silent,
        })
        .expect(
            "decode",
            |f| matches!(f, Failure::Decode(d) if d.kind == DecodeKind::Malformed),
        ),
    )
    .await;
}

/// A 50 MB line with no newline, with a maximum event size of 1 MiB: `Decode(TooLarge)` as
/// soon as the line passes 1 MiB (the rest is discarded as it arrives, never held).
async fn line_of_50_mb_without_newline<E: Env>() {
    let huge = Arc::new(vec![b'x'; 50 << 20]);
    run_row::<E>(
        Row::new(move |r| match (r.watch, r.n) {
            (false, _) => Reply::Ok(list_a()),
            (true, 0) => Reply::Ok(huge.to_vec()),
            (true, _) => Reply::Silent,
        })
        .expect(
            "decode",
            |f| matches!(f, Failure::Decode(d) if d.kind == DecodeKind::TooLarge),
        )
        .max_line(1 << 20),
    )
    .await;
}

/// A 17 MB line followed by a valid event, default maximum (16 MiB): `Decode(TooLarge)`; the
/// valid event after it is not applied from that stream (the watch ends at the bad line), the
/// relist brings it.
async fn line_of_17_mb_then_a_valid_event<E: Env>() {
    let big = format!(
        r#"{{"type":"ADDED","object":{{"metadata":{{"name":"big","namespace":"ns","annotations":{{"x":"{}"}}}}}}}}"#,
        "y".repeat(17 << 20)
    );
    let body = Arc::new(format!("{big}\n{}", event("ADDED", &cm("late", 8, "{}"))));
    run_row::<E>(
        Row::new(move |r| match (r.watch, r.n) {
            (false, 0) => Reply::Ok(list_a()),
            (false, _) => {
                Reply::Ok(list_of(&[cm("a", 5, "{}"), cm("late", 8, "{}")], 8).into_bytes())
            }
            (true, 0) => Reply::Ok(body.as_bytes().to_vec()),
            (true, _) => Reply::Silent,
        })
        .expect(
            "decode",
            |f| matches!(f, Failure::Decode(d) if d.kind == DecodeKind::TooLarge),
        )
        .cache(&[("ns/a", "5"), ("ns/late", "8")]),
    )
    .await;
}

fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Deep nesting (100,000 arrays) in watch events, no stack overflow anywhere: in a field
/// `DynamicObject` keeps as raw JSON it is accepted (never recursed into; `d` is stored, see
/// informer-http's `deep_nesting_in_watch_lines`); where a value is read (a label) it is
/// `Decode(Object)` naming the object, the watch ends and the relist brings back the server's
/// list.
async fn deep_nesting_in_watch_events<E: Env>() {
    let lines = Arc::new(format!(
        "{}{}",
        event(
            "ADDED",
            &format!(
                r#"{{"kind":"ConfigMap","metadata":{{"name":"d","namespace":"ns","resourceVersion":"6"}},"data":{}}}"#,
                nested(100_000)
            ),
        ),
        event(
            "ADDED",
            &cm("e", 7, &format!(r#"{{"k":{}}}"#, nested(100_000)))
        )
    ));
    run_row::<E>(
        Row::new(move |r| match (r.watch, r.n) {
            (false, _) => Reply::Ok(list_a()),
            (true, 0) => Reply::Ok(lines.as_bytes().to_vec()),
            (true, _) => Reply::Silent,
        })
        .expect("decode", |f| {
            matches!(f, Failure::Decode(d) if d.kind == DecodeKind::Object && d.message.contains("ns/e"))
        }),
    )
    .await;
}

/// Deep nesting (100,000 arrays) in a list body: `Decode(Malformed)`, no stack overflow.
async fn deep_nesting_in_a_list<E: Env>() {
    let body = Arc::new(format!(
        r#"{{"kind":"ConfigMapList","metadata":{{"resourceVersion":"5"}},"junk":{},"items":[]}}"#,
        nested(100_000)
    ));
    run_row::<E>(
        Row::new(move |r| match (r.watch, r.n) {
            (false, 0) => Reply::Ok(body.as_bytes().to_vec()),
            (false, _) => Reply::Ok(list_a()),
            (true, _) => Reply::Silent,
        })
        .expect(
            "decode",
            |f| matches!(f, Failure::Decode(d) if d.kind == DecodeKind::Malformed),
        ),
    )
    .await;
}

/// A bad chunk size in a chunked list answer: the list fails as `Other` (no HTTP status, the
/// transport's words about the chunked encoding), backoff, relist.
async fn bad_chunk_size<E: Env>() {
    run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, 0) => Reply::Raw(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"kin\r\nzz\r\nxx\r\n0\r\n\r\n"
                    .to_vec(),
            ),
            (false, _) => Reply::Ok(list_a()),
            (true, _) => Reply::Silent,
        })
        .expect("other", |f| {
            matches!(f, Failure::Other(s) if s.code == 0 && s.message.to_lowercase().contains("chunk"))
        }),
    )
    .await;
}

/// A connection reset in the middle of a watch event, three times: the half event is never
/// applied; each watch, ended within 1 s having delivered no object, is a `VeryShortWatch`
/// (client-go's rule): backoff, relist, re-watch.
async fn connection_reset_in_the_middle_of_an_event<E: Env>() {
    let ran = run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, _) => Reply::Ok(list_a()),
            (true, 0..=2) => Reply::ResetAfter(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n{}",
                    &event("MODIFIED", &cm("a", 9, "{}"))[..32]
                )
                .into_bytes(),
            ),
            (true, _) => Reply::Silent,
        })
        .expect("very_short_watch", |f| matches!(f, Failure::VeryShortWatch))
        // The list, three reset watches and the fourth, with the relists between.
        .until_requests(8),
    )
    .await;
    assert!(ran.server.watches() >= 4);
    assert!(
        ran.failures
            .iter()
            .all(|f| matches!(f, Failure::VeryShortWatch | Failure::HungWatch)),
        "{:?}",
        ran.failures
    );
}

/// A watch that never sends a byte (not even a status line): abandoned as `HungWatch` once past
/// its `timeoutSeconds` plus the grace, and re-opened from the last resourceVersion (no relist).
async fn silent_watch<E: Env>() {
    let ran = run_row::<E>(
        Row::new(|r| match r.watch {
            false => Reply::Ok(list_a()),
            true => Reply::Silent,
        })
        .expect("hung_watch", |f| matches!(f, Failure::HungWatch)),
    )
    .await;
    assert_eq!(
        ran.server.lists(),
        1,
        "a hung watch is re-opened, not relisted"
    );
}

/// A slow drip, one byte per second, of a valid event: the watch is still open past its
/// deadline and is abandoned as `HungWatch`; the drip never blocks the informer.
async fn slow_drip_of_one_byte_per_second<E: Env>() {
    run_row::<E>(
        Row::new(|r| match r.watch {
            false => Reply::Ok(list_a()),
            true => Reply::Drip {
                body: event("MODIFIED", &cm("a", 9, "{}")).into_bytes(),
                every: Duration::from_secs(1),
            },
        })
        .expect("hung_watch", |f| matches!(f, Failure::HungWatch)),
    )
    .await;
}

/// Events with older resourceVersions than the list's: applied as the server sends them, like
/// client-go (resourceVersions are opaque: a client must not order them), no failure.
async fn events_with_older_resource_versions<E: Env>() {
    let ran = run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, _) => Reply::Ok(list_of(&[cm("a", 10, "{}")], 10).into_bytes()),
            (true, 0) => Reply::ThenSilent(
                format!(
                    "{}{}",
                    event("MODIFIED", &cm("a", 7, "{}")),
                    event("ADDED", &cm("b", 3, "{}"))
                )
                .into_bytes(),
            ),
            (true, _) => Reply::Silent,
        })
        .cache(&[("ns/a", "7"), ("ns/b", "3")]),
    )
    .await;
    assert!(
        ran.failures.iter().all(|f| matches!(f, Failure::HungWatch)),
        "{:?}",
        ran.failures
    );
}

/// A bookmark without a resourceVersion: `Decode(Object)`; the informer does not move, relists.
async fn bookmark_without_a_resource_version<E: Env>() {
    run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, _) => Reply::Ok(list_a()),
            (true, 0) => {
                Reply::Ok(event("BOOKMARK", r#"{"kind":"ConfigMap","metadata":{}}"#).into_bytes())
            }
            (true, _) => Reply::Silent,
        })
        .expect(
            "decode",
            |f| matches!(f, Failure::Decode(d) if d.kind == DecodeKind::Object),
        ),
    )
    .await;
}

/// 403 at start, twice: `Forbidden` with the server's message; retried with backoff.
async fn forbidden_at_start<E: Env>() {
    run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, 0..=1) => Reply::Status {
                code: 403,
                content_type: "application/json",
                headers: vec![],
                body: status_json(
                    403,
                    "Forbidden",
                    "configmaps is forbidden: User x cannot list",
                ),
            },
            (false, _) => Reply::Ok(list_a()),
            (true, _) => Reply::Silent,
        })
        .expect(
            "forbidden",
            |f| matches!(f, Failure::Forbidden(s) if s.message.contains("cannot list")),
        ),
    )
    .await;
}

/// 401 in the middle (on the watch, after a good list): `Unauthorized`; backoff, relist.
async fn unauthorized_in_the_middle<E: Env>() {
    run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, _) => Reply::Ok(list_a()),
            (true, 0) => Reply::Status {
                code: 401,
                content_type: "application/json",
                headers: vec![],
                body: status_json(401, "Unauthorized", "Unauthorized"),
            },
            (true, _) => Reply::Silent,
        })
        .expect("unauthorized", |f| matches!(f, Failure::Unauthorized(_))),
    )
    .await;
}

/// A list that hangs (no answer at all): `ListTimeout` after the list deadline, then a relist.
async fn list_that_hangs<E: Env>() {
    run_row::<E>(
        Row::new(|r| match (r.watch, r.n) {
            (false, 0) => Reply::Silent,
            (false, _) => Reply::Ok(list_a()),
            (true, _) => Reply::Silent,
        })
        .expect("list_timeout", |f| matches!(f, Failure::ListTimeout)),
    )
    .await;
}

/// A redirect to another host: not followed, `Redirect`; the other host never sees a request,
/// so never the token.
async fn redirect_to_another_host<E: Env>() {
    let other = Server::start(Box::new(|_| Reply::Ok(list_a())));
    let location = format!(
        "{}/api/v1/configmaps",
        other.url.replace("127.0.0.1", "localhost")
    );
    let location2 = format!("{}/api/v1/configmaps", other.url);
    let ran = run_row::<E>(
        Row::new(move |r| match (r.watch, r.n) {
            (false, 0) => Reply::Status {
                code: 302,
                content_type: "text/plain",
                headers: vec![format!("Location: {location}")],
                body: vec![],
            },
            (false, 1) => Reply::Status {
                code: 307,
                content_type: "text/plain",
                headers: vec![format!("Location: {location2}")],
                body: vec![],
            },
            (false, _) => Reply::Ok(list_a()),
            (true, _) => Reply::Silent,
        })
        .expect("redirect", |f| matches!(f, Failure::Redirect(_))),
    )
    .await;
    assert_eq!(
        other.requests().len(),
        0,
        "the other origin was never asked"
    );
    assert!(
        ran.server.requests().iter().all(|r| r
            .headers
            .iter()
            .any(|h| h == "authorization: Bearer hostile-row-token"
                || h == "Authorization: Bearer hostile-row-token")),
        "the configured server got the token"
    );
}

on_both_runtimes!(
    undecodable_event_ends_the_watch_and_the_relist_repairs_the_cache,
    skipped_lines_are_reported_as_typed_failures,
    watches_ending_after_a_bookmark_back_off,
    malformed_list_json,
    list_item_without_a_name,
    html_502,
    plain_text_500,
    too_many_requests_with_retry_after,
    unknown_watch_event_type,
    watch_error_that_is_not_a_status,
    line_of_50_mb_without_newline,
    line_of_17_mb_then_a_valid_event,
    deep_nesting_in_watch_events,
    deep_nesting_in_a_list,
    bad_chunk_size,
    connection_reset_in_the_middle_of_an_event,
    silent_watch,
    slow_drip_of_one_byte_per_second,
    events_with_older_resource_versions,
    bookmark_without_a_resource_version,
    forbidden_at_start,
    unauthorized_in_the_middle,
    list_that_hangs,
    redirect_to_another_host,
);
