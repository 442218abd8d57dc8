//! Scale: an informer of `CompactObject` Pods against a real kube-apiserver v1.20.2 holding
//! 1,000 realistic Pods (`testcluster::pods`: created as kube-controller-manager does, status
//! written by the kubelet's field manager), then churned (status updates, deletes and
//! recreates). After the sync and after the churn, every cached Pod, read back whole, equals
//! the server's object (from a list made with curl): every field of the compact cache is what
//! the server sent.
//!
//! Cost: about 20 s (cluster start, 2,000 writes through curl batches, the churn, the checks).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use informer_tokio::{
    CompactObject, Config, HandlerFns, Informer, Object, Resource, Store, client,
};
use serde_json::Value;
use testcluster::TestCluster;
use testcluster::pods::{Churn, Workload, churn, write_pods};

/// 1,000 rather than 2,000: the writes (two per Pod, about 300 a second on a loaded 2-core
/// machine) are most of the test's time.
const PODS: usize = 1_000;
const DEADLINE: Duration = Duration::from_secs(90);

/// Every Pod of the server, by `namespace/name`, as it answers a list (with the `apiVersion`
/// and `kind` a list leaves off its items put back, as the informer puts them back).
fn server_pods(cluster: &TestCluster) -> BTreeMap<String, Value> {
    let (code, body) = cluster
        .request("GET", "/api/v1/pods", None)
        .expect("list pods");
    assert_eq!(code, 200, "{}", &body[..body.len().min(300)]);
    let list: Value = serde_json::from_str(&body).expect("a PodList");
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| {
            let mut item = item.clone();
            item["apiVersion"] = "v1".into();
            item["kind"] = "Pod".into();
            let key = format!(
                "{}/{}",
                item["metadata"]["namespace"].as_str().unwrap(),
                item["metadata"]["name"].as_str().unwrap()
            );
            (key, item)
        })
        .collect()
}

/// Waits until the cache holds exactly the server's Pods at their resourceVersions, then
/// checks every field of each. The server's list is taken once writes have stopped.
fn converge(store: &Store<CompactObject>, cluster: &TestCluster, what: &str) -> usize {
    let expected = server_pods(cluster);
    let start = Instant::now();
    loop {
        let cached = store.list();
        let same = cached.len() == expected.len()
            && cached.iter().all(|o| {
                expected
                    .get(&format!("{}/{}", o.namespace().unwrap_or(""), o.name()))
                    .is_some_and(|v| {
                        v["metadata"]["resourceVersion"].as_str() == o.resource_version()
                    })
            });
        if same {
            break;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "{what}: the cache ({} Pods) did not reach the server's {} Pods",
            cached.len(),
            expected.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut compressed = 0;
    for (key, sent) in &expected {
        let obj = store.get(key).expect("cached");
        assert_eq!(
            &serde_json::to_value(&*obj).unwrap(),
            sent,
            "{what}: {key} read back whole"
        );
        let status: Value = obj.field("status").unwrap().unwrap();
        assert_eq!(status, sent["status"], "{what}: {key}");
        compressed += usize::from(obj.is_compressed());
    }
    compressed
}

#[test]
fn a_compact_cache_of_1000_realistic_pods_equals_the_servers_objects() {
    let t0 = Instant::now();
    let cluster = TestCluster::start().expect("start test cluster");
    eprintln!("cluster up: {:?}", t0.elapsed());
    let workload = Workload::new(2042, PODS);
    let written = write_pods(&cluster, &workload, 0..PODS, 8).expect("write Pods");
    assert!(
        written.failed.is_empty(),
        "{:?}",
        &written.failed[..written.failed.len().min(5)]
    );
    assert_eq!(
        written.ok,
        2 * PODS,
        "each Pod created and its status written"
    );

    eprintln!("Pods written: {:?}", t0.elapsed());
    let config = Config::from_kubeconfig_file(&cluster.kubeconfig, None).expect("kubeconfig");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let informer = rt.block_on(async {
        let client = client(config).unwrap();
        let informer = Informer::<CompactObject>::builder_for(&client, Resource::PODS)
            .build()
            .unwrap();
        let handler = informer.add_handler(HandlerFns::new()).unwrap();
        informer.start().unwrap();
        handler.wait_for_sync(Some(DEADLINE)).await.expect("synced");
        informer
    });
    let store = informer.store();
    eprintln!("synced: {:?}", t0.elapsed());
    let compressed = converge(&store, &cluster, "after the sync");
    // Objects decoded while the Pod dictionary was learned stay uncompressed; no more than
    // that many.
    assert!(
        compressed >= PODS - informer_tokio::core::object::compact::LEARN_OBJECTS,
        "{compressed} of {PODS} compressed"
    );

    eprintln!("checked: {:?}", t0.elapsed());
    // Watch events: status updates, and Pods deleted and created anew.
    let rate = Churn {
        status_updates: 200,
        recreates: 20,
        parallel: 8,
    };
    let churned = churn(&cluster, &workload, PODS, rate, Duration::from_secs(2)).expect("churn");
    assert!(
        churned.failed.is_empty(),
        "{:?}",
        &churned.failed[..churned.failed.len().min(5)]
    );
    assert!(churned.ok > 0);
    eprintln!("churned: {:?}", t0.elapsed());
    converge(&store, &cluster, "after the churn");
    eprintln!("checked: {:?}", t0.elapsed());
    rt.block_on(informer.shutdown());
}
