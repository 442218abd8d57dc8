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

/// The model: plain vectors, the rules written as directly as possible. A pending key's
/// priority lives with it in `dirty`; `queue` holds the queued keys with the order they were
/// queued in.
#[derive(Default)]
struct Model {
    queue: Vec<(u8, u64)>,
    dirty: Vec<(u8, Priority)>,
    processing: Vec<u8>,
    /// (ready, seq, key, priority)
    waiting: Vec<(Instant, u64, u8, Priority)>,
    seq: u64,
    queued: u64,
    shut: bool,
}

impl Model {
    fn add(&mut self, k: u8, p: Priority) {
        if self.shut {
            return;
        }
        if let Some(d) = self.dirty.iter_mut().find(|d| d.0 == k) {
            d.1 = d.1.max(p);
            return;
        }
        self.dirty.push((k, p));
        if !self.processing.contains(&k) {
            self.queued += 1;
            self.queue.push((k, self.queued));
        }
    }
    fn add_after(&mut self, k: u8, d: Duration, now: Instant, p: Priority) {
        if self.shut {
            return;
        }
        if d.is_zero() {
            return self.add(k, p);
        }
        let ready = now + d;
        let mut p = p;
        if let Some(i) = self.waiting.iter().position(|w| w.2 == k) {
            if self.waiting[i].0 <= ready {
                self.waiting[i].3 = self.waiting[i].3.max(p);
                return;
            }
            p = p.max(self.waiting[i].3);
            self.waiting.remove(i);
        }
        self.seq += 1;
        self.waiting.push((ready, self.seq, k, p));
    }
    fn advance(&mut self, now: Instant) {
        self.waiting.sort();
        while !self.waiting.is_empty() && self.waiting[0].0 <= now {
            let (_, _, k, p) = self.waiting.remove(0);
            self.add(k, p);
        }
    }
    fn priority(&self, k: u8) -> Priority {
        self.dirty.iter().find(|d| d.0 == k).map(|d| d.1).unwrap()
    }
    fn pop(&mut self, now: Instant) -> Pop<u8> {
        if !self.shut {
            self.advance(now);
        }
        if self.queue.is_empty() {
            return if self.shut { Pop::ShutDown } else { Pop::Empty };
        }
        // The highest priority, then the first queued.
        let mut best = 0;
        for i in 1..self.queue.len() {
            let (a, b) = (self.queue[i], self.queue[best]);
            let (pa, pb) = (self.priority(a.0), self.priority(b.0));
            if pa > pb || (pa == pb && a.1 < b.1) {
                best = i;
            }
        }
        let (k, _) = self.queue.remove(best);
        self.dirty.retain(|d| d.0 != k);
        self.processing.push(k);
        Pop::Key(k)
    }
    fn done(&mut self, k: u8) {
        if let Some(i) = self.processing.iter().position(|p| *p == k) {
            self.processing.remove(i);
            if self.dirty.iter().any(|d| d.0 == k) {
                self.queued += 1;
                self.queue.push((k, self.queued));
            }
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Add(u8, Priority),
    AddAfter(u8, u64, Priority),
    Pop,
    Done(usize),
    Tick(u64),
    ShutDown,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..6).prop_map(|k| Op::Add(k, Priority::NORMAL)),
        2 => (0u8..6, 0u64..50).prop_map(|(k, d)| Op::AddAfter(k, d, Priority::NORMAL)),
        4 => Just(Op::Pop),
        3 => (0usize..4).prop_map(Op::Done),
        2 => (0u64..30).prop_map(Op::Tick),
        1 => Just(Op::ShutDown),
    ]
}

fn priority() -> impl Strategy<Value = Priority> {
    prop_oneof![
        Just(Priority::LOW),
        Just(Priority::NORMAL),
        Just(Priority(7)),
        Just(Priority(i32::MIN)),
    ]
}

/// Every kind of add, each at any of a few priorities.
fn op_with_priorities() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0u8..8, priority()).prop_map(|(k, p)| Op::Add(k, p)),
        2 => (0u8..8, 0u64..50, priority()).prop_map(|(k, d, p)| Op::AddAfter(k, d, p)),
        4 => Just(Op::Pop),
        3 => (0usize..4).prop_map(Op::Done),
        2 => (0u64..30).prop_map(Op::Tick),
        1 => Just(Op::ShutDown),
    ]
}

/// Runs `ops` on the queue and on the model, comparing every answer and every count.
fn check_against_model(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut q = WorkQueue::<u8>::new();
    let mut m = Model::default();
    let mut now = t(0);
    let mut held: Vec<u8> = Vec::new();
    for op in ops {
        match op {
            Op::Add(k, p) => {
                let queued = q.add_with_priority(k, p);
                let was_pending = m.dirty.iter().any(|d| d.0 == k);
                m.add(k, p);
                prop_assert_eq!(queued, !m.shut && !was_pending);
            }
            Op::AddAfter(k, d, p) => {
                q.add_after_with_priority(k, ms(d), now, p);
                m.add_after(k, ms(d), now, p);
            }
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
            Op::ShutDown => {
                q.shut_down();
                m.shut = true;
                m.waiting.clear();
            }
        }
        prop_assert_eq!(q.len(), m.queue.len());
        prop_assert_eq!(q.num_processing(), m.processing.len());
        prop_assert_eq!(q.num_delayed(), m.waiting.len());
        prop_assert_eq!(q.dirty.len(), m.dirty.len());
        m.waiting.sort();
        prop_assert_eq!(q.poll_timeout(), m.waiting.first().map(|w| w.0));
    }
    Ok(())
}

proptest! {
    #[test]
    fn workqueue_15_matches_model(ops in proptest::collection::vec(op(), 1..200)) {
        check_against_model(ops)?;
    }

    /// The queue against the model with priorities on every kind of add: order by priority,
    /// then first added; raises; dirty-while-processing and delayed keys keeping the highest.
    #[test]
    fn workqueue_20_matches_model_with_priorities(
        ops in proptest::collection::vec(op_with_priorities(), 1..300)
    ) {
        check_against_model(ops)?;
    }
}

fn pop_all(q: &mut WorkQueue<u32>, now: Instant) -> Vec<u32> {
    let mut out = Vec::new();
    while let Pop::Key(k) = q.pop(now) {
        out.push(k);
    }
    out
}

#[test]
fn workqueue_16_higher_priority_first_fifo_within_a_priority() {
    let mut q = WorkQueue::<u32>::new();
    q.add_with_priority(1, Priority::LOW);
    q.add_with_priority(2, Priority::LOW);
    q.add(3);
    q.add_with_priority(4, Priority(10));
    q.add_with_priority(5, Priority::LOW);
    q.add(6);
    q.add_with_priority(7, Priority(10));
    assert_eq!(q.len(), 7);
    assert_eq!(pop_all(&mut q, t(0)), [4, 7, 3, 6, 1, 2, 5]);
    // `add` is NORMAL: plain adds keep client-go's first-added order.
    assert_eq!(Priority::default(), Priority::NORMAL);
    assert!(Priority::LOW < Priority::NORMAL);
}

#[test]
fn workqueue_17_added_again_raises_never_lowers_and_keeps_its_first_added_place() {
    let mut q = WorkQueue::<u32>::new();
    for k in 1..=4 {
        q.add_with_priority(k, Priority::LOW);
    }
    q.add(10);
    // 3 changed for real: raised to NORMAL. It was first added before 10, and keeps that
    // place among the NORMAL keys.
    assert!(!q.add(3), "raising queues nothing new");
    // A lower priority never lowers a key.
    assert!(!q.add_with_priority(10, Priority::LOW));
    assert_eq!(q.len(), 5);
    assert_eq!(pop_all(&mut q, t(0)), [3, 10, 1, 2, 4]);
}

#[test]
fn workqueue_18_priority_survives_processing_delay_and_rate_limiting() {
    let mut q = WorkQueue::<u32>::new();
    // Added while a worker holds it: queued on `done` with the highest priority it was given.
    q.add(1);
    assert_eq!(pop_key(&mut q, t(0)), 1);
    assert!(q.add_with_priority(1, Priority::LOW));
    assert!(!q.add_with_priority(1, Priority(5)));
    assert!(!q.add_with_priority(1, Priority::LOW));
    q.add(2);
    assert!(q.done(&1));
    assert_eq!(pop_all(&mut q, t(0)), [1, 2]);
    q.done(&1);
    q.done(&2);

    // Delayed: the earlier time and the higher priority of the two adds.
    q.add_after_with_priority(3, ms(10), t(0), Priority::LOW);
    q.add_after_with_priority(3, ms(50), t(0), Priority(5));
    q.add_after_with_priority(4, ms(20), t(0), Priority(5));
    q.add_after_with_priority(4, ms(5), t(0), Priority::LOW);
    q.add_with_priority(5, Priority(1));
    assert_eq!(q.num_delayed(), 2);
    assert_eq!(q.poll_timeout(), Some(t(5)));
    // Both at 5, moved in ready-time order (4 at 5 ms, 3 at 10 ms); 5 was added before them,
    // at 1.
    assert_eq!(pop_all(&mut q, t(10)), [4, 3, 5]);
    for k in [3, 4, 5] {
        q.done(&k);
    }

    // Rate limited at LOW waits behind a NORMAL change once due.
    q.add_rate_limited_with_priority(6, t(100), Priority::LOW);
    q.add_rate_limited(7, t(100));
    q.handle_timeout(t(200));
    q.add(8);
    assert_eq!(pop_all(&mut q, t(200)), [7, 8, 6]);
    assert_eq!(q.num_requeues(&6), 1);
}

/// A restart queues every object at LOW; the one change that comes in meanwhile is handed out
/// next, not after the backlog. The heap's slots are reused, so cycling keys through the queue
/// keeps its memory at the most keys it held at once.
#[test]
fn workqueue_19_a_change_overtakes_a_backlog_of_initial_list_keys() {
    let mut q = WorkQueue::<u32>::new();
    for k in 0..10_000 {
        q.add_with_priority(k, Priority::LOW);
    }
    let first = pop_key(&mut q, t(0));
    assert_eq!(first, 0);
    q.add(9_999); // the object that just changed, still queued: raised
    q.add(20_000); // a new one
    assert_eq!(pop_key(&mut q, t(0)), 9_999);
    assert_eq!(pop_key(&mut q, t(0)), 20_000);
    assert_eq!(pop_key(&mut q, t(0)), 1);
    q.done(&first);
    let rest = pop_all(&mut q, t(0));
    assert_eq!(rest.len(), 9_997);
    assert!(rest.windows(2).all(|w| w[0] < w[1]), "FIFO within LOW");
    for k in rest.iter().chain([&9_999, &20_000, &1]) {
        q.done(k);
    }
    // At most 10,000 keys were queued at once (20,000 took the slot 0 left).
    assert_eq!(q.queue.slots.len(), 10_000);
    for round in 0..1000u32 {
        q.add_with_priority(round % 7, Priority(round as i32 % 3));
        if round % 2 == 1 {
            while let Pop::Key(k) = q.pop(t(0)) {
                q.done(&k);
            }
        }
    }
    assert_eq!(q.queue.slots.len(), 10_000, "slots reused");
    assert_eq!(q.queue.free.len() + q.queue.len(), q.queue.slots.len());
}
