//! The informer's data plane: DeltaFIFO → HandleDeltas → Indexer + Processor.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::time::Duration;

use crate::cache::fifo::{Delta, DeltaFifo, DeltaFifoOptions, DeltaType};
#[cfg(any(test, feature = "spin"))]
use crate::cache::indexer::Journaled;
use crate::cache::indexer::{Change, IndexError, IndexFunc, Indexer, Stored};
use crate::cache::processor::{HandlerId, Notification, Processor, ResyncPeriods};
use crate::object::key::{self, KeyRefSet};
use crate::object::{Key, Object, ObjectOrTombstone, Tombstone, same_state};
use crate::time::Instant;

/// The data plane of a shared index informer, as pure state.
///
/// Inputs are what a reflector produces ([`replace`](Self::replace), [`added`](Self::added),
/// [`modified`](Self::modified), [`deleted`](Self::deleted)) and time
/// ([`handle_timeout`](Self::handle_timeout)); each is applied as client-go's `HandleDeltas`
/// applies a delta (update the [`Indexer`], then hand notifications to the [`Processor`]),
/// at once or, in [`DeliveryOrder::DeltaFifo`] behind deltas already queued, through the
/// [`DeltaFifo`], which [`process_one`](Self::process_one) pops one key at a time.
/// Notifications come out of [`poll_notification`](Self::poll_notification).
///
/// The loop a driver runs: after every input, call `process_one` until it returns false and
/// `poll_notification` until it returns `None` (running or dispatching each notification and
/// reporting [`handler_done`](Self::handler_done)); then wait for the next input or
/// [`poll_timeout`](Self::poll_timeout).
///
/// # Order and atomicity
///
/// With [`DeliveryOrder::InOrder`] (the default, client-go 1.36's) nothing is ever queued: a
/// watch event, a relist and a resync are each applied to the store, and handed to the
/// processor, within the call that brings them, in the order they arrive; a relist's deletions
/// come before its listed objects. With [`DeliveryOrder::DeltaFifo`] (client-go before 1.33) a
/// relist or resync that finds deltas queued joins them in the DeltaFIFO, per key, and reaches
/// the store as `process_one` pops it; otherwise it too is applied at once, listed objects
/// first and deletions last.
///
/// # Differences from client-go
///
/// - Handler queues are bounded by coalescing per key (see [`Processor`]).
/// - A `Deleted` delta whose key is not in the store is dropped instead of notified: no handler
///   can hold that key, since every handler's view is a fold of the store's changes.
pub struct Pipeline<K> {
    order: DeliveryOrder,
    indexer: Indexer<K>,
    fifo: DeltaFifo<K>,
    processor: Processor<K>,
    started: bool,
    next_resync_check: Option<Instant>,
}

/// In which order an informer's changes reach its store and handlers, chiefly a relist's
/// (client-go's `InOrderInformers` feature gate: off before 1.33, on by default in 1.33, locked
/// on in 1.36).
///
/// Either way a handler hears every change of one object in the order the server made them,
/// and the cache moves from the old list to the new one in one step (see
/// [`SharedIndexInformer`](crate::informer::SharedIndexInformer)); what differs is the order
/// across objects within a relist, and whether changes queued behind one another are grouped
/// per key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DeliveryOrder {
    /// client-go 1.36's order (its `RealFIFO`, with atomic relists and resyncs): every change
    /// in the order it arrived, nothing grouped per key; a relist's deletions (tombstones, for
    /// every cached key it lacks, in the cache's order) first, then its objects in list order.
    /// After a watch disruption a handler hears that an object is gone before it hears of the
    /// objects that replaced it (a pod deleted and another one created in its place under
    /// another name: no moment with both).
    #[default]
    InOrder,
    /// client-go's order before 1.33 (its `DeltaFIFO`): a relist's objects first, in list order,
    /// then its deletions; changes queued behind a relist or resync are grouped with the key's
    /// earlier deltas, at the key's first place in the queue.
    DeltaFifo,
}

/// How far ahead a pass over many objects reads what it will need of them (their keys): far
/// enough for those reads' cache misses to be under way when it gets there, near enough for
/// the lines to still be cached.
const AHEAD: usize = 8;

/// What a listed object is to the store, in a relist's straight path.
#[derive(Clone, Copy)]
enum Listed {
    /// The very object stored, in the same state: unchanged.
    Held,
    /// Any other object (new, changed, or a copy of the stored one), admitted.
    Other,
    /// Not admitted: as if it had not been listed.
    Refused,
}

impl<K: Object + 'static> Pipeline<K> {
    /// A pipeline whose resync check runs every `resync_check_period` (0: no resyncs), in
    /// [`DeliveryOrder::InOrder`].
    pub fn new(resync_check_period: Duration) -> Self {
        Self::with_order(resync_check_period, DeliveryOrder::InOrder)
    }

    /// A pipeline delivering in `order`.
    pub fn with_order(resync_check_period: Duration, order: DeliveryOrder) -> Self {
        Pipeline {
            order,
            indexer: Indexer::new(),
            fifo: DeltaFifo::with_options(DeltaFifoOptions {
                emit_delta_type_replaced: true,
            }),
            processor: Processor::new(resync_check_period),
            started: false,
            next_resync_check: None,
        }
    }

    /// The order it delivers in.
    pub fn order(&self) -> DeliveryOrder {
        self.order
    }

    /// The store.
    pub fn indexer(&self) -> &Indexer<K> {
        &self.indexer
    }

    /// Removes an index of the store (see [`Indexer::remove_index`]).
    pub fn remove_index(&mut self, name: &str) -> Result<(), IndexError> {
        self.indexer.remove_index(name)
    }

    /// Starts or stops recording the store's changes (see [`Indexer::record_changes`]).
    pub fn record_changes(&mut self, on: bool) {
        self.indexer.record_changes(on)
    }

    /// Moves the store's recorded changes to `into` (see [`Indexer::take_changes`]).
    pub fn take_changes(&mut self, into: &mut Vec<Change<K>>) {
        self.indexer.take_changes(into)
    }

    /// [`take_changes`](Self::take_changes) with their keys' hashes.
    #[cfg(any(test, feature = "spin"))]
    pub(crate) fn take_journaled(&mut self, into: &mut Vec<Journaled<K>>) {
        self.indexer.take_journaled(into)
    }

    /// The DeltaFIFO.
    pub fn fifo(&self) -> &DeltaFifo<K> {
        &self.fifo
    }

    /// The processor.
    pub fn processor(&self) -> &Processor<K> {
        &self.processor
    }

    /// Adds a named index; objects already stored are indexed at once.
    pub fn add_index(
        &mut self,
        name: &str,
        func: impl IndexFunc<K> + 'static,
    ) -> Result<(), IndexError> {
        self.indexer.add_index(name, func)
    }

    /// Marks the informer started at `now` and arms the resync check timer. Handlers added from
    /// now on get the cache replayed and no longer lower the check period.
    pub fn start(&mut self, now: Instant) {
        if self.started {
            return;
        }
        self.started = true;
        self.arm_resync_check(now);
    }

    /// Whether [`start`](Self::start) was called.
    pub fn is_started(&self) -> bool {
        self.started
    }

    /// A full list arrived (all pages).
    ///
    /// In [`DeliveryOrder::InOrder`] it is applied at once, after anything queued before it:
    /// each stored object the list lacks deleted with a tombstone (`DeletedFinalStateUnknown`),
    /// then each listed object as client-go's `Replaced` delta is handled (an add, an update, or
    /// for an unchanged resourceVersion a resync). The first list, into an empty store, is a
    /// [`populate`](Self::populate).
    ///
    /// In [`DeliveryOrder::DeltaFifo`] it queues `Replaced` deltas and tombstones in the
    /// DeltaFIFO. A relist while nothing is queued (the FIFO was populated and is empty: every
    /// relist of a running informer whose watch broke, and the relist after a warm restart's
    /// 410) is applied at once instead, in the FIFO's order: each listed object, in list order,
    /// then each tombstone. The same store changes and notifications as queueing and popping,
    /// without a FIFO entry per object (a relist of 100k objects built a 100k-key FIFO).
    pub fn replace(&mut self, items: Vec<Arc<K>>) {
        self.replace_admitted(items, |_| true);
    }

    /// [`replace`](Self::replace) with the objects `admit` accepts (the others dropped, as if
    /// not listed). In the straight path, a listed object that is the very one stored (a
    /// transport that took the cached objects instead of decoding them again) was admitted
    /// when it was stored, and is not asked about again.
    pub(crate) fn replace_admitted(
        &mut self,
        mut items: Vec<Arc<K>>,
        mut admit: impl FnMut(&K) -> bool,
    ) {
        if self.indexer.is_empty() {
            // As `populate` does: the same table growth, so the same iteration order (a late
            // handler's replay) whichever way a first list comes in.
            self.indexer.reserve(items.len());
        }
        match self.order {
            DeliveryOrder::InOrder => {
                // Only a `DeltaFifo` pipeline ever queues.
                debug_assert!(self.fifo.is_empty());
                if self.fifo.mark_populated() {
                    self.populate_now(items, admit);
                } else {
                    self.replace_now(items, admit);
                }
            }
            DeliveryOrder::DeltaFifo if self.fifo.has_synced() && self.fifo.is_empty() => {
                self.replace_now(items, admit)
            }
            DeliveryOrder::DeltaFifo => {
                items.retain(|o| admit(o));
                self.fifo.replace(items, &self.indexer);
            }
        }
    }

    /// The straight path of [`replace_admitted`](Self::replace_admitted).
    fn replace_now(&mut self, items: Vec<Arc<K>>, mut admit: impl FnMut(&K) -> bool) {
        // The listed keys (a key listed twice is noted once), hashed as the store hashes keys:
        // each listed key is hashed once, here, and stored with that hash below.
        let mut listed = KeyRefSet::with_capacity(items.len());
        // Each listed object's key hash, and what it is to the store.
        let mut hashes: Vec<(u64, Listed)> = Vec::with_capacity(items.len());
        // How many of the stored keys are listed.
        let mut stored_and_listed = 0;
        // The listed objects lie in memory in no order the list follows (kube-apiserver's watch
        // cache lists from a hash map; the objects taken from the cache lie where they were
        // loaded): each key read is a cache miss, or two, the second depending on the first.
        // At the start of each batch of `AHEAD` objects the next batch's keys are read, so
        // that their misses are under way together (reading a single key ahead, as `populate`
        // does, gained nothing here: its chain of misses held the loop up all the same).
        for (i, obj) in items.iter().enumerate() {
            if i % AHEAD == 0 {
                for ahead in items.iter().skip(i + AHEAD).take(AHEAD) {
                    core::hint::black_box(ahead.key_ref());
                }
            }
            let k = obj.key_ref();
            let hash = key::hash_of(&k);
            let stored = self.indexer.get_hashed(hash, k);
            let held = stored.is_some_and(|(_, s)| Arc::ptr_eq(s, obj) && same_state(&**s, obj));
            // Asked here, while the key is in the CPU's caches, rather than in a pass of its
            // own before, which read every key once more: a relist listed in another order
            // than loaded is measurably faster this way (`--bin relist` of `informer-bench`;
            // figures in docs/BENCHMARKS.md).
            let listed_as = if held {
                Listed::Held
            } else if admit(obj) {
                Listed::Other
            } else {
                Listed::Refused
            };
            hashes.push((hash, listed_as));
            if matches!(listed_as, Listed::Refused) {
                continue;
            }
            if listed.insert_hashed(hash, k) {
                stored_and_listed += usize::from(stored.is_some());
            }
        }
        // The stored keys not listed are the deletes missed, in the store's order (as the
        // DeltaFIFO's replace finds them). None when every stored key is listed: a relist
        // with no deletes since the last one costs no pass over the store.
        let mut tombstones: Vec<Tombstone<K>> = Vec::new();
        if stored_and_listed < self.indexer.len() {
            for (key, obj) in self.indexer.iter() {
                if !listed.contains(key) {
                    tombstones.push(Tombstone {
                        key: key.clone(),
                        obj: obj.clone(),
                    });
                }
            }
        }
        drop(listed);
        let deletions_first = self.order == DeliveryOrder::InOrder;
        if deletions_first {
            self.delete_missing(tombstones);
            tombstones = Vec::new();
        }
        // An object listed unchanged stays as cached, and its update is a resync: for the
        // very object stored, which needs nothing else, only when some handler is due for one.
        let syncing = self.processor.any_syncing();
        for (obj, (hash, listed_as)) in items.into_iter().zip(hashes) {
            match listed_as {
                Listed::Refused => continue,
                Listed::Held if !syncing => continue,
                Listed::Held | Listed::Other => {}
            }
            // Not an initial-list add: the FIFO has synced.
            let (key, old, stored) = self
                .indexer
                .upsert_hashed(hash, obj, Stored::UnlessSameState);
            self.notify_upsert(key, DeltaType::Replaced, old, stored, false);
        }
        self.delete_missing(tombstones);
    }

    /// A relist's deletions: each stored key the list lacks, with its tombstone.
    fn delete_missing(&mut self, tombstones: Vec<Tombstone<K>>) {
        for t in tombstones {
            if self.indexer.delete_key(t.key.as_ref_parts()).is_some() {
                let key = t.key.clone();
                self.processor.distribute_key(
                    key,
                    Notification::Delete(ObjectOrTombstone::Tombstone(t)),
                    false,
                );
            }
        }
    }

    /// The initial population of a pipeline that has never been populated (the informer's
    /// first list, a warm restart's snapshot): the store contents and handler notifications of
    /// [`replace`](Self::replace) followed by [`process_one`](Self::process_one) until empty
    /// (one `Replaced` delta per object, handled as `HandleDeltas` does: an `Add` flagged
    /// `in_initial_list`, an `Update` for a repeated key), and the FIFO synced, but without the
    /// FIFO's per-key tables: each object goes straight to the store and the handlers, whose
    /// shared notification log holds the list until they read it. Anything else (a FIFO that holds
    /// deltas or was populated, a store that is not empty) takes `replace`, whose diff then
    /// applies; the caller still runs `process_one` until empty.
    pub fn populate(&mut self, items: Vec<Arc<K>>) {
        self.populate_admitted(items, |_| true);
    }

    /// [`populate`](Self::populate) with the objects `admit` accepts (the others dropped).
    pub(crate) fn populate_admitted(&mut self, items: Vec<Arc<K>>, admit: impl FnMut(&K) -> bool) {
        if !self.indexer.is_empty() || !self.fifo.mark_populated() {
            self.replace_admitted(items, admit);
            return;
        }
        self.populate_now(items, admit);
    }

    /// The body of [`populate`](Self::populate), into an empty store whose FIFO was just
    /// marked populated.
    fn populate_now(&mut self, items: Vec<Arc<K>>, mut admit: impl FnMut(&K) -> bool) {
        // Handlers get the whole list before they can read any of it.
        self.processor.reserve(items.len());
        // One allocation each for the store's table and its journal, not a dozen growths (in
        // a fresh process every growth is fresh memory to fault in).
        self.indexer.reserve(items.len());
        // The objects were decoded a while ago (a list or snapshot of many MB): their keys are
        // no longer in the CPU's caches. Each key is read `AHEAD` objects before the object
        // is stored, so that those reads' cache misses overlap instead of queueing.
        let mut items = items.into_iter();
        while let Some(obj) = items.next() {
            if let Some(ahead) = items.as_slice().get(AHEAD) {
                core::hint::black_box(ahead.key_ref());
            }
            if !admit(&obj) {
                continue;
            }
            // A listed object, as through the FIFO. Its key is hashed from its parts and built
            // once, for the store, the journal and the handlers' log.
            match self.indexer.upsert_with(obj, Stored::UnlessSameState) {
                // Nothing was distributed before this first population, and the key is new to
                // the store, so no handler has anything pending for it.
                (key, None, obj) => self.processor.distribute_new(
                    key,
                    Notification::Add {
                        obj,
                        in_initial_list: true,
                    },
                ),
                // A repeated key: an update, as the FIFO's second `Replaced` delta would give.
                (key, old @ Some(_), obj) => {
                    self.notify_upsert(key, DeltaType::Replaced, old, obj, true)
                }
            }
        }
    }

    /// A watch `ADDED` event.
    pub fn added(&mut self, obj: Arc<K>) {
        if self.fifo.is_empty() {
            let _first = self.fifo.mark_populated();
            self.apply_now(DeltaType::Added, obj);
        } else {
            self.fifo.add(obj, &self.indexer);
        }
    }

    /// A watch `MODIFIED` event.
    pub fn modified(&mut self, obj: Arc<K>) {
        if self.fifo.is_empty() {
            let _first = self.fifo.mark_populated();
            self.apply_now(DeltaType::Updated, obj);
        } else {
            self.fifo.update(obj, &self.indexer);
        }
    }

    /// A watch `DELETED` event. Deletes of keys neither queued nor stored are dropped.
    pub fn deleted(&mut self, obj: Arc<K>) {
        if self.fifo.is_empty() {
            let _first = self.fifo.mark_populated();
            if let Some((key, _old)) = self.indexer.remove_entry(obj.key_ref()) {
                self.processor.distribute_key(
                    key,
                    Notification::Delete(ObjectOrTombstone::Object(obj)),
                    false,
                );
            }
        } else {
            self.fifo
                .delete(ObjectOrTombstone::Object(obj), &self.indexer);
        }
    }

    /// The straight path of a watch event whose key has nothing queued (the FIFO is empty):
    /// exactly what queueing the delta and popping it at once would do (the same store change,
    /// the same notifications), without building a delta list or looking the key up twice.
    #[inline(always)]
    fn apply_now(&mut self, kind: DeltaType, obj: Arc<K>) {
        // The FIFO is empty, so every item of the initial list has been popped.
        let in_initial_list = !self.fifo.has_synced();
        let (key, old, obj) = self.indexer.upsert_with(obj, Stored::Always);
        self.notify_upsert(key, kind, old, obj, in_initial_list);
    }

    /// Pops one key's deltas and applies them (client-go `HandleDeltas`). Returns false when
    /// the FIFO was empty. Watch events that arrive while the FIFO is empty are applied at
    /// once (see [`added`](Self::added)), so only lists, resyncs and events queued behind
    /// them wait for this.
    #[inline]
    pub fn process_one(&mut self) -> bool {
        // The common answer (watch events took the straight path), without a call.
        if self.fifo.is_empty() {
            return false;
        }
        self.process_next()
    }

    fn process_next(&mut self) -> bool {
        let Some(popped) = self.fifo.pop() else {
            return false;
        };
        for delta in popped.deltas {
            self.handle_delta(&popped.key, delta, popped.in_initial_list);
        }
        true
    }

    fn handle_delta(&mut self, key: &Key, delta: Delta<K>, in_initial_list: bool) {
        match (delta.kind, delta.object) {
            (DeltaType::Deleted, object) => {
                if self.indexer.delete_key(key.as_ref_parts()).is_some() {
                    self.processor
                        .distribute(key, Notification::Delete(object), false);
                }
            }
            (kind, ObjectOrTombstone::Object(obj))
            | (kind, ObjectOrTombstone::Tombstone(Tombstone { obj, .. })) => {
                // A listed object unchanged stays as cached, as in `replace_now`.
                let how = match kind {
                    DeltaType::Replaced => Stored::UnlessSameState,
                    _ => Stored::Always,
                };
                let (old, stored) = self.indexer.insert_with(key.clone(), obj, how);
                self.notify_upsert(key.clone(), kind, old, stored, in_initial_list);
            }
        }
    }

    /// Notifies the handlers of `obj` stored under `key` in place of `old` (if any).
    fn notify_upsert(
        &mut self,
        key: Key,
        kind: DeltaType,
        old: Option<Arc<K>>,
        obj: Arc<K>,
        in_initial_list: bool,
    ) {
        match old {
            Some(old) => {
                // A Sync, or a Replaced that did not change the resourceVersion, is a
                // resync: only handlers due for one get it (CONFORMANCE 12).
                let is_sync = match kind {
                    DeltaType::Sync => true,
                    DeltaType::Replaced => old.resource_version() == obj.resource_version(),
                    _ => false,
                };
                self.processor
                    .distribute_key(key, Notification::Update { old, new: obj }, is_sync);
            }
            None => self.processor.distribute_key(
                key,
                Notification::Add {
                    obj,
                    in_initial_list,
                },
                false,
            ),
        }
    }

    /// Registers a handler with a requested resync period (see
    /// [`Processor::add_handler`] for the period rules). A handler added after
    /// [`start`](Self::start) first gets one `Add` per cached object, flagged
    /// `in_initial_list`, then live notifications; with per-key coalescing nothing is lost or
    /// doubled across the join (CONFORMANCE 14).
    pub fn add_handler(&mut self, resync: Duration, now: Instant) -> (HandlerId, ResyncPeriods) {
        let (id, periods) = self.processor.add_handler(resync, now, self.started);
        if self.started {
            for (key, obj) in self.indexer.iter() {
                self.processor.push_to(
                    id,
                    key,
                    Notification::Add {
                        obj: obj.clone(),
                        in_initial_list: true,
                    },
                );
            }
        }
        (id, periods)
    }

    /// Removes a handler; it gets nothing after this (CONFORMANCE 15).
    pub fn remove_handler(&mut self, id: HandlerId) -> bool {
        self.processor.remove_handler(id)
    }

    /// The next notification for an idle handler.
    pub fn poll_notification(&mut self) -> Option<(HandlerId, Notification<K>)> {
        self.processor.poll_notification()
    }

    /// The next notification for handler `id`, if it is idle.
    pub fn poll_notification_for(&mut self, id: HandlerId) -> Option<Notification<K>> {
        self.processor.poll_notification_for(id)
    }

    /// Up to `max` of handler `id`'s next notifications, appended to `out`, if it is idle
    /// (see [`Processor::poll_batch_for`]); the handler is busy until
    /// [`handler_done`](Self::handler_done).
    pub fn poll_batch_for(
        &mut self,
        id: HandlerId,
        max: usize,
        out: &mut Vec<Notification<K>>,
    ) -> usize {
        self.processor.poll_batch_for(id, max, out)
    }

    /// Runs every pending notification of every idle handler through `f`, by reference (see
    /// [`Processor::deliver`]): for a driver that runs its handlers inline.
    pub fn deliver(&mut self, f: impl FnMut(HandlerId, &Notification<K>)) -> usize {
        self.processor.deliver(f)
    }

    /// Handler `id` finished its notification in flight.
    pub fn handler_done(&mut self, id: HandlerId) {
        self.processor.handler_done(id)
    }

    /// The informer has synced: the initial list was fully popped and applied.
    pub fn has_synced(&self) -> bool {
        self.fifo.has_synced()
    }

    /// Handler `id` has synced: the informer has, and the handler finished every add of its
    /// initial population.
    pub fn handler_has_synced(&self, id: HandlerId) -> bool {
        self.processor
            .handler_has_synced(id, self.fifo.has_synced())
    }

    /// When [`handle_timeout`](Self::handle_timeout) next needs to run (the resync check).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_resync_check
    }

    /// Runs the resync check if it is due: if any handler's resync is due, queue `Sync` deltas
    /// for every stored object with nothing queued.
    pub fn handle_timeout(&mut self, now: Instant) {
        match self.next_resync_check {
            Some(t) if now >= t => {}
            _ => return,
        }
        if self.processor.should_resync(now) {
            match self.order {
                DeliveryOrder::InOrder => self.resync_now(),
                DeliveryOrder::DeltaFifo => self.fifo.resync(&self.indexer),
            }
        }
        self.arm_resync_check(now);
    }

    /// A resync applied at once (in-order: nothing is queued): a `Sync` of every stored
    /// object, as `HandleDeltas` handles one (an update from the object to itself, for the
    /// handlers due). The store is not written: the object it would store is the one it holds.
    fn resync_now(&mut self) {
        debug_assert!(self.fifo.is_empty());
        let Self {
            indexer, processor, ..
        } = self;
        for (key, obj) in indexer.iter() {
            processor.distribute_key(
                key.clone(),
                Notification::Update {
                    old: obj.clone(),
                    new: obj.clone(),
                },
                true,
            );
        }
    }

    fn arm_resync_check(&mut self, now: Instant) {
        let period = self.processor.check_period();
        self.next_resync_check = (period != Duration::ZERO).then(|| now + period);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SplitMix64;
    use crate::sim::SimObject;
    use alloc::string::{String, ToString};

    fn obj(ns: usize, name: usize, rv: u64) -> Arc<SimObject> {
        Arc::new(SimObject {
            name: alloc::format!("o{name}"),
            namespace: Some(alloc::format!("ns{ns}")),
            resource_version: rv.to_string(),
            uid: alloc::format!("u{name}"),
            data: rv,
            noise: 0,
        })
    }

    fn describe(n: &Notification<SimObject>) -> String {
        match n {
            Notification::Add {
                obj,
                in_initial_list,
            } => alloc::format!(
                "add {} {} {in_initial_list}",
                obj.name,
                obj.resource_version
            ),
            Notification::Update { old, new } => alloc::format!(
                "update {} {}->{}",
                new.name,
                old.resource_version,
                new.resource_version
            ),
            Notification::Delete(d) => alloc::format!(
                "delete {} {} {}",
                d.object().name,
                d.object().resource_version,
                d.is_tombstone()
            ),
        }
    }

    /// Everything every handler gets until idle, per handler.
    fn drain(p: &mut Pipeline<SimObject>, handlers: usize) -> Vec<Vec<String>> {
        let mut got = alloc::vec![Vec::new(); handlers];
        while p.process_one() {}
        while let Some((id, n)) = p.poll_notification() {
            got[id.index() as usize].push(describe(&n));
            p.handler_done(id);
        }
        got
    }

    fn store(p: &Pipeline<SimObject>) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = p
            .indexer()
            .iter()
            .map(|(k, o)| (k.to_string(), o.resource_version.clone()))
            .collect();
        v.sort();
        v
    }

    /// A list naming one stored key twice, split two ways (namespace `a`, name `b/c`; and a
    /// cluster-scoped `a/b/c`: names Kubernetes never gives, one key to the store) still
    /// deletes the stored key it lacks: counting that key twice must not hide the delete.
    #[test]
    fn a_key_listed_under_two_splits_does_not_hide_a_delete() {
        let named = |ns: Option<&str>, name: &str, rv: u64| {
            Arc::new(SimObject {
                name: name.into(),
                namespace: ns.map(Into::into),
                resource_version: rv.to_string(),
                uid: alloc::format!("u-{name}"),
                data: rv,
                noise: 0,
            })
        };
        let mut p: Pipeline<SimObject> = Pipeline::new(Duration::ZERO);
        p.add_handler(Duration::ZERO, Instant::ZERO);
        p.populate(alloc::vec![
            named(Some("a"), "b/c", 1),
            named(Some("x"), "y", 2)
        ]);
        drain(&mut p, 1);
        p.replace(alloc::vec![
            named(Some("a"), "b/c", 3),
            named(None, "a/b/c", 4)
        ]);
        let got = drain(&mut p, 1);
        assert!(
            got[0].iter().any(|n| n.starts_with("delete y ")),
            "the delete of x/y: {got:?}"
        );
        assert_eq!(p.indexer().len(), 1, "only a/b/c is left");
    }

    /// A relist while nothing is queued is applied at once; it must give exactly what queueing
    /// it in the DeltaFIFO and popping it gives: the same store, the same notifications to
    /// every handler in the same order (kept, changed, new, gone and repeated keys; a resync
    /// of an unchanged object only to the handlers due for one).
    #[test]
    fn a_relist_applied_at_once_is_the_relist_through_the_fifo() {
        let fifo_order = || Pipeline::with_order(Duration::ZERO, DeliveryOrder::DeltaFifo);
        for seed in 0..200u64 {
            let mut rng = SplitMix64::new(seed);
            let handlers = 1 + rng.below(3) as usize;
            let keys = 1 + rng.below(40) as usize;
            let mut straight: Pipeline<SimObject> = fifo_order();
            let mut queued: Pipeline<SimObject> = fifo_order();
            for _ in 0..handlers {
                straight.add_handler(Duration::ZERO, Instant::ZERO);
                queued.add_handler(Duration::ZERO, Instant::ZERO);
            }
            let mut rv = 1;
            let first: Vec<_> = (0..keys)
                .filter(|_| rng.chance(0.7))
                .map(|i| {
                    rv += 1;
                    obj(i % 3, i, rv)
                })
                .collect();
            straight.populate(first.clone());
            queued.populate(first.clone());
            assert_eq!(drain(&mut straight, handlers), drain(&mut queued, handlers));
            for round in 0..3 {
                let mut list = Vec::new();
                for i in 0..keys {
                    if rng.chance(0.3) {
                        continue;
                    }
                    let kept = first
                        .iter()
                        .find(|o| o.name == alloc::format!("o{i}"))
                        .filter(|_| rng.chance(0.5));
                    let o = match kept {
                        // The same resourceVersion: a resync, for nobody here.
                        Some(o) => Arc::new((**o).clone()),
                        None => {
                            rv += 1;
                            obj(i % 3, i, rv)
                        }
                    };
                    if rng.chance(0.05) {
                        // A repeated key (an API server sends none; stay equivalent anyway).
                        rv += 1;
                        list.push(obj(i % 3, i, rv));
                    }
                    list.push(o);
                }
                straight.replace(list.clone());
                assert!(straight.fifo().is_empty(), "seed {seed}: applied at once");
                queued.fifo.replace(list, &queued.indexer);
                let a = drain(&mut straight, handlers);
                let b = drain(&mut queued, handlers);
                // Per handler; a repeated key is handled at its first place by the FIFO and
                // at each place at once, so compare each key's own sequence.
                for (h, (a, b)) in a.iter().zip(&b).enumerate() {
                    let per_key = |v: &Vec<String>| {
                        let mut m: alloc::collections::BTreeMap<String, Vec<String>> =
                            Default::default();
                        for s in v {
                            let name = s.split(' ').nth(1).unwrap_or("").to_string();
                            m.entry(name).or_default().push(s.clone());
                        }
                        m
                    };
                    assert_eq!(
                        per_key(a),
                        per_key(b),
                        "seed {seed} round {round} handler {h}"
                    );
                    if !list_has_repeats(a) {
                        assert_eq!(a, b, "seed {seed} round {round} handler {h}: order");
                    }
                }
                assert_eq!(
                    store(&straight),
                    store(&queued),
                    "seed {seed} round {round}"
                );
            }
        }
    }

    /// In [`DeliveryOrder::InOrder`] a relist is what client-go 1.36's RealFIFO makes of it
    /// (`Replace`: a `Deleted` tombstone for every known key the list lacks, then `Replaced`
    /// for every listed object, each popped and handled on its own): the same store, and every
    /// handler hears the same notifications in the same order. The model below is that queue,
    /// one delta at a time, through the same `HandleDeltas`.
    #[test]
    fn an_in_order_relist_is_the_real_fifos_replace() {
        for seed in 0..200u64 {
            let mut rng = SplitMix64::new(seed);
            let handlers = 1 + rng.below(3) as usize;
            let keys = 1 + rng.below(40) as usize;
            let mut straight: Pipeline<SimObject> = Pipeline::new(Duration::ZERO);
            let mut model: Pipeline<SimObject> = Pipeline::new(Duration::ZERO);
            for _ in 0..handlers {
                straight.add_handler(Duration::ZERO, Instant::ZERO);
                model.add_handler(Duration::ZERO, Instant::ZERO);
            }
            let mut rv = 1;
            let mut list: Vec<Arc<SimObject>> = (0..keys)
                .filter(|_| rng.chance(0.7))
                .map(|i| {
                    rv += 1;
                    obj(i % 3, i, rv)
                })
                .collect();
            straight.populate(list.clone());
            model.populate(list.clone());
            assert_eq!(drain(&mut straight, handlers), drain(&mut model, handlers));
            for round in 0..3 {
                let before = list.clone();
                list.clear();
                for i in 0..keys {
                    if rng.chance(0.3) {
                        continue;
                    }
                    let kept = before
                        .iter()
                        .find(|o| o.name == alloc::format!("o{i}"))
                        .filter(|_| rng.chance(0.5));
                    list.push(match kept {
                        Some(o) => Arc::new((**o).clone()),
                        None => {
                            rv += 1;
                            obj(i % 3, i, rv)
                        }
                    });
                }
                straight.replace(list.clone());
                assert!(straight.fifo().is_empty(), "seed {seed}: nothing queued");
                // The RealFIFO: deletions for the known keys not listed, then the list.
                let listed: Vec<Key> = list.iter().map(|o| Key::of(&**o)).collect();
                let mut deltas: Vec<(Key, Delta<SimObject>)> = Vec::new();
                for (key, stored) in model.indexer().iter() {
                    if !listed.contains(key) {
                        let t = Tombstone {
                            key: key.clone(),
                            obj: stored.clone(),
                        };
                        deltas.push((
                            key.clone(),
                            Delta {
                                kind: DeltaType::Deleted,
                                object: ObjectOrTombstone::Tombstone(t),
                            },
                        ));
                    }
                }
                for (key, o) in listed.into_iter().zip(&list) {
                    deltas.push((
                        key,
                        Delta {
                            kind: DeltaType::Replaced,
                            object: ObjectOrTombstone::Object(o.clone()),
                        },
                    ));
                }
                for (key, delta) in deltas {
                    model.handle_delta(&key, delta, false);
                }
                let a = drain(&mut straight, handlers);
                let b = drain(&mut model, handlers);
                assert_eq!(a, b, "seed {seed} round {round}");
                if let Some(first_add) = a[0].iter().position(|n| !n.starts_with("delete")) {
                    assert!(
                        a[0][first_add..].iter().all(|n| !n.starts_with("delete")),
                        "seed {seed} round {round}: deletions first: {:?}",
                        a[0]
                    );
                }
                assert_eq!(store(&straight), store(&model), "seed {seed} round {round}");
            }
        }
    }

    /// A relist keeps the cached object of one listed unchanged (the same uid and
    /// resourceVersion, another allocation): nothing changes for it (no journal entry for the
    /// readers' copies), its update is a resync (nobody due here), and the duplicate is
    /// dropped. A changed resourceVersion, or the same one under another uid, replaces it.
    /// Applied at once and through the FIFO alike.
    #[test]
    fn a_relist_keeps_the_cached_object_of_one_listed_unchanged() {
        for through_fifo in [false, true] {
            let mut p: Pipeline<SimObject> = Pipeline::new(Duration::ZERO);
            p.add_handler(Duration::ZERO, Instant::ZERO);
            let (a, b, c) = (obj(0, 1, 2), obj(0, 2, 3), obj(1, 3, 4));
            p.populate(alloc::vec![a.clone(), b.clone(), c.clone()]);
            drain(&mut p, 1);
            p.record_changes(true);
            let same_a = Arc::new((*a).clone());
            let newer_b = obj(0, 2, 9);
            let other_c = Arc::new(SimObject {
                uid: "recreated".into(),
                ..(*c).clone()
            });
            let list = alloc::vec![same_a.clone(), newer_b.clone(), other_c.clone()];
            if through_fifo {
                p.fifo.replace(list, &p.indexer);
            } else {
                p.replace(list);
                assert!(p.fifo().is_empty(), "applied at once");
            }
            let got = drain(&mut p, 1);
            assert_eq!(
                got[0],
                ["update o2 3->9"],
                "fifo {through_fifo}: only a changed resourceVersion reaches a handler not due"
            );
            let stored = |o: &Arc<SimObject>| p.indexer().get(o).unwrap().clone();
            assert!(Arc::ptr_eq(&stored(&a), &a), "fifo {through_fifo}: kept");
            assert_eq!(Arc::strong_count(&same_a), 1, "the duplicate is dropped");
            assert!(Arc::ptr_eq(&stored(&b), &newer_b));
            assert!(Arc::ptr_eq(&stored(&c), &other_c), "another uid replaces");
            let mut changes = Vec::new();
            p.take_changes(&mut changes);
            let changed: Vec<&str> = changes
                .iter()
                .map(|c| match c {
                    Change::Upsert { obj, .. } => obj.name.as_str(),
                    _ => "other",
                })
                .collect();
            assert_eq!(changed, ["o2", "o3"], "fifo {through_fifo}: journal");
        }
    }

    fn list_has_repeats(v: &[String]) -> bool {
        let mut names: Vec<&str> = v.iter().filter_map(|s| s.split(' ').nth(1)).collect();
        let n = names.len();
        names.sort_unstable();
        names.dedup();
        names.len() != n
    }
}
