//! The informer: builder, handle, handler registrations, event streams, and the driver task.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::task::{Context, Poll};
use std::time::Duration;

use event_listener::Event;
use futures_util::future::{AbortHandle, Abortable, Either, poll_fn, select};
use futures_util::stream::{Stream, StreamExt};
use informer_core::indexer::IndexFunc;
use informer_core::informer::{InformerConfig, Output, Transform};
use informer_core::protocol::{Failure, Input as TransportInput, Request, Selectors, WatchEvent};
use informer_core::reflector::{BackoffConfig, ReflectorConfig, RequestId};
use informer_core::{HandlerId, Instant, Notification, Object, SharedIndexInformer};
use informer_http::{Backend, Client, Resource, Transport};
use serde::de::DeserializeOwned;

use crate::error::Error;
use crate::handler::{EventHandler, HandlerStats, Worker, spawn_worker};
use crate::metrics::{Counters, Metrics};
use crate::runtime::{BoxFuture, Runtime};
use crate::store::Store;

/// Called with every list or watch failure (client-go's `WatchErrorHandler`). Recovery is
/// already under way; this is for logging and metrics. It runs on the driver task: keep it
/// quick. A panic in it is caught and logged.
pub type WatchErrorHook = Arc<dyn Fn(&Failure) + Send + Sync>;

/// Inputs at most applied under one write lock (bounds how long readers can wait).
const BATCH: usize = 64;
/// Transport results buffered between a request task and the driver.
const RESULTS_CAPACITY: usize = 256;

/// What the cache lock guards: the core and where each handler's notifications go.
pub(crate) struct State<K> {
    pub(crate) core: SharedIndexInformer<K>,
    sinks: HashMap<HandlerId, Sink<K>>,
    /// Cloned into every handler worker; taken at shutdown so the driver sees them all exit.
    exited: Option<async_channel::Sender<()>>,
    stopped: bool,
}

struct Sink<K> {
    tx: async_channel::Sender<Notification<K>>,
    stats: Arc<HandlerStats>,
}

/// The lock around [`State`]; a poisoned lock is still used (nothing in it can be left half
/// changed by a panic in this crate, which has none on purpose).
pub(crate) struct StateLock<K>(RwLock<State<K>>);

impl<K> StateLock<K> {
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State<K>> {
        self.0.read().unwrap_or_else(PoisonError::into_inner)
    }
    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, State<K>> {
        self.0.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Commands to the driver.
#[derive(Debug)]
pub(crate) enum Cmd {
    /// Something was fed to the core outside the driver: drain its outputs.
    Wake,
    /// An event stream's consumer finished its notification.
    HandlerDone(HandlerId),
    /// Remove a handler (an event stream was dropped).
    RemoveHandler(HandlerId),
    /// Shut down.
    Stop,
}

enum Input<K> {
    Cmd(Cmd),
    Result(RequestId, TransportInput<K>),
    Timer,
}

/// Everything the handles and the driver share.
pub(crate) struct Shared<K, R> {
    pub(crate) state: Arc<StateLock<K>>,
    rt: R,
    base: std::time::Instant,
    cmd: async_channel::Sender<Cmd>,
    changed: Arc<Event>,
    counters: Arc<Counters>,
    name: String,
    default_resync: Duration,
    /// Set by the driver once it has stopped and every handler worker has exited.
    finished: AtomicBool,
}

impl<K: Object + Send + Sync + 'static, R: Runtime> Shared<K, R> {
    fn now(&self) -> Instant {
        Instant::from_epoch(self.rt.now().saturating_duration_since(self.base))
    }

    fn wake(&self) {
        let _ = self.cmd.try_send(Cmd::Wake);
    }

    fn remove_handler(&self, id: HandlerId) -> bool {
        let removed = {
            let mut st = self.state.write();
            if let Some(s) = st.sinks.remove(&id) {
                s.stats.active.store(false, Ordering::Release);
            }
            st.core.remove_handler(id)
        };
        if removed {
            tracing::debug!(informer = %self.name, handler = id.0, "handler removed");
        }
        self.wake();
        removed
    }

    /// Waits until `cond` holds, the informer stops (error) or `timeout` passes (error).
    async fn wait_until(
        &self,
        cond: impl Fn(&State<K>) -> bool,
        timeout: Option<Duration>,
    ) -> Result<(), Error> {
        let wait = async {
            loop {
                let listener = self.changed.listen();
                {
                    let st = self.state.read();
                    if cond(&st) {
                        return Ok(());
                    }
                    if st.stopped {
                        return Err(Error::Stopped);
                    }
                }
                listener.await;
            }
        };
        match timeout {
            None => wait.await,
            Some(t) => match select(Box::pin(wait), self.rt.sleep(t)).await {
                Either::Left((r, _)) => r,
                Either::Right(_) => Err(Error::Timeout),
            },
        }
    }
}

/// Builds an [`Informer`]: what to watch and how to cache and index it.
///
/// ```no_run
/// # async fn f<R: informer_runtime::Runtime + Default, B: informer_http::Backend>(client: informer_http::Client<B>) -> Result<(), informer_runtime::Error> {
/// use std::time::Duration;
/// use informer_core::{DynamicObject, indexer::index_fn};
/// use informer_runtime::Informer;
///
/// let informer = Informer::<DynamicObject, R>::builder(&client, informer_http::Resource::CONFIGMAPS)
///     .namespace("default")
///     .label_selector("app=web")
///     .resync(Duration::from_secs(30))
///     .index("by-app", index_fn(|o: &DynamicObject| o.label("app").map(Into::into).into_iter().collect()))
///     .build()?;
/// # Ok(()) }
/// ```
pub struct InformerBuilder<K, R> {
    rt: R,
    source: Source<K>,
    namespace: Option<String>,
    config: InformerConfig,
    default_resync: Duration,
    indexers: Vec<(String, Box<dyn IndexFunc<K>>)>,
    transform: Option<Transform<K>>,
    watch_error: Option<WatchErrorHook>,
    name: String,
    seed_set: bool,
}

type MakeTransport<K> = Box<dyn FnOnce(Option<&str>) -> Arc<dyn Transport<K>> + Send>;

enum Source<K> {
    Transport(Arc<dyn Transport<K>>),
    Api(MakeTransport<K>),
}

impl<K, R> fmt::Debug for InformerBuilder<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InformerBuilder")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("config", &self.config)
            .field("default_resync", &self.default_resync)
            .finish_non_exhaustive()
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> InformerBuilder<K, R> {
    /// An informer of `resource` through `client`, decoding objects as `K` (a typed object or
    /// [`DynamicObject`](informer_core::DynamicObject)), on runtime `rt`.
    pub fn new<B: Backend>(rt: R, client: &Client<B>, resource: Resource) -> Self
    where
        K: DeserializeOwned,
    {
        let client = client.clone();
        let name = if resource.group.is_empty() {
            resource.plural.to_string()
        } else {
            format!("{}/{}", resource.group, resource.plural)
        };
        let make: MakeTransport<K> =
            Box::new(move |ns| Arc::new(client.api::<K>(resource, ns)) as Arc<dyn Transport<K>>);
        Self::with_source(rt, Source::Api(make), name)
    }

    /// An informer fed by any [`Transport`] (a wrapper around an [`Api`](informer_http::Api),
    /// a fake in tests). [`namespace`](Self::namespace) does not apply: the transport decides.
    pub fn from_transport(
        rt: R,
        transport: Arc<dyn Transport<K>>,
        name: impl Into<String>,
    ) -> Self {
        Self::with_source(rt, Source::Transport(transport), name.into())
    }

    fn with_source(rt: R, source: Source<K>, name: String) -> Self {
        InformerBuilder {
            rt,
            source,
            namespace: None,
            config: InformerConfig::default(),
            default_resync: Duration::ZERO,
            indexers: Vec::new(),
            transform: None,
            watch_error: None,
            name,
            seed_set: false,
        }
    }

    /// Only objects in `namespace` (default: all namespaces).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        let ns: String = namespace.into();
        self.namespace = (!ns.is_empty()).then_some(ns);
        self
    }

    /// A label selector, e.g. `app=web,tier!=db`.
    pub fn label_selector(mut self, selector: impl Into<String>) -> Self {
        self.config.reflector.selectors.label = Some(selector.into());
        self
    }

    /// A field selector, e.g. `status.phase=Running`.
    pub fn field_selector(mut self, selector: impl Into<String>) -> Self {
        self.config.reflector.selectors.field = Some(selector.into());
        self
    }

    /// The resync check period, also the resync period of handlers added with
    /// [`Informer::add_handler`] (client-go's `defaultEventHandlerResyncPeriod`). 0 (the
    /// default): no resyncs.
    pub fn resync(mut self, period: Duration) -> Self {
        self.config.resync_check_period = period;
        self.default_resync = period;
        self
    }

    /// A named index (see [`index_fn`](informer_core::indexer::index_fn)). The namespace index
    /// is built in.
    pub fn index(mut self, name: impl Into<String>, func: impl IndexFunc<K> + 'static) -> Self {
        self.indexers.push((name.into(), Box::new(func)));
        self
    }

    /// A transform applied to every object before it is cached (e.g. dropping
    /// `managedFields`). It must not change the namespace or name. Like index functions, it
    /// runs inside the driver's step and must not panic.
    pub fn transform(mut self, f: impl Fn(Arc<K>) -> Arc<K> + Send + Sync + 'static) -> Self {
        self.transform = Some(Box::new(f));
        self
    }

    /// Called with every list or watch failure; runs on the driver task, so keep it quick.
    pub fn on_watch_error(mut self, f: impl Fn(&Failure) + Send + Sync + 'static) -> Self {
        self.watch_error = Some(Arc::new(f));
        self
    }

    /// The list/watch backoff (client-go's defaults unless set).
    pub fn backoff(mut self, backoff: BackoffConfig) -> Self {
        self.config.reflector.backoff = backoff;
        self
    }

    /// The whole reflector configuration (page size, streaming list, watch timeouts, backoff,
    /// seed); selectors set on this builder are kept. Without it, the seed of the backoff
    /// jitter and watch timeouts is random per informer, so that informers restarted together
    /// do not retry in lockstep.
    pub fn reflector_config(mut self, config: ReflectorConfig) -> Self {
        self.seed_set = true;
        let selectors: Selectors = self.config.reflector.selectors.clone();
        self.config.reflector = config;
        self.config.reflector.selectors = selectors;
        self
    }

    /// Creates the informer and its driver task. It does not list or watch before
    /// [`Informer::start`]; handlers may be added before.
    pub fn build(mut self) -> Result<Informer<K, R>, Error> {
        if !self.seed_set {
            use std::hash::BuildHasher;
            self.config.reflector.seed =
                std::collections::hash_map::RandomState::new().hash_one(&self.name);
        }
        let mut core = SharedIndexInformer::new(self.config);
        for (name, func) in self.indexers {
            core.add_index(&name, BoxedIndex(func))?;
        }
        if let Some(t) = self.transform {
            core.set_transform(t);
        }
        let name = match &self.namespace {
            Some(ns) => format!("{}@{ns}", self.name),
            None => self.name,
        };
        let transport = match self.source {
            Source::Transport(t) => t,
            Source::Api(make) => make(self.namespace.as_deref()),
        };
        let (exited_tx, exited_rx) = async_channel::unbounded();
        let state = Arc::new(StateLock(RwLock::new(State {
            core,
            sinks: HashMap::new(),
            exited: Some(exited_tx),
            stopped: false,
        })));
        let (cmd_tx, cmd_rx) = async_channel::unbounded();
        let (res_tx, res_rx) = async_channel::bounded(RESULTS_CAPACITY);
        let shared = Arc::new(Shared {
            state,
            base: self.rt.now(),
            rt: self.rt.clone(),
            cmd: cmd_tx,
            changed: Arc::new(Event::new()),
            counters: Arc::new(Counters::default()),
            name,
            default_resync: self.default_resync,
            finished: AtomicBool::new(false),
        });
        let driver = Driver {
            shared: shared.clone(),
            transport,
            cmd_rx: Box::pin(cmd_rx),
            res_tx,
            res_rx: Box::pin(res_rx),
            inflight: None,
            timer: None,
            exited_rx,
            watch_error: self.watch_error,
            backoff_until: None,
            local: VecDeque::new(),
            batch: Vec::with_capacity(BATCH),
            outs: Vec::new(),
        };
        self.rt.spawn(Box::pin(driver.run()))?;
        Ok(Informer {
            inner: Arc::new(Inner { shared }),
        })
    }
}

struct BoxedIndex<K>(Box<dyn IndexFunc<K>>);

impl<K> IndexFunc<K> for BoxedIndex<K> {
    fn index_values<'a>(&self, obj: &'a K) -> informer_core::indexer::IndexValues<'a> {
        self.0.index_values(obj)
    }
}

/// A running shared index informer (client-go `SharedIndexInformer`): lists and watches one
/// resource, keeps an indexed cache, and tells every handler what changed in it.
///
/// Cheap to clone. Dropping the last clone stops it like [`shutdown`](Self::shutdown) without
/// waiting; [`Store`]s stay readable (frozen at the last state).
///
/// # Consistency contract
///
/// Like client-go's `SharedInformer`, an informer links its cache and its handlers to the
/// server's state eventually, not at every instant. The numbered behaviours behind this are
/// [`conformance`](crate::conformance) (`docs/CONFORMANCE.md`).
///
/// **The cache** ([`store`](Self::store)):
///
/// - It goes through a subsequence of the states the watched collection (the resource, narrowed
///   by namespace and selectors, after the [`transform`](InformerBuilder::transform)) had on
///   the server, in resourceVersion order: a watch event moves it to the next state; a relist
///   jumps to the listed state without replaying the changes in between (an object missing
///   from the list is deleted, its handlers told with a [`Tombstone`](crate::Tombstone)). It is
///   empty until the first list is applied.
/// - Every [`Store`] call answers from one of those states, never from a mix of two: a relist
///   is applied in one step. [`last_sync_resource_version`](Self::last_sync_resource_version)
///   is the resourceVersion of a state the cache is in.
/// - Eventual consistency: once the server is quiet and reachable, the cache equals the
///   server's collection (CONFORMANCE 25), unless the informer was shut down first.
/// - An object's identity is its key (`namespace/name`), not its uid: an object deleted and
///   created again under the same name while no watch saw it (across a relist) shows as an
///   update whose `old` and `new` uids differ. Compare [`Object::uid`] where that matters.
///
/// **Each handler** (an [`EventHandler`] or an [`EventStream`]), independently of the others:
///
/// - A notification is issued after the cache change it reports (cache and indices first).
///   By the time the handler runs it, the cache may have moved on: the store may hold a newer
///   state of the object, or none.
/// - Notifications are delivered one at a time: the next one is handed over only when the
///   previous one is finished (a handler method returned, or an event stream's consumer asks
///   for the next). A slow handler holds back only itself.
/// - Per object, in order: the notifications for one key describe a subsequence of the states
///   the cache held for it, ending at the latest. `Add` comes for an object the handler does
///   not know, `Update { old, new }` has `old` = the state the handler heard last, `Delete`
///   carries the last state the cache held (a tombstone when a relist found it gone). So the
///   fold of a handler's notifications is always a valid view of the collection, and equals the
///   cache once the informer is quiet and the handler has caught up.
/// - No order across objects: keys are delivered in the order their first pending change
///   arrived. A handler that is behind may hold, between two notifications, a view combining
///   states of different objects that the cache never held at the same instant.
/// - Nothing is lost: every change made to the cache after the handler was added reaches it,
///   as that state or a later one of the same object, unless the handler is removed or the
///   informer shut down first. A handler added after sync first hears one `Add` per cached
///   object (`in_initial_list`), then live changes, with nothing lost or doubled across the
///   join. A resync is an `Update` whose `old` and `new` have the same resourceVersion, sent
///   only to the handlers due for one.
/// - A handler that panics is reported and goes on with its next notification.
///
/// **Coalescing**, where this deliberately differs from client-go: client-go buffers every
/// notification for every handler without bound, so a stalled handler grows its buffer until
/// the process runs out of memory. Here a handler has at most one pending entry per key, and a
/// new change to a key that has one merges into it. What that guarantees:
///
/// - A change is skipped only when a newer change to the same object arrives before the
///   handler has started on it. A handler that keeps up hears every change, as in client-go.
/// - A handler that is behind hears, per object, the latest state and possibly fewer of the
///   states in between; an `Add` followed by a `Delete` it had not started cancels out (it
///   never hears of the object).
/// - Coalescing never merges a deletion and a re-creation into an update (the handler hears the
///   `Delete`, then the `Add`), and never shows an object going back to an older
///   resourceVersion.
/// - A handler's pending notifications are at most one per key in the cache or in its view
///   ([`HandlerRegistration::pending`]).
///
/// Program a controller against this the way client-go controllers already work through their
/// work queues: take a notification as "this object changed, here is a recent state", read the
/// store when acting on it, and do not rely on hearing every intermediate state.
pub struct Informer<K, R> {
    inner: Arc<Inner<K, R>>,
}

struct Inner<K, R> {
    shared: Arc<Shared<K, R>>,
}

impl<K, R> Drop for Inner<K, R> {
    fn drop(&mut self) {
        let _ = self.shared.cmd.try_send(Cmd::Stop);
    }
}

impl<K, R> Clone for Informer<K, R> {
    fn clone(&self) -> Self {
        Informer {
            inner: self.inner.clone(),
        }
    }
}

impl<K, R> fmt::Debug for Informer<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informer")
            .field("name", &self.inner.shared.name)
            .finish_non_exhaustive()
    }
}

type Registered<K> = (
    HandlerId,
    Arc<HandlerStats>,
    async_channel::Receiver<Notification<K>>,
);

type Results<K> = Pin<Box<async_channel::Receiver<(RequestId, TransportInput<K>)>>>;

enum SinkKind<K> {
    Worker(Box<dyn EventHandler<K>>),
    Stream,
}

impl<K: Object + Send + Sync + 'static, R: Runtime + Default> Informer<K, R> {
    /// A builder for an informer of `resource` through `client` on the default instance of
    /// runtime `R`.
    pub fn builder<B: Backend>(client: &Client<B>, resource: Resource) -> InformerBuilder<K, R>
    where
        K: DeserializeOwned,
    {
        InformerBuilder::new(R::default(), client, resource)
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> Informer<K, R> {
    fn shared(&self) -> &Arc<Shared<K, R>> {
        &self.inner.shared
    }

    /// A name for logs: the resource's plural (with its group), `@namespace` if any.
    pub fn name(&self) -> &str {
        &self.shared().name
    }

    /// Starts listing and watching (and the resync timer). Idempotent.
    pub fn start(&self) -> Result<(), Error> {
        let sh = self.shared();
        {
            let mut st = sh.state.write();
            if st.stopped {
                return Err(Error::Stopped);
            }
            st.core.start(sh.now());
        }
        tracing::info!(informer = %sh.name, "informer started");
        sh.wake();
        Ok(())
    }

    /// Adds a handler with the informer's resync period (see [`InformerBuilder::resync`]).
    pub fn add_handler(
        &self,
        handler: impl EventHandler<K>,
    ) -> Result<HandlerRegistration<K, R>, Error> {
        self.add_handler_with_resync(handler, self.shared().default_resync)
    }

    /// Adds a handler asking for a resync every `resync` (0: never; below 1 s: 1 s; added after
    /// start: at least the informer's check period). Added after the informer has synced, it
    /// first receives one add per cached object (flagged `in_initial_list`), then live events:
    /// nothing is lost or doubled across the join.
    ///
    /// The handler runs on a thread of its own (see [`EventHandler`]).
    pub fn add_handler_with_resync(
        &self,
        handler: impl EventHandler<K>,
        resync: Duration,
    ) -> Result<HandlerRegistration<K, R>, Error> {
        let (id, stats, _) = self.register(resync, SinkKind::Worker(Box::new(handler)))?;
        Ok(HandlerRegistration {
            shared: self.shared().clone(),
            id,
            stats,
        })
    }

    /// Notifications as a [`Stream`]: a handler whose consumer pulls. The next notification is
    /// handed over only when the consumer asks for it, so a slow consumer holds back only
    /// itself (its backlog is the informer's bounded, per-key coalesced queue). Dropping the
    /// stream removes the handler. Resync period: the informer's.
    pub fn event_stream(&self) -> Result<EventStream<K, R>, Error> {
        self.event_stream_with_resync(self.shared().default_resync)
    }

    /// [`event_stream`](Self::event_stream) with its own resync period.
    pub fn event_stream_with_resync(&self, resync: Duration) -> Result<EventStream<K, R>, Error> {
        let (id, stats, rx) = self.register(resync, SinkKind::Stream)?;
        Ok(EventStream {
            shared: self.shared().clone(),
            id,
            stats,
            rx: Box::pin(rx),
            outstanding: false,
        })
    }

    fn register(&self, resync: Duration, kind: SinkKind<K>) -> Result<Registered<K>, Error> {
        let sh = self.shared();
        let (tx, rx) = async_channel::unbounded();
        let stats = Arc::new(HandlerStats::default());
        stats.active.store(true, Ordering::Release);
        let id = {
            let mut st = sh.state.write();
            if st.stopped {
                return Err(Error::Stopped);
            }
            let Some(exited) = st.exited.clone() else {
                return Err(Error::Stopped);
            };
            let (id, periods) = st.core.add_handler(resync, sh.now());
            if let SinkKind::Worker(h) = kind {
                if let Err(e) = spawn_worker(Worker {
                    informer: sh.name.clone(),
                    id,
                    handler: h,
                    rx: rx.clone(),
                    state: sh.state.clone(),
                    changed: sh.changed.clone(),
                    stats: stats.clone(),
                    metrics: sh.counters.clone(),
                    exited,
                }) {
                    st.core.remove_handler(id);
                    return Err(Error::Thread(e));
                }
            }
            st.sinks.insert(
                id,
                Sink {
                    tx,
                    stats: stats.clone(),
                },
            );
            tracing::debug!(
                informer = %sh.name,
                handler = id.0,
                resync = ?periods.effective,
                "handler added"
            );
            id
        };
        sh.wake();
        Ok((id, stats, rx))
    }

    /// Adds an index; objects already cached are indexed at once.
    pub fn add_index(&self, name: &str, func: impl IndexFunc<K> + 'static) -> Result<(), Error> {
        self.shared().state.write().core.add_index(name, func)?;
        Ok(())
    }

    /// A read handle on the cache.
    pub fn store(&self) -> Store<K> {
        Store {
            state: self.shared().state.clone(),
        }
    }

    /// Whether the first list has been applied and handed to the handlers.
    pub fn has_synced(&self) -> bool {
        self.shared().state.read().core.has_synced()
    }

    /// Whether the informer has been shut down.
    pub fn is_stopped(&self) -> bool {
        self.shared().state.read().stopped
    }

    /// The resourceVersion of the last list or event applied (empty before the first list).
    pub fn last_sync_resource_version(&self) -> String {
        self.shared()
            .state
            .read()
            .core
            .last_sync_resource_version()
            .to_string()
    }

    /// The informer's counters.
    pub fn metrics(&self) -> Metrics {
        self.shared().counters.snapshot()
    }

    /// Notifications pending for handler `id` (at most one per cached key; 0 when unknown).
    pub fn pending(&self, id: HandlerId) -> usize {
        self.shared().state.read().core.pending(id)
    }

    /// Waits until the informer has synced; `timeout` `None` waits as long as it takes.
    /// Fails with [`Error::Timeout`] or [`Error::Stopped`].
    pub async fn wait_for_sync(&self, timeout: Option<Duration>) -> Result<(), Error> {
        self.shared()
            .wait_until(|st| st.core.has_synced(), timeout)
            .await
    }

    /// Shuts down and waits until done:
    ///
    /// 1. the list or watch in flight is abandoned (its task aborted) and no new one starts;
    /// 2. every handler is told to stop: a notification it is running finishes; one handed over
    ///    but not yet started, and every notification still pending in the informer, are
    ///    dropped; event streams end;
    /// 3. the driver waits for every handler thread to exit, then ends.
    ///
    /// The cache stays readable through existing [`Store`]s. Idempotent.
    pub async fn shutdown(&self) {
        let sh = self.shared();
        let _ = sh.cmd.try_send(Cmd::Stop);
        loop {
            let l = sh.changed.listen();
            if sh.finished.load(Ordering::Acquire) {
                return;
            }
            l.await;
        }
    }
}

/// A handler added to an informer (client-go `ResourceEventHandlerRegistration`). Dropping it
/// does not remove the handler: call [`remove`](Self::remove).
pub struct HandlerRegistration<K, R> {
    shared: Arc<Shared<K, R>>,
    id: HandlerId,
    stats: Arc<HandlerStats>,
}

impl<K, R> fmt::Debug for HandlerRegistration<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HandlerRegistration")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> HandlerRegistration<K, R> {
    /// The handler's id.
    pub fn id(&self) -> HandlerId {
        self.id
    }

    /// Whether the informer has synced and this handler has finished its initial adds.
    pub fn has_synced(&self) -> bool {
        self.shared.state.read().core.handler_has_synced(self.id)
    }

    /// Waits until [`has_synced`](Self::has_synced).
    pub async fn wait_for_sync(&self, timeout: Option<Duration>) -> Result<(), Error> {
        let id = self.id;
        self.shared
            .wait_until(move |st| st.core.handler_has_synced(id), timeout)
            .await
    }

    /// Notifications pending for this handler (at most one per key).
    pub fn pending(&self) -> usize {
        self.shared.state.read().core.pending(self.id)
    }

    /// Notifications this handler has finished.
    pub fn delivered(&self) -> u64 {
        self.stats.delivered.load(Ordering::Relaxed)
    }

    /// Panics caught in this handler.
    pub fn panics(&self) -> u64 {
        self.stats.panics.load(Ordering::Relaxed)
    }

    /// Removes the handler: it receives nothing new (a notification it is running finishes).
    /// Returns whether it was still registered.
    pub fn remove(&self) -> bool {
        self.shared.remove_handler(self.id)
    }
}

/// Notifications as a [`Stream`] ([`Informer::event_stream`]). Ends when the informer shuts
/// down; dropping it removes the handler.
pub struct EventStream<K, R> {
    shared: Arc<Shared<K, R>>,
    id: HandlerId,
    stats: Arc<HandlerStats>,
    rx: Pin<Box<async_channel::Receiver<Notification<K>>>>,
    outstanding: bool,
}

impl<K, R> fmt::Debug for EventStream<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> EventStream<K, R> {
    /// The handler id behind this stream.
    pub fn id(&self) -> HandlerId {
        self.id
    }

    /// Whether the informer has synced and this stream's initial adds have been taken.
    pub fn has_synced(&self) -> bool {
        self.shared.state.read().core.handler_has_synced(self.id)
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> Stream for EventStream<K, R> {
    type Item = Notification<K>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.outstanding {
            // The consumer is back for more: the previous one is done.
            this.outstanding = false;
            this.stats.delivered.fetch_add(1, Ordering::Relaxed);
            let _ = this.shared.cmd.try_send(Cmd::HandlerDone(this.id));
        }
        if !this.stats.active.load(Ordering::Acquire) {
            return Poll::Ready(None);
        }
        match this.rx.as_mut().poll_next(cx) {
            Poll::Ready(Some(n)) => {
                this.outstanding = true;
                Poll::Ready(Some(n))
            }
            other => other,
        }
    }
}

impl<K, R> Drop for EventStream<K, R> {
    fn drop(&mut self) {
        self.stats.active.store(false, Ordering::Release);
        let _ = self.shared.cmd.try_send(Cmd::RemoveHandler(self.id));
    }
}

/// Something that can say whether it has synced and wait for it: an [`Informer`], a
/// [`HandlerRegistration`], an [`EventStream`].
pub trait CacheSync: Send + Sync {
    /// Whether it has synced.
    fn is_synced(&self) -> bool;
    /// Resolves once synced (or with [`Error::Stopped`]).
    fn synced(&self) -> BoxFuture<'_, Result<(), Error>>;
}

impl<K: Object + Send + Sync + 'static, R: Runtime> CacheSync for Informer<K, R> {
    fn is_synced(&self) -> bool {
        self.has_synced()
    }
    fn synced(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.wait_for_sync(None))
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> CacheSync for HandlerRegistration<K, R> {
    fn is_synced(&self) -> bool {
        self.has_synced()
    }
    fn synced(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.wait_for_sync(None))
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> CacheSync for EventStream<K, R> {
    fn is_synced(&self) -> bool {
        self.has_synced()
    }
    fn synced(&self) -> BoxFuture<'_, Result<(), Error>> {
        let id = self.id;
        Box::pin(
            self.shared
                .wait_until(move |st| st.core.handler_has_synced(id), None),
        )
    }
}

/// Waits until every one of `items` has synced (client-go `WaitForCacheSync`), at most
/// `timeout` in all (`None`: as long as it takes).
pub async fn wait_for_cache_sync<R: Runtime>(
    rt: &R,
    items: &[&dyn CacheSync],
    timeout: Option<Duration>,
) -> Result<(), Error> {
    let all = async {
        for i in items {
            i.synced().await?;
        }
        Ok(())
    };
    match timeout {
        None => all.await,
        Some(t) => match select(Box::pin(all), rt.sleep(t)).await {
            Either::Left((r, _)) => r,
            Either::Right(_) => Err(Error::Timeout),
        },
    }
}

/// The driver task: the only place outputs of the core are drained and acted upon.
struct Driver<K, R> {
    shared: Arc<Shared<K, R>>,
    transport: Arc<dyn Transport<K>>,
    cmd_rx: Pin<Box<async_channel::Receiver<Cmd>>>,
    res_tx: async_channel::Sender<(RequestId, TransportInput<K>)>,
    res_rx: Results<K>,
    inflight: Option<AbortHandle>,
    timer: Option<(Instant, BoxFuture<'static, ()>)>,
    exited_rx: async_channel::Receiver<()>,
    watch_error: Option<WatchErrorHook>,
    backoff_until: Option<Instant>,
    /// Inputs produced by the driver itself (a request that could not be spawned).
    local: VecDeque<Input<K>>,
    /// Reused across loop turns so that a turn (often one watch event) allocates nothing.
    batch: Vec<Input<K>>,
    /// Reused across loop turns, as `batch`.
    outs: Vec<Output<K>>,
}

impl<K: Object + Send + Sync + 'static, R: Runtime> Driver<K, R> {
    async fn next_input(&mut self) -> Input<K> {
        if let Some(i) = self.local.pop_front() {
            return i;
        }
        poll_fn(|cx| {
            if let Poll::Ready(Some(c)) = self.cmd_rx.as_mut().poll_next(cx) {
                return Poll::Ready(Input::Cmd(c));
            }
            if let Poll::Ready(Some((id, r))) = self.res_rx.as_mut().poll_next(cx) {
                return Poll::Ready(Input::Result(id, r));
            }
            if let Some((_, t)) = &mut self.timer {
                if t.as_mut().poll(cx).is_ready() {
                    self.timer = None;
                    return Poll::Ready(Input::Timer);
                }
            }
            Poll::Pending
        })
        .await
    }

    fn try_input(&mut self) -> Option<Input<K>> {
        if let Some(i) = self.local.pop_front() {
            return Some(i);
        }
        if let Ok(c) = self.cmd_rx.try_recv() {
            return Some(Input::Cmd(c));
        }
        self.res_rx
            .try_recv()
            .ok()
            .map(|(id, r)| Input::Result(id, r))
    }

    async fn run(mut self) {
        let name = self.shared.name.clone();
        tracing::debug!(informer = %name, "driver running");
        loop {
            let first = self.next_input().await;
            let mut batch = std::mem::take(&mut self.batch);
            batch.push(first);
            while batch.len() < BATCH {
                match self.try_input() {
                    Some(i) => batch.push(i),
                    None => break,
                }
            }
            let now = self.shared.now();
            let mut outs = std::mem::take(&mut self.outs);
            let mut stop = false;
            let shared = self.shared.clone();
            // User code runs inside this step (transform, index functions). A panic there
            // leaves the core possibly half-updated: stop the informer rather than go on with
            // a cache that may be wrong, and say why. Readers keep the last state.
            let step = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut st = shared.state.write();
                let st = &mut *st;
                for input in batch.drain(..) {
                    self.apply(st, input, now, &mut stop);
                    drain(st, &mut outs);
                }
                stop_if(st, stop);
                let deadline = st.core.poll_timeout();
                let backoff = st.core.backing_off_until().filter(|t| *t > now);
                (deadline, backoff)
            }));
            let (deadline, backoff) = match step {
                Ok(v) => v,
                Err(_) => {
                    tracing::error!(
                        informer = %name,
                        "a transform or index function panicked: the informer stops"
                    );
                    stop = true;
                    outs.clear();
                    stop_if(&mut shared.state.write(), true);
                    (None, None)
                }
            };
            for o in outs.drain(..) {
                match o {
                    Output::Request { id, request } => self.start_request(id, request),
                    Output::WatchError(f) => {
                        self.shared.counters.watch_error(&f);
                        tracing::warn!(informer = %name, kind = f.kind(), error = %f, "list/watch failed");
                        if let Some(h) = &self.watch_error {
                            let caught =
                                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| h(&f)));
                            if caught.is_err() {
                                tracing::error!(informer = %name, "the watch-error hook panicked");
                            }
                        }
                    }
                    Output::Notify { .. } => {}
                }
            }
            self.batch = batch;
            self.outs = outs;
            if backoff != self.backoff_until {
                if let Some(until) = backoff {
                    self.shared
                        .counters
                        .backoffs
                        .fetch_add(1, Ordering::Relaxed);
                    tracing::info!(
                        informer = %name,
                        delay = ?(until - now),
                        "backing off before the next list/watch"
                    );
                }
                self.backoff_until = backoff;
            }
            if stop {
                if let Some(h) = self.inflight.take() {
                    h.abort();
                }
                self.timer = None;
                self.shared.changed.notify(usize::MAX);
                // Every worker holds a sender; recv fails once all of them exited.
                let _ = self.exited_rx.recv().await;
                tracing::info!(informer = %name, "informer stopped");
                self.shared.finished.store(true, Ordering::Release);
                self.shared.changed.notify(usize::MAX);
                return;
            }
            match (deadline, &self.timer) {
                (None, _) => self.timer = None,
                (Some(d), Some((t, _))) if *t == d => {}
                (Some(d), _) => {
                    let sleep = self.shared.rt.sleep(d - now);
                    self.timer = Some((d, sleep));
                }
            }
            self.shared.changed.notify(usize::MAX);
        }
    }

    fn apply(&mut self, st: &mut State<K>, input: Input<K>, now: Instant, stop: &mut bool) {
        let c = &self.shared.counters;
        let core = &mut st.core;
        match input {
            Input::Cmd(Cmd::Wake) => {}
            Input::Cmd(Cmd::HandlerDone(id)) => core.handler_done(id),
            Input::Cmd(Cmd::RemoveHandler(id)) => {
                st.sinks.remove(&id);
                core.remove_handler(id);
            }
            Input::Cmd(Cmd::Stop) => *stop = true,
            Input::Timer => core.handle_timeout(now),
            Input::Result(id, r) => {
                match &r {
                    TransportInput::ListPage(p) => {
                        c.events_applied
                            .fetch_add(p.items.len() as u64, Ordering::Relaxed);
                    }
                    TransportInput::Event(
                        WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Deleted(_),
                    ) => {
                        c.events_applied.fetch_add(1, Ordering::Relaxed);
                    }
                    _ => {}
                }
                core.handle_input(now, id, r)
            }
        }
    }

    fn start_request(&mut self, id: RequestId, request: Request) {
        if let Some(h) = self.inflight.take() {
            h.abort();
        }
        let c = &self.shared.counters;
        let name = &self.shared.name;
        match &request {
            Request::List(l) if l.continue_token.is_none() => {
                let n = c.lists.fetch_add(1, Ordering::Relaxed);
                if n > 0 {
                    c.relists.fetch_add(1, Ordering::Relaxed);
                }
                tracing::info!(
                    informer = %name,
                    resource_version = ?l.resource_version,
                    limit = ?l.limit,
                    relist = n > 0,
                    "list"
                );
            }
            Request::List(l) => {
                tracing::debug!(informer = %name, limit = ?l.limit, "list: next page")
            }
            Request::Watch(w) => {
                let n = c.watches.fetch_add(1, Ordering::Relaxed);
                if n > 0 {
                    c.watch_restarts.fetch_add(1, Ordering::Relaxed);
                }
                tracing::debug!(
                    informer = %name,
                    resource_version = %w.resource_version,
                    timeout_seconds = ?w.timeout_seconds,
                    "watch"
                );
            }
        }
        let (handle, reg) = AbortHandle::new_pair();
        let task = Abortable::new(
            perform(self.transport.clone(), id, request, self.res_tx.clone()),
            reg,
        );
        match self.shared.rt.spawn(Box::pin(async move {
            let _ = task.await;
        })) {
            Ok(()) => self.inflight = Some(handle),
            Err(e) => {
                tracing::error!(informer = %name, error = %e, "cannot spawn a request task");
                self.local.push_back(Input::Result(
                    id,
                    TransportInput::Failed(Failure::other(e.to_string())),
                ));
            }
        }
    }
}

/// Drains the core's outputs: notifications go to their handler's sink at once (under the
/// lock, without blocking: the sinks are unbounded and hold at most one notification each);
/// the rest is acted upon after the lock is released.
/// Stops the core and detaches every handler, once.
fn stop_if<K: Object + Send + Sync + 'static>(st: &mut State<K>, stop: bool) {
    if stop && !st.stopped {
        st.core.stop();
        for (_, s) in st.sinks.drain() {
            s.stats.active.store(false, Ordering::Release);
        }
        st.exited = None;
        st.stopped = true;
    }
}

fn drain<K: Object + 'static>(st: &mut State<K>, outs: &mut Vec<Output<K>>) {
    while let Some(o) = st.core.poll() {
        match o {
            Output::Notify {
                handler,
                notification,
            } => {
                let delivered = match st.sinks.get(&handler) {
                    Some(s) => s.tx.try_send(notification).is_ok(),
                    None => false,
                };
                if !delivered {
                    // Removed, or its worker or stream is gone: nothing will ever finish it.
                    st.sinks.remove(&handler);
                    st.core.remove_handler(handler);
                }
            }
            other => outs.push(other),
        }
    }
}

/// Performs one request and feeds its results to the driver.
async fn perform<K: Send + Sync + 'static>(
    transport: Arc<dyn Transport<K>>,
    id: RequestId,
    request: Request,
    tx: async_channel::Sender<(RequestId, TransportInput<K>)>,
) {
    match request {
        Request::List(req) => {
            let r = match transport.list(&req).await {
                Ok(p) => TransportInput::ListPage(p),
                Err(f) => TransportInput::Failed(f),
            };
            let _ = tx.send((id, r)).await;
        }
        Request::Watch(req) => match transport.watch(&req).await {
            Err(f) => {
                let _ = tx.send((id, TransportInput::Failed(f))).await;
            }
            Ok(mut events) => {
                while let Some(e) = events.next().await {
                    if tx.send((id, TransportInput::Event(e))).await.is_err() {
                        return;
                    }
                }
                let _ = tx.send((id, TransportInput::StreamEnd)).await;
            }
        },
    }
}
