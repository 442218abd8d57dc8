//! A scripted, misbehaving HTTP/1.1 server on loopback (feature `scripted`): the one server the
//! test suites of `informer-http` (redirects, TLS verification, crypto providers) and
//! `informer-runtime` (the hostile-server table, the consistency check, secrets) script.
//!
//! Plain or TLS (a `rustls` server configuration the caller makes); every request is recorded
//! ([`Server::requests`]) and answered with what the script returns for it: a complete
//! response on a kept-alive connection ([`Reply::KeepAlive`]), or one of the misbehaviours
//! (a body delimited by closing, a reset in the middle, a drip, silence) after which the
//! connection ends. The server stops when dropped.
//!
//! ```no_run
//! use testcluster::scripted::{Reply, Server, cm, list_of};
//!
//! let server = Server::start(Box::new(|r| {
//!     if r.watch {
//!         Reply::Silent
//!     } else {
//!         Reply::Ok(list_of(&[cm("a", 5, "{}")], 5).into_bytes())
//!     }
//! }));
//! // Point a client at server.url; afterwards look at server.requests().
//! ```

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Req {
    /// The method.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Header lines as sent (`name: value`).
    pub headers: Vec<String>,
    /// The `Authorization` header's value, if any.
    pub authorization: Option<String>,
    /// A watch (`watch=true` in the query) rather than another request.
    pub watch: bool,
    /// 0-based number of this kind of request (watches and the rest counted apart).
    pub n: usize,
    /// When it arrived.
    pub at: Instant,
    /// The server's port (for scripts that redirect to themselves).
    pub port: u16,
}

/// What the server does with a request.
#[derive(Debug)]
pub enum Reply {
    /// These bytes (a complete response, see [`response`]); the connection stays open for the
    /// next request.
    KeepAlive(Vec<u8>),
    /// 200, `application/json`, the body delimited by closing the connection.
    Ok(Vec<u8>),
    /// A status with a content type, extra header lines and a body (`Content-Length`), then
    /// close.
    Status {
        /// The status code.
        code: u16,
        /// The `Content-Type`.
        content_type: &'static str,
        /// Extra header lines (`name: value`).
        headers: Vec<String>,
        /// The body.
        body: Vec<u8>,
    },
    /// These bytes as they are (head included), then close.
    Raw(Vec<u8>),
    /// These bytes as they are, then a TCP reset (not a clean close).
    ResetAfter(Vec<u8>),
    /// A 200 head, then the body one byte every `every`, then close.
    Drip {
        /// The body.
        body: Vec<u8>,
        /// The pause after each byte.
        every: Duration,
    },
    /// Not a byte, ever (until the server stops).
    Silent,
    /// A 200 head and these bytes, then silence with the connection open.
    ThenSilent(Vec<u8>),
}

/// The server's behaviour: one reply per request.
pub type Script = Box<dyn Fn(&Req) -> Reply + Send + Sync>;

/// A scripted server; stops when dropped.
pub struct Server {
    /// `http://127.0.0.1:PORT`, or `https://…` with TLS.
    pub url: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    log: Arc<Mutex<Vec<Req>>>,
    stop: Arc<AtomicBool>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Server {
    /// A plain-HTTP server answering with `script`.
    pub fn start(script: Script) -> Server {
        Server::start_tls(None, script)
    }

    /// A server answering with `script`, over TLS when `tls` is given.
    pub fn start_tls(tls: Option<Arc<rustls::ServerConfig>>, script: Script) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let port = listener
            .local_addr()
            .expect("the listener's address")
            .port();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://127.0.0.1:{port}");
        let log: Arc<Mutex<Vec<Req>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let script = Arc::new(script);
        let (l, s) = (log.clone(), stop.clone());
        thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((tcp, _)) => {
                        let (script, log, stop, tls) =
                            (script.clone(), l.clone(), s.clone(), tls.clone());
                        thread::spawn(move || {
                            if tcp.set_nonblocking(false).is_err() {
                                return;
                            }
                            let conn = match tls {
                                Some(cfg) => match rustls::ServerConnection::new(cfg) {
                                    Ok(c) => Conn::Tls(Box::new(rustls::StreamOwned::new(c, tcp))),
                                    Err(_) => return,
                                },
                                None => Conn::Plain(tcp),
                            };
                            serve(conn, port, &script, &log, &stop);
                        });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        Server {
            url,
            port,
            log,
            stop,
        }
    }

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

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<Req> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many watches were asked for.
    pub fn watches(&self) -> usize {
        self.requests().iter().filter(|r| r.watch).count()
    }

    /// How many requests other than watches (lists) were made.
    pub fn lists(&self) -> usize {
        self.requests().iter().filter(|r| !r.watch).count()
    }
}

/// A connection, plain or TLS.
enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(t) => t,
            Conn::Tls(s) => &s.sock,
        }
    }

    /// A clean end: TLS close_notify, then FIN both ways.
    fn close(mut self) {
        if let Conn::Tls(s) = &mut self {
            s.conn.send_close_notify();
            let _ = s.flush();
        }
        let _ = self.tcp().shutdown(Shutdown::Both);
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(t) => t.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(t) => t.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(t) => t.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

fn wait_for_stop(stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        thread::sleep(Duration::from_millis(20));
    }
}

/// Reads one request head (and its `Content-Length` body); `None` at the end of the stream.
fn read_request(reader: &mut BufReader<Conn>) -> Option<(String, String, Vec<String>)> {
    let mut first = String::new();
    match reader.read_line(&mut first) {
        Ok(0) | Err(_) => return None,
        Ok(_) => {}
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return None,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => headers.push(line.trim_end().to_string()),
        }
    }
    let body_len: usize = headers
        .iter()
        .filter_map(|h| h.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; body_len];
    reader.read_exact(&mut body).ok()?;
    let mut parts = first.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    Some((method, path, headers))
}

fn serve(conn: Conn, port: u16, script: &Script, log: &Mutex<Vec<Req>>, stop: &AtomicBool) {
    let mut reader = BufReader::new(conn);
    loop {
        let Some((method, path, headers)) = read_request(&mut reader) else {
            return;
        };
        let watch = path.contains("watch=true");
        let authorization = headers
            .iter()
            .filter_map(|h| h.split_once(':'))
            .find(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            .map(|(_, v)| v.trim().to_string());
        let req = {
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            let n = log.iter().filter(|r| r.watch == watch).count();
            let req = Req {
                method,
                path,
                headers,
                authorization,
                watch,
                n,
                at: Instant::now(),
                port,
            };
            log.push(req.clone());
            req
        };
        let reply = script(&req);
        let conn = reader.get_mut();
        if let Reply::KeepAlive(bytes) = &reply {
            if conn.write_all(bytes).is_err() || conn.flush().is_err() {
                return;
            }
            continue;
        }
        let ok_head =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n";
        match reply {
            Reply::KeepAlive(_) => unreachable!("answered above"),
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
                let _ = socket2::SockRef::from(conn.tcp()).set_linger(Some(Duration::ZERO));
                return;
            }
            Reply::Drip { body, every } => {
                let _ = conn.write_all(ok_head.as_bytes());
                let _ = conn.flush();
                for b in body {
                    if stop.load(Ordering::SeqCst)
                        || conn.write_all(&[b]).is_err()
                        || conn.flush().is_err()
                    {
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
                let _ = conn.flush();
                wait_for_stop(stop);
                return;
            }
        }
        let _ = conn.flush();
        reader.into_inner().close();
        return;
    }
}

/// A complete response: `status` line (`"200 OK"`), `headers`, and `body` with its
/// `Content-Length`; for [`Reply::KeepAlive`].
pub fn response(status: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status}\r\n");
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    out.into_bytes()
}

/// A ConfigMap `name` in namespace `ns` at resourceVersion `rv` with `labels` (a JSON object).
pub fn cm(name: &str, rv: u64, labels: &str) -> String {
    format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","resourceVersion":"{rv}","labels":{labels}}}}}"#
    )
}

/// A ConfigMapList of `items` at resourceVersion `rv`.
pub fn list_of(items: &[String], rv: u64) -> String {
    format!(
        r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

/// One watch event line.
pub fn event(kind: &str, object: &str) -> String {
    format!("{{\"type\":\"{kind}\",\"object\":{object}}}\n")
}

/// A BOOKMARK event line at `rv`.
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
