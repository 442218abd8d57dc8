//! FakeCluster on smol: the smol backend's `Client` carries it the same way (the `InProcess`
//! seam), on `SmolClock` (real time: smol has no paused clock, so this test keeps its waits
//! short). An informer syncs, sees a create and a delete, and a watch that drops is resumed.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use informer_smol::http::{DeleteParams, PostParams};
use informer_smol::{Client, DynamicObject, HandlerFns, Informer, Object, Resource};
use informer_testkit::{FakeCluster, Faults, SmolClock};
use serde_json::json;

#[test]
fn an_informer_on_smol_syncs_and_follows_changes_through_dropped_watches() {
    informer_smol::block_on(async {
        let fake = FakeCluster::builder()
            .seed(3)
            .clock(SmolClock::new())
            .faults(Faults::none().drop_watch(1.0))
            .build();
        let client: Client = fake.client().unwrap();
        let setup: Client = fake.unfaulted().client().unwrap();
        let cms = setup.api::<DynamicObject>(Resource::CONFIGMAPS, Some("default"));
        let cm = |name: &str| -> DynamicObject {
            serde_json::from_value(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}),
            )
            .unwrap()
        };
        cms.create(&cm("before"), &PostParams::default())
            .await
            .unwrap();
        let informer = Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS)
            .namespace("default")
            .build()
            .unwrap();
        let seen = Arc::new(Mutex::new(Vec::<String>::new()));
        let s = seen.clone();
        let s2 = seen.clone();
        informer
            .add_handler(
                HandlerFns::new()
                    .on_add(move |o: Arc<DynamicObject>, _| {
                        s.lock().unwrap().push(format!("+{}", o.name()))
                    })
                    .on_delete(move |o: informer_smol::ObjectOrTombstone<DynamicObject>| {
                        s2.lock().unwrap().push(format!("-{}", o.object().name()))
                    }),
            )
            .unwrap();
        informer.start().unwrap();
        informer
            .wait_for_sync(Some(Duration::from_secs(10)))
            .await
            .unwrap();
        cms.create(&cm("after"), &PostParams::default())
            .await
            .unwrap();
        cms.delete("before", &DeleteParams::default())
            .await
            .unwrap();
        let start = std::time::Instant::now();
        loop {
            let got = seen.lock().unwrap().clone();
            if got.contains(&"+after".to_string()) && got.contains(&"-before".to_string()) {
                assert_eq!(got[0], "+before");
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "saw only {got:?}"
            );
            informer_smol::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            fake.trace().iter().any(|t| t.note.starts_with("dropped")),
            "every watch is set to drop"
        );
        informer.shutdown().await;
    })
    .unwrap();
}
