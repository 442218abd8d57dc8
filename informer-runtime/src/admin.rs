//! The admin server (feature `admin`): `/livez`, `/readyz` and `/metrics` for the kubelet's
//! probes and Prometheus, as controller-runtime's health and metrics servers give them.
//!
//! - **`/readyz`**: named checks, each informer synced (`informer/<name>`) and, for a
//!   [`Controller`](crate::Controller) with leader election, the election running
//!   (`leader-election`); plus any added with [`Admin::readiness_check`]. 200 once every check
//!   passes, 503 before.
//! - **`/livez`**: the process's loops are alive: `ping`, and each informer's driver not
//!   wedged (`informer/<name>`: no single step of it has run longer than
//!   [`Admin::stall_after`], 30 s by default; a transform or index function that blocks
//!   wedges it); plus any added with [`Admin::liveness_check`].
//! - Both answer as Kubernetes' own endpoints do: `ok` when all pass; with `?verbose`, or on a
//!   failure, one line per check (`[+]name ok`, `[-]name failed: why`) and `livez check
//!   passed`/`failed`. `/readyz/<check>` runs one check; `?exclude=<check>` (repeatable)
//!   leaves one out.
//! - **`/metrics`**: the Prometheus text format (version 0.0.4) of everything recorded
//!   through the `metrics` facade: the informers' `informer_*`, controller-runtime's
//!   `workqueue_*`, `controller_runtime_reconcile_*` and `leader_election_master_status`.
//!   [`Admin::new`] installs `metrics-exporter-prometheus` as the process's recorder (once; its
//!   own HTTP listener off) with histogram buckets as controller-runtime's; **create the
//!   `Admin` before the informers**, since a metric handle binds to the recorder installed
//!   when it is registered. An application with a recorder of its own gives `/metrics` its
//!   renderer ([`Admin::metrics_renderer`]).
//! - Anything but `GET` is 405 (with `Allow: GET`), any other path 404.
//!
//! The server is hyper 1 (HTTP/1.1) on a thread of its own with its own small runtime
//! (`informer_tokio::serve_admin`: a current-thread tokio runtime; `informer_smol::serve_admin`:
//! `smol::block_on` over a local executor, hyper's I/O through `smol-hyper`), so it answers
//! even when the application's runtime is wedged: a probe then gets a 503 saying which loop is
//! stuck, not a timeout. [`AdminServer::shutdown`] stops it (a
//! [`Controller`](crate::Controller) given the server stops it last, after the informers).

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use event_listener::Event;
use futures_util::future::{Either, select};
use http_body_util::Full;
use informer_core::object::Object;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::informer::Informer;
use crate::leader::Leadership;
use crate::runtime::Runtime;

/// A health check: `Ok` or why not.
type CheckFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

#[derive(Clone)]
struct Check {
    name: String,
    run: CheckFn,
}

struct Inner {
    address: SocketAddr,
    ready: Mutex<Vec<Check>>,
    live: Mutex<Vec<Check>>,
    stall_after: Mutex<Duration>,
    render: Mutex<Option<Arc<dyn Fn() -> String + Send + Sync>>>,
}

/// What the admin server answers: its checks and its metrics (see the [module](self)).
/// Cheap to clone; checks added after the server started count from then on.
#[derive(Clone)]
pub struct Admin {
    inner: Arc<Inner>,
}

impl fmt::Debug for Admin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admin")
            .field("address", &self.inner.address)
            .finish_non_exhaustive()
    }
}

/// Buckets of `controller_runtime_reconcile_time_seconds`, as controller-runtime's.
const RECONCILE_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];
/// Buckets of the workqueue durations, as client-go's (`ExponentialBuckets(10e-9, 10, 12)`).
const WORKQUEUE_BUCKETS: &[f64] = &[
    1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0,
];
/// Other histograms (the handlers' latency): Prometheus' default buckets.
const DEFAULT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// How often the recorder's histograms are folded into their buckets between scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder, installed on first use.
fn prometheus() -> Result<&'static PrometheusHandle, &'static str> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets(DEFAULT_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("controller_runtime_reconcile_time_seconds".into()),
                        RECONCILE_BUCKETS,
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Prefix("workqueue_".into()), WORKQUEUE_BUCKETS)
                })
                .map_err(|e| e.to_string())?;
            let handle = builder.install_recorder().map_err(|e| {
                format!("the Prometheus recorder could not be installed ({e}): give the admin server a renderer (Admin::metrics_renderer)")
            })?;
            // The recorder keeps each histogram observation until upkeep folds it into the
            // buckets; a scrape runs upkeep, but a process nobody scrapes would grow without
            // bound (8 bytes an observation, one per notification). So upkeep runs here too.
            let upkeep = handle.clone();
            let spawned = std::thread::Builder::new()
                .name("informer-metrics-upkeep".into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_EVERY);
                        upkeep.run_upkeep();
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "no metrics upkeep thread: histograms are folded only when /metrics is scraped");
            }
            Ok(handle)
        })
        .as_ref()
        .map_err(String::as_str)
}

/// One answer of the admin server.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdminResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: String,
}

impl AdminResponse {
    fn text(status: u16, body: impl Into<String>) -> Self {
        AdminResponse {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into(),
        }
    }
}

impl Admin {
    /// An admin server's content, to be served on `address` (`0.0.0.0:8080` in a pod;
    /// port 0 picks a free one). Installs the Prometheus recorder (see the [module](self)).
    pub fn new(address: impl Into<SocketAddr>) -> Admin {
        if let Err(e) = prometheus() {
            tracing::warn!(error = e, "/metrics will answer 500");
        }
        Admin {
            inner: Arc::new(Inner {
                address: address.into(),
                ready: Mutex::default(),
                live: Mutex::new(vec![Check {
                    name: "ping".into(),
                    run: Arc::new(|| Ok(())),
                }]),
                stall_after: Mutex::new(Duration::from_secs(30)),
                render: Mutex::default(),
            }),
        }
    }

    /// The address to serve on.
    pub fn address(&self) -> SocketAddr {
        self.inner.address
    }

    /// Adds a readiness check `name` (`/readyz`).
    pub fn readiness_check(
        &self,
        name: impl Into<String>,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> &Self {
        add(&self.inner.ready, name.into(), Arc::new(check));
        self
    }

    /// Adds a liveness check `name` (`/livez`).
    pub fn liveness_check(
        &self,
        name: impl Into<String>,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> &Self {
        add(&self.inner.live, name.into(), Arc::new(check));
        self
    }

    /// How long one step of an informer's driver may run before `/livez` calls it wedged
    /// (default 30 s; a relist of 100k objects is one step of about a second).
    pub fn stall_after(&self, limit: Duration) -> &Self {
        *self
            .inner
            .stall_after
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = limit;
        self
    }

    /// Serves `/metrics` from `render` (an application's own recorder) instead of the
    /// Prometheus recorder [`Admin::new`] installed.
    pub fn metrics_renderer(&self, render: impl Fn() -> String + Send + Sync + 'static) -> &Self {
        *self.inner.render.lock().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(render));
        self
    }

    /// Adds `informer`'s checks: `informer/<name>` in `/readyz` (synced; failed once it
    /// stopped) and in `/livez` (its driver not wedged).
    pub fn informer<K, R>(&self, informer: &Informer<K, R>) -> &Self
    where
        K: Object + Send + Sync + 'static,
        R: Runtime,
    {
        let name = format!("informer/{}", informer.name());
        let shared = informer.shared().clone();
        let ready = shared.clone();
        self.readiness_check(name.clone(), move || {
            if ready.finished.load(Ordering::Acquire) {
                Err("stopped".into())
            } else if ready.views.read(|v| v.has_synced()) {
                Ok(())
            } else {
                Err("not synced yet".into())
            }
        });
        let inner = Arc::downgrade(&self.inner);
        self.liveness_check(name, move || {
            let limit = inner.upgrade().map_or(Duration::from_secs(30), |i| {
                *i.stall_after.lock().unwrap_or_else(|p| p.into_inner())
            });
            match shared.state.held_for() {
                Some(busy) if busy > limit => Err(format!(
                    "its cache has been locked by one step for {:.1} s (a transform or index function that blocks?)",
                    busy.as_secs_f64()
                )),
                _ => Ok(()),
            }
        });
        self
    }

    /// Adds the readiness check `leader-election`: the election of `leadership` running
    /// (leading or standing by; failed once it ended).
    pub fn leadership(&self, leadership: &Leadership) -> &Self {
        let l = leadership.clone();
        self.readiness_check("leader-election", move || {
            if l.is_running() {
                Ok(())
            } else {
                Err("the election has ended".into())
            }
        })
    }

    /// The answer to `method` on `path_and_query` (what the server sends; public for tests
    /// and for an application that serves these paths from its own HTTP server).
    pub fn respond(&self, method: &str, path_and_query: &str) -> AdminResponse {
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        let known = matches!(path, "/livez" | "/readyz" | "/metrics")
            || path.starts_with("/livez/")
            || path.starts_with("/readyz/");
        if !known {
            return AdminResponse::text(404, "404 page not found\n");
        }
        if method != "GET" {
            return AdminResponse::text(405, "405 method not allowed\n");
        }
        if path == "/metrics" {
            crate::metrics::refresh_gauges();
            let render = self
                .inner
                .render
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let body = match render {
                Some(r) => r(),
                None => match prometheus() {
                    Ok(h) => {
                        h.run_upkeep();
                        h.render()
                    }
                    Err(e) => return AdminResponse::text(500, format!("{e}\n")),
                },
            };
            return AdminResponse {
                status: 200,
                content_type: "text/plain; version=0.0.4; charset=utf-8",
                body,
            };
        }
        let (kind, checks, one) = match path.split_once('/').map(|(_, p)| p) {
            Some(p) if p.starts_with("livez") => ("livez", &self.inner.live, &p[5..]),
            Some(p) => ("readyz", &self.inner.ready, &p[6..]),
            None => unreachable!("paths start with /"),
        };
        let checks = checks.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let one = one.strip_prefix('/').unwrap_or(one);
        let mut verbose = false;
        let mut exclude = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("exclude", v)) => exclude.push(v.to_string()),
                Some(("verbose", v)) => verbose = v != "false" && v != "0",
                None if pair == "verbose" => verbose = true,
                _ => {}
            }
        }
        if !one.is_empty() {
            return match checks.iter().find(|c| c.name == one) {
                None => AdminResponse::text(404, "404 page not found\n"),
                Some(c) => match (c.run)() {
                    Ok(()) => AdminResponse::text(200, "ok"),
                    Err(why) => AdminResponse::text(503, format!("[-]{} failed: {why}\n", c.name)),
                },
            };
        }
        let mut body = String::new();
        let mut failed = false;
        for c in &checks {
            if exclude.contains(&c.name) {
                body.push_str(&format!("[+]{} excluded: ok\n", c.name));
                continue;
            }
            match (c.run)() {
                Ok(()) => body.push_str(&format!("[+]{} ok\n", c.name)),
                Err(why) => {
                    failed = true;
                    tracing::info!(check = %c.name, reason = %why, "{kind} check failed");
                    body.push_str(&format!("[-]{} failed: {why}\n", c.name));
                }
            }
        }
        if failed {
            body.push_str(&format!("{kind} check failed\n"));
            AdminResponse::text(503, body)
        } else if verbose {
            body.push_str(&format!("{kind} check passed\n"));
            AdminResponse::text(200, body)
        } else {
            AdminResponse::text(200, "ok")
        }
    }
}

fn add(list: &Mutex<Vec<Check>>, name: String, run: CheckFn) {
    let mut list = list.lock().unwrap_or_else(|p| p.into_inner());
    match list.iter_mut().find(|c| c.name == name) {
        Some(c) => c.run = run,
        None => list.push(Check { name, run }),
    }
}

/// The stop signal shared by a server's handle and its thread.
#[derive(Default)]
struct Stop {
    stop: AtomicBool,
    exited: AtomicBool,
    changed: Event,
}

impl Stop {
    async fn until(&self, flag: &AtomicBool) {
        loop {
            let l = self.changed.listen();
            if flag.load(Ordering::Acquire) {
                return;
            }
            l.await;
        }
    }
}

/// A running admin server (from the runtime crate's `serve_admin`). Dropping the handle
/// leaves it running; [`shutdown`](Self::shutdown) stops it.
#[derive(Clone)]
pub struct AdminServer {
    admin: Admin,
    local_addr: SocketAddr,
    stop: Arc<Stop>,
}

impl fmt::Debug for AdminServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminServer")
            .field("local_addr", &self.local_addr)
            .finish_non_exhaustive()
    }
}

/// The server side of an [`AdminServer`]: what a runtime crate's accept loop holds.
#[doc(hidden)]
#[derive(Clone)]
pub struct AdminServing {
    admin: Admin,
    stop: Arc<Stop>,
}

impl AdminServer {
    /// A handle for a server listening on `local_addr`, and its serving side (for the runtime
    /// crates).
    #[doc(hidden)]
    pub fn new(admin: Admin, local_addr: SocketAddr) -> (AdminServer, AdminServing) {
        let stop = Arc::new(Stop::default());
        (
            AdminServer {
                admin: admin.clone(),
                local_addr,
                stop: stop.clone(),
            },
            AdminServing { admin, stop },
        )
    }

    /// The address it listens on (the port chosen when asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Its checks (to add more).
    pub fn admin(&self) -> &Admin {
        &self.admin
    }

    /// Stops accepting, lets the requests in progress finish, and returns once the server's
    /// thread has ended.
    pub async fn shutdown(&self) {
        self.stop();
        self.stop.until(&self.stop.exited).await;
    }

    /// Tells the server to stop, without waiting for it.
    pub fn stop(&self) {
        self.stop.stop.store(true, Ordering::Release);
        self.stop.changed.notify(usize::MAX);
    }
}

impl AdminServing {
    /// Resolves once the server is told to stop.
    pub async fn stopped(&self) {
        self.stop.until(&self.stop.stop).await
    }

    /// True once told to stop.
    pub fn is_stopped(&self) -> bool {
        self.stop.stop.load(Ordering::Acquire)
    }

    /// The server's thread has ended (wakes [`AdminServer::shutdown`]).
    pub fn exited(&self) {
        self.stop.exited.store(true, Ordering::Release);
        self.stop.changed.notify(usize::MAX);
    }

    /// Serves one connection (HTTP/1.1, hyper) until it closes or the server stops (then
    /// gracefully: the request in progress is answered).
    pub async fn serve_connection<I, T>(self, io: I, timer: T)
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
        T: hyper::rt::Timer + Send + Sync + 'static,
    {
        let admin = self.admin.clone();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let path = req
                    .uri()
                    .path_and_query()
                    .map_or("/", |p| p.as_str())
                    .to_string();
                let r = admin.respond(req.method().as_str(), &path);
                async move { Ok::<_, Infallible>(to_http(r)) }
            });
        let conn = hyper::server::conn::http1::Builder::new()
            .timer(timer)
            .header_read_timeout(Duration::from_secs(10))
            .serve_connection(io, service);
        let mut conn = std::pin::pin!(conn);
        let stopped = std::pin::pin!(self.stopped());
        if let Either::Right((_, _)) = select(conn.as_mut(), stopped).await {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

fn to_http(r: AdminResponse) -> hyper::Response<Full<Bytes>> {
    let mut b = hyper::Response::builder()
        .status(r.status)
        .header("content-type", r.content_type);
    if r.status == 405 {
        b = b.header("allow", "GET");
    }
    b.body(Full::new(Bytes::from(r.body)))
        .unwrap_or_else(|_| hyper::Response::new(Full::new(Bytes::new())))
}

/// Why an admin server could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum AdminError {
    /// The address could not be bound.
    Bind {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server's thread or its runtime could not start.
    Start(std::io::Error),
}

impl fmt::Display for AdminError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdminError::Bind { address, source } => {
                write!(f, "admin server: cannot listen on {address}: {source}")
            }
            AdminError::Start(e) => write!(f, "admin server: cannot start: {e}"),
        }
    }
}

impl std::error::Error for AdminError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AdminError::Bind { source, .. } => Some(source),
            AdminError::Start(e) => Some(e),
        }
    }
}

/// Binds `admin`'s address (non-blocking, for the runtime crate's listener) and makes the
/// server's handle and serving side.
#[doc(hidden)]
pub fn bind(
    admin: Admin,
) -> Result<(std::net::TcpListener, AdminServer, AdminServing), AdminError> {
    let address = admin.address();
    let bind_err = |source| AdminError::Bind { address, source };
    let listener = std::net::TcpListener::bind(address).map_err(bind_err)?;
    listener.set_nonblocking(true).map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let (server, serving) = AdminServer::new(admin, local);
    tracing::info!(address = %local, "admin server listening (/livez, /readyz, /metrics)");
    Ok((listener, server, serving))
}
