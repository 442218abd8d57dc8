//! What a watch event allocates inside the informer (issue: no per-event allocation that
//! could be avoided): a counting global allocator around `handle_input` and the delivery of
//! its notifications, with the event's object built beforehand, as a transport hands it over.
//! This binary holds one test, so nothing else allocates while it counts.

// The counting global allocator needs `unsafe impl GlobalAlloc`; the core itself forbids unsafe.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use informer_core::informer::Output;
use informer_core::protocol::{Input, ListPage, WatchEvent};
use informer_core::{
    SharedIndexInformer, informer::InformerConfig, object::DynamicObject, time::Instant,
};

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: delegates to the system allocator; only adds a counter.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn cm(i: usize, rv: u64) -> Arc<DynamicObject> {
    named(&format!("cm-{i:05}"), i, rv)
}

/// A ConfigMap whose key (`ns-N/name`) is longer than a `Key` holds inline (23 bytes).
fn long(i: usize, rv: u64) -> Arc<DynamicObject> {
    named(&format!("a-name-long-enough-to-be-shared-{i:05}"), i, rv)
}

fn named(name: &str, i: usize, rv: u64) -> Arc<DynamicObject> {
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns-{}","uid":"u-{name}","resourceVersion":"{rv}","labels":{{"app":"a{}"}}}},"data":{{"k":"v{rv}"}}}}"#,
        i % 7,
        i % 5
    );
    Arc::new(serde_json::from_str(&json).unwrap())
}

fn allocations(f: impl FnOnce()) -> usize {
    let before = ALLOCS.load(Ordering::SeqCst);
    f();
    ALLOCS.load(Ordering::SeqCst) - before
}

#[test]
fn watch_events_allocate_nothing_but_a_new_long_key() {
    const OBJECTS: usize = 200;
    let at = |ms: u64| Instant::from_epoch(Duration::from_millis(ms));
    let mut inf: SharedIndexInformer<DynamicObject> =
        SharedIndexInformer::new(InformerConfig::default());
    inf.add_index(
        "label:app",
        informer_core::cache::indexer::LabelIndex::new("app"),
    )
    .unwrap();
    for _ in 0..3 {
        inf.add_handler(Duration::ZERO, at(0)).unwrap();
    }
    inf.start(at(0));
    let mut request = None;
    let mut drain = |inf: &mut SharedIndexInformer<DynamicObject>, seen: &mut usize| {
        inf.deliver(|_, _| *seen += 1);
        while let Some(out) = inf.poll() {
            if let Output::Request { id, .. } = out {
                request = Some(id);
            }
        }
        request.expect("a request")
    };
    let mut seen = 0;
    let list = drain(&mut inf, &mut seen);
    let page = ListPage {
        items: (0..OBJECTS).map(|i| cm(i, 1)).collect(),
        resource_version: "1".into(),
        continue_token: None,
        remaining_item_count: None,
    };
    inf.handle_input(at(1), list, Input::ListPage(page));
    let watch = drain(&mut inf, &mut seen);
    assert_eq!(seen, 3 * OBJECTS);

    // Every kind of event, built beforehand; a first round sizes the informer's queues.
    let mut rv = 1;
    let events = |n: usize, rv: &mut u64, kind: &str| -> Vec<WatchEvent<DynamicObject>> {
        (0..n)
            .map(|j| {
                *rv += 1;
                match kind {
                    "modify" => WatchEvent::Modified(cm(j % OBJECTS, *rv)),
                    "delete" => WatchEvent::Deleted(cm(j, *rv)),
                    "long" => WatchEvent::Added(long(j, *rv)),
                    _ => WatchEvent::Added(cm(j, *rv)),
                }
            })
            .collect()
    };
    let feed = |inf: &mut SharedIndexInformer<DynamicObject>, evs: Vec<_>, seen: &mut usize| {
        for ev in evs {
            inf.handle_input(at(2), watch, Input::Event(ev));
            inf.deliver(|_, _| *seen += 1);
            assert!(inf.poll().is_none());
        }
    };
    let warm = events(OBJECTS, &mut rv, "modify");
    feed(&mut inf, warm, &mut seen);

    // One measured round: `count` events of `kind`, each seen by the three handlers; the
    // allocations they made.
    let mut round = |inf: &mut SharedIndexInformer<DynamicObject>, count: usize, kind: &str| {
        let evs = events(count, &mut rv, kind);
        let mut seen = 0;
        let n = allocations(|| feed(inf, evs, &mut seen));
        assert_eq!(seen, 3 * count, "notifications of the {kind} round");
        n
    };

    let n = round(&mut inf, 1000, "modify");
    assert_eq!(n, 0, "allocations of 1,000 watch MODIFIED events");

    let n = round(&mut inf, OBJECTS / 2, "delete");
    assert_eq!(n, 0, "allocations of watch DELETED events");

    // Re-adding the deleted keys: their keys (`ns-N/cm-NNNNN`) are held inline, so nothing
    // but now and then a table that rehashes (deleted slots do not all count as free again;
    // where they fall depends on the process's hash seed).
    let adds = OBJECTS / 2;
    let n = round(&mut inf, adds, "add");
    assert!(
        n <= adds / 10,
        "{n} allocations for {adds} adds of short keys"
    );

    // New objects with keys too long to hold inline: one allocation each, the shared key,
    // and the tables growing now and then.
    let n = round(&mut inf, adds, "long");
    assert!(
        n >= adds && n <= adds + adds / 5,
        "{n} allocations for {adds} adds of long keys"
    );
}
