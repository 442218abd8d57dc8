//! Reconcile workers over the shared work queue, on tokio, smol and threads (no cluster).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Default)]
struct Record {
    /// Keys being reconciled right now.
    active: Mutex<HashMap<u32, usize>>,
    /// Times each key was reconciled.
    runs: Mutex<HashMap<u32, usize>>,
    overlaps: AtomicUsize,
}

impl Record {
    fn enter(&self, k: u32) {
        let mut a = self.active.lock().unwrap();
        let n = a.entry(k).or_default();
        *n += 1;
        if *n > 1 {
            self.overlaps.fetch_add(1, Ordering::SeqCst);
        }
        *self.runs.lock().unwrap().entry(k).or_default() += 1;
    }
    fn exit(&self, k: u32) {
        *self.active.lock().unwrap().get_mut(&k).unwrap() -= 1;
    }
    fn runs(&self, k: u32) -> usize {
        self.runs.lock().unwrap().get(&k).copied().unwrap_or(0)
    }
}

macro_rules! scenarios {
    ($name:ident, $rt:ident, $block_on:expr, $sleep:path) => {
        mod $name {
            use super::*;
            use $rt::{Action, WorkQueue, Workers};

            #[test]
            fn workers_never_reconcile_a_key_concurrently_and_drain_on_shutdown() {
                $block_on(async {
                    let q = WorkQueue::<u32>::new();
                    let rec = Arc::new(Record::default());
                    let r = rec.clone();
                    let workers = Workers::spawn(Default::default(), &q, 4, move |k: u32| {
                        let r = r.clone();
                        async move {
                            r.enter(k);
                            $sleep(Duration::from_millis(2)).await;
                            r.exit(k);
                            Ok::<_, String>(Action::Done)
                        }
                    })
                    .unwrap();
                    for round in 0..20 {
                        for k in 0..8 {
                            q.add(k);
                        }
                        if round % 5 == 0 {
                            $sleep(Duration::from_millis(3)).await;
                        }
                    }
                    // Added before shutdown, so processed: shutdown drains.
                    q.add(100);
                    workers.shutdown().await;
                    assert_eq!(workers.running(), 0);
                    assert_eq!(rec.overlaps.load(Ordering::SeqCst), 0);
                    for k in 0..8 {
                        assert!(rec.runs(k) >= 1);
                    }
                    assert_eq!(rec.runs(100), 1);
                    // Nothing is accepted after shutdown.
                    q.add(200);
                    assert_eq!(q.len(), 0);
                });
            }

            #[test]
            fn errors_are_requeued_with_backoff_until_success_and_requeue_after_reruns() {
                $block_on(async {
                    let q = WorkQueue::<u32>::new();
                    let rec = Arc::new(Record::default());
                    let r = rec.clone();
                    let q2 = q.clone();
                    let workers = Workers::spawn(Default::default(), &q, 2, move |k: u32| {
                        let r = r.clone();
                        let q2 = q2.clone();
                        async move {
                            r.enter(k);
                            r.exit(k);
                            match (k, r.runs(k)) {
                                // Fails three times, then succeeds.
                                (1, n) if n <= 3 => {
                                    assert_eq!(q2.num_requeues(&k), n as u32 - 1);
                                    Err(format!("attempt {n}"))
                                }
                                (1, _) => Ok(Action::Done),
                                // Asks to be run again once.
                                (2, 1) => Ok(Action::RequeueAfter(Duration::from_millis(20))),
                                (2, _) => Ok(Action::Done),
                                // Panics once.
                                (3, 1) => panic!("boom"),
                                _ => Ok(Action::Done),
                            }
                        }
                    })
                    .unwrap();
                    q.add(1);
                    q.add(2);
                    q.add(3);
                    while rec.runs(1) < 4 || rec.runs(2) < 2 || rec.runs(3) < 2 {
                        $sleep(Duration::from_millis(5)).await;
                    }
                    // Success forgets the failures.
                    while q.num_requeues(&1) != 0 {
                        $sleep(Duration::from_millis(5)).await;
                    }
                    workers.shutdown().await;
                    assert_eq!(rec.runs(1), 4);
                    assert_eq!(rec.runs(2), 2);
                    assert_eq!(rec.runs(3), 2);
                });
            }

            #[test]
            fn blocking_workers_process_and_drain() {
                $block_on(async {
                    let q = WorkQueue::<u32>::new();
                    let rec = Arc::new(Record::default());
                    let r = rec.clone();
                    let workers =
                        Workers::spawn_blocking(Default::default(), &q, 3, move |k: u32| {
                            r.enter(k);
                            std::thread::sleep(Duration::from_millis(1));
                            r.exit(k);
                            if k == 9 && r.runs(9) == 1 {
                                return Ok(Action::RequeueAfter(Duration::from_millis(5)));
                            }
                            Ok::<_, String>(Action::Done)
                        })
                        .unwrap();
                    for _ in 0..10 {
                        for k in 0..10 {
                            q.add(k);
                        }
                    }
                    while rec.runs(9) < 2 {
                        $sleep(Duration::from_millis(5)).await;
                    }
                    workers.shutdown().await;
                    assert_eq!(rec.overlaps.load(Ordering::SeqCst), 0);
                    assert_eq!(workers.running(), 0);
                });
            }
        }
    };
}

fn tokio_block_on<F: std::future::Future>(f: F) -> F::Output {
    informer_tokio::block_on(f).unwrap()
}

fn smol_block_on<F: std::future::Future>(f: F) -> F::Output {
    informer_smol::block_on(f).unwrap()
}

scenarios!(tokio, informer_tokio, tokio_block_on, informer_tokio::sleep);
scenarios!(smol, informer_smol, smol_block_on, informer_smol::sleep);
