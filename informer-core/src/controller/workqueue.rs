//! A work queue for controllers: client-go `util/workqueue` as a sans-IO state machine.
//!
//! Informer handlers put keys in; workers take them out, reconcile, and say they are done.
//! The rules (client-go `queue.go`, `delaying_queue.go`, `rate_limiting_queue.go`,
//! `default_rate_limiters.go`):
//!
//! - A key is queued at most once: adding a key already waiting to be processed does nothing.
//! - A key is never handed to two workers at once. A key added while a worker processes it is
//!   marked dirty and queued again when the worker calls [`done`](WorkQueue::done).
//! - [`add_after`](WorkQueue::add_after) queues a key once a delay has passed; a key already
//!   waiting keeps the earlier of its two ready times.
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
//! failure counts (dropped by `forget`).

use alloc::collections::{BTreeMap, VecDeque};
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
    queue: VecDeque<K>,
    dirty: HashSet<K>,
    processing: HashSet<K>,
    /// Delayed keys by (ready time, sequence), and each delayed key's entry there.
    waiting: BTreeMap<(Instant, u64), K>,
    waiting_for: HashMap<K, (Instant, u64)>,
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
            queue: VecDeque::new(),
            dirty: HashSet::default(),
            processing: HashSet::default(),
            waiting: BTreeMap::new(),
            waiting_for: HashMap::default(),
            seq: 0,
            limiter,
            shutting_down: false,
            drain: false,
        }
    }

    /// Queues `key` unless it is already queued; a key being processed is queued again when
    /// its worker calls [`done`](Self::done). Ignored after shutdown. True if this call queued
    /// the key or marked it dirty (false: it was already pending, or shut down).
    pub fn add(&mut self, key: K) -> bool {
        if self.shutting_down || self.dirty.contains(&key) {
            return false;
        }
        if self.processing.contains(&key) {
            self.dirty.insert(key);
            return true;
        }
        self.dirty.insert(key.clone());
        self.queue.push_back(key);
        true
    }

    /// Queues `key` once `delay` has passed after `now` (at once for a zero delay). A key
    /// already delayed keeps the earlier ready time. Ignored after shutdown.
    pub fn add_after(&mut self, key: K, delay: Duration, now: Instant) {
        if self.shutting_down {
            return;
        }
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let ready = now + delay;
        if let Some(&(at, seq)) = self.waiting_for.get(&key) {
            if at <= ready {
                return;
            }
            self.waiting.remove(&(at, seq));
        }
        self.seq += 1;
        let slot = (ready, self.seq);
        self.waiting_for.insert(key.clone(), slot);
        self.waiting.insert(slot, key);
    }

    /// Queues `key` after the delay the rate limiter gives it (one more failure).
    pub fn add_rate_limited(&mut self, key: K, now: Instant) {
        if self.shutting_down {
            return;
        }
        let delay = self.limiter.when(&key, now);
        self.add_after(key, delay, now);
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
        while let Some(entry) = self.waiting.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let key = entry.remove();
            self.waiting_for.remove(&key);
            self.add(key);
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
        match self.queue.pop_front() {
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
        if self.dirty.contains(key) {
            self.queue.push_back(key.clone());
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
}

#[cfg(test)]
mod tests;
