//! Controllers: a shared [`WorkQueue`] handle fed by informer handlers, and workers that take
//! keys from it and reconcile them.
//!
//! - [`WorkQueue`]: client-go `util/workqueue` semantics (informer-core's
//!   [`workqueue`](informer_core::controller::workqueue) state machine behind a lock, the clock read here).
//!   Cloneable; adds from any thread or task.
//! - [`WorkQueue::handler`]: an [`EventHandler`] mapping each notification to keys to queue
//!   (the object's own key with [`WorkQueue::key_handler`]; an owner's with
//!   [`owner_keys`]). Keys of the initial list and of resyncs are queued at
//!   [`Priority::LOW`], behind the keys of real changes.
//! - [`Workers`]: `n` concurrent workers running an async reconcile (on the [`Runtime`]) or a
//!   blocking one (on threads). Each returns [`Action::Done`], [`Action::RequeueAfter`]
//!   (requeued at [`Priority::LOW`]), or an error (requeued through the rate limiter, and
//!   logged). A key is never reconciled by two
//!   workers at once. [`Workers::shutdown`] drains: in-flight reconciles finish, queued keys
//!   are still processed, nothing new is accepted.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use event_listener::{Event, IntoNotification, Listener};
use futures_util::FutureExt;
use informer_core::controller::workqueue::{self, Pop, Priority, RateLimiter};
pub use informer_core::object::OwnerReference;
use informer_core::time::Instant as CoreInstant;
use informer_core::{object::Key, object::Object, object::ObjectOrTombstone};

use crate::handler::HandlerFns;
use crate::metrics::{Count, Gauge, Histogram};
use crate::runtime::Runtime;

/// What a reconcile asks for once it succeeded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Done; the key's failure count is reset.
    Done,
    /// Done for now; reconcile the key again after this delay (failure count reset), at
    /// [`Priority::LOW`]: a periodic requeue waits behind keys of real changes.
    RequeueAfter(Duration),
}

type Limiter<K> = Box<dyn RateLimiter<K> + Send>;

/// controller-runtime's workqueue metrics of one queue (labels `name` and `controller`, both
/// the queue's name), registered once ([`WorkQueue::export_metrics`]).
struct QueueMetrics {
    depth: Gauge,
    adds: Count,
    retries: Count,
    queue_duration: Histogram,
    work_duration: Histogram,
    unfinished: Gauge,
    longest: Gauge,
}

impl QueueMetrics {
    fn new(name: &str) -> Self {
        let labels = [("name", name.to_string()), ("controller", name.to_string())];
        QueueMetrics {
            depth: Gauge::exported("workqueue_depth", &labels),
            adds: Count::exported("workqueue_adds_total", &labels),
            retries: Count::exported("workqueue_retries_total", &labels),
            queue_duration: Histogram::exported("workqueue_queue_duration_seconds", &labels),
            work_duration: Histogram::exported("workqueue_work_duration_seconds", &labels),
            unfinished: Gauge::exported("workqueue_unfinished_work_seconds", &labels),
            longest: Gauge::exported("workqueue_longest_running_processor_seconds", &labels),
        }
    }
}

/// The core's queue, and when metrics are exported, when each pending key was added and each
/// key in a worker's hands taken (client-go keeps the same two maps for its metrics).
struct Locked<K> {
    q: workqueue::WorkQueue<K, Limiter<K>>,
    added: HashMap<K, std::time::Instant>,
    started: HashMap<K, std::time::Instant>,
}

impl<K: Hash + Eq + Clone> Locked<K> {
    /// Seconds of work in progress not yet observed by `work_duration`, and the longest.
    fn unfinished(&self, now: std::time::Instant) -> (f64, f64) {
        self.started.values().fold((0.0, 0.0), |(sum, max), t| {
            let d = now.saturating_duration_since(*t).as_secs_f64();
            (sum + d, if d > max { d } else { max })
        })
    }
}

struct QueueShared<K> {
    state: Mutex<Locked<K>>,
    /// Set once by [`WorkQueue::export_metrics`].
    metrics: OnceLock<QueueMetrics>,
    /// Keeps the on-read refresh of the unfinished-work gauges registered.
    refresh: OnceLock<Arc<dyn Fn() + Send + Sync>>,
    /// Notified when a key may be ready (added, requeued, time moved) or on shutdown.
    ready: Event,
    /// Notified when a key is done (for drain).
    idle: Event,
    /// The clock and its reading when first used: the std clock unless a runtime's clock was
    /// chosen first ([`WorkQueue::use_clock_of`]).
    clock: OnceLock<(std::time::Instant, Clock)>,
}

type Clock = Box<dyn Fn() -> std::time::Instant + Send + Sync>;

/// A shared work queue (client-go `workqueue.TypedRateLimitingInterface`): a key is queued at
/// most once and never handed to two workers at once. Cheap to clone.
pub struct WorkQueue<K = Key> {
    shared: Arc<QueueShared<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            shared: self.shared.clone(),
        }
    }
}

impl<K> fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkQueue").finish_non_exhaustive()
    }
}

impl<K: Hash + Eq + Clone + Send + 'static> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone + Send + 'static> WorkQueue<K> {
    /// A queue with client-go's default rate limiter (per key 5 ms doubling to 1000 s, max'ed
    /// with 10 per second, burst 100).
    pub fn new() -> Self {
        Self::with_rate_limiter(workqueue::default_rate_limiter::<K>())
    }

    /// A queue with the given rate limiter.
    pub fn with_rate_limiter(limiter: impl RateLimiter<K> + Send + 'static) -> Self {
        let limiter: Limiter<K> = Box::new(limiter);
        WorkQueue {
            shared: Arc::new(QueueShared {
                state: Mutex::new(Locked {
                    q: workqueue::WorkQueue::with_rate_limiter(limiter),
                    added: HashMap::new(),
                    started: HashMap::new(),
                }),
                metrics: OnceLock::new(),
                refresh: OnceLock::new(),
                ready: Event::new(),
                idle: Event::new(),
                clock: OnceLock::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Locked<K>> {
        // The queue's state is consistent after every call: a panic elsewhere cannot break it.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads `rt`'s clock ([`Runtime::now`]) from now on instead of the std clock, so that
    /// under a paused test clock (tokio's) its delays and backoffs move with virtual time.
    /// Only before the queue first read a clock (as soon as it is made): `false`, and no
    /// change, after. [`Workers::spawn`] and `Controller` call it.
    pub fn use_clock_of<R: Runtime>(&self, rt: &R) -> bool {
        let rt = rt.clone();
        let mut set = false;
        self.shared.clock.get_or_init(|| {
            set = true;
            (rt.now(), Box::new(move || rt.now()))
        });
        set
    }

    fn clock(&self) -> &(std::time::Instant, Clock) {
        self.shared
            .clock
            .get_or_init(|| (std::time::Instant::now(), Box::new(std::time::Instant::now)))
    }

    /// The exported metrics, if [`export_metrics`](Self::export_metrics) was called and the
    /// `metrics` feature is on.
    fn metrics(&self) -> Option<&QueueMetrics> {
        self.shared
            .metrics
            .get()
            .filter(|m| m.queue_duration.is_exported())
    }

    /// Publishes controller-runtime's workqueue metrics for this queue through the `metrics`
    /// facade (with the `metrics` feature; nothing otherwise), labelled `name` and
    /// `controller` with `name`: `workqueue_depth`, `workqueue_adds_total`,
    /// `workqueue_retries_total`, `workqueue_queue_duration_seconds`,
    /// `workqueue_work_duration_seconds`, `workqueue_unfinished_work_seconds` and
    /// `workqueue_longest_running_processor_seconds` (the last two brought up to date on
    /// [`refresh_gauges`](crate::refresh_gauges), on each take and on each done). The handles
    /// are registered here, once: later calls are ignored. A
    /// [`Controller`](crate::Controller) calls it with its name.
    pub fn export_metrics(&self, name: &str)
    where
        K: Sync,
    {
        if self.shared.metrics.set(QueueMetrics::new(name)).is_err() {
            return;
        }
        if self.metrics().is_none() {
            return;
        }
        let weak = Arc::downgrade(&self.shared);
        let refresh: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            if let Some(shared) = weak.upgrade() {
                WorkQueue { shared }.refresh_unfinished();
            }
        });
        crate::metrics::on_refresh(&refresh);
        let _ = self.shared.refresh.set(refresh);
    }

    fn refresh_unfinished(&self) {
        if let Some(m) = self.metrics() {
            let (sum, max) = self.lock().unfinished(std::time::Instant::now());
            m.unfinished.set_f64(sum);
            m.longest.set_f64(max);
        }
    }

    fn now(&self) -> CoreInstant {
        let (base, clock) = self.clock();
        CoreInstant::from_epoch(clock().saturating_duration_since(*base))
    }

    fn to_std(&self, at: CoreInstant) -> std::time::Instant {
        self.clock().0 + at.since_epoch()
    }

    /// Queues `key` at [`Priority::NORMAL`] (once; a key being processed is processed again
    /// after it is done).
    pub fn add(&self, key: K) {
        self.add_with_priority(key, Priority::NORMAL)
    }

    /// Queues `key` at `priority`: keys come out higher priority first, and within one
    /// priority in the order they were first added. A key already pending takes the higher
    /// of its priority and this one.
    pub fn add_with_priority(&self, key: K, priority: Priority) {
        let added = match self.metrics() {
            None => self.lock().q.add_with_priority(key, priority),
            Some(m) => {
                let mut l = self.lock();
                let added = l.q.add_with_priority(key.clone(), priority);
                if added {
                    m.adds.add(1);
                    l.added.entry(key).or_insert_with(std::time::Instant::now);
                    m.depth.set(l.q.len());
                }
                added
            }
        };
        if added {
            // One more worker, even if another was notified and has not woken yet.
            self.shared.ready.notify(1.additional());
        }
    }

    /// Queues `key` at [`Priority::NORMAL`] after `delay` (a key already delayed keeps the
    /// earlier time).
    pub fn add_after(&self, key: K, delay: Duration) {
        self.add_after_with_priority(key, delay, Priority::NORMAL)
    }

    /// Queues `key` at `priority` after `delay` (a key already delayed keeps the earlier time
    /// and the higher priority).
    pub fn add_after_with_priority(&self, key: K, delay: Duration, priority: Priority) {
        let now = self.now();
        if delay.is_zero() {
            return self.add_with_priority(key, priority);
        }
        self.lock()
            .q
            .add_after_with_priority(key, delay, now, priority);
        // A sleeping worker may be waiting for a later deadline.
        self.shared.ready.notify(usize::MAX);
    }

    /// Queues `key` at [`Priority::NORMAL`] after the rate limiter's delay for it.
    pub fn add_rate_limited(&self, key: K) {
        self.add_rate_limited_with_priority(key, Priority::NORMAL)
    }

    /// Queues `key` at `priority` after the rate limiter's delay for it.
    pub fn add_rate_limited_with_priority(&self, key: K, priority: Priority) {
        let now = self.now();
        let mut l = self.lock();
        if l.q.is_shutting_down() {
            return;
        }
        if let Some(m) = self.metrics() {
            m.retries.add(1);
        }
        // The delay, then the add (what the core's `add_rate_limited` does), so that a zero
        // delay is counted as an add.
        let delay = l.q.rate_limiter_mut().when(&key, now);
        drop(l);
        self.add_after_with_priority(key, delay, priority);
        self.shared.ready.notify(usize::MAX);
    }

    /// Resets `key`'s failure count.
    pub fn forget(&self, key: &K) {
        self.lock().q.forget(key);
    }

    /// How many rate-limited requeues of `key` are counted.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.lock().q.num_requeues(key)
    }

    /// Keys ready to be processed.
    pub fn len(&self) -> usize {
        self.lock().q.len()
    }

    /// True if no key is ready.
    pub fn is_empty(&self) -> bool {
        self.lock().q.is_empty()
    }

    /// Stops accepting keys; queued keys are still handed out, then workers stop.
    pub fn shut_down(&self) {
        self.lock().q.shut_down();
        self.shared.ready.notify(usize::MAX);
    }

    /// True once shut down.
    pub fn is_shutting_down(&self) -> bool {
        self.lock().q.is_shutting_down()
    }

    /// Shuts down and waits until no key is queued or being processed.
    pub async fn shut_down_with_drain(&self) {
        self.lock().q.shut_down_with_drain();
        self.shared.ready.notify(usize::MAX);
        loop {
            let listener = self.shared.idle.listen();
            if self.lock().q.is_drained() {
                return;
            }
            listener.await;
        }
    }

    /// Marks `key` processed; it is queued again if it was added meanwhile.
    pub fn done(&self, key: &K) {
        let requeued = match self.metrics() {
            None => self.lock().q.done(key),
            Some(m) => {
                let mut l = self.lock();
                let requeued = l.q.done(key);
                if let Some(t) = l.started.remove(key) {
                    m.work_duration.record(t.elapsed());
                }
                if requeued {
                    // Added again while processed: queued now (client-go times it from the
                    // add, which this queue did not see as one).
                    l.added
                        .entry(key.clone())
                        .or_insert_with(std::time::Instant::now);
                }
                m.depth.set(l.q.len());
                let (sum, max) = l.unfinished(std::time::Instant::now());
                m.unfinished.set_f64(sum);
                m.longest.set_f64(max);
                requeued
            }
        };
        if requeued {
            // One more worker, even if another was notified and has not woken yet.
            self.shared.ready.notify(1.additional());
        }
        self.shared.idle.notify(usize::MAX);
    }

    /// One attempt at taking a key: the key, or how long to wait (`None`: until notified),
    /// or `Err(())` once shut down and empty.
    fn try_pop(&self) -> Result<Result<K, Option<std::time::Instant>>, ()> {
        let now = self.now();
        let mut l = self.lock();
        let metrics = self.metrics();
        if let (Some(m), false) = (metrics, l.q.is_shutting_down()) {
            // Delayed keys due now are adds too.
            let Locked { q, added, .. } = &mut *l;
            q.handle_timeout_with(now, |k| {
                m.adds.add(1);
                added
                    .entry(k.clone())
                    .or_insert_with(std::time::Instant::now);
            });
        }
        match l.q.pop(now) {
            Pop::Key(k) => {
                if let Some(m) = metrics {
                    let at = std::time::Instant::now();
                    if let Some(t) = l.added.remove(&k) {
                        m.queue_duration.record(at.saturating_duration_since(t));
                    }
                    l.started.insert(k.clone(), at);
                    m.depth.set(l.q.len());
                }
                Ok(Ok(k))
            }
            Pop::ShutDown => Err(()),
            Pop::Empty => Ok(Err(l.q.poll_timeout().map(|t| self.to_std(t)))),
        }
    }

    /// Waits for the next key (async); `None` once shut down and empty. Call
    /// [`done`](Self::done) with it when finished.
    pub async fn get<R: Runtime>(&self, rt: &R) -> Option<K> {
        loop {
            let listener = self.shared.ready.listen();
            match self.try_pop() {
                Err(()) => return None,
                Ok(Ok(k)) => return Some(k),
                Ok(Err(None)) => listener.await,
                Ok(Err(Some(at))) => {
                    let wait = at.saturating_duration_since((self.clock().1)());
                    let sleep = rt.sleep(wait);
                    futures_util::future::select(listener, sleep).await;
                }
            }
        }
    }

    /// Waits for the next key, blocking this thread; `None` once shut down and empty.
    pub fn get_blocking(&self) -> Option<K> {
        loop {
            let listener = self.shared.ready.listen();
            match self.try_pop() {
                Err(()) => return None,
                Ok(Ok(k)) => return Some(k),
                Ok(Err(None)) => listener.wait(),
                Ok(Err(Some(at))) => {
                    let _ = listener.wait_deadline(at);
                }
            }
        }
    }

    /// An [`EventHandler`](crate::EventHandler) queueing the keys `map` gives for each notified object (on add,
    /// update — old and new — and delete).
    ///
    /// Adds of the initial list and resyncs (an update whose old and new are the very same
    /// object) queue at [`Priority::LOW`], everything else at [`Priority::NORMAL`]: after a
    /// restart, a change is reconciled before the backlog of objects merely listed.
    pub fn handler<T, I>(&self, map: impl Fn(&T) -> I + Send + Sync + 'static) -> HandlerFns<T>
    where
        T: Send + Sync + 'static,
        I: IntoIterator<Item = K>,
    {
        let map = Arc::new(map);
        let (q1, q2, q3) = (self.clone(), self.clone(), self.clone());
        let (m1, m2, m3) = (map.clone(), map.clone(), map);
        HandlerFns::new()
            .on_add(move |obj: Arc<T>, in_initial_list| {
                let priority = if in_initial_list {
                    Priority::LOW
                } else {
                    Priority::NORMAL
                };
                for k in m1(&obj) {
                    q1.add_with_priority(k, priority);
                }
            })
            .on_update(move |old: Arc<T>, new: Arc<T>| {
                let priority = if Arc::ptr_eq(&old, &new) {
                    Priority::LOW
                } else {
                    Priority::NORMAL
                };
                for k in m2(&old).into_iter().chain(m2(&new)) {
                    q2.add_with_priority(k, priority);
                }
            })
            .on_delete(move |gone: ObjectOrTombstone<T>| {
                for k in m3(gone.object()) {
                    q3.add(k);
                }
            })
    }
}

impl WorkQueue<Key> {
    /// An [`EventHandler`](crate::EventHandler) queueing each notified object's own key (`namespace/name`).
    pub fn key_handler<T: Object + Send + Sync + 'static>(&self) -> HandlerFns<T> {
        self.handler(|o: &T| [Key::from(o.key_ref())])
    }
}

/// The owner references of any object, owned (empty if it has none). References that do not
/// parse are logged and read as none: for a handler, which has no error to return; read
/// [`Object::owner_references`] for the typed error.
pub fn owner_references(obj: &(impl Object + ?Sized)) -> Vec<OwnerReference> {
    match obj.owner_references() {
        Ok(refs) => refs.iter().map(|r| r.to_owned()).collect(),
        Err(e) => {
            tracing::warn!(key = %obj.key_ref(), error = %e, "owner references ignored");
            Vec::new()
        }
    }
}

/// The keys of `obj`'s owners of kind `owner_kind` (the owner lives in the object's
/// namespace); with `controller_only`, only the managing controller's reference counts
/// (client-go's `EnqueueRequestForOwner` with `OnlyControllerOwner`). Use it with
/// [`WorkQueue::handler`] to reconcile an owner when what it owns changes.
pub fn owner_keys(
    obj: &impl Object,
    refs: &[OwnerReference],
    owner_kind: &str,
    controller_only: bool,
) -> Vec<Key> {
    refs.iter()
        .filter(|r| r.kind == owner_kind && (!controller_only || r.controller == Some(true)))
        .map(|r| Key::new(obj.namespace(), &r.name))
        .collect()
}

/// N workers processing a [`WorkQueue`]'s keys.
pub struct Workers<K, R> {
    queue: WorkQueue<K>,
    rt: R,
    running: Arc<AtomicUsize>,
    exited: Arc<Event>,
}

impl<K, R> fmt::Debug for Workers<K, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Workers")
            .field("running", &self.running.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// What a worker does with a reconcile's outcome: [`log_failure`], then [`requeue`].
pub(crate) fn settle<K: Hash + Eq + Clone + Send + 'static, E: fmt::Display>(
    queue: &WorkQueue<K>,
    key: K,
    outcome: Result<Result<Action, E>, String>,
    describe: impl Fn(&K) -> String,
) {
    log_failure(queue, &key, &outcome, describe);
    requeue(queue, key, outcome);
}

/// Logs a failed or panicked reconcile (before [`requeue`] counts it).
pub(crate) fn log_failure<K: Hash + Eq + Clone + Send + 'static, E: fmt::Display>(
    queue: &WorkQueue<K>,
    key: &K,
    outcome: &Result<Result<Action, E>, String>,
    describe: impl Fn(&K) -> String,
) {
    match outcome {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::warn!(key = %describe(key), error = %e, requeues = queue.num_requeues(key), "reconcile failed; requeued with backoff");
        }
        Err(panic) => {
            tracing::error!(key = %describe(key), panic = %panic, "reconcile panicked; requeued with backoff");
        }
    }
}

/// Puts the key back as the outcome says (forgotten, after a delay, or with backoff) and
/// marks it done.
pub(crate) fn requeue<K: Hash + Eq + Clone + Send + 'static, E>(
    queue: &WorkQueue<K>,
    key: K,
    outcome: Result<Result<Action, E>, String>,
) {
    match outcome {
        Ok(Ok(Action::Done)) => queue.forget(&key),
        Ok(Ok(Action::RequeueAfter(d))) => {
            queue.forget(&key);
            queue.add_after_with_priority(key.clone(), d, Priority::LOW);
        }
        Ok(Err(_)) | Err(_) => queue.add_rate_limited(key.clone()),
    }
    queue.done(&key);
}

pub(crate) fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "panic".into())
}

struct RunningGuard {
    running: Arc<AtomicUsize>,
    exited: Arc<Event>,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running.fetch_sub(1, Ordering::AcqRel);
        self.exited.notify(usize::MAX);
    }
}

impl<K, R> Workers<K, R>
where
    K: Hash + Eq + Clone + Send + Sync + fmt::Debug + 'static,
    R: Runtime,
{
    /// Starts `n` async workers on `rt`, each taking a key and awaiting `reconcile(key)`.
    pub fn spawn<F, Fut, E>(
        rt: R,
        queue: &WorkQueue<K>,
        n: usize,
        reconcile: F,
    ) -> Result<Workers<K, R>, crate::SpawnError>
    where
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Action, E>> + Send + 'static,
        E: fmt::Display + Send + 'static,
    {
        queue.use_clock_of(&rt);
        let w = Workers::empty(rt.clone(), queue);
        let reconcile = Arc::new(reconcile);
        for _ in 0..n.max(1) {
            let queue = queue.clone();
            let rt2 = rt.clone();
            let reconcile = reconcile.clone();
            let guard = w.guard();
            rt.spawn(Box::pin(async move {
                let _guard = guard;
                while let Some(key) = queue.get(&rt2).await {
                    let outcome = AssertUnwindSafe(reconcile(key.clone()))
                        .catch_unwind()
                        .await
                        .map_err(panic_message);
                    settle(&queue, key, outcome, |k| format!("{k:?}"));
                }
            }))?;
        }
        Ok(w)
    }

    /// Starts `n` worker threads, each taking a key and calling the blocking
    /// `reconcile(key)`.
    pub fn spawn_blocking<F, E>(
        rt: R,
        queue: &WorkQueue<K>,
        n: usize,
        reconcile: F,
    ) -> Result<Workers<K, R>, crate::SpawnError>
    where
        F: Fn(K) -> Result<Action, E> + Send + Sync + 'static,
        E: fmt::Display + Send + 'static,
    {
        let w = Workers::empty(rt, queue);
        let reconcile = Arc::new(reconcile);
        for i in 0..n.max(1) {
            let queue = queue.clone();
            let reconcile = reconcile.clone();
            let guard = w.guard();
            std::thread::Builder::new()
                .name(format!("reconcile-{i}"))
                .spawn(move || {
                    let _guard = guard;
                    while let Some(key) = queue.get_blocking() {
                        let outcome =
                            std::panic::catch_unwind(AssertUnwindSafe(|| reconcile(key.clone())))
                                .map_err(panic_message);
                        settle(&queue, key, outcome, |k| format!("{k:?}"));
                    }
                })
                .map_err(|e| crate::SpawnError(e.to_string()))?;
        }
        Ok(w)
    }

    fn empty(rt: R, queue: &WorkQueue<K>) -> Self {
        Workers {
            queue: queue.clone(),
            rt,
            running: Arc::new(AtomicUsize::new(0)),
            exited: Arc::new(Event::new()),
        }
    }

    fn guard(&self) -> RunningGuard {
        self.running.fetch_add(1, Ordering::AcqRel);
        RunningGuard {
            running: self.running.clone(),
            exited: self.exited.clone(),
        }
    }

    /// Workers still running.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Graceful shutdown: the queue stops accepting keys, in-flight reconciles finish and
    /// queued keys are processed, then every worker exits. Returns once they all have.
    pub async fn shutdown(&self) {
        let _ = &self.rt;
        self.queue.shut_down_with_drain().await;
        self.wait().await;
    }

    /// Waits until every worker has exited (after the queue was shut down).
    pub async fn wait(&self) {
        loop {
            let listener = self.exited.listen();
            if self.running() == 0 {
                return;
            }
            listener.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_references_map_to_owner_keys() {
        let obj: informer_core::object::DynamicObject = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1", "namespace": "ns", "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1", "controller": true},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "u2"}
            ]}
        }))
        .unwrap();
        let refs = owner_references(&obj);
        assert_eq!(refs.len(), 2);
        assert_eq!(refs[0].kind, "ReplicaSet");
        assert_eq!(refs[0].controller, Some(true));
        assert_eq!(
            owner_keys(&obj, &refs, "ReplicaSet", true),
            [Key::new(Some("ns"), "web")]
        );
        assert_eq!(
            owner_keys(&obj, &refs, "ConfigMap", false),
            [Key::new(Some("ns"), "other")]
        );
        assert!(owner_keys(&obj, &refs, "ConfigMap", true).is_empty());
        let none: informer_core::object::DynamicObject =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "x"}})).unwrap();
        assert!(owner_references(&none).is_empty());
    }

    #[test]
    fn handler_maps_notifications_to_keys() {
        use crate::handler::EventHandler;
        let q = WorkQueue::<Key>::new();
        let mut h = q.handler(|o: &informer_core::object::DynamicObject| {
            owner_keys(o, &owner_references(o), "ReplicaSet", false)
        });
        let owned: informer_core::object::DynamicObject =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "namespace": "ns", "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u"}
                ]}
            }))
            .unwrap();
        EventHandler::on_add(&mut h, Arc::new(owned.clone()), false);
        EventHandler::on_update(&mut h, Arc::new(owned.clone()), Arc::new(owned));
        // One key, queued once.
        assert_eq!(q.len(), 1);
        assert_eq!(q.get_blocking(), Some(Key::new(Some("ns"), "rs")));
        let mut own = q.key_handler::<informer_core::object::DynamicObject>();
        let obj: informer_core::object::DynamicObject = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "a", "namespace": "n"}}),
        )
        .unwrap();
        EventHandler::on_add(&mut own, Arc::new(obj), true);
        assert_eq!(q.get_blocking(), Some(Key::new(Some("n"), "a")));
    }

    /// The initial list and resyncs queue at LOW: a change that comes in behind them is
    /// handed out first. A periodic requeue (`RequeueAfter`) is LOW as well.
    #[test]
    fn initial_list_and_resync_keys_wait_behind_changes() {
        use crate::handler::EventHandler;
        let q = WorkQueue::<Key>::new();
        let mut h = q.key_handler::<informer_core::object::DynamicObject>();
        let obj = |name: &str| {
            Arc::new(
                serde_json::from_value::<informer_core::object::DynamicObject>(
                    serde_json::json!({"metadata": {"name": name, "namespace": "n"}}),
                )
                .unwrap(),
            )
        };
        let (a, b, c, d) = (obj("a"), obj("b"), obj("c"), obj("d"));
        EventHandler::on_add(&mut h, a.clone(), true);
        EventHandler::on_add(&mut h, b.clone(), true);
        // A resync of a: the same object as old and new.
        EventHandler::on_update(&mut h, a.clone(), a.clone());
        // A real change of b, and an object created after the list.
        EventHandler::on_update(&mut h, b.clone(), obj("b"));
        EventHandler::on_add(&mut h, c, false);
        EventHandler::on_delete(&mut h, ObjectOrTombstone::Object(d));
        let order: Vec<String> = (0..4)
            .map(|_| q.get_blocking().unwrap().name().to_string())
            .collect();
        assert_eq!(order, ["b", "c", "d", "a"]);

        let q = WorkQueue::<u32>::new();
        q.add_with_priority(1, Priority::LOW);
        q.add(2);
        q.add_with_priority(3, Priority(1));
        assert_eq!(q.get_blocking(), Some(3));
        settle(
            &q,
            3,
            Ok(Ok::<_, String>(Action::RequeueAfter(Duration::ZERO))),
            |k| k.to_string(),
        );
        assert_eq!(q.get_blocking(), Some(2));
        assert_eq!(q.get_blocking(), Some(1));
        assert_eq!(q.get_blocking(), Some(3), "requeued at LOW, behind 1");
    }
}
