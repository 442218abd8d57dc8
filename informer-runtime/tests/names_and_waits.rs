//! Issue 39 (client-go 1.33–1.36) at the runtime level, on tokio and on smol: informer names
//! on errors and the watch-error hook, `wait_for_resource_version` (read-your-writes),
//! `add_handler` on a stopped informer (CONFORMANCE 31) and foreign handler ids
//! (CONFORMANCE 32).

mod support;
use support::Env;
use support::fake_transport::{FakeTransport, WatchSender};

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informer_core::protocol::WatchEvent;
use informer_runtime::{
    BackoffConfig, DynamicObject, Error, HandlerFns, Informer, InformerBuilder, Runtime, WatchError,
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

type Sender = WatchSender<DynamicObject>;

on_both_runtimes!(
    conformance_31_add_handler_on_a_stopped_informer_is_an_error,
    conformance_32_a_foreign_handler_id_is_refused_and_nothing_is_removed,
    the_name_is_derived_or_set_and_every_error_says_which_informer,
    wait_for_resource_version_resolves_when_readers_see_it,
    wait_for_resource_version_times_out_refuses_non_numeric_and_ends_at_stop,
    many_waits_for_many_resource_versions_each_wake_once_reached,
);

/// An informer named `name` whose list answers `items` at resourceVersion 10 and whose first
/// watch streams what is sent through the returned sender.
fn informer<E: Env>(
    name: &str,
    items: Vec<Arc<DynamicObject>>,
    fails: usize,
) -> (Informer<DynamicObject, E::R>, Sender) {
    let (fake, tx) = FakeTransport::new()
        .list_always(items, "10")
        .fail_lists(fails)
        .watch_channel();
    let inf = InformerBuilder::from_transport(E::R::default(), Arc::new(fake), "configmaps")
        .name(name)
        .backoff(BackoffConfig {
            initial: Duration::from_millis(10),
            cap: Duration::from_millis(50),
            ..BackoffConfig::default()
        })
        .build()
        .unwrap();
    (inf, tx)
}

/// A deadline `d` from now (the runtimes' clock is the std clock).
fn soon(d: Duration) -> Instant {
    Instant::now() + d
}

/// CONFORMANCE 31 at the runtime level: after shutdown, adding a handler (or an event stream)
/// is refused with `Error::Stopped` naming the informer; nothing is registered, no thread is
/// started. (client-go refuses too; the old core registered it silently and replayed the
/// cache to a handler that would never hear a live event.)
async fn conformance_31_add_handler_on_a_stopped_informer_is_an_error<E: Env>() {
    let (inf, _tx) = informer::<E>("stopped-cms", vec![obj("a", 5)], 0);
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    inf.shutdown().await;
    let err = inf.add_handler(HandlerFns::new()).unwrap_err();
    assert!(
        matches!(&err, Error::Stopped { informer } if informer == "stopped-cms"),
        "{err:?}"
    );
    assert!(err.to_string().contains("stopped-cms"), "{err}");
    assert!(matches!(inf.event_stream(), Err(Error::Stopped { .. })));
}

/// CONFORMANCE 32 at the runtime level: informer B refuses informer A's handler id with
/// `Error::ForeignHandler` and removes nothing, though both ids have the same number; A's
/// handler still hears A's events and B's hears B's.
async fn conformance_32_a_foreign_handler_id_is_refused_and_nothing_is_removed<E: Env>() {
    let (a, a_tx) = informer::<E>("a", vec![obj("x", 5)], 0);
    let (b, b_tx) = informer::<E>("b", vec![obj("y", 5)], 0);
    let ra = a.add_handler(HandlerFns::new()).unwrap();
    let rb = b.add_handler(HandlerFns::new()).unwrap();
    assert_eq!(ra.id().index(), rb.id().index());
    assert_ne!(ra.id(), rb.id());
    let err = b.remove_handler(ra.id()).unwrap_err();
    assert!(
        matches!(&err, Error::ForeignHandler { informer, handler } if informer == "b" && *handler == ra.id()),
        "{err:?}"
    );
    assert!(err.to_string().contains("nothing removed"), "{err}");
    a.start().unwrap();
    b.start().unwrap();
    for (inf, reg, tx) in [(&a, &ra, &a_tx), (&b, &rb, &b_tx)] {
        reg.wait_for_sync(Some(Duration::from_secs(10)))
            .await
            .unwrap();
        tx.send(WatchEvent::Added(obj("z", 11))).await.unwrap();
        support::eventually::<E>(Duration::from_secs(10), || reg.delivered() == 2).await;
        assert_eq!(
            reg.delivered(),
            2,
            "{}'s handler still hears it",
            inf.name()
        );
    }
    assert!(a.remove_handler(ra.id()).unwrap());
    assert!(!a.remove_handler(ra.id()).unwrap());
    assert!(rb.remove());
    a.shutdown().await;
    b.shutdown().await;
}

/// The name: derived from resource, namespace and selectors, or set; on every error the
/// informer surfaces (the watch-error hook's `WatchError`, a sync timeout, a stop).
async fn the_name_is_derived_or_set_and_every_error_says_which_informer<E: Env>() {
    let fake: FakeTransport<DynamicObject> = FakeTransport::new();
    let derived = InformerBuilder::from_transport(E::R::default(), Arc::new(fake), "pods")
        .namespace("ns-a")
        .label_selector("app=x")
        .build()
        .unwrap();
    assert_eq!(derived.name(), "pods@ns-a{app=x}");
    assert!(format!("{derived:?}").contains("pods@ns-a{app=x}"));

    let (fake, _tx) = FakeTransport::new()
        .list_always(vec![obj("a", 5)], "10")
        .fail_lists(usize::MAX)
        .watch_channel();
    let seen: Arc<Mutex<Vec<WatchError>>> = Arc::default();
    let s = seen.clone();
    let named = InformerBuilder::from_transport(E::R::default(), Arc::new(fake), "configmaps")
        .name("team-a/configmaps")
        .on_watch_error(move |e| s.lock().unwrap().push(e.clone()))
        .build()
        .unwrap();
    assert_eq!(named.name(), "team-a/configmaps");
    named.start().unwrap();
    let err = named
        .wait_for_sync(Some(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Timeout { informer: Some(n), last_failure: Some(_) } if n == "team-a/configmaps"),
        "{err:?}"
    );
    assert!(err.to_string().contains("team-a/configmaps"), "{err}");
    {
        let seen = seen.lock().unwrap();
        let first = seen.first().expect("the hook saw the failures");
        assert_eq!(first.informer(), "team-a/configmaps");
        assert_eq!(first.failure().kind(), "connection_refused");
        assert!(
            first
                .to_string()
                .starts_with("informer team-a/configmaps: "),
            "{first}"
        );
        assert!(std::error::Error::source(first).is_some());
    }
    named.shutdown().await;
    let err = named.wait_for_sync(None).await.unwrap_err();
    assert!(err.to_string().contains("team-a/configmaps"), "{err}");
    derived.shutdown().await;
}

/// Waits resolve once the store readers see holds the resourceVersion or a newer one: at once
/// when it does already, else when the step that reaches it (an event, a bookmark) is
/// published, and the store then shows the change. Compared as numbers: "9" < "10".
async fn wait_for_resource_version_resolves_when_readers_see_it<E: Env>() {
    let (inf, tx) = informer::<E>("rv", vec![obj("a", 5)], 0);
    let store = inf.store();
    let waiting = {
        let store = store.clone();
        async move {
            store
                .wait_for_resource_version("12", soon(Duration::from_secs(10)))
                .await
        }
    };
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(inf.last_sync_resource_version(), "10");
    // "9" is older than "10" as a number (not as a string).
    inf.wait_for_resource_version("9", soon(Duration::ZERO))
        .await
        .unwrap();
    inf.wait_for_resource_version("10", soon(Duration::ZERO))
        .await
        .unwrap();
    let sender = async {
        E::R::default().sleep(Duration::from_millis(20)).await;
        tx.send(WatchEvent::Added(obj("b", 11))).await.unwrap();
        E::R::default().sleep(Duration::from_millis(20)).await;
        tx.send(WatchEvent::Added(obj("c", 12))).await.unwrap();
    };
    let (waited, ()) = futures_util::future::join(waiting, sender).await;
    waited.unwrap();
    assert!(
        store.get("ns/c").is_some(),
        "readers see the change waited for"
    );
    assert_eq!(store.last_sync_resource_version(), "12");
    // A bookmark moves the resourceVersion too.
    let bookmark = async {
        E::R::default().sleep(Duration::from_millis(20)).await;
        tx.send(WatchEvent::Bookmark {
            resource_version: "40".into(),
            initial_events_end: false,
        })
        .await
        .unwrap();
    };
    let (waited, ()) = futures_util::future::join(
        inf.wait_for_resource_version("40", soon(Duration::from_secs(10))),
        bookmark,
    )
    .await;
    waited.unwrap();
    assert_eq!(inf.last_sync_resource_version(), "40");
    inf.shutdown().await;
}

/// A wait that is not satisfied by the deadline is a typed timeout naming the informer, the
/// resourceVersion waited for and the one seen; a resourceVersion that is not a number is a
/// typed error; a wait in progress when the informer stops ends with `Error::Stopped`.
async fn wait_for_resource_version_times_out_refuses_non_numeric_and_ends_at_stop<E: Env>() {
    let (inf, _tx) = informer::<E>("rv-errors", vec![obj("a", 5)], 0);
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    let t0 = Instant::now();
    let err = inf
        .wait_for_resource_version("11", soon(Duration::from_millis(100)))
        .await
        .unwrap_err();
    assert!(t0.elapsed() >= Duration::from_millis(90));
    assert!(
        matches!(&err, Error::ResourceVersionTimeout { informer, wanted, seen } if informer == "rv-errors" && wanted == "11" && seen == "10"),
        "{err:?}"
    );
    assert!(err.to_string().contains("rv-errors"), "{err}");
    for bad in ["", "abc", "-1", "1.5"] {
        let err = inf
            .wait_for_resource_version(bad, soon(Duration::from_secs(1)))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::ResourceVersionNotNumeric { resource_version, .. } if resource_version == bad),
            "{bad:?}: {err:?}"
        );
    }
    let stopper = async {
        E::R::default().sleep(Duration::from_millis(30)).await;
        inf.shutdown().await;
    };
    let (waited, ()) = futures_util::future::join(
        inf.wait_for_resource_version("1000", soon(Duration::from_secs(10))),
        stopper,
    )
    .await;
    let err = waited.unwrap_err();
    assert!(
        matches!(&err, Error::Stopped { informer } if informer == "rv-errors"),
        "{err:?}"
    );
}

/// Many waits on many resourceVersions: each resolves once its resourceVersion is published,
/// none before, and the waits still pending do not hold up the informer.
async fn many_waits_for_many_resource_versions_each_wake_once_reached<E: Env>() {
    let (inf, tx) = informer::<E>("rv-many", vec![], 0);
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    let done: Arc<Mutex<Vec<u64>>> = Arc::default();
    let waits = (0..200u64).map(|i| {
        let inf = inf.clone();
        let done = done.clone();
        let rv = 11 + i % 20;
        async move {
            inf.wait_for_resource_version(&rv.to_string(), soon(Duration::from_secs(10)))
                .await
                .unwrap();
            let seen: u64 = inf.last_sync_resource_version().parse().unwrap();
            assert!(seen >= rv, "woken at {seen} for {rv}");
            done.lock().unwrap().push(rv);
        }
    });
    let sender = async {
        for rv in 11..=30u64 {
            E::R::default().sleep(Duration::from_millis(2)).await;
            tx.send(WatchEvent::Added(obj(&format!("o{rv}"), rv)))
                .await
                .unwrap();
        }
    };
    futures_util::future::join(futures_util::future::join_all(waits), sender).await;
    assert_eq!(done.lock().unwrap().len(), 200);
    inf.shutdown().await;
}
