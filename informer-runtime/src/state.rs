//! What an informer's handles, its handlers' ends and its driver share: the core behind one
//! lock, and the few values around it. Everything else in the crate is built on this module;
//! it depends on none of them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use event_listener::Event;
use futures_util::future::{Either, select};
use informer_core::views::{Publisher, Views};
use informer_core::{
    SharedIndexInformer, informer::HandlerError, informer::HandlerId, informer::Notification,
    object::Object, time::Instant,
};

use crate::error::Error;
use crate::metrics::{Count, Counters, Gauge, Histogram};
use crate::resource_version::{RvWaiters, Seen, WaitForResourceVersion, parse};
use crate::runtime::BoxFuture;
use crate::runtime::Runtime;
use crate::sync::with_timeout;

/// What the lock guards: the core, the publisher of the readers' copies of its cache, and
/// where each handler's notifications go.
///
/// Readers ([`Store`](crate::Store)) never take this lock: they read the [`Views`] the
/// publisher fills (see `informer_core::views`). The driver holds the lock for a whole step;
/// at its end it publishes the step's changes to the views, and only then hands the step's
/// notifications over, so a handler always finds the change it is told about in the store.
pub(crate) struct State<K> {
    pub(crate) core: SharedIndexInformer<K>,
    /// Replays the core's changes on the readers' copies.
    pub(crate) publisher: Publisher<K>,
    /// Notifications the core gave out whose changes are not published yet: handed over at
    /// the next publish.
    pub(crate) held: Vec<(HandlerId, Notification<K>, Stamp)>,
    /// The driver's end of each handler's delivery channel (see `crate::delivery`).
    pub(crate) sinks: HashMap<HandlerId, Sink<K>>,
    /// Cloned into every handler worker; taken at shutdown so the driver sees them all exit.
    pub(crate) exited: Option<async_channel::Sender<()>>,
    pub(crate) stopped: bool,
}

/// When the event behind a notification reached the informer, for the handler's latency
/// histogram; `None` when the histogram is not exported (the clock is not read then).
pub(crate) type Stamp = Option<std::time::Instant>;

/// What a handler's delivery channel carries: a notification and its arrival.
pub(crate) type Stamped<K> = (Notification<K>, Stamp);

/// Where the driver hands a handler the notification it may start.
pub(crate) struct Sink<K> {
    pub(crate) tx: async_channel::Sender<Stamped<K>>,
    pub(crate) stats: Arc<HandlerStats>,
    /// When the oldest notification still pending for the handler in the core arrived (set
    /// when one arrives while the handler is busy; taken when its next notifications are).
    pub(crate) behind_since: Stamp,
}

impl<K> Sink<K> {
    /// The stamp of the notifications taken for the handler now: the oldest pending change's
    /// arrival, or now.
    pub(crate) fn take_stamp(&mut self) -> Stamp {
        if !self.stats.latency.is_exported() {
            return None;
        }
        Some(
            self.behind_since
                .take()
                .unwrap_or_else(std::time::Instant::now),
        )
    }
}

/// Per-handler counters and state shared by the driver, the handler's end and its
/// registration.
#[derive(Debug, Default)]
pub(crate) struct HandlerStats {
    /// Notifications the handler finished (panicked ones included).
    pub(crate) delivered: Count,
    /// Notifications that panicked.
    pub(crate) panics: Count,
    /// Notifications pending (exported only; the driver sets it after each step).
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    pub(crate) pending: Gauge,
    /// From a notification's arrival to the handler done with it.
    pub(crate) latency: Histogram,
    /// Cleared when the handler is removed or the informer shuts down: a notification handed
    /// over but not yet started is then dropped.
    pub(crate) active: AtomicBool,
}

impl<K: Object + 'static> State<K> {
    /// The state around `core`, whose readers' copies `publisher` keeps (it holds the
    /// readers' indices).
    pub(crate) fn new(
        mut core: SharedIndexInformer<K>,
        publisher: Publisher<K>,
        exited: async_channel::Sender<()>,
    ) -> Self {
        core.record_changes(true);
        // Readers query the publisher's copies; only the driver reads the core's cache, by key.
        let _ = core.remove_index(informer_core::cache::indexer::NAMESPACE_INDEX);
        State {
            core,
            publisher,
            held: Vec::new(),
            sinks: HashMap::new(),
            exited: Some(exited),
            stopped: false,
        }
    }

    /// Detaches handler `id` from its end and removes it from the core: it gets nothing new.
    /// Returns whether the core still had it; an id of another informer is refused and
    /// nothing is detached (CONFORMANCE 32).
    pub(crate) fn remove_handler(&mut self, id: HandlerId) -> Result<bool, HandlerError> {
        if id.informer() != self.core.id() {
            return self.core.remove_handler(id);
        }
        if let Some(sink) = self.sinks.remove(&id) {
            sink.stats.active.store(false, Ordering::Release);
        }
        self.core.remove_handler(id)
    }

    /// Whether every change of the core is in the readers' copies and every notification the
    /// core gave out was handed over: only then may a handler's end take its next notification
    /// from the core itself.
    pub(crate) fn is_published(&self) -> bool {
        self.publisher.is_published() && !self.core.has_changes() && self.held.is_empty()
    }

    /// Stops the core and detaches every handler, once.
    pub(crate) fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.core.stop();
        self.held.clear();
        for (_, sink) in self.sinks.drain() {
            sink.stats.active.store(false, Ordering::Release);
        }
        self.exited = None;
        self.stopped = true;
    }
}

/// The lock around [`State`]; a poisoned lock is still used (nothing in it can be left half
/// changed by a panic in this crate, which has none on purpose; a panic in user code run
/// under it, a transform or an index function, stops the informer).
pub(crate) struct StateLock<K> {
    lock: RwLock<State<K>>,
    /// When the write lock was last taken (nanoseconds after [`epoch`] plus one), or 0 while
    /// no one holds it: `/livez` calls an informer wedged when one holder (a driver step, a
    /// handler's end, running a transform or an index function) keeps it too long.
    held_since: AtomicU64,
}

/// The epoch of [`StateLock::held_for`]'s clock.
fn epoch() -> std::time::Instant {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

/// The write guard: marks the lock free again when dropped.
pub(crate) struct WriteGuard<'a, K> {
    guard: RwLockWriteGuard<'a, State<K>>,
    held_since: &'a AtomicU64,
}

impl<K> std::ops::Deref for WriteGuard<'_, K> {
    type Target = State<K>;
    fn deref(&self) -> &State<K> {
        &self.guard
    }
}

impl<K> std::ops::DerefMut for WriteGuard<'_, K> {
    fn deref_mut(&mut self) -> &mut State<K> {
        &mut self.guard
    }
}

impl<K> Drop for WriteGuard<'_, K> {
    fn drop(&mut self) {
        self.held_since.store(0, Ordering::Relaxed);
    }
}

impl<K> StateLock<K> {
    pub(crate) fn new(state: State<K>) -> Self {
        StateLock {
            lock: RwLock::new(state),
            held_since: AtomicU64::new(0),
        }
    }
    pub(crate) fn read(&self) -> RwLockReadGuard<'_, State<K>> {
        self.lock.read().unwrap_or_else(PoisonError::into_inner)
    }
    /// The write lock (two relaxed stores for the heartbeat: nothing to measure).
    pub(crate) fn write(&self) -> WriteGuard<'_, K> {
        let guard = self.lock.write().unwrap_or_else(PoisonError::into_inner);
        let since = epoch().elapsed().as_nanos() as u64;
        self.held_since.store(since + 1, Ordering::Relaxed);
        WriteGuard {
            guard,
            held_since: &self.held_since,
        }
    }
    /// How long the write lock has been held by its current holder, if it is held.
    #[cfg_attr(not(feature = "admin"), allow(dead_code))]
    pub(crate) fn held_for(&self) -> Option<Duration> {
        match self.held_since.load(Ordering::Relaxed) {
            0 => None,
            t => Some(
                epoch()
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(t - 1)),
            ),
        }
    }
}

/// Commands to the driver.
#[derive(Debug)]
pub(crate) enum Cmd {
    /// Something was fed to the core outside the driver: drain its outputs.
    Wake,
    /// Shut down.
    Stop,
    /// The consistency check found a divergence and heals it: relist.
    Relist,
}

/// Everything the handles and the driver share.
pub(crate) struct Shared<K, R> {
    pub(crate) state: Arc<StateLock<K>>,
    /// The readers' copies of the cache (filled by `State::publisher`).
    pub(crate) views: Arc<Views<K>>,
    pub(crate) rt: R,
    /// The runtime's clock at build time: the core's epoch.
    pub(crate) base: std::time::Instant,
    pub(crate) cmd: async_channel::Sender<Cmd>,
    /// Notified whenever something a waiter may wait for changed (sync, stop).
    pub(crate) changed: Arc<Event>,
    /// The waits for a resourceVersion, woken when a step reaching it is published.
    pub(crate) rv_waiters: Arc<RvWaiters>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) name: String,
    /// The resource, for an informer of one.
    pub(crate) resource: Option<informer_http::Resource>,
    pub(crate) default_resync: Duration,
    /// Set by the driver once it has stopped and every handler worker has exited.
    pub(crate) finished: AtomicBool,
    /// The snapshot file for warm restarts, if any.
    pub(crate) snapshot: Option<crate::snapshot_file::SnapshotFile<K>>,
}

impl<K, R> Shared<K, R> {
    /// [`Error::Stopped`] naming this informer.
    pub(crate) fn stopped(&self) -> Error {
        Error::Stopped {
            informer: self.name.clone(),
        }
    }

    /// Has the driver drain the core's outputs.
    pub(crate) fn wake(&self) {
        let _ = self.cmd.try_send(Cmd::Wake);
    }

    /// Asks the driver to shut down (without waiting).
    pub(crate) fn stop(&self) {
        let _ = self.cmd.try_send(Cmd::Stop);
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> Shared<K, R> {
    /// The runtime's clock on the core's time line.
    pub(crate) fn now(&self) -> Instant {
        Instant::from_epoch(self.rt.now().saturating_duration_since(self.base))
    }

    /// Removes handler `id` (a registration's `remove`, a dropped event stream,
    /// [`Informer::remove_handler`](crate::Informer::remove_handler)). Returns whether it was
    /// still registered; an id of another informer is refused with
    /// [`Error::ForeignHandler`] and nothing is removed.
    pub(crate) fn remove_handler(&self, id: HandlerId) -> Result<bool, Error> {
        let removed = self
            .state
            .write()
            .remove_handler(id)
            .map_err(|_| Error::ForeignHandler {
                informer: self.name.clone(),
                handler: id,
            })?;
        if removed {
            tracing::debug!(informer = %self.name, handler = id.index(), "handler removed");
        }
        self.wake();
        Ok(removed)
    }

    /// Whether handler `id` has synced: the informer has, and the handler finished its
    /// initial adds.
    pub(crate) fn handler_has_synced(&self, id: HandlerId) -> bool {
        self.state.read().core.handler_has_synced(id)
    }

    /// Waits until [`handler_has_synced`](Self::handler_has_synced).
    pub(crate) async fn wait_for_handler_sync(
        &self,
        id: HandlerId,
        timeout: Option<Duration>,
    ) -> Result<(), Error> {
        self.wait_until(move |state| state.core.handler_has_synced(id), timeout)
            .await
    }

    /// Notifications pending for handler `id` (0 when unknown).
    pub(crate) fn pending(&self, id: HandlerId) -> usize {
        self.state.read().core.pending(id)
    }

    /// See [`Informer::wait_for_resource_version`](crate::Informer::wait_for_resource_version).
    pub(crate) async fn wait_for_resource_version(
        &self,
        resource_version: &str,
        deadline: std::time::Instant,
    ) -> Result<(), Error> {
        let not_numeric = |rv: String| Error::ResourceVersionNotNumeric {
            informer: self.name.clone(),
            resource_version: rv,
        };
        let seen = || {
            self.views
                .read(|v| v.last_sync_resource_version().to_string())
        };
        let Some(target) = parse(resource_version) else {
            return Err(not_numeric(resource_version.to_string()));
        };
        let answer = |s: Seen| match s {
            Seen::Reached => Some(Ok(())),
            Seen::NotNumeric => Some(Err(not_numeric(seen()))),
            Seen::Stopped => Some(Err(self.stopped())),
            Seen::Behind => None,
        };
        // The fast path: already there (no lock, no timer).
        if let Some(r) = answer(self.rv_waiters.check(target)) {
            return r;
        }
        let wait = async {
            loop {
                let mut registered = match self.rv_waiters.register(target) {
                    Ok(r) => r,
                    Err(s) => return answer(s).unwrap_or(Ok(())),
                };
                registered.fired().await;
                drop(registered);
                if let Some(r) = answer(self.rv_waiters.check(target)) {
                    return r;
                }
            }
        };
        let left = deadline.saturating_duration_since(self.rt.now());
        match select(Box::pin(wait), self.rt.sleep(left)).await {
            Either::Left((r, _)) => r,
            Either::Right(_) => match answer(self.rv_waiters.check(target)) {
                Some(r) => r,
                None => Err(Error::ResourceVersionTimeout {
                    informer: self.name.clone(),
                    wanted: resource_version.to_string(),
                    seen: seen(),
                }),
            },
        }
    }

    /// Waits until `cond` holds, the informer stops (error) or `timeout` passes (error).
    pub(crate) async fn wait_until(
        &self,
        cond: impl Fn(&State<K>) -> bool,
        timeout: Option<Duration>,
    ) -> Result<(), Error> {
        let wait = async {
            loop {
                let listener = self.changed.listen();
                {
                    let state = self.state.read();
                    if cond(&state) {
                        return Ok(());
                    }
                    if state.stopped {
                        return Err(self.stopped());
                    }
                }
                listener.await;
            }
        };
        with_timeout(&self.rt, wait, timeout, || {
            (Some(self.name.clone()), self.counters.last_failure())
        })
        .await
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> WaitForResourceVersion for Shared<K, R> {
    fn wait_for_resource_version<'a>(
        &'a self,
        resource_version: &'a str,
        deadline: std::time::Instant,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(Shared::wait_for_resource_version(
            self,
            resource_version,
            deadline,
        ))
    }
}
