//! The `Controller` against scripted transports (no cluster), on tokio and on smol: informers
//! synced before any reconcile, one key never reconciled twice at once, owned objects mapped to
//! their controller owner, deletions to `on_delete` with their last state, errors backed off,
//! and the shutdown grace. Leadership fencing and read-your-writes need an API server: in
//! `tests/controller.rs`.

mod support;
use support::Env;
use support::fake_transport::{FakeTransport, WatchSender};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informer_core::protocol::WatchEvent;
use informer_runtime::{Action, Controller, DynamicObject, InformerBuilder, Object, Runtime};
use serde_json::json;

on_both_runtimes!(
    reconciles_start_once_every_informer_synced_and_a_key_never_runs_twice_at_once,
    owned_objects_reach_their_controller_owner,
    a_deleted_object_reaches_on_delete_with_its_last_state,
    errors_back_off_per_key_and_requeue_after_comes_back,
    shutdown_lets_reconciles_finish_within_the_grace_then_cancels_them,
);

fn obj(name: &str, rv: u64) -> Arc<DynamicObject> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()}
        }))
        .unwrap(),
    )
}

fn child(
    name: &str,
    owner_kind: &str,
    owner: &str,
    controller: bool,
    rv: u64,
) -> Arc<DynamicObject> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string(),
                "ownerReferences": [{"apiVersion": "example.com/v1", "kind": owner_kind,
                    "name": owner, "uid": format!("uid-{owner}"), "controller": controller}]}
        }))
        .unwrap(),
    )
}

type Controller_<E> = Controller<DynamicObject, <E as Env>::R, <E as Env>::B>;

/// An informer, the sender of its watch's events, and its transport.
type Scripted<E> = (
    informer_runtime::Informer<DynamicObject, <E as Env>::R>,
    WatchSender<DynamicObject>,
    Arc<FakeTransport<DynamicObject>>,
);

/// An informer on a scripted transport listing `items` at 10, then streaming the returned
/// sender's events.
fn informer<E: Env>(items: Vec<Arc<DynamicObject>>, name: &str) -> Scripted<E> {
    let (fake, tx) = FakeTransport::new()
        .list_always(items, "10")
        .watch_channel();
    let fake = Arc::new(fake);
    let inf = InformerBuilder::from_transport(E::R::default(), fake.clone(), name)
        .build()
        .unwrap();
    (inf, tx, fake)
}

fn client<E: Env>() -> informer_http::Client<E::B> {
    // Never written to by these tests: fenced writes and read-your-writes are in controller.rs.
    E::client(informer_http::Config::new("http://127.0.0.1:9"))
}

/// A future resolving when `flag` is set (polled: a test's trigger, not the library's).
async fn when<E: Env>(flag: Arc<AtomicBool>) {
    while !flag.load(Ordering::Acquire) {
        E::R::default().sleep(Duration::from_millis(5)).await;
    }
}

async fn eventually<E: Env>(what: &str, cond: impl FnMut() -> bool) {
    let reached = support::eventually::<E>(Duration::from_secs(20), cond).await;
    assert!(reached, "timed out: {what}");
}

/// No reconcile before the slowest informer synced (here a watched one whose list is held
/// back); then every key reconciled, with up to 4 at once but one key never twice at once,
/// however often it changes meanwhile.
async fn reconciles_start_once_every_informer_synced_and_a_key_never_runs_twice_at_once<E: Env>() {
    let items: Vec<_> = (0..20).map(|i| obj(&format!("o{i}"), 1)).collect();
    let (primary, tx, _) = informer::<E>(items, "primary");
    let (slow, _slow_tx, slow_fake) = informer::<E>(vec![], "slow");
    slow_fake.cut_off(true);
    let slow_synced = {
        let slow = slow.clone();
        move || slow.has_synced()
    };
    let in_flight: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let max_at_once = Arc::new(AtomicUsize::new(0));
    let done: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    let early = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let controller: Controller_<E> = Controller::new(&client::<E>(), primary)
        .watches(slow, |_o: &DynamicObject| Vec::new())
        .concurrency(4)
        .shutdown_on(when::<E>(stop.clone()));
    let (f, m, d, e) = (
        in_flight.clone(),
        max_at_once.clone(),
        done.clone(),
        early.clone(),
    );
    let synced = slow_synced.clone();
    let run = controller.run(move |o: Arc<DynamicObject>, _ctx| {
        let (f, m, d, e) = (f.clone(), m.clone(), d.clone(), e.clone());
        if !synced() {
            e.store(true, Ordering::Release);
        }
        async move {
            let name = o.name().to_string();
            {
                let mut f = f.lock().unwrap();
                assert!(f.insert(name.clone()), "{name} reconciled twice at once");
                m.fetch_max(f.len(), Ordering::AcqRel);
            }
            E::R::default().sleep(Duration::from_millis(15)).await;
            f.lock().unwrap().remove(&name);
            *d.lock().unwrap().entry(name).or_default() += 1;
            Ok::<_, String>(Action::Done)
        }
    });
    let rt = E::R::default();
    let (result_tx, result_rx) = async_channel::bounded(1);
    rt.spawn(Box::pin(async move {
        let _ = result_tx.send(run.await).await;
    }))
    .unwrap();
    rt.sleep(Duration::from_millis(150)).await;
    assert!(
        done.lock().unwrap().is_empty(),
        "nothing before the slow informer synced"
    );
    slow_fake.cut_off(false);
    eventually::<E>("every key reconciled", || done.lock().unwrap().len() == 20).await;
    assert!(slow_synced(), "synced first");
    // One key changed many times while it runs: never concurrently with itself.
    for rv in 11..40 {
        tx.send(WatchEvent::Modified(obj("o3", rv))).await.unwrap();
        rt.sleep(Duration::from_millis(2)).await;
    }
    eventually::<E>("o3 again", || done.lock().unwrap()["o3"] >= 2).await;
    stop.store(true, Ordering::Release);
    result_rx.recv().await.unwrap().unwrap();
    assert!(
        !early.load(Ordering::Acquire),
        "a reconcile started before sync"
    );
    let most = max_at_once.load(Ordering::Acquire);
    assert!((2..=4).contains(&most), "concurrency 4, {most} at once");
}

/// `owns`: a child's change reconciles the object its `controller: true` reference of the
/// controller's kind names; a reference that is not the controller's, or of another kind,
/// reconciles nothing.
async fn owned_objects_reach_their_controller_owner<E: Env>() {
    let (primary, _tx, _) = informer::<E>(vec![obj("parent", 1), obj("other", 1)], "primary");
    let (children, child_tx, _) = informer::<E>(vec![], "children");
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    // `kind` after `owns`: the owner kind is the one the controller has when it runs.
    let controller: Controller_<E> = Controller::new(&client::<E>(), primary)
        .owns(children)
        .kind("Parent")
        .shutdown_on(when::<E>(stop.clone()));
    let s = seen.clone();
    let rt = E::R::default();
    let (result_tx, result_rx) = async_channel::bounded(1);
    let run = controller.run(move |o: Arc<DynamicObject>, _ctx| {
        s.lock().unwrap().push(o.name().to_string());
        async { Ok::<_, String>(Action::Done) }
    });
    rt.spawn(Box::pin(async move {
        let _ = result_tx.send(run.await).await;
    }))
    .unwrap();
    eventually::<E>("initial reconciles", || seen.lock().unwrap().len() == 2).await;
    seen.lock().unwrap().clear();
    child_tx
        .send(WatchEvent::Added(child("c1", "Parent", "parent", true, 11)))
        .await
        .unwrap();
    child_tx
        .send(WatchEvent::Added(child("c2", "Parent", "other", false, 12)))
        .await
        .unwrap();
    child_tx
        .send(WatchEvent::Added(child(
            "c3",
            "Elsewhere",
            "other",
            true,
            13,
        )))
        .await
        .unwrap();
    eventually::<E>("the owner reconciled", || !seen.lock().unwrap().is_empty()).await;
    rt.sleep(Duration::from_millis(100)).await;
    assert_eq!(*seen.lock().unwrap(), ["parent"]);
    stop.store(true, Ordering::Release);
    result_rx.recv().await.unwrap().unwrap();

    // Without any kind, `owns` cannot know its owners: a typed error, not a silent no-op.
    let (primary, _tx, _) = informer::<E>(vec![], "kindless");
    let (children, _ctx, _) = informer::<E>(vec![], "kindless children");
    let kindless: Controller_<E> = Controller::new(&client::<E>(), primary).owns(children);
    let err = kindless
        .run(|_o: Arc<DynamicObject>, _ctx| async { Ok::<_, String>(Action::Done) })
        .await
        .unwrap_err();
    assert!(
        matches!(err, informer_runtime::ControllerError::NoOwnerKind),
        "{err}"
    );
}

/// A deletion reaches `on_delete` once, with the object's last state, and never the
/// reconcile.
async fn a_deleted_object_reaches_on_delete_with_its_last_state<E: Env>() {
    let (primary, tx, _) = informer::<E>(vec![obj("a", 1), obj("b", 2)], "primary");
    let reconciled: Arc<Mutex<Vec<String>>> = Arc::default();
    let cleaned: Arc<Mutex<Vec<(String, String, bool)>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let c = cleaned.clone();
    let controller: Controller_<E> = Controller::new(&client::<E>(), primary)
        .on_delete(move |last: Arc<DynamicObject>, ctx| {
            c.lock().unwrap().push((
                last.name().to_string(),
                last.resource_version().unwrap().to_string(),
                ctx.is_deleted(),
            ));
            async { Ok::<_, String>(Action::Done) }
        })
        .shutdown_on(when::<E>(stop.clone()));
    let r = reconciled.clone();
    let rt = E::R::default();
    let (result_tx, result_rx) = async_channel::bounded(1);
    let run = controller.run(move |o: Arc<DynamicObject>, ctx| {
        assert!(!ctx.is_deleted());
        r.lock().unwrap().push(o.name().to_string());
        async { Ok::<_, String>(Action::Done) }
    });
    rt.spawn(Box::pin(async move {
        let _ = result_tx.send(run.await).await;
    }))
    .unwrap();
    eventually::<E>("initial reconciles", || {
        reconciled.lock().unwrap().len() == 2
    })
    .await;
    tx.send(WatchEvent::Modified(obj("a", 11))).await.unwrap();
    tx.send(WatchEvent::Deleted(obj("a", 12))).await.unwrap();
    eventually::<E>("cleanup", || !cleaned.lock().unwrap().is_empty()).await;
    rt.sleep(Duration::from_millis(100)).await;
    assert_eq!(
        *cleaned.lock().unwrap(),
        [("a".to_string(), "12".to_string(), true)]
    );
    assert!(
        reconciled
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == "a")
            .count()
            <= 2,
        "a deleted object is not reconciled"
    );
    stop.store(true, Ordering::Release);
    result_rx.recv().await.unwrap().unwrap();
}

/// An error requeues the key with per-key backoff (the attempt count grows and resets on
/// success); `RequeueAfter` brings it back.
async fn errors_back_off_per_key_and_requeue_after_comes_back<E: Env>() {
    let (primary, _tx, _) = informer::<E>(vec![obj("a", 1)], "primary");
    let attempts: Arc<Mutex<Vec<u32>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let controller: Controller_<E> =
        Controller::new(&client::<E>(), primary).shutdown_on(when::<E>(stop.clone()));
    let stats = controller.stats_handle();
    let a = attempts.clone();
    let rt = E::R::default();
    let (result_tx, result_rx) = async_channel::bounded(1);
    let run = controller.run(move |_o: Arc<DynamicObject>, ctx| {
        let n = {
            let mut a = a.lock().unwrap();
            a.push(ctx.attempt());
            a.len()
        };
        async move {
            match n {
                1 | 2 => Err("not yet".to_string()),
                3 => Ok(Action::RequeueAfter(Duration::from_millis(30))),
                _ => Ok(Action::Done),
            }
        }
    });
    rt.spawn(Box::pin(async move {
        let _ = result_tx.send(run.await).await;
    }))
    .unwrap();
    eventually::<E>("four reconciles", || attempts.lock().unwrap().len() >= 4).await;
    assert_eq!(attempts.lock().unwrap()[..4], [0, 1, 2, 0]);
    assert_eq!(stats.get().errors, 2);
    stop.store(true, Ordering::Release);
    result_rx.recv().await.unwrap().unwrap();
}

/// At shutdown a reconcile that finishes within the grace finishes; one that does not is
/// cancelled when the grace runs out (counted), and `run` returns.
async fn shutdown_lets_reconciles_finish_within_the_grace_then_cancels_them<E: Env>() {
    let (primary, _tx, _) = informer::<E>(vec![obj("quick", 1), obj("stuck", 1)], "primary");
    let finished: Arc<Mutex<Vec<String>>> = Arc::default();
    let started = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let controller: Controller_<E> = Controller::new(&client::<E>(), primary)
        .concurrency(2)
        .shutdown_grace(Duration::from_millis(300))
        .shutdown_on(when::<E>(stop.clone()));
    let stats = controller.stats_handle();
    let (f, s) = (finished.clone(), started.clone());
    let rt = E::R::default();
    let (result_tx, result_rx) = async_channel::bounded(1);
    let run = controller.run(move |o: Arc<DynamicObject>, _ctx| {
        let f = f.clone();
        s.fetch_add(1, Ordering::AcqRel);
        let name = o.name().to_string();
        async move {
            let d = if name == "quick" { 100 } else { 60_000 };
            E::R::default().sleep(Duration::from_millis(d)).await;
            f.lock().unwrap().push(name);
            Ok::<_, String>(Action::Done)
        }
    });
    rt.spawn(Box::pin(async move {
        let _ = result_tx.send(run.await).await;
    }))
    .unwrap();
    eventually::<E>("both started", || started.load(Ordering::Acquire) == 2).await;
    let t0 = Instant::now();
    stop.store(true, Ordering::Release);
    result_rx.recv().await.unwrap().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "the grace bounds the shutdown"
    );
    assert_eq!(*finished.lock().unwrap(), ["quick"]);
    assert_eq!(stats.get().cancelled, 1);
}
