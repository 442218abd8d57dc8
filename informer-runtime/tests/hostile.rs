//! The informer of each runtime crate against a scripted, misbehaving HTTP server on loopback:
//! regressions for faults an outside probe found (a cache that silently moved past a change it
//! could not decode, skipped lines nobody heard of, a watch hot loop). Everything goes through
//! the public API and the real transports (reqwest on tokio, the own HTTP/1.1 client on smol).

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use informer_http::{Backend, Client, Config};
use informer_runtime::{DynamicObject, Failure, InformerBuilder, Object, Resource, Runtime};

/// What the server answers; each function gets the 0-based number of that kind of request.
struct Script {
    list: Box<dyn Fn(usize) -> String + Send + Sync>,
    /// The watch body (events, one per line); the connection closes after it. `None`: the
    /// watch never answers (held open until the server stops).
    watch: Box<dyn Fn(usize) -> Option<Vec<u8>> + Send + Sync>,
}

/// Requests seen: (path and query, when).
type Log = Arc<Mutex<Vec<(String, Instant)>>>;

struct Server {
    url: String,
    log: Log,
    stop: Arc<AtomicBool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Server {
    fn start(script: Script) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let log: Log = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let script = Arc::new(script);
        let (l, s) = (log.clone(), stop.clone());
        thread::spawn(move || {
            let counts = Arc::new(Mutex::new((0usize, 0usize)));
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (script, log, stop, counts) =
                            (script.clone(), l.clone(), s.clone(), counts.clone());
                        thread::spawn(move || serve(conn, &script, &log, &stop, &counts));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Server { url, log, stop }
    }

    fn watches(&self) -> usize {
        self.count(|p| p.contains("watch=true"))
    }

    fn lists(&self) -> usize {
        self.count(|p| !p.contains("watch=true"))
    }

    fn count(&self, f: impl Fn(&str) -> bool) -> usize {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, _)| f(p))
            .count()
    }
}

/// One request per connection (`Connection: close`), the body delimited by the close.
fn serve(
    conn: TcpStream,
    script: &Script,
    log: &Log,
    stop: &AtomicBool,
    counts: &Mutex<(usize, usize)>,
) {
    conn.set_nonblocking(false).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => {}
        }
    }
    let path = first.split(' ').nth(1).unwrap_or("").to_string();
    log.lock().unwrap().push((path.clone(), Instant::now()));
    let watch = path.contains("watch=true");
    let n = {
        let mut c = counts.lock().unwrap();
        let slot = if watch { &mut c.1 } else { &mut c.0 };
        *slot += 1;
        *slot - 1
    };
    let body = if watch {
        match (script.watch)(n) {
            Some(b) => b,
            None => {
                while !stop.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(20));
                }
                return;
            }
        }
    } else {
        (script.list)(n).into_bytes()
    };
    let mut conn = conn;
    let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(&body);
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

fn cm(name: &str, rv: u64, labels: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","labels":{labels}}}}}"#
    )
}

fn list_of(items: &[String], rv: u64) -> String {
    format!(
        r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

fn event(kind: &str, object: &str) -> String {
    format!("{{\"type\":\"{kind}\",\"object\":{object}}}\n")
}

fn bookmark(rv: u64) -> String {
    event(
        "BOOKMARK",
        &format!(r#"{{"kind":"ConfigMap","metadata":{{"resourceVersion":"{rv}"}}}}"#),
    )
}

trait Env: 'static {
    type R: Runtime + Default;
    type B: Backend;
    fn client(config: Config) -> Client<Self::B>;
    fn block_on<F: Future>(f: F) -> F::Output;
}

struct TokioEnv;
impl Env for TokioEnv {
    type R = informer_tokio::Tokio;
    type B = informer_tokio::Backend;
    fn client(config: Config) -> Client<Self::B> {
        informer_tokio::client(config).unwrap()
    }
    fn block_on<F: Future>(f: F) -> F::Output {
        informer_tokio::block_on(f).unwrap()
    }
}

struct SmolEnv;
impl Env for SmolEnv {
    type R = informer_smol::Smol;
    type B = informer_smol::Backend;
    fn client(config: Config) -> Client<Self::B> {
        informer_smol::client(config).unwrap()
    }
    fn block_on<F: Future>(f: F) -> F::Output {
        informer_smol::block_on(f).unwrap()
    }
}

/// Polls `cond` until it holds or `limit` passes (a bound, not a measurement).
async fn eventually<E: Env>(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if cond() {
            return true;
        }
        <E::R as Default>::default()
            .sleep(Duration::from_millis(20))
            .await;
    }
    cond()
}

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
            .on_watch_error(move |e| f.lock().unwrap().push(e.clone()))
            .build()
            .unwrap();
    (informer, failures)
}

/// A MODIFIED for `a` whose object does not decode (a label value that is a number), then a
/// BOOKMARK at a later resourceVersion: the informer must not move past the change. The watch
/// ends with a typed decode failure (hook and metrics), and the relist repairs the cache.
async fn undecodable_event_ends_the_watch_and_the_relist_repairs_the_cache<E: Env>() {
    let server = Server::start(Script {
        list: Box::new(|n| {
            if n == 0 {
                list_of(&[cm("a", 5, r#"{"v":"1"}"#)], 5)
            } else {
                list_of(&[cm("a", 7, r#"{"v":"2"}"#)], 10)
            }
        }),
        watch: Box::new(|n| {
            (n == 0).then(|| {
                format!(
                    "{}{}",
                    event("MODIFIED", &cm("a", 7, r#"{"v":2}"#)),
                    bookmark(9)
                )
                .into_bytes()
            })
        }),
    });
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
    let server = Server::start(Script {
        list: Box::new(|_| list_of(&[cm("a", 5, "{}")], 5)),
        watch: Box::new(move |n| {
            lines.get(n).map(|bad| {
                format!(
                    "{bad}\n{}{}",
                    event("ADDED", &cm("late", 8, "{}")),
                    bookmark(9)
                )
                .into_bytes()
            })
        }),
    });
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
    let server = Server::start(Script {
        list: Box::new(|_| list_of(&[cm("a", 5, "{}")], 5)),
        watch: Box::new(|n| Some(bookmark(6 + n as u64).into_bytes())),
    });
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

macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {
        mod on_tokio {
            $(#[test] fn $name() { <super::TokioEnv as super::Env>::block_on(super::$name::<super::TokioEnv>()) })*
        }
        mod on_smol {
            $(#[test] fn $name() { <super::SmolEnv as super::Env>::block_on(super::$name::<super::SmolEnv>()) })*
        }
    };
}

on_both_runtimes!(
    undecodable_event_ends_the_watch_and_the_relist_repairs_the_cache,
    skipped_lines_are_reported_as_typed_failures,
    watches_ending_after_a_bookmark_back_off,
);
