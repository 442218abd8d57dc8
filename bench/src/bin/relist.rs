//! A relist's `Replace` in the core, without a cluster: 20,000 ConfigMaps shaped as in
//! `cargo xtask bench e2e` are listed into a pipeline with one handler, then listed again
//! with 0% or 5% of them changed. The unchanged ones come either as new copies (what decoding
//! every item gives) or as the very objects the cache holds (what the runtime's list takes
//! from the cache instead of decoding them, `ListDecoder::with_known`). Printed: the time
//! from handing the list to the pipeline until the handler has had every notification, best
//! of 5 (each on a fresh pipeline). The 5% relist of the cached objects is timed twice more:
//! with the CPU caches evicted first (64 MiB written), as a restart's relist finds them (the
//! objects were loaded hundreds of milliseconds before, while the API server built the list);
//! and listed in another order than the one they lie in memory, as kube-apiserver's watch
//! cache serves a list (from a hash map, so no order a cache could have loaded them in), with
//! the caches evicted too: what the relist after a warm restart's 410 meets. That last relist
//! is also timed through a whole `SharedIndexInformer` (the list page answering the relist
//! that a watch's 410 started, as the runtimes apply it: admission included), not only
//! through its pipeline's `Replace`.
//!
//! First, the list's decoding: the same relist as the body kube-apiserver sends, fed to the
//! list decoder 64 KiB at a time, decoding every item or taking the unchanged ones from the
//! first list's objects (`ListDecoder::with_known`), best of 5.
//!
//! `cargo run --release -p informer-bench --bin relist [-- OBJECTS]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_core::SharedIndexInformer;
use informer_core::informer::Output;
use informer_core::protocol::RequestId;
use informer_core::protocol::{Failure, Input, ListPage, Request, Status};
use informer_core::{
    cache::indexer::Indexer, cache::pipeline::Pipeline, informer::InformerConfig,
    object::DynamicObject, object::KeyRef, object::Object,
};
use informer_tokio::http::decode::{KnownObjects, ListDecoder};

fn configmap(i: usize, rv: usize) -> Arc<DynamicObject> {
    Arc::new(serde_json::from_str(&configmap_json(i, rv)).expect("a ConfigMap"))
}

fn configmap_json(i: usize, rv: usize) -> String {
    let filler: String = (0..1000)
        .map(|k| (b'a' + ((i * 31 + k * 7) % 26) as u8) as char)
        .collect();
    format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"cm-{i}","namespace":"bench-{}","uid":"{:08x}-1b2c-4d5e-8f90-{:012x}","resourceVersion":"{rv}","creationTimestamp":"2026-11-22T23:00:00Z","labels":{{"app":"bench","shard":"{}"}},"managedFields":[{{"manager":"curl","operation":"Update","apiVersion":"v1","time":"2026-11-22T23:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:data":{{".":{{}},"f:payload":{{}}}},"f:metadata":{{"f:labels":{{".":{{}},"f:app":{{}},"f:shard":{{}}}}}}}}}}]}},"data":{{"payload":"{filler}"}}}}"#,
        i % 10,
        i,
        i * 7919,
        i % 16
    )
}

/// The first list's objects in a store (the core's `Indexer`, looked up as the runtime looks
/// its cache up: by key parts, hashed as the store hashes keys).
struct Held(Indexer<DynamicObject>);

impl KnownObjects<DynamicObject> for Held {
    fn known(&self, key: KeyRef<'_>, rv: &str) -> Option<Arc<DynamicObject>> {
        let (_, obj) = self.0.get_key_value(key)?;
        (obj.resource_version() == Some(rv)).then(|| obj.clone())
    }
}

/// Decoding a relist body of `n` ConfigMaps (every 20th changed), with or without the first
/// list's objects known: the best time of 5 and the items taken from them.
fn decode(n: usize, known: Option<&Arc<Held>>) -> (Duration, usize) {
    let items: Vec<String> = (0..n)
        .map(|i| configmap_json(i, if i % 20 == 0 { 50_000 + i } else { 1000 + i }))
        .collect();
    let body = format!(
        r#"{{"kind":"ConfigMapList","apiVersion":"v1","metadata":{{"resourceVersion":"99999"}},"items":[{}]}}"#,
        items.join(",")
    );
    let mut best = (Duration::MAX, 0);
    for _ in 0..5 {
        let t = Instant::now();
        let mut d = ListDecoder::<DynamicObject>::new();
        if let Some(k) = known {
            d = d.with_known(k.clone());
        }
        for chunk in body.as_bytes().chunks(64 << 10) {
            d.feed(chunk).expect("a list");
        }
        let taken = d.items_known();
        let page = d.finish().expect("a list");
        let took = t.elapsed();
        assert_eq!(page.items.len(), n);
        drop(page);
        if took < best.0 {
            best = (took, taken);
        }
    }
    best
}

fn drain(p: &mut Pipeline<DynamicObject>) -> usize {
    let mut n = 0;
    while let Some((id, _)) = p.poll_notification() {
        p.handler_done(id);
        n += 1;
    }
    n
}

/// Writes 64 MiB (more than this machine's caches hold), leaving none of what was read before
/// in them.
fn evict_caches(scratch: &mut [u8]) {
    for (i, b) in scratch.iter_mut().enumerate().step_by(64) {
        *b = b.wrapping_add(i as u8);
    }
    std::hint::black_box(&scratch);
}

/// Runs `inf`'s outputs to empty, each notification handled at once: the notifications and
/// the last request asked for.
fn drain_informer(
    inf: &mut SharedIndexInformer<DynamicObject>,
) -> (usize, Option<(RequestId, Request)>) {
    let mut notified = 0;
    let mut request = None;
    while let Some(out) = inf.poll() {
        if let Output::Request { id, request: r } = out {
            request = Some((id, r));
        }
    }
    let handlers: Vec<_> = inf.handlers().collect();
    let mut taken = Vec::new();
    for handler in handlers {
        loop {
            let n = inf.poll_notifications(handler, 1024, &mut taken);
            if n == 0 {
                break;
            }
            taken.clear();
            inf.handler_done(handler);
            notified += n;
        }
    }
    (notified, request)
}

fn list_page(items: Vec<Arc<DynamicObject>>, rv: &str) -> Input<DynamicObject> {
    Input::ListPage(ListPage {
        items,
        resource_version: rv.into(),
        continue_token: None,
        remaining_item_count: None,
    })
}

/// A relist as `case` says, through a whole informer: listed and watching, its watch ends
/// with a 410 and the relist it starts is answered. The time from handing the page over until
/// every notification was handled, and the notifications.
fn relist_informer(n: usize, case: &Case, scratch: &mut [u8]) -> (Duration, usize) {
    let zero = informer_core::time::Instant::from_epoch(Duration::ZERO);
    let mut inf = SharedIndexInformer::<DynamicObject>::new(InformerConfig::default());
    inf.add_handler(Duration::ZERO, zero).expect("not stopped");
    inf.start(zero);
    let (_, list) = drain_informer(&mut inf);
    let (id, _) = list.expect("a list");
    // Without a transform the informer caches these very objects.
    let first: Vec<_> = (0..n).map(|i| configmap(i, 1000 + i)).collect();
    inf.handle_input(zero, id, list_page(first.clone(), "30000"));
    let (_, watch) = drain_informer(&mut inf);
    let (id, _) = watch.expect("a watch");
    let gone = Status {
        code: 410,
        ..Status::default()
    };
    inf.handle_input(zero, id, Input::Failed(Failure::Expired(gone)));
    let mut relist = drain_informer(&mut inf).1;
    while !matches!(relist, Some((_, Request::List(_)))) {
        let at = inf.poll_timeout().expect("a relist after a backoff");
        inf.handle_timeout(at);
        relist = drain_informer(&mut inf).1;
    }
    let (id, _) = relist.expect("a relist");
    let again = case.relisted(first);
    if case.evict {
        evict_caches(scratch);
    }
    let t = Instant::now();
    inf.handle_input(zero, id, list_page(again, "60000"));
    let (notified, _) = drain_informer(&mut inf);
    (t.elapsed(), notified)
}

/// One relist's setting.
#[derive(Clone, Copy)]
struct Case {
    /// Every nth object changed (0: none).
    changed_every: usize,
    /// Unchanged objects are the cached ones (else copies).
    shared: bool,
    /// The CPU caches are evicted just before.
    evict: bool,
    /// Listed in an order unrelated to the one the objects were allocated in.
    scattered: bool,
}

/// None changed, the unchanged ones as copies, caches warm, listed in allocation order.
const COPIES: Case = Case {
    changed_every: 0,
    shared: false,
    evict: false,
    scattered: false,
};

impl std::fmt::Display for Case {
    /// What the printed line says of the case.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.changed_every {
            0 => f.write_str("none changed")?,
            n => write!(f, "{}% changed", 100 / n)?,
        }
        let unchanged = if self.shared {
            "the cached objects"
        } else {
            "copies"
        };
        write!(f, ", unchanged ones as {unchanged}")?;
        if self.evict {
            f.write_str(", CPU caches evicted first")?;
        }
        if self.scattered {
            f.write_str(", listed in another order than loaded")?;
        }
        Ok(())
    }
}

impl Case {
    /// The relist of `first` (the objects listed first, in allocation order) this case makes;
    /// `first` itself is dropped, as the cache holds its objects.
    fn relisted(&self, first: Vec<Arc<DynamicObject>>) -> Vec<Arc<DynamicObject>> {
        let n = first.len();
        (0..n)
            .map(|i| listed_at(i, n, self.scattered))
            .map(|i| {
                if self.changed_every > 0 && i % self.changed_every == 0 {
                    configmap(i, 50_000 + i)
                } else if self.shared {
                    first[i].clone()
                } else {
                    configmap(i, 1000 + i)
                }
            })
            .collect()
    }
}

/// The position listed `i`th out of `n`: `i` itself, or a step of a prime through all of
/// them (which no allocator's order follows).
fn listed_at(i: usize, n: usize, scattered: bool) -> usize {
    const STEP: usize = 7919;
    if scattered && n % STEP != 0 {
        (i * STEP) % n
    } else {
        i
    }
}

/// One relist of `n` objects as `case` says, with `scratch` written over to evict the caches:
/// its time and the notifications it gave.
fn relist(n: usize, case: &Case, scratch: &mut [u8]) -> (Duration, usize) {
    let zero = informer_core::time::Instant::from_epoch(Duration::ZERO);
    let first: Vec<_> = (0..n).map(|i| configmap(i, 1000 + i)).collect();
    let mut p: Pipeline<DynamicObject> = Pipeline::new(Duration::ZERO);
    p.add_handler(Duration::ZERO, zero);
    p.start(zero);
    p.populate(first.clone());
    while p.process_one() {}
    drain(&mut p);
    let again = case.relisted(first);
    if case.evict {
        evict_caches(scratch);
    }
    let t = Instant::now();
    p.replace(again);
    while p.process_one() {}
    let notified = drain(&mut p);
    (t.elapsed(), notified)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let mut store = Indexer::new();
    for i in 0..n {
        store.add(configmap(i, 1000 + i));
    }
    let held = Arc::new(Held(store));
    for (known, how) in [
        (None, "every item decoded"),
        (Some(&held), "unchanged ones known"),
    ] {
        let (took, taken) = decode(n, known);
        println!(
            "decoding a relist of {n} ConfigMaps, 5% changed, {how}: {:.2} ms (best of 5), {taken} taken",
            took.as_secs_f64() * 1e3
        );
    }
    let cases = [
        COPIES,
        Case {
            shared: true,
            ..COPIES
        },
        Case {
            changed_every: 20,
            ..COPIES
        },
        Case {
            changed_every: 20,
            shared: true,
            ..COPIES
        },
        Case {
            changed_every: 20,
            shared: true,
            evict: true,
            ..COPIES
        },
        Case {
            changed_every: 20,
            shared: true,
            evict: true,
            scattered: true,
        },
    ];
    let mut scratch = vec![1u8; 64 << 20];
    for case in &cases {
        let (best, notified) = best_of_5(|| relist(n, case, &mut scratch));
        println!(
            "relist of {n} ConfigMaps, {case}: {:.2} ms (best of 5), {notified} notifications",
            best.as_secs_f64() * 1e3,
        );
    }
    let last = &cases[cases.len() - 1];
    let (best, notified) = best_of_5(|| relist_informer(n, last, &mut scratch));
    println!(
        "relist of {n} ConfigMaps through an informer after its watch's 410, {last}: {:.2} ms (best of 5), {notified} notifications",
        best.as_secs_f64() * 1e3,
    );
}

/// The best time of five runs of `run`, and the notifications of the first.
fn best_of_5(mut run: impl FnMut() -> (Duration, usize)) -> (Duration, usize) {
    let runs: Vec<_> = (0..5).map(|_| run()).collect();
    let best = runs.iter().map(|r| r.0).min().expect("runs");
    (best, runs[0].1)
}
