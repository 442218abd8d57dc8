//! A scripted, misbehaving HTTP/1.1 server on loopback, and the two runtimes, shared by the
//! tests that drive the public informer through the real transports against it.

#![allow(dead_code)] // each test file uses its part

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use informer_http::{Backend, Client, Config};
use informer_runtime::Runtime;

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Req {
    /// A watch (`watch=true`) rather than a list.
    pub watch: bool,
    /// 0-based number of this kind of request (lists and watches counted apart).
    pub n: usize,
    /// Path and query.
    pub path: String,
    /// Header lines as sent (`name: value`).
    pub headers: Vec<String>,
    /// When it arrived.
    pub at: Instant,
}

/// What the server does with a request.
pub enum Reply {
    /// 200, `application/json`, the body delimited by closing the connection.
    Ok(Vec<u8>),
    /// A status with a content type, extra header lines and a body (`Content-Length`).
    Status {
        code: u16,
        content_type: &'static str,
        headers: Vec<String>,
        body: Vec<u8>,
    },
    /// These bytes as they are (head included), then close.
    Raw(Vec<u8>),
    /// These bytes as they are, then a TCP reset (not a clean close).
    ResetAfter(Vec<u8>),
    /// A 200 head, then the body one byte every `every`, then close.
    Drip { body: Vec<u8>, every: Duration },
    /// Not a byte, ever (until the server stops).
    Silent,
    /// A 200 head and these bytes, then silence with the connection open.
    ThenSilent(Vec<u8>),
}

/// The server's behaviour: one reply per request.
pub type Script = Box<dyn Fn(&Req) -> Reply + Send + Sync>;

/// A scripted server; stops when dropped.
pub struct Server {
    pub url: String,
    log: Arc<Mutex<Vec<Req>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Server {
    /// Lists answered by `list(n)`, watches by `watch(n)` (`None`: silent), each with 200.
    pub fn lists_and_watches(
        list: impl Fn(usize) -> String + Send + Sync + 'static,
        watch: impl Fn(usize) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Server {
        Server::start(Box::new(move |r: &Req| {
            if r.watch {
                match watch(r.n) {
                    Some(b) => Reply::Ok(b),
                    None => Reply::Silent,
                }
            } else {
                Reply::Ok(list(r.n).into_bytes())
            }
        }))
    }

    pub fn start(script: Script) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let log: Arc<Mutex<Vec<Req>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let script = Arc::new(script);
        let (l, s) = (log.clone(), stop.clone());
        thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let (script, log, stop) = (script.clone(), l.clone(), s.clone());
                        thread::spawn(move || serve(conn, &script, &log, &stop));
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Server { url, log, stop }
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Req> {
        self.log.lock().unwrap().clone()
    }

    pub fn watches(&self) -> usize {
        self.requests().iter().filter(|r| r.watch).count()
    }

    pub fn lists(&self) -> usize {
        self.requests().iter().filter(|r| !r.watch).count()
    }
}

fn wait_for_stop(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(20));
    }
}

/// One request per connection (`Connection: close`).
fn serve(conn: TcpStream, script: &Script, log: &Mutex<Vec<Req>>, stop: &AtomicBool) {
    conn.set_nonblocking(false).unwrap();
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" => break,
            Ok(_) => headers.push(line.trim_end().to_string()),
        }
    }
    let path = first.split(' ').nth(1).unwrap_or("").to_string();
    let watch = path.contains("watch=true");
    let req = {
        let mut log = log.lock().unwrap();
        let n = log.iter().filter(|r| r.watch == watch).count();
        let req = Req {
            watch,
            n,
            path,
            headers,
            at: Instant::now(),
        };
        log.push(req.clone());
        req
    };
    let mut conn = conn;
    let ok_head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
    match script(&req) {
        Reply::Ok(body) => {
            let _ = conn.write_all(ok_head.as_bytes());
            let _ = conn.write_all(&body);
        }
        Reply::Status {
            code,
            content_type,
            headers,
            body,
        } => {
            let mut head = format!(
                "HTTP/1.1 {code} X\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for h in headers {
                head.push_str(&h);
                head.push_str("\r\n");
            }
            head.push_str("\r\n");
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(&body);
        }
        Reply::Raw(bytes) => {
            let _ = conn.write_all(&bytes);
        }
        Reply::ResetAfter(bytes) => {
            let _ = conn.write_all(&bytes);
            let _ = conn.flush();
            // Linger 0: closing sends RST, not FIN.
            let _ = socket2::SockRef::from(&conn).set_linger(Some(Duration::ZERO));
            drop(conn);
            return;
        }
        Reply::Drip { body, every } => {
            let _ = conn.write_all(ok_head.as_bytes());
            for b in body {
                if stop.load(Ordering::SeqCst) || conn.write_all(&[b]).is_err() {
                    return;
                }
                thread::sleep(every);
            }
        }
        Reply::Silent => {
            wait_for_stop(stop);
            return;
        }
        Reply::ThenSilent(bytes) => {
            let _ = conn.write_all(ok_head.as_bytes());
            let _ = conn.write_all(&bytes);
            wait_for_stop(stop);
            return;
        }
    }
    let _ = conn.shutdown(std::net::Shutdown::Both);
}

pub fn cm(name: &str, rv: u64, labels: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","labels":{labels}}}}}"#
    )
}

pub fn list_of(items: &[String], rv: u64) -> String {
    format!(
        r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

pub fn event(kind: &str, object: &str) -> String {
    format!("{{\"type\":\"{kind}\",\"object\":{object}}}\n")
}

pub fn bookmark(rv: u64) -> String {
    event(
        "BOOKMARK",
        &format!(r#"{{"kind":"ConfigMap","metadata":{{"resourceVersion":"{rv}"}}}}"#),
    )
}

/// A `Status` body.
pub fn status_json(code: u16, reason: &str, message: &str) -> Vec<u8> {
    format!(
        r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":"{message}","reason":"{reason}","code":{code}}}"#
    )
    .into_bytes()
}

pub trait Env: 'static {
    type R: Runtime + Default;
    type B: Backend;
    fn client(config: Config) -> Client<Self::B>;
    fn block_on<F: Future>(f: F) -> F::Output;
}

pub struct TokioEnv;
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

pub struct SmolEnv;
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
pub async fn eventually<E: Env>(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
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

/// Runs `$name::<Env>` as a test on each runtime.
#[macro_export]
macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {
        mod on_tokio {
            $(#[test] fn $name() { <super::support::TokioEnv as super::support::Env>::block_on(super::$name::<super::support::TokioEnv>()) })*
        }
        mod on_smol {
            $(#[test] fn $name() { <super::support::SmolEnv as super::support::Env>::block_on(super::$name::<super::support::SmolEnv>()) })*
        }
    };
}
