//! The [`Controller`] and what it hands a reconcile.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use event_listener::Event;
use futures_util::FutureExt;
use futures_util::future::{Either, select};
use informer_core::controller::leaderelection::LeaderElectionConfig;
use informer_core::object::{Key, Object, ObjectOrTombstone};
use informer_http::{Backend, Client, Resource, WriteHook};
use tracing::Instrument;

use crate::controller::{Action, WorkQueue, log_failure, panic_message, requeue};
use crate::error::Error;
use crate::events::{Recorder, Reporter};
use crate::informer::Informer;
use crate::leader::{LeaderElectionError, Leadership};
use crate::metrics::{Count, Gauge, Histogram};
use crate::runtime::{BoxFuture, Runtime, SpawnError};
use crate::shard::{Sharding, join_selectors};

/// Any informer the controller starts, syncs, stops and reads resourceVersions of.
trait Member: Send + Sync {
    fn start(&self) -> Result<(), Error>;
    fn wait_for_sync(&self) -> BoxFuture<'_, Result<(), Error>>;
    fn shutdown(&self) -> BoxFuture<'_, ()>;
    fn resource(&self) -> Option<&Resource>;
    fn wait_for_rv<'a>(&'a self, rv: &'a str, bound: Duration) -> BoxFuture<'a, Result<(), Error>>;
    /// Whether an object with `labels` can be in this informer (its label selector matches).
    fn may_show(&self, labels: &BTreeMap<String, String>) -> bool;
    #[cfg(feature = "admin")]
    fn add_checks(&self, admin: &crate::admin::Admin);
}

impl<T: Object + Send + Sync + 'static, R: Runtime> Member for Informer<T, R> {
    fn start(&self) -> Result<(), Error> {
        Informer::start(self)
    }
    fn wait_for_sync(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(Informer::wait_for_sync(self, None))
    }
    fn shutdown(&self) -> BoxFuture<'_, ()> {
        Box::pin(Informer::shutdown(self))
    }
    fn resource(&self) -> Option<&Resource> {
        Informer::resource(self)
    }
    fn wait_for_rv<'a>(&'a self, rv: &'a str, bound: Duration) -> BoxFuture<'a, Result<(), Error>> {
        let deadline = self.shared().rt.now() + bound;
        Box::pin(Informer::wait_for_resource_version(self, rv, deadline))
    }
    fn may_show(&self, labels: &BTreeMap<String, String>) -> bool {
        // An unreadable selector (the server would have refused the list) is taken as
        // matching: waiting too much is safer than reading too early.
        self.selectors().label.is_none_or(|s| {
            informer_core::object::selector::Selector::parse(&s)
                .map_or(true, |sel| sel.matches(labels))
        })
    }
    #[cfg(feature = "admin")]
    fn add_checks(&self, admin: &crate::admin::Admin) {
        admin.informer(self);
    }
}

/// What a reconcile gets besides the object.
pub struct Context<B: Backend> {
    key: Key,
    attempt: u32,
    deleted: bool,
    client: Client<B>,
    recorder: Option<Recorder>,
    /// The primary's resource (events about the object name it).
    resource: Option<Arc<Resource>>,
}

impl<B: Backend> fmt::Debug for Context<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("key", &self.key)
            .field("attempt", &self.attempt)
            .field("deleted", &self.deleted)
            .finish_non_exhaustive()
    }
}

impl<B: Backend> Context<B> {
    /// The key being reconciled (`namespace/name`).
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// How many times in a row this key failed before (0 on a first try).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// True on the [`on_delete`](Controller::on_delete) path: the object is gone, and what the
    /// reconcile got is its last state.
    pub fn is_deleted(&self) -> bool {
        self.deleted
    }

    /// The controller's client: its writes are fenced by leadership and recorded for
    /// read-your-writes (see [`Controller`]). Write through it.
    pub fn client(&self) -> &Client<B> {
        &self.client
    }

    /// The controller's event recorder, if one was given
    /// ([`recorder`](Controller::recorder)).
    pub fn recorder(&self) -> Option<&Recorder> {
        self.recorder.as_ref()
    }

    /// Records an event about `obj`, an object of the controller's primary resource, through
    /// the controller's recorder (never waits: see [`Recorder::publish`]). Does nothing and
    /// returns false without a recorder, or when the primary informer does not know its
    /// resource (use [`recorder`](Self::recorder) with a reference of your own then).
    pub fn publish<O: Object + ?Sized>(
        &self,
        obj: &O,
        event_type: crate::events::EventType,
        reason: &str,
        action: &str,
        message: impl Into<String>,
    ) -> bool {
        match (&self.recorder, &self.resource) {
            (Some(recorder), Some(resource)) => recorder.publish(
                crate::events::reference_to(resource, obj),
                event_type,
                reason,
                action,
                message,
            ),
            _ => false,
        }
    }
}

/// A controller's running counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ControllerStats {
    /// Reconciles finished (any outcome).
    pub reconciles: u64,
    /// Reconciles that returned an error or panicked.
    pub errors: u64,
    /// Reconciles cancelled because leadership was lost or the shutdown grace ran out.
    pub cancelled: u64,
    /// Reconciles that waited for the cache to show their key's last write.
    pub waited_for_writes: u64,
    /// Of those, the waits that ran out of time (the reconcile went on).
    pub write_waits_timed_out: u64,
    /// Writes refused because this replica did not lead.
    pub fenced_writes: u64,
}

#[derive(Default)]
struct Counts {
    reconciles: AtomicU64,
    errors: AtomicU64,
    cancelled: AtomicU64,
    waited: AtomicU64,
    wait_timeouts: AtomicU64,
    fenced: AtomicU64,
}

type Reconcile<K, B> =
    Arc<dyn Fn(Arc<K>, Context<B>) -> BoxFuture<'static, Result<Action, String>> + Send + Sync>;
type Trigger = BoxFuture<'static, ()>;
type Attach = Box<dyn FnOnce(&WorkQueue<Key>, Option<&str>) -> Result<(), ControllerError> + Send>;

/// A controller: informers, a work queue, reconcile workers, leader election and graceful
/// shutdown, wired as a controller needs them.
///
/// What it guarantees (each a test in `tests/reconciler.rs` or `tests/e2e.rs`):
///
/// - Every informer (the primary, owned and watched ones) is started and synced before any
///   reconcile runs, and before the controller campaigns for leadership, so a new leader is
///   warm: its first reconciles read a full cache.
/// - One key is never reconciled twice at once (the work queue's rule); up to `concurrency`
///   keys are.
/// - Keys from the initial list and resyncs wait behind keys from real changes (the work
///   queue's priorities).
/// - **Leadership fences work.** With leader election, no key starts unless this replica leads;
///   once it stops leading (the lease lost, or not renewed within the renew deadline, which is
///   before any other replica may acquire it) the reconciles in flight are **cancelled** (their
///   futures dropped at their next await: no write starts after that point), their keys queued
///   again, and every write through [`Context::client`] is refused with
///   [`WriteError::Refused`](informer_http::write::WriteError::Refused) until it leads again.
/// - **Read your writes.** A write through [`Context::client`] records the resourceVersion the
///   server answered; the next reconcile of the same key first waits (at most
///   [`read_your_writes`](Controller::read_your_writes), 5 s by default, then goes on with a
///   warning and a count in [`ControllerStats`]) until the informer of the written resource
///   shows that version or a newer one. So a reconcile never acts on a cache older than its
///   own last write (client-go 1.36's controllers do this, KEP-5647).
/// - A deleted object reaches the [`on_delete`](Controller::on_delete) path with its last
///   state, once.
/// - An error goes through the error policy: by default client-go's per-key exponential
///   backoff (5 ms doubling to 1000 s, and the 10 qps bucket); [`Action::RequeueAfter`] asks
///   for another look later.
/// - **Shutdown order**: on a shutdown trigger ([`shutdown_on`](Controller::shutdown_on),
///   [`shutdown_on_signal`](Controller::shutdown_on_signal)) the workers stop taking keys and
///   the reconciles in flight get [`shutdown_grace`](Controller::shutdown_grace) (10 s) to
///   finish before they are cancelled; then the lease is released (so a standby takes over at
///   once, not after the lease expires); then the informers stop. A deliberate stop logs no
///   warning.
///
/// Objects of type `K`, on runtime `R`, written through a client on backend `B`.
pub struct Controller<K, R: Runtime, B: Backend> {
    rt: R,
    client: Client<B>,
    primary: Informer<K, R>,
    kind: Option<String>,
    name: Option<String>,
    queue: WorkQueue<Key>,
    members: Vec<Box<dyn Member>>,
    /// The handlers of `owns` and `watches`, added at `run` (with the owner kind then).
    attach: Vec<Attach>,
    concurrency: usize,
    election: Option<(String, String, LeaderElectionConfig)>,
    shutdown: Vec<Trigger>,
    reconcile_all: Vec<futures_util::stream::BoxStream<'static, ()>>,
    grace: Duration,
    ryw_bound: Duration,
    on_delete: Option<Reconcile<K, B>>,
    recorder: Option<Recorder>,
    reporter: Option<Reporter>,
    stats: Arc<Counts>,
    deleted: Arc<Mutex<HashMap<Key, Arc<K>>>>,
    sharding: Option<Sharding>,
    /// Buckets mode: sets a bucket selector on each owned kind's informer (joined to its own).
    bucket_scoped: Vec<BucketScoped>,
    #[cfg(feature = "admin")]
    admin: Option<crate::admin::AdminServer>,
}

/// Sets the buckets' label selector (`<ring>/bucket in (…)`) on an owned kind's informer.
type BucketScoped = Box<dyn Fn(&str) + Send + Sync>;

/// Sets `label` as `informer`'s label selector (a relist when it changed).
fn set_label_selector<T: Object + Send + Sync + 'static, R: Runtime>(
    informer: &Informer<T, R>,
    label: String,
) {
    let mut selectors = informer.selectors();
    if selectors.label.as_deref() != Some(label.as_str()) {
        selectors.label = Some(label);
        let _ = informer.set_selectors(selectors);
    }
}

impl<K, R, B> Controller<K, R, B>
where
    K: Object + Send + Sync + 'static,
    R: Runtime,
    B: Backend,
{
    /// A controller of `primary`'s objects, writing through `client`. Its owner-reference
    /// kind (for [`owns`](Self::owns)) is the primary's resource kind (or `K`'s own kind).
    pub fn new(client: &Client<B>, primary: Informer<K, R>) -> Self {
        let queue = WorkQueue::new();
        let deleted: Arc<Mutex<HashMap<Key, Arc<K>>>> = Arc::default();
        let kind = primary
            .resource()
            .map(|r| r.kind.to_string())
            .or_else(|| K::type_kind().map(str::to_owned));
        let rt = primary.shared().rt.clone();
        queue.use_clock_of(&rt);
        Controller {
            rt,
            client: client.clone(),
            primary,
            kind,
            name: None,
            queue,
            members: Vec::new(),
            attach: Vec::new(),
            concurrency: 1,
            election: None,
            shutdown: Vec::new(),
            reconcile_all: Vec::new(),
            grace: Duration::from_secs(10),
            ryw_bound: Duration::from_secs(5),
            on_delete: None,
            recorder: None,
            reporter: None,
            stats: Arc::default(),
            deleted,
            sharding: None,
            bucket_scoped: Vec::new(),
            #[cfg(feature = "admin")]
            admin: None,
        }
    }

    /// The owner-reference kind children must name ([`owns`](Self::owns)), for a primary
    /// informer that does not know its resource.
    pub fn kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// The controller's name: the `controller` label of its metrics (and `name`, `controller`
    /// of its work queue's), and the `controller` field of its reconcile spans. Default: the
    /// owner-reference kind in lower case (`greeting`), as controller-runtime's builder names
    /// a controller, or `controller`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Reconciles the controller owner of each object of `child` that changes: the object's
    /// `ownerReferences` entry with `controller: true` whose kind is this controller's, in the
    /// child's namespace (client-go's `EnqueueRequestForOwner` with `OnlyControllerOwner`).
    pub fn owns<C: Object + Send + Sync + 'static>(mut self, child: Informer<C, R>) -> Self {
        // Attached at `run`, with the kind as it is then (`kind` may come after `owns`).
        let informer = child.clone();
        self.attach.push(Box::new(move |queue, kind| {
            let Some(kind) = kind.map(str::to_owned) else {
                return Err(ControllerError::NoOwnerKind);
            };
            let owner_of = move |c: &C| -> Vec<Key> {
                c.controller_owner()
                    .ok()
                    .flatten()
                    .filter(|r| r.kind == kind.as_str())
                    .map(|r| Key::new(c.namespace(), &r.name))
                    .into_iter()
                    .collect()
            };
            informer.add_handler(queue.handler(owner_of))?;
            Ok(())
        }));
        // Buckets mode: a child is labelled with its parent's bucket; its informer watches
        // this member's buckets as the primary's does (its own selector kept).
        let scoped = child.clone();
        let own = child.selectors().label;
        self.bucket_scoped.push(Box::new(move |buckets: &str| {
            set_label_selector(&scoped, join_selectors(own.as_deref(), buckets));
        }));
        self.members.push(Box::new(child));
        self
    }

    /// Reconciles the keys `mapper` names for each object of `other` that changes (any other
    /// relation: a Secret to the objects that mount it, a Namespace to everything in it).
    pub fn watches<T: Object + Send + Sync + 'static>(
        mut self,
        other: Informer<T, R>,
        mapper: impl Fn(&T) -> Vec<Key> + Send + Sync + 'static,
    ) -> Self {
        let informer = other.clone();
        self.attach.push(Box::new(move |queue, _kind| {
            informer.add_handler(queue.handler(move |o: &T| mapper(o)))?;
            Ok(())
        }));
        self.members.push(Box::new(other));
        self
    }

    /// Reconciles every cached object each time `trigger` yields (a config reload, a timer).
    pub fn reconcile_all_on(
        mut self,
        trigger: impl futures_util::Stream<Item = ()> + Send + 'static,
    ) -> Self {
        self.reconcile_all.push(Box::pin(trigger));
        self
    }

    /// Up to `n` keys reconciled at once (default 1).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Runs only while holding the Lease `namespace/name` (see [`Controller`] for the
    /// fencing). The election starts once every informer has synced.
    pub fn leader_election(
        mut self,
        namespace: &str,
        name: &str,
        config: LeaderElectionConfig,
    ) -> Self {
        self.election = Some((namespace.into(), name.into(), config));
        self
    }

    /// Runs as one member of a sharded ring ([`Sharding`]): a key starts only when this member
    /// owns its object ([`Sharding::try_start`]), and ends with [`Sharding::finish`]; workers
    /// start once the member holds its Lease; in the labels mode the primary informer must
    /// watch with [`Sharding::label_selector`], and drained objects are acknowledged as their
    /// reconciles end; in the filter, server and buckets modes every key is looked at again
    /// when the table changes, and the primary informer (and, in the buckets mode, the
    /// [`owns`](Self::owns) informers) get the member's new selector.
    /// A member that loses its Lease cancels its reconciles at once and `run` returns
    /// [`ControllerError::ShardRetired`]. At shutdown the member leaves the ring (its Lease
    /// written free) after the reconciles ended.
    pub fn shard(mut self, sharding: Sharding) -> Self {
        self.sharding = Some(sharding);
        self
    }

    /// Shuts the controller down (in the order [`Controller`] states) when `trigger`
    /// resolves. Several triggers: the first one.
    pub fn shutdown_on(mut self, trigger: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown.push(Box::pin(trigger));
        self
    }

    /// Shuts the controller down on SIGTERM or SIGINT (Ctrl-C). Installs the process's handler
    /// for both signals (once per process; later calls share it).
    pub fn shutdown_on_signal(self) -> Self {
        self.shutdown_on(signal())
    }

    /// How long reconciles in flight may take to finish at shutdown before they are cancelled
    /// (default 10 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The longest a reconcile waits for the cache to show its key's last write (default
    /// 5 s; zero turns the wait off).
    pub fn read_your_writes(mut self, bound: Duration) -> Self {
        self.ryw_bound = bound;
        self
    }

    /// Where a deleted object goes, with its last state (once per deletion). Without it,
    /// deletions reach no reconcile.
    pub fn on_delete<F, Fut, E>(mut self, cleanup: F) -> Self
    where
        F: Fn(Arc<K>, Context<B>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        self.on_delete = Some(Arc::new(move |obj, ctx| {
            let fut = cleanup(obj, ctx);
            Box::pin(async move { fut.await.map_err(|e| e.to_string()) })
        }));
        self
    }

    /// Records events as `reporter` (an [`events::Recorder`](crate::events::Recorder) on
    /// the controller's runtime and client), handed to reconciles through
    /// [`Context::recorder`].
    pub fn events(mut self, reporter: Reporter) -> Self {
        self.reporter = Some(reporter);
        self
    }

    /// Hands reconciles this `recorder` (shared with other code) through
    /// [`Context::recorder`].
    pub fn recorder(mut self, recorder: Recorder) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// Reports to `server` (the runtime crate's `serve_admin`): `/readyz` waits for each of
    /// the controller's informers to sync (`informer/<name>`) and, with leader election, for
    /// the election to run (`leader-election`: 503 until the controller campaigns, after its
    /// informers synced); `/livez` watches each informer's driver. The server is stopped
    /// last, after the informers, when the controller returns.
    /// `None` leaves the controller without one (for a process whose admin server is optional).
    #[cfg(feature = "admin")]
    pub fn admin(mut self, server: impl Into<Option<crate::admin::AdminServer>>) -> Self {
        self.admin = server.into();
        self
    }

    /// The work queue (to add keys from elsewhere).
    pub fn queue(&self) -> &WorkQueue<Key> {
        &self.queue
    }

    /// A handle reading the controller's counts while it runs.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle(self.stats.clone())
    }

    /// Runs until a shutdown trigger fires (or forever without one): starts and syncs every
    /// informer, campaigns if asked, and reconciles each queued key with `reconcile` while
    /// leading. Returns once everything has stopped, in the stated order.
    pub async fn run<F, Fut, E>(self, reconcile: F) -> Result<(), ControllerError>
    where
        F: Fn(Arc<K>, Context<B>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        let reconcile: Reconcile<K, B> = Arc::new(move |obj, ctx| {
            let fut = reconcile(obj, ctx);
            Box::pin(async move { fut.await.map_err(|e| e.to_string()) })
        });
        self.run_erased(reconcile).await
    }

    async fn run_erased(self, reconcile: Reconcile<K, B>) -> Result<(), ControllerError> {
        // Taken apart: nothing of `self` (its triggers are `Send`, not `Sync`) is held across
        // an await.
        let Controller {
            rt,
            client,
            primary,
            kind,
            name,
            queue,
            mut members,
            attach,
            concurrency,
            election,
            shutdown: triggers,
            reconcile_all,
            grace,
            ryw_bound,
            on_delete,
            mut recorder,
            reporter,
            stats,
            deleted,
            sharding,
            bucket_scoped,
            #[cfg(feature = "admin")]
            admin,
        } = self;
        // Stops the admin server last, however `run` returns.
        #[cfg(feature = "admin")]
        let mut _admin_last = AdminLast(admin.clone());
        let name: Arc<str> = name
            .or_else(|| kind.as_deref().map(str::to_lowercase))
            .unwrap_or_else(|| "controller".into())
            .into();
        queue.export_metrics(&name);
        let metrics = ReconcileMetrics::new(&name);
        metrics.max_concurrent.set(concurrency);
        if let (None, Some(reporter)) = (&recorder, reporter) {
            recorder = Some(Recorder::new(&rt, client.clone(), reporter)?);
        }
        // The primary's handler: its own key, and the last state of what is deleted.
        let keys = {
            let deleted = deleted.clone();
            let queue = queue.clone();
            queue
                .key_handler::<K>()
                .on_delete(move |gone: ObjectOrTombstone<K>| {
                    let obj = gone.object().clone();
                    let key = Key::from(obj.key_ref());
                    deleted
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(key.clone(), obj);
                    queue.add(key);
                })
        };
        primary.add_handler(keys)?;
        if let Some(s) = &sharding {
            // Labels mode: a drained object is acknowledged once its reconcile ends.
            let (seen, upd, gone) = (s.clone(), s.clone(), s.clone());
            primary.add_handler(
                crate::handler::HandlerFns::new()
                    .on_add(move |o: Arc<K>, _| seen.observe(&o.key_ref().to_string(), &*o))
                    .on_update(move |_, o: Arc<K>| upd.observe(&o.key_ref().to_string(), &*o))
                    .on_delete(move |o: ObjectOrTombstone<K>| {
                        gone.forget(&o.object().key_ref().to_string())
                    }),
            )?;
        }
        for a in attach {
            a(&queue, kind.as_deref())?;
        }
        members.insert(0, Box::new(primary.clone()));
        #[cfg(feature = "admin")]
        if let Some(server) = &admin {
            for m in &members {
                m.add_checks(server.admin());
            }
            if election.is_some() {
                server.admin().readiness_check("leader-election", || {
                    Err("not campaigning yet (waiting for the informers to sync)".into())
                });
            }
        }
        for m in &members {
            m.start()?;
        }
        let shutdown = Arc::new(Event::new());
        let stopping = Arc::new(AtomicBool::new(false));
        {
            // The first trigger stops the controller.
            let shutdown = shutdown.clone();
            let stopping = stopping.clone();
            rt.spawn(Box::pin(async move {
                if triggers.is_empty() {
                    std::future::pending::<()>().await;
                }
                futures_util::future::select_all(triggers).await;
                stopping.store(true, Ordering::Release);
                shutdown.notify(usize::MAX);
            }))?;
        }
        // Sync first (a new leader is warm), unless told to stop meanwhile.
        for m in &members {
            let synced = m.wait_for_sync();
            let stop = wait_set(&stopping, &shutdown);
            if let Either::Right(_) = select(synced, Box::pin(stop)).await {
                queue.shut_down();
                for m in &members {
                    m.shutdown().await;
                }
                return Ok(());
            }
        }
        for t in reconcile_all {
            let queue = queue.clone();
            let store = primary.store();
            rt.spawn(Box::pin(async move {
                use futures_util::StreamExt;
                let mut t = t;
                while t.next().await.is_some() {
                    for k in store.keys() {
                        queue.add(k);
                    }
                }
            }))?;
        }
        let leadership = match election {
            Some((ns, name, config)) => {
                Some(Leadership::spawn(rt.clone(), &client, &ns, &name, config)?)
            }
            None => None,
        };
        #[cfg(feature = "admin")]
        if let (Some(server), Some(l)) = (&admin, &leadership) {
            server.admin().leadership(l);
        }
        let resource = primary.resource().cloned().map(Arc::new);
        let shared = Arc::new(Shared {
            name,
            metrics,
            rt: rt.clone(),
            client,
            primary,
            members,
            queue: queue.clone(),
            leadership: leadership.clone(),
            reconcile,
            on_delete,
            recorder,
            resource,
            deleted,
            written: Mutex::default(),
            stats,
            ryw_bound,
            sharding: sharding.clone(),
            shutdown: shutdown.clone(),
            stopping: stopping.clone(),
            cancel_now: AtomicBool::new(false),
            running: AtomicUsize::new(0),
            exited: Event::new(),
        });
        if let Some(s) = &sharding {
            // Workers start once the member holds its Lease.
            let stop = wait_set(&stopping, &shutdown);
            if let Either::Right(_) = select(Box::pin(s.working()), Box::pin(stop)).await {
                s.shutdown().await;
                queue.shut_down();
                for m in &shared.members {
                    m.shutdown().await;
                }
                return Ok(());
            }
            // Retired: stop at once, cancelling what is in flight.
            let (s2, sh) = (s.clone(), shared.clone());
            rt.spawn(Box::pin(async move {
                let stop = wait_set(&sh.stopping, &sh.shutdown);
                if let Either::Left(_) = select(Box::pin(s2.retired()), Box::pin(stop)).await {
                    sh.cancel_now.store(true, Ordering::Release);
                    sh.stopping.store(true, Ordering::Release);
                    sh.shutdown.notify(usize::MAX);
                }
            }))?;
            // Filter, server and buckets modes: every key again when the table changes; in the
            // server mode the primary informer lists and watches with the member's
            // `shardSelector`, in the buckets mode it and the owned kinds' informers with the
            // member's buckets.
            let (s3, sh, rt2) = (s.clone(), shared.clone(), rt.clone());
            let server = Arc::new(ServerSelection::default());
            rt.spawn(Box::pin(async move {
                let mut seen = u64::MAX;
                while !s3.is_retired() && !sh.stopping.load(Ordering::Acquire) {
                    let v = s3.table_version();
                    if v != seen {
                        seen = v;
                        match s3.config().mode {
                            crate::ShardMode::Server => server.apply(&rt2, &s3, &sh.primary, v),
                            crate::ShardMode::Buckets => {
                                if let Some(label) = s3.label_selector() {
                                    set_label_selector(&sh.primary, label);
                                }
                                if let Some(buckets) = s3.bucket_selector() {
                                    for set in &bucket_scoped {
                                        set(&buckets);
                                    }
                                }
                            }
                            _ => {}
                        }
                        for k in sh.primary.store().keys() {
                            sh.queue.add(k);
                        }
                    }
                    let stop = wait_set(&sh.stopping, &sh.shutdown);
                    select(Box::pin(s3.table_changed(seen)), Box::pin(stop)).await;
                    if s3.table_version() == seen {
                        // The member stopped or retired (`table_changed` resolves at once from
                        // then on, so going round again would spin and, on a one-thread
                        // executor, starve the member's own task that marks it retired).
                        break;
                    }
                }
            }))?;
        }
        for _ in 0..concurrency {
            shared.running.fetch_add(1, Ordering::AcqRel);
            rt.spawn(Box::pin(worker(shared.clone())))?;
        }
        // Until told to stop.
        wait_set(&stopping, &shutdown).await;
        // 1. Workers: no new key; in-flight ones get the grace, then are cancelled.
        queue.shut_down();
        let all_out = shared.all_exited();
        if let Either::Right(_) = select(Box::pin(all_out), rt.sleep(grace)).await {
            shared.cancel_now.store(true, Ordering::Release);
            shared.shutdown.notify(usize::MAX);
            shared.all_exited().await;
        }
        // 2. Leadership: release the lease so a standby takes over at once; a member leaves
        //    its ring.
        if let Some(l) = &leadership {
            l.shutdown().await;
        }
        let retired = sharding.as_ref().is_some_and(Sharding::is_retired);
        if let Some(s) = &sharding {
            s.shutdown().await;
        }
        // 3. Informers.
        for m in &shared.members {
            m.shutdown().await;
        }
        // 4. The admin server.
        #[cfg(feature = "admin")]
        if let Some(server) = _admin_last.0.take() {
            server.shutdown().await;
        }
        if retired {
            return Err(ControllerError::ShardRetired);
        }
        Ok(())
    }
}

/// Stops the admin server when `run` returns early (an error, or stopped before the sync);
/// the normal path takes it out and awaits its shutdown.
#[cfg(feature = "admin")]
struct AdminLast(Option<crate::admin::AdminServer>);

#[cfg(feature = "admin")]
impl Drop for AdminLast {
    fn drop(&mut self) {
        if let Some(server) = self.0.take() {
            // Not awaited: the server's thread ends on its own.
            server.stop();
        }
    }
}

/// The server mode's `shardSelector` on the primary informer, and the fall back to filtering
/// in the client alone when the server ignores it.
#[derive(Default)]
struct ServerSelection {
    /// Bumped at every selector set: the check of an older one gives up.
    generation: AtomicU64,
    /// The server was seen ignoring `shardSelector`: none is sent any more.
    ignored: AtomicBool,
}

impl ServerSelection {
    /// Sets the member's `shardSelector` for table version `table` on `primary`. Once the
    /// informer has relisted with it, nothing outside the member's ranges can be in its cache
    /// unless the server ignored the selector (a server before 1.36, or the feature off): then
    /// the member says so once and lists without it from then on, filtering in the client as
    /// it always does (the filter mode). A selector changed since gives up the check.
    fn apply<K: Object + Send + Sync + 'static, R: Runtime>(
        self: &Arc<Self>,
        rt: &R,
        sharding: &Sharding,
        primary: &Informer<K, R>,
        table: u64,
    ) {
        if self.ignored.load(Ordering::Acquire) {
            return;
        }
        let wanted = sharding.shard_selector();
        let mut selectors = primary.selectors();
        if selectors.shard == wanted {
            return;
        }
        selectors.shard = wanted.clone();
        let before = primary.metrics();
        if !matches!(primary.set_selectors(selectors), Ok(true)) {
            return;
        }
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        if wanted.is_none() {
            return;
        }
        let (this, s, primary, rt2) = (self.clone(), sharding.clone(), primary.clone(), rt.clone());
        let current = move |this: &Self, s: &Sharding, p: &Informer<K, R>| {
            this.generation.load(Ordering::Acquire) == generation
                && s.table_version() == table
                && !s.is_retired()
                && !p.is_stopped()
        };
        let spawned = rt.spawn(Box::pin(async move {
            // Relisted with it: a list, then a watch, both since it was set.
            loop {
                rt2.sleep(Duration::from_millis(200)).await;
                if !current(&this, &s, &primary) {
                    return;
                }
                let m = primary.metrics();
                if m.lists > before.lists && m.watches > before.watches && primary.has_synced() {
                    break;
                }
            }
            // The readers' store shows the list's step by then.
            rt2.sleep(Duration::from_millis(500)).await;
            if !current(&this, &s, &primary) {
                return;
            }
            let outside = primary
                .store()
                .list()
                .iter()
                .filter(|o| !s.owns(&***o))
                .count();
            if outside > 0 && !this.ignored.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    member = %s.member(),
                    outside,
                    "the server ignores shardSelector (Kubernetes before 1.36, or the feature off): listing without it and filtering in this member, as the filter mode does"
                );
                let mut selectors = primary.selectors();
                selectors.shard = None;
                let _ = primary.set_selectors(selectors);
            }
        }));
        if spawned.is_err() {
            tracing::debug!("could not spawn the shardSelector check");
        }
    }
}

/// Reads a running controller's counts.
#[derive(Clone)]
pub struct StatsHandle(Arc<Counts>);

impl fmt::Debug for StatsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

impl StatsHandle {
    /// The counts now.
    pub fn get(&self) -> ControllerStats {
        let c = &self.0;
        ControllerStats {
            reconciles: c.reconciles.load(Ordering::Relaxed),
            errors: c.errors.load(Ordering::Relaxed),
            cancelled: c.cancelled.load(Ordering::Relaxed),
            waited_for_writes: c.waited.load(Ordering::Relaxed),
            write_waits_timed_out: c.wait_timeouts.load(Ordering::Relaxed),
            fenced_writes: c.fenced.load(Ordering::Relaxed),
        }
    }
}

/// Why a controller could not run.
#[derive(Debug)]
#[non_exhaustive]
pub enum ControllerError {
    /// An informer refused to start (stopped already) or a handler could not be added.
    Informer(Error),
    /// A task could not be spawned.
    Spawn(SpawnError),
    /// Leader election could not start.
    LeaderElection(LeaderElectionError),
    /// `owns` was asked of a controller whose kind is unknown (a primary informer on a bare
    /// transport, of a type that does not know its kind): say it with
    /// [`kind`](Controller::kind).
    NoOwnerKind,
    /// This sharded member lost its Lease ([`Controller::shard`]): start again under a new
    /// member name to rejoin.
    ShardRetired,
}

impl fmt::Display for ControllerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControllerError::Informer(e) => write!(f, "controller: {e}"),
            ControllerError::Spawn(e) => write!(f, "controller: {e}"),
            ControllerError::LeaderElection(e) => write!(f, "controller: {e}"),
            ControllerError::NoOwnerKind => f.write_str(
                "controller: `owns` needs the primary's kind (its informer does not know it): set it with `kind`",
            ),
            ControllerError::ShardRetired => {
                f.write_str("controller: this member lost its shard lease and was retired")
            }
        }
    }
}

impl std::error::Error for ControllerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ControllerError::Informer(e) => Some(e),
            ControllerError::Spawn(e) => Some(e),
            ControllerError::LeaderElection(e) => Some(e),
            ControllerError::NoOwnerKind | ControllerError::ShardRetired => None,
        }
    }
}

impl From<Error> for ControllerError {
    fn from(e: Error) -> Self {
        ControllerError::Informer(e)
    }
}

impl From<SpawnError> for ControllerError {
    fn from(e: SpawnError) -> Self {
        ControllerError::Spawn(e)
    }
}

impl From<LeaderElectionError> for ControllerError {
    fn from(e: LeaderElectionError) -> Self {
        ControllerError::LeaderElection(e)
    }
}

/// controller-runtime's reconcile metrics of one controller (label `controller`), registered
/// once.
struct ReconcileMetrics {
    success: Count,
    error: Count,
    requeue: Count,
    requeue_after: Count,
    errors: Count,
    panics: Count,
    time: Histogram,
    active_workers: Gauge,
    max_concurrent: Gauge,
}

impl ReconcileMetrics {
    fn new(controller: &str) -> Self {
        let labels = [("controller", controller.to_string())];
        let total = |result: &str| {
            Count::exported(
                "controller_runtime_reconcile_total",
                &[
                    ("controller", controller.to_string()),
                    ("result", result.to_string()),
                ],
            )
        };
        ReconcileMetrics {
            success: total("success"),
            error: total("error"),
            requeue: total("requeue"),
            requeue_after: total("requeue_after"),
            errors: Count::exported("controller_runtime_reconcile_errors_total", &labels),
            panics: Count::exported("controller_runtime_reconcile_panics_total", &labels),
            time: Histogram::exported("controller_runtime_reconcile_time_seconds", &labels),
            active_workers: Gauge::exported("controller_runtime_active_workers", &labels),
            max_concurrent: Gauge::exported(
                "controller_runtime_max_concurrent_reconciles",
                &labels,
            ),
        }
    }
}

struct Shared<K, R: Runtime, B: Backend> {
    /// The controller's name (metrics labels, spans).
    name: Arc<str>,
    metrics: ReconcileMetrics,
    rt: R,
    client: Client<B>,
    primary: Informer<K, R>,
    members: Vec<Box<dyn Member>>,
    queue: WorkQueue<Key>,
    leadership: Option<Leadership>,
    reconcile: Reconcile<K, B>,
    on_delete: Option<Reconcile<K, B>>,
    recorder: Option<Recorder>,
    /// The primary's resource, for [`Context::publish`].
    resource: Option<Arc<Resource>>,
    deleted: Arc<Mutex<HashMap<Key, Arc<K>>>>,
    /// Per key, the resourceVersions its last reconcile wrote, per resource.
    written: Mutex<HashMap<Key, Vec<Written>>>,
    stats: Arc<Counts>,
    ryw_bound: Duration,
    sharding: Option<Sharding>,
    shutdown: Arc<Event>,
    stopping: Arc<AtomicBool>,
    /// The shutdown grace ran out: cancel what is in flight.
    cancel_now: AtomicBool,
    running: AtomicUsize,
    exited: Event,
}

impl<K, R: Runtime, B: Backend> Shared<K, R, B> {
    async fn all_exited(&self) {
        loop {
            let l = self.exited.listen();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            l.await;
        }
    }

    fn leading(&self) -> bool {
        self.leadership.as_ref().is_none_or(Leadership::is_leader)
            && self.sharding.as_ref().is_none_or(Sharding::is_working)
    }
}

/// Resolves once `flag` is set (checked after each notification of `event`).
async fn wait_set(flag: &AtomicBool, event: &Event) {
    loop {
        let l = event.listen();
        if flag.load(Ordering::Acquire) {
            return;
        }
        l.await;
    }
}

/// One write a reconcile made, for the next reconcile of its key to read.
struct Written {
    resource: Resource,
    resource_version: u64,
    /// The written object's labels: an informer whose label selector does not match them
    /// never shows the write, and is not waited on for it.
    labels: BTreeMap<String, String>,
}

/// The fence and the write record of one reconcile.
struct Fence<K, R: Runtime, B: Backend> {
    shared: Arc<Shared<K, R, B>>,
    key: Key,
}

impl<K, R, B> WriteHook for Fence<K, R, B>
where
    K: Send + Sync + 'static,
    R: Runtime,
    B: Backend,
{
    fn before_write(&self, resource: &Resource, _namespace: Option<&str>) -> Result<(), String> {
        if self.shared.leading() {
            Ok(())
        } else {
            self.shared.stats.fenced.fetch_add(1, Ordering::Relaxed);
            Err(format!(
                "not the leader: a write to {} for {} refused",
                resource.plural, self.key
            ))
        }
    }

    fn after_write(
        &self,
        resource: &Resource,
        _namespace: Option<&str>,
        resource_version: &str,
        labels: &BTreeMap<String, String>,
    ) {
        let Ok(rv) = resource_version.parse::<u64>() else {
            return;
        };
        let mut written = self
            .shared
            .written
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let entry = written.entry(self.key.clone()).or_default();
        match entry.iter_mut().find(|w| {
            w.resource.group == resource.group
                && w.resource.plural == resource.plural
                && w.labels == *labels
        }) {
            Some(w) => w.resource_version = w.resource_version.max(rv),
            None => entry.push(Written {
                resource: resource.clone(),
                resource_version: rv,
                labels: labels.clone(),
            }),
        }
    }
}

async fn worker<K, R, B>(shared: Arc<Shared<K, R, B>>)
where
    K: Object + Send + Sync + 'static,
    R: Runtime,
    B: Backend,
{
    struct Exit<'a>(&'a AtomicUsize, &'a Event);
    impl Drop for Exit<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
            self.1.notify(usize::MAX);
        }
    }
    let _exit = Exit(&shared.running, &shared.exited);
    loop {
        // Only while leading.
        if let Some(l) = &shared.leadership {
            if !l.is_leader() {
                let stop = wait_set(&shared.stopping, &shared.shutdown);
                if let Either::Right(_) = select(Box::pin(l.leading()), Box::pin(stop)).await {
                    return;
                }
            }
        }
        let key = match take(&shared).await {
            Taken::Key(k) => k,
            Taken::Lost => continue,
            Taken::ShutDown => return,
        };
        if shared.sharding.as_ref().is_some_and(Sharding::is_retired) {
            // A retired member never works again: this worker ends (the controller stops).
            shared.queue.add(key.clone());
            shared.queue.done(&key);
            return;
        }
        if !shared.leading() {
            // Lost between taking the key and starting it: it waits for the next term.
            shared.queue.add(key.clone());
            shared.queue.done(&key);
            continue;
        }
        if let Some(s) = &shared.sharding {
            // Only what this member owns now; the rest is dropped (its owner has it).
            let obj = shared.primary.store().get(key.as_str()).or_else(|| {
                let deleted = shared.deleted.lock().unwrap_or_else(|p| p.into_inner());
                deleted.get(&key).cloned()
            });
            if !obj.is_some_and(|o| s.try_start(key.as_str(), &*o)) {
                // Not this member's: an object gone from its cache (moved to another member, or
                // deleted, which its owner handles) leaves nothing behind here.
                if shared.primary.store().get(key.as_str()).is_none() {
                    shared
                        .deleted
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&key);
                }
                shared.queue.forget(&key);
                shared.queue.done(&key);
                continue;
            }
        }
        let attempt = shared.queue.num_requeues(&key);
        let span = tracing::info_span!(
            "reconcile",
            controller = %shared.name,
            key = %key,
            attempt,
            result = tracing::field::Empty,
            duration_seconds = tracing::field::Empty,
        );
        let m = &shared.metrics;
        m.active_workers.add(1.0);
        let t0 = std::time::Instant::now();
        let outcome = run_one(&shared, &key, attempt)
            .instrument(span.clone())
            .await;
        let took = t0.elapsed();
        m.active_workers.add(-1.0);
        // The span closes before the key is released (`finish`, `done`): the key's next
        // reconcile, here or on the member it moves to, starts after it, so the spans of one
        // key never overlap.
        let entered = span.enter();
        shared.stats.reconciles.fetch_add(1, Ordering::Relaxed);
        let q = &shared.queue;
        let result = match &outcome {
            // Done, requeued after, or failed (an error or a panic): as `Workers` settle them.
            Outcome::Done(outcome) => {
                let result = match outcome {
                    Ok(Ok(Action::Done)) => {
                        m.success.add(1);
                        "success"
                    }
                    Ok(Ok(Action::RequeueAfter(_))) => {
                        m.requeue_after.add(1);
                        "requeue_after"
                    }
                    Ok(Err(_)) | Err(_) => {
                        shared.stats.errors.fetch_add(1, Ordering::Relaxed);
                        if outcome.is_err() {
                            m.panics.add(1);
                        }
                        m.error.add(1);
                        m.errors.add(1);
                        "error"
                    }
                };
                log_failure(q, &key, outcome, Key::to_string);
                result
            }
            Outcome::Cancelled => {
                shared.stats.cancelled.fetch_add(1, Ordering::Relaxed);
                tracing::info!(key = %key, "reconcile cancelled (leadership lost or shutting down); queued again");
                m.requeue.add(1);
                "requeue"
            }
            Outcome::Nothing => {
                m.success.add(1);
                "success"
            }
        };
        m.time.record(took);
        span.record("result", result);
        span.record("duration_seconds", took.as_secs_f64());
        tracing::debug!(result, duration_seconds = took.as_secs_f64(), "reconciled");
        drop(entered);
        drop(span);
        if let Some(s) = &shared.sharding {
            s.finish(key.as_str());
        }
        match outcome {
            Outcome::Done(outcome) => requeue(q, key, outcome),
            Outcome::Cancelled => {
                q.add(key.clone());
                q.done(&key);
            }
            Outcome::Nothing => {
                q.forget(&key);
                q.done(&key);
            }
        }
    }
}

/// What a worker waiting for a key got.
enum Taken {
    Key(Key),
    /// Leadership was lost while waiting (the pending `get` took nothing: no key is lost).
    Lost,
    /// The queue is shut down.
    ShutDown,
}

async fn take<K, R: Runtime, B: Backend>(shared: &Shared<K, R, B>) -> Taken {
    let get = shared.queue.get(&shared.rt);
    let got = match &shared.leadership {
        None => get.await,
        Some(l) => match select(Box::pin(get), Box::pin(l.lost())).await {
            Either::Left((k, _)) => k,
            Either::Right(_) => return Taken::Lost,
        },
    };
    got.map_or(Taken::ShutDown, Taken::Key)
}

enum Outcome {
    /// The reconcile's result, or its panic's message.
    Done(Result<Result<Action, String>, String>),
    Cancelled,
    Nothing,
}

async fn run_one<K, R, B>(shared: &Arc<Shared<K, R, B>>, key: &Key, attempt: u32) -> Outcome
where
    K: Object + Send + Sync + 'static,
    R: Runtime,
    B: Backend,
{
    // Read your writes: the cache first shows what this key's last reconcile wrote.
    let writes = shared
        .written
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(key);
    if let (Some(writes), false) = (writes, shared.ryw_bound.is_zero()) {
        shared.stats.waited.fetch_add(1, Ordering::Relaxed);
        // Per informer of a written resource, the newest write it will show: one its label
        // selector matches (a label-scoped informer never shows the others, and its watch may
        // not pass their resourceVersion for a long time: a sharded member's children before
        // the sharder labels them, say).
        for m in shared.members.iter() {
            let Some(r) = m.resource() else { continue };
            let newest = writes
                .iter()
                .filter(|w| w.resource.group == r.group && w.resource.plural == r.plural)
                .filter(|w| m.may_show(&w.labels))
                .map(|w| w.resource_version)
                .max();
            let Some(rv) = newest.map(|rv| rv.to_string()) else {
                continue;
            };
            if let Err(e) = m.wait_for_rv(&rv, shared.ryw_bound).await {
                shared.stats.wait_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(key = %key, resource_version = %rv, error = %e, "the cache did not show this key's last write in time; reconciling anyway");
            }
        }
    }
    let store = shared.primary.store();
    let (obj, deleted) = match store.get(key.as_str()) {
        Some(obj) => {
            // Alive (again): a deletion seen before is superseded.
            shared
                .deleted
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(key);
            (obj, false)
        }
        None => {
            let last = shared
                .deleted
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(key);
            match last {
                Some(last) => (last, true),
                None => return Outcome::Nothing,
            }
        }
    };
    let f = if deleted {
        match &shared.on_delete {
            Some(f) => f.clone(),
            None => return Outcome::Nothing,
        }
    } else {
        shared.reconcile.clone()
    };
    let hook: Arc<dyn WriteHook> = Arc::new(Fence {
        shared: shared.clone(),
        key: key.clone(),
    });
    let ctx = Context {
        key: key.clone(),
        attempt,
        deleted,
        client: shared.client.with_write_hook(hook),
        recorder: shared.recorder.clone(),
        resource: shared.resource.clone(),
    };
    let work = AssertUnwindSafe(f(obj, ctx)).catch_unwind();
    // Cancelled when leadership is lost, or when the shutdown grace ran out.
    let cancel = async {
        let lost = async {
            match &shared.leadership {
                Some(l) => l.lost().await,
                None => std::future::pending().await,
            }
        };
        let late = wait_set(&shared.cancel_now, &shared.shutdown);
        select(Box::pin(lost), Box::pin(late)).await;
    };
    let outcome = select(Box::pin(work), Box::pin(cancel)).await;
    if deleted {
        // The object is gone: what its cleanup wrote has no next reconcile to wait for it (and
        // the key may never come back), so nothing is kept for it.
        shared
            .written
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
    match outcome {
        Either::Left((done, _)) => Outcome::Done(done.map_err(panic_message)),
        Either::Right(_) => Outcome::Cancelled,
    }
}

/// Resolves on the process's first SIGTERM or SIGINT after it is first called.
fn signal() -> impl Future<Output = ()> + Send + 'static {
    static FIRED: std::sync::OnceLock<Arc<(AtomicBool, Event)>> = std::sync::OnceLock::new();
    let state = FIRED
        .get_or_init(|| {
            let state = Arc::new((AtomicBool::new(false), Event::new()));
            let s = state.clone();
            if let Err(e) = ctrlc::set_handler(move || {
                s.0.store(true, Ordering::Release);
                s.1.notify(usize::MAX);
            }) {
                tracing::warn!(error = %e, "no signal handler installed: shutdown_on_signal will not fire");
            }
            state
        })
        .clone();
    async move { wait_set(&state.0, &state.1).await }
}
