//! # informer-testkit
//!
//! [`FakeCluster`]: an in-memory Kubernetes API server for testing controllers, with faults
//! by seed and virtual time. Informers, writes, the work queue, leader election and
//! `Controller` use it through their normal [`Client`]: it sits behind the
//! [`Backend`] seam, so every request is built, sent, answered and decoded as against a real
//! apiserver (URLs, query strings, status codes, `Status` bodies, watch lines); only the
//! sockets are missing.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use informer_testkit::{FakeCluster, Faults};
//! use informer_tokio::{Client, DynamicObject, Resource};
//! use informer_tokio::http::PostParams;
//!
//! let cluster = FakeCluster::builder().seed(7).faults(Faults::none()).build();
//! let client: Client = cluster.client()?;
//! let cms = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some("default"));
//! let cm = serde_json::from_value(serde_json::json!({
//!     "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "cm-"}
//! }))?;
//! let created = cms.create(&cm, &PostParams::default()).await?;
//! assert!(created.metadata.name().starts_with("cm-"));
//! # Ok(()) }
//! ```
//!
//! ## What it serves
//!
//! - **resourceVersions**: one counter for every object, as etcd's revision; each write takes
//!   the next. A write that changes nothing keeps the version and sends no event.
//! - **list**: `limit`/`continue` (a continue token lists the snapshot it started at),
//!   `resourceVersion` unset (most recent), `"0"` (any: never paged, as from the watch cache),
//!   `N` with `resourceVersionMatch` `NotOlderThan` or `Exact` (an exact list of the past,
//!   from the change log), a paged `N` without a match rule being exact; too old is `410
//!   Expired`, newer than the server is `504` "Too large resource version";
//!   `remainingItemCount` without selectors; metadata-only lists
//!   (`as=PartialObjectMetadataList`).
//! - **watch**: from `N` (the log replayed), from `""`/`"0"` (the current objects as `ADDED`
//!   first), `sendInitialEvents` (then the `k8s.io/initial-events-end` bookmark); bookmarks
//!   every 60 s when asked; `timeoutSeconds` (default 30–60 min); selectors decide `ADDED`,
//!   `MODIFIED` and `DELETED` as the watch cache does (an object leaving the selection is
//!   `DELETED` for that watch); a watch from a compacted version gets an `ERROR` event with
//!   a 410 `Status`.
//! - **compaction** ([`FakeCluster::compact`], and every restart): history before now is
//!   gone; past 100,000 changes ([`Builder::history`]) the older half goes by itself (as
//!   etcd's periodic compaction), so a long test's memory stays bounded.
//! - **selectors**: label selectors (the core's parser), field selectors (`=`, `==`, `!=` on
//!   any dotted path of a built-in; `metadata.name`/`metadata.namespace` only on a custom
//!   resource, as the apiserver).
//! - **create** (`generateName` with the apiserver's alphabet, `uid`, `creationTimestamp`,
//!   `generation` for custom resources and apps/batch/networking kinds, 409 `AlreadyExists`,
//!   404 for a missing namespace, 403 in a terminating one), **get**, **replace** (409
//!   `Conflict` on a stale `resourceVersion` or a different `uid`; the system fields kept),
//!   **delete** (preconditions `uid` and `resourceVersion` → 409; finalizers →
//!   `deletionTimestamp`, removal when the last one goes; no new finalizers while deleting,
//!   422), `dryRun=All`.
//! - **status subresource**: `/status` writes change only `.status`, the main resource
//!   ignores `.status` (built-ins with one, and CRDs declaring it).
//! - **patch**: JSON merge patch, JSON patch (RFC 6902: add, remove, replace, move, copy,
//!   test), strategic merge on built-ins taken as a merge patch (415 on custom resources).
//! - **server-side apply**, a subset: create-or-merge; lists are atomic; the field manager
//!   and the fields it applied are recorded in `managedFields` (`FieldsV1`); a field another
//!   *apply* manager owns with a different value is a 409 `Conflict` unless `force=true`
//!   (which moves ownership); fields this manager applied before and omits now are removed
//!   unless another manager owns them. Not modelled: list merge keys (associative lists),
//!   ownership by non-apply writes (`Update` entries), defaulting and validation.
//! - **Leases**, **namespaces** (the four the apiserver makes; a deleted namespace empties
//!   and goes, as the namespace controller would do), **CRD-defined resources** (creating a
//!   `CustomResourceDefinition` serves its versions at once, `status` subresource
//!   included; or [`FakeCluster::register`]), every built-in in
//!   [`Resource::BUILTINS`](informer_http::Resource::BUILTINS).
//! - **garbage collection** of `ownerReferences` (which a bare apiserver does not do), at
//!   once after each write: dependents of a gone owner are deleted, foreground deletion
//!   (`foregroundDeletion` finalizer) deletes dependents before its owner, orphaning strips
//!   the reference, references to some missing owners are removed.
//!
//! ## Faults and time
//!
//! [`Faults`] by seed: dropped and hung watches, 410s, 429 with `Retry-After`, 500s, slow
//! answers, conflicts on a fraction of writes, restarts. Every decision is drawn from the seed,
//! the request's text and how often that request was made, so the same seed and the same
//! requests give the same faults ([`FakeCluster::trace`] shows them). A test driving the
//! cluster from one task repeats exactly; an informer's handlers run on threads of their own,
//! so a controller's requests can come in another order from run to run (another
//! resourceVersion in a watch's URL is another request), and with them other faults: a
//! failing seed names a run worth replaying, not always one that repeats.
//!
//! Time is the [`Clock`]'s: with [`TokioClock`] (the default) under a paused tokio runtime
//! (`#[tokio::test(start_paused = true)]`, tokio's `test-util` feature) it is virtual, and the informer's timers, the
//! work queue's delays and leader election's deadlines (the tokio runtime's clock) move with
//! it: ten minutes of a controller's life run in milliseconds. Two things stay in real time:
//! a write's own retry after a 429 or a 500 (informer-http waits on a thread) and handler
//! threads' work; while the runtime waits for them, tokio's paused clock jumps to its next
//! timer, so virtual time runs ahead of what the threads did (harmless to correctness, but a
//! deadline in virtual time is no measure of real work). On smol, [`SmolClock`] is real time: smol has no paused clock.
//!
//! ## Differences from kube-apiserver
//!
//! Found by the differential suite (`tests/differential.rs`: 60 scripted request sequences
//! against kube-apiserver v1.20.2; the scenarios named here are its `KNOWN` ones, any other
//! difference fails it) or known by design:
//!
//! | What | kube-apiserver | FakeCluster |
//! |---|---|---|
//! | Admission, validation, defaulting, RBAC | yes | none: any object of a known resource is stored as sent |
//! | `managedFields` on non-apply writes | an `Update` entry per manager | not recorded |
//! | Apply on lists with merge keys | per item | the list is atomic |
//! | Garbage collector, namespace cleanup | not in a bare kube-apiserver (separate controllers, eventually) | synchronous, in the write's request (`gc_background`, `namespace_delete`) |
//! | Watch bookmarks | about once a minute, timing not exact | every 60 s of the clock |
//! | A watch from a version etcd compacted away | served from the watch cache while the cache holds it (410 once its window moved on) | 410 at once (`watch_compacted_version`) |
//! | The watch cache's own window (410 for a version the cache dropped though etcd has it) | yes | only compaction makes 410 |
//! | Order of a `resourceVersion=0` list and of a watch's initial `ADDED` events | the watch cache's (no order) | key order (the suite compares them sorted) |
//! | Discovery (`/api`, `/apis`), `deletecollection`, `/scale`, pod logs, exec | yes | 404 / 405 |
//! | Field selectors on a built-in's unsupported field | 400 | accepted |
//! | Graceful deletion of pods (`gracePeriodSeconds`) | pods linger | deleted at once |
#![forbid(unsafe_code)]

mod clock;
mod faults;
mod patch;
mod server;
mod state;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use informer_core::protocol::Failure;
use informer_http::backend::HttpResponse;
use informer_http::transport::BoxFuture;
use informer_http::{Backend, Client, ClientError, Config, InProcess, Resource};
use serde_json::{Value, json};

#[cfg(feature = "smol")]
pub use clock::SmolClock;
#[cfg(feature = "tokio")]
pub use clock::TokioClock;
pub use clock::{Clock, ThreadClock};
pub use faults::Faults;

use state::State;

/// An in-memory API server; see the [crate documentation](crate). Cheap to clone (clones
/// share the cluster).
#[derive(Clone)]
pub struct FakeCluster {
    inner: Arc<Inner>,
    /// Requests through this handle are never faulted ([`FakeCluster::unfaulted`]).
    clean: bool,
}

struct Inner {
    state: Mutex<State>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for FakeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.lock();
        f.debug_struct("FakeCluster")
            .field("seed", &st.seed)
            .field("resource_version", &st.rv)
            .finish_non_exhaustive()
    }
}

/// Builds a [`FakeCluster`].
pub struct Builder {
    seed: u64,
    faults: Faults,
    clock: Option<Arc<dyn Clock>>,
    epoch: i64,
    history: usize,
    shard_selectors: bool,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("seed", &self.seed)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

impl Builder {
    /// The seed every fault, `uid` and generated name is drawn from (0 by default).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The faults to inject (none by default).
    pub fn faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// The clock (default: [`TokioClock`] with the `tokio` feature, else [`SmolClock`] with
    /// `smol`, else [`ThreadClock`]). On smol, say `.clock(SmolClock::new())`: a tokio clock
    /// needs a tokio runtime to sleep on.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The wall-clock time (Unix seconds) at the clock's origin, for the timestamps the
    /// cluster writes (default 2026-01-01T00:00:00Z: a fixed time, so runs repeat).
    pub fn epoch(mut self, unix_seconds: i64) -> Self {
        self.epoch = unix_seconds;
        self
    }

    /// How many changes the history keeps before its older half is compacted (100,000 by
    /// default; at least 2).
    pub fn history(mut self, changes: usize) -> Self {
        self.history = changes.max(2);
        self
    }

    /// Serve lists and watches with a `shardSelector` as Kubernetes 1.36 does with KEP-5866's
    /// feature on: only objects whose 64-bit FNV-1a hash of `object.metadata.uid` or
    /// `object.metadata.namespace` falls in one of the `shardRange(<field>, '0x…', '0x…')`
    /// ranges (joined by `||`). Off by default, as on every server before 1.36: the parameter
    /// is ignored and every object is served.
    pub fn shard_selectors(mut self, on: bool) -> Self {
        self.shard_selectors = on;
        self
    }

    /// The cluster, with the namespaces `default`, `kube-system`, `kube-public` and
    /// `kube-node-lease`.
    pub fn build(self) -> FakeCluster {
        let clock = self.clock.unwrap_or_else(default_clock);
        let mut state = State::new(self.seed, self.faults, self.epoch);
        state.history = self.history;
        state.shard_selectors = self.shard_selectors;
        FakeCluster {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                clock,
            }),
            clean: false,
        }
    }
}

fn default_clock() -> Arc<dyn Clock> {
    #[cfg(feature = "tokio")]
    return Arc::new(TokioClock::new());
    #[cfg(all(not(feature = "tokio"), feature = "smol"))]
    return Arc::new(SmolClock::new());
    #[cfg(not(any(feature = "tokio", feature = "smol")))]
    return Arc::new(ThreadClock::new());
}

/// One request as the cluster saw it: for replaying a seed and checking what happened.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceEntry {
    /// `METHOD path?query`.
    pub request: String,
    /// The status answered (0: the connection was refused).
    pub code: u16,
    /// A fault, if one was injected (`"injected"`, `"410 event"`, `"refused (restarting)"`).
    pub note: String,
}

/// An error answer: a `Status` body.
#[derive(Clone, Debug)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: String) -> ApiError {
        ApiError {
            code,
            reason,
            message,
            details: None,
            retry_after: None,
        }
    }

    pub(crate) fn bad_request(message: String) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub(crate) fn retry_after(mut self, secs: u32) -> ApiError {
        self.retry_after = Some(secs);
        let mut d = self.details.take().unwrap_or_else(|| json!({}));
        d["retryAfterSeconds"] = json!(secs);
        self.details = Some(d);
        self
    }

    pub(crate) fn status_body(&self) -> Value {
        let mut v = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason, "code": self.code});
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

impl Default for FakeCluster {
    fn default() -> Self {
        FakeCluster::new()
    }
}

impl FakeCluster {
    /// A cluster with seed 0, no faults and the default clock.
    pub fn new() -> FakeCluster {
        FakeCluster::builder().build()
    }

    /// A builder.
    pub fn builder() -> Builder {
        Builder {
            seed: 0,
            faults: Faults::none(),
            clock: None,
            epoch: 1_767_225_600,
            history: state::HISTORY,
            shard_selectors: false,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // Every write leaves the state consistent: a panic elsewhere cannot break it.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A client of this cluster on backend `B`: `informer_tokio::Client` (reqwest) or
    /// `informer_smol::Client`, so code taking the runtime crate's `Client` runs against the
    /// cluster unchanged.
    pub fn client<B: InProcess>(&self) -> Result<Client<B>, ClientError> {
        let backend = B::in_process(Arc::new(self.clone()))?;
        Ok(Client::new(
            backend,
            Config::new("http://in-process.invalid"),
        ))
    }

    /// The same cluster, with no faults for requests made through this handle (or a client
    /// made from it): a test's own setup and checks, beside the code under test that gets
    /// the faults. Scheduled restarts still happen (they are the cluster's), but its
    /// requests are not refused while it is down.
    pub fn unfaulted(&self) -> FakeCluster {
        FakeCluster {
            inner: self.inner.clone(),
            clean: true,
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.lock().seed
    }

    /// Replaces the faults from now on (a scheduled restart is rescheduled from now).
    pub fn set_faults(&self, faults: Faults) {
        let mut st = self.lock();
        st.next_restart = faults.restart_every.map(|e| self.inner.clock.elapsed() + e);
        st.faults = faults;
    }

    /// The faults injected.
    pub fn faults(&self) -> Faults {
        self.lock().faults.clone()
    }

    /// Serves `resource` (any group, version and plural), as if its CRD had been created;
    /// `status` gives it a status subresource.
    pub fn register(&self, resource: &Resource, status: bool) {
        self.lock().register(resource, status, true);
    }

    /// The last resourceVersion handed out.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// Compacts history: lists and watches from any resourceVersion before now get 410.
    pub fn compact(&self) {
        self.lock().compact();
    }

    /// Restarts the server: every watch ends (a connection reset), history is compacted, and
    /// connections are refused for the faults' `downtime`.
    pub fn restart(&self) {
        let mut st = self.lock();
        st.now = self.inner.clock.elapsed();
        st.restart();
    }

    /// Time on the cluster's clock since it was built.
    pub fn elapsed(&self) -> Duration {
        self.inner.clock.elapsed()
    }

    /// The object `name` of `resource` (in `namespace` when namespaced), read directly.
    pub fn get(&self, resource: &Resource, namespace: Option<&str>, name: &str) -> Option<Value> {
        let st = self.lock();
        let ns = if resource.namespaced {
            namespace.unwrap_or("")
        } else {
            ""
        };
        st.get(
            &(resource.group.to_string(), resource.plural.to_string()),
            &(ns.to_string(), name.to_string()),
        )
        .map(|v| (*v).clone())
    }

    /// The objects of `resource` (in `namespace`, or all), in key order, read directly.
    pub fn list(&self, resource: &Resource, namespace: Option<&str>) -> Vec<Value> {
        let st = self.lock();
        st.objects
            .get(&(resource.group.to_string(), resource.plural.to_string()))
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| namespace.is_none_or(|n| n == k.0))
                    .map(|(_, v)| (**v).clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The requests served so far (at most a million), in the order they were answered.
    pub fn trace(&self) -> Vec<TraceEntry> {
        self.lock().trace.clone()
    }

    /// How many watches are open.
    pub fn open_watches(&self) -> usize {
        self.lock().watchers.len()
    }
}

impl Backend for FakeCluster {
    fn send(&self, request: http::Request<Bytes>) -> BoxFuture<'_, Result<HttpResponse, Failure>> {
        self.serve(request)
    }
}
