//! The work queue's rules, named after client-go's `util/workqueue` behaviours, with simulated
//! time; and a property test against a plain model.

use alloc::vec::Vec;
use core::time::Duration;

use proptest::prelude::*;

use super::*;

fn t(ms: u64) -> Instant {
    Instant::from_epoch(Duration::from_millis(ms))
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn pop_key(q: &mut WorkQueue<u32>, now: Instant) -> u32 {
    match q.pop(now) {
        Pop::Key(k) => k,
        other => panic!("expected a key, got {other:?}"),
    }
}

#[test]
fn workqueue_01_key_queued_at_most_once() {
    let mut q = WorkQueue::<u32>::new();
    assert!(q.add(1));
    assert!(!q.add(1));
    assert!(q.add(2));
    assert!(!q.add(1));
    assert_eq!(q.len(), 2);
    assert_eq!(pop_key(&mut q, t(0)), 1);
    assert_eq!(pop_key(&mut q, t(0)), 2);
    assert_eq!(q.pop(t(0)), Pop::Empty);
}

#[test]
fn workqueue_02_fifo_order() {
    let mut q = WorkQueue::<u32>::new();
    for k in [5, 3, 9, 1] {
        q.add(k);
    }
    let got: Vec<u32> = (0..4).map(|_| pop_key(&mut q, t(0))).collect();
    assert_eq!(got, [5, 3, 9, 1]);
}

#[test]
fn workqueue_03_key_added_while_processing_is_processed_again_after_done_never_concurrently() {
    let mut q = WorkQueue::<u32>::new();
    q.add(1);
    assert_eq!(pop_key(&mut q, t(0)), 1);
    // Added again while a worker holds it: not handed to another worker.
    assert!(q.add(1));
    assert!(!q.add(1));
    assert_eq!(q.pop(t(0)), Pop::Empty);
    assert_eq!(q.num_processing(), 1);
    // Done: queued again, once.
    assert!(q.done(&1));
    assert_eq!(pop_key(&mut q, t(0)), 1);
    assert!(!q.done(&1));
    assert_eq!(q.pop(t(0)), Pop::Empty);
}

#[test]
fn workqueue_04_done_without_readd_does_not_requeue_and_unknown_done_is_ignored() {
    let mut q = WorkQueue::<u32>::new();
    q.add(1);
    pop_key(&mut q, t(0));
    assert!(!q.done(&1));
    assert!(!q.done(&7));
    assert_eq!(q.pop(t(0)), Pop::Empty);
    assert_eq!(q.num_processing(), 0);
}

#[test]
fn workqueue_05_add_after_waits_for_its_time() {
    let mut q = WorkQueue::<u32>::new();
    q.add_after(1, ms(50), t(0));
    assert_eq!(q.poll_timeout(), Some(t(50)));
    assert_eq!(q.num_delayed(), 1);
    assert_eq!(q.pop(t(49)), Pop::Empty);
    assert_eq!(pop_key(&mut q, t(50)), 1);
    assert_eq!(q.poll_timeout(), None);
    // Zero delay: at once.
    q.add_after(2, Duration::ZERO, t(60));
    assert_eq!(q.len(), 1);
}

#[test]
fn workqueue_06_add_after_keeps_the_earlier_ready_time() {
    let mut q = WorkQueue::<u32>::new();
    q.add_after(1, ms(100), t(0));
    q.add_after(1, ms(200), t(0));
    assert_eq!(q.poll_timeout(), Some(t(100)));
    q.add_after(1, ms(30), t(0));
    assert_eq!(q.poll_timeout(), Some(t(30)));
    assert_eq!(q.num_delayed(), 1);
    q.handle_timeout(t(30));
    assert_eq!(q.len(), 1);
    assert_eq!(q.num_delayed(), 0);
    // Delayed keys come out in ready-time order.
    q.add_after(3, ms(20), t(40));
    q.add_after(2, ms(10), t(40));
    q.handle_timeout(t(100));
    assert_eq!(pop_key(&mut q, t(100)), 1);
    assert_eq!(pop_key(&mut q, t(100)), 2);
    assert_eq!(pop_key(&mut q, t(100)), 3);
}

#[test]
fn workqueue_07_delayed_key_already_queued_is_not_duplicated() {
    let mut q = WorkQueue::<u32>::new();
    q.add(1);
    q.add_after(1, ms(10), t(0));
    q.handle_timeout(t(10));
    assert_eq!(q.len(), 1);
}

#[test]
fn workqueue_08_item_exponential_backoff_5ms_doubling_capped() {
    let mut r = ItemExponentialRateLimiter::<u32>::new(ms(5), Duration::from_secs(1000));
    let got: Vec<Duration> = (0..5).map(|_| r.when(&1, t(0))).collect();
    assert_eq!(got, [ms(5), ms(10), ms(20), ms(40), ms(80)]);
    assert_eq!(r.num_requeues(&1), 5);
    // Another key has its own count.
    assert_eq!(r.when(&2, t(0)), ms(5));
    for _ in 0..100 {
        r.when(&1, t(0));
    }
    assert_eq!(r.when(&1, t(0)), Duration::from_secs(1000));
    r.forget(&1);
    assert_eq!(r.num_requeues(&1), 0);
    assert_eq!(r.when(&1, t(0)), ms(5));
}

#[test]
fn workqueue_09_bucket_burst_then_qps() {
    let mut r = BucketRateLimiter::new(10.0, 100);
    for _ in 0..100 {
        assert_eq!(RateLimiter::<u32>::when(&mut r, &0, t(0)), Duration::ZERO);
    }
    // Burst used: each further token is reserved 100 ms after the previous one.
    assert_eq!(RateLimiter::<u32>::when(&mut r, &0, t(0)), ms(100));
    assert_eq!(RateLimiter::<u32>::when(&mut r, &0, t(0)), ms(200));
    // Time refills: 1 s later 10 tokens came in, 2 were reserved already.
    let d = RateLimiter::<u32>::when(&mut r, &0, t(1000));
    assert_eq!(d, Duration::ZERO);
}

#[test]
fn workqueue_10_default_limiter_is_max_of_item_and_bucket() {
    let mut q = WorkQueue::<u32>::new();
    q.add_rate_limited(1, t(0));
    assert_eq!(q.poll_timeout(), Some(t(5)));
    assert_eq!(q.num_requeues(&1), 1);
    let k = pop_key(&mut q, t(5));
    q.done(&k);
    q.add_rate_limited(1, t(5));
    assert_eq!(q.poll_timeout(), Some(t(15)));
    assert_eq!(q.num_requeues(&1), 2);
    q.forget(&1);
    assert_eq!(q.num_requeues(&1), 0);
    // 100 distinct keys use the burst; the next ones wait for the bucket (100 ms each),
    // which is longer than their own 5 ms.
    let mut q = WorkQueue::<u32>::new();
    for k in 0..100 {
        q.add_rate_limited(k, t(0));
    }
    q.add_rate_limited(100, t(0));
    q.handle_timeout(t(5));
    assert_eq!(q.len(), 100);
    assert_eq!(q.poll_timeout(), Some(t(100)));
}

#[test]
fn workqueue_11_limiters_compose() {
    let mut r = MaxOfRateLimiter {
        a: ItemFastSlowRateLimiter::<u32>::new(ms(1), ms(500), 2),
        b: ItemExponentialRateLimiter::<u32>::new(ms(100), ms(300)),
    };
    let got: Vec<Duration> = (0..4).map(|_| r.when(&1, t(0))).collect();
    assert_eq!(got, [ms(100), ms(200), ms(500), ms(500)]);
    assert_eq!(r.num_requeues(&1), 4);
    r.forget(&1);
    assert_eq!(r.num_requeues(&1), 0);
    let mut q = WorkQueue::with_rate_limiter(r);
    q.add_rate_limited(1, t(0));
    assert_eq!(q.poll_timeout(), Some(t(100)));
}

#[test]
fn workqueue_12_shut_down_hands_out_queued_then_reports_shutdown() {
    let mut q = WorkQueue::<u32>::new();
    q.add(1);
    q.add(2);
    q.add_after(3, ms(10), t(0));
    q.shut_down();
    assert!(q.is_shutting_down());
    assert!(!q.add(4));
    q.add_after(5, ms(1), t(0));
    q.add_rate_limited(6, t(0));
    assert_eq!(q.num_delayed(), 0);
    assert_eq!(q.poll_timeout(), None);
    assert_eq!(pop_key(&mut q, t(100)), 1);
    assert_eq!(pop_key(&mut q, t(100)), 2);
    assert_eq!(q.pop(t(100)), Pop::ShutDown);
}

#[test]
fn workqueue_13_shut_down_with_drain_waits_for_in_flight() {
    let mut q = WorkQueue::<u32>::new();
    q.add(1);
    q.add(2);
    let a = pop_key(&mut q, t(0));
    // Re-added while in flight, before shutdown: it is processed once more.
    q.add(a);
    q.shut_down_with_drain();
    assert!(q.is_draining());
    assert!(!q.is_drained());
    let b = pop_key(&mut q, t(0));
    assert_eq!(q.pop(t(0)), Pop::ShutDown);
    q.done(&b);
    assert!(!q.is_drained());
    assert!(q.done(&a));
    assert!(!q.is_drained());
    let a2 = pop_key(&mut q, t(0));
    assert_eq!(a2, a);
    q.done(&a2);
    assert!(q.is_drained());
    assert_eq!(q.pop(t(0)), Pop::ShutDown);
}

#[test]
fn workqueue_14_memory_bounded_by_distinct_keys() {
    let mut q = WorkQueue::<u32>::new();
    for round in 0..1000u64 {
        for k in 0..10 {
            q.add(k);
            q.add_after(k, ms(1 + round % 7), t(round));
        }
    }
    assert_eq!(q.len(), 10);
    assert!(q.num_delayed() <= 10);
    assert!(q.dirty.len() <= 10);
    assert_eq!(q.waiting.len(), q.waiting_for.len());
}

/// The model: plain vectors, the rules written as directly as possible.
#[derive(Default)]
struct Model {
    queue: Vec<u8>,
    dirty: Vec<u8>,
    processing: Vec<u8>,
    /// (ready, seq, key)
    waiting: Vec<(Instant, u64, u8)>,
    seq: u64,
    shut: bool,
}

impl Model {
    fn add(&mut self, k: u8) {
        if self.shut || self.dirty.contains(&k) {
            return;
        }
        self.dirty.push(k);
        if !self.processing.contains(&k) {
            self.queue.push(k);
        }
    }
    fn add_after(&mut self, k: u8, d: Duration, now: Instant) {
        if self.shut {
            return;
        }
        if d.is_zero() {
            return self.add(k);
        }
        let ready = now + d;
        if let Some(i) = self.waiting.iter().position(|w| w.2 == k) {
            if self.waiting[i].0 <= ready {
                return;
            }
            self.waiting.remove(i);
        }
        self.seq += 1;
        self.waiting.push((ready, self.seq, k));
    }
    fn advance(&mut self, now: Instant) {
        self.waiting.sort();
        while !self.waiting.is_empty() && self.waiting[0].0 <= now {
            let (_, _, k) = self.waiting.remove(0);
            self.add(k);
        }
    }
    fn pop(&mut self, now: Instant) -> Pop<u8> {
        if !self.shut {
            self.advance(now);
        }
        if self.queue.is_empty() {
            return if self.shut { Pop::ShutDown } else { Pop::Empty };
        }
        let k = self.queue.remove(0);
        self.dirty.retain(|d| *d != k);
        self.processing.push(k);
        Pop::Key(k)
    }
    fn done(&mut self, k: u8) {
        if let Some(i) = self.processing.iter().position(|p| *p == k) {
            self.processing.remove(i);
            if self.dirty.contains(&k) {
                self.queue.push(k);
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Add(u8),
    AddAfter(u8, u64),
    Pop,
    Done(usize),
    Tick(u64),
    ShutDown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6).prop_map(Op::Add),
        2 => (0u8..6, 0u64..50).prop_map(|(k, d)| Op::AddAfter(k, d)),
        4 => Just(Op::Pop),
        3 => (0usize..4).prop_map(Op::Done),
        2 => (0u64..30).prop_map(Op::Tick),
        1 => Just(Op::ShutDown),
    ]
}

proptest! {
    #[test]
    fn workqueue_15_matches_model(ops in proptest::collection::vec(op(), 1..200)) {
        let mut q = WorkQueue::<u8>::new();
        let mut m = Model::default();
        let mut now = t(0);
        let mut held: Vec<u8> = Vec::new();
        for op in ops {
            match op {
                Op::Add(k) => { q.add(k); m.add(k); }
                Op::AddAfter(k, d) => { q.add_after(k, ms(d), now); m.add_after(k, ms(d), now); }
                Op::Pop => {
                    let a = q.pop(now);
                    let b = m.pop(now);
                    prop_assert_eq!(&a, &b);
                    if let Pop::Key(k) = a {
                        // Never handed out twice at once.
                        prop_assert!(!held.contains(&k));
                        held.push(k);
                    }
                }
                Op::Done(i) => {
                    if !held.is_empty() {
                        let k = held.remove(i % held.len());
                        q.done(&k);
                        m.done(k);
                    }
                }
                Op::Tick(d) => now = now + ms(d),
                Op::ShutDown => { q.shut_down(); m.shut = true; m.waiting.clear(); }
            }
            prop_assert_eq!(q.len(), m.queue.len());
            prop_assert_eq!(q.num_processing(), m.processing.len());
            prop_assert_eq!(q.num_delayed(), m.waiting.len());
            m.waiting.sort();
            prop_assert_eq!(q.poll_timeout(), m.waiting.first().map(|w| w.0));
        }
    }
}
