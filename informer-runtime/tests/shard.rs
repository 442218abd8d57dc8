//! Sharding end to end, against a real kube-apiserver (testcluster): several members of one
//! controller (in this process, each with its own client, informers, Lease and sharder), over
//! ConfigMaps; one killed (its Lease left to expire), members added, one cut off from the
//! server through a TCP proxy that drops its connections. Every reconcile records (member,
//! key, start, end); the test asserts that no two reconciles of one key overlap, that the
//! ring converges (every object owned by exactly one live member) and that each member caches
//! (labels mode) or owns (filter mode) about its share; in the buckets mode, that each caches
//! only what it owns.
//!
//! Labels mode on tokio (300 objects), filter mode on smol (150 objects), buckets mode on tokio
//! (300 objects): the same API. `tests/shard_processes.rs` runs the labels mode with member
//! processes of the sample controller (the greeter); this test keeps what only one process
//! can see: each member's own view of what it owns
//! ([`Sharding::owns`](informer_runtime::Sharding::owns)), the filter and buckets modes and
//! the smol runtime.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use informer_http::{Backend, Client, PostParams};
use informer_runtime::{DynamicObject, Object, Resource};
use serde_json::json;
use testcluster::TestCluster;

#[path = "support/cut_proxy.rs"]
mod cut_proxy;
use cut_proxy::Proxy;

struct Shared {
    _cluster: Mutex<TestCluster>,
    config: informer_http::Config,
    port: u16,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let cluster = TestCluster::start().expect("start test cluster");
        let config = informer_http::Config::from_kubeconfig_file(&cluster.kubeconfig, None)
            .expect("testcluster kubeconfig");
        let port = cluster.port();
        Shared {
            _cluster: Mutex::new(cluster),
            config,
            port,
        }
    })
}

fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// One reconcile: who, which key, when it started and (once it ended or was cancelled) ended.
#[derive(Clone, Debug)]
struct Span {
    member: String,
    key: String,
    start: Instant,
    end: Option<Instant>,
}

type Log = Arc<Mutex<Vec<Span>>>;

/// Records the end of a span when dropped (a cancelled reconcile's future is dropped).
struct Open(Log, usize);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.lock().unwrap()[self.1].end = Some(Instant::now());
    }
}

fn open(log: &Log, member: &str, key: String) -> Open {
    let mut l = log.lock().unwrap();
    l.push(Span {
        member: member.into(),
        key,
        start: Instant::now(),
        end: None,
    });
    Open(log.clone(), l.len() - 1)
}

/// No two spans of one key overlap; returns how many spans were checked.
fn assert_no_overlap(log: &Log) -> usize {
    let now = Instant::now();
    // A copy: a failed assertion must not poison the log the reconciles still write.
    let l: Vec<Span> = log.lock().unwrap().clone();
    let mut by_key: BTreeMap<&str, Vec<&Span>> = BTreeMap::new();
    for s in l.iter() {
        by_key.entry(&s.key).or_default().push(s);
    }
    for (key, mut spans) in by_key {
        spans.sort_by_key(|s| s.start);
        for w in spans.windows(2) {
            let end = w[0].end.unwrap_or(now);
            assert!(
                end <= w[1].start,
                "{key}: {} reconciled it until {:?} after {} started at {:?}",
                w[0].member,
                end,
                w[1].member,
                w[1].start
            );
        }
    }
    l.len()
}

async fn create_objects<B: Backend>(c: &Client<B>, ns: &str, n: usize) {
    let nsapi = c.api::<DynamicObject>(Resource::NAMESPACES, None);
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}
    }))
    .unwrap();
    let _ = nsapi.create(&obj, &PostParams::default()).await;
    let api = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(ns));
    for i in 0..n {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("o{i:04}"), "namespace": ns},
            "data": {"i": i.to_string()},
        }))
        .unwrap();
        api.create(&obj, &PostParams::default()).await.unwrap();
    }
}

async fn poll<F: Future<Output = bool>>(
    what: &str,
    why: &Mutex<String>,
    limit: Duration,
    sleep: impl Fn(Duration) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    mut cond: impl FnMut() -> F,
) -> Duration {
    let t0 = Instant::now();
    while !cond().await {
        assert!(
            t0.elapsed() < limit,
            "timed out: {what} ({})",
            why.lock().unwrap()
        );
        sleep(Duration::from_millis(100)).await;
    }
    t0.elapsed()
}

macro_rules! scenario {
    ($name:ident, $ring:literal, $rt:ident, $block_on:expr, $mode:expr, $objects:expr) => {
        mod $name {
            use super::*;
            use $rt as rt;

            fn sleeper(d: Duration) -> std::pin::Pin<Box<dyn Future<Output = ()> + Send>> {
                Box::pin(rt::sleep(d))
            }

            struct Running {
                name: String,
                sharding: rt::Sharding,
                store: rt::Store<DynamicObject>,
                stop: Arc<AtomicBool>,
                result: Arc<Mutex<Option<Result<(), String>>>>,
                proxy: Option<Proxy>,
            }

            fn start(ns: &str, label: &str, log: &Log, via_proxy: bool) -> Running {
                let sh = shared();
                let mut config = sh.config.clone();
                let proxy = via_proxy.then(|| Proxy::start(sh.port));
                if let Some(p) = &proxy {
                    config.server = format!("https://127.0.0.1:{}", p.port);
                }
                let client = rt::client(config).unwrap();
                let name = rt::member_name(label);
                let sc = rt::ShardConfig {
                    mode: $mode,
                    lease_duration: Duration::from_secs(3),
                    renew_deadline: Duration::from_secs(2),
                    retry_period: Duration::from_millis(500),
                    ..rt::ShardConfig::new($ring, name.clone())
                };
                let sharding = rt::sharding(
                    &client,
                    ns,
                    sc,
                    Resource::CONFIGMAPS,
                    Vec::new(),
                    rt::ShardScope::namespace(ns),
                )
                .unwrap();
                let mut b =
                    rt::Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS)
                        .namespace(ns);
                if let Some(sel) = sharding.label_selector() {
                    b = b.label_selector(sel);
                }
                let informer = b.build().unwrap();
                let store = informer.store();
                let stop = Arc::new(AtomicBool::new(false));
                let s2 = stop.clone();
                let ctl = rt::Controller::new(&client, informer)
                    .concurrency(4)
                    .shard(sharding.clone())
                    .shutdown_grace(Duration::from_secs(1))
                    .shutdown_on(async move {
                        while !s2.load(Ordering::Acquire) {
                            rt::sleep(Duration::from_millis(50)).await;
                        }
                    });
                let (log, me) = (log.clone(), name.clone());
                let result: Arc<Mutex<Option<Result<(), String>>>> = Arc::default();
                let r2 = result.clone();
                rt::spawn(async move {
                    let r = ctl
                        .run(move |obj: Arc<DynamicObject>, _ctx| {
                            let span = open(&log, &me, obj.key_ref().to_string());
                            async move {
                                rt::sleep(Duration::from_millis(30)).await;
                                drop(span);
                                Ok::<_, String>(rt::Action::RequeueAfter(Duration::from_millis(
                                    700,
                                )))
                            }
                        })
                        .await;
                    *r2.lock().unwrap() = Some(r.map_err(|e| e.to_string()));
                })
                .unwrap();
                Running {
                    name,
                    sharding,
                    store,
                    stop,
                    result,
                    proxy,
                }
            }

            /// What `m` caches (labels mode) or owns (filter mode).
            fn share(m: &Running) -> usize {
                if $mode == rt::ShardMode::Labels {
                    m.store.len()
                } else {
                    m.store
                        .list()
                        .iter()
                        .filter(|o| m.sharding.owns(&***o))
                        .count()
                }
            }

            /// Every object owned by exactly one of `live` (by each member's own view), and the
            /// labels (labels mode) name it. The first failure is kept in `why`.
            async fn converged(
                c: &rt::Client,
                ns: &str,
                live: &[&Running],
                why: &Mutex<String>,
            ) -> bool {
                let Ok(page) = c
                    .api::<DynamicObject>(Resource::CONFIGMAPS, Some(ns))
                    .list_page(&Default::default())
                    .await
                else {
                    return false;
                };
                if let Some(m) = live.iter().find(|m| !m.sharding.is_working()) {
                    *why.lock().unwrap() = format!("{} is not working", m.name);
                    return false;
                }
                let label = format!("{}/shard", $ring);
                // The ring over every live member: not a table of fewer, met on the way.
                let names: Vec<&str> = live.iter().map(|m| m.name.as_str()).collect();
                let config = live[0].sharding.config();
                let ring = config.ring_over(&names);
                for o in &page.items {
                    let owners: Vec<&str> = live
                        .iter()
                        .filter(|m| {
                            let view = m.store.get(&o.key_ref().to_string());
                            view.is_some_and(|v| m.sharding.owns(&*v))
                        })
                        .map(|m| m.name.as_str())
                        .collect();
                    let ok = owners.len() == 1
                        && ring.owner(config.hash_of(o)) == Some(owners[0])
                        && ($mode != rt::ShardMode::Labels
                            || o.labels().get(&label) == Some(owners[0]));
                    if !ok {
                        *why.lock().unwrap() = format!(
                            "{}: owners {owners:?}, labels {:?}, sharders {:?}",
                            o.key_ref(),
                            o.labels().iter().collect::<Vec<_>>(),
                            live.iter()
                                .map(|m| (m.name.as_str(), m.sharding.is_sharder()))
                                .collect::<Vec<_>>()
                        );
                        return false;
                    }
                }
                if $mode == rt::ShardMode::Buckets {
                    // Each member caches its buckets only.
                    for m in live {
                        if m.store.len() != share(m) {
                            *why.lock().unwrap() =
                                format!("{} caches {}, owns {}", m.name, m.store.len(), share(m));
                            return false;
                        }
                    }
                }
                true
            }

            #[test]
            fn sharded_members_never_overlap_and_converge() {
                let _serial = serial();
                let t0 = Instant::now();
                $block_on(async {
                    let sh = shared();
                    let c = rt::client(sh.config.clone()).unwrap();
                    let ns = format!("shard-{}", $ring);
                    let n: usize = $objects;
                    create_objects(&c, &ns, n).await;
                    let log: Log = Arc::default();
                    let why = Mutex::new(String::new());
                    let a = start(&ns, "a", &log, false);
                    let b = start(&ns, "b", &log, true);
                    let m3 = start(&ns, "c", &log, false);
                    let live_abc = [&a, &b, &m3];
                    let took = poll(
                        "3 members converge",
                        &why,
                        Duration::from_secs(60),
                        sleeper,
                        || converged(&c, &ns, &live_abc, &why),
                    )
                    .await;
                    eprintln!(
                        "[{}] 3 members over {n} objects converged in {took:?}",
                        stringify!($name)
                    );
                    // Each member has about a third.
                    for m in [&a, &b, &m3] {
                        let share = share(m);
                        eprintln!("[{}] {}: {share} of {n}", stringify!($name), m.name);
                        assert!(
                            share * 100 >= n * 15 && share * 100 <= n * 55,
                            "{} has {share} of {n}",
                            m.name
                        );
                    }
                    // Kill a: its Lease is left to expire.
                    a.sharding.abandon().await;
                    let live_bc = [&b, &m3];
                    let took = poll(
                        "after a kill",
                        &why,
                        Duration::from_secs(60),
                        sleeper,
                        || converged(&c, &ns, &live_bc, &why),
                    )
                    .await;
                    eprintln!(
                        "[{}] reassigned after a kill in {took:?}",
                        stringify!($name)
                    );
                    assert!(matches!(&*a.result.lock().unwrap(), Some(Err(_)) | None));
                    // Add d.
                    let d = start(&ns, "d", &log, false);
                    let live_bcd = [&b, &m3, &d];
                    let took = poll(
                        "after a join",
                        &why,
                        Duration::from_secs(60),
                        sleeper,
                        || async {
                            converged(&c, &ns, &live_bcd, &why).await && share(&d) * 100 >= n * 15
                        },
                    )
                    .await;
                    eprintln!(
                        "[{}] rebalanced after a join in {took:?}",
                        stringify!($name)
                    );
                    // Cut b off from the server: it retires by itself, its keys move.
                    b.proxy.as_ref().unwrap().cut();
                    let live_cd = [&m3, &d];
                    let took = poll(
                        "after a cut",
                        &why,
                        Duration::from_secs(60),
                        sleeper,
                        || converged(&c, &ns, &live_cd, &why),
                    )
                    .await;
                    eprintln!("[{}] reassigned after a cut in {took:?}", stringify!($name));
                    poll(
                        "b retired",
                        &why,
                        Duration::from_secs(30),
                        sleeper,
                        || async { b.result.lock().unwrap().is_some() },
                    )
                    .await;
                    assert_eq!(
                        b.result.lock().unwrap().clone(),
                        Some(Err(rt::ControllerError::ShardRetired.to_string()))
                    );
                    for m in [&m3, &d] {
                        let share = share(m);
                        eprintln!("[{}] {}: {share} of {n}", stringify!($name), m.name);
                        assert!(share * 100 >= n * 25, "{} has {share} of {n}", m.name);
                    }
                    let spans = assert_no_overlap(&log);
                    assert!(spans > n, "only {spans} reconciles");
                    let writes: u64 = [&a, &b, &m3, &d]
                        .iter()
                        .map(|m| m.sharding.sharder_writes())
                        .sum();
                    eprintln!(
                        "[{}] {spans} reconciles, no overlap; {writes} sharder writes",
                        stringify!($name)
                    );
                    // Leave: the members stop cleanly.
                    for m in [&m3, &d] {
                        m.stop.store(true, Ordering::Release);
                    }
                    poll(
                        "clean stop",
                        &why,
                        Duration::from_secs(30),
                        sleeper,
                        || async { [&m3, &d].iter().all(|m| m.result.lock().unwrap().is_some()) },
                    )
                    .await;
                    for m in [&m3, &d] {
                        assert_eq!(m.result.lock().unwrap().clone(), Some(Ok(())));
                    }
                    assert_no_overlap(&log);
                });
                eprintln!("[{}] took {:?}", stringify!($name), t0.elapsed());
            }
        }
    };
}

fn tokio_block_on<F: Future>(f: F) -> F::Output {
    ::tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

scenario!(
    tokio_labels,
    "tokio-labels",
    informer_tokio,
    tokio_block_on,
    rt::ShardMode::Labels,
    300
);
scenario!(
    smol_filter,
    "smol-filter",
    informer_smol,
    ::smol::block_on,
    rt::ShardMode::Filter,
    150
);
scenario!(
    tokio_buckets,
    "tokio-buckets",
    informer_tokio,
    tokio_block_on,
    rt::ShardMode::Buckets,
    300
);
