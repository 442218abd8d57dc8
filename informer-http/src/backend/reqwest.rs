//! The reqwest backend (tokio). TLS is the shared rustls configuration ([`crate::net::tls`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use informer_core::protocol::Failure;

use super::{Backend, HttpResponse, transport_failure};
use crate::addr::ServerAddr;
use crate::auth::ExecCert;
use crate::config::Config;
use crate::error::ClientError;
use crate::transport::BoxFuture;

/// A [`Backend`] on reqwest: needs a tokio runtime. HTTP/2 where the server offers it (ALPN),
/// all requests of a client multiplexed over one connection, else HTTP/1.1 ([`Config::http2`]);
/// rustls (ring), honouring the configured CA, client certificate, `insecure-skip-tls-verify`
/// and `tls-server-name`.
///
/// The TLS configuration always carries its crypto provider (ring), for `http://` servers too:
/// building one never needs a process-wide default provider. Redirects are followed as
/// [`crate::net::redirect`] says: within the server's origin only.
///
/// When an exec plugin hands out a different client certificate, the backend starts a new
/// reqwest client (and so new connections) for the requests that follow: connections made
/// with the old certificate are not reused; requests still running on them finish there.
#[derive(Clone)]
pub struct ReqwestBackend {
    client: Arc<Mutex<(u64, Built)>>,
    base: String,
    /// Kept to build the client again after a certificate rotation (exec plugins only).
    rebuild: Option<(Arc<Config>, ExecCert)>,
    /// Set by [`InProcess::in_process`]: every request goes to this server instead.
    in_process: Option<Arc<dyn Backend>>,
}

impl std::fmt::Debug for ReqwestBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReqwestBackend")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// A reqwest client and the gate on its first connection.
#[derive(Clone)]
struct Built {
    client: reqwest::Client,
    first: Arc<FirstConnection>,
}

/// Holds a client's requests back until its first connection is up.
///
/// Over TLS the protocol is known only once ALPN has picked it: requests sent together before
/// any connection is up (the informers of a factory starting) would each open a connection,
/// and one that took a watch keeps its connection for as long as the watch lives, beside the
/// HTTP/2 connection every later request shares. So the first request goes alone; the others
/// wait until its connection is made (the connector's answer, TLS included: from then on
/// hyper's pool hands out the HTTP/2 connection, or HTTP/1.1 connections open side by side as
/// usual), or until the first request ends or is dropped, whichever comes first.
#[derive(Default)]
struct FirstConnection {
    /// A request is making the first connection.
    claimed: AtomicBool,
    /// The first connection was made (or its attempt ended): requests go straight on.
    open: AtomicBool,
    opened: event_listener::Event,
}

impl FirstConnection {
    fn open(&self) {
        if !self.open.swap(true, Ordering::AcqRel) {
            self.opened.notify(usize::MAX);
        }
    }

    /// Waits for the first connection, unless this request is the one to make it: then a
    /// guard that opens the gate when dropped (the request ended, or was dropped).
    async fn pass(self: &Arc<Self>) -> Option<OpenOnDrop> {
        if self.open.load(Ordering::Acquire) {
            return None;
        }
        if !self.claimed.swap(true, Ordering::AcqRel) {
            return Some(OpenOnDrop(self.clone()));
        }
        loop {
            if self.open.load(Ordering::Acquire) {
                return None;
            }
            let listener = self.opened.listen();
            if self.open.load(Ordering::Acquire) {
                return None;
            }
            listener.await;
        }
    }
}

/// Opens the gate of a [`FirstConnection`] when dropped.
struct OpenOnDrop(Arc<FirstConnection>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

/// The connector layer that opens a [`FirstConnection`] once a connection attempt ends.
#[derive(Clone)]
struct SignalLayer(Arc<FirstConnection>);

impl<S> tower_layer::Layer<S> for SignalLayer {
    type Service = Signal<S>;

    fn layer(&self, inner: S) -> Signal<S> {
        Signal {
            inner,
            first: self.0.clone(),
        }
    }
}

/// See [`SignalLayer`].
#[derive(Clone)]
struct Signal<S> {
    inner: S,
    first: Arc<FirstConnection>,
}

impl<S, R> tower_service::Service<R> for Signal<S>
where
    S: tower_service::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let connecting = self.inner.call(request);
        let first = self.first.clone();
        Box::pin(async move {
            let connected = connecting.await;
            first.open();
            connected
        })
    }
}

impl ReqwestBackend {
    /// A backend for `config`'s server.
    pub fn new(config: &Config) -> Result<ReqwestBackend, ClientError> {
        let exec = ExecCert::of(config);
        let (client, base) = build(config, exec.as_ref())?;
        let rebuild = exec.map(|e| (Arc::new(config.clone()), e));
        let generation = rebuild.as_ref().map_or(0, |(_, e)| e.generation());
        Ok(ReqwestBackend {
            client: Arc::new(Mutex::new((generation, client))),
            base,
            rebuild,
            in_process: None,
        })
    }

    /// The reqwest client to send with: a new one when the exec plugin's certificate changed
    /// since the current one was built.
    fn client(&self) -> Result<Built, Failure> {
        let mut current = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((config, exec)) = &self.rebuild {
            let generation = exec.generation();
            if generation != current.0 {
                let (client, _) =
                    build(config, Some(exec)).map_err(|e| Failure::other(e.to_string()))?;
                *current = (generation, client);
            }
        }
        Ok(current.1.clone())
    }
}

/// The reqwest client for `config` (with `exec`, its exec plugin's client certificate), and
/// the base URL requests go to.
fn build(config: &Config, exec: Option<&ExecCert>) -> Result<(Built, String), ClientError> {
    {
        let addr = ServerAddr::parse(&config.server)?;
        let first = Arc::new(FirstConnection::default());
        let mut builder = reqwest::Client::builder()
            .connector_layer(SignalLayer(first.clone()))
            .connect_timeout(Duration::from_secs(30))
            .tcp_nodelay(true)
            .tcp_keepalive(Duration::from_secs(30))
            .referer(false)
            .redirect(redirect_policy());
        // Our own resolution of proxy-url / HTTPS_PROXY / NO_PROXY (client-go's precedence,
        // the same as the smol backend's), never reqwest's own reading of the environment.
        builder = match crate::net::proxy::proxy_for(config)? {
            None => builder.no_proxy(),
            Some(p) => {
                let scheme = if p.tls { "https" } else { "http" };
                let mut proxy = reqwest::Proxy::all(format!("{scheme}://{}", p.authority()))
                    .map_err(|e| ClientError::Proxy(format!("{}: {e}", p.shown)))?;
                if let Some(auth) = &p.authorization {
                    let mut v = http::HeaderValue::from_str(auth.expose()).map_err(|_| {
                        ClientError::Proxy(format!("{}: unusable credentials", p.shown))
                    })?;
                    v.set_sensitive(true);
                    proxy = proxy.custom_http_auth(v);
                }
                builder.proxy(proxy)
            }
        };
        builder = if config.http2 {
            // As client-go: a ping after 30 s without a frame, the connection dropped when it
            // is not answered within 15 s (a dead HTTP/2 connection would hold every watch).
            builder
                .http2_keep_alive_interval(Duration::from_secs(30))
                .http2_keep_alive_timeout(Duration::from_secs(15))
                .http2_keep_alive_while_idle(true)
                .http2_max_frame_size(super::H2_MAX_FRAME_SIZE)
        } else {
            builder.http1_only()
        };
        let alpn: &[&[u8]] = if config.http2 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        let scheme = if addr.tls { "https" } else { "http" };
        let mut base = format!("{scheme}://{}{}", addr.authority, addr.path_prefix);
        if !addr.tls {
            // reqwest builds a TLS configuration even for plain HTTP; without one given, it
            // asks rustls for the process-wide default provider and panics when none is
            // installed (reqwest is built with `rustls-no-provider`).
            builder = builder.tls_backend_preconfigured(crate::net::tls::plain_http_config()?);
        } else {
            let tls = crate::net::tls::client_config(config, alpn, exec.map(ExecCert::resolver))?;
            builder = builder.tls_backend_preconfigured(tls);
            if let Some(name) = config.tls_server_name.as_deref() {
                // Verify against `name` while connecting to the configured address.
                use std::net::ToSocketAddrs as _;
                let sock = (addr.host.as_str(), addr.port)
                    .to_socket_addrs()
                    .ok()
                    .and_then(|mut a| a.next())
                    .ok_or_else(|| {
                        ClientError::InvalidServer(format!("cannot resolve {}", addr.host))
                    })?;
                builder = builder.resolve(name, sock);
                base = format!("https://{name}:{}{}", addr.port, addr.path_prefix);
            }
        }
        let client = builder
            .build()
            .map_err(|e| ClientError::Backend(e.to_string()))?;
        Ok((Built { client, first }, base))
    }
}

impl super::InProcess for ReqwestBackend {
    fn in_process(server: Arc<dyn Backend>) -> Result<Self, ClientError> {
        // A plain-http client for an address never dialled: building it opens nothing.
        let (client, base) = build(&Config::new("http://in-process.invalid"), None)?;
        Ok(ReqwestBackend {
            client: Arc::new(Mutex::new((0, client))),
            base,
            rebuild: None,
            in_process: Some(server),
        })
    }
}

impl Backend for ReqwestBackend {
    fn send(&self, request: http::Request<Bytes>) -> BoxFuture<'_, Result<HttpResponse, Failure>> {
        if let Some(server) = &self.in_process {
            return server.send(request);
        }
        let (parts, body) = request.into_parts();
        let url = format!("{}{}", self.base, parts.uri);
        let client = self.client();
        Box::pin(async move {
            let Built { client, first } = client?;
            let _first = first.pass().await;
            let mut rb = client.request(parts.method, url).headers(parts.headers);
            if !body.is_empty() {
                rb = rb.body(body);
            }
            let resp = rb.send().await.map_err(|e| match refused_redirect(&e) {
                Some(f) => f,
                None => transport_failure("request failed", &e),
            })?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = stream::unfold(Some(resp), |resp| async move {
                let mut resp = resp?;
                match resp.chunk().await {
                    Ok(Some(chunk)) => Some((Ok(chunk), Some(resp))),
                    Ok(None) => None,
                    Err(e) => Some((Err(transport_failure("reading the body", &e)), None)),
                }
            });
            Ok(HttpResponse {
                status,
                headers,
                body: Box::pin(body),
            })
        })
    }
}

/// Follows redirects within the origin of the request's first URL, at most
/// [`MAX_REDIRECTS`](crate::net::redirect::MAX_REDIRECTS) of them; anything else fails the request
/// with a [`RedirectRefused`] carrying its failure. reqwest keeps the `Authorization` header on
/// a redirect to the same origin.
fn redirect_policy() -> reqwest::redirect::Policy {
    use crate::net::redirect::{MAX_REDIRECTS, other_origin, too_many};
    reqwest::redirect::Policy::custom(|attempt| {
        let status = attempt.status();
        let next = attempt.url();
        let origin = |u: &reqwest::Url| {
            (
                u.scheme().to_ascii_lowercase(),
                u.host_str().map(str::to_ascii_lowercase),
                u.port_or_known_default(),
            )
        };
        let same = attempt
            .previous()
            .first()
            .is_some_and(|first| origin(first) == origin(next));
        if !same {
            let target = format!(
                "{}://{}:{}",
                next.scheme(),
                next.host_str().unwrap_or(""),
                next.port_or_known_default().unwrap_or(0)
            );
            return attempt.error(RedirectRefused(other_origin(status, &target)));
        }
        // `previous` holds the first URL and every one redirected to so far.
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(RedirectRefused(too_many(status)));
        }
        attempt.follow()
    })
}

/// A redirect the policy refused, carried through reqwest's error to [`Backend::send`].
#[derive(Debug)]
struct RedirectRefused(Failure);

impl std::fmt::Display for RedirectRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for RedirectRefused {}

/// The failure of a redirect the policy refused, if that is what `err` is.
fn refused_redirect(err: &reqwest::Error) -> Option<Failure> {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = src {
        if let Some(r) = e.downcast_ref::<RedirectRefused>() {
            return Some(r.0.clone());
        }
        src = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower_layer::Layer;
    use tower_service::Service;

    /// A connector that answers when told to.
    #[derive(Clone)]
    struct Held(Arc<event_listener::Event>, Arc<AtomicBool>);

    impl Service<()> for Held {
        type Response = ();
        type Error = ();
        type Future = BoxFuture<'static, Result<(), ()>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ()>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, (): ()) -> Self::Future {
            let (event, go) = (self.0.clone(), self.1.clone());
            Box::pin(async move {
                while !go.load(Ordering::Acquire) {
                    let l = event.listen();
                    if go.load(Ordering::Acquire) {
                        break;
                    }
                    l.await;
                }
                Ok(())
            })
        }
    }

    /// The first request goes; the others wait until its connection is made (the connector
    /// answered), not for its answer; later requests do not wait at all.
    #[tokio::test]
    async fn requests_wait_for_the_first_connection_only() {
        let first = Arc::new(FirstConnection::default());
        let leader = first
            .pass()
            .await
            .expect("the first request makes the connection");
        let waiter = tokio::spawn({
            let first = first.clone();
            async move { first.pass().await.is_none() }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiter.is_finished(),
            "waits while the first connection is being made"
        );
        let (event, go) = (
            Arc::new(event_listener::Event::new()),
            Arc::new(AtomicBool::new(false)),
        );
        let mut connector = SignalLayer(first.clone()).layer(Held(event.clone(), go.clone()));
        let connecting = tokio::spawn(connector.call(()));
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        go.store(true, Ordering::Release);
        event.notify(usize::MAX);
        connecting.await.unwrap().unwrap();
        assert!(
            waiter.await.unwrap(),
            "released by the connection, the first request still on"
        );
        assert!(first.pass().await.is_none());
        drop(leader);
        // A first request dropped before any connection releases the others too.
        let first = Arc::new(FirstConnection::default());
        let leader = first.pass().await.expect("first");
        let waiter = tokio::spawn({
            let first = first.clone();
            async move { first.pass().await.is_none() }
        });
        drop(leader);
        assert!(waiter.await.unwrap());
    }
}
