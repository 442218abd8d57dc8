//! The sharded controller's modes whose selectors follow the table, against FakeCluster:
//!
//! - **server** (Kubernetes 1.36's `shardSelector`, KEP-5866; FakeCluster is the only server
//!   here that can honour it, no 1.36 kube-apiserver builds on this machine): with the feature
//!   on, each member's primary informer lists and watches with its ranges, so it caches only
//!   its share, and follows the table as a member joins; with it off (every server before 1.36
//!   ignores the parameter), each member sees everything, says so and lists without it from
//!   then on, filtering in the client as the filter mode does;
//! - **buckets**: the sharder labels every object with its bucket once; each member watches
//!   the buckets its table gives it (`<ring>/bucket in (…)`), so it caches only its share, and
//!   a join moves buckets by the table, writing no object.
//!
//! Every object ends with exactly one owner and no two reconciles of a key overlap.
//! Real time (the Leases' clock rule needs it): a few seconds each.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informer_testkit::FakeCluster;
use informer_tokio::http::PostParams;
use informer_tokio::{
    Action, Client, Controller, DynamicObject, Informer, Object, Resource, ShardConfig, ShardMode,
    ShardScope, Sharding, Store, member_name, sharding,
};
use serde_json::json;

const NS: &str = "default";
const OBJECTS: usize = 240;

/// One reconcile: who, which key, start and end.
type Log = Arc<Mutex<Vec<(String, String, Instant, Option<Instant>)>>>;

struct Member {
    name: String,
    sharding: Sharding,
    informer: Informer<DynamicObject>,
    store: Store<DynamicObject>,
    stop: Arc<AtomicBool>,
    done: Arc<Mutex<Option<Result<(), String>>>>,
}

impl Member {
    fn start(client: &Client, log: &Log, mode: ShardMode) -> Member {
        let name = member_name("m");
        let config = ShardConfig {
            mode,
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(300),
            ..ShardConfig::new("srv", name.clone())
        };
        let sharding = sharding(
            client,
            NS,
            config,
            Resource::CONFIGMAPS,
            Vec::new(),
            ShardScope::namespace(NS),
        )
        .unwrap();
        let informer = Informer::<DynamicObject>::builder_for(client, Resource::CONFIGMAPS)
            .namespace(NS)
            .build()
            .unwrap();
        let store = informer.store();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let controller = Controller::new(client, informer.clone())
            .concurrency(4)
            .shard(sharding.clone())
            .shutdown_grace(Duration::from_secs(1))
            .shutdown_on(async move {
                while !stop2.load(Ordering::Acquire) {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            });
        let done: Arc<Mutex<Option<Result<(), String>>>> = Arc::default();
        let (done2, log, me) = (done.clone(), log.clone(), name.clone());
        tokio::spawn(async move {
            let r = controller
                .run(move |obj: Arc<DynamicObject>, _ctx| {
                    let i = {
                        let mut l = log.lock().unwrap();
                        l.push((me.clone(), obj.key_ref().to_string(), Instant::now(), None));
                        l.len() - 1
                    };
                    let log = log.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        log.lock().unwrap()[i].3 = Some(Instant::now());
                        Ok::<_, String>(Action::RequeueAfter(Duration::from_millis(800)))
                    }
                })
                .await;
            *done2.lock().unwrap() = Some(r.map_err(|e| e.to_string()));
        });
        Member {
            name,
            sharding,
            informer,
            store,
            stop,
            done,
        }
    }

    /// The cached objects this member owns.
    fn owned(&self) -> usize {
        self.store
            .list()
            .iter()
            .filter(|o| self.sharding.owns(&***o))
            .count()
    }
}

/// Every object owned by exactly one member, by each member's own view, the one the ring over
/// all of `members` names (not a table of fewer members, met on the way); `Err` says why not.
fn converged(fake: &FakeCluster, members: &[&Member]) -> Result<(), String> {
    if let Some(m) = members.iter().find(|m| !m.sharding.is_working()) {
        return Err(format!("{} is not working", m.name));
    }
    let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    let config = members[0].sharding.config();
    let ring = config.ring_over(&names);
    for o in fake.list(&Resource::CONFIGMAPS, Some(NS)) {
        let key = format!("{NS}/{}", o["metadata"]["name"].as_str().unwrap_or(""));
        let owners: Vec<&str> = members
            .iter()
            .filter(|m| m.store.get(&key).is_some_and(|v| m.sharding.owns(&*v)))
            .map(|m| m.name.as_str())
            .collect();
        let uid = o["metadata"]["uid"].as_str().unwrap_or("");
        let named = ring.owner(config.hash_by.hash(uid, NS, None));
        if owners.len() != 1 || named != Some(owners[0]) {
            return Err(format!(
                "{key}: owners {owners:?}, the ring names {named:?}"
            ));
        }
    }
    Ok(())
}

async fn until(what: &str, limit: Duration, mut check: impl FnMut() -> Result<(), String>) {
    let t0 = Instant::now();
    loop {
        match check() {
            Ok(()) => return,
            Err(why) if t0.elapsed() > limit => panic!("timed out: {what} ({why})"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

fn assert_no_overlap(log: &Log) {
    let l = log.lock().unwrap().clone();
    let now = Instant::now();
    let mut by_key: BTreeMap<&str, Vec<_>> = BTreeMap::new();
    for s in &l {
        by_key.entry(&s.1).or_default().push(s);
    }
    for (key, mut spans) in by_key {
        spans.sort_by_key(|s| s.2);
        for w in spans.windows(2) {
            let end = w[0].3.unwrap_or(now);
            assert!(end <= w[1].2, "{key}: {} and {} overlap", w[0].0, w[1].0);
        }
    }
}

/// `honoured`: FakeCluster serves `shardSelector` as a 1.36 server does.
async fn scenario(mode: ShardMode, honoured: bool) {
    let fake = FakeCluster::builder().shard_selectors(honoured).build();
    let client: Client = fake.client().unwrap();
    let api = client.api::<DynamicObject>(Resource::CONFIGMAPS, Some(NS));
    for i in 0..OBJECTS {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("o{i:04}"), "namespace": NS},
        }))
        .unwrap();
        api.create(&obj, &PostParams::default()).await.unwrap();
    }
    let log: Log = Arc::default();
    let (a, b, c) = (
        Member::start(&client, &log, mode),
        Member::start(&client, &log, mode),
        Member::start(&client, &log, mode),
    );
    // Each member caches only its share, or (a server mode the server ignores) everything.
    let scoped = mode == ShardMode::Buckets || honoured;
    // Each caches its share only when the server honours the selector, everything otherwise
    // (once it fell back, with no selector left on its informer).
    let caches_as_expected = |ms: &[&Member]| -> Result<(), String> {
        converged(&fake, ms)?;
        for m in ms {
            let (cached, owned) = (m.store.len(), m.owned());
            let selectors = m.informer.selectors();
            let (selector, want) = if mode == ShardMode::Buckets {
                (selectors.label, m.sharding.label_selector())
            } else {
                (selectors.shard, m.sharding.shard_selector())
            };
            let ok = if scoped {
                cached == owned && selector.is_some() && selector == want
            } else {
                cached == OBJECTS && selector.is_none()
            };
            if !ok {
                return Err(format!(
                    "{}: caches {cached}, owns {owned}, selector {selector:?}",
                    m.name
                ));
            }
        }
        Ok(())
    };
    until("3 members converge", Duration::from_secs(30), || {
        caches_as_expected(&[&a, &b, &c])
    })
    .await;
    for m in [&a, &b, &c] {
        let owned = m.owned();
        assert!(
            owned * 100 >= OBJECTS * 15 && owned * 100 <= OBJECTS * 55,
            "{} owns {owned} of {OBJECTS}",
            m.name
        );
    }
    // A join: the table changes, and with it every member's selector.
    let writes_before: u64 = [&a, &b, &c]
        .iter()
        .map(|m| m.sharding.sharder_writes())
        .sum();
    let d = Member::start(&client, &log, mode);
    until("4 members converge", Duration::from_secs(30), || {
        caches_as_expected(&[&a, &b, &c, &d])?;
        (d.owned() > 0)
            .then_some(())
            .ok_or_else(|| "d owns nothing yet".to_string())
    })
    .await;
    if mode == ShardMode::Buckets {
        // Every object labelled with its bucket; the join wrote tables, not objects.
        for o in fake.list(&Resource::CONFIGMAPS, Some(NS)) {
            assert!(
                o["metadata"]["labels"]["srv/bucket"].is_string(),
                "not labelled: {o}"
            );
        }
        let writes: u64 = [&a, &b, &c, &d]
            .iter()
            .map(|m| m.sharding.sharder_writes())
            .sum();
        assert!(
            writes - writes_before < 10,
            "the join wrote {} times",
            writes - writes_before
        );
        return finish(&log, [&a, &b, &c, &d]).await;
    }
    // The selectors went out: lists and watches carried KEP-5866's ranges.
    let trace = fake.trace();
    let sent = |verb: &str| {
        trace
            .iter()
            .filter(|t| t.request.contains("/configmaps") && t.request.contains(verb))
            .filter(|t| {
                t.request
                    .contains("shardSelector=shardRange%28object.metadata.uid")
            })
            .count()
    };
    assert!(sent("watch=true") >= 4, "watches with a shardSelector");
    assert!(sent("GET") >= 8, "lists and watches with a shardSelector");
    finish(&log, [&a, &b, &c, &d]).await;
}

/// Checks the reconciles, then stops the members cleanly.
async fn finish(log: &Log, members: [&Member; 4]) {
    assert_no_overlap(log);
    assert!(
        log.lock().unwrap().len() >= OBJECTS,
        "every object reconciled"
    );
    for m in members {
        m.stop.store(true, Ordering::Release);
    }
    until("clean stop", Duration::from_secs(20), || {
        match members.iter().find(|m| m.done.lock().unwrap().is_none()) {
            Some(m) => Err(format!("{} still runs", m.name)),
            None => Ok(()),
        }
    })
    .await;
    for m in members {
        assert_eq!(m.done.lock().unwrap().clone(), Some(Ok(())), "{}", m.name);
    }
    assert_no_overlap(log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_mode_members_cache_only_their_ranges_where_the_server_honours_shard_selector() {
    scenario(ShardMode::Server, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_mode_falls_back_to_filtering_where_the_server_ignores_shard_selector() {
    scenario(ShardMode::Server, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buckets_mode_members_cache_only_their_buckets_and_a_join_writes_no_object() {
    scenario(ShardMode::Buckets, false).await;
}
