//! The informer handle: start, handlers and event streams, readers, sync, shutdown.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::Duration;

use informer_core::cache::indexer::IndexFunc;
use informer_core::protocol::Selectors;
use informer_core::{informer::HandlerId, object::Object};

use crate::delivery::{Inbox, connect};
use crate::error::Error;
use crate::handler::{EventHandler, HandlerRegistration, spawn_worker};
use crate::metrics::Metrics;
use crate::runtime::{BoxFuture, Runtime};
use crate::snapshot_file::{SnapshotLoad, SnapshotWritten};
use crate::state::{HandlerStats, Shared};
use crate::store::Store;
use crate::stream::EventStream;
use crate::sync::CacheSync;

/// A running shared index informer (client-go `SharedIndexInformer`): lists and watches one
/// resource, keeps an indexed cache, and tells every handler what changed in it.
///
/// Cheap to clone. Dropping the last clone stops it like [`shutdown`](Self::shutdown) without
/// waiting; [`Store`]s stay readable (frozen at the last state). With a
/// [snapshot file](crate::InformerBuilder::snapshot) (and no `shutdown` before), the cache as
/// it is at the drop is written to it on a thread of its own, atomically: a process that
/// exits before the write is done keeps the previous file. Await `shutdown` to know it is
/// written.
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
///   by namespace and selectors, after the [`transform`](crate::InformerBuilder::transform)) had on
///   the server, in resourceVersion order: a watch event moves it to the next state; a relist
///   jumps to the listed state without replaying the changes in between (an object missing
///   from the list is deleted, its handlers told with a [`Tombstone`](crate::Tombstone)). It is
///   empty until the first list is applied.
/// - Every [`Store`] call answers from one of those states, never from a mix of two: a relist
///   is applied in one step. [`last_sync_resource_version`](Self::last_sync_resource_version)
///   is the resourceVersion of a state the cache is in, and [`has_synced`](Self::has_synced)
///   is true once the first list is in the store.
/// - A [`Store`] call never waits for the informer's work (a step applies up to 64 inputs, and
///   one input can be a relist of 100k objects): it reads the last whole state published, one
///   step behind at most. A busy reader never holds the informer up either.
/// - Eventual consistency: once the server is quiet and reachable, the cache equals the
///   server's collection (CONFORMANCE 25), unless the informer was shut down first.
/// - An object's identity is its key (`namespace/name`), not its uid: an object deleted and
///   created again under the same name while no watch saw it (across a relist) shows as an
///   update whose `old` and `new` uids differ. Compare [`Object::uid`] where that matters.
///
/// **Each handler** (an [`EventHandler`] or an [`EventStream`]), independently of the others:
///
/// - A notification is issued after the cache change it reports (cache and indices first, in
///   the [`Store`] too: it is handed over only once the change is there). By the time the
///   handler runs it, the cache may have moved on: the store holds that state of the object,
///   a newer one, or none (deleted since).
/// - Notifications are delivered one at a time: the next one is handed over only when the
///   previous one is finished (a handler method returned, or an event stream's consumer asks
///   for the next). A slow handler holds back only itself.
/// - Per object, in order: the notifications for one key describe a subsequence of the states
///   the cache held for it, ending at the latest. `Add` comes for an object the handler does
///   not know, `Update { old, new }` has `old` = the state the handler heard last, `Delete`
///   carries the last state the cache held (a tombstone when a relist found it gone). So the
///   fold of a handler's notifications is always a valid view of the collection, and equals the
///   cache once the informer is quiet and the handler has caught up.
/// - A relist reaches a handler only once the cache holds the whole new list (client-go 1.36's
///   atomic relists, CONFORMANCE 28). In the default [`DeliveryOrder::InOrder`](crate::DeliveryOrder::InOrder) (client-go
///   1.36's) its deletions come first, then its objects in list order; in
///   [`DeliveryOrder::DeltaFifo`](crate::DeliveryOrder::DeltaFifo) (client-go before 1.33) its objects first (CONFORMANCE 26,
///   27; chosen with [`delivery_order`](crate::InformerBuilder::delivery_order)).
/// - No order across objects beyond that: keys are delivered in the order their first pending
///   change arrived. A handler that is behind may hold, between two notifications, a view combining
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
    /// Run when the last handle is dropped, after the stop is sent (writes the snapshot).
    last_dropped: fn(&Arc<Shared<K, R>>),
}

impl<K, R> Drop for Inner<K, R> {
    fn drop(&mut self) {
        self.shared.stop();
        (self.last_dropped)(&self.shared);
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> Informer<K, R> {
    pub(crate) fn from_shared(shared: Arc<Shared<K, R>>) -> Self {
        Informer {
            inner: Arc::new(Inner {
                shared,
                last_dropped: Shared::write_snapshot_in_background,
            }),
        }
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

impl<K: Object + Send + Sync + 'static, R: Runtime> Informer<K, R> {
    pub(crate) fn shared(&self) -> &Arc<Shared<K, R>> {
        &self.inner.shared
    }

    /// The informer's name: on its log lines (field `informer`), its metrics (label
    /// `informer`) and its errors. Set with
    /// [`InformerBuilder::name`](crate::InformerBuilder::name), else derived from the
    /// resource, namespace and selectors (see there).
    pub fn name(&self) -> &str {
        &self.shared().name
    }

    /// The resource this informer lists and watches; `None` for one built on a bare
    /// transport ([`InformerBuilder::from_transport`](crate::InformerBuilder::from_transport)).
    pub fn resource(&self) -> Option<&informer_http::Resource> {
        self.shared().resource.as_ref()
    }

    /// Starts listing and watching (and the resync timer). Idempotent. With a snapshot file
    /// ([`InformerBuilder::snapshot`](crate::InformerBuilder::snapshot)), the file is loaded
    /// on a thread first and the informer resumes from it (see
    /// [`snapshot_load`](Self::snapshot_load)).
    pub fn start(&self) -> Result<(), Error> {
        let shared = self.shared();
        if shared.state.read().stopped {
            return Err(shared.stopped());
        }
        if shared.start_from_snapshot()? {
            return Ok(());
        }
        {
            let mut state = shared.state.write();
            if state.stopped {
                return Err(shared.stopped());
            }
            state.core.start(shared.now());
        }
        tracing::info!(informer = %shared.name, "informer started");
        shared.wake();
        Ok(())
    }

    /// Adds a handler with the informer's resync period (see
    /// [`InformerBuilder::resync`](crate::InformerBuilder::resync)).
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
        let handler: Box<dyn EventHandler<K>> = Box::new(handler);
        let shared = self.shared();
        self.register(resync, |new| {
            spawn_worker(
                shared.name.clone(),
                new.id,
                handler,
                new.inbox,
                new.stats.clone(),
                shared.counters.clone(),
                new.exited,
            )
            .map_err(Error::Thread)?;
            Ok(HandlerRegistration {
                shared: shared.clone(),
                id: new.id,
                stats: new.stats,
            })
        })
    }

    /// Notifications as a [`Stream`](futures_util::stream::Stream): a handler whose consumer
    /// pulls. The next notification is handed over only when the consumer asks for it, so a
    /// slow consumer holds back only itself (its backlog is the informer's bounded, per-key
    /// coalesced queue). Dropping the stream removes the handler. Resync period: the
    /// informer's.
    pub fn event_stream(&self) -> Result<EventStream<K, R>, Error> {
        self.event_stream_with_resync(self.shared().default_resync)
    }

    /// [`event_stream`](Self::event_stream) with its own resync period.
    pub fn event_stream_with_resync(&self, resync: Duration) -> Result<EventStream<K, R>, Error> {
        self.register(resync, |new| {
            Ok(EventStream {
                shared: self.shared().clone(),
                id: new.id,
                inbox: new.inbox,
                remove: Shared::remove_handler,
            })
        })
    }

    /// Adds a handler to the core, connects its delivery, and has `attach` put a consumer on
    /// the new handler's end: all under the write lock, so the driver hands nothing over
    /// before the consumer is in place. If `attach` fails, the handler is removed again.
    fn register<T>(
        &self,
        resync: Duration,
        attach: impl FnOnce(NewHandler<K>) -> Result<T, Error>,
    ) -> Result<T, Error> {
        let shared = self.shared();
        let registered = {
            let mut state = shared.state.write();
            let exited = match (&state.exited, state.stopped) {
                (Some(exited), false) => exited.clone(),
                _ => return Err(shared.stopped()),
            };
            // CONFORMANCE 31: a stopped core refuses (the check above already did).
            let (id, periods) = state
                .core
                .add_handler(resync, shared.now())
                .map_err(|_| shared.stopped())?;
            let (delivered, panics, pending, latency) = shared.counters.handler(id.index());
            let stats = Arc::new(HandlerStats {
                delivered,
                panics,
                pending,
                latency,
                active: std::sync::atomic::AtomicBool::new(false),
            });
            let inbox = connect(
                &mut state,
                &shared.state,
                &shared.changed,
                &shared.cmd,
                id,
                stats.clone(),
            );
            let attached = attach(NewHandler {
                id,
                inbox,
                stats,
                exited,
            });
            match &attached {
                Ok(_) => tracing::debug!(
                    informer = %shared.name,
                    handler = id.index(),
                    resync = ?periods.effective,
                    "handler added"
                ),
                Err(_) => {
                    let _ = state.remove_handler(id);
                }
            }
            attached
        };
        shared.wake();
        registered
    }

    /// Removes the handler `id` (a [`HandlerRegistration::id`] or an
    /// [`EventStream::id`]): it receives nothing new. Returns whether it was still registered.
    /// An id of another informer is refused with [`Error::ForeignHandler`] and nothing is
    /// removed (CONFORMANCE 32).
    pub fn remove_handler(&self, id: HandlerId) -> Result<bool, Error> {
        self.shared().remove_handler(id)
    }

    /// Adds an index; objects already cached are indexed at once (in both of the store's
    /// copies, one after the other: readers go on reading meanwhile, the informer's next
    /// step waits).
    pub fn add_index(&self, name: &str, func: impl IndexFunc<K> + 'static) -> Result<(), Error> {
        self.shared()
            .state
            .write()
            .publisher
            .add_index(name, func)?;
        Ok(())
    }

    /// A read handle on the cache.
    pub fn store(&self) -> Store<K> {
        let shared = self.shared();
        Store {
            views: shared.views.clone(),
            waits: shared.clone(),
        }
    }

    /// Whether the first list has been applied, in the [`store`](Self::store), and handed to
    /// the handlers. Never waits for the informer's step.
    pub fn has_synced(&self) -> bool {
        self.shared().views.read(|v| v.has_synced())
    }

    /// Whether the informer has been shut down.
    pub fn is_stopped(&self) -> bool {
        self.shared().state.read().stopped
    }

    /// The resourceVersion of the state the [`store`](Self::store)'s readers see: that of
    /// the last list, event or bookmark applied in the last step published to them (empty
    /// before the first list). While a snapshot file loads, it may already be the
    /// resourceVersion the watch from the snapshot has reached, nothing of it applied yet: the
    /// store is the state at it only once [`has_synced`](Self::has_synced).
    pub fn last_sync_resource_version(&self) -> String {
        self.store().last_sync_resource_version()
    }

    /// Waits until the cache readers see (the [`store`](Self::store)) holds resourceVersion
    /// `resource_version` or a newer one, and the informer has synced: for reading your own
    /// writes (the resourceVersion a write returned). resourceVersions are compared as
    /// unsigned integers, as client-go 1.36 does (KEP-5647).
    ///
    /// Fails with [`Error::ResourceVersionNotNumeric`] when `resource_version` (or the
    /// cache's) is not one, [`Error::ResourceVersionTimeout`] at `deadline` (on the runtime's
    /// clock, [`Runtime::now`]), and [`Error::Stopped`] when the informer stops first. Nothing
    /// polls: a wait is woken by the publish of the step that reaches its resourceVersion, and
    /// many waits cost a map entry per distinct resourceVersion.
    pub async fn wait_for_resource_version(
        &self,
        resource_version: &str,
        deadline: std::time::Instant,
    ) -> Result<(), Error> {
        self.store()
            .wait_for_resource_version(resource_version, deadline)
            .await
    }

    /// Lists and watches with `selectors` from now on (label, field and shard selectors, all
    /// three replaced); returns whether they changed. Changed on a running informer, the list or
    /// watch in flight is abandoned and the informer relists at once with them: what no longer
    /// matches leaves the cache (handlers get a delete, with a tombstone as after any relist),
    /// what now matches enters it. A sharded controller's server mode sets its `shardSelector`
    /// this way as its ranges change. The informer's [`name`](Self::name) stays the one it was
    /// built with. Refused with [`Error::Stopped`] once stopped.
    pub fn set_selectors(&self, selectors: Selectors) -> Result<bool, Error> {
        let shared = self.shared();
        let changed = {
            let mut state = shared.state.write();
            if state.stopped {
                return Err(shared.stopped());
            }
            state.core.set_selectors(shared.now(), selectors)
        };
        if changed {
            tracing::info!(informer = %shared.name, "selectors changed: relisting with them");
            shared.wake();
        }
        Ok(changed)
    }

    /// The selectors the informer lists and watches with.
    pub fn selectors(&self) -> Selectors {
        self.shared().state.read().core.selectors().clone()
    }

    /// The informer's counters.
    pub fn metrics(&self) -> Metrics {
        self.shared().counters.snapshot()
    }

    /// Notifications pending for handler `id` (at most one per cached key; 0 when unknown).
    pub fn pending(&self, id: HandlerId) -> usize {
        self.shared().pending(id)
    }

    /// Waits until the informer has synced; `timeout` `None` waits as long as it takes.
    /// Fails with [`Error::Timeout`] or [`Error::Stopped`].
    pub async fn wait_for_sync(&self, timeout: Option<Duration>) -> Result<(), Error> {
        self.shared()
            .wait_until(|_| self.has_synced(), timeout)
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
    /// The cache stays readable through existing [`Store`]s. With a snapshot file, the cache
    /// is then written to it (if the informer had synced; a failure is logged), and this
    /// returns once it is on disk. Idempotent.
    pub async fn shutdown(&self) {
        let shared = self.shared();
        shared.stop();
        loop {
            let listener = shared.changed.listen();
            if shared.finished.load(Ordering::Acquire) {
                break;
            }
            listener.await;
        }
        shared.write_final_snapshot().await;
    }
}

/// Warm restarts (see [`InformerBuilder::snapshot`](crate::InformerBuilder::snapshot)).
impl<K: Object + Send + Sync + 'static, R: Runtime> Informer<K, R> {
    /// Writes the cache to the snapshot file now (see
    /// [`InformerBuilder::snapshot`](crate::InformerBuilder::snapshot)). Fails with
    /// [`Error::NoSnapshotFile`] without one, and with [`SnapshotError::NotSynced`](informer_core::snapshot::SnapshotError::NotSynced) before
    /// the informer has synced.
    pub async fn write_snapshot(&self) -> Result<SnapshotWritten, Error> {
        self.shared().write_snapshot().await
    }

    /// What became of the snapshot file at start: `None` before it was looked at (or without
    /// a snapshot file).
    pub fn snapshot_load(&self) -> Option<SnapshotLoad> {
        self.shared().snapshot.as_ref().and_then(|f| {
            f.loaded
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }
}

impl<K: Object + Send + Sync + 'static, R: Runtime> CacheSync for Informer<K, R> {
    fn is_synced(&self) -> bool {
        self.has_synced()
    }
    fn synced(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.wait_for_sync(None))
    }
    fn last_failure(&self) -> Option<informer_core::protocol::Failure> {
        self.shared().counters.last_failure()
    }
    fn informer_name(&self) -> Option<&str> {
        Some(self.name())
    }
}

/// A handler just added to the core, for [`Informer::register`]'s caller to put a consumer on.
struct NewHandler<K> {
    id: HandlerId,
    inbox: Inbox<K>,
    stats: Arc<HandlerStats>,
    /// For a worker thread: dropped when it exits.
    exited: async_channel::Sender<()>,
}
