//! The smol backend: HTTP/1.1 ([`crate::h1`]) over `smol::net::TcpStream` and futures-rustls.
//! No tokio anywhere (hyper is not used because its client depends on `tokio::sync`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use informer_core::protocol::Failure;
use rustls_pki_types::ServerName;
use smol::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::config::Config;
use crate::h1::{BodyDecoder, H1Error, Head, encode_request, parse_head};
use crate::redirect::{self, MAX_REDIRECTS, Origin};
use crate::transport::{
    Backend, BoxFuture, Client, ClientError, HttpResponse, ServerAddr, transport_failure,
};

trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}
type Conn = Box<dyn Io>;

/// Idle connections kept for reuse.
const MAX_IDLE: usize = 4;
/// Read buffer size.
const READ_BUF: usize = 32 * 1024;

/// A [`Backend`] on smol: HTTP/1.1 over smol's TCP and futures-rustls (ring), honouring the
/// configured CA, client certificate, `insecure-skip-tls-verify` and `tls-server-name`.
///
/// Idle connections are kept for reuse (up to four); a watch holds its connection until its
/// stream is dropped. Redirects are followed as [`crate::redirect`] says: within the server's
/// origin only. Proxies (kubeconfig `proxy-url`, `HTTPS_PROXY`, `NO_PROXY`) as
/// [`crate::proxy`] says, through `CONNECT`.
pub struct SmolBackend {
    addr: ServerAddr,
    proxy: Option<(crate::proxy::Proxy, Option<futures_rustls::TlsConnector>)>,
    tls: Option<(futures_rustls::TlsConnector, ServerName<'static>)>,
    idle: Arc<Mutex<Vec<Conn>>>,
    connect_timeout: Duration,
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
        let tls = if addr.tls {
            let tls = crate::tls::client_config(config, &[b"http/1.1"])?;
            let name = crate::tls::server_name(config, &addr.host)?;
            Some((futures_rustls::TlsConnector::from(Arc::new(tls)), name))
        } else {
            None
        };
        let proxy = match crate::proxy::proxy_for(config)? {
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
                    let tls = match crate::tls::client_config(&pc, &[b"http/1.1"]) {
                        Ok(t) => t,
                        Err(_) if config.root_ca_pem.is_some() => {
                            pc.root_ca_pem = config.root_ca_pem.clone();
                            crate::tls::client_config(&pc, &[b"http/1.1"])?
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
            connect_timeout: Duration::from_secs(30),
        })
    }

    async fn connect(&self) -> Result<Conn, Failure> {
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
            let conn: Conn = match &self.tls {
                Some((connector, name)) => Box::new(
                    connector
                        .connect(name.clone(), stream)
                        .await
                        .map_err(|e| transport_failure("TLS handshake", &e))?,
                ),
                None => stream,
            };
            Ok(conn)
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
        proxy: &crate::proxy::Proxy,
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
            if head.len() > crate::h1::MAX_HEAD {
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

    fn checkout(&self) -> Option<Conn> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop()
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
    idle: Arc<Mutex<Vec<Conn>>>,
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
                    idle.push(io);
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

impl SmolBackend {
    /// Sends one request on a pooled or new connection (a pooled one that turns out closed is
    /// replaced once) and reads the answer's head.
    async fn round_trip(
        &self,
        method: &http::Method,
        path_and_query: &str,
        headers: &http::HeaderMap,
        body: &[u8],
    ) -> Result<(Head, BodyState), Failure> {
        let wire = encode_request(method, path_and_query, &self.addr.authority, headers, body);
        let (mut io, pooled) = match self.checkout() {
            Some(c) => (c, true),
            None => (self.connect().await?, false),
        };
        let (head, pending) = match exchange(&mut io, &wire, method).await {
            Ok(x) => x,
            Err(e) if pooled && e.nothing_received => {
                io = self.connect().await?;
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
            idle: self.idle.clone(),
        };
        if state.decoder.is_done() {
            state.keep_alive &= state.pending.is_empty();
            state.release();
        }
        Ok((head, state))
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
        head: &Head,
        path_and_query: &str,
    ) -> Result<Option<String>, Failure> {
        if !redirect::is_redirect(head.status) {
            return Ok(None);
        }
        let Some(location) = head
            .headers
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
            return Err(redirect::other_origin(head.status, &origin.to_string()));
        }
        Ok(Some(next))
    }
}

impl Backend for SmolBackend {
    fn send(&self, request: http::Request<Bytes>) -> BoxFuture<'_, Result<HttpResponse, Failure>> {
        Box::pin(async move {
            let (parts, mut body) = request.into_parts();
            let mut method = parts.method;
            let mut headers = parts.headers;
            let mut pq = format!("{}{}", self.addr.path_prefix, parts.uri);
            let mut redirects = 0;
            let (head, state) = loop {
                let (head, state) = self.round_trip(&method, &pq, &headers, &body).await?;
                let Some(next) = self.redirect_target(&head, &pq)? else {
                    break (head, state);
                };
                redirects += 1;
                if redirects > MAX_REDIRECTS {
                    return Err(redirect::too_many(head.status));
                }
                state.discard();
                let (next_method, keep_body) = redirect::method_after(head.status, &method);
                if !keep_body {
                    body = Bytes::new();
                    headers.remove(http::header::CONTENT_TYPE);
                }
                method = next_method;
                pq = next;
            };
            let body = stream::unfold(Some(state), |st| async move {
                let mut st = st?;
                match st.next_chunk().await? {
                    Ok(chunk) => Some((Ok(chunk), Some(st))),
                    Err(f) => Some((Err(f), None)),
                }
            });
            Ok(HttpResponse {
                status: head.status,
                headers: head.headers,
                body: Box::pin(body),
            })
        })
    }
}

impl Client<SmolBackend> {
    /// A client on the smol backend.
    pub fn smol(config: Config) -> Result<Client<SmolBackend>, ClientError> {
        Ok(Client::new(SmolBackend::new(&config)?, config))
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
}
