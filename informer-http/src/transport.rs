//! The transport interface the runtime adapters drive, and its one implementation, [`Api`],
//! shared by every backend: backends only move bytes ([`Backend`]).

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use informer_core::object::{DynamicObject, Object};
use informer_core::protocol::{Failure, ListPage, ListRequest, WatchEvent, WatchRequest};
use serde::de::DeserializeOwned;

use crate::config::{Config, ConfigError};
use crate::decode::{DEFAULT_MAX_LINE, DecodeError, ListDecoder, WatchDecoder};
use crate::request::{list_url, watch_url};
use crate::resource::Resource;
use crate::status::failure_from_response;

/// A boxed, `Send` future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;
/// A boxed, `Send` stream.
pub type BoxStream<'a, T> = Pin<Box<dyn Stream<Item = T> + Send + 'a>>;

/// What a runtime adapter needs from the API server for one resource: list pages and watch
/// streams, in the core's vocabulary.
///
/// The watch stream ends when the server ends the watch (`timeoutSeconds`, or the connection
/// closing). An `ERROR` event arrives as [`WatchEvent::Error`] (the server closes the stream
/// after it). A line that cannot be decoded (an object that does not fit the type, an unknown
/// event type, an over-long line, ...) arrives as `WatchEvent::Error(Failure::Decode(..))` and
/// ends the stream: skipping it would let a later bookmark move the informer past a change it
/// never applied.
pub trait Transport<K>: Send + Sync {
    /// Fetches one list page.
    fn list<'a>(&'a self, request: &'a ListRequest) -> BoxFuture<'a, Result<ListPage<K>, Failure>>;

    /// Opens a watch. Fails before the first event when the server refuses the watch (an HTTP
    /// error status, a refused connection, …).
    fn watch<'a>(
        &'a self,
        request: &'a WatchRequest,
    ) -> BoxFuture<'a, Result<BoxStream<'static, WatchEvent<K>>, Failure>>;
}

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
/// arrives. Everything Kubernetes-specific lives above it, in [`Client`] and [`Api`].
///
/// The request's URI is a path and query (`/api/v1/pods?watch=true`); the backend knows the
/// server's address and TLS settings. It maps a refused connection to
/// [`Failure::ConnectionRefused`] and other transport errors to [`Failure::Other`].
pub trait Backend: Send + Sync + 'static {
    /// Sends `request`.
    fn send(&self, request: http::Request<Bytes>) -> BoxFuture<'_, Result<HttpResponse, Failure>>;
}

/// Why a client could not be built.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClientError {
    /// The configuration is unusable.
    Config(ConfigError),
    /// TLS settings (CA, client certificate, server name) are unusable.
    Tls(String),
    /// The server URL is unusable.
    InvalidServer(String),
    /// The HTTP library refused to build a client.
    Backend(String),
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Config(e) => write!(f, "configuration: {e}"),
            ClientError::Tls(m) => write!(f, "TLS: {m}"),
            ClientError::InvalidServer(m) => write!(f, "server URL: {m}"),
            ClientError::Backend(m) => write!(f, "HTTP client: {m}"),
        }
    }
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for ClientError {
    fn from(e: ConfigError) -> Self {
        ClientError::Config(e)
    }
}

/// The `scheme`, `host` and `port` of a server URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerAddr {
    /// `https` (or `http`).
    pub tls: bool,
    /// Host name or IP address (IPv6 without brackets).
    pub host: String,
    /// Port (443 / 80 by default).
    pub port: u16,
    /// The `Host` header value (`host:port`, IPv6 bracketed).
    pub authority: String,
    /// A path prefix in the server URL (e.g. behind a proxy), without trailing `/`.
    pub path_prefix: String,
}

impl ServerAddr {
    /// Parses `https://host:port[/prefix]`.
    pub fn parse(server: &str) -> Result<ServerAddr, ClientError> {
        let uri: http::Uri = server
            .parse()
            .map_err(|e| ClientError::InvalidServer(format!("{server:?}: {e}")))?;
        let tls = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(ClientError::InvalidServer(format!(
                    "{server:?}: scheme must be https or http"
                )));
            }
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| ClientError::InvalidServer(format!("{server:?}: no host")))?;
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let bare = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let authority = if bare.contains(':') {
            format!("[{bare}]:{port}")
        } else {
            format!("{bare}:{port}")
        };
        Ok(ServerAddr {
            tls,
            host: bare,
            port,
            authority,
            path_prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }
}

/// The user agent sent with every request.
pub const USER_AGENT: &str = concat!("informer-rs/", env!("CARGO_PKG_VERSION"));

/// Largest list body accepted (1 GiB).
pub const MAX_LIST_BODY: usize = 1 << 30;

/// Largest error body read (1 MiB).
const MAX_ERROR_BODY: usize = 1 << 20;

/// A backend plus the configuration it serves: adds authentication and the usual headers, maps
/// error answers to [`Failure`]s, and hands out [`Api`]s. Cheap to clone.
pub struct Client<B> {
    backend: Arc<B>,
    config: Arc<Config>,
}

impl<B> Clone for Client<B> {
    fn clone(&self) -> Self {
        Client {
            backend: self.backend.clone(),
            config: self.config.clone(),
        }
    }
}

impl<B> fmt::Debug for Client<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Client<B> {
    /// A client sending through `backend`, authenticating as `config` says.
    pub fn new(backend: B, config: Config) -> Client<B> {
        Client {
            backend: Arc::new(backend),
            config: Arc::new(config),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Sends one request with authentication, `Accept: application/json` and a JSON body if
    /// any. The answer's status is not checked.
    pub async fn send(
        &self,
        method: http::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<HttpResponse, Failure> {
        let mut req = http::Request::builder()
            .method(method)
            .uri(path_and_query)
            .header(http::header::ACCEPT, "application/json")
            .header(http::header::USER_AGENT, USER_AGENT);
        if let Some(auth) = self
            .config
            .authorization()
            .map_err(|e| Failure::other(e.to_string()))?
        {
            let mut value = http::HeaderValue::from_str(auth.expose())
                .map_err(|_| Failure::other("credential is not a valid header value"))?;
            value.set_sensitive(true);
            req = req.header(http::header::AUTHORIZATION, value);
        }
        if body.is_some() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = req
            .body(Bytes::from(body.unwrap_or_default()))
            .map_err(|e| Failure::other(format!("bad request {path_and_query:?}: {e}")))?;
        self.backend.send(req).await
    }

    /// Sends one request and reads the whole answer; a non-2xx status becomes its [`Failure`].
    pub async fn request(
        &self,
        method: http::Method,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, Failure> {
        let resp = self.send(method, path_and_query, body).await?;
        if !resp.status.is_success() {
            return Err(error_failure(resp).await);
        }
        resp.collect(MAX_LIST_BODY).await
    }

    /// An [`Api`] for `resource` in `namespace` (`None`: all namespaces, or cluster-scoped).
    pub fn api<K>(&self, resource: Resource, namespace: Option<&str>) -> Api<K, B> {
        Api {
            client: self.clone(),
            resource,
            namespace: namespace.filter(|n| !n.is_empty()).map(str::to_string),
            max_line: DEFAULT_MAX_LINE,
            _k: PhantomData,
        }
    }
}

/// Turns an error answer into its failure.
async fn error_failure(resp: HttpResponse) -> Failure {
    let code = resp.status.as_u16();
    let retry_after = resp
        .headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match resp.collect(MAX_ERROR_BODY).await {
        Ok(b) => b,
        Err(f) => f
            .status()
            .map(|s| s.message.clone().into_bytes())
            .unwrap_or_default(),
    };
    failure_from_response(code, retry_after.as_deref(), &body)
}

/// List and watch of one resource (in one namespace or all), decoding objects as `K`: the
/// [`Transport`] the runtime adapters use.
pub struct Api<K, B> {
    client: Client<B>,
    resource: Resource,
    namespace: Option<String>,
    max_line: usize,
    _k: PhantomData<fn() -> K>,
}

impl<K, B> Clone for Api<K, B> {
    fn clone(&self) -> Self {
        Api {
            client: self.client.clone(),
            resource: self.resource.clone(),
            namespace: self.namespace.clone(),
            max_line: self.max_line,
            _k: PhantomData,
        }
    }
}

impl<K, B> fmt::Debug for Api<K, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Api")
            .field("resource", &self.resource)
            .field("namespace", &self.namespace)
            .field("max_line", &self.max_line)
            .finish_non_exhaustive()
    }
}

impl<K, B> Api<K, B> {
    /// Sets the bound on one watch event's line (default [`DEFAULT_MAX_LINE`], 16 MiB). A
    /// longer line is never held whole: it is discarded as it arrives and ends the watch with
    /// `Failure::Decode` of kind `TooLarge`.
    pub fn with_max_line(mut self, max_line: usize) -> Self {
        self.max_line = max_line;
        self
    }

    /// The resource.
    pub fn resource(&self) -> &Resource {
        &self.resource
    }

    /// The namespace, `None` for all namespaces.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The client.
    pub fn client(&self) -> &Client<B> {
        &self.client
    }
}

impl<K, B> Api<K, B>
where
    K: DeserializeOwned + Object + Send + Sync + 'static,
    B: Backend,
{
    /// Fetches one list page.
    pub async fn list_page(&self, request: &ListRequest) -> Result<ListPage<K>, Failure> {
        let url = list_url(&self.resource, self.namespace.as_deref(), request);
        let resp = self.client.send(http::Method::GET, &url, None).await?;
        if !resp.status.is_success() {
            return Err(error_failure(resp).await);
        }
        // Decoded while it arrives: a first list can be tens of megabytes, and only the item
        // being received needs to be held, never the whole body.
        let mut body = resp.body;
        let mut decoder = ListDecoder::<K>::new();
        let mut received = 0usize;
        while let Some(chunk) = body.next().await {
            let chunk = chunk?;
            received += chunk.len();
            if received > MAX_LIST_BODY {
                return Err(Failure::other(format!(
                    "response body larger than {MAX_LIST_BODY} bytes"
                )));
            }
            decoder.feed(&chunk).map_err(|e| e.to_failure())?;
        }
        let mut page = decoder.finish().map_err(|e| e.to_failure())?;
        self.fill_type_meta(&mut page.items);
        Ok(page)
    }

    /// kube-apiserver leaves `apiVersion` and `kind` out of list items (they are on the list);
    /// watch events carry them. So that cached [`DynamicObject`]s look the same whichever way
    /// they arrived, list items of that type get them from the resource.
    fn fill_type_meta(&self, items: &mut [Arc<K>]) {
        use std::any::Any;
        if std::any::TypeId::of::<K>() != std::any::TypeId::of::<DynamicObject>() {
            return;
        }
        let api_version = self.resource.api_version();
        for item in items {
            let Some(obj) = Arc::get_mut(item) else {
                continue;
            };
            if let Some(d) = (obj as &mut dyn Any).downcast_mut::<DynamicObject>() {
                if d.api_version.is_none() {
                    d.api_version = Some(api_version.clone());
                }
                if d.kind.is_none() {
                    d.kind = Some(self.resource.kind.to_string());
                }
            }
        }
    }

    /// Opens a watch whose stream yields every line's result: events, and the
    /// [`DecodeError`]s of lines that could not be decoded (the stream goes on after them).
    pub async fn watch_results(
        &self,
        request: &WatchRequest,
    ) -> Result<BoxStream<'static, Result<WatchEvent<K>, DecodeError>>, Failure> {
        let url = watch_url(&self.resource, self.namespace.as_deref(), request);
        let resp = self.client.send(http::Method::GET, &url, None).await?;
        if !resp.status.is_success() {
            let failure = error_failure(resp).await;
            return Err(match failure {
                Failure::Other(s) | Failure::Forbidden(s)
                    if request.send_initial_events
                        && matches!(s.code, 400 | 403 | 422)
                        && s.message.contains("sendInitialEvents") =>
                {
                    Failure::StreamingListUnsupported(s)
                }
                f => f,
            });
        }
        Ok(watch_results(resp.body, WatchDecoder::new(self.max_line)))
    }

    /// Opens a watch stream of events, as [`Transport::watch`] hands it out: the first line
    /// that cannot be decoded becomes `WatchEvent::Error(Failure::Decode(..))` and ends the
    /// stream (see [`Transport`]).
    pub async fn watch_stream(
        &self,
        request: &WatchRequest,
    ) -> Result<BoxStream<'static, WatchEvent<K>>, Failure> {
        let results = self.watch_results(request).await?;
        Ok(end_at_first_decode_error(results))
    }
}

/// Turns every line's result into events, ending after the first [`DecodeError`] (yielded as
/// `WatchEvent::Error(Failure::Decode(..))`).
pub fn end_at_first_decode_error<K: Send + Sync + 'static>(
    results: BoxStream<'static, Result<WatchEvent<K>, DecodeError>>,
) -> BoxStream<'static, WatchEvent<K>> {
    Box::pin(
        results
            .scan(false, |ended, r| {
                if *ended {
                    return std::future::ready(None);
                }
                let ev = match r {
                    Ok(ev) => ev,
                    Err(e) => {
                        *ended = true;
                        WatchEvent::Error(e.to_failure())
                    }
                };
                std::future::ready(Some(ev))
            })
            .fuse(),
    )
}

/// Turns a body stream into the results its lines decode to: events, and [`DecodeError`]s for
/// lines that could not be decoded (the stream goes on after them).
///
/// A transport error while reading ends the stream: silently when the connection was closed or
/// reset (as client-go treats a probable EOF: the reflector watches again from where it was),
/// else after a [`WatchEvent::Error`] carrying it.
pub fn watch_results<K: DeserializeOwned + Send + 'static>(
    body: BoxStream<'static, Result<Bytes, Failure>>,
    decoder: WatchDecoder<K>,
) -> BoxStream<'static, Result<WatchEvent<K>, DecodeError>> {
    struct State<K> {
        body: BoxStream<'static, Result<Bytes, Failure>>,
        decoder: WatchDecoder<K>,
        done: bool,
    }
    let state = State {
        body,
        decoder,
        done: false,
    };
    Box::pin(stream::unfold(state, move |mut st| async move {
        loop {
            if let Some(r) = st.decoder.next_event() {
                return Some((r, st));
            }
            if st.done {
                return None;
            }
            match st.body.next().await {
                Some(Ok(chunk)) => st.decoder.feed(&chunk),
                Some(Err(f)) => {
                    st.done = true;
                    if !matches!(f, Failure::ConnectionClosed(_)) {
                        return Some((Ok(WatchEvent::Error(f)), st));
                    }
                }
                None => {
                    st.done = true;
                    if let Some(r) = st.decoder.finish() {
                        return Some((r, st));
                    }
                    return None;
                }
            }
        }
    }))
}

impl<K, B> Transport<K> for Api<K, B>
where
    K: DeserializeOwned + Object + Send + Sync + 'static,
    B: Backend,
{
    fn list<'a>(&'a self, request: &'a ListRequest) -> BoxFuture<'a, Result<ListPage<K>, Failure>> {
        Box::pin(self.list_page(request))
    }

    fn watch<'a>(
        &'a self,
        request: &'a WatchRequest,
    ) -> BoxFuture<'a, Result<BoxStream<'static, WatchEvent<K>>, Failure>> {
        Box::pin(self.watch_stream(request))
    }
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
    if let Some(h1) = err.downcast_ref::<crate::h1::H1Error>() {
        closed |= *h1 == crate::h1::H1Error::UnexpectedEof;
    }
    if refused {
        Failure::ConnectionRefused(msg)
    } else if closed {
        Failure::ConnectionClosed(msg)
    } else {
        Failure::other(msg)
    }
}

#[cfg(test)]
mod tests;
