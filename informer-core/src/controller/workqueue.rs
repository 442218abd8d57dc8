//! A work queue for controllers: client-go `util/workqueue` as a sans-IO state machine.
//!
//! Informer handlers put keys in; workers take them out, reconcile, and say they are done.
//! The rules (client-go `queue.go`, `delaying_queue.go`, `rate_limiting_queue.go`,
//! `default_rate_limiters.go`):
//!
//! - A key is queued at most once: adding a key already waiting to be processed does nothing
//!   (except raise its [`Priority`]).
//! - Keys come out by [`Priority`], higher first, and within one priority in the order they
//!   were first added (controller-runtime's priority queue): keys added for the initial list,
//!   resyncs and periodic requeues at [`Priority::LOW`] wait behind keys of real changes at
//!   [`Priority::NORMAL`], so a restart over 10,000 objects does not delay the one that just
//!   changed. A key added again with a higher priority is raised (keeping its place among the
//!   keys of its new priority by when it was first added); with a lower one it keeps its own.
//! - A key is never handed to two workers at once. A key added while a worker processes it is
//!   marked dirty and queued again when the worker calls [`done`](WorkQueue::done).
//! - [`add_after`](WorkQueue::add_after) queues a key once a delay has passed; a key already
//!   waiting keeps the earlier of its two ready times and the higher of its two priorities.
//! - [`add_rate_limited`](WorkQueue::add_rate_limited) asks the [`RateLimiter`] for the delay;
//!   [`forget`](WorkQueue::forget) resets the key's failure count,
//!   [`num_requeues`](WorkQueue::num_requeues) reads it. The default limiter is client-go's
//!   `DefaultControllerRateLimiter`: the larger of a per-key exponential backoff (5 ms
//!   doubling to 1000 s) and an overall token bucket (10 per second, burst 100).
//! - [`shut_down`](WorkQueue::shut_down): adds are ignored from then on, delayed keys are
//!   dropped, keys already queued are still handed out; [`pop`](WorkQueue::pop) answers
//!   [`Pop::ShutDown`] once the queue is empty. [`shut_down_with_drain`](WorkQueue::shut_down_with_drain)
//!   also asks the runtime to wait until [`is_drained`](WorkQueue::is_drained): no key queued
//!   or in a worker's hands.
//!
//! Driving it: the queue never reads a clock. Every call that depends on time takes `now`;
//! [`poll_timeout`](WorkQueue::poll_timeout) is the instant at which the next delayed key
//! becomes ready (wake a worker then, or call [`handle_timeout`](WorkQueue::handle_timeout)).
//!
//! Memory: one entry per distinct key in each of the queue, the dirty set, the processing set
//! and the delayed set (a key is in the delayed set at most once), plus the limiter's per-key
//! failure counts (dropped by `forget`). Cost: the ready keys are a binary heap indexed by
//! slot, so an add, a raise and a pop are O(log n) and, once the queue has held its largest
//! number of keys, allocate nothing.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::hash::Hash;
use core::time::Duration;

use crate::hash::{HashMap, HashSet};
use crate::time::Instant;

/// Decides how long a key waits before it is retried.
pub trait RateLimiter<K> {
    /// The delay before `key` is retried, counting this as one more failure.
    fn when(&mut self, key: &K, now: Instant) -> Duration;
    /// Stops tracking `key` (it succeeded): its next failure starts from the first delay.
    fn forget(&mut self, key: &K);
    /// How many failures of `key` are counted.
    fn num_requeues(&self, key: &K) -> u32;
}

impl<K, R: RateLimiter<K> + ?Sized> RateLimiter<K> for alloc::boxed::Box<R> {
    fn when(&mut self, key: &K, now: Instant) -> Duration {
        (**self).when(key, now)
    }
    fn forget(&mut self, key: &K) {
        (**self).forget(key)
    }
    fn num_requeues(&self, key: &K) -> u32 {
        (**self).num_requeues(key)
    }
}

/// Per-key exponential backoff: `base × 2^failures`, at most `max` (client-go
/// `ItemExponentialFailureRateLimiter`).
#[derive(Clone, Debug)]
pub struct ItemExponentialRateLimiter<K> {
    base: Duration,
    max: Duration,
    failures: HashMap<K, u32>,
}

impl<K: Hash + Eq + Clone> ItemExponentialRateLimiter<K> {
    /// A limiter starting at `base`, capped at `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        ItemExponentialRateLimiter {
            base,
            max,
            failures: HashMap::default(),
        }
    }
}

impl<K: Hash + Eq + Clone> RateLimiter<K> for ItemExponentialRateLimiter<K> {
    fn when(&mut self, key: &K, _now: Instant) -> Duration {
        let n = match self.failures.get_mut(key) {
            Some(n) => {
                let cur = *n;
                *n = n.saturating_add(1);
                cur
            }
            None => {
                self.failures.insert(key.clone(), 1);
                0
            }
        };
        // base × 2^n, saturating; never more than max.
        let factor = 1u128.checked_shl(n.min(127)).unwrap_or(u128::MAX);
        let nanos = self.base.as_nanos().saturating_mul(factor);
        if nanos >= self.max.as_nanos() {
            self.max
        } else {
            Duration::from_nanos(nanos as u64)
        }
    }
    fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }
    fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

/// Per-key: `fast` for the first `max_fast_attempts` failures, then `slow` (client-go
/// `ItemFastSlowRateLimiter`).
#[derive(Clone, Debug)]
pub struct ItemFastSlowRateLimiter<K> {
    fast: Duration,
    slow: Duration,
    max_fast_attempts: u32,
    failures: HashMap<K, u32>,
}

impl<K: Hash + Eq + Clone> ItemFastSlowRateLimiter<K> {
    /// A limiter waiting `fast` for the first `max_fast_attempts` failures, then `slow`.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: u32) -> Self {
        ItemFastSlowRateLimiter {
            fast,
            slow,
            max_fast_attempts,
            failures: HashMap::default(),
        }
    }
}

impl<K: Hash + Eq + Clone> RateLimiter<K> for ItemFastSlowRateLimiter<K> {
    fn when(&mut self, key: &K, _now: Instant) -> Duration {
        let n = self.failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        if *n <= self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }
    fn forget(&mut self, key: &K) {
        self.failures.remove(key);
    }
    fn num_requeues(&self, key: &K) -> u32 {
        self.failures.get(key).copied().unwrap_or(0)
    }
}

/// An overall token bucket: `qps` tokens per second, at most `burst` saved up (client-go
/// `BucketRateLimiter` over `golang.org/x/time/rate`). Each `when` takes a token, reserving
/// a future one when none is left, so the delays of successive calls grow by `1 / qps`.
#[derive(Clone, Debug)]
pub struct BucketRateLimiter {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Option<Instant>,
}

impl BucketRateLimiter {
    /// A bucket refilled at `qps` per second holding at most `burst` tokens (starts full).
    pub fn new(qps: f64, burst: u32) -> Self {
        BucketRateLimiter {
            qps,
            burst: f64::from(burst),
            tokens: f64::from(burst),
            last: None,
        }
    }
}

impl<K> RateLimiter<K> for BucketRateLimiter {
    fn when(&mut self, _key: &K, now: Instant) -> Duration {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * self.qps).min(self.burst);
        }
        if self.last.is_none_or(|l| now > l) {
            self.last = Some(now);
        }
        self.tokens -= 1.0;
        if self.tokens >= 0.0 || self.qps <= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
    fn forget(&mut self, _key: &K) {}
    fn num_requeues(&self, _key: &K) -> u32 {
        0
    }
}

/// The larger delay of two limiters (client-go `MaxOfRateLimiter`); nest it for more.
#[derive(Clone, Debug)]
pub struct MaxOfRateLimiter<A, B> {
    /// The first limiter.
    pub a: A,
    /// The second limiter.
    pub b: B,
}

impl<K, A: RateLimiter<K>, B: RateLimiter<K>> RateLimiter<K> for MaxOfRateLimiter<A, B> {
    fn when(&mut self, key: &K, now: Instant) -> Duration {
        let a = self.a.when(key, now);
        let b = self.b.when(key, now);
        a.max(b)
    }
    fn forget(&mut self, key: &K) {
        self.a.forget(key);
        self.b.forget(key);
    }
    fn num_requeues(&self, key: &K) -> u32 {
        self.a.num_requeues(key).max(self.b.num_requeues(key))
    }
}

/// client-go's `DefaultControllerRateLimiter`.
pub type DefaultRateLimiter<K> = MaxOfRateLimiter<ItemExponentialRateLimiter<K>, BucketRateLimiter>;

/// client-go's `DefaultControllerRateLimiter`: per key 5 ms doubling to 1000 s, max'ed with
/// an overall bucket of 10 per second, burst 100.
pub fn default_rate_limiter<K: Hash + Eq + Clone>() -> DefaultRateLimiter<K> {
    MaxOfRateLimiter {
        a: ItemExponentialRateLimiter::new(Duration::from_millis(5), Duration::from_secs(1000)),
        b: BucketRateLimiter::new(10.0, 100),
    }
}

/// How urgent a queued key is: higher first (controller-runtime's `Priority`, an `i32`).
///
/// [`NORMAL`](Self::NORMAL) is what [`WorkQueue::add`] gives; [`LOW`](Self::LOW) is for keys
/// queued because of the initial list, a resync or a periodic requeue rather than a change.
/// Any other value orders as its number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Priority(pub i32);

impl Priority {
    /// A real change (the default).
    pub const NORMAL: Priority = Priority(0);
    /// The initial list, resyncs and periodic requeues (controller-runtime's `LowPriority`).
    pub const LOW: Priority = Priority(-100);
}

/// The ready keys: a binary heap of slot numbers ordered by (priority, higher first; then
/// sequence, lower first), each slot knowing its heap position so that a queued key can be
/// raised in place. Slots are reused, so a queue that reached its size allocates no more.
#[derive(Debug)]
struct Ready<K> {
    heap: Vec<usize>,
    slots: Vec<Slot<K>>,
    free: Vec<usize>,
    seq: u64,
}

#[derive(Debug)]
struct Slot<K> {
    key: Option<K>,
    priority: Priority,
    seq: u64,
    pos: usize,
}

impl<K> Ready<K> {
    const fn new() -> Self {
        Ready {
            heap: Vec::new(),
            slots: Vec::new(),
            free: Vec::new(),
            seq: 0,
        }
    }

    fn len(&self) -> usize {
        self.heap.len()
    }

    fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// Whether the key in slot `a` comes out before the key in slot `b`.
    fn before(&self, a: usize, b: usize) -> bool {
        let (a, b) = (&self.slots[a], &self.slots[b]);
        a.priority > b.priority || (a.priority == b.priority && a.seq < b.seq)
    }

    fn place(&mut self, pos: usize, slot: usize) {
        self.heap[pos] = slot;
        self.slots[slot].pos = pos;
    }

    fn sift_up(&mut self, mut pos: usize) {
        let slot = self.heap[pos];
        while pos > 0 {
            let parent = (pos - 1) / 2;
            let up = self.heap[parent];
            if !self.before(slot, up) {
                break;
            }
            self.place(pos, up);
            pos = parent;
        }
        self.place(pos, slot);
    }

    fn sift_down(&mut self, mut pos: usize) {
        let slot = self.heap[pos];
        let n = self.heap.len();
        loop {
            let left = 2 * pos + 1;
            if left >= n {
                break;
            }
            let right = left + 1;
            let child = if right < n && self.before(self.heap[right], self.heap[left]) {
                right
            } else {
                left
            };
            let down = self.heap[child];
            if !self.before(down, slot) {
                break;
            }
            self.place(pos, down);
            pos = child;
        }
        self.place(pos, slot);
    }

    /// Queues `key` behind the keys of its priority already queued; returns its slot.
    fn push(&mut self, key: K, priority: Priority) -> usize {
        self.seq += 1;
        let fresh = Slot {
            key: Some(key),
            priority,
            seq: self.seq,
            pos: self.heap.len(),
        };
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i] = fresh;
                i
            }
            None => {
                self.slots.push(fresh);
                self.slots.len() - 1
            }
        };
        self.heap.push(slot);
        self.sift_up(self.heap.len() - 1);
        slot
    }

    /// Raises the key in `slot` to `priority` if that is higher than its own.
    fn raise(&mut self, slot: usize, priority: Priority) {
        if let Some(s) = self.slots.get_mut(slot) {
            if priority > s.priority {
                s.priority = priority;
                let pos = s.pos;
                self.sift_up(pos);
            }
        }
    }

    /// Takes out the first key.
    fn pop(&mut self) -> Option<K> {
        let last = self.heap.pop()?;
        let first = if self.heap.is_empty() {
            last
        } else {
            let first = self.heap[0];
            self.place(0, last);
            self.sift_down(0);
            first
        };
        self.free.push(first);
        self.slots[first].key.take()
    }
}

/// Why a key is in the dirty set: queued (in this slot of the ready heap), or added while a
/// worker holds it, to be queued with this priority on `done`.
#[derive(Clone, Copy, Debug)]
enum Dirty {
    Queued(usize),
    AfterDone(Priority),
}

/// What [`WorkQueue::pop`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pop<K> {
    /// A key to process; call [`WorkQueue::done`] with it when finished.
    Key(K),
    /// Nothing ready now: wait for an add, a `done`, or [`WorkQueue::poll_timeout`].
    Empty,
    /// The queue was shut down and holds no more keys: the worker should stop.
    ShutDown,
}

/// The work queue (see the [module documentation](self)).
#[derive(Debug)]
pub struct WorkQueue<K, R = DefaultRateLimiter<K>> {
    queue: Ready<K>,
    /// Keys added since they were last handed out: queued, or held by a worker.
    dirty: HashMap<K, Dirty>,
    processing: HashSet<K>,
    /// Delayed keys by (ready time, sequence), and each delayed key's entry there with the
    /// priority it will be queued with.
    waiting: BTreeMap<(Instant, u64), K>,
    waiting_for: HashMap<K, ((Instant, u64), Priority)>,
    seq: u64,
    limiter: R,
    shutting_down: bool,
    drain: bool,
}

impl<K: Hash + Eq + Clone> Default for WorkQueue<K> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Hash + Eq + Clone> WorkQueue<K> {
    /// A queue with client-go's default rate limiter.
    pub fn new() -> Self {
        Self::with_rate_limiter(default_rate_limiter())
    }
}

impl<K: Hash + Eq + Clone, R: RateLimiter<K>> WorkQueue<K, R> {
    /// A queue with the given rate limiter.
    pub fn with_rate_limiter(limiter: R) -> Self {
        WorkQueue {
            queue: Ready::new(),
            dirty: HashMap::default(),
            processing: HashSet::default(),
            waiting: BTreeMap::new(),
            waiting_for: HashMap::default(),
            seq: 0,
            limiter,
            shutting_down: false,
            drain: false,
        }
    }

    /// Queues `key` at [`Priority::NORMAL`] unless it is already queued; a key being
    /// processed is queued again when its worker calls [`done`](Self::done). Ignored after
    /// shutdown. True if this call queued the key or marked it dirty (false: it was already
    /// pending, or shut down).
    pub fn add(&mut self, key: K) -> bool {
        self.add_with_priority(key, Priority::NORMAL)
    }

    /// As [`add`](Self::add), at `priority`. A key already pending takes the higher of its
    /// priority and this one (false is returned then: nothing new is pending).
    pub fn add_with_priority(&mut self, key: K, priority: Priority) -> bool {
        if self.shutting_down {
            return false;
        }
        if let Some(d) = self.dirty.get_mut(&key) {
            match d {
                Dirty::Queued(slot) => self.queue.raise(*slot, priority),
                Dirty::AfterDone(p) => *p = (*p).max(priority),
            }
            return false;
        }
        if self.processing.contains(&key) {
            self.dirty.insert(key, Dirty::AfterDone(priority));
            return true;
        }
        let slot = self.queue.push(key.clone(), priority);
        self.dirty.insert(key, Dirty::Queued(slot));
        true
    }

    /// Queues `key` at [`Priority::NORMAL`] once `delay` has passed after `now` (at once for
    /// a zero delay). A key already delayed keeps the earlier ready time. Ignored after
    /// shutdown.
    pub fn add_after(&mut self, key: K, delay: Duration, now: Instant) {
        self.add_after_with_priority(key, delay, now, Priority::NORMAL)
    }

    /// As [`add_after`](Self::add_after), to be queued at `priority`. A key already delayed
    /// keeps the earlier ready time and the higher priority of the two.
    pub fn add_after_with_priority(
        &mut self,
        key: K,
        delay: Duration,
        now: Instant,
        priority: Priority,
    ) {
        if self.shutting_down {
            return;
        }
        if delay.is_zero() {
            self.add_with_priority(key, priority);
            return;
        }
        let ready = now + delay;
        let mut priority = priority;
        if let Some(((at, seq), p)) = self.waiting_for.get_mut(&key) {
            if *at <= ready {
                *p = (*p).max(priority);
                return;
            }
            priority = priority.max(*p);
            self.waiting.remove(&(*at, *seq));
        }
        self.seq += 1;
        let slot = (ready, self.seq);
        self.waiting_for.insert(key.clone(), (slot, priority));
        self.waiting.insert(slot, key);
    }

    /// Queues `key` at [`Priority::NORMAL`] after the delay the rate limiter gives it (one
    /// more failure).
    pub fn add_rate_limited(&mut self, key: K, now: Instant) {
        self.add_rate_limited_with_priority(key, now, Priority::NORMAL)
    }

    /// As [`add_rate_limited`](Self::add_rate_limited), to be queued at `priority`.
    pub fn add_rate_limited_with_priority(&mut self, key: K, now: Instant, priority: Priority) {
        if self.shutting_down {
            return;
        }
        let delay = self.limiter.when(&key, now);
        self.add_after_with_priority(key, delay, now, priority);
    }

    /// Resets `key`'s failure count in the rate limiter (call it after a success).
    pub fn forget(&mut self, key: &K) {
        self.limiter.forget(key);
    }

    /// How many rate-limited requeues of `key` are counted.
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.limiter.num_requeues(key)
    }

    /// Moves every delayed key whose time has come into the queue.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.handle_timeout_with(now, |_| {});
    }

    /// As [`handle_timeout`](Self::handle_timeout), calling `added` with each key it made
    /// pending (what [`add`](Self::add) would have answered `true` for): a runtime counting
    /// adds and timing the queue (client-go's workqueue metrics) sees the delayed keys too.
    pub fn handle_timeout_with(&mut self, now: Instant, mut added: impl FnMut(&K)) {
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            let priority = self
                .waiting_for
                .remove(&key)
                .map_or(Priority::NORMAL, |(_, p)| p);
            if self.add_with_priority(key.clone(), priority) {
                added(&key);
            }
        }
    }

    /// When the next delayed key becomes ready, if any.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.waiting.keys().next().map(|(at, _)| *at)
    }

    /// Hands out the next key (moving delayed keys that are due first). The worker owns it
    /// until [`done`](Self::done).
    pub fn pop(&mut self, now: Instant) -> Pop<K> {
        if !self.shutting_down {
            self.handle_timeout(now);
        }
        match self.queue.pop() {
            Some(key) => {
                self.dirty.remove(&key);
                self.processing.insert(key.clone());
                Pop::Key(key)
            }
            None if self.shutting_down => Pop::ShutDown,
            None => Pop::Empty,
        }
    }

    /// The worker finished `key`: if it was added meanwhile, it is queued again. True if it
    /// was.
    pub fn done(&mut self, key: &K) -> bool {
        if !self.processing.remove(key) {
            return false;
        }
        if let Some(d) = self.dirty.get_mut(key) {
            let priority = match *d {
                Dirty::AfterDone(p) => p,
                // Not reachable: a key in a worker's hands is never queued.
                Dirty::Queued(_) => return false,
            };
            *d = Dirty::Queued(self.queue.push(key.clone(), priority));
            return true;
        }
        false
    }

    /// Stops the queue: later adds are ignored, delayed keys are dropped; queued keys are still
    /// handed out, then [`pop`](Self::pop) answers [`Pop::ShutDown`].
    pub fn shut_down(&mut self) {
        self.shutting_down = true;
        self.waiting.clear();
        self.waiting_for.clear();
    }

    /// As [`shut_down`](Self::shut_down), and the runtime should wait until
    /// [`is_drained`](Self::is_drained) before it considers the queue finished.
    pub fn shut_down_with_drain(&mut self) {
        self.drain = true;
        self.shut_down();
    }

    /// True once shut down.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down
    }

    /// True if [`shut_down_with_drain`](Self::shut_down_with_drain) was called.
    pub fn is_draining(&self) -> bool {
        self.drain
    }

    /// Shut down, nothing queued and nothing in a worker's hands.
    pub fn is_drained(&self) -> bool {
        self.shutting_down && self.queue.is_empty() && self.processing.is_empty()
    }

    /// Keys queued and ready (not counting delayed or in-process keys).
    pub fn len(&self) -> usize {
        self.queue.len()
    }

    /// True if no key is ready.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Keys waiting for their delay.
    pub fn num_delayed(&self) -> usize {
        self.waiting.len()
    }

    /// Keys in workers' hands.
    pub fn num_processing(&self) -> usize {
        self.processing.len()
    }

    /// The rate limiter.
    pub fn rate_limiter(&self) -> &R {
        &self.limiter
    }

    /// The rate limiter, to ask it for a delay (`when`) outside
    /// [`add_rate_limited`](Self::add_rate_limited).
    pub fn rate_limiter_mut(&mut self) -> &mut R {
        &mut self.limiter
    }
}

#[cfg(test)]
mod tests;
