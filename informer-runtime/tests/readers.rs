//! Readers that never wait (both runtimes, scripted transport): a store read completes while
//! the driver is held inside a step, readers never see a mix of two lists, and a handler finds
//! in the store the change it was told about even while reader threads keep the store busy.

mod support;
use support::Env;
use support::fake_transport::{FakeTransport, WatchSender, page};

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;

use informer_core::protocol::{ListPage, Status, WatchEvent};
use informer_runtime::{
    DeliveryOrder, DynamicObject, Failure, HandlerFns, InformerBuilder, NAMESPACE_INDEX, Object,
    Runtime, Store,
};
use serde_json::json;

fn obj(name: &str, rv: u64, generation: u32) -> Arc<DynamicObject> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": name, "namespace": "ns", "resourceVersion": rv.to_string(),
                "labels": {"gen": generation.to_string()}
            }
        }))
        .unwrap(),
    )
}

fn generation(o: &DynamicObject) -> u32 {
    o.label("gen").unwrap().parse().unwrap()
}

/// Lists answer the scripted pages in order (then hang); each watch streams the next scripted
/// channel (then hangs).
fn script(
    lists: Vec<(Vec<Arc<DynamicObject>>, &str)>,
    watches: usize,
) -> (FakeTransport<DynamicObject>, Vec<Sender>) {
    FakeTransport::new()
        .list_pages(lists.into_iter().map(|(items, rv)| page(items, rv)))
        .watch_channels(watches)
}

type Sender = WatchSender<DynamicObject>;

on_both_runtimes!(
    a_read_completes_while_the_driver_is_inside_a_step,
    readers_never_see_a_mix_of_two_lists,
    a_handler_finds_its_change_in_the_store_while_readers_hammer_it,
    conformance_28_a_relist_reaches_handlers_only_once_the_cache_moved_whole,
);

fn builder<E: Env>(script: FakeTransport<DynamicObject>) -> InformerBuilder<DynamicObject, E::R> {
    InformerBuilder::from_transport(E::R::default(), Arc::new(script), "script")
}

fn expired() -> WatchEvent<DynamicObject> {
    WatchEvent::Error(Failure::Expired(Status {
        code: 410,
        reason: "Expired".into(),
        message: "scripted".into(),
        ..Default::default()
    }))
}

/// What a store answers in one go: the objects of the namespace index and of `list`, their
/// generations, and the sync flag.
#[derive(Debug, PartialEq)]
struct Seen {
    by_index: Vec<u32>,
    listed: usize,
    synced: bool,
    rv: String,
}

fn look(store: &Store<DynamicObject>) -> Seen {
    let mut by_index: Vec<u32> = store
        .by_index(NAMESPACE_INDEX, "ns")
        .unwrap()
        .iter()
        .map(|o| generation(o))
        .collect();
    by_index.sort_unstable();
    by_index.dedup();
    Seen {
        by_index,
        listed: store.list().len(),
        synced: store.has_synced(),
        rv: store.last_sync_resource_version(),
    }
}

/// A thread that waits until the transform holds the driver inside a step (first barrier),
/// reads the store on a third thread, waits up to a minute for that read (a read that waited
/// for the step would never come back while the driver is held: that shows as `None`, not as a
/// hung test), then lets the driver go (second barrier).
fn probe(
    barrier: Arc<Barrier>,
    store: Store<DynamicObject>,
) -> std::thread::JoinHandle<Option<Seen>> {
    std::thread::spawn(move || {
        barrier.wait();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(look(&store));
        });
        let seen = rx.recv_timeout(Duration::from_secs(60)).ok();
        barrier.wait();
        seen
    })
}

/// The transform blocks on a barrier at object `mid` of the second list: while the driver is
/// inside that step, a read completes and answers from the first list, whole.
async fn a_read_completes_while_the_driver_is_inside_a_step<E: Env>() {
    let first: Vec<_> = (0..500).map(|i| obj(&format!("a{i}"), 1, 1)).collect();
    let second: Vec<_> = (0..500).map(|i| obj(&format!("b{i}"), 2, 2)).collect();
    let (script, watches) = script(vec![(first, "1"), (second, "2")], 1);
    let barrier = Arc::new(Barrier::new(2));
    let b = barrier.clone();
    let inf = builder::<E>(script)
        .transform(move |o: Arc<DynamicObject>| {
            if o.name() == "b250" {
                b.wait();
                b.wait();
            }
            o
        })
        .build()
        .unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(30)))
        .await
        .unwrap();
    let probe = probe(barrier, inf.store());
    watches[0].send(expired()).await.unwrap();
    let store = inf.store();
    let t0 = std::time::Instant::now();
    while store.get("ns/b0").is_none() {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the relist never landed"
        );
        E::R::default().sleep(Duration::from_millis(5)).await;
    }
    let seen = probe.join().unwrap();
    assert_eq!(
        seen,
        Some(Seen {
            by_index: vec![1],
            listed: 500,
            synced: true,
            rv: "1".into(),
        }),
        "a read during the relist step waited for it or saw part of it"
    );
    assert_eq!(
        look(&store),
        Seen {
            by_index: vec![2],
            listed: 500,
            synced: true,
            rv: "2".into(),
        }
    );
    inf.shutdown().await;
}

/// Reader threads read the store in a loop while the informer relists three times (2,000
/// objects each, all of one generation per list, the names overlapping by half): no answer
/// ever holds two generations or a count other than a whole list's.
async fn readers_never_see_a_mix_of_two_lists<E: Env>() {
    const N: usize = 2000;
    let list = |g: u32| -> (Vec<Arc<DynamicObject>>, &'static str) {
        let start = (g as usize - 1) * N / 2;
        let items = (start..start + N)
            .map(|i| obj(&format!("o{i}"), u64::from(g), g))
            .collect();
        (items, ["", "1", "2", "3", "4"][g as usize])
    };
    let (script, watches) = script(vec![list(1), list(2), list(3), list(4)], 4);
    let inf = builder::<E>(script).build().unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(30)))
        .await
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let store = inf.store();
            let done = done.clone();
            std::thread::spawn(move || {
                let mut reads = 0u64;
                let mut generations = Vec::new();
                while !done.load(Ordering::Acquire) {
                    let seen = look(&store);
                    assert_eq!(
                        seen.by_index.len(),
                        1,
                        "two lists mixed: {:?}",
                        seen.by_index
                    );
                    assert_eq!(seen.listed, N, "not a whole list");
                    let objects = store.list();
                    let g = generation(&objects[0]);
                    assert!(
                        objects.iter().all(|o| generation(o) == g),
                        "list() mixed lists"
                    );
                    if generations.last() != Some(&g) {
                        generations.push(g);
                    }
                    reads += 1;
                }
                (reads, generations)
            })
        })
        .collect();
    let store = inf.store();
    for (g, watch) in (2u32..=4).zip(&watches) {
        watch.send(expired()).await.unwrap();
        let t0 = std::time::Instant::now();
        while store.last_sync_resource_version() != g.to_string() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "relist {g} never landed"
            );
            E::R::default().sleep(Duration::from_millis(2)).await;
        }
    }
    done.store(true, Ordering::Release);
    for r in readers {
        let (reads, generations) = r.join().unwrap();
        assert!(reads > 0);
        assert!(
            generations.windows(2).all(|w| w[0] < w[1]),
            "went back: {generations:?}"
        );
    }
    assert_eq!(look(&store).by_index, vec![4]);
    inf.shutdown().await;
}

/// Eight reader threads keep the store busy (whole lists, so that some are still on the old
/// copy when the next step is published and the driver has to retry) while 3,000 watch events
/// go by: every notification a handler runs finds its object in the store at that state or a
/// later one.
async fn a_handler_finds_its_change_in_the_store_while_readers_hammer_it<E: Env>() {
    let first: Vec<_> = (0..300).map(|i| obj(&format!("o{i}"), 1, 1)).collect();
    let (script, watches) = script(vec![(first, "1")], 1);
    let inf = builder::<E>(script).build().unwrap();
    let store = inf.store();
    let missing = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(AtomicU64::new(0));
    let check = {
        let (store, missing, seen) = (store.clone(), missing.clone(), seen.clone());
        move |o: &DynamicObject| {
            seen.fetch_add(1, Ordering::Relaxed);
            let rv: u64 = o.resource_version().unwrap().parse().unwrap();
            let found = store
                .get(&format!("ns/{}", o.name()))
                .map(|s| s.resource_version().unwrap().parse::<u64>().unwrap());
            if found.is_none_or(|f| f < rv) {
                missing.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    let (c1, c2) = (check.clone(), check);
    let reg = inf
        .add_handler(
            HandlerFns::new()
                .on_add(move |o: Arc<DynamicObject>, _| c1(&o))
                .on_update(move |_, n: Arc<DynamicObject>| c2(&n)),
        )
        .unwrap();
    inf.start().unwrap();
    reg.wait_for_sync(Some(Duration::from_secs(30)))
        .await
        .unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let (store, done) = (store.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Acquire) {
                    std::hint::black_box(store.list());
                    std::hint::black_box(store.by_index(NAMESPACE_INDEX, "ns").unwrap());
                }
            })
        })
        .collect();
    for rv in 2..3002u64 {
        let name = format!("o{}", rv % 400);
        let event = if rv % 400 < 300 || rv > 400 {
            WatchEvent::Modified(obj(&name, rv, 1))
        } else {
            WatchEvent::Added(obj(&name, rv, 1))
        };
        watches[0].send(event).await.unwrap();
    }
    let t0 = std::time::Instant::now();
    while store.last_sync_resource_version() != "3001" || reg.pending() > 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "events never all applied"
        );
        E::R::default().sleep(Duration::from_millis(5)).await;
    }
    done.store(true, Ordering::Release);
    for r in readers {
        r.join().unwrap();
    }
    assert!(
        seen.load(Ordering::Relaxed) > 300,
        "the handler heard too little"
    );
    assert_eq!(
        missing.load(Ordering::Relaxed),
        0,
        "a handler was told of a change the store did not show yet"
    );
    inf.shutdown().await;
}

/// A first list of 2,000 objects: the watch it starts is asked for before the list is
/// published (the driver publishes a large step after a yield that lets the request go out
/// first), so the transport is called while readers still see an empty cache. Run on one
/// executor thread, where the order is the driver's alone.
async fn a_large_lists_watch_is_requested_before_the_list_is_published<R: Runtime + Default>() {
    let items: Vec<_> = (0..2000).map(|i| obj(&format!("a{i}"), 1, 1)).collect();
    let (transport, _watches) = script(vec![(items, "1")], 1);
    // How many objects readers saw when the informer asked for the watch.
    let store = Arc::new(std::sync::OnceLock::<Store<DynamicObject>>::new());
    let at_watch: Arc<Mutex<Option<usize>>> = Arc::default();
    let (s, at) = (store.clone(), at_watch.clone());
    let transport = transport.on_watch(move |_| {
        let seen = s.get().map(|s| s.list().len());
        at.lock().unwrap().get_or_insert(seen.unwrap_or(usize::MAX));
    });
    let inf = InformerBuilder::<DynamicObject, R>::from_transport(
        R::default(),
        Arc::new(transport),
        "script",
    )
    .build()
    .unwrap();
    let _ = store.set(inf.store());
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(30)))
        .await
        .unwrap();
    assert_eq!(inf.store().list().len(), 2000);
    // The watch is requested once the step that applied the list has started it.
    for _ in 0..1500 {
        if at_watch.lock().unwrap().is_some() {
            break;
        }
        R::default().sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        *at_watch.lock().unwrap(),
        Some(0),
        "the watch was requested after the list was published"
    );
    inf.shutdown().await;
}

#[test]
fn a_large_lists_watch_is_requested_before_the_list_is_published_on_tokio() {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(
            a_large_lists_watch_is_requested_before_the_list_is_published::<informer_tokio::Tokio>(
            ),
        );
}

#[test]
fn a_large_lists_watch_is_requested_before_the_list_is_published_on_smol() {
    informer_smol::block_on(
        a_large_lists_watch_is_requested_before_the_list_is_published::<informer_smol::Smol>(),
    )
    .unwrap();
}

/// A notification, with the store's keys and resourceVersions as the handler saw them.
type Heard = (String, Vec<String>);

/// CONFORMANCE 26–28 through the runtime: a relist (here after a 410, in two pages) moves the
/// cache readers see from the old list to the new one in one step, before any handler hears
/// of it (client-go 1.36's atomic relists), whichever the order; the handler then hears its
/// deletions first in client-go 1.36's order (`InOrder`, the default) and last in the older
/// DeltaFIFO order. Every notification of the relist finds the whole new list in the store.
async fn conformance_28_a_relist_reaches_handlers_only_once_the_cache_moved_whole<E: Env>() {
    for order in [None, Some(DeliveryOrder::DeltaFifo)] {
        let first = vec![obj("a", 1, 1), obj("b", 2, 1), obj("c", 3, 1)];
        let second = [obj("b", 4, 2), obj("d", 5, 2)];
        let pages = [
            page(first, "3"),
            ListPage {
                continue_token: Some("next".into()),
                ..page(vec![second[0].clone()], "5")
            },
            page(vec![second[1].clone()], "5"),
        ];
        let script = FakeTransport::new().list_pages(pages).watch_channels(1);
        let (script, watches) = script;
        let mut b = builder::<E>(script);
        if let Some(order) = order {
            b = b.delivery_order(order);
        }
        let inf = b.build().unwrap();
        // Each notification, with the store's keys and resourceVersions as the handler saw them.
        let heard: Arc<Mutex<Vec<Heard>>> = Arc::default();
        let store = inf.store();
        let seen = move || {
            let mut v: Vec<String> = store
                .list()
                .iter()
                .map(|o| format!("{}@{}", o.name(), o.resource_version().unwrap()))
                .collect();
            v.sort();
            v
        };
        let (h1, h2, h3) = (heard.clone(), heard.clone(), heard.clone());
        let (s1, s2, s3) = (seen.clone(), seen.clone(), seen);
        inf.add_handler(
            HandlerFns::new()
                .on_add(move |o: Arc<DynamicObject>, _| {
                    h1.lock().unwrap().push((format!("add {}", o.name()), s1()))
                })
                .on_update(move |_, n: Arc<DynamicObject>| {
                    h2.lock()
                        .unwrap()
                        .push((format!("update {}", n.name()), s2()))
                })
                .on_delete(move |d| {
                    let what = format!("delete {} {}", d.object().name(), d.is_tombstone());
                    h3.lock().unwrap().push((what, s3()))
                }),
        )
        .unwrap();
        inf.start().unwrap();
        inf.wait_for_sync(Some(Duration::from_secs(10)))
            .await
            .unwrap();
        let t0 = std::time::Instant::now();
        while heard.lock().unwrap().len() < 3 {
            assert!(t0.elapsed() < Duration::from_secs(10), "initial adds");
            E::R::default().sleep(Duration::from_millis(2)).await;
        }
        heard.lock().unwrap().clear();
        watches[0].send(expired()).await.unwrap();
        while heard.lock().unwrap().len() < 4 {
            assert!(t0.elapsed() < Duration::from_secs(10), "{order:?}: relist");
            E::R::default().sleep(Duration::from_millis(2)).await;
        }
        let heard = heard.lock().unwrap().clone();
        let whole = ["b@4", "d@5"];
        for (what, store) in &heard {
            assert_eq!(
                store, &whole,
                "{order:?}: {what} heard before the cache moved whole"
            );
        }
        let mut what: Vec<&str> = heard.iter().map(|(w, _)| w.as_str()).collect();
        // The deletions come in the cache's order (a hash map's): sorted here.
        let (deletions, rest) = match order {
            None => what.split_at_mut(2),
            Some(_) => {
                let (rest, deletions) = what.split_at_mut(2);
                (deletions, rest)
            }
        };
        deletions.sort();
        assert_eq!(
            deletions,
            ["delete a true", "delete c true"],
            "{order:?}: {heard:?}"
        );
        assert_eq!(rest, ["update b", "add d"], "{order:?}: {heard:?}");
        inf.shutdown().await;
    }
}
