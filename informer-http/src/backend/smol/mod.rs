//! The smol backend over `smol::net::TcpStream` and futures-rustls: HTTP/2
//! (`h2conn`, the `h2` crate) when the server picks it by ALPN, else HTTP/1.1 ([`h1`]). No
//! tokio runtime: see `h2conn` for what of tokio `h2` uses.

pub mod h1;
mod h2conn;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use informer_core::protocol::Failure;
use rustls_pki_types::ServerName;
use smol::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{Backend, HttpResponse, transport_failure};
use crate::addr::ServerAddr;
use crate::auth::ExecCert;
use crate::config::Config;
use crate::error::ClientError;
use crate::net::redirect::{self, MAX_REDIRECTS, Origin};
use crate::transport::{BoxFuture, BoxStream};
use h1::{BodyDecoder, H1Error, Head, encode_request, parse_head};
use h2conn::{H2Conn, H2SendError};

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
type Conn = Box<dyn Io>;

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 4;
/// Read buffer size.
const READ_BUF: usize = 32 * 1024;

/// A [`Backend`] on smol: smol's TCP and futures-rustls (ring), honouring the configured CA,
/// client certificate, `insecure-skip-tls-verify` and `tls-server-name`.
///
/// Over TLS it offers HTTP/2 and HTTP/1.1 by ALPN ([`Config::http2`] off: HTTP/1.1 only).
/// When the server picks HTTP/2, every request of the client shares one connection (another
/// is opened only when the server's limit on concurrent streams is reached); a connection that
/// ends (GOAWAY, an error, a keep-alive ping unanswered for 15 s) ends the watches on it as a
/// normal close, and the next request opens a new one. Otherwise (and for plain `http://`)
/// HTTP/1.1: idle connections are kept for reuse (up to four) and a watch holds its
/// connection until its stream is dropped. Connections made with an exec plugin's client
/// certificate are not reused once the plugin hands out a different one.
///
/// Redirects are followed as [`crate::net::redirect`] says: within the server's origin only.
/// Proxies (kubeconfig `proxy-url`, `HTTPS_PROXY`, `NO_PROXY`) as [`crate::net::proxy`] says,
/// through `CONNECT` (then TLS, with ALPN, through the tunnel).
pub struct SmolBackend {
    addr: ServerAddr,
    proxy: Option<(
        crate::net::proxy::Proxy,
        Option<futures_rustls::TlsConnector>,
    )>,
    tls: Option<Tls>,
    /// Idle HTTP/1.1 connections, with the certificate generation they were made with.
    idle: Arc<Mutex<Vec<(u64, Conn)>>>,
    /// HTTP/2 connections in use.
    h2: Mutex<Vec<Arc<H2Conn>>>,
    /// Held while an HTTP/2 connection is being made, so that requests arriving meanwhile
    /// wait for it rather than each opening their own.
    connecting: smol::lock::Mutex<()>,
    /// The server answered ALPN with HTTP/1.1: offer only that from now on.
    server_h1_only: AtomicBool,
    exec: Option<ExecCert>,
    connect_timeout: Duration,
    /// Set by [`InProcess::in_process`](super::InProcess::in_process): every request goes to
    /// this server instead.
    in_process: Option<Arc<dyn Backend>>,
}

/// The TLS connectors for the server: one offering `h2` and `http/1.1` (when HTTP/2 is on),
/// one offering `http/1.1` only.
struct Tls {
    h2: Option<futures_rustls::TlsConnector>,
    h1: futures_rustls::TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for SmolBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmolBackend")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Why one exchange failed, and whether the server answered anything at all (a pooled
/// connection that the server had closed is retried once on a fresh one).
struct ExchangeError {
    failure: Failure,
    nothing_received: bool,
}

impl SmolBackend {
    /// A backend for `config`'s server.
    pub fn new(config: &Config) -> Result<SmolBackend, ClientError> {
        let addr = ServerAddr::parse(&config.server)?;
        let exec = ExecCert::of(config);
        let tls = if addr.tls {
            let connector = |alpn: &[&[u8]]| -> Result<futures_rustls::TlsConnector, ClientError> {
                let tls = crate::net::tls::client_config(
                    config,
                    alpn,
                    exec.as_ref().map(ExecCert::resolver),
                )?;
                Ok(futures_rustls::TlsConnector::from(Arc::new(tls)))
            };
            Some(Tls {
                h2: if config.http2 {
                    Some(connector(&[b"h2", b"http/1.1"])?)
                } else {
                    None
                },
                h1: connector(&[b"http/1.1"])?,
                name: crate::net::tls::server_name(config, &addr.host)?,
            })
        } else {
            None
        };
        let proxy = match crate::net::proxy::proxy_for(config)? {
            None => None,
            Some(p) => {
                let tls = if p.tls {
                    // The proxy's certificate: the system's roots (the cluster's CA when the
                    // system has none).
                    let mut pc = config.clone();
                    pc.root_ca_pem = None;
                    pc.insecure_skip_tls_verify = false;
                    pc.client_identity = None;
                    pc.auth = crate::config::Auth::None;
                    let tls = match crate::net::tls::client_config(&pc, &[b"http/1.1"], None) {
                        Ok(t) => t,
                        Err(_) if config.root_ca_pem.is_some() => {
                            pc.root_ca_pem = config.root_ca_pem.clone();
                            crate::net::tls::client_config(&pc, &[b"http/1.1"], None)?
                        }
                        Err(e) => return Err(e),
                    };
                    Some(futures_rustls::TlsConnector::from(Arc::new(tls)))
                } else {
                    None
                };
                Some((p, tls))
            }
        };
        Ok(SmolBackend {
            addr,
            proxy,
            tls,
            idle: Arc::new(Mutex::new(Vec::new())),
            h2: Mutex::new(Vec::new()),
            connecting: smol::lock::Mutex::new(()),
            server_h1_only: AtomicBool::new(false),
            exec,
            connect_timeout: Duration::from_secs(30),
            in_process: None,
        })
    }

    /// The exec plugin's current certificate generation (0 without a plugin).
    fn cert_generation(&self) -> u64 {
        self.exec.as_ref().map_or(0, ExecCert::generation)
    }

    /// How many HTTP/2 connections are open and how many streams they carry (for tests and
    /// benches).
    pub fn http2_connections(&self) -> Vec<usize> {
        let h2 = self.h2.lock().unwrap_or_else(|e| e.into_inner());
        h2.iter()
            .filter(|c| !c.is_closed())
            .map(|c| c.open_streams())
            .collect()
    }

    /// A new connection (through the proxy, if any; TLS offering `h2` when `offer_h2`), and
    /// whether the server picked HTTP/2.
    async fn connect(&self, offer_h2: bool) -> Result<(Conn, bool), Failure> {
        let connect = async {
            let stream: Conn = match &self.proxy {
                None => {
                    let tcp =
                        smol::net::TcpStream::connect((self.addr.host.as_str(), self.addr.port))
                            .await
                            .map_err(|e| {
                                transport_failure(
                                    &format!("connect to {}", self.addr.authority),
                                    &e,
                                )
                            })?;
                    let _ = tcp.set_nodelay(true);
                    Box::new(tcp)
                }
                Some((proxy, proxy_tls)) => self.tunnel(proxy, proxy_tls.as_ref()).await?,
            };
            match &self.tls {
                Some(tls) => {
                    let connector = match (&tls.h2, offer_h2) {
                        (Some(h2), true) => h2,
                        _ => &tls.h1,
                    };
                    let io = connector
                        .connect(tls.name.clone(), stream)
                        .await
                        .map_err(|e| transport_failure("TLS handshake", &e))?;
                    let h2 = io.get_ref().1.alpn_protocol() == Some(b"h2");
                    Ok((Box::new(io) as Conn, h2))
                }
                None => Ok((stream, false)),
            }
        };
        let timeout = async {
            smol::Timer::after(self.connect_timeout).await;
            Err(Failure::other(format!(
                "connect to {}: timed out after {:?}",
                self.addr.authority, self.connect_timeout
            )))
        };
        smol::future::or(connect, timeout).await
    }

    /// A connection to the server through `proxy`: `CONNECT host:port`, answered 2xx.
    async fn tunnel(
        &self,
        proxy: &crate::net::proxy::Proxy,
        proxy_tls: Option<&futures_rustls::TlsConnector>,
    ) -> Result<Conn, Failure> {
        let tcp = smol::net::TcpStream::connect((proxy.host.as_str(), proxy.port))
            .await
            .map_err(|e| transport_failure(&format!("connect to proxy {}", proxy.shown), &e))?;
        let _ = tcp.set_nodelay(true);
        let mut io: Conn = match proxy_tls {
            Some(connector) => {
                let name = ServerName::try_from(proxy.host.clone()).map_err(|e| {
                    Failure::other(format!("proxy {}: server name: {e}", proxy.shown))
                })?;
                Box::new(connector.connect(name, tcp).await.map_err(|e| {
                    transport_failure(&format!("TLS handshake with proxy {}", proxy.shown), &e)
                })?)
            }
            None => Box::new(tcp),
        };
        let target = &self.addr.authority;
        let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
        if let Some(auth) = &proxy.authorization {
            req.push_str("Proxy-Authorization: ");
            req.push_str(auth.expose());
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        let fail = |e: std::io::Error| {
            transport_failure(&format!("CONNECT through proxy {}", proxy.shown), &e)
        };
        io.write_all(req.as_bytes()).await.map_err(fail)?;
        io.flush().await.map_err(fail)?;
        // Read the answer's head byte by byte: nothing past it may be consumed (it belongs to
        // the TLS handshake).
        let mut head = Vec::with_capacity(256);
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            if head.len() > h1::MAX_HEAD {
                return Err(Failure::other(format!(
                    "proxy {}: CONNECT answer head too large",
                    proxy.shown
                )));
            }
            if io.read(&mut b).await.map_err(fail)? == 0 {
                return Err(Failure::ConnectionClosed(format!(
                    "proxy {} closed the connection during CONNECT",
                    proxy.shown
                )));
            }
            head.push(b[0]);
        }
        let status = parse_head(&head, &http::Method::CONNECT)
            .ok()
            .flatten()
            .map(|(_, h)| h.status);
        match status {
            Some(s) if s.is_success() => Ok(io),
            Some(s) => Err(Failure::other(format!(
                "proxy {} refused CONNECT {target}: {s}",
                proxy.shown
            ))),
            None => Err(Failure::other(format!(
                "proxy {}: not an HTTP answer to CONNECT",
                proxy.shown
            ))),
        }
    }

    /// An idle HTTP/1.1 connection made with the current certificate generation (older ones
    /// are closed).
    fn checkout(&self, generation: u64) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        idle.retain(|(g, _)| *g == generation);
        idle.pop().map(|(_, c)| c)
    }

    /// An open HTTP/2 connection with room for another stream, made with the current
    /// certificate generation (closed ones and older ones leave the pool: an older one closes
    /// once its streams end).
    fn pick_h2(&self, generation: u64) -> Option<Arc<H2Conn>> {
        let mut h2 = self.h2.lock().unwrap_or_else(|e| e.into_inner());
        h2.retain(|c| !c.is_closed() && c.cert_generation == generation);
        h2.iter().find(|c| c.has_room()).cloned()
    }

    /// Whether to offer HTTP/2.
    fn http2(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.h2.is_some())
            && !self.server_h1_only.load(Ordering::Acquire)
    }
}

/// Writes the request and reads the response head; returns it with the bytes read past it.
async fn exchange(
    io: &mut Conn,
    wire: &[u8],
    method: &http::Method,
) -> Result<(Head, Vec<u8>), ExchangeError> {
    let fail = |failure: Failure, nothing_received: bool| ExchangeError {
        failure,
        nothing_received,
    };
    if let Err(e) = io.write_all(wire).await {
        return Err(fail(transport_failure("sending the request", &e), true));
    }
    if let Err(e) = io.flush().await {
        return Err(fail(transport_failure("sending the request", &e), true));
    }
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = vec![0u8; 8192];
    loop {
        let n = match io.read(&mut chunk).await {
            Ok(n) => n,
            Err(e) => {
                let empty = buf.is_empty();
                return Err(fail(transport_failure("reading the response", &e), empty));
            }
        };
        if n == 0 {
            let empty = buf.is_empty();
            return Err(fail(
                Failure::other("connection closed before the response head"),
                empty,
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        match parse_head(&buf, method) {
            Ok(Some((len, head))) => {
                if head.status.is_informational() {
                    // No request of ours asks for 1xx; skip it and read on.
                    buf.drain(..len);
                    continue;
                }
                buf.drain(..len);
                return Ok((head, buf));
            }
            Ok(None) => {}
            Err(e) => return Err(fail(transport_failure("reading the response", &e), false)),
        }
    }
}

struct BodyState {
    io: Option<Conn>,
    decoder: BodyDecoder,
    pending: Vec<u8>,
    read_buf: Vec<u8>,
    keep_alive: bool,
    generation: u64,
    idle: Arc<Mutex<Vec<(u64, Conn)>>>,
}

impl BodyState {
    /// Decodes `data` (left over from the head, or just read), returning the body bytes.
    fn decode(&mut self, data: &[u8]) -> Result<Vec<u8>, H1Error> {
        let mut out = Vec::new();
        let n = self.decoder.decode(data, &mut out)?;
        if n < data.len() {
            // Bytes after the end of the body: the connection is not reusable.
            self.keep_alive = false;
        }
        if self.decoder.is_done() {
            self.release();
        }
        Ok(out)
    }

    fn release(&mut self) {
        if let Some(io) = self.io.take() {
            if self.keep_alive {
                let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
                if idle.len() < MAX_IDLE {
                    idle.push((self.generation, io));
                }
            }
        }
    }

    /// The next piece of the body: `None` once it is complete, an `Err` (after which the
    /// state is spent) when it cannot be read.
    async fn next_chunk(&mut self) -> Option<Result<Bytes, Failure>> {
        loop {
            if self.decoder.is_done() {
                return None;
            }
            let from_pending = !self.pending.is_empty();
            if !from_pending {
                let io = self.io.as_mut()?;
                self.read_buf.resize(READ_BUF, 0);
                match io.read(&mut self.read_buf).await {
                    Ok(0) => {
                        self.io = None;
                        return match self.decoder.eof() {
                            Ok(()) => None,
                            Err(e) => Some(Err(transport_failure("reading the body", &e))),
                        };
                    }
                    Ok(n) => self.read_buf.truncate(n),
                    Err(e) => return Some(Err(transport_failure("reading the body", &e))),
                }
            }
            let data = if from_pending {
                std::mem::take(&mut self.pending)
            } else {
                std::mem::take(&mut self.read_buf)
            };
            let decoded = self.decode(&data);
            if !from_pending {
                self.read_buf = data;
            }
            match decoded {
                Ok(out) if out.is_empty() => continue,
                Ok(out) => return Some(Ok(Bytes::from(out))),
                Err(e) => return Some(Err(transport_failure("reading the body", &e))),
            }
        }
    }

    /// Done with a redirect answer: its body is discarded. The connection goes back to the
    /// pool when the whole body has already arrived; otherwise it is closed rather than waited
    /// on.
    fn discard(mut self) {
        if !self.decoder.is_done() && !self.pending.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            let _ = self.decode(&pending);
        }
    }
}

/// A response's body still to be read, over either protocol.
enum Body {
    H1(BodyState),
    H2(BoxStream<'static, Result<Bytes, Failure>>),
}

impl Body {
    /// Done with a redirect answer (an HTTP/2 stream is reset by dropping it).
    fn discard(self) {
        if let Body::H1(state) = self {
            state.discard();
        }
    }

    fn into_stream(self) -> BoxStream<'static, Result<Bytes, Failure>> {
        match self {
            Body::H2(s) => s,
            Body::H1(state) => Box::pin(stream::unfold(Some(state), |st| async move {
                let mut st = st?;
                match st.next_chunk().await? {
                    Ok(chunk) => Some((Ok(chunk), Some(st))),
                    Err(f) => Some((Err(f), None)),
                }
            })),
        }
    }
}

impl SmolBackend {
    /// Sends one request and reads the answer's head: over HTTP/2 when the server speaks it
    /// (a request the server refused or never processed is sent again on another connection,
    /// at most three times in all), else over HTTP/1.1.
    async fn round_trip(
        &self,
        method: &http::Method,
        path_and_query: &str,
        headers: &http::HeaderMap,
        body: &Bytes,
    ) -> Result<(http::StatusCode, http::HeaderMap, Body), Failure> {
        let generation = self.cert_generation();
        if !self.http2() {
            return self
                .h1_round_trip(None, generation, method, path_and_query, headers, body)
                .await;
        }
        let uri = format!("https://{}{path_and_query}", self.addr.authority);
        let mut last = None;
        for _ in 0..3 {
            let conn = match self.pick_h2(generation) {
                Some(c) => c,
                None => {
                    let making = self.connecting.lock().await;
                    match self.pick_h2(generation) {
                        Some(c) => c,
                        None => {
                            let (io, h2) = self.connect(true).await?;
                            if !h2 {
                                // The server picked HTTP/1.1: so be it, from now on.
                                self.server_h1_only.store(true, Ordering::Release);
                                drop(making);
                                return self
                                    .h1_round_trip(
                                        Some(io),
                                        generation,
                                        method,
                                        path_and_query,
                                        headers,
                                        body,
                                    )
                                    .await;
                            }
                            let c = H2Conn::handshake(io, generation).await?;
                            self.h2
                                .lock()
                                .unwrap_or_else(|e| e.into_inner())
                                .push(c.clone());
                            c
                        }
                    }
                }
            };
            match conn.send(method, &uri, headers, body).await {
                Ok((status, headers, body)) => return Ok((status, headers, Body::H2(body))),
                Err(H2SendError::Retry(f)) => last = Some(f),
                Err(H2SendError::Fatal(f)) => return Err(f),
            }
        }
        Err(last.unwrap_or_else(|| Failure::other("HTTP/2: request refused")))
    }

    /// Sends one request over HTTP/1.1 on `fresh`, or a pooled or new connection (a pooled
    /// one that turns out closed is replaced once), and reads the answer's head.
    async fn h1_round_trip(
        &self,
        fresh: Option<Conn>,
        generation: u64,
        method: &http::Method,
        path_and_query: &str,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Result<(http::StatusCode, http::HeaderMap, Body), Failure> {
        let wire = encode_request(method, path_and_query, &self.addr.authority, headers, body);
        let (mut io, pooled) = match fresh {
            Some(c) => (c, false),
            None => match self.checkout(generation) {
                Some(c) => (c, true),
                None => (self.connect(false).await?.0, false),
            },
        };
        let (head, pending) = match exchange(&mut io, &wire, method).await {
            Ok(x) => x,
            Err(e) if pooled && e.nothing_received => {
                io = self.connect(false).await?.0;
                exchange(&mut io, &wire, method)
                    .await
                    .map_err(|e| e.failure)?
            }
            Err(e) => return Err(e.failure),
        };
        let mut state = BodyState {
            io: Some(io),
            decoder: BodyDecoder::new(head.framing),
            pending,
            read_buf: Vec::new(),
            keep_alive: head.keep_alive,
            generation,
            idle: self.idle.clone(),
        };
        if state.decoder.is_done() {
            state.keep_alive &= state.pending.is_empty();
            state.release();
        }
        Ok((head.status, head.headers, Body::H1(state)))
    }

    /// The server's origin.
    fn origin(&self) -> Origin {
        Origin {
            tls: self.addr.tls,
            host: self.addr.host.clone(),
            port: self.addr.port,
        }
    }

    /// Where a redirect answer leads, when it is one to follow: the path and query to ask
    /// next. A `Location` elsewhere than the server's origin is a failure.
    fn redirect_target(
        &self,
        status: http::StatusCode,
        headers: &http::HeaderMap,
        path_and_query: &str,
    ) -> Result<Option<String>, Failure> {
        if !redirect::is_redirect(status) {
            return Ok(None);
        }
        let Some(location) = headers
            .get(http::header::LOCATION)
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(None);
        };
        let scheme = if self.addr.tls { "https" } else { "http" };
        let Ok(current) =
            format!("{scheme}://{}{path_and_query}", self.addr.authority).parse::<http::Uri>()
        else {
            return Ok(None);
        };
        let Some((origin, next)) = redirect::resolve(&current, location) else {
            return Ok(None);
        };
        if origin != self.origin() {
            return Err(redirect::other_origin(status, &origin.to_string()));
        }
        Ok(Some(next))
    }
}

impl super::InProcess for SmolBackend {
    fn in_process(server: Arc<dyn Backend>) -> Result<Self, ClientError> {
        // A plain-http backend for an address never dialled: building it opens nothing.
        let mut backend = SmolBackend::new(&Config::new("http://in-process.invalid"))?;
        backend.in_process = Some(server);
        Ok(backend)
    }
}

impl Backend for SmolBackend {
    fn send(&self, request: http::Request<Bytes>) -> BoxFuture<'_, Result<HttpResponse, Failure>> {
        if let Some(server) = &self.in_process {
            return server.send(request);
        }
        Box::pin(async move {
            let (parts, mut body) = request.into_parts();
            let mut method = parts.method;
            let mut headers = parts.headers;
            let mut pq = format!("{}{}", self.addr.path_prefix, parts.uri);
            let mut redirects = 0;
            let (status, headers, body) = loop {
                let (status, answer_headers, answer) =
                    self.round_trip(&method, &pq, &headers, &body).await?;
                let Some(next) = self.redirect_target(status, &answer_headers, &pq)? else {
                    break (status, answer_headers, answer);
                };
                redirects += 1;
                if redirects > MAX_REDIRECTS {
                    return Err(redirect::too_many(status));
                }
                answer.discard();
                let (next_method, keep_body) = redirect::method_after(status, &method);
                if !keep_body {
                    body = Bytes::new();
                    headers.remove(http::header::CONTENT_TYPE);
                }
                method = next_method;
                pq = next;
            };
            Ok(HttpResponse {
                status,
                headers,
                body: body.into_stream(),
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// Reads one request head from `s` (the requests here have no body).
    fn read_head(s: &mut std::net::TcpStream) -> String {
        let mut buf = Vec::new();
        let mut b = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            if s.read(&mut b).unwrap() == 0 {
                break;
            }
            buf.push(b[0]);
        }
        String::from_utf8(buf).unwrap()
    }

    async fn get(b: &SmolBackend, path: &str) -> (u16, Vec<u8>) {
        let req = http::Request::get(path).body(Bytes::new()).unwrap();
        let resp = b.send(req).await.unwrap();
        let status = resp.status.as_u16();
        let mut body = resp.body;
        let mut out = Vec::new();
        while let Some(c) = body.next().await {
            out.extend_from_slice(&c.unwrap());
        }
        (status, out)
    }

    #[test]
    fn reuses_connections_retries_a_closed_one_and_decodes_chunked_bodies() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let mut heads = Vec::new();
            // Connection 1: two requests with Content-Length, then the server closes it.
            let (mut s, _) = listener.accept().unwrap();
            heads.push(read_head(&mut s));
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst")
                .unwrap();
            heads.push(read_head(&mut s));
            s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnope")
                .unwrap();
            drop(s);
            // Connection 2: the retried request, answered chunked in awkward pieces.
            let (mut s, _) = listener.accept().unwrap();
            heads.push(read_head(&mut s));
            for piece in [
                &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"[..],
                b"\r\n6\r\nline-1",
                b"\r\n7\r",
                b"\n\nline-2\r\n0\r\n",
                b"\r\n",
            ] {
                s.write_all(piece).unwrap();
                s.flush().unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
            heads
        });
        let backend = SmolBackend::new(&Config::new(format!("http://127.0.0.1:{port}"))).unwrap();
        smol::block_on(async {
            assert_eq!(get(&backend, "/a").await, (200, b"first".to_vec()));
            assert_eq!(get(&backend, "/b?x=1").await, (404, b"nope".to_vec()));
            // Give the server time to close connection 1, which sits in the pool.
            smol::Timer::after(Duration::from_millis(100)).await;
            assert_eq!(get(&backend, "/c").await, (200, b"line-1\nline-2".to_vec()));
        });
        let heads = server.join().unwrap();
        assert!(
            heads[0].starts_with("GET /a HTTP/1.1\r\nHost: 127.0.0.1:"),
            "{heads:?}"
        );
        assert!(heads[1].starts_with("GET /b?x=1 HTTP/1.1\r\n"));
        assert!(heads[2].starts_with("GET /c HTTP/1.1\r\n"));
    }

    #[test]
    fn refused_connection_is_reported_as_such() {
        let port = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let backend = SmolBackend::new(&Config::new(format!("http://127.0.0.1:{port}"))).unwrap();
        let req = http::Request::get("/").body(Bytes::new()).unwrap();
        let r = smol::block_on(backend.send(req));
        assert!(matches!(r, Err(Failure::ConnectionRefused(_))), "{r:?}");
    }

    #[test]
    fn broken_responses_fail_cleanly() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            read_head(&mut s);
            s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab")
                .unwrap();
            drop(s);
            let (mut s, _) = listener.accept().unwrap();
            read_head(&mut s);
            s.write_all(b"SSH-2.0-OpenSSH\r\n\r\n").unwrap();
        });
        let backend = SmolBackend::new(&Config::new(format!("http://127.0.0.1:{port}"))).unwrap();
        smol::block_on(async {
            let req = http::Request::get("/").body(Bytes::new()).unwrap();
            let resp = backend.send(req).await.unwrap();
            let chunks: Vec<_> = resp.body.collect().await;
            assert!(
                matches!(chunks.last(), Some(Err(Failure::ConnectionClosed(m))) if m.contains("closed before the body ended")),
                "{chunks:?}"
            );
            let req = http::Request::get("/").body(Bytes::new()).unwrap();
            let r = backend.send(req).await;
            assert!(
                matches!(&r, Err(Failure::Other(s)) if s.message.contains("invalid HTTP response head")),
                "{r:?}"
            );
        });
        server.join().unwrap();
    }

    /// An HTTP/2 server over TLS (ALPN `h2` only) allowing two concurrent streams per
    /// connection: `/hold` answers and never ends, `/redirect` sends to `/target`, `/goaway`
    /// answers `ok` and shuts the connection down (GOAWAY), anything else answers `ok`. Returns its port, its accepted connection count and what it saw
    /// (path, `Authorization`).
    #[allow(clippy::type_complexity)]
    fn h2_server() -> (
        u16,
        Arc<std::sync::atomic::AtomicUsize>,
        Arc<Mutex<Vec<(String, Option<String>)>>>,
    ) {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, PrivateKeyDer};
        use tokio_util::compat::FuturesAsyncReadCompatExt as _;
        let certs =
            CertificateDer::pem_slice_iter(include_bytes!("../../../tests/data/server.crt"))
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
        let key = PrivateKeyDer::from_pem_slice(include_bytes!("../../../tests/data/server.key"))
            .unwrap();
        let mut server = rustls::ServerConfig::builder_with_provider(crate::net::tls::provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        server.alpn_protocols = vec![b"h2".to_vec()];
        let acceptor = futures_rustls::TlsAcceptor::from(Arc::new(server));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (acc, saw) = (accepted.clone(), seen.clone());
        std::thread::spawn(move || {
            smol::block_on(async move {
                let listener = smol::net::TcpListener::try_from(listener).unwrap();
                while let Ok((tcp, _)) = listener.accept().await {
                    acc.fetch_add(1, Ordering::SeqCst);
                    let (acceptor, saw) = (acceptor.clone(), saw.clone());
                    smol::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let Ok(mut conn) = h2::server::Builder::new()
                            .max_concurrent_streams(2)
                            .handshake::<_, Bytes>(tls.compat())
                            .await
                        else {
                            return;
                        };
                        let mut held = Vec::new();
                        while let Some(Ok((req, mut respond))) = conn.accept().await {
                            let path = req.uri().path().to_string();
                            let auth = req
                                .headers()
                                .get(http::header::AUTHORIZATION)
                                .map(|v| v.to_str().unwrap().to_string());
                            saw.lock().unwrap().push((path.clone(), auth));
                            match path.as_str() {
                                "/hold" => {
                                    held.push(
                                        respond
                                            .send_response(http::Response::new(()), false)
                                            .unwrap(),
                                    );
                                }
                                "/goaway" => {
                                    let mut s = respond
                                        .send_response(http::Response::new(()), false)
                                        .unwrap();
                                    s.send_data(Bytes::from_static(b"ok"), true).unwrap();
                                    conn.graceful_shutdown();
                                }
                                "/redirect" => {
                                    let r = http::Response::builder()
                                        .status(302)
                                        .header(http::header::LOCATION, "/target")
                                        .body(())
                                        .unwrap();
                                    respond.send_response(r, true).unwrap();
                                }
                                _ => {
                                    let mut s = respond
                                        .send_response(http::Response::new(()), false)
                                        .unwrap();
                                    s.send_data(Bytes::from_static(b"ok"), true).unwrap();
                                }
                            }
                        }
                    })
                    .detach();
                }
            })
        });
        (port, accepted, seen)
    }

    #[test]
    fn http2_shares_a_connection_up_to_the_servers_stream_limit_and_follows_redirects() {
        let (port, accepted, seen) = h2_server();
        let mut cfg = Config::new(format!("https://127.0.0.1:{port}"));
        cfg.root_ca_pem = Some(include_bytes!("../../../tests/data/ca.crt").to_vec());
        let backend = SmolBackend::new(&cfg).unwrap();
        smol::block_on(async {
            let mut held = Vec::new();
            for _ in 0..3 {
                let req = http::Request::get("/hold").body(Bytes::new()).unwrap();
                let resp = backend.send(req).await.unwrap();
                assert_eq!(resp.status, 200);
                held.push(resp);
            }
            // Two streams on the first connection (the server's limit), the third on another.
            let mut conns = backend.http2_connections();
            conns.sort_unstable();
            assert_eq!(conns, vec![1, 2]);
            let req = http::Request::get("/redirect")
                .header(http::header::AUTHORIZATION, "Bearer t0ken")
                .body(Bytes::new())
                .unwrap();
            let resp = backend.send(req).await.unwrap();
            assert_eq!(resp.status, 200);
            assert_eq!(resp.collect(1024).await.unwrap(), b"ok");
            // Streams that end make room again: no third connection.
            drop(held);
            for _ in 0..4 {
                let (status, body) = get(&backend, "/plain").await;
                assert_eq!((status, body), (200, b"ok".to_vec()));
            }
        });
        assert_eq!(accepted.load(Ordering::SeqCst), 2);
        let seen = seen.lock().unwrap().clone();
        assert!(
            seen.contains(&("/target".to_string(), Some("Bearer t0ken".to_string()))),
            "the redirect within the origin keeps the credentials: {seen:?}"
        );
    }

    #[test]
    fn after_a_goaway_the_next_request_opens_a_new_http2_connection() {
        let (port, accepted, seen) = h2_server();
        let mut cfg = Config::new(format!("https://127.0.0.1:{port}"));
        cfg.root_ca_pem = Some(include_bytes!("../../../tests/data/ca.crt").to_vec());
        let backend = SmolBackend::new(&cfg).unwrap();
        smol::block_on(async {
            assert_eq!(get(&backend, "/goaway").await, (200, b"ok".to_vec()));
            for _ in 0..3 {
                assert_eq!(get(&backend, "/plain").await, (200, b"ok".to_vec()));
            }
        });
        assert_eq!(
            accepted.load(Ordering::SeqCst),
            2,
            "{:?}",
            seen.lock().unwrap()
        );
        assert_eq!(backend.http2_connections().len(), 1);
    }
}
