//! The shared index informer: a [`Reflector`] feeding a [`Pipeline`] (DeltaFIFO → Indexer +
//! Processor), behind one sans-IO step/poll API.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::time::Duration;

use crate::cache::indexer::{Change, IndexError, IndexFunc, Indexer};
use crate::cache::pipeline::Pipeline;
use crate::object::Object;
use crate::object::key::invalid_key;
use crate::protocol::RequestId;
use crate::protocol::Selectors;
use crate::protocol::{Failure, Input, Request};
use crate::snapshot::Snapshot;
use crate::time::Instant;
use reflector::{Reflector, ReflectorConfig, StoreOp};

pub mod consistency;
pub mod reflector;

pub use crate::cache::pipeline::DeliveryOrder;
pub use crate::cache::processor::{HandlerId, InformerId, Notification, ResyncPeriods};

#[cfg(test)]
mod tests;

/// A function applied to every object before it is stored (client-go `SetTransform`), e.g. to
/// drop `metadata.managedFields` and save memory. It must be deterministic and must not change
/// the object's namespace or name.
pub type Transform<K> = Box<dyn Fn(Arc<K>) -> Arc<K> + Send + Sync>;

/// How an informer lists, watches and resyncs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct InformerConfig {
    /// The Reflector's configuration (selectors, paging, streaming list, backoff, seed).
    pub reflector: ReflectorConfig,
    /// How often the informer checks whether a handler is due for a resync (client-go's
    /// `defaultEventHandlerResyncPeriod`); 0: no handler ever resyncs. A handler added before
    /// start with a shorter period lowers it.
    pub resync_check_period: Duration,
    /// In which order changes reach the cache and the handlers: client-go 1.36's
    /// ([`DeliveryOrder::InOrder`], the default) or its older DeltaFIFO order.
    pub order: DeliveryOrder,
}

/// What the informer asks of its runtime, besides running handlers (whose notifications a
/// runtime takes with [`poll_notifications`](SharedIndexInformer::poll_notifications) or runs
/// inline with [`deliver`](SharedIndexInformer::deliver)).
#[derive(Debug)]
pub enum Output {
    /// Perform this list or watch and feed its results back tagged with `id`. Any request
    /// handed out earlier is abandoned: stop it; its late results are ignored.
    Request {
        /// The id to tag the results with.
        id: RequestId,
        /// What to perform.
        request: Request,
    },
    /// A list or watch failed (client-go's watch-error handler). Recovery is already under
    /// way; this is for logging and metrics.
    WatchError(Failure),
}

/// Why [`SharedIndexInformer::add_handler`] or [`SharedIndexInformer::remove_handler`]
/// refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HandlerError {
    /// The informer has stopped: a handler added now would get the cache's replay and never a
    /// live event, so it is not added (client-go refuses too; CONFORMANCE 31).
    Stopped,
    /// The handler id belongs to another informer: nothing was removed (CONFORMANCE 32).
    Foreign {
        /// The id given.
        handler: HandlerId,
        /// The informer asked (the id belongs to `handler.informer()`).
        informer: InformerId,
    },
}

impl fmt::Display for HandlerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandlerError::Stopped => {
                f.write_str("the informer has stopped: no handler can be added to it")
            }
            HandlerError::Foreign { handler, informer } => write!(
                f,
                "handler {handler} belongs to {}, not to {informer}: nothing removed",
                handler.informer()
            ),
        }
    }
}

impl core::error::Error for HandlerError {}

/// A shared index informer (client-go `SharedIndexInformer`) as a pure state machine.
///
/// # The loop
///
/// **After every input, drain the outputs until none are left and take each idle handler's
/// notifications; then wait for the next input or the deadline.** In code:
///
/// ```text
/// informer.start(now)
/// loop {
///     while let Some(out) = informer.poll() {
///         match out {
///             Output::Request { id, request } => transport.start(id, request), // drop the previous one
///             Output::WatchError(e) => log(e),
///         }
///     }
///     for handler in handlers {
///         informer.poll_notifications(handler, max, &mut batch); // run them, then handler_done(handler)
///     }                                                          // (or: informer.deliver(run) for all)
///     wait for: a transport result (handle_input(now, id, Input::...)), a finished handler
///               (handler_done), an API call (add_handler, remove_handler, ...) or the clock
///               reaching poll_timeout() (handle_timeout)
/// }
/// ```
///
/// Inputs: [`start`](Self::start), [`handle_input`](Self::handle_input) (everything a transport
/// feeds back, as one [`Input`]), [`handle_timeout`](Self::handle_timeout),
/// [`handle_snapshot`](Self::handle_snapshot), [`handler_done`](Self::handler_done),
/// [`add_handler`](Self::add_handler), [`remove_handler`](Self::remove_handler).
/// Outputs: [`poll`](Self::poll) (requests and watch errors),
/// [`poll_notifications`](Self::poll_notifications) (a handler's notifications) or
/// [`deliver`](Self::deliver) (every handler's, run inline), and
/// [`poll_timeout`](Self::poll_timeout) (backoff end, request watchdog or resync check,
/// whichever is first).
///
/// # Time
///
/// `now` is a monotonic clock reading ([`Instant`]), never going backwards between calls. The
/// informer never reads a clock itself. `handle_timeout` may be called early (it does nothing
/// that is not yet due) or late (whatever fell due in between is done then, once: a late call
/// delays work, it never loses it), so a runtime may wake up on a coarse timer.
///
/// # Objects it refuses
///
/// An object whose name is empty or whose name or namespace contains `/` cannot be keyed
/// without ambiguity (`a/b` would be both the cluster-scoped `a/b` and `b` in namespace `a`).
/// Kubernetes never issues such names; a broken server or transform can. Such an object is not
/// stored: it is reported as [`Failure::InvalidObject`] and the informer goes on.
///
/// Every input runs the DeltaFIFO to empty before it returns, so the cache
/// ([`indexer`](Self::indexer)) is always up to date with everything fed in, and a full list is
/// applied as one step: readers never see half of it.
pub struct SharedIndexInformer<K> {
    reflector: Reflector<K>,
    pipeline: Pipeline<K>,
    transform: Option<Transform<K>>,
    outputs: VecDeque<Output>,
    started: bool,
    /// [`stop`](SharedIndexInformer::stop) was called: no handler can be added any more.
    stopped: bool,
    /// What [`start`](Self::start) resumes from, if anything.
    resume: Option<Resume<K>>,
    /// Started with [`Resume::At`] and the snapshot's objects not in yet.
    awaiting: Option<Awaiting<K>>,
}

/// What a [`start`](SharedIndexInformer::start) resumes from (a warm restart), instead of
/// listing: given with [`resume`](SharedIndexInformer::resume) before start.
#[derive(Debug)]
pub enum Resume<K> {
    /// A whole snapshot: at start its objects become the initial population and the first
    /// request is a watch from its resourceVersion.
    Snapshot(Snapshot<K>),
    /// A snapshot still being loaded, by its resourceVersion (a file's header has it before
    /// its objects are read): the watch starts from it at once, and the objects follow through
    /// [`handle_snapshot`](SharedIndexInformer::handle_snapshot).
    At(alloc::string::String),
}

/// A snapshot announced with [`Resume::At`] whose objects are not in yet.
struct Awaiting<K> {
    /// The snapshot's resourceVersion.
    resource_version: alloc::string::String,
    /// The store changes the reflector handed out meanwhile, in order: applied after the
    /// objects.
    held: VecDeque<StoreOp<K>>,
}

impl<K> fmt::Debug for SharedIndexInformer<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedIndexInformer")
            .field("reflector", &self.reflector)
            .field("started", &self.started)
            .finish_non_exhaustive()
    }
}

/// Building: before start.
impl<K: Object + 'static> SharedIndexInformer<K> {
    /// An informer that has not started.
    pub fn new(config: InformerConfig) -> Self {
        SharedIndexInformer {
            reflector: Reflector::new(config.reflector),
            pipeline: Pipeline::with_order(config.resync_check_period, config.order),
            transform: None,
            outputs: VecDeque::new(),
            started: false,
            stopped: false,
            resume: None,
            awaiting: None,
        }
    }

    /// Sets the transform applied to every object before it is stored. Like client-go, only
    /// before start: returns false (and changes nothing) once started.
    pub fn set_transform(&mut self, transform: Transform<K>) -> bool {
        if self.started {
            return false;
        }
        self.transform = Some(transform);
        true
    }

    /// Adds a named index. Objects already cached are indexed at once.
    pub fn add_index(
        &mut self,
        name: &str,
        func: impl IndexFunc<K> + 'static,
    ) -> Result<(), IndexError> {
        self.pipeline.add_index(name, func)
    }

    /// Removes an index of the cache, the namespace index included (see
    /// [`Indexer::remove_index`]): a runtime whose readers query copies of the cache saves the
    /// buckets' memory in its own.
    pub fn remove_index(&mut self, name: &str) -> Result<(), IndexError> {
        self.pipeline.remove_index(name)
    }

    /// Resumes from a snapshot (a warm restart) instead of listing.
    ///
    /// With [`Resume::Snapshot`], at [`start`](Self::start) its objects become the initial
    /// population (handlers get an `Add` flagged `in_initial_list` for each, and the informer
    /// has synced once they are applied), and the first request is a watch from the snapshot's
    /// resourceVersion. If the server no longer has it (410), the informer relists at once and
    /// the list's `Replace` turns the difference into the right adds, updates and tombstoned
    /// deletes.
    ///
    /// With [`Resume::At`], for a snapshot still being loaded, [`start`](Self::start) watches
    /// from its resourceVersion at once, so the watch (and, on a 410, the list) is under way
    /// while the objects load; they come in later through
    /// [`handle_snapshot`](Self::handle_snapshot), or word that the snapshot turned out
    /// unusable. Until then nothing is applied: the store changes the watch or the list bring
    /// wait, in order, and are applied right after the objects (a relist's `Replace` then
    /// turns into the difference, as with a whole snapshot); the informer has not synced, and
    /// [`is_watching`](Self::is_watching) is false.
    ///
    /// The objects are not transformed again (a snapshot holds cached, transformed objects);
    /// checking that the snapshot belongs to this informer's resource and selectors is
    /// [`Snapshot::decode`]'s job. Only before start, and with a non-empty resourceVersion for
    /// `At`: returns false (and changes nothing) otherwise. A later call replaces an earlier
    /// one.
    pub fn resume(&mut self, from: Resume<K>) -> bool {
        if self.started || matches!(&from, Resume::At(rv) if rv.is_empty()) {
            return false;
        }
        self.resume = Some(from);
        true
    }

    /// Starts (`true`) or stops recording every change applied to the cache, for
    /// [`take_changes`](Self::take_changes): a runtime that keeps copies of the cache for
    /// readers (`shared::Views`, feature `spin`) replays them there, so readers
    /// never wait for a step. Off by default.
    pub fn record_changes(&mut self, on: bool) {
        self.pipeline.record_changes(on)
    }
}

/// Inputs: what happened. After each, drain the outputs.
impl<K: Object + 'static> SharedIndexInformer<K> {
    /// Starts listing and watching, and the resync check timer.
    pub fn start(&mut self, now: Instant) {
        if self.started {
            return;
        }
        self.started = true;
        self.pipeline.start(now);
        match self.resume.take() {
            Some(Resume::Snapshot(snapshot)) => {
                self.reflector.resume_at(snapshot.resource_version);
                self.populate_resumed(snapshot.items);
            }
            Some(Resume::At(rv)) => {
                self.reflector.resume_at(rv.clone());
                self.awaiting = Some(Awaiting {
                    resource_version: rv,
                    held: VecDeque::new(),
                });
            }
            None => {}
        }
        // The reflector's outputs are drained after every input (apply_reflector_outputs), so
        // the drain rule always holds here.
        let applied = self.reflector.start(now);
        debug_assert!(applied.is_ok());
        self.apply_reflector_outputs();
    }

    /// What the transport observed for request `id` (see [`Input`] for what a request yields).
    /// Inputs for a request that was superseded are ignored.
    pub fn handle_input(&mut self, now: Instant, id: RequestId, input: Input<K>) {
        let applied = self.reflector.handle_input(now, id, input);
        debug_assert!(
            applied.is_ok(),
            "reflector outputs are drained after every input"
        );
        self.apply_reflector_outputs();
    }

    /// The clock reached `now`: ends an expired backoff, runs a due resync check.
    pub fn handle_timeout(&mut self, now: Instant) {
        let applied = self.reflector.handle_timeout(now);
        debug_assert!(applied.is_ok());
        self.pipeline.handle_timeout(now);
        self.apply_reflector_outputs();
    }

    /// The snapshot announced with [`Resume::At`] finished loading: `Some` with its objects,
    /// or `None` when it cannot be used (corrupt, refused, unreadable).
    ///
    /// The objects become the initial population (as with [`Resume::Snapshot`]), then every
    /// store change that waited for them is applied. A snapshot of another resourceVersion is
    /// not used: as `None`. With `None`, what the watch or list brought is dropped and the
    /// informer lists at once, with a consistent read (resourceVersion `""`: nothing asked of
    /// the snapshot's resourceVersion), its result the initial population as on a start
    /// without a snapshot. Returns false (and changes nothing) when the informer is not
    /// waiting for a snapshot's objects.
    pub fn handle_snapshot(&mut self, now: Instant, loaded: Option<Snapshot<K>>) -> bool {
        let Some(awaiting) = &self.awaiting else {
            return false;
        };
        match loaded {
            Some(snapshot) if snapshot.resource_version == awaiting.resource_version => {
                let held = self.awaiting.take().map(|a| a.held).unwrap_or_default();
                self.populate_resumed(snapshot.items);
                for op in held {
                    self.apply_store_op(op);
                }
                while self.pipeline.process_one() {}
            }
            _ => {
                self.awaiting = None;
                let relisted = self.reflector.relist_from_scratch(now);
                debug_assert!(relisted.is_ok());
                self.apply_reflector_outputs();
            }
        }
        true
    }

    /// Lists and watches with `selectors` from now on; returns whether they changed. Changed
    /// while running, the list or watch in flight is abandoned and the informer relists at
    /// once with them: the relist's replace removes from the cache (with `Delete`
    /// notifications) what no longer matches and adds what now does, as after any relist.
    /// Snapshots taken from then on carry the new selectors.
    pub fn set_selectors(&mut self, now: Instant, selectors: Selectors) -> bool {
        let changed = self.reflector.set_selectors(selectors, now);
        debug_assert!(changed.is_ok(), "the informer drains its reflector");
        self.apply_reflector_outputs();
        changed.unwrap_or(false)
    }

    /// The selectors of the next list and watch.
    pub fn selectors(&self) -> &Selectors {
        &self.reflector.config().selectors
    }

    /// Registers a handler asking for a resync every `resync` (0: never). Added after start,
    /// it first gets one `Add` per cached object (flagged `in_initial_list`), then live
    /// notifications. Once the informer has [stopped](Self::stop) it is refused with
    /// [`HandlerError::Stopped`] (CONFORMANCE 31): it would hear the cache's replay and never
    /// a live change.
    pub fn add_handler(
        &mut self,
        resync: Duration,
        now: Instant,
    ) -> Result<(HandlerId, ResyncPeriods), HandlerError> {
        if self.stopped {
            return Err(HandlerError::Stopped);
        }
        let r = self.pipeline.add_handler(resync, now);
        self.apply_reflector_outputs();
        Ok(r)
    }

    /// Removes a handler: it gets nothing new. Returns whether it was registered (`false`:
    /// removed already). An id of another informer is refused with
    /// [`HandlerError::Foreign`] and nothing is removed (CONFORMANCE 32).
    pub fn remove_handler(&mut self, id: HandlerId) -> Result<bool, HandlerError> {
        let processor = self.pipeline.processor();
        if !processor.owns(id) {
            return Err(HandlerError::Foreign {
                handler: id,
                informer: processor.informer_id(),
            });
        }
        Ok(self.pipeline.remove_handler(id))
    }

    /// Handler `id` finished the notification it was given.
    pub fn handler_done(&mut self, id: HandlerId) {
        self.pipeline.handler_done(id);
        self.apply_reflector_outputs();
    }

    /// Stops: the request in flight is abandoned and no new one is issued. The cache and the
    /// handlers' pending notifications stay.
    pub fn stop(&mut self) {
        self.stopped = true;
        self.reflector.stop();
    }
}

/// Outputs: what to do, and when to come back.
impl<K: Object + 'static> SharedIndexInformer<K> {
    /// The next output, `None` when there is nothing to do until the next input.
    #[must_use = "outputs must be drained after every input"]
    pub fn poll(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// Up to `max` of handler `id`'s next notifications, in its order, appended to `out`, if
    /// the handler is idle; returns how many. This is how a handler hears of changes: run
    /// them, in order, then report [`handler_done`](Self::handler_done). The handler is busy
    /// with the whole batch until then (what arrives meanwhile waits and coalesces behind it);
    /// other handlers are not held up. A runtime that hands notifications to another thread
    /// takes them in batches, to pay for the hand-over once per batch; `max` of one gives them
    /// one at a time.
    pub fn poll_notifications(
        &mut self,
        id: HandlerId,
        max: usize,
        out: &mut Vec<Notification<K>>,
    ) -> usize {
        self.pipeline.poll_batch_for(id, max, out)
    }

    /// Runs every pending notification of every idle handler through `f` by reference, in
    /// each handler's order, and returns how many: for a runtime that runs its handlers inline,
    /// in place of [`poll_notifications`](Self::poll_notifications) and
    /// [`handler_done`](Self::handler_done) per handler. No notification is cloned per
    /// handler. A handler busy with notifications taken by `poll_notifications` is skipped.
    pub fn deliver(&mut self, f: impl FnMut(HandlerId, &Notification<K>)) -> usize {
        self.pipeline.deliver(f)
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        match (self.reflector.poll_timeout(), self.pipeline.poll_timeout()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether cache changes were recorded and not yet taken.
    pub fn has_changes(&self) -> bool {
        self.pipeline.indexer().has_changes()
    }

    /// Moves the cache changes recorded since the last call to the end of `into`, in the order
    /// they were applied (see [`Indexer::take_changes`]). Between inputs the cache is whole,
    /// so the changes taken then bring a copy from one whole state to the next: a relist is
    /// never split.
    pub fn take_changes(&mut self, into: &mut Vec<Change<K>>) {
        self.pipeline.take_changes(into)
    }

    /// [`take_changes`](Self::take_changes) with their keys' hashes (for the readers' copies).
    #[cfg(any(test, feature = "spin"))]
    pub(crate) fn take_journaled(&mut self, into: &mut Vec<crate::cache::indexer::Journaled<K>>) {
        self.pipeline.take_journaled(into)
    }
}

/// State: what the informer holds and where it stands.
impl<K: Object + 'static> SharedIndexInformer<K> {
    /// The cache.
    pub fn indexer(&self) -> &Indexer<K> {
        self.pipeline.indexer()
    }

    /// A snapshot of the cache for a warm restart: every cached object (shared, not copied)
    /// and the resourceVersion they are the state at. `None` before the informer has synced.
    /// The cache is always consistent with [`last_sync_resource_version`](Self::last_sync_resource_version)
    /// between inputs, so any moment is a good one.
    pub fn snapshot(&self) -> Option<Snapshot<K>> {
        let rv = self.reflector.last_sync_resource_version();
        if !self.has_synced() || rv.is_empty() {
            return None;
        }
        Some(Snapshot {
            resource_version: rv.into(),
            items: self.pipeline.indexer().list().cloned().collect(),
        })
    }

    /// Whether the first full list has been applied and handed to the handlers.
    pub fn has_synced(&self) -> bool {
        self.pipeline.has_synced()
    }

    /// Whether handler `id` has synced: the informer has, and the handler finished its initial
    /// adds.
    pub fn handler_has_synced(&self, id: HandlerId) -> bool {
        self.pipeline.handler_has_synced(id)
    }

    /// The resourceVersion of the last list or event applied; empty before the first list.
    /// Before [`has_synced`](Self::has_synced), after [`Resume::At`], it is
    /// the resourceVersion the watch or list under way has reached, although nothing of it is
    /// applied yet (it waits for the snapshot's objects, or is dropped on
    /// `handle_snapshot(now, None)`): the cache is the state at it only once synced.
    pub fn last_sync_resource_version(&self) -> &str {
        self.reflector.last_sync_resource_version()
    }

    /// The registered handlers, in the order they were added.
    pub fn handlers(&self) -> impl Iterator<Item = HandlerId> + '_ {
        self.pipeline.processor().handlers()
    }

    /// Notifications pending for handler `id`: at most one per key it must still hear about
    /// (0 when unknown).
    pub fn pending(&self, id: HandlerId) -> usize {
        self.pipeline.processor().pending(id)
    }

    /// Whether the informer was started and not stopped.
    pub fn is_running(&self) -> bool {
        self.reflector.is_running()
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// This informer's identity in the process, carried by every [`HandlerId`] it hands out.
    pub fn id(&self) -> InformerId {
        self.pipeline.processor().informer_id()
    }

    /// Whether the informer is watching with nothing else under way (no list, no backoff):
    /// the quiet moment at which the consistency check compares (see
    /// [`consistency`]).
    pub fn is_watching(&self) -> bool {
        self.awaiting.is_none() && self.reflector.is_watching()
    }

    /// Whether the informer started with [`Resume::At`] and awaits the snapshot's objects.
    pub fn awaiting_snapshot(&self) -> bool {
        self.awaiting.is_some()
    }

    /// The id of the list or watch in flight, if any.
    pub fn in_flight(&self) -> Option<RequestId> {
        self.reflector.in_flight()
    }

    /// When the backoff in progress ends (after a failure, before the next list or watch);
    /// `None` when not backing off.
    pub fn backing_off_until(&self) -> Option<Instant> {
        self.reflector.backing_off_until()
    }

    /// `obj` as the cache would hold it: passed through the transform (see
    /// [`set_transform`](Self::set_transform)), if any. For comparing a server's copy with the
    /// cached one (the [consistency check](crate::informer::consistency)).
    pub fn transform_object(&self, obj: Arc<K>) -> Arc<K> {
        match &self.transform {
            Some(t) => t(obj),
            None => obj,
        }
    }
}

impl<K: Object + 'static> SharedIndexInformer<K> {
    /// A snapshot's objects into the empty store and to the handlers (no DeltaFIFO round
    /// trip): the same notifications and store as a Replace of these items. They were
    /// transformed when they were cached: only their keys are checked.
    fn populate_resumed(&mut self, items: Vec<Arc<K>>) {
        let Self {
            pipeline, outputs, ..
        } = self;
        pipeline.populate_admitted(items, |o| key_is_valid(outputs, o));
    }

    /// Applies the transform, then checks that the object can be keyed; a refused object is
    /// reported.
    fn admit(&mut self, obj: Arc<K>) -> Option<Arc<K>> {
        let obj = match &self.transform {
            Some(t) => t(obj),
            None => obj,
        };
        self.check_key(obj)
    }

    /// A listed object, as [`admit`](Self::admit) has it, except the very object the cache
    /// holds under its key (a transport that took the objects it knew instead of decoding
    /// them again): it was transformed and checked when it was cached, and is not transformed
    /// twice.
    fn admit_listed(&mut self, obj: Arc<K>) -> Option<Arc<K>> {
        if self.transform.is_some()
            && self
                .pipeline
                .indexer()
                .get(&obj)
                .is_some_and(|held| Arc::ptr_eq(held, &obj))
        {
            return Some(obj);
        }
        self.admit(obj)
    }

    /// Checks that the object can be keyed; a refused object is reported.
    fn check_key(&mut self, obj: Arc<K>) -> Option<Arc<K>> {
        key_is_valid(&mut self.outputs, &obj).then_some(obj)
    }

    /// Moves the Reflector's outputs into the pipeline and runs the FIFO to empty.
    fn apply_reflector_outputs(&mut self) {
        while let Some(out) = self.reflector.poll() {
            match out {
                reflector::Output::Runtime(o) => self.outputs.push_back(o),
                reflector::Output::Store(op) => match &mut self.awaiting {
                    Some(a) => a.held.push_back(op),
                    None => self.apply_store_op(op),
                },
            }
        }
        while self.pipeline.process_one() {}
    }

    /// Applies one store change of the reflector (the caller runs the FIFO to empty).
    fn apply_store_op(&mut self, op: StoreOp<K>) {
        match op {
            StoreOp::Replace { items, .. } if self.transform.is_none() => {
                // The key check alone: the pipeline asks it of each object as it reads the
                // object's key (a relist's objects lie in memory in no order the list follows:
                // a pass of its own read every key once more).
                let Self {
                    pipeline, outputs, ..
                } = self;
                pipeline.populate_admitted(items, |o| key_is_valid(outputs, o));
            }
            StoreOp::Replace { items, .. } => {
                // Collected in place: a relist of 100k objects allocates no second list.
                let admitted = items
                    .into_iter()
                    .filter_map(|o| self.admit_listed(o))
                    .collect();
                // The first list into an empty cache goes straight to the store and the
                // handlers (the same notifications as through the DeltaFIFO, without its
                // per-key tables); any later list is a Replace and its diff.
                self.pipeline.populate(admitted);
            }
            StoreOp::Added(o) => {
                if let Some(o) = self.admit(o) {
                    self.pipeline.added(o)
                }
            }
            StoreOp::Modified(o) => {
                if let Some(o) = self.admit(o) {
                    self.pipeline.modified(o)
                }
            }
            StoreOp::Deleted(o) => {
                if let Some(o) = self.admit(o) {
                    self.pipeline.deleted(o)
                }
            }
        }
    }
}

/// Whether `obj`'s key can be stored; if not, says why as a watch error in `outputs`.
fn key_is_valid<K: Object>(outputs: &mut VecDeque<Output>, obj: &K) -> bool {
    let Some(why) = invalid_key(obj) else {
        return true;
    };
    let k = obj.key_ref();
    let shown = |s: &str| -> alloc::string::String { s.chars().take(80).collect() };
    let message = alloc::format!(
        "namespace {:?}, name {:?}: {why}; not stored",
        shown(k.namespace.unwrap_or("")),
        shown(k.name),
    );
    outputs.push_back(Output::WatchError(Failure::InvalidObject(message)));
    false
}
