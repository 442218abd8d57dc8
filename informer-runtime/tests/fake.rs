//! The driver against scripted transports (no cluster): timeouts, failures and the watch-error
//! hook, event streams, handler removal, runtime errors — on tokio and on smol.

mod support;
use support::Env;
use support::fake_transport::{FakeTransport, WatchSender, page};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use informer_core::protocol::WatchEvent;
use informer_runtime::{
    BackoffConfig, DynamicObject, Error, Failure, HandlerFns, InformerBuilder, Notification,
    Object, Runtime,
};
use serde_json::json;

fn obj(name: &str, rv: u64) -> Arc<DynamicObject> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()}
        }))
        .unwrap(),
    )
}

/// Lists answer `items` at resourceVersion 10; the first watch streams what the test sends
/// through the returned sender; later watches never answer.
fn scripted(items: Vec<Arc<DynamicObject>>) -> (FakeTransport<DynamicObject>, Sender) {
    FakeTransport::new()
        .list_always(items, "10")
        .watch_channel()
}

type Sender = WatchSender<DynamicObject>;

on_both_runtimes!(
    wait_for_sync_times_out_and_shutdown_abandons_the_request,
    failures_reach_the_hook_and_back_off,
    event_stream_pulls_and_dropping_it_removes_the_handler,
    watch_events_reach_handlers_and_the_store,
    dropping_the_last_informer_handle_stops_it,
    a_panicking_transform_stops_the_informer_instead_of_hanging_it,
    conformance_16_a_panicking_handler_stops_neither_the_informer_nor_the_others,
    store_answers_label_selectors_with_and_without_a_label_index,
    a_sync_timeout_carries_the_last_failure,
    transform_mut_edits_in_place_without_cloning,
    a_handler_removed_mid_batch_starts_nothing_more_and_sync_waits_for_the_last_add,
);

fn builder<E: Env>(fake: FakeTransport<DynamicObject>) -> InformerBuilder<DynamicObject, E::R> {
    InformerBuilder::from_transport(E::R::default(), Arc::new(fake), "fake").backoff(
        BackoffConfig {
            initial: Duration::from_millis(10),
            cap: Duration::from_millis(50),
            ..BackoffConfig::default()
        },
    )
}

async fn eventually<E: Env>(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        E::R::default().sleep(Duration::from_millis(5)).await;
    }
}

async fn wait_for_sync_times_out_and_shutdown_abandons_the_request<E: Env>() {
    let (fake, _tx) = scripted(vec![]);
    let fake = fake.hang_lists();
    let inf = builder::<E>(fake).build().unwrap();
    inf.start().unwrap();
    assert!(matches!(
        inf.wait_for_sync(Some(Duration::from_millis(50))).await,
        Err(Error::Timeout {
            last_failure: None,
            ..
        })
    ));
    assert!(matches!(
        informer_runtime::wait_for_cache_sync(
            &E::R::default(),
            &[&inf],
            Some(Duration::from_millis(50))
        )
        .await,
        Err(Error::Timeout { .. })
    ));
    let t0 = Instant::now();
    inf.shutdown().await;
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert!(matches!(
        inf.wait_for_sync(None).await,
        Err(Error::Stopped { .. })
    ));
    assert!(!inf.has_synced());
}

/// A sync that times out says why: the last list/watch failure rides on the error (its
/// Display and its `source()`), not only in the logs.
async fn a_sync_timeout_carries_the_last_failure<E: Env>() {
    let (fake, _tx) = scripted(vec![obj("a", 5)]);
    let fake = fake.fail_lists(usize::MAX);
    let inf = builder::<E>(fake).build().unwrap();
    inf.start().unwrap();
    let err = inf
        .wait_for_sync(Some(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Timeout { last_failure: Some(f), .. } if matches!(&**f, Failure::ConnectionRefused(m) if m == "scripted")),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("connection refused: scripted"),
        "{err}"
    );
    assert!(std::error::Error::source(&err).is_some());
    let err = informer_runtime::wait_for_cache_sync(
        &E::R::default(),
        &[&inf],
        Some(Duration::from_millis(50)),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Timeout {
                last_failure: Some(_),
                ..
            }
        ),
        "{err:?}"
    );
    inf.shutdown().await;
}

async fn failures_reach_the_hook_and_back_off<E: Env>() {
    let (fake, _tx) = scripted(vec![obj("a", 5)]);
    let fake = fake.fail_lists(3);
    let seen: Arc<Mutex<Vec<Failure>>> = Arc::default();
    let s = seen.clone();
    let inf = builder::<E>(fake)
        .on_watch_error(move |f| s.lock().unwrap().push(f.failure().clone()))
        .build()
        .unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(inf.store().len(), 1);
    let m = inf.metrics();
    assert_eq!(seen.lock().unwrap().len(), 3);
    assert!(matches!(
        seen.lock().unwrap()[0],
        Failure::ConnectionRefused(_)
    ));
    assert_eq!(m.watch_errors, 3);
    assert!(m.backoffs >= 1, "{m:?}");
    assert_eq!(m.lists, 4, "{m:?}");
    assert_eq!(m.relists, 3, "{m:?}");
    inf.shutdown().await;
}

async fn event_stream_pulls_and_dropping_it_removes_the_handler<E: Env>() {
    let (fake, tx) = scripted(vec![obj("a", 5), obj("b", 6)]);
    let inf = builder::<E>(fake).build().unwrap();
    let mut stream = inf.event_stream().unwrap();
    let id = stream.id();
    inf.start().unwrap();
    let first = stream.next().await.unwrap();
    assert!(matches!(
        first,
        Notification::Add {
            in_initial_list: true,
            ..
        }
    ));
    // Not pulled yet: the second one waits in the informer.
    eventually::<E>("one pending", || inf.pending(id) == 1).await;
    assert!(!stream.has_synced());
    let _second = stream.next().await.unwrap();
    // Pulling again reports the second one done.
    tx.send(WatchEvent::Added(obj("c", 7))).await.unwrap();
    let third = stream.next().await.unwrap();
    assert!(
        matches!(third, Notification::Add { in_initial_list: false, ref obj } if obj.name() == "c")
    );
    assert!(stream.has_synced());
    drop(stream);
    tx.send(WatchEvent::Added(obj("d", 8))).await.unwrap();
    eventually::<E>("d cached", || inf.store().len() == 4).await;
    assert_eq!(inf.pending(id), 0, "a dropped stream's handler is gone");
    inf.shutdown().await;
}

async fn watch_events_reach_handlers_and_the_store<E: Env>() {
    let (fake, tx) = scripted(vec![obj("a", 5)]);
    let inf = builder::<E>(fake).build().unwrap();
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
    let reg = inf
        .add_handler(
            HandlerFns::new()
                .on_add(move |o: Arc<DynamicObject>, i| {
                    l1.lock().unwrap().push(format!("add {} {i}", o.name()))
                })
                .on_update(move |o: Arc<DynamicObject>, n: Arc<DynamicObject>| {
                    l2.lock().unwrap().push(format!(
                        "update {} {}->{}",
                        n.name(),
                        o.resource_version().unwrap(),
                        n.resource_version().unwrap()
                    ))
                })
                .on_delete(move |d| {
                    l3.lock().unwrap().push(format!(
                        "delete {} {}",
                        d.object().name(),
                        d.is_tombstone()
                    ))
                }),
        )
        .unwrap();
    inf.start().unwrap();
    reg.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    tx.send(WatchEvent::Added(obj("b", 11))).await.unwrap();
    tx.send(WatchEvent::Modified(obj("a", 12))).await.unwrap();
    tx.send(WatchEvent::Deleted(obj("b", 13))).await.unwrap();
    eventually::<E>("all delivered", || log.lock().unwrap().len() == 4).await;
    assert_eq!(
        *log.lock().unwrap(),
        [
            "add a true",
            "add b false",
            "update a 5->12",
            "delete b false"
        ]
    );
    assert_eq!(inf.last_sync_resource_version(), "13");
    assert_eq!(inf.store().keys().len(), 1);
    assert_eq!(inf.metrics().events_applied, 4);
    assert_eq!(reg.delivered(), 4);
    assert!(reg.remove());
    inf.shutdown().await;
}

/// A handler's end takes its notifications from the core in batches (one locked step each):
/// a handler removed while it runs one of a batch's notifications starts none of the rest, and
/// a handler's sync turns true only once it has finished every initial add (the batch holding
/// the last one done), not when the batch is taken.
async fn a_handler_removed_mid_batch_starts_nothing_more_and_sync_waits_for_the_last_add<E: Env>() {
    const N: usize = 1000;
    const STOP_AT: usize = 10;
    let items = (0..N)
        .map(|i| obj(&format!("o{i}"), i as u64 + 1))
        .collect();
    let (fake, _tx) = scripted(items);
    let inf = builder::<E>(fake).build().unwrap();
    let (at_stop_tx, at_stop_rx) = std::sync::mpsc::channel::<()>();
    let (go_on_tx, go_on_rx) = std::sync::mpsc::channel::<()>();
    let go_on_rx = Mutex::new(go_on_rx);
    let removed = Arc::new(AtomicUsize::new(0));
    let seen = removed.clone();
    let reg = inf
        .add_handler(HandlerFns::new().on_add(move |_o: Arc<DynamicObject>, _| {
            if seen.fetch_add(1, Ordering::SeqCst) + 1 == STOP_AT {
                // Held here, mid-batch, until the test has removed this handler.
                at_stop_tx.send(()).unwrap();
                go_on_rx.lock().unwrap().recv().unwrap();
            }
        }))
        .unwrap();
    let counted = Arc::new(AtomicUsize::new(0));
    let c = counted.clone();
    let counting = inf
        .add_handler(HandlerFns::new().on_add(move |_o: Arc<DynamicObject>, _| {
            c.fetch_add(1, Ordering::SeqCst);
        }))
        .unwrap();
    inf.start().unwrap();
    counting
        .wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(counted.load(Ordering::SeqCst), N, "synced before every add");
    eventually::<E>("the handler held at an add", || {
        at_stop_rx.try_recv().is_ok()
    })
    .await;
    assert!(reg.remove());
    go_on_tx.send(()).unwrap();
    // Shutdown waits for every handler worker to exit: the removed one has started what it
    // was going to start by then.
    inf.shutdown().await;
    assert_eq!(
        removed.load(Ordering::SeqCst),
        STOP_AT,
        "started after its removal"
    );
    assert_eq!(reg.delivered(), STOP_AT as u64);
}

#[test]
fn tokio_informer_built_outside_a_runtime_is_an_error() {
    let (fake, _tx) = scripted(vec![]);
    let r = InformerBuilder::<DynamicObject, informer_tokio::Tokio>::from_transport(
        informer_tokio::Tokio::default(),
        Arc::new(fake),
        "fake",
    )
    .build();
    assert!(matches!(r, Err(Error::Spawn(_))), "{r:?}");
}

async fn dropping_the_last_informer_handle_stops_it<E: Env>() {
    let (fake, tx) = scripted(vec![obj("a", 5)]);
    let inf = builder::<E>(fake).build().unwrap();
    let reg = inf.add_handler(HandlerFns::new()).unwrap();
    inf.start().unwrap();
    reg.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    eventually::<E>("watching", || inf.metrics().watches == 1).await;
    let store = inf.store();
    let clone = inf.clone();
    drop(inf);
    E::R::default().sleep(Duration::from_millis(20)).await;
    assert!(!clone.is_stopped(), "a clone keeps it running");
    assert!(!tx.is_closed());
    drop(clone);
    // Stopped: the watch was abandoned (its stream dropped).
    eventually::<E>("watch abandoned", || tx.is_closed()).await;
    assert_eq!(store.len(), 1, "the store stays readable");
}

#[derive(Debug, serde::Deserialize, serde::Serialize)]
struct Typed {
    metadata: informer_core::object::ObjectMeta,
}

informer_runtime::impl_object!(Typed);
impl informer_runtime::SnapshotCodec for Typed {}

#[test]
fn factory_shares_one_informer_per_resource_namespace_and_selectors() {
    use informer_runtime::{InformerOptions, Resource, SharedInformerFactory};
    smol::block_on(async {
        // Nothing is started: no request reaches this address.
        let client =
            informer_smol::client(informer_runtime::Config::new("https://127.0.0.1:9")).unwrap();
        let f = informer_smol::SharedInformerFactory::new(client).with_namespace("team-a");
        let _: &SharedInformerFactory<_, _> = &f;
        let a = f.informer::<DynamicObject>(Resource::PODS).unwrap();
        let b = f.informer::<DynamicObject>(Resource::PODS).unwrap();
        a.add_index(
            "x",
            informer_runtime::index_fn(|_: &DynamicObject| Default::default()),
        )
        .unwrap();
        assert!(
            b.store().list_index_values("x").is_ok(),
            "same informer: b sees a's index"
        );
        assert_eq!(a.name(), "pods@team-a");
        let other = f
            .informer_with::<DynamicObject>(
                Resource::PODS,
                InformerOptions::new().label_selector("app=web"),
                |b| b,
            )
            .unwrap();
        assert!(
            other.store().list_index_values("x").is_err(),
            "another selector: another informer"
        );
        assert!(matches!(
            f.informer::<Typed>(Resource::PODS),
            Err(Error::TypeMismatch { .. })
        ));
        assert!(f.informer::<Typed>(Resource::CONFIGMAPS).is_ok());
        f.shutdown().await;
        assert!(a.is_stopped() && other.is_stopped());
    });
}

/// A transform (user code running inside the driver's step) that panics must not leave a
/// dead driver behind waiters that never return, nor take the executor down: the informer
/// stops, says so, and waiters get `Stopped`.
async fn a_panicking_transform_stops_the_informer_instead_of_hanging_it<E: Env>() {
    let (fake, _tx) = scripted(vec![obj("fine", 1), obj("poison", 2)]);
    let inf = builder::<E>(fake)
        .transform(|o: Arc<DynamicObject>| {
            assert!(o.metadata.name() != "poison", "transform refuses poison");
            o
        })
        .build()
        .unwrap();
    inf.start().unwrap();
    assert!(matches!(
        inf.wait_for_sync(Some(Duration::from_secs(10))).await,
        Err(Error::Stopped { .. })
    ));
    eventually::<E>("informer stopped", || inf.is_stopped()).await;
    // Readers still answer from what was there.
    let _ = inf.store().len();
    inf.shutdown().await;
}

/// CONFORMANCE 16: a handler that panics does not stop the informer or the other handlers; the
/// panic is reported. Here a handler panics in `on_add`, `on_update` and `on_delete` (on
/// objects named `boom-*`): each panic is counted on its registration and in the informer's
/// metrics (and logged: `tests/tracing.rs` pins the log line), the handler goes on with its
/// very next notification, and the other handler, the cache and the watch are untouched.
///
/// How and why this differs from client-go: there, `utilruntime.HandleCrash` logs the panic
/// and, with `ReallyCrash` true (the default), panics again, so the process exits; only with
/// `ReallyCrash` off does the listener skip the notification and resume after a one-second
/// pause. A library should not decide that a bug in one handler ends the program, so the panic
/// is always caught on the handler's thread and the handler resumes at once.
///
/// Events are fed one at a time, each waited for, so no handler is ever behind and coalescing
/// cannot merge anything: the handlers must hear every change.
async fn conformance_16_a_panicking_handler_stops_neither_the_informer_nor_the_others<E: Env>() {
    let (fake, tx) = scripted(vec![obj("boom-0", 5), obj("a", 6)]);
    let inf = builder::<E>(fake).build().unwrap();
    let survived: Arc<Mutex<Vec<String>>> = Arc::default();
    let (s1, s2, s3) = (survived.clone(), survived.clone(), survived.clone());
    let bomb = inf
        .add_handler(
            HandlerFns::new()
                .on_add(move |o: Arc<DynamicObject>, _| {
                    assert!(!o.name().starts_with("boom"), "add {}", o.name());
                    s1.lock().unwrap().push(format!("add {}", o.name()));
                })
                .on_update(move |_, n: Arc<DynamicObject>| {
                    assert!(!n.name().starts_with("boom"), "update {}", n.name());
                    s2.lock().unwrap().push(format!("update {}", n.name()));
                })
                .on_delete(move |d| {
                    let name = d.object().name().to_string();
                    if name.starts_with("boom") {
                        // Not a string: the report must cope with any payload.
                        std::panic::panic_any(16_u32);
                    }
                    s3.lock().unwrap().push(format!("delete {name}"));
                }),
        )
        .unwrap();
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
    let calm = inf
        .add_handler(
            HandlerFns::new()
                .on_add(move |o: Arc<DynamicObject>, _| {
                    l1.lock().unwrap().push(format!("add {}", o.name()))
                })
                .on_update(move |_, n: Arc<DynamicObject>| {
                    l2.lock().unwrap().push(format!("update {}", n.name()))
                })
                .on_delete(move |d| {
                    l3.lock()
                        .unwrap()
                        .push(format!("delete {}", d.object().name()))
                }),
        )
        .unwrap();
    inf.start().unwrap();
    // The initial add of boom-0 panicked; it still counts as handled, so the handler syncs.
    bomb.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    calm.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(bomb.panics(), 1);
    let events = [
        WatchEvent::Modified(obj("boom-0", 7)),
        WatchEvent::Added(obj("b", 8)),
        WatchEvent::Deleted(obj("boom-0", 9)),
        WatchEvent::Modified(obj("a", 10)),
        WatchEvent::Added(obj("boom-1", 11)),
        WatchEvent::Deleted(obj("b", 12)),
    ];
    for (i, e) in events.into_iter().enumerate() {
        tx.send(e).await.unwrap();
        let n = 3 + i as u64;
        eventually::<E>("both handlers took the event", || {
            bomb.delivered() == n && calm.delivered() == n
        })
        .await;
    }
    assert_eq!(
        *log.lock().unwrap(),
        [
            "add boom-0",
            "add a",
            "update boom-0",
            "add b",
            "delete boom-0",
            "update a",
            "add boom-1",
            "delete b"
        ],
        "the calm handler heard everything"
    );
    assert_eq!(
        *survived.lock().unwrap(),
        ["add a", "add b", "update a", "delete b"],
        "the panicking handler went on after each panic"
    );
    assert_eq!(bomb.panics(), 4, "add, update, delete and add again");
    assert_eq!(calm.panics(), 0);
    assert_eq!(inf.metrics().handler_panics, 4);
    // The informer never noticed: still running, same watch, cache up to date.
    assert!(!inf.is_stopped());
    let m = inf.metrics();
    assert_eq!((m.lists, m.watches, m.watch_errors), (1, 1, 0), "{m:?}");
    let mut keys: Vec<String> = inf.store().keys().iter().map(|k| k.to_string()).collect();
    keys.sort();
    assert_eq!(keys, ["ns/a", "ns/boom-1"]);
    assert_eq!(inf.last_sync_resource_version(), "12");
    assert!(bomb.has_synced());
    inf.shutdown().await;
}

fn labelled(ns: &str, name: &str, app: &str, tier: &str) -> Arc<DynamicObject> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "1",
                         "labels": {"app": app, "tier": tier}}
        }))
        .unwrap(),
    )
}

/// `Store::select`/`select_in` answer a label selector from the cache, with the label index
/// registered by `label_index` or by scanning, alike; watch events move objects in and out.
async fn store_answers_label_selectors_with_and_without_a_label_index<E: Env>() {
    let items = vec![
        labelled("a", "web-1", "web", "front"),
        labelled("a", "db-1", "db", "back"),
        labelled("b", "web-2", "web", "back"),
        labelled("b", "api-1", "api", "front"),
    ];
    for with_index in [true, false] {
        let (fake, tx) = scripted(items.clone());
        let mut b = builder::<E>(fake);
        if with_index {
            b = b.label_index("app");
        }
        let inf = b.build().unwrap();
        inf.start().unwrap();
        inf.wait_for_sync(Some(Duration::from_secs(10)))
            .await
            .unwrap();
        let store = inf.store();
        let names = |v: Vec<Arc<DynamicObject>>| {
            let mut n: Vec<String> = v.iter().map(|o| o.name().to_string()).collect();
            n.sort();
            n
        };
        let sel: informer_runtime::Selector = "app in (web,api),tier!=back".parse().unwrap();
        assert_eq!(names(store.select(&sel)), ["api-1", "web-1"]);
        assert_eq!(names(store.select_in("b", &sel)), ["api-1"]);
        let web: informer_runtime::Selector = "app=web".parse().unwrap();
        assert_eq!(names(store.select(&web)), ["web-1", "web-2"]);
        if with_index {
            let idx = informer_runtime::label_index_name("app");
            assert_eq!(store.by_index(&idx, "db").unwrap().len(), 1);
        }
        tx.send(WatchEvent::Modified(labelled("b", "web-2", "api", "back")))
            .await
            .unwrap();
        eventually::<E>("moved out of app=web", || store.select(&web).len() == 1).await;
        assert!(
            "app in (web".parse::<informer_runtime::Selector>().is_err(),
            "a broken selector is a typed error"
        );
        inf.shutdown().await;
    }
}

/// With the `metrics` feature, the counters reach the `metrics` facade under the informer's
/// name (and each handler's id), for whatever exporter the application installed.
#[cfg(feature = "metrics")]
mod metrics_export {
    use super::*;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    #[test]
    fn counters_and_handler_gauges_reach_the_installed_recorder() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::set_global_recorder(recorder).unwrap();
        smol::block_on(async {
            let (fake, tx) = scripted(vec![obj("a", 5)]);
            let fake = fake.fail_lists(1);
            let inf = builder::<support::SmolEnv>(fake).build().unwrap();
            let reg = inf.add_handler(HandlerFns::new()).unwrap();
            inf.start().unwrap();
            reg.wait_for_sync(Some(Duration::from_secs(10)))
                .await
                .unwrap();
            tx.send(WatchEvent::Added(obj("b", 11))).await.unwrap();
            eventually::<support::SmolEnv>("delivered", || reg.delivered() == 2).await;
            // One snapshot: the debugging recorder reports counters as deltas since the last.
            let snapshot = snapshotter.snapshot().into_vec();
            let value = |name: &str, handler: bool| {
                snapshot
                    .iter()
                    .find(|(key, ..)| {
                        let k = key.key();
                        k.name() == name
                            && k.labels()
                                .any(|l| l.key() == "informer" && l.value() == "fake")
                            && (!handler || k.labels().any(|l| l.key() == "handler"))
                    })
                    .map(|(.., v)| v)
            };
            let counter = |name: &str, handler: bool| match value(name, handler) {
                Some(DebugValue::Counter(n)) => Some(*n),
                _ => None,
            };
            assert_eq!(counter("informer_events_applied_total", false), Some(2));
            assert_eq!(counter("informer_lists_total", false), Some(2));
            assert_eq!(
                counter("informer_watch_errors_total", false),
                Some(1),
                "by kind: connection_refused"
            );
            assert_eq!(counter("informer_handler_delivered_total", true), Some(2));
            assert!(matches!(
                value("informer_handler_pending", true),
                Some(DebugValue::Gauge(_))
            ));
            assert!(
                matches!(
                    value("informer_last_sync_resource_version", false),
                    Some(DebugValue::Gauge(v)) if v.into_inner() == 11.0
                ),
                "the resourceVersion readers see, as a number"
            );
            assert!(
                matches!(
                    value("informer_store_objects", false),
                    Some(DebugValue::Gauge(v)) if v.into_inner() == 2.0
                ),
                "the objects readers see"
            );
            // The handler's latency, from the event's arrival to its handler done: recorded
            // right after the delivered count moves.
            let t0 = Instant::now();
            let mut snapshot = snapshot;
            loop {
                let latencies = snapshot.iter().find_map(|(key, .., v)| {
                    let k = key.key();
                    let ours = k.name() == "informer_handler_latency_seconds"
                        && k.labels()
                            .any(|l| l.key() == "informer" && l.value() == "fake")
                        && k.labels().any(|l| l.key() == "handler" && l.value() == "0");
                    match v {
                        DebugValue::Histogram(values) if ours => Some(values.len()),
                        _ => None,
                    }
                });
                assert!(latencies.is_some(), "the histogram is registered");
                if latencies > Some(0) {
                    break;
                }
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "no latency recorded"
                );
                std::thread::sleep(Duration::from_millis(5));
                snapshot = snapshotter.snapshot().into_vec();
            }
            inf.shutdown().await;
        });
    }
}

/// Types know their resource: `builder(&client)` takes it from the type, and a type tied to
/// one kind pointed at a resource of another is a typed error at build, not an informer that
/// caches empty objects.
#[test]
fn typed_informers_know_their_resource_and_refuse_another() {
    use informer_runtime::{Informer, Resource};
    use k8s_openapi::api::core::v1::{ConfigMap, Pod};
    type K8s<T> = informer_http::K8s<T>;
    smol::block_on(async {
        // Nothing listens there: building does not connect.
        let client =
            informer_smol::client(informer_http::Config::new("http://127.0.0.1:9")).unwrap();
        let pods = Informer::<K8s<Pod>, informer_smol::Smol>::builder(&client)
            .build()
            .unwrap();
        assert_eq!(pods.name(), "pods");
        let err =
            Informer::<K8s<Pod>, informer_smol::Smol>::builder_for(&client, Resource::CONFIGMAPS)
                .build()
                .unwrap_err();
        assert!(
            matches!(&err, Error::KindMismatch { resource_kind, type_kind: "Pod", .. } if resource_kind == "ConfigMap"),
            "{err:?}"
        );
        assert!(err.to_string().contains("Pod"), "{err}");
        // The explicit form still works where the kinds agree, and for DynamicObject anywhere.
        Informer::<K8s<ConfigMap>, informer_smol::Smol>::builder_for(&client, Resource::CONFIGMAPS)
            .build()
            .unwrap();
        Informer::<DynamicObject, informer_smol::Smol>::builder_for(&client, Resource::PODS)
            .build()
            .unwrap();
    });
}

/// `transform_mut` edits objects in place: the informer holds the only reference to what the
/// transport decoded, so stripping a field costs no deep clone.
async fn transform_mut_edits_in_place_without_cloning<E: Env>() {
    use std::sync::atomic::AtomicUsize as Clones;
    static CLONES: Clones = Clones::new(0);
    #[derive(Debug, serde::Deserialize)]
    struct Counted(DynamicObject);
    impl Clone for Counted {
        fn clone(&self) -> Self {
            CLONES.fetch_add(1, Ordering::SeqCst);
            Counted(self.0.clone())
        }
    }
    informer_runtime::impl_object!(Counted, 0);
    let make = |name: &str| {
        let mut o = (*obj(name, 5)).clone();
        o.metadata.edit(|m| m.labels.insert("strip", "me"));
        Arc::new(Counted(o))
    };
    let before = CLONES.load(Ordering::SeqCst);
    let templates = [make("a"), make("b")];
    // Fresh objects for each list, as a decoder hands them out; watches never answer.
    let transport = FakeTransport::new().list_with(move |_| {
        page(
            templates
                .iter()
                .map(|o| Arc::new(Counted(o.0.clone())))
                .collect(),
            "10",
        )
    });
    let inf = InformerBuilder::<Counted, E::R>::from_transport(
        E::R::default(),
        Arc::new(transport),
        "counted",
    )
    .transform_mut(|o: &mut Counted| {
        o.0.metadata.edit(|m| m.labels.remove("strip"));
    })
    .build()
    .unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    let a = inf.store().get("ns/a").unwrap();
    assert_eq!(a.0.label("strip"), None, "edited");
    assert_eq!(CLONES.load(Ordering::SeqCst), before, "and never cloned");
    inf.shutdown().await;
}
