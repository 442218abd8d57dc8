//! HTTP/2 for the smol backend: the `h2` crate over a futures-rustls stream, its I/O traits
//! bridged with `tokio_util::compat` and its connection driven by `smol::spawn`.
//!
//! No tokio runtime is involved: `h2` uses tokio only for the `AsyncRead`/`AsyncWrite` traits
//! and `tokio_util`'s frame codec (tokio is built with its `io-util` and `sync` features only,
//! without `rt`, `net` or `time`); its timers are `std::time::Instant`s it polls itself. The
//! keep-alive ping here is timed by `smol::Timer`.
//!
//! One [`H2Conn`] carries many requests at once. It counts its open streams and is passed
//! over for a new request once they reach the server's `SETTINGS_MAX_CONCURRENT_STREAMS` (or
//! a stream was refused), so the backend opens another connection instead of queueing a
//! request behind watches that never end.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use informer_core::protocol::Failure;
use smol::io::{AsyncRead, AsyncWrite};
use tokio_util::compat::FuturesAsyncReadCompatExt as _;

use crate::backend::transport_failure;
use crate::transport::BoxStream;

/// Per-stream receive window: how much of one response may arrive before it is read (as
/// hyper's client default).
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
/// Connection receive window, shared by all streams.
const CONN_WINDOW: u32 = 5 * 1024 * 1024;
/// A ping after this long (as client-go and the reqwest backend) ...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// ... and the connection is dropped when the pong takes longer than this.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(15);

/// One HTTP/2 connection: the handle requests are sent through, its open stream count, and
/// whether its driver task has ended.
pub(crate) struct H2Conn {
    send: h2::client::SendRequest<Bytes>,
    in_flight: AtomicUsize,
    /// Lowered when the server refuses a stream (it has fewer than it announced, or its
    /// SETTINGS had not arrived yet).
    cap: AtomicUsize,
    closed: Arc<AtomicBool>,
    /// The exec plugin's certificate generation the connection was made with.
    pub(crate) cert_generation: u64,
}

/// Why a request over HTTP/2 failed.
pub(crate) enum H2SendError {
    /// The server did not process the request (the connection was gone, the stream was
    /// refused or above a GOAWAY's last stream): it may be sent again on another connection.
    Retry(Failure),
    /// Anything else.
    Fatal(Failure),
}

/// Decrements a connection's open stream count when the stream is done with.
struct InFlight(Arc<H2Conn>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl std::fmt::Debug for H2Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("H2Conn")
            .field("in_flight", &self.in_flight.load(Ordering::Relaxed))
            .field("closed", &self.closed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl H2Conn {
    /// The HTTP/2 handshake over `io` (a TLS stream whose ALPN said `h2`); spawns the task that
    /// drives the connection (and pings it) on smol's global executor.
    pub(crate) async fn handshake<T>(io: T, cert_generation: u64) -> Result<Arc<H2Conn>, Failure>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (send, mut conn) = h2::client::Builder::new()
            .initial_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONN_WINDOW)
            .max_frame_size(crate::backend::H2_MAX_FRAME_SIZE)
            .enable_push(false)
            .handshake::<_, Bytes>(io.compat())
            .await
            .map_err(|e| h2_failure("HTTP/2 handshake", &e))?;
        let closed = Arc::new(AtomicBool::new(false));
        let done = closed.clone();
        let ping = conn.ping_pong();
        smol::spawn(async move {
            // The connection ends (GOAWAY, an error, every handle dropped): its streams end
            // with it; nothing more to report here. Dropping it (here, or when the keep-alive
            // gives up) closes the socket and fails its remaining streams.
            let drive = async move {
                let _ = conn.await;
            };
            let keepalive = async {
                match ping {
                    Some(p) => keepalive(p).await,
                    None => std::future::pending().await,
                }
            };
            smol::future::or(drive, keepalive).await;
            done.store(true, Ordering::Release);
        })
        .detach();
        Ok(Arc::new(H2Conn {
            send,
            in_flight: AtomicUsize::new(0),
            cap: AtomicUsize::new(usize::MAX),
            closed,
            cert_generation,
        }))
    }

    /// The connection has ended (or is ending): no new request goes on it.
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Whether another stream fits: open streams below the server's limit.
    pub(crate) fn has_room(&self) -> bool {
        let max = self
            .send
            .current_max_send_streams()
            .min(self.cap.load(Ordering::Acquire));
        self.in_flight.load(Ordering::Acquire) < max
    }

    /// How many streams are open on it (tests, benches).
    pub(crate) fn open_streams(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Sends one request; answers its status, headers and body (a stream of data frames, each
    /// one's flow-control capacity released as it is handed on, so a long watch never stalls).
    pub(crate) async fn send(
        self: &Arc<Self>,
        method: &http::Method,
        uri: &str,
        headers: &http::HeaderMap,
        body: &Bytes,
    ) -> Result<
        (
            http::StatusCode,
            http::HeaderMap,
            BoxStream<'static, Result<Bytes, Failure>>,
        ),
        H2SendError,
    > {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        let guard = InFlight(self.clone());
        let ready = self.send.clone().ready().await.map_err(|e| {
            self.closed.store(true, Ordering::Release);
            H2SendError::Retry(h2_failure("sending the request", &e))
        })?;
        let mut send = ready;
        let mut req = http::Request::new(());
        *req.method_mut() = method.clone();
        *req.uri_mut() = uri
            .parse()
            .map_err(|e| H2SendError::Fatal(Failure::other(format!("bad request URI: {e}"))))?;
        *req.version_mut() = http::Version::HTTP_2;
        let h = req.headers_mut();
        for (k, v) in headers {
            // Connection-specific headers have no place in HTTP/2 (RFC 9113 8.2.2).
            if !matches!(
                k.as_str(),
                "host" | "connection" | "keep-alive" | "transfer-encoding" | "upgrade"
            ) {
                h.append(k.clone(), v.clone());
            }
        }
        if !body.is_empty() {
            h.insert(http::header::CONTENT_LENGTH, body.len().into());
        }
        let (answer, mut stream) = send
            .send_request(req, body.is_empty())
            .map_err(|e| self.classify("sending the request", &e))?;
        if !body.is_empty() {
            // Queued by h2 and sent as the stream's send window allows.
            stream
                .send_data(body.clone(), true)
                .map_err(|e| self.classify("sending the request body", &e))?;
        }
        let resp = answer
            .await
            .map_err(|e| self.classify("reading the response", &e))?;
        let (parts, recv) = resp.into_parts();
        // Keep the send half: dropping it before the response ends is fine for h2, but the
        // stream counts as open until both halves are done, as does `guard`.
        let state = Body {
            recv,
            _send: stream,
            _guard: guard,
        };
        let body = stream::unfold(Some(state), |st| async move {
            let mut st = st?;
            match st.recv.data().await {
                None => None,
                Some(Ok(chunk)) => {
                    let _ = st.recv.flow_control().release_capacity(chunk.len());
                    Some((Ok(chunk), Some(st)))
                }
                Some(Err(e)) => Some((Err(body_failure(&e)), None)),
            }
        });
        Ok((parts.status, parts.headers, Box::pin(body)))
    }

    /// A failure before the response head: retried elsewhere when the server cannot have
    /// processed the request.
    fn classify(&self, what: &str, e: &h2::Error) -> H2SendError {
        let f = h2_failure(what, e);
        if e.is_io() || e.is_go_away() && e.is_remote() {
            self.closed.store(true, Ordering::Release);
        }
        if e.reason() == Some(h2::Reason::REFUSED_STREAM) {
            let open = self.in_flight.load(Ordering::Acquire);
            self.cap
                .fetch_min(open.saturating_sub(1).max(1), Ordering::AcqRel);
            return H2SendError::Retry(f);
        }
        if e.is_go_away() && e.is_remote() {
            // A stream above the GOAWAY's last stream id: never processed.
            return H2SendError::Retry(f);
        }
        H2SendError::Fatal(f)
    }
}

struct Body {
    recv: h2::RecvStream,
    _send: h2::SendStream<Bytes>,
    _guard: InFlight,
}

/// Pings the connection every [`KEEPALIVE_INTERVAL`]; returns when a pong does not come back
/// within [`KEEPALIVE_TIMEOUT`] (or pinging fails: the connection is gone).
async fn keepalive(mut ping: h2::PingPong) {
    loop {
        smol::Timer::after(KEEPALIVE_INTERVAL).await;
        let pong = async { ping.ping(h2::Ping::opaque()).await.is_ok() };
        let timeout = async {
            smol::Timer::after(KEEPALIVE_TIMEOUT).await;
            false
        };
        if !smol::future::or(pong, timeout).await {
            return;
        }
    }
}

/// An `h2` error as a failure (the I/O error underneath, when there is one, decides the kind).
fn h2_failure(what: &str, e: &h2::Error) -> Failure {
    if e.is_io() {
        if let Some(io) = e.get_io() {
            return transport_failure(what, io);
        }
    }
    if e.is_go_away() || e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR) {
        return Failure::ConnectionClosed(format!("{what}: {e}"));
    }
    transport_failure(what, e)
}

/// A failure while a body arrives: the connection or the stream ending early is a closed
/// connection, as a truncated HTTP/1.1 body is (a watch then ends normally and is re-opened).
fn body_failure(e: &h2::Error) -> Failure {
    let f = h2_failure("reading the body", e);
    let ended = e.is_io()
        || e.is_go_away()
        || matches!(
            e.reason(),
            Some(
                h2::Reason::NO_ERROR
                    | h2::Reason::CANCEL
                    | h2::Reason::REFUSED_STREAM
                    | h2::Reason::INTERNAL_ERROR
            )
        );
    match f {
        Failure::Other(s) if ended => Failure::ConnectionClosed(s.message),
        f => f,
    }
}
