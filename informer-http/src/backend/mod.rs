//! The byte-moving layer: [`Backend`] sends one HTTP request and hands back the response as it
//! arrives; [`transport_failure`] maps a backend's errors to [`Failure`]s.

use std::fmt;

use bytes::Bytes;
use futures_util::stream::StreamExt;
use informer_core::protocol::Failure;

use crate::transport::{BoxFuture, BoxStream};

#[cfg(feature = "tokio")]
mod reqwest;
#[cfg(feature = "smol")]
mod smol;

#[cfg(feature = "tokio")]
pub use self::reqwest::ReqwestBackend;
#[cfg(feature = "smol")]
pub use self::smol::{SmolBackend, h1};

/// An HTTP response whose body is still arriving.
pub struct HttpResponse {
    /// The status code.
    pub status: http::StatusCode,
    /// The headers.
    pub headers: http::HeaderMap,
    /// The body, chunk by chunk. A transport error while reading ends it with an `Err`.
    pub body: BoxStream<'static, Result<Bytes, Failure>>,
}

impl fmt::Debug for HttpResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl HttpResponse {
    /// Reads the whole body, failing once it exceeds `limit` bytes.
    pub async fn collect(self, limit: usize) -> Result<Vec<u8>, Failure> {
        let mut body = self.body;
        let mut out = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            if out.len() + chunk.len() > limit {
                return Err(Failure::other(format!(
                    "response body larger than {limit} bytes"
                )));
            }
            out.extend_from_slice(&chunk);
        }
        Ok(out)
    }
}

/// Moves bytes: sends one HTTP request to the API server and hands back the response as it
/// arrives. Everything Kubernetes-specific lives above it, in `Client` and `Api`.
///
/// The request's URI is a path and query (`/api/v1/pods?watch=true`); the backend knows the
/// server's address and TLS settings. It maps a refused connection to
/// [`Failure::ConnectionRefused`] and other transport errors to [`Failure::Other`].
pub trait Backend: Send + Sync + 'static {
    /// Sends `request`.
    fn send(&self, request: http::Request<Bytes>) -> BoxFuture<'_, Result<HttpResponse, Failure>>;
}

/// A backend whose requests can go to a server in the same process instead of the network: a
/// test server such as `informer-testkit`'s `FakeCluster`. A runtime crate's `Client` is a
/// `Client` of its own backend type; this lets that very type carry an in-process server, so
/// code written against the runtime crate's `Client` runs against it unchanged.
pub trait InProcess: Backend + Sized {
    /// A backend that hands every request to `server` (no connection, no TLS; the request's
    /// headers, authentication included, are passed on as they are).
    fn in_process(server: std::sync::Arc<dyn Backend>) -> Result<Self, crate::ClientError>;
}

/// A transport error (connecting, TLS, reading) as a failure: [`Failure::ConnectionRefused`]
/// when an `io::Error` of kind `ConnectionRefused` is in its source chain,
/// [`Failure::ConnectionClosed`] when the connection was reset, aborted or closed early, else
/// [`Failure::Other`] with code 0. For custom [`Backend`]s.
pub fn transport_failure(what: &str, err: &(dyn std::error::Error + 'static)) -> Failure {
    let mut msg = format!("{what}: {err}");
    let mut src = err.source();
    let mut refused = false;
    let mut closed = false;
    let mut note = |io: &std::io::Error| {
        use std::io::ErrorKind::*;
        refused |= io.kind() == ConnectionRefused;
        closed |= matches!(
            io.kind(),
            ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
        );
    };
    while let Some(e) = src {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            note(io);
        }
        let s = e.to_string();
        if !msg.contains(&s) {
            msg.push_str(": ");
            msg.push_str(&s);
        }
        src = e.source();
    }
    if let Some(io) = err.downcast_ref::<std::io::Error>() {
        note(io);
    }
    #[cfg(feature = "smol")]
    if let Some(h1) = err.downcast_ref::<self::smol::h1::H1Error>() {
        closed |= *h1 == self::smol::h1::H1Error::UnexpectedEof;
    }
    if refused {
        Failure::ConnectionRefused(msg)
    } else if closed {
        Failure::ConnectionClosed(msg)
    } else {
        Failure::other(msg)
    }
}

/// Largest DATA frame the server may send (`SETTINGS_MAX_FRAME_SIZE`; the protocol's default
/// is 16 KiB). kube-apiserver sends a list in frames as large as this and the window allow;
/// each frame is read into one buffer, decrypted TLS records copied in, and handed on as one
/// body chunk. At 16 KiB a 35 MB list is ~2,100 frames, each a buffer reallocated while the
/// previous frame is still held, and a chunk boundary that an unfinished list item must be
/// copied across.
#[cfg(any(feature = "tokio", feature = "smol"))]
pub(crate) const H2_MAX_FRAME_SIZE: u32 = 256 * 1024;
