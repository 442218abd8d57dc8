//! Read-your-writes against label-scoped informers (FakeCluster, real time): the next reconcile
//! of a key waits for the informers that will show what its last reconcile wrote, and only
//! for those. A child written without the label an owned informer selects never reaches that
//! informer, and its watch need not pass the write's resourceVersion for a long time (a
//! sharded member's children before the sharder labels them): waiting on it would hold the
//! key for the whole bound. A child written with the label is waited for, and shows in time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informer_testkit::FakeCluster;
use informer_tokio::http::PostParams;
use informer_tokio::{Action, Client, Controller, DynamicObject, Informer, Object, Resource};
use serde_json::json;

const NS: &str = "default";
const BOUND: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_no_scoped_informer_shows_is_not_waited_for_and_one_it_shows_is() {
    let fake = FakeCluster::new();
    let client: Client = fake.client().unwrap();
    let configmaps = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some(NS));
    // One parent at a time: a labelled child's event would carry the scoped informer past the
    // unlabelled child's resourceVersion as well.
    let create_parent = |name: &'static str| {
        let configmaps = configmaps.clone();
        async move {
            let parent: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": NS, "labels": {"role": "parent"}},
            }))
            .unwrap();
            configmaps
                .create(&parent, &PostParams::default())
                .await
                .unwrap();
        }
    };
    create_parent("unlabelled").await;
    let parents = Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS)
        .namespace(NS)
        .label_selector("role=parent")
        .build()
        .unwrap();
    let children = Informer::<DynamicObject>::builder_for(&client, Resource::SECRETS)
        .namespace(NS)
        .label_selector("scope=mine")
        .build()
        .unwrap();
    let controller = Controller::new(&client, parents)
        .owns(children.clone())
        .read_your_writes(BOUND);
    let stats = controller.stats_handle();
    // (parent, when its reconcile started), in order.
    let starts: Arc<Mutex<Vec<(String, Instant)>>> = Arc::default();
    let done = Arc::new(AtomicUsize::new(0));
    let (starts2, done2) = (starts.clone(), done.clone());
    let run = tokio::spawn(controller.run(move |parent: Arc<DynamicObject>, ctx| {
        let (starts, done) = (starts2.clone(), done2.clone());
        async move {
            let name = parent.name().to_string();
            let first = {
                let mut s = starts.lock().unwrap();
                let first = !s.iter().any(|(n, _)| *n == name);
                s.push((name.clone(), Instant::now()));
                first
            };
            if !first {
                done.fetch_add(1, Ordering::AcqRel);
                return Ok::<_, String>(Action::Done);
            }
            let labels = if name == "labelled" {
                json!({"scope": "mine"})
            } else {
                json!({})
            };
            let uid = parent.uid().unwrap_or_default();
            let child: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {
                    "name": format!("{name}-child"), "namespace": NS, "labels": labels,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": name,
                        "uid": uid, "controller": true}],
                },
            }))
            .unwrap();
            ctx.client()
                .api::<DynamicObject>(Resource::SECRETS, Some(NS))
                .create(&child, &PostParams::default())
                .await
                .map_err(|e| e.to_string())?;
            Ok(Action::RequeueAfter(Duration::from_millis(50)))
        }
    }));
    for (n, next) in [(1, Some("labelled")), (2, None)] {
        let t0 = Instant::now();
        while done.load(Ordering::Acquire) < n {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "not reconciled twice: {:?}",
                starts.lock().unwrap()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if let Some(name) = next {
            create_parent(name).await;
        }
    }
    run.abort();
    let s = stats.get();
    assert_eq!(s.write_waits_timed_out, 0, "{s:?}");
    assert!(s.waited_for_writes >= 2, "{s:?}");
    // Neither second reconcile was held for the bound.
    let starts = starts.lock().unwrap().clone();
    for name in ["unlabelled", "labelled"] {
        let at: Vec<Instant> = starts
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .collect();
        assert!(at.len() >= 2, "{name}: {starts:?}");
        let gap = at[1] - at[0];
        assert!(
            gap < BOUND,
            "{name}: the second reconcile came {gap:?} after the first"
        );
    }
    // The labelled child did reach the scoped informer; the other did not.
    let store = children.store();
    assert!(store.get("default/labelled-child").is_some());
    assert!(store.get("default/unlabelled-child").is_none());
}
