//! DeltaFIFO: per-key lists of changes, queued in first-arrival order (client-go
//! `cache.DeltaFIFO`).

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use crate::hash::HashMap;
use smallvec::SmallVec;

use crate::cache::indexer::Indexer;
use crate::hash::IDLE_CAPACITY;
use crate::object::key::{self, KeyRefSet};
use crate::object::{Key, KeyRef, Object, ObjectOrTombstone, Tombstone};

/// What happened to an object.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeltaType {
    /// Seen for the first time by a watch.
    Added,
    /// Changed, seen by a watch.
    Updated,
    /// Deleted (the object may be a [`Tombstone`]).
    Deleted,
    /// Present in a (re)list.
    Replaced,
    /// A periodic resync of a known object.
    Sync,
}

/// One change to one object.
#[derive(Clone, Debug)]
pub struct Delta<K> {
    /// What happened.
    pub kind: DeltaType,
    /// The object after the change (for `Deleted`: its last state, or a tombstone).
    pub object: ObjectOrTombstone<K>,
}

/// The changes queued for one key, oldest first. One delta is stored inline: a key usually has
/// one queued (a watch event whose key has nothing queued does not go through the queue at
/// all, see `Pipeline::added`), and a relist of 100k keys queues one each, so the queue's table
/// costs 40 bytes of deltas per key instead of 72 (what the initial list's peak heap holds
/// above the steady cache). A second delta for the same key moves them to the heap.
pub type Deltas<K> = SmallVec<[Delta<K>; 1]>;

/// One key's deltas, popped from the queue.
#[derive(Debug)]
pub struct Popped<K> {
    /// The key.
    pub key: Key,
    /// Its deltas, oldest first; never empty.
    pub deltas: Deltas<K>,
    /// Whether this item belongs to the first `replace` (the initial list), i.e. it was popped
    /// before [`DeltaFifo::has_synced`] turned true.
    pub in_initial_list: bool,
}

/// The objects the FIFO's consumer already knows (client-go `KeyListerGetter`): the
/// informer's [`Indexer`]. Used to drop deletes of unknown keys, to find tombstone objects on
/// `replace`, to resync, and to reuse known keys' allocations.
pub trait KnownObjects<K> {
    /// The stored key and object for `key`.
    fn get_known(&self, key: KeyRef<'_>) -> Option<(&Key, &Arc<K>)>;
    /// Calls `f` for every known key and object.
    fn for_each_known(&self, f: &mut dyn FnMut(&Key, &Arc<K>));
}

impl<K: Object + 'static> KnownObjects<K> for Indexer<K> {
    fn get_known(&self, key: KeyRef<'_>) -> Option<(&Key, &Arc<K>)> {
        self.get_key_value(key)
    }
    fn for_each_known(&self, f: &mut dyn FnMut(&Key, &Arc<K>)) {
        for (k, o) in self.iter() {
            f(k, o)
        }
    }
}

/// A queue of per-key delta lists, with the contracts of client-go's `DeltaFIFO`
/// (CONFORMANCE 5–10):
///
/// - deltas for one key accumulate oldest → newest; the queue holds each key once, in order
///   of first arrival since it was last popped;
/// - two trailing `Deleted` deltas merge into one: the older is kept, unless it is a tombstone,
///   then the newer;
/// - [`delete`](Self::delete) of a key neither queued nor known is dropped;
/// - [`replace`](Self::replace) queues `Replaced` for every listed object and a tombstone for
///   every queued or known key the list lacks;
/// - [`resync`](Self::resync) queues `Sync` only for known keys with nothing queued;
/// - [`has_synced`](Self::has_synced) turns true once the first `replace`'s items have all
///   been popped.
///
/// Unlike client-go there is no lock and no blocking `Pop`: the owner calls [`pop`](Self::pop)
/// and processes the result.
pub struct DeltaFifo<K> {
    /// What a `replace` queues for a listed object.
    listed_as: DeltaType,
    /// The oldest queued key and its deltas, kept outside `items`/`queue`: with a consumer that
    /// keeps up (the driver pops after every input) each key passes through this slot alone, so
    /// the common case costs no hashing and no queue insert. Everything in `items` is newer.
    head: Option<(Key, Deltas<K>)>,
    items: HashMap<Key, Deltas<K>>,
    queue: VecDeque<Key>,
    populated: bool,
    initial_population_count: usize,
}

impl<K> Default for DeltaFifo<K> {
    fn default() -> Self {
        DeltaFifo {
            listed_as: DeltaType::Sync,
            head: None,
            items: HashMap::default(),
            queue: VecDeque::new(),
            populated: false,
            initial_population_count: 0,
        }
    }
}

impl<K> fmt::Debug for DeltaFifo<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeltaFifo")
            .field(
                "queued_keys",
                &(self.queue.len() + usize::from(self.head.is_some())),
            )
            .field("populated", &self.populated)
            .field("initial_population_count", &self.initial_population_count)
            .finish()
    }
}

/// How a [`DeltaFifo`] is built (client-go `DeltaFIFOOptions`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeltaFifoOptions {
    /// client-go's `EmitDeltaTypeReplaced`: whether [`replace`](DeltaFifo::replace) queues
    /// `Replaced` for each listed object. When false (client-go's default for a plain
    /// DeltaFIFO, kept there for consumers written before `Replaced` existed) it queues `Sync`.
    /// The informer's own FIFO sets it: `Replaced` is how it tells a relisted object from a
    /// periodic resync (CONFORMANCE 12).
    pub emit_delta_type_replaced: bool,
}

impl<K: Object> DeltaFifo<K> {
    /// An empty FIFO with client-go's default options: a `replace` queues `Sync` for each
    /// listed object (see [`DeltaFifoOptions`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty FIFO with these options.
    pub fn with_options(options: DeltaFifoOptions) -> Self {
        DeltaFifo {
            listed_as: if options.emit_delta_type_replaced {
                DeltaType::Replaced
            } else {
                DeltaType::Sync
            },
            ..Self::default()
        }
    }

    /// The options this FIFO was built with.
    pub fn options(&self) -> DeltaFifoOptions {
        DeltaFifoOptions {
            emit_delta_type_replaced: self.listed_as == DeltaType::Replaced,
        }
    }

    /// Queues `Added` for `obj`.
    pub fn add(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) {
        self.populated = true;
        let key = self.key_for(obj.key_ref(), known);
        self.queue_action(key, DeltaType::Added, ObjectOrTombstone::Object(obj));
    }

    /// Queues `Updated` for `obj`.
    pub fn update(&mut self, obj: Arc<K>, known: &dyn KnownObjects<K>) {
        self.populated = true;
        let key = self.key_for(obj.key_ref(), known);
        self.queue_action(key, DeltaType::Updated, ObjectOrTombstone::Object(obj));
    }

    /// Queues `Deleted` for `obj`, unless its key is neither queued nor known (CONFORMANCE 7).
    /// Returns whether a delta was queued.
    pub fn delete(&mut self, obj: ObjectOrTombstone<K>, known: &dyn KnownObjects<K>) -> bool {
        self.populated = true;
        let kr = match &obj {
            ObjectOrTombstone::Object(o) => o.key_ref(),
            ObjectOrTombstone::Tombstone(t) => t.key.as_ref_parts(),
        };
        let key = if let Some((k, _)) = self.find(kr) {
            k.clone()
        } else if let Some((k, _)) = known.get_known(kr) {
            k.clone()
        } else {
            return false;
        };
        self.queue_action(key, DeltaType::Deleted, obj);
        true
    }

    /// Replaces the queue's view with a full list (client-go `Replace`, CONFORMANCE 8).
    ///
    /// Queues `Replaced` (or `Sync`, see [`DeltaFifoOptions`]) for every listed object, then a
    /// `Deleted` tombstone for every key that is queued or known but not listed. A queued key's tombstone carries its newest queued
    /// state; a known key's, the stored one. Because trailing deletes merge, repeated empty
    /// replaces do not queue a second tombstone for the same key. The first call marks the FIFO
    /// populated and records how many keys must be popped before [`has_synced`](Self::has_synced).
    pub fn replace(&mut self, list: Vec<Arc<K>>, known: &dyn KnownObjects<K>) {
        let mut listed = KeyRefSet::with_capacity(list.len());
        for obj in &list {
            let k = obj.key_ref();
            listed.insert_hashed(key::hash_of(&k), k);
        }

        // Tombstones for queued keys the list lacks, then for known keys with nothing queued.
        let mut tombstones: Vec<Tombstone<K>> = Vec::new();
        let head = self.head.as_ref().map(|(k, d)| (k, d));
        for (key, deltas) in head.into_iter().chain(&self.items) {
            if listed.contains(key) {
                continue;
            }
            if let Some(newest) = deltas.last() {
                tombstones.push(Tombstone {
                    key: key.clone(),
                    obj: newest.object.object().clone(),
                });
            }
        }
        known.for_each_known(&mut |key, obj| {
            if listed.contains(key) || self.find(key.as_ref_parts()).is_some() {
                return;
            }
            tombstones.push(Tombstone {
                key: key.clone(),
                obj: obj.clone(),
            });
        });
        drop(listed);

        for obj in list {
            let key = self.key_for(obj.key_ref(), known);
            self.queue_action(key, self.listed_as, ObjectOrTombstone::Object(obj));
        }
        for t in tombstones {
            let key = t.key.clone();
            self.queue_action(key, DeltaType::Deleted, ObjectOrTombstone::Tombstone(t));
        }

        if !self.populated {
            self.populated = true;
            self.initial_population_count = self.len();
        }
    }

    /// Marks a FIFO that holds nothing as populated with nothing left to pop, for changes that
    /// reach the consumer without being queued: the state queueing and popping them would leave.
    /// Used for the straight path of a watch event while nothing is queued
    /// ([`Pipeline::added`](crate::cache::pipeline::Pipeline::added)) and for an initial population
    /// applied without the queue ([`Pipeline::populate`](crate::cache::pipeline::Pipeline::populate)).
    /// Returns whether this is the first population; while anything is queued it changes
    /// nothing and returns false.
    pub fn mark_populated(&mut self) -> bool {
        if !self.is_empty() {
            return false;
        }
        let first = !self.populated;
        self.populated = true;
        // Nothing is queued, so every key of a first `replace` has been popped already.
        self.initial_population_count = 0;
        first
    }

    /// Queues `Sync` for every known object whose key has nothing queued (CONFORMANCE 9).
    pub fn resync(&mut self, known: &dyn KnownObjects<K>) {
        let head = self.head.as_ref().map(|(k, _)| k);
        let items = &mut self.items;
        let queue = &mut self.queue;
        known.for_each_known(&mut |key, obj| {
            if head == Some(key) || items.contains_key(key) {
                return;
            }
            let mut deltas = Deltas::new();
            deltas.push(Delta {
                kind: DeltaType::Sync,
                object: ObjectOrTombstone::Object(obj.clone()),
            });
            items.insert(key.clone(), deltas);
            queue.push_back(key.clone());
        });
    }

    /// Pops the oldest key with its deltas.
    pub fn pop(&mut self) -> Option<Popped<K>> {
        if let Some((key, deltas)) = self.head.take() {
            let in_initial_list = !self.has_synced();
            if self.initial_population_count > 0 {
                self.initial_population_count -= 1;
            }
            return Some(Popped {
                key,
                deltas,
                in_initial_list,
            });
        }
        loop {
            let key = self.queue.pop_front()?;
            let in_initial_list = !self.has_synced();
            if self.initial_population_count > 0 {
                self.initial_population_count -= 1;
            }
            // Every queued key has deltas; the loop only guards the invariant.
            if let Some(deltas) = self.items.remove(&key) {
                if self.queue.is_empty() {
                    self.release_idle_capacity();
                }
                return Some(Popped {
                    key,
                    deltas,
                    in_initial_list,
                });
            }
        }
    }

    /// True once a `replace` (or any add/update/delete) has happened and every key queued by
    /// the first `replace` has been popped (CONFORMANCE 10).
    pub fn has_synced(&self) -> bool {
        self.populated && self.initial_population_count == 0
    }

    /// The queued deltas of `key`.
    pub fn get(&self, key: KeyRef<'_>) -> Option<&Deltas<K>> {
        self.find(key).map(|(_, d)| d)
    }

    /// The queued keys, oldest first.
    pub fn queued_keys(&self) -> impl Iterator<Item = &Key> {
        self.head.iter().map(|(k, _)| k).chain(self.queue.iter())
    }

    /// Number of queued keys.
    pub fn len(&self) -> usize {
        self.queue.len() + usize::from(self.head.is_some())
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.head.is_none() && self.queue.is_empty()
    }

    /// The queued key and deltas for `kr`.
    fn find(&self, kr: KeyRef<'_>) -> Option<(&Key, &Deltas<K>)> {
        if let Some((k, d)) = &self.head {
            if hashbrown::Equivalent::equivalent(&kr, k) {
                return Some((k, d));
            }
        }
        if self.items.is_empty() {
            return None;
        }
        self.items.get_key_value(&kr)
    }

    /// After a burst (an initial list of 100k objects, say) the queue is mostly empty; a table
    /// sized for the burst would make every later insert and remove probe cold memory. Give the
    /// memory back once drained.
    fn release_idle_capacity(&mut self) {
        if self.items.capacity() > IDLE_CAPACITY {
            self.items.shrink_to(IDLE_CAPACITY);
        }
        if self.queue.capacity() > IDLE_CAPACITY {
            self.queue.shrink_to(IDLE_CAPACITY);
        }
    }

    /// The key for `kr`, reusing an allocation already held by the queue or the known objects.
    fn key_for(&self, kr: KeyRef<'_>, known: &dyn KnownObjects<K>) -> Key {
        if let Some((k, _)) = self.find(kr) {
            k.clone()
        } else if let Some((k, _)) = known.get_known(kr) {
            k.clone()
        } else {
            kr.to_key()
        }
    }

    fn queue_action(&mut self, key: Key, kind: DeltaType, object: ObjectOrTombstone<K>) {
        let delta = Delta { kind, object };
        match &mut self.head {
            Some((k, deltas)) if *k == key => {
                deltas.push(delta);
                dedup_trailing_deletes(deltas);
                return;
            }
            None if self.queue.is_empty() => {
                let mut deltas = Deltas::new();
                deltas.push(delta);
                self.head = Some((key, deltas));
                return;
            }
            _ => {}
        }
        match self.items.get_mut(&key) {
            Some(deltas) => {
                deltas.push(delta);
                dedup_trailing_deletes(deltas);
            }
            None => {
                let mut deltas = Deltas::new();
                deltas.push(delta);
                self.items.insert(key.clone(), deltas);
                self.queue.push_back(key);
            }
        }
    }
}

/// Merges two trailing `Deleted` deltas (CONFORMANCE 6): keep the older, unless the older is a
/// tombstone, then keep the newer.
fn dedup_trailing_deletes<K>(deltas: &mut Deltas<K>) {
    let n = deltas.len();
    if n < 2 || deltas[n - 1].kind != DeltaType::Deleted || deltas[n - 2].kind != DeltaType::Deleted
    {
        return;
    }
    if let Some(newer) = deltas.pop() {
        if deltas[n - 2].object.is_tombstone() {
            deltas[n - 2] = newer;
        }
    }
}
