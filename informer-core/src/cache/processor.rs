//! The shared processor: event handlers, their resync periods, and their bounded,
//! coalescing notification queues (client-go `sharedProcessor` + `processorListener`).

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;

use hashbrown::hash_map::RawEntryMut;

use crate::object::key::{self, KeyHashState};

use crate::hash::IDLE_CAPACITY;
use crate::object::{Key, ObjectOrTombstone};
use crate::time::Instant;

/// A map keyed by `Key`, hashed with the key's own hash ([`key::hash_of`]), which a caller
/// that has the hash already passes in.
type KeyMap<V> = hashbrown::HashMap<Key, V, KeyHashState>;

/// The shortest resync period a handler can get (client-go `minimumResyncPeriod`).
pub const MINIMUM_RESYNC_PERIOD: Duration = Duration::from_secs(1);

/// Identifies one informer (one [`Processor`]) in the process: drawn from a process-wide
/// counter when the processor is made, never reused. A [`HandlerId`] carries it, so that an id
/// handed to another informer is recognised as foreign (CONFORMANCE 32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InformerId(u64);

impl InformerId {
    /// A fresh identity, never handed out before in this process.
    pub fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        InformerId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The number behind it (unique in the process).
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for InformerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "informer#{}", self.0)
    }
}

/// Identifies a registered handler: the informer it belongs to and its number there (never
/// reused within one informer). An id only ever means something to its own informer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HandlerId {
    informer: InformerId,
    index: u64,
}

impl HandlerId {
    /// The informer the handler was registered with.
    pub fn informer(self) -> InformerId {
        self.informer
    }

    /// The handler's number within its informer (0 for the first handler added).
    pub fn index(self) -> u64 {
        self.index
    }
}

impl fmt::Display for HandlerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.index)
    }
}

/// A change delivered to a handler.
#[derive(Debug)]
pub enum Notification<K> {
    /// The object is new to the handler. `in_initial_list` is set for objects of the initial
    /// list and for the replay a late-added handler receives.
    Add {
        /// The object.
        obj: Arc<K>,
        /// Whether this add belongs to the handler's initial population.
        in_initial_list: bool,
    },
    /// The object changed from `old` to `new`. A resync delivers `old == new` (same
    /// resourceVersion).
    Update {
        /// The state the handler saw last.
        old: Arc<K>,
        /// The new state.
        new: Arc<K>,
    },
    /// The object is gone: its last known state, or a tombstone.
    Delete(ObjectOrTombstone<K>),
}

impl<K> Clone for Notification<K> {
    fn clone(&self) -> Self {
        match self {
            Notification::Add {
                obj,
                in_initial_list,
            } => Notification::Add {
                obj: obj.clone(),
                in_initial_list: *in_initial_list,
            },
            Notification::Update { old, new } => Notification::Update {
                old: old.clone(),
                new: new.clone(),
            },
            Notification::Delete(d) => Notification::Delete(d.clone()),
        }
    }
}

/// An add or update waiting for a handler.
#[derive(Debug)]
enum Upsert<K> {
    Add { obj: Arc<K>, initial: bool },
    Update { old: Arc<K>, new: Arc<K> },
}

/// What a handler has pending for one key: at most a delete followed by an add or update.
#[derive(Debug)]
struct Pending<K> {
    seq: u64,
    delete: Option<ObjectOrTombstone<K>>,
    upsert: Option<Upsert<K>>,
}

impl<K> Pending<K> {
    fn has_initial_add(&self) -> bool {
        matches!(self.upsert, Some(Upsert::Add { initial: true, .. }))
    }
}

/// A handler's pending notifications, coalesced per key so that pending memory is bounded by
/// one entry per key.
///
/// # Coalescing rules
///
/// client-go gives every handler an unbounded buffer: a stalled handler grows it until the
/// process runs out of memory. Here, each key has at most one pending entry, holding at most a
/// `Delete` followed by an `Add`/`Update`. A new notification for a key that already has an
/// entry is merged into it, keeping the entry's place in the queue:
///
/// | pending           | incoming      | result                                   |
/// |-------------------|---------------|------------------------------------------|
/// | –                 | any           | the notification                         |
/// | `Add(a)`          | `Update(a→b)` | `Add(b)` (keeps `in_initial_list`)        |
/// | `Update(o→a)`     | `Update(a→b)` | `Update(o→b)`                            |
/// | `Add(a)`          | `Delete(x)`   | nothing: the handler never saw the object |
/// | `Update(o→a)`     | `Delete(x)`   | `Delete(x)`                              |
/// | `Delete(x)`       | `Add(b)`      | `Delete(x)`, then `Add(b)`               |
/// | `Delete(x), Add(b)` | `Update(b→c)` | `Delete(x)`, then `Add(c)`             |
/// | `Delete(x), Add(b)` | `Delete(y)` | `Delete(x)`                              |
///
/// So the handler may miss intermediate states, but it always ends at the latest state, a
/// deletion followed by a re-creation is never merged into an update (the uid changed), an
/// `Update`'s `old` is always the state the handler saw last, and no object ever appears to go
/// back to an older resourceVersion. Order is preserved per key; keys are delivered in order of
/// first pending arrival.
///
/// The bound: the number of entries never exceeds the number of distinct keys that are in the
/// cache or in the handler's view (what it was told exists and has not yet been told is gone).
struct Queue<K> {
    /// The oldest entry, kept outside the map: a handler that keeps up only ever uses this
    /// slot, so the common case costs no hashing. Everything in `entries` is newer.
    head: Option<(Key, Pending<K>)>,
    entries: KeyMap<Pending<K>>,
    /// Keys in delivery order; an element is live only when its `seq` matches its entry's.
    order: VecDeque<(Key, u64)>,
    next_seq: u64,
    /// Pending adds flagged `in_initial_list`.
    initial_pending: usize,
}

impl<K> Queue<K> {
    fn new() -> Self {
        Queue {
            head: None,
            entries: KeyMap::default(),
            order: VecDeque::new(),
            next_seq: 0,
            initial_pending: 0,
        }
    }

    fn len(&self) -> usize {
        self.entries.len() + usize::from(self.head.is_some())
    }

    fn is_empty(&self) -> bool {
        self.head.is_none() && self.entries.is_empty()
    }

    /// Whether `key` has a pending entry.
    fn contains(&self, key: &Key) -> bool {
        self.contains_hashed(key::hash_of(key), key)
    }

    /// [`contains`](Self::contains) of a key whose hash is `hash` ([`key::hash_of`]).
    fn contains_hashed(&self, hash: u64, key: &Key) -> bool {
        self.head.as_ref().is_some_and(|(k, _)| k == key)
            || (!self.entries.is_empty()
                && self
                    .entries
                    .raw_entry()
                    .from_key_hashed_nocheck(hash, key)
                    .is_some())
    }

    fn push(&mut self, key: &Key, n: Notification<K>) {
        if let Some((head_key, p)) = &mut self.head {
            if head_key == key {
                let was_initial = p.has_initial_add();
                merge(p, n);
                let now_initial = p.has_initial_add();
                if p.delete.is_none() && p.upsert.is_none() {
                    self.head = None;
                }
                self.adjust_initial(was_initial, now_initial);
                return;
            }
        } else if self.entries.is_empty() {
            let mut p = Pending {
                seq: 0,
                delete: None,
                upsert: None,
            };
            merge(&mut p, n);
            if p.has_initial_add() {
                self.initial_pending += 1;
            }
            self.head = Some((key.clone(), p));
            return;
        }
        if let Some(p) = self.entries.get_mut(key) {
            let was_initial = p.has_initial_add();
            merge(p, n);
            let now_initial = p.has_initial_add();
            let empty = p.delete.is_none() && p.upsert.is_none();
            self.adjust_initial(was_initial, now_initial);
            if empty {
                self.entries.remove(key);
                self.compact_if_sparse();
            }
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut p = Pending {
            seq,
            delete: None,
            upsert: None,
        };
        merge(&mut p, n);
        if p.has_initial_add() {
            self.initial_pending += 1;
        }
        self.entries.insert(key.clone(), p);
        self.order.push_back((key.clone(), seq));
    }

    fn adjust_initial(&mut self, was_initial: bool, now_initial: bool) {
        if was_initial && !now_initial {
            self.initial_pending = self.initial_pending.saturating_sub(1);
        } else if !was_initial && now_initial {
            self.initial_pending += 1;
        }
    }

    /// Removes and returns the next notification and whether it is an initial-list add.
    fn pop(&mut self) -> Option<(Notification<K>, bool)> {
        if let Some((key, mut p)) = self.head.take() {
            if let Some(d) = p.delete.take() {
                if p.upsert.is_some() {
                    self.head = Some((key, p));
                }
                return Some((Notification::Delete(d), false));
            }
            if let Some(out) = self.take_upsert(p) {
                return Some(out);
            }
        }
        let n = self.pop_inner();
        if self.entries.is_empty() {
            // Give back capacity grown by a burst (initial list, late-handler replay), so the
            // steady state works on small, cache-resident tables.
            if self.entries.capacity() > IDLE_CAPACITY {
                self.entries.shrink_to(IDLE_CAPACITY);
            }
            if self.order.capacity() > IDLE_CAPACITY {
                self.order.clear();
                self.order.shrink_to(IDLE_CAPACITY);
            }
        }
        n
    }

    fn pop_inner(&mut self) -> Option<(Notification<K>, bool)> {
        while let Some((key, seq)) = self.order.pop_front() {
            let Some(p) = self.entries.get_mut(&key) else {
                continue;
            };
            if p.seq != seq {
                continue;
            }
            if let Some(d) = p.delete.take() {
                if p.upsert.is_some() {
                    // The add that follows keeps its place at the head.
                    self.order.push_front((key, seq));
                } else {
                    self.entries.remove(&key);
                }
                return Some((Notification::Delete(d), false));
            }
            let Some((_, p)) = self.entries.remove_entry(&key) else {
                continue;
            };
            if let Some(out) = self.take_upsert(p) {
                return Some(out);
            }
        }
        None
    }

    /// The add or update of an entry whose delete (if any) was delivered.
    fn take_upsert(&mut self, p: Pending<K>) -> Option<(Notification<K>, bool)> {
        match p.upsert? {
            Upsert::Add { obj, initial } => {
                if initial {
                    self.initial_pending = self.initial_pending.saturating_sub(1);
                }
                Some((
                    Notification::Add {
                        obj,
                        in_initial_list: initial,
                    },
                    initial,
                ))
            }
            Upsert::Update { old, new } => Some((Notification::Update { old, new }, false)),
        }
    }

    /// Keeps `order` within a constant factor of `entries` after cancellations.
    fn compact_if_sparse(&mut self) {
        if self.order.len() > 2 * self.entries.len() + 32 {
            let entries = &self.entries;
            self.order
                .retain(|(k, seq)| entries.get(k).is_some_and(|p| p.seq == *seq));
        }
    }
}

/// Applies the coalescing rules documented on [`Queue`].
fn merge<K>(p: &mut Pending<K>, n: Notification<K>) {
    match n {
        Notification::Add {
            obj,
            in_initial_list,
        } => {
            p.upsert = Some(match p.upsert.take() {
                // Only reachable if the caller breaks the add/update/delete protocol; stay
                // convergent: the handler ends at the latest state.
                Some(Upsert::Update { old, .. }) => Upsert::Update { old, new: obj },
                Some(Upsert::Add { initial, .. }) => Upsert::Add { obj, initial },
                None => Upsert::Add {
                    obj,
                    initial: in_initial_list,
                },
            });
        }
        Notification::Update { old, new } => {
            p.upsert = Some(match p.upsert.take() {
                Some(Upsert::Add { initial, .. }) => Upsert::Add { obj: new, initial },
                Some(Upsert::Update { old, .. }) => Upsert::Update { old, new },
                // After a pending delete the handler no longer has the object: it is an add.
                None if p.delete.is_some() => Upsert::Add {
                    obj: new,
                    initial: false,
                },
                None => Upsert::Update { old, new },
            });
        }
        Notification::Delete(d) => match p.upsert.take() {
            // The handler never saw this incarnation: drop it, keep an earlier delete.
            Some(Upsert::Add { .. }) => {}
            Some(Upsert::Update { .. }) => p.delete = Some(d),
            None => match &p.delete {
                // Two deletes in a row: as the DeltaFIFO, keep the older unless it is a
                // tombstone.
                Some(prev) if !prev.is_tombstone() => {}
                _ => p.delete = Some(d),
            },
        },
    }
}

struct Listener<K> {
    id: HandlerId,
    requested_resync: Duration,
    resync_period: Duration,
    next_resync: Instant,
    syncing: bool,
    queue: Queue<K>,
    /// Sequence number of the next [`Log`] entry this handler reads. Entries before it are read
    /// or spilled into `queue`; entries from it on (its unread run) are newer than everything
    /// in `queue`, hold distinct keys, and none of their keys is in `queue`.
    read: u64,
    /// Scratch of [`Processor::distribute`]: whether this handler gets the notification being
    /// distributed through its queue instead of the log.
    via_queue: bool,
    /// `Some(initial)` while a notification is being handled.
    in_flight: Option<bool>,
}

impl<K> Listener<K> {
    fn should_resync(&self, now: Instant) -> bool {
        self.resync_period != Duration::ZERO && now >= self.next_resync
    }
}

/// One notification shared by every handler that was keeping up when it was distributed.
struct LogEntry<K> {
    key: Key,
    /// Taken by the last reader.
    notification: Option<Notification<K>>,
    /// Handlers that have not read it yet.
    readers: usize,
    /// Whether it is an add flagged `in_initial_list`.
    initial: bool,
}

/// The shared notification log: a notification is stored once, and each handler that gets it
/// through the log reads it with its own cursor ([`Listener::read`]) instead of getting its
/// own copy queued.
///
/// A handler's unread entries (its *run*, from its cursor to the log's end) are delivered after
/// its coalescing [`Queue`] and behave as the tail of that queue. A handler, busy or not, keeps
/// reading the log as long as that stays true to the queue's rules: a new notification goes to
/// its run unless its key is already in the run or in the queue, where the queue would have
/// merged it. Then (and for a resync, which goes to some handlers only, and for the replay of a
/// late handler) the handler first *spills*: its run moves into its queue, oldest first, and
/// the notification is pushed there, merging as the [`Queue`] rules say. So a run holds
/// distinct keys that are not in the queue, every handler sees exactly the sequence its
/// coalescing queue alone would give it, and its pending notifications (queue and run) keep
/// the queue's bound: at most one per key in the cache or in its view.
///
/// Whether a key is in a handler's run is one comparison: `newest` maps each key to the
/// sequence number of its newest entry, and the key is in the run iff that entry is at or
/// after the handler's cursor. The map is kept only while it is needed: an entry appended when
/// every handler had read everything (the steady state), or for a key the caller knows no
/// handler has pending ([`Processor::distribute_new`]: a first population), is appended
/// without touching the map and only counted in the `untracked` range; the range goes into
/// the map when a notification comes whose key must be looked up. An entry leaves the log once
/// its last reader has read or spilled it; the map is emptied with the log and pruned of keys
/// whose newest entry left it, so both stay within the longest run (distinct keys).
struct Log<K> {
    entries: VecDeque<LogEntry<K>>,
    /// Sequence number of `entries[0]`.
    start: u64,
    /// Sequence number of the newest initial-list add ever appended.
    last_initial: Option<u64>,
    /// Key → sequence number of its newest entry, for the entries appended while some handler
    /// had unread entries (those at or after `start`; older values are stale).
    newest: KeyMap<u64>,
    /// The entries `untracked_from..untracked_to` are not in `newest` (appended when every
    /// handler had read everything, or by `distribute_new`); entries before `start` are
    /// ignored. Every other entry of the log is.
    untracked_from: u64,
    untracked_to: u64,
}

impl<K> Log<K> {
    fn new() -> Self {
        Log {
            entries: VecDeque::new(),
            start: 0,
            last_initial: None,
            newest: KeyMap::default(),
            untracked_from: 0,
            untracked_to: 0,
        }
    }

    /// Sequence number of the next entry to be appended.
    fn end(&self) -> u64 {
        self.start + self.entries.len() as u64
    }

    /// Reads entry `seq` for one of its readers: its notification and whether it is an initial
    /// add (the delivery path: no key).
    #[inline(always)]
    fn take(&mut self, seq: u64) -> Option<(Notification<K>, bool)> {
        let idx = usize::try_from(seq.checked_sub(self.start)?).ok()?;
        let e = self.entries.get_mut(idx)?;
        if e.readers > 1 {
            e.readers -= 1;
            let n = e.notification.as_ref()?.clone();
            return Some((n, e.initial));
        }
        e.readers = 0;
        let out = (e.notification.take()?, e.initial);
        if idx == 0 {
            self.trim();
        }
        Some(out)
    }

    /// Reads entry `seq` for one of its readers: its notification, whether it is an initial
    /// add, and (with `want_key`) its key.
    fn read(&mut self, seq: u64, want_key: bool) -> Option<(Notification<K>, bool, Option<Key>)> {
        let key = if want_key {
            let idx = usize::try_from(seq.checked_sub(self.start)?).ok()?;
            Some(self.entries.get(idx)?.key.clone())
        } else {
            None
        };
        let (n, initial) = self.take(seq)?;
        Some((n, initial, key))
    }

    /// Gives up one reader's share of entry `seq` without reading it.
    fn release(&mut self, seq: u64) {
        let Some(idx) = seq
            .checked_sub(self.start)
            .and_then(|i| usize::try_from(i).ok())
        else {
            return;
        };
        let Some(e) = self.entries.get_mut(idx) else {
            return;
        };
        if e.readers > 1 {
            e.readers -= 1;
            return;
        }
        e.readers = 0;
        e.notification = None;
        if idx == 0 {
            self.trim();
        }
    }

    /// Appends `n` for `readers` handlers that had read everything: `newest` is not needed
    /// for it unless someone still has it unread when the next notification comes.
    fn append_untracked(&mut self, key: Key, n: Notification<K>, readers: usize) {
        debug_assert!(self.entries.is_empty(), "every handler had read everything");
        let seq = self.end();
        self.untracked_from = seq;
        self.untracked_to = seq + 1;
        self.append(key, n, readers);
    }

    /// Appends `n` for `readers` handlers, none of which has anything pending for `key`, so
    /// that nobody needs to look `key` up before the next lookup: untracked.
    fn append_new(&mut self, key: Key, n: Notification<K>, readers: usize) {
        let seq = self.end();
        if self.untracked_to != seq {
            // Something else was appended since the untracked range: a tracked entry (the
            // lookup before it tracked the range) or one when every handler had read
            // everything (the range had left the log).
            debug_assert!(self.untracked_from.max(self.start) >= self.untracked_to);
            self.untracked_from = seq;
        }
        self.untracked_to = seq + 1;
        self.append(key, n, readers);
    }

    /// Puts the untracked entries still in the log into `newest`.
    fn track(&mut self) {
        let from = self.untracked_from.max(self.start);
        for seq in from..self.untracked_to {
            let Some(e) = usize::try_from(seq - self.start)
                .ok()
                .and_then(|i| self.entries.get(i))
            else {
                break;
            };
            match self.newest.raw_entry_mut().from_key(&e.key) {
                // A newer tracked entry for the key.
                RawEntryMut::Occupied(o) if *o.get() > seq => {}
                RawEntryMut::Occupied(mut o) => *o.get_mut() = seq,
                RawEntryMut::Vacant(v) => {
                    v.insert(e.key.clone(), seq);
                }
            }
        }
        self.untracked_from = self.untracked_to;
    }

    /// The sequence number of the newest entry for `key` (whose hash is `hash`,
    /// [`key::hash_of`]) still in the log, if any.
    fn newest(&mut self, hash: u64, key: &Key) -> Option<u64> {
        if self.untracked_to > self.start.max(self.untracked_from) {
            self.track();
        }
        self.newest
            .raw_entry()
            .from_key_hashed_nocheck(hash, key)
            .map(|(_, &seq)| seq)
            .filter(|&seq| seq >= self.start)
    }

    /// Appends `n` for `readers` handlers, some of which have unread entries; `hash` is the
    /// hash of `key` ([`key::hash_of`]).
    fn append_tracked(&mut self, hash: u64, key: Key, n: Notification<K>, readers: usize) {
        let seq = self.end();
        // Keys whose newest entry left the log are stale: drop them before the map outgrows
        // the log (which holds distinct keys per run).
        if self.newest.len() > 2 * self.entries.len() + IDLE_CAPACITY {
            let start = self.start;
            self.newest.retain(|_, s| *s >= start);
        }
        match self
            .newest
            .raw_entry_mut()
            .from_key_hashed_nocheck(hash, &key)
        {
            RawEntryMut::Occupied(mut o) => *o.get_mut() = seq,
            RawEntryMut::Vacant(v) => {
                v.insert_hashed_nocheck(hash, key.clone(), seq);
            }
        }
        self.append(key, n, readers);
    }

    fn append(&mut self, key: Key, n: Notification<K>, readers: usize) {
        let initial = matches!(
            n,
            Notification::Add {
                in_initial_list: true,
                ..
            }
        );
        if initial {
            self.last_initial = Some(self.end());
        }
        self.entries.push_back(LogEntry {
            key,
            notification: Some(n),
            readers,
            initial,
        });
    }

    /// Drops fully read entries from the front.
    fn trim(&mut self) {
        while self.entries.front().is_some_and(|e| e.readers == 0) {
            self.entries.pop_front();
            self.start += 1;
        }
        if self.entries.is_empty()
            && (!self.newest.is_empty() || self.entries.capacity() > IDLE_CAPACITY)
        {
            self.idle();
        }
    }

    /// Every handler has read everything: nothing needs `newest` any more (the untracked
    /// range, now before `start`, is ignored), and capacity grown by a burst is given back.
    #[cold]
    fn idle(&mut self) {
        self.newest.clear();
        if self.newest.capacity() > IDLE_CAPACITY {
            self.newest.shrink_to(IDLE_CAPACITY);
        }
        if self.entries.capacity() > IDLE_CAPACITY {
            self.entries.shrink_to(IDLE_CAPACITY);
        }
    }

    /// Moves `l`'s unread entries into its queue (coalescing them there).
    fn spill(&mut self, l: &mut Listener<K>) {
        let end = self.end();
        while l.read < end {
            let seq = l.read;
            l.read += 1;
            if let Some((n, _, Some(key))) = self.read(seq, true) {
                l.queue.push(&key, n);
            }
        }
    }

    /// Forgets `l`'s unread entries (the handler is removed).
    fn abandon(&mut self, l: &mut Listener<K>) {
        let end = self.end();
        while l.read < end {
            let seq = l.read;
            l.read += 1;
            self.release(seq);
        }
    }

    /// Whether `l` has an unread initial-list add.
    fn has_unread_initial(&self, l: &Listener<K>) -> bool {
        self.last_initial
            .is_some_and(|s| s >= l.read && s < self.end())
    }

    /// Runs `l`'s unread entries through `f` by reference and marks them read; returns how
    /// many. The caller trims the log afterwards.
    fn read_run(
        &mut self,
        l: &mut Listener<K>,
        f: &mut impl FnMut(HandlerId, &Notification<K>),
    ) -> usize {
        let from = usize::try_from(l.read.saturating_sub(self.start)).unwrap_or(usize::MAX);
        let mut read = 0;
        if from < self.entries.len() {
            for e in self.entries.range_mut(from..) {
                if let Some(n) = &e.notification {
                    f(l.id, n);
                    read += 1;
                }
                // Read only once `f` returned: a handler that panics gets it again.
                l.read += 1;
                e.readers = e.readers.saturating_sub(1);
                if e.readers == 0 {
                    // Read by everyone: nothing needs it, though it may wait behind older
                    // entries before it leaves the log.
                    e.notification = None;
                }
            }
        }
        read
    }

    /// The next notification for idle listener `l`: its queue first (older), then the log.
    #[inline(always)]
    fn pop_for(&mut self, l: &mut Listener<K>) -> Option<(Notification<K>, bool)> {
        if !l.queue.is_empty() {
            if let Some(out) = l.queue.pop() {
                return Some(out);
            }
        }
        if l.read < self.end() {
            let seq = l.read;
            l.read += 1;
            return self.take(seq);
        }
        None
    }
}

/// How a handler's resync period was set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResyncPeriods {
    /// What the handler asked for (after raising to [`MINIMUM_RESYNC_PERIOD`]).
    pub requested: Duration,
    /// What it gets: zero when the informer's check period is zero, else at least the check
    /// period.
    pub effective: Duration,
}

/// The shared processor.
///
/// Holds the handlers, decides which of them are due for a resync, and queues notifications for
/// each of them. Nothing here runs a handler: a runtime asks for the next notification with
/// [`poll_notification`](Self::poll_notification), runs it, and reports
/// [`handler_done`](Self::handler_done). A handler has at most one notification in flight, so
/// its queue (and the coalescing in it) holds everything it has not started yet; a stalled
/// handler delays nobody else.
///
/// A notification is stored once, in a shared log each handler reads through its own cursor:
/// adding a handler costs no per-handler queue insert, whether it keeps up or lags behind a
/// burst of distinct keys (an initial list). Only a handler that would get a second pending
/// notification for one key, or a resync, moves its unread entries into its coalescing queue,
/// so every handler sees what that queue alone would give it and its pending memory keeps the
/// queue's bound.
pub struct Processor<K> {
    listeners: Vec<Listener<K>>,
    log: Log<K>,
    /// Whose handlers these are: every id handed out carries it.
    informer: InformerId,
    next_id: u64,
    check_period: Duration,
    /// Round-robin start for `poll_notification`.
    cursor: usize,
    /// How many handlers have something in their queue, so that polling with nothing to
    /// deliver (every log entry read, every queue empty) answers without visiting each handler.
    queued: usize,
}

/// [`Processor::deliver`] in progress: when it ends (normally or because a handler panicked)
/// the log is trimmed and, on the path where every handler keeps up, every cursor is set to
/// the first entry not yet handed to all of them. So a panicking handler leaves the processor
/// consistent: what was handed out before stays delivered, and the notification being handed
/// out stays pending for every handler (one that already had it gets it again).
struct Delivering<'a, K> {
    p: &'a mut Processor<K>,
    fast: bool,
}

impl<K> Drop for Delivering<'_, K> {
    fn drop(&mut self) {
        if self.fast {
            let start = self.p.log.start;
            for l in &mut self.p.listeners {
                l.read = start;
            }
        }
        self.p.log.trim();
    }
}

/// Moves `l`'s unread log entries into its queue, then pushes `n` there: a clone, or `n`
/// itself for the `last` handler that gets it.
fn spill_and_push<K>(
    log: &mut Log<K>,
    queued: &mut usize,
    l: &mut Listener<K>,
    key: &Key,
    n: &mut Option<Notification<K>>,
    last: bool,
) {
    let was_empty = l.queue.is_empty();
    log.spill(l);
    let own = if last { n.take() } else { n.clone() };
    if let Some(own) = own {
        l.queue.push(key, own);
    }
    account(queued, was_empty, l.queue.is_empty());
}

/// Counts a queue that became non-empty (+1) or empty (−1) in `queued`.
fn account(queued: &mut usize, was_empty: bool, now_empty: bool) {
    match (was_empty, now_empty) {
        (true, false) => *queued += 1,
        (false, true) => *queued -= 1,
        _ => {}
    }
}

impl<K> fmt::Debug for Processor<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Processor")
            .field("handlers", &self.listeners.len())
            .field("check_period", &self.check_period)
            .finish()
    }
}

/// `determineResyncPeriod`: 0 stays 0; with a zero check period nobody resyncs; otherwise at
/// least the check period.
fn determine_resync_period(desired: Duration, check: Duration) -> Duration {
    if desired == Duration::ZERO || check == Duration::ZERO {
        Duration::ZERO
    } else {
        desired.max(check)
    }
}

impl<K> Processor<K> {
    /// A processor whose informer checks for due resyncs every `check_period` (0: never).
    pub fn new(check_period: Duration) -> Self {
        Processor {
            listeners: Vec::new(),
            log: Log::new(),
            informer: InformerId::next(),
            next_id: 0,
            check_period,
            cursor: 0,
            queued: 0,
        }
    }

    /// The identity every [`HandlerId`] of this processor carries.
    pub fn informer_id(&self) -> InformerId {
        self.informer
    }

    /// Whether `id` was handed out by this processor (whether or not it is still registered).
    pub fn owns(&self, id: HandlerId) -> bool {
        id.informer == self.informer
    }

    /// The informer's resync check period.
    pub fn check_period(&self) -> Duration {
        self.check_period
    }

    /// Registers a handler asking for a resync every `requested` (0: never) — client-go
    /// `AddEventHandlerWithResyncPeriod` (CONFORMANCE 13):
    ///
    /// - a non-zero period below 1 s is raised to 1 s;
    /// - below the informer's check period, a handler added before start lowers the check period
    ///   (and every handler's effective period is recomputed); one added after start is raised
    ///   to the check period;
    /// - with a check period of 0 the handler never resyncs.
    pub fn add_handler(
        &mut self,
        requested: Duration,
        now: Instant,
        started: bool,
    ) -> (HandlerId, ResyncPeriods) {
        let mut requested = requested;
        if requested != Duration::ZERO {
            requested = requested.max(MINIMUM_RESYNC_PERIOD);
            if requested < self.check_period {
                if started {
                    requested = self.check_period;
                } else {
                    self.check_period = requested;
                    for l in &mut self.listeners {
                        l.resync_period =
                            determine_resync_period(l.requested_resync, self.check_period);
                    }
                }
            }
        }
        let effective = determine_resync_period(requested, self.check_period);
        let id = HandlerId {
            informer: self.informer,
            index: self.next_id,
        };
        self.next_id += 1;
        self.listeners.push(Listener {
            id,
            requested_resync: requested,
            resync_period: effective,
            next_resync: now + effective,
            syncing: false,
            queue: Queue::new(),
            read: self.log.end(),
            via_queue: false,
            in_flight: None,
        });
        (
            id,
            ResyncPeriods {
                requested,
                effective,
            },
        )
    }

    /// Removes a handler and drops its pending notifications (CONFORMANCE 15). Returns whether
    /// it existed.
    pub fn remove_handler(&mut self, id: HandlerId) -> bool {
        match self.listeners.iter().position(|l| l.id == id) {
            Some(i) => {
                let mut l = self.listeners.remove(i);
                account(&mut self.queued, l.queue.is_empty(), true);
                self.log.abandon(&mut l);
                true
            }
            None => false,
        }
    }

    /// The registered handlers.
    pub fn handlers(&self) -> impl Iterator<Item = HandlerId> + '_ {
        self.listeners.iter().map(|l| l.id)
    }

    /// Whether `id` is registered.
    pub fn contains(&self, id: HandlerId) -> bool {
        self.listeners.iter().any(|l| l.id == id)
    }

    /// A handler's resync periods.
    pub fn resync_periods(&self, id: HandlerId) -> Option<ResyncPeriods> {
        self.listener(id).map(|l| ResyncPeriods {
            requested: l.requested_resync,
            effective: l.resync_period,
        })
    }

    /// Decides which handlers are due for a resync at `now` and marks them as the syncing set
    /// that later resync notifications go to (client-go `shouldResync`). Returns whether any is
    /// due, i.e. whether the caller should queue a resync in the DeltaFIFO.
    pub fn should_resync(&mut self, now: Instant) -> bool {
        let mut any = false;
        for l in &mut self.listeners {
            l.syncing = l.should_resync(now);
            if l.syncing {
                any = true;
                l.next_resync = now + l.resync_period;
            }
        }
        any
    }

    /// Queues `n` for the handlers it is for: every handler, or with `is_sync`, only those in
    /// the syncing set chosen by the last [`should_resync`](Self::should_resync).
    ///
    /// A notification for every handler is stored once, in the shared log, for each handler
    /// that can read it there; a handler whose unread entries or queue already
    /// hold `key`, and a resync, go through the handler's coalescing queue.
    pub fn distribute(&mut self, key: &Key, n: Notification<K>, is_sync: bool) {
        self.distribute_key(key.clone(), n, is_sync)
    }

    /// [`distribute`](Self::distribute) of a key the caller gives away (the log keeps it).
    pub(crate) fn distribute_key(&mut self, key: Key, n: Notification<K>, is_sync: bool) {
        if is_sync {
            self.distribute_sync(&key, n);
            return;
        }
        if self.all_caught_up() {
            // Every handler has read everything (the common case): one log entry, read by all
            // of them, and nothing to look up.
            if !self.listeners.is_empty() {
                self.log.append_untracked(key, n, self.listeners.len());
            }
            return;
        }
        self.distribute_lagging(key, n);
    }

    /// Whether every handler has read the whole log and has an empty queue, in O(1): an entry
    /// stays in the log only while its front entry has a reader (every path that reads or
    /// gives up an entry trims the log), so the log is empty exactly when every cursor is at
    /// its end.
    fn all_caught_up(&self) -> bool {
        let caught_up = self.queued == 0 && self.log.entries.is_empty();
        debug_assert_eq!(
            caught_up,
            self.listeners
                .iter()
                .all(|l| l.read == self.log.end() && l.queue.is_empty()),
            "the log holds unread entries exactly when some cursor is behind"
        );
        caught_up
    }

    /// [`distribute`](Self::distribute) of a notification (not a resync) for a key that no
    /// handler has anything pending for, which the caller knows (no notification for `key` was
    /// ever distributed or pushed to a handler: a first population into an empty cache). Every
    /// handler reads it in the log, as `distribute` would decide, without looking the key up.
    pub(crate) fn distribute_new(&mut self, key: Key, n: Notification<K>) {
        if self.listeners.is_empty() {
            return;
        }
        if self.all_caught_up() {
            self.log.append_untracked(key, n, self.listeners.len());
            return;
        }
        debug_assert!(self.listeners.iter().all(|l| !l.queue.contains(&key)));
        self.log.append_new(key, n, self.listeners.len());
    }

    /// Makes room in the log for `n` more notifications, for a burst (a first population)
    /// that handlers will not read before it ends.
    pub(crate) fn reserve(&mut self, n: usize) {
        if !self.listeners.is_empty() {
            self.log.entries.reserve(n);
        }
    }

    /// [`distribute`](Self::distribute) when some handler has unread entries or a queue (out
    /// of line, so that the common case stays small).
    #[inline(never)]
    fn distribute_lagging(&mut self, key: Key, n: Notification<K>) {
        let end = self.log.end();
        // One hash of the key, for the log's table and every handler's queue.
        let hash = key::hash_of(&key);
        // Where does `key` stand for each handler?
        let newest = self.log.newest(hash, &key);
        let mut readers = 0;
        let mut spilling = 0;
        for l in &mut self.listeners {
            l.via_queue =
                newest.is_some_and(|seq| seq >= l.read) || l.queue.contains_hashed(hash, &key);
            if l.via_queue {
                spilling += 1;
            } else {
                readers += 1;
            }
        }
        let mut n = Some(n);
        if spilling > 0 {
            for l in self.listeners.iter_mut().filter(|l| l.via_queue) {
                spilling -= 1;
                let last = readers == 0 && spilling == 0;
                spill_and_push(&mut self.log, &mut self.queued, l, &key, &mut n, last);
                if readers > 0 {
                    // Skips the entry appended below.
                    l.read = end + 1;
                }
            }
        }
        if readers > 0 {
            if let Some(n) = n {
                self.log.append_tracked(hash, key, n, readers);
            }
        }
    }

    /// Whether some handler is due for the resync being distributed (see
    /// [`should_resync`](Self::should_resync)): a resync notification reaches nobody otherwise.
    pub(crate) fn any_syncing(&self) -> bool {
        self.listeners.iter().any(|l| l.syncing)
    }

    /// A resync goes to some handlers only: always through their queues (it is rare, and a
    /// log entry cannot be skipped by the handlers it is not for while they have unread
    /// entries before it).
    fn distribute_sync(&mut self, key: &Key, n: Notification<K>) {
        let mut behind = self.listeners.iter_mut().filter(|l| l.syncing).peekable();
        let mut n = Some(n);
        while let Some(l) = behind.next() {
            let last = behind.peek().is_none();
            spill_and_push(&mut self.log, &mut self.queued, l, key, &mut n, last);
        }
    }

    /// Queues `n` for one handler only (used to replay the cache to a late-added handler).
    pub fn push_to(&mut self, id: HandlerId, key: &Key, n: Notification<K>) {
        if let Some(i) = self.position(id) {
            let l = &mut self.listeners[i];
            spill_and_push(&mut self.log, &mut self.queued, l, key, &mut Some(n), true);
        }
    }

    /// The next notification for any idle handler (one with nothing in flight), taking handlers
    /// in turn. The handler is then busy until [`handler_done`](Self::handler_done).
    pub fn poll_notification(&mut self) -> Option<(HandlerId, Notification<K>)> {
        debug_assert_eq!(
            self.queued,
            self.listeners
                .iter()
                .filter(|l| !l.queue.is_empty())
                .count(),
            "the count of handlers with a queue"
        );
        if self.queued == 0 && self.log.entries.is_empty() {
            return None;
        }
        let n = self.listeners.len();
        let end = self.log.end();
        let mut idx = if self.cursor < n { self.cursor } else { 0 };
        for _ in 0..n {
            let here = idx;
            idx += 1;
            if idx == n {
                idx = 0;
            }
            let Some(l) = self.listeners.get_mut(here) else {
                break;
            };
            if l.in_flight.is_some() || (l.read == end && l.queue.is_empty()) {
                continue;
            }
            let was_empty = l.queue.is_empty();
            let popped = self.log.pop_for(l);
            account(&mut self.queued, was_empty, l.queue.is_empty());
            if let Some((notification, initial)) = popped {
                l.in_flight = Some(initial);
                self.cursor = idx;
                return Some((l.id, notification));
            }
        }
        None
    }

    /// The next notification for handler `id`, if it is idle.
    pub fn poll_notification_for(&mut self, id: HandlerId) -> Option<Notification<K>> {
        let i = self.position(id)?;
        let l = &mut self.listeners[i];
        if l.in_flight.is_some() {
            return None;
        }
        let was_empty = l.queue.is_empty();
        let popped = self.log.pop_for(l);
        account(&mut self.queued, was_empty, l.queue.is_empty());
        let (notification, initial) = popped?;
        l.in_flight = Some(initial);
        Some(notification)
    }

    /// Up to `max` of handler `id`'s next notifications, in its order, appended to `out`, if
    /// the handler is idle; returns how many. The handler is then busy with the whole batch
    /// until [`handler_done`](Self::handler_done): what arrives meanwhile waits (and coalesces)
    /// behind it, exactly as behind one notification in flight. A runtime that hands
    /// notifications to another thread takes them in batches to pay its hand-over (a lock, a
    /// wake-up) once per batch instead of once per notification.
    pub fn poll_batch_for(
        &mut self,
        id: HandlerId,
        max: usize,
        out: &mut Vec<Notification<K>>,
    ) -> usize {
        // Every handler caught up (the common case after an input that brought no change, such
        // as a bookmark or a timer): nothing to look up. A runtime asks this of each of its
        // handlers after every input.
        if self.all_caught_up() {
            return 0;
        }
        let Some(i) = self.position(id) else {
            return 0;
        };
        let l = &mut self.listeners[i];
        if l.in_flight.is_some() || max == 0 {
            return 0;
        }
        let was_empty = l.queue.is_empty();
        let mut taken = 0;
        let mut initial = false;
        while taken < max {
            let Some((n, is_initial)) = self.log.pop_for(l) else {
                break;
            };
            out.push(n);
            initial |= is_initial;
            taken += 1;
        }
        account(&mut self.queued, was_empty, l.queue.is_empty());
        if taken > 0 {
            l.in_flight = Some(initial);
        }
        taken
    }

    /// Runs every pending notification of every idle handler through `f`, by reference, in
    /// each handler's order; returns how many. For a driver that runs its handlers inline (on
    /// its own thread, between inputs): what the loop of [`poll_notification`], the handler
    /// and [`handler_done`](Self::handler_done) does, without a clone of the notification per
    /// handler or a visit of the round robin per notification. A handler reading the shared
    /// log gets the log's entry itself; the entry is dropped once every handler has read it.
    /// Busy handlers (a notification taken with a `poll_*` call and not yet reported done) are
    /// skipped.
    ///
    /// [`poll_notification`]: Self::poll_notification
    pub fn deliver(&mut self, mut f: impl FnMut(HandlerId, &Notification<K>)) -> usize {
        if self.all_caught_up() {
            return 0;
        }
        let mut delivered = 0;
        let start = self.log.start;
        let fast = self.queued == 0
            && self
                .listeners
                .iter()
                .all(|l| l.in_flight.is_none() && l.read == start);
        // Puts the bookkeeping right when delivery ends, also when `f` panics.
        let guard = Delivering { p: self, fast };
        let p = &mut *guard.p;
        if fast {
            // Every handler idle and at the log's start (they keep up): each reads every entry,
            // so an entry is read by all of them in turn and leaves the log at once.
            while let Some(e) = p.log.entries.front() {
                if let Some(n) = &e.notification {
                    for l in &p.listeners {
                        f(l.id, n);
                    }
                    delivered += p.listeners.len();
                }
                p.log.entries.pop_front();
                p.log.start += 1;
            }
            return delivered;
        }
        let end = p.log.end();
        for l in &mut p.listeners {
            if l.in_flight.is_some() {
                continue;
            }
            while let Some((n, _)) = l.queue.pop() {
                if l.queue.is_empty() {
                    p.queued -= 1;
                }
                f(l.id, &n);
                delivered += 1;
            }
            if l.read < end {
                delivered += p.log.read_run(l, &mut f);
            }
        }
        delivered
    }

    /// Reports that handler `id` finished its notification in flight.
    pub fn handler_done(&mut self, id: HandlerId) {
        if let Some(l) = self.listener_mut(id) {
            l.in_flight = None;
        }
    }

    /// Whether handler `id` has received and finished every add of its initial population,
    /// given whether the informer itself has synced (client-go's per-registration
    /// `HasSynced`, CONFORMANCE 14). False for unknown handlers.
    pub fn handler_has_synced(&self, id: HandlerId, upstream_synced: bool) -> bool {
        self.listener(id).is_some_and(|l| {
            upstream_synced
                && l.queue.initial_pending == 0
                && !self.log.has_unread_initial(l)
                && l.in_flight != Some(true)
        })
    }

    /// Number of pending (not yet started) notification entries of handler `id`.
    pub fn pending(&self, id: HandlerId) -> usize {
        let end = self.log.end();
        self.listener(id).map_or(0, |l| {
            l.queue.len() + usize::try_from(end.saturating_sub(l.read)).unwrap_or(usize::MAX)
        })
    }

    /// Whether handler `id` has a notification in flight.
    pub fn is_busy(&self, id: HandlerId) -> bool {
        self.listener(id).is_some_and(|l| l.in_flight.is_some())
    }

    /// Where handler `id` is in `listeners`: they are kept in the order of their ids (ids only
    /// grow, removal keeps the order), so a binary search; the handler polled last (the usual
    /// caller of `handler_done`) is tried first.
    fn position(&self, id: HandlerId) -> Option<usize> {
        let last = self
            .cursor
            .wrapping_sub(1)
            .min(self.listeners.len().wrapping_sub(1));
        if self.listeners.get(last).is_some_and(|l| l.id == id) {
            return Some(last);
        }
        self.listeners.binary_search_by_key(&id, |l| l.id).ok()
    }

    fn listener(&self, id: HandlerId) -> Option<&Listener<K>> {
        self.position(id).map(|i| &self.listeners[i])
    }

    fn listener_mut(&mut self, id: HandlerId) -> Option<&mut Listener<K>> {
        self.position(id).map(|i| &mut self.listeners[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::{DynamicObject, ObjectMetaParts};
    use alloc::collections::{BTreeMap, BTreeSet};

    fn obj(name: &str, rv: &str) -> Arc<DynamicObject> {
        Arc::new(DynamicObject {
            metadata: ObjectMetaParts {
                name: name.into(),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            }
            .into(),
            ..Default::default()
        })
    }

    fn add(o: &Arc<DynamicObject>, initial: bool) -> Notification<DynamicObject> {
        Notification::Add {
            obj: o.clone(),
            in_initial_list: initial,
        }
    }

    /// Handlers that keep up share one log entry and get the very same object; a busy one
    /// keeps reading the log, one whose unread entry has the same key falls back to its
    /// coalescing queue, and the log empties once every reader has read or spilled its entry.
    #[test]
    fn handlers_that_keep_up_share_one_log_entry() {
        let mut p: Processor<DynamicObject> = Processor::new(Duration::ZERO);
        let ids: Vec<HandlerId> = (0..3)
            .map(|_| p.add_handler(Duration::ZERO, Instant::ZERO, true).0)
            .collect();
        let key = Key::parse("ns/a");
        let a1 = obj("a", "1");
        p.distribute(&key, add(&a1, true), false);
        assert_eq!(p.log.entries.len(), 1);
        for l in &p.listeners {
            assert!(l.queue.is_empty());
        }
        for id in &ids {
            assert_eq!(p.pending(*id), 1);
            assert!(!p.handler_has_synced(*id, true), "an initial add is unread");
        }
        // Handler 0 reads it and stays busy.
        match p.poll_notification_for(ids[0]) {
            Some(Notification::Add { obj, .. }) => assert!(Arc::ptr_eq(&obj, &a1)),
            other => panic!("{other:?}"),
        }
        assert!(
            !p.handler_has_synced(ids[0], true),
            "its initial add is in flight"
        );
        // An update: handler 0 is busy but has read everything: it reads the update in the
        // log; 1 and 2 have an unread entry for the key: they spill and coalesce `Add(a1)` +
        // `Update(a1→a2)` into `Add(a2)` in their queues.
        let a2 = obj("a", "2");
        p.distribute(
            &key,
            Notification::Update {
                old: a1.clone(),
                new: a2.clone(),
            },
            false,
        );
        assert_eq!(p.log.entries.len(), 1, "the update, for handler 0");
        assert!(p.listeners[0].queue.is_empty());
        assert!(!p.listeners[1].queue.is_empty() && !p.listeners[2].queue.is_empty());
        for id in &ids {
            assert_eq!(p.pending(*id), 1);
        }
        match p.poll_notification_for(ids[1]) {
            Some(Notification::Add {
                obj,
                in_initial_list: true,
            }) => assert!(Arc::ptr_eq(&obj, &a2)),
            other => panic!("{other:?}"),
        }
        p.handler_done(ids[0]);
        match p.poll_notification_for(ids[0]) {
            Some(Notification::Update { old, new }) => {
                assert!(Arc::ptr_eq(&old, &a1) && Arc::ptr_eq(&new, &a2))
            }
            other => panic!("{other:?}"),
        }
        for id in &ids {
            p.handler_done(*id);
            while p.poll_notification_for(*id).is_some() {
                p.handler_done(*id);
            }
            assert_eq!(p.pending(*id), 0);
            assert!(p.handler_has_synced(*id, true));
        }
        // Back in step: the next notification is shared again; removing a handler with an
        // unread entry releases its share.
        p.distribute(&Key::parse("ns/b"), add(&obj("b", "3"), false), false);
        assert_eq!(p.log.entries.len(), 1);
        assert!(p.remove_handler(ids[2]));
        assert!(p.poll_notification_for(ids[0]).is_some());
        assert_eq!(p.log.entries.len(), 1, "handler 1 has not read it");
        let (id, _) = p.poll_notification().unwrap();
        assert_eq!(id, ids[1]);
        assert!(p.log.entries.is_empty());
        assert!(p.poll_notification().is_none());
        // A late handler starts after the log's end and a replay goes through its queue.
        let (late, _) = p.add_handler(Duration::ZERO, Instant::ZERO, true);
        assert_eq!(p.pending(late), 0);
        p.push_to(late, &key, add(&a2, true));
        assert_eq!(p.pending(late), 1);
        assert!(!p.handler_has_synced(late, true));
    }

    fn update(old: &Arc<DynamicObject>, new: &Arc<DynamicObject>) -> Notification<DynamicObject> {
        Notification::Update {
            old: old.clone(),
            new: new.clone(),
        }
    }

    fn delete(o: &Arc<DynamicObject>) -> Notification<DynamicObject> {
        Notification::Delete(ObjectOrTombstone::Object(o.clone()))
    }

    fn ns_key(i: usize) -> Key {
        Key::parse(&alloc::format!("ns/k{i}"))
    }

    /// Whether two notifications carry the same objects (by identity) and flags.
    fn same(a: &Notification<DynamicObject>, b: &Notification<DynamicObject>) -> bool {
        match (a, b) {
            (
                Notification::Add {
                    obj: x,
                    in_initial_list: i,
                },
                Notification::Add {
                    obj: y,
                    in_initial_list: j,
                },
            ) => Arc::ptr_eq(x, y) && i == j,
            (
                Notification::Update { old: o1, new: n1 },
                Notification::Update { old: o2, new: n2 },
            ) => Arc::ptr_eq(o1, o2) && Arc::ptr_eq(n1, n2),
            (Notification::Delete(d1), Notification::Delete(d2)) => {
                d1.is_tombstone() == d2.is_tombstone() && Arc::ptr_eq(d1.object(), d2.object())
            }
            _ => false,
        }
    }

    /// The log's structure: every entry's reader count is the number of handlers whose run
    /// holds it; a run holds distinct keys, none of them in the handler's queue (so a handler's
    /// pending notifications are at most one per key); `newest` stays within the log; and the
    /// `queued` count is right.
    fn check_structure(p: &Processor<DynamicObject>) {
        let log = &p.log;
        let end = log.end();
        for (i, e) in log.entries.iter().enumerate() {
            let seq = log.start + i as u64;
            let runs = p
                .listeners
                .iter()
                .filter(|l| l.read <= seq && seq < end)
                .count();
            assert_eq!(e.readers, runs, "readers of entry {seq}");
            assert_eq!(e.notification.is_some(), runs > 0, "entry {seq}");
        }
        for l in &p.listeners {
            assert!(l.read >= log.start && l.read <= end, "cursor of {:?}", l.id);
            let mut keys = BTreeSet::new();
            for seq in l.read..end {
                let key = &log.entries[(seq - log.start) as usize].key;
                assert!(keys.insert(key.clone()), "{key:?} twice in a run");
                assert!(!l.queue.contains(key), "{key:?} in a run and the queue");
            }
        }
        assert!(log.newest.len() <= 2 * log.entries.len() + IDLE_CAPACITY + 1);
        // Every entry outside the untracked range has its key in `newest`, at it or later.
        for (i, e) in log.entries.iter().enumerate() {
            let seq = log.start + i as u64;
            if (log.untracked_from..log.untracked_to).contains(&seq) {
                continue;
            }
            assert!(
                log.newest.get(&e.key).is_some_and(|&s| s >= seq),
                "entry {seq} untracked"
            );
        }
        assert_eq!(
            p.queued,
            p.listeners.iter().filter(|l| !l.queue.is_empty()).count()
        );
    }

    /// A handler stalled on its first notification of a 10k-object initial list reads the
    /// rest through the log, in order, without anything entering its queue; a notification for
    /// a key it has unread moves its run into its queue, where it coalesces.
    #[test]
    fn a_lagging_handler_reads_distinct_keys_through_the_log() {
        const N: usize = 10_000;
        let mut p: Processor<DynamicObject> = Processor::new(Duration::ZERO);
        let stalled = p.add_handler(Duration::ZERO, Instant::ZERO, true).0;
        let other = p.add_handler(Duration::ZERO, Instant::ZERO, true).0;
        let objs: Vec<Arc<DynamicObject>> =
            (0..N).map(|i| obj(&alloc::format!("k{i}"), "1")).collect();
        for (i, o) in objs.iter().enumerate() {
            p.distribute(&ns_key(i), add(o, true), false);
            if i == 0 {
                assert!(p.poll_notification_for(stalled).is_some());
            }
        }
        assert_eq!(p.queued, 0);
        assert!(p.listeners.iter().all(|l| l.queue.is_empty()));
        assert_eq!(p.log.entries.len(), N);
        assert_eq!(p.pending(stalled), N - 1);
        assert_eq!(p.pending(other), N);
        assert!(!p.handler_has_synced(stalled, true));
        check_structure(&p);
        // The other handler reads everything, sharing the objects.
        for o in &objs {
            match p.poll_notification_for(other) {
                Some(Notification::Add {
                    obj,
                    in_initial_list: true,
                }) => assert!(Arc::ptr_eq(&obj, o)),
                n => panic!("{n:?}"),
            }
            p.handler_done(other);
        }
        assert!(p.handler_has_synced(other, true));
        assert_eq!(p.log.entries.len(), N - 1, "the stalled handler's run");
        assert!(p.listeners[0].queue.is_empty());
        // An update of a key in the stalled handler's run: it spills; the other reads the
        // update in the log.
        let updated = obj("k5000", "2");
        p.distribute(&ns_key(5000), update(&objs[5000], &updated), false);
        // A delete of a key in the run, now in the queue: its add is dropped.
        p.distribute(&ns_key(7000), delete(&objs[7000]), false);
        check_structure(&p);
        assert_eq!(p.pending(stalled), N - 2, "k7000 cancelled");
        assert_eq!(p.pending(other), 2);
        assert!(p.listeners[1].queue.is_empty());
        assert_eq!(
            p.log.entries.len(),
            2,
            "the stalled handler's run was spilled"
        );
        // A new key is in the stalled handler's run again, after its queue.
        let fresh = obj("fresh", "3");
        p.distribute(&Key::parse("ns/fresh"), add(&fresh, false), false);
        check_structure(&p);
        assert_eq!(p.pending(stalled), N - 1);
        assert!(!p.listeners[0].queue.contains(&Key::parse("ns/fresh")));
        p.handler_done(stalled);
        let mut seen = Vec::new();
        while let Some(n) = p.poll_notification_for(stalled) {
            p.handler_done(stalled);
            seen.push(n);
        }
        assert_eq!(seen.len(), N - 1);
        let mut want = (1..N).filter(|&i| i != 7000);
        for n in &seen[..N - 2] {
            let i = want.next().unwrap();
            let expect = if i == 5000 { &updated } else { &objs[i] };
            assert!(same(n, &add(expect, true)), "{i}: {n:?}");
        }
        assert!(same(&seen[N - 2], &add(&fresh, false)));
        assert!(p.handler_has_synced(stalled, true));
        while p.poll_notification_for(other).is_some() {
            p.handler_done(other);
        }
        assert!(p.log.entries.is_empty() && p.log.newest.is_empty());
    }

    /// Removing a handler that lags gives up its share of its run: the entries only it had
    /// unread leave the log (and with them the key map).
    #[test]
    fn removing_a_lagging_handler_releases_its_run() {
        let mut p: Processor<DynamicObject> = Processor::new(Duration::ZERO);
        let stalled = p.add_handler(Duration::ZERO, Instant::ZERO, true).0;
        let other = p.add_handler(Duration::ZERO, Instant::ZERO, true).0;
        let o = obj("x", "1");
        for i in 0..1000 {
            p.distribute(&ns_key(i), add(&o, false), false);
            while p.poll_notification_for(other).is_some() {
                p.handler_done(other);
            }
        }
        assert_eq!(p.log.entries.len(), 1000);
        assert_eq!(Arc::strong_count(&o), 1 + 1000);
        assert!(!p.log.newest.is_empty());
        assert!(p.remove_handler(stalled));
        assert!(p.log.entries.is_empty() && p.log.newest.is_empty());
        assert_eq!(
            Arc::strong_count(&o),
            1,
            "every pinned notification released"
        );
        check_structure(&p);
    }

    /// A handler that lags forever (never polled) under churn over a few keys: its pending
    /// notifications never exceed the keys in the cache or its view, the log stays within the
    /// distinct keys, and the key map within the log.
    #[test]
    fn a_stalled_handler_keeps_the_queue_bound() {
        let mut p: Processor<DynamicObject> = Processor::new(Duration::ZERO);
        let stalled = p.add_handler(Duration::ZERO, Instant::ZERO, true).0;
        let other = p.add_handler(Duration::ZERO, Instant::ZERO, true).0;
        let mut rng = crate::rng::SplitMix64::new(7);
        let mut store: BTreeMap<usize, Arc<DynamicObject>> = BTreeMap::new();
        let mut spills = 0;
        for step in 0..20_000u64 {
            // A new key every step (names never reused) and churn over 50 reused keys.
            let i = if rng.chance(0.3) {
                1000 + step as usize
            } else {
                rng.below(50) as usize
            };
            let key = ns_key(i);
            let rv = alloc::format!("{step}");
            let had = p.listeners[0].queue.len();
            match store.get(&i).cloned() {
                Some(old) if rng.chance(0.4) => {
                    store.remove(&i);
                    p.distribute(&key, delete(&old), false);
                }
                Some(old) => {
                    let new = obj(&alloc::format!("k{i}"), &rv);
                    store.insert(i, new.clone());
                    p.distribute(&key, update(&old, &new), false);
                }
                None => {
                    let new = obj(&alloc::format!("k{i}"), &rv);
                    store.insert(i, new.clone());
                    p.distribute(&key, add(&new, false), false);
                }
            }
            if p.listeners[0].queue.len() > had + 1 {
                spills += 1;
            }
            // Old keys leave now and then, so the store does not only grow.
            if step % 3 == 0 {
                if let Some((&j, _)) = store.range(1000..).next() {
                    let old = store.remove(&j).unwrap();
                    p.distribute(&ns_key(j), delete(&old), false);
                }
            }
            while p.poll_notification_for(other).is_some() {
                p.handler_done(other);
            }
            // The stalled handler's view is empty: it never got anything.
            assert!(p.pending(stalled) <= store.len(), "step {step}");
            assert!(p.log.entries.len() <= store.len());
            if step % 997 == 0 {
                check_structure(&p);
            }
        }
        assert!(spills > 100, "churn made the handler spill ({spills})");
        check_structure(&p);
    }

    /// Random distributes, resyncs, replays, polls, handler additions and removals, checked
    /// step by step against a reference that gives each handler its own coalescing [`Queue`]
    /// and nothing else: every handler gets exactly the notifications that queue gives, in the
    /// same order, with the same pending count and synced state.
    #[test]
    fn every_handler_sees_what_its_coalescing_queue_alone_gives() {
        struct Reference {
            queue: Queue<DynamicObject>,
            in_flight: Option<bool>,
        }
        impl Reference {
            fn pop(&mut self, got: &Notification<DynamicObject>, what: &str) {
                assert!(
                    self.in_flight.is_none(),
                    "{what}: delivered to a busy handler"
                );
                let (want, initial) = self.queue.pop().expect("the reference has nothing");
                assert!(same(got, &want), "{what}: got {got:?}, want {want:?}");
                self.in_flight = Some(initial);
            }
        }
        /// A new handler, and its reference: an empty queue, nothing in flight.
        fn add_with_reference(
            p: &mut Processor<DynamicObject>,
            refs: &mut BTreeMap<HandlerId, Reference>,
        ) {
            let id = p.add_handler(Duration::ZERO, Instant::ZERO, true).0;
            let reference = Reference {
                queue: Queue::new(),
                in_flight: None,
            };
            refs.insert(id, reference);
        }
        for seed in 0..300u64 {
            let mut rng = crate::rng::SplitMix64::new(seed);
            let keys = 2 + rng.below(30) as usize;
            let burst = 1 + rng.below(40) as usize;
            let mut p: Processor<DynamicObject> = Processor::new(Duration::ZERO);
            let mut refs: BTreeMap<HandlerId, Reference> = BTreeMap::new();
            for _ in 0..1 + rng.below(4) {
                add_with_reference(&mut p, &mut refs);
            }
            let mut store: BTreeMap<usize, Arc<DynamicObject>> = BTreeMap::new();
            let mut rv = 0u64;
            let mut initial = true;
            let mut fresh = 0;
            for step in 0..400 {
                let what = alloc::format!("seed {seed} step {step}");
                let ids: Vec<HandlerId> = refs.keys().copied().collect();
                let pick = |rng: &mut crate::rng::SplitMix64| {
                    (!ids.is_empty()).then(|| ids[rng.below(ids.len() as u64) as usize])
                };
                match rng.below(100) {
                    // A burst of events (distinct keys while they are new).
                    0..=39 => {
                        for _ in 0..1 + rng.below(burst as u64) {
                            let i = match store
                                .keys()
                                .nth(rng.below(store.len().max(1) as u64) as usize)
                            {
                                // Now and then a key first added by distribute_new.
                                Some(&i) if rng.chance(0.2) => i,
                                _ => rng.below(keys as u64) as usize,
                            };
                            let key = ns_key(i);
                            rv += 1;
                            let n = match store.get(&i).cloned() {
                                Some(old) if rng.chance(0.3) => {
                                    store.remove(&i);
                                    if rng.chance(0.2) {
                                        Notification::Delete(ObjectOrTombstone::Tombstone(
                                            crate::object::Tombstone {
                                                key: key.clone(),
                                                obj: old,
                                            },
                                        ))
                                    } else {
                                        delete(&old)
                                    }
                                }
                                Some(old) => {
                                    let new = obj(&alloc::format!("k{i}"), &alloc::format!("{rv}"));
                                    store.insert(i, new.clone());
                                    update(&old, &new)
                                }
                                None => {
                                    let new = obj(&alloc::format!("k{i}"), &alloc::format!("{rv}"));
                                    store.insert(i, new.clone());
                                    add(&new, initial)
                                }
                            };
                            for r in refs.values_mut() {
                                r.queue.push(&key, n.clone());
                            }
                            p.distribute(&key, n, false);
                        }
                    }
                    // Keys never seen before (a first population): distribute_new.
                    40..=44 => {
                        for _ in 0..1 + rng.below(burst as u64) {
                            let i = 1000 + fresh;
                            fresh += 1;
                            let new = obj(&alloc::format!("k{i}"), "1");
                            store.insert(i, new.clone());
                            let n = add(&new, true);
                            for r in refs.values_mut() {
                                r.queue.push(&ns_key(i), n.clone());
                            }
                            p.distribute_new(ns_key(i), n);
                        }
                    }
                    // The initial list ends.
                    45 => initial = false,
                    // A resync of one cached key to some handlers.
                    46..=49 => {
                        let Some((&i, o)) = store
                            .iter()
                            .nth(rng.below(store.len().max(1) as u64) as usize)
                        else {
                            continue;
                        };
                        let key = ns_key(i);
                        let n = update(o, o);
                        for l in &mut p.listeners {
                            l.syncing = rng.chance(0.5);
                            if l.syncing {
                                refs.get_mut(&l.id).unwrap().queue.push(&key, n.clone());
                            }
                        }
                        p.distribute(&key, n, true);
                    }
                    // A replay of one cached key to one handler.
                    50..=52 => {
                        let (Some(id), Some((&i, o))) = (pick(&mut rng), store.iter().next())
                        else {
                            continue;
                        };
                        let n = add(o, true);
                        refs.get_mut(&id).unwrap().queue.push(&ns_key(i), n.clone());
                        p.push_to(id, &ns_key(i), n);
                    }
                    53..=69 => {
                        let Some(id) = pick(&mut rng) else { continue };
                        let r = refs.get_mut(&id).unwrap();
                        match p.poll_notification_for(id) {
                            Some(n) => r.pop(&n, &what),
                            None => assert!(
                                r.in_flight.is_some() || r.queue.is_empty(),
                                "{what}: nothing for an idle handler with pending"
                            ),
                        }
                    }
                    70..=79 => match p.poll_notification() {
                        Some((id, n)) => refs.get_mut(&id).unwrap().pop(&n, &what),
                        None => {
                            for r in refs.values() {
                                assert!(r.in_flight.is_some() || r.queue.is_empty(), "{what}");
                            }
                        }
                    },
                    80..=89 => {
                        let Some(id) = pick(&mut rng) else { continue };
                        p.handler_done(id);
                        refs.get_mut(&id).unwrap().in_flight = None;
                    }
                    // A batch for one handler: its next notifications, in order, all in
                    // flight until it is done.
                    90..=92 => {
                        let Some(id) = pick(&mut rng) else { continue };
                        let r = refs.get_mut(&id).unwrap();
                        let max = rng.below(8) as usize;
                        let mut batch = Vec::new();
                        let taken = p.poll_batch_for(id, max, &mut batch);
                        assert_eq!(taken, batch.len(), "{what}");
                        let busy = r.in_flight.is_some();
                        if busy {
                            assert_eq!(taken, 0, "{what}: a batch for a busy handler");
                        }
                        let mut initial = false;
                        for n in &batch {
                            r.pop(n, &what);
                            initial |= r.in_flight == Some(true);
                            r.in_flight = None;
                        }
                        // Short of `max` only when nothing more is pending.
                        assert!(
                            busy || taken == max || r.queue.is_empty(),
                            "{what}: batch of {id:?} stopped at {taken} of {max}"
                        );
                        if taken > 0 {
                            r.in_flight = Some(initial);
                        }
                    }
                    // Inline delivery: every idle handler runs everything it has pending.
                    93..=94 => {
                        let mut seen = 0;
                        let delivered = p.deliver(|id, n| {
                            let r = refs.get_mut(&id).unwrap();
                            r.pop(n, &what);
                            r.in_flight = None;
                            seen += 1;
                        });
                        assert_eq!(delivered, seen, "{what}");
                        for (id, r) in &refs {
                            assert!(
                                r.in_flight.is_some() || r.queue.is_empty(),
                                "{what}: {id:?} idle with pending after deliver"
                            );
                        }
                    }
                    95..=97 => add_with_reference(&mut p, &mut refs),
                    _ => {
                        let Some(id) = pick(&mut rng) else { continue };
                        assert!(p.remove_handler(id));
                        refs.remove(&id);
                    }
                }
                for (id, r) in &refs {
                    assert_eq!(p.pending(*id), r.queue.len(), "{what}: pending of {id:?}");
                    assert_eq!(p.is_busy(*id), r.in_flight.is_some(), "{what}");
                    assert_eq!(
                        p.handler_has_synced(*id, true),
                        r.queue.initial_pending == 0 && r.in_flight != Some(true),
                        "{what}: synced {id:?}"
                    );
                }
                check_structure(&p);
            }
            // Drain: everything left comes out as the references say.
            for (id, r) in &mut refs {
                p.handler_done(*id);
                r.in_flight = None;
                while let Some(n) = p.poll_notification_for(*id) {
                    r.pop(&n, &alloc::format!("seed {seed} drain"));
                    p.handler_done(*id);
                    r.in_flight = None;
                }
                assert!(r.queue.is_empty());
            }
            assert!(p.log.entries.is_empty() && p.log.newest.is_empty());
        }
    }
}
