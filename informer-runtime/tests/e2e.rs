//! End-to-end: the informer against a real kube-apiserver v1.20.2 (+ etcd) from `testcluster`,
//! the same scenarios on tokio (reqwest transport) and on smol (smol transport).
//!
//! One cluster for the whole binary, seeded once with 2,100 ConfigMaps. Scenarios run one at a
//! time (one restarts kube-apiserver), each in namespaces of its own, and wait on conditions
//! with deadlines.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::{Either, join, select};
use informer_core::protocol::ListRequest;
use informer_http::{Backend, Client};
use informer_runtime::{
    BackoffConfig, DynamicObject, Error, Failure, HandlerFns, IndexError, Informer,
    InformerBuilder, InformerOptions, NAMESPACE_INDEX, Notification, Object, ObjectOrTombstone,
    Resource, Runtime, SharedInformerFactory, index_fn,
};
use serde_json::json;
use support::fake_transport::FakeTransport;
use testcluster::{StartOptions, TestCluster};

mod support;

const SEED_NAMESPACES: usize = 3;
const SEED_PER_NAMESPACE: usize = 700;
const DEADLINE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------------------------
// The cluster, and the two runtimes.

struct Shared {
    cluster: Mutex<TestCluster>,
    config: informer_http::Config,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let t0 = Instant::now();
        let cluster = TestCluster::start_with(
            // Secrets bypass the watch cache: a watch of them from a compacted
            // resourceVersion reaches etcd and gets 410.
            StartOptions::new().apiserver_arg("--watch-cache-sizes=secrets#0"),
        )
        .expect("start test cluster");
        let config = informer_http::Config::from_kubeconfig_file(&cluster.kubeconfig, None)
            .expect("testcluster kubeconfig");
        eprintln!("cluster up in {:?}", t0.elapsed());
        let c = informer_smol::client(config.clone()).unwrap();
        smol::block_on(seed(&c));
        eprintln!("seeded in {:?}", t0.elapsed());
        Shared {
            cluster: Mutex::new(cluster),
            config,
        }
    })
}

/// Scenarios run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

trait Env: 'static {
    type R: Runtime + Default;
    type B: Backend;
    const NAME: &'static str;
    fn client(config: informer_http::Config) -> Client<Self::B>;
    fn block_on<F: Future>(f: F) -> F::Output;
}

struct TokioEnv;
impl Env for TokioEnv {
    type R = informer_tokio::Tokio;
    type B = informer_tokio::Backend;
    const NAME: &'static str = "tokio";
    fn client(config: informer_http::Config) -> Client<Self::B> {
        informer_tokio::client(config).unwrap()
    }
    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }
}

struct SmolEnv;
impl Env for SmolEnv {
    type R = informer_smol::Smol;
    type B = informer_smol::Backend;
    const NAME: &'static str = "smol";
    fn client(config: informer_http::Config) -> Client<Self::B> {
        informer_smol::client(config).unwrap()
    }
    fn block_on<F: Future>(f: F) -> F::Output {
        smol::block_on(f)
    }
}

/// Divergences the consistency check found in the scenario running (see [`builder`]).
static DIVERGENCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn run<E: Env, F: Future<Output = ()>>(scenario: impl FnOnce(Client<E::B>) -> F) {
    let _serial = serial();
    let sh = shared();
    let t0 = Instant::now();
    DIVERGENCES.store(0, std::sync::atomic::Ordering::SeqCst);
    E::block_on(async {
        let c = E::client(sh.config.clone());
        scenario(c).await
    });
    eprintln!("[{}] scenario took {:?}", E::NAME, t0.elapsed());
    assert_eq!(
        DIVERGENCES.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "the consistency check found the cache diverging from the server"
    );
}

/// The snapshot files in `dir` (temporary files excluded).
fn snapshot_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .collect();
    files.sort();
    files
}

/// A started factory on snapshot directory `dir` with two informers of `opts`'s ConfigMaps,
/// whole objects and metadata only, once both have synced.
async fn start_snapshot_factory<E: Env>(
    c: &Client<E::B>,
    dir: &std::path::Path,
    opts: &InformerOptions,
) -> (
    SharedInformerFactory<E::R, E::B>,
    Informer<DynamicObject, E::R>,
    Informer<informer_runtime::PartialObjectMetadata, E::R>,
) {
    let factory = SharedInformerFactory::<E::R, E::B>::new(c.clone()).with_snapshot_dir(dir);
    let objects = factory
        .informer_with::<DynamicObject>(Resource::CONFIGMAPS, opts.clone(), |b| b)
        .unwrap();
    let metas = factory
        .informer_with::<informer_runtime::PartialObjectMetadata>(
            Resource::CONFIGMAPS,
            opts.clone(),
            |b| b,
        )
        .unwrap();
    factory.start().unwrap();
    factory.wait_for_cache_sync(Some(DEADLINE)).await.unwrap();
    (factory, objects, metas)
}

/// A factory with a snapshot directory: each of its informers (whole objects, metadata only)
/// writes a file of its own at the factory's shutdown; a new factory on the same directory
/// resumes every informer from its file (no list) and sees what changed while it was down.
/// Dropping the last handle of an informer (no shutdown) writes its file too: the file then
/// holds the cache as it was at the drop.
async fn warm_restart_through_the_factory_and_at_the_last_drop<E: Env>(c: Client<E::B>) {
    use informer_core::snapshot::peek_identity;
    use informer_runtime::{PartialObjectMetadata, SnapshotLoad};
    let ns = format!("warm-factory-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    for i in 0..5 {
        put_cm(&c, &ns, &format!("f-{i}"), &[]).await;
    }
    let dir = snapshot_path(&format!("factory-{}", E::NAME)).with_extension("d");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let opts = InformerOptions::new().namespace(ns.clone());

    let (factory, objects, metas) = start_snapshot_factory::<E>(&c, &dir, &opts).await;
    assert_eq!(objects.snapshot_load(), Some(SnapshotLoad::Missing));
    assert_eq!(objects.store().len(), 5);
    assert_eq!(metas.store().len(), 5);
    factory.shutdown().await;
    let files = snapshot_files(&dir);
    assert_eq!(files.len(), 2, "one file per informer: {files:?}");
    assert_eq!(files, {
        let mut want = vec![
            factory.snapshot_path::<DynamicObject>(&dir, &Resource::CONFIGMAPS, &opts),
            factory.snapshot_path::<PartialObjectMetadata>(&dir, &Resource::CONFIGMAPS, &opts),
        ];
        want.sort();
        want
    });
    drop((objects, metas, factory));

    // Changes while down.
    put_cm(&c, &ns, "f-5", &[]).await;
    put_cm(&c, &ns, "f-1", &[("v", "2")]).await;
    delete(&c, "configmaps", &ns, "f-2").await;

    let (factory, objects, metas) = start_snapshot_factory::<E>(&c, &dir, &opts).await;
    for load in [objects.snapshot_load(), metas.snapshot_load()] {
        assert!(
            matches!(load, Some(SnapshotLoad::Resumed { objects: 5, .. })),
            "{load:?}"
        );
    }
    let want = server_state(&c, Resource::CONFIGMAPS, &ns).await;
    eventually::<E>("store == server after resume", DEADLINE, || {
        store_state(&objects.store()) == want
    })
    .await;
    eventually::<E>("metadata store == server after resume", DEADLINE, || {
        let got: BTreeMap<String, String> = metas
            .store()
            .list()
            .iter()
            .map(|o| {
                (
                    o.name().to_string(),
                    o.resource_version().unwrap_or("").to_string(),
                )
            })
            .collect();
        got == want
    })
    .await;
    assert_eq!(objects.metrics().lists, 0);
    assert_eq!(metas.metrics().lists, 0);

    // The last handle dropped, no shutdown: the file is written with the cache at the drop.
    let at_drop = objects.last_sync_resource_version();
    let file = factory.snapshot_path::<DynamicObject>(&dir, &Resource::CONFIGMAPS, &opts);
    let (_, on_disk) = peek_identity(&std::fs::read(&file).unwrap()).unwrap();
    assert_ne!(
        on_disk, at_drop,
        "the changes made while down are not on disk yet"
    );
    drop((objects, metas, factory));
    eventually::<E>("the file written at the drop", DEADLINE, || {
        std::fs::read(&file)
            .ok()
            .and_then(|b| peek_identity(&b).ok())
            .is_some_and(|(_, rv)| rv == at_drop)
    })
    .await;
    let _ = std::fs::remove_dir_all(&dir);
}

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        mod on_tokio {
            $(#[test] fn $name() { super::run::<super::TokioEnv, _>(super::$name::<super::TokioEnv>) })*
        }
        mod on_smol {
            $(#[test] fn $name() { super::run::<super::SmolEnv, _>(super::$name::<super::SmolEnv>) })*
        }
    };
}

scenarios!(
    initial_sync_of_2100_configmaps_through_the_factory,
    create_update_delete_arrive_in_order_per_object,
    handler_added_after_sync_gets_the_replay_nothing_lost_or_doubled,
    resync_only_reaches_handlers_that_asked_at_their_period,
    index_queries_right_after_changes,
    relist_after_compaction_delivers_tombstones,
    converges_after_apiserver_restart,
    panicking_handler_does_not_stop_the_others_and_shutdown_stops_delivery,
    typed_objects_with_label_and_field_selectors,
    metadata_only_informers_cache_metadata_without_data,
    warm_restart_resumes_and_sees_changes_made_while_down,
    warm_restart_after_compaction_relists_with_tombstones,
    warm_restart_refuses_truncated_and_foreign_snapshots,
    warm_restart_through_the_factory_and_at_the_last_drop,
    events_are_written_counted_and_grouped,
    a_replica_that_lost_its_lease_writes_nothing_after_the_new_leader_acquired,
    a_reconcile_reads_its_own_last_write,
    a_crd_generated_from_rust_types_is_accepted_and_served,
    finalizer_adds_cleans_up_removes_and_never_clobbers,
    finalizer_under_workers_retries_a_failed_cleanup_until_the_object_is_gone,
);

// ---------------------------------------------------------------------------------------------
// API helpers.

async fn seed<B: Backend>(c: &Client<B>) {
    for i in 0..SEED_NAMESPACES {
        ensure_namespace(c, &format!("seed-{i}")).await;
    }
    let posts = futures_util::stream::iter(0..SEED_NAMESPACES * SEED_PER_NAMESPACE)
        .map(|i| {
            let c = c.clone();
            async move {
                let ns = format!("seed-{}", i % SEED_NAMESPACES);
                let body = json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("cm-{i:05}"), "labels": {"seed": "yes"}},
                    "data": {"i": i.to_string()}
                });
                c.request(
                    http::Method::POST,
                    &format!("/api/v1/namespaces/{ns}/configmaps"),
                    Some(body.to_string().into()),
                )
                .await
            }
        })
        .buffer_unordered(16);
    let results: Vec<_> = posts.collect().await;
    for r in results {
        match r {
            Ok(_) => {}
            Err(f) if f.status().is_some_and(|s| s.code == 409) => {}
            Err(f) => panic!("seeding: {f}"),
        }
    }
}

async fn ensure_namespace<B: Backend>(c: &Client<B>, ns: &str) {
    let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    match c
        .request(
            http::Method::POST,
            "/api/v1/namespaces",
            Some(body.to_string().into()),
        )
        .await
    {
        Ok(_) => {}
        Err(f) if f.status().is_some_and(|s| s.code == 409) => {}
        Err(f) => panic!("namespace {ns}: {f}"),
    }
}

fn path(kind: &str, ns: &str, name: Option<&str>) -> String {
    match name {
        Some(n) => format!("/api/v1/namespaces/{ns}/{kind}/{n}"),
        None => format!("/api/v1/namespaces/{ns}/{kind}"),
    }
}

/// Creates (or replaces) ConfigMap `name` with `labels`.
async fn put_cm<B: Backend>(c: &Client<B>, ns: &str, name: &str, labels: &[(&str, &str)]) {
    let labels: BTreeMap<_, _> = labels.iter().copied().collect();
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "data": {"x": "y"}
    })
    .to_string();
    let created = c
        .request(
            http::Method::POST,
            &path("configmaps", ns, None),
            Some(body.clone().into()),
        )
        .await;
    match created {
        Ok(_) => {}
        Err(f) if f.status().is_some_and(|s| s.code == 409) => {
            c.request(
                http::Method::PUT,
                &path("configmaps", ns, Some(name)),
                Some(body.into()),
            )
            .await
            .unwrap_or_else(|f| panic!("update {ns}/{name}: {f}"));
        }
        Err(f) => panic!("create {ns}/{name}: {f}"),
    }
}

async fn delete<B: Backend>(c: &Client<B>, kind: &str, ns: &str, name: &str) {
    c.request(http::Method::DELETE, &path(kind, ns, Some(name)), None)
        .await
        .unwrap_or_else(|f| panic!("delete {kind} {ns}/{name}: {f}"));
}

/// name → resourceVersion of what the server holds.
async fn server_state<B: Backend>(
    c: &Client<B>,
    res: Resource,
    ns: &str,
) -> BTreeMap<String, String> {
    let page = c
        .api::<DynamicObject>(res, Some(ns))
        .list_page(&ListRequest::default())
        .await
        .expect("list");
    page.items
        .iter()
        .map(|o| {
            (
                o.name().to_string(),
                o.resource_version().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn store_state(store: &informer_runtime::Store<DynamicObject>) -> BTreeMap<String, String> {
    store
        .list()
        .iter()
        .map(|o| {
            (
                o.name().to_string(),
                o.resource_version().unwrap_or("").to_string(),
            )
        })
        .collect()
}

async fn sleep<E: Env>(d: Duration) {
    E::R::default().sleep(d).await
}

/// Polls `cond` every 20 ms until it holds; panics with `what` after `limit`.
async fn eventually<E: Env>(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < limit, "[{}] timed out: {what}", E::NAME);
        sleep::<E>(Duration::from_millis(20)).await;
    }
}

fn rv(o: &DynamicObject) -> u64 {
    o.resource_version().unwrap_or("0").parse().unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// What handlers saw.

#[derive(Clone, Debug, PartialEq)]
enum Seen {
    Add {
        name: String,
        rv: u64,
        initial: bool,
    },
    Update {
        name: String,
        old: u64,
        new: u64,
        v: Option<String>,
    },
    Delete {
        name: String,
        rv: u64,
        tombstone: bool,
    },
}

impl Seen {
    fn name(&self) -> &str {
        match self {
            Seen::Add { name, .. } | Seen::Update { name, .. } | Seen::Delete { name, .. } => name,
        }
    }
    fn of(n: &Notification<DynamicObject>) -> Seen {
        match n {
            Notification::Add {
                obj,
                in_initial_list,
            } => Seen::Add {
                name: obj.name().into(),
                rv: rv(obj),
                initial: *in_initial_list,
            },
            Notification::Update { old, new } => Seen::Update {
                name: new.name().into(),
                old: rv(old),
                new: rv(new),
                v: new.label("v").map(Into::into),
            },
            Notification::Delete(d) => Seen::Delete {
                name: d.object().name().into(),
                rv: rv(d.object()),
                tombstone: d.is_tombstone(),
            },
        }
    }
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn recorder() -> (HandlerFns<DynamicObject>, Log) {
    let log: Log = Arc::default();
    let (a, u, d) = (log.clone(), log.clone(), log.clone());
    let h = HandlerFns::new()
        .on_add(move |obj, initial| {
            a.lock().unwrap().push(Seen::of(&Notification::Add {
                obj,
                in_initial_list: initial,
            }))
        })
        .on_update(move |old, new| {
            u.lock()
                .unwrap()
                .push(Seen::of(&Notification::Update { old, new }))
        })
        .on_delete(move |gone: ObjectOrTombstone<DynamicObject>| {
            d.lock()
                .unwrap()
                .push(Seen::of(&Notification::Delete(gone)))
        });
    (h, log)
}

fn snapshot(log: &Log) -> Vec<Seen> {
    log.lock().unwrap().clone()
}

/// Folds a handler's notifications into its view (name → rv), failing on anything a correct
/// informer never sends: an add for an object in view, an update or delete of one not in view,
/// an update going back in resourceVersion.
fn fold(events: &[Seen]) -> BTreeMap<String, u64> {
    let mut view = BTreeMap::new();
    for e in events {
        match e {
            Seen::Add { name, rv, .. } => {
                assert!(
                    view.insert(name.clone(), *rv).is_none(),
                    "doubled add: {e:?}"
                );
            }
            Seen::Update { name, old, new, .. } => {
                let seen = view
                    .get_mut(name)
                    .unwrap_or_else(|| panic!("update of unseen: {e:?}"));
                assert_eq!(
                    *seen, *old,
                    "update's old is not what the handler saw: {e:?}"
                );
                assert!(new >= old, "update went back: {e:?}");
                *seen = *new;
            }
            Seen::Delete { name, .. } => {
                assert!(view.remove(name).is_some(), "delete of unseen: {e:?}");
            }
        }
    }
    view
}

fn rv_map(m: &BTreeMap<String, String>) -> BTreeMap<String, u64> {
    m.iter()
        .map(|(k, v)| (k.clone(), v.parse().unwrap_or(0)))
        .collect()
}

fn builder<E: Env>(
    c: &Client<E::B>,
    res: Resource,
    ns: &str,
) -> InformerBuilder<DynamicObject, E::R> {
    Informer::<DynamicObject, E::R>::builder_for(c, res)
        .namespace(ns)
        .backoff(fast_backoff())
        // On in every scenario: a divergence fails it (see `run`).
        .consistency_check(
            informer_runtime::ConsistencyCheck::every(Duration::from_secs(1)),
            |d| {
                eprintln!("consistency check: {d}");
                DIVERGENCES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            },
        )
}

fn fast_backoff() -> BackoffConfig {
    BackoffConfig {
        initial: Duration::from_millis(100),
        cap: Duration::from_secs(1),
        ..BackoffConfig::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios.

/// 2,100 ConfigMaps in three namespaces, through a SharedInformerFactory: two callers asking for
/// the same informer share one (one list); the handler gets every object as an initial add; the
/// namespace index answers per namespace.
async fn initial_sync_of_2100_configmaps_through_the_factory<E: Env>(c: Client<E::B>) {
    let factory = SharedInformerFactory::<E::R, E::B>::new(c);
    let opts = InformerOptions::new().label_selector("seed=yes");
    let a = factory
        .informer_with::<DynamicObject>(Resource::CONFIGMAPS, opts.clone(), |b| b)
        .unwrap();
    let b = factory
        .informer_with::<DynamicObject>(Resource::CONFIGMAPS, opts, |b| b)
        .unwrap();
    let (h, log) = recorder();
    let reg = a.add_handler(h).unwrap();
    let stream = b.event_stream().unwrap();
    let t0 = Instant::now();
    factory.start().unwrap();
    factory
        .wait_for_cache_sync(Some(DEADLINE))
        .await
        .expect("cache sync");
    eprintln!("[{}] 2100 objects synced in {:?}", E::NAME, t0.elapsed());
    let total = SEED_NAMESPACES * SEED_PER_NAMESPACE;
    assert_eq!(a.store().len(), total);
    assert_eq!(b.store().len(), total, "same informer behind both");
    assert_eq!(a.metrics().lists, 1, "one list for both callers");
    assert!(a.metrics().events_applied >= total as u64);
    for i in 0..SEED_NAMESPACES {
        let ns = format!("seed-{i}");
        assert_eq!(
            a.store().by_index(NAMESPACE_INDEX, &ns).unwrap().len(),
            SEED_PER_NAMESPACE
        );
    }
    assert!(a.store().get("seed-0/cm-00000").is_some());
    // The handler: every object once, as an initial add.
    reg.wait_for_sync(Some(DEADLINE)).await.unwrap();
    let seen = snapshot(&log);
    assert_eq!(seen.len(), total);
    assert!(
        seen.iter()
            .all(|s| matches!(s, Seen::Add { initial: true, .. }))
    );
    assert_eq!(fold(&seen).len(), total);
    // The stream, pulled by its consumer.
    let adds: Vec<_> = stream.take(total).collect().await;
    assert!(adds.iter().all(|n| matches!(
        n,
        Notification::Add {
            in_initial_list: true,
            ..
        }
    )));
    // An unknown index is an error, not an empty answer.
    assert!(matches!(
        a.store().by_index("nope", "x"),
        Err(IndexError::UnknownIndex { .. })
    ));
    factory.shutdown().await;
    assert!(a.is_stopped());
    assert!(matches!(a.start(), Err(Error::Stopped { .. })));
}

/// Per object: Add, then Updates with rising resourceVersions and labels, then a Delete of the
/// last state — for a handler thread and for an event stream.
async fn create_update_delete_arrive_in_order_per_object<E: Env>(c: Client<E::B>) {
    let ns = format!("order-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    let inf = builder::<E>(&c, Resource::CONFIGMAPS, &ns).build().unwrap();
    let (h, log) = recorder();
    inf.add_handler(h).unwrap();
    let mut stream = inf.event_stream().unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(DEADLINE)).await.unwrap();
    const N: usize = 10;
    let writer = async {
        let writes = futures_util::stream::iter(0..N)
            .map(|i| {
                let c = c.clone();
                let ns = ns.clone();
                async move {
                    let name = format!("o-{i}");
                    for v in ["0", "1", "2"] {
                        put_cm(&c, &ns, &name, &[("v", v)]).await;
                    }
                    delete(&c, "configmaps", &ns, &name).await;
                }
            })
            .buffer_unordered(4);
        writes.collect::<Vec<()>>().await;
    };
    let consumer = async {
        let mut seen = Vec::new();
        let mut deletes = 0;
        while deletes < N {
            match select(stream.next(), Box::pin(sleep::<E>(DEADLINE))).await {
                Either::Left((Some(n), _)) => {
                    let s = Seen::of(&n);
                    deletes += matches!(s, Seen::Delete { .. }) as usize;
                    seen.push(s);
                }
                _ => panic!("stream: timed out or ended"),
            }
        }
        seen
    };
    let ((), from_stream) = join(writer, consumer).await;
    eventually::<E>("all deletes seen by the handler", DEADLINE, || {
        snapshot(&log)
            .iter()
            .filter(|s| matches!(s, Seen::Delete { .. }))
            .count()
            == N
    })
    .await;
    for events in [snapshot(&log), from_stream] {
        for i in 0..N {
            let name = format!("o-{i}");
            let mine: Vec<_> = events.iter().filter(|s| s.name() == name).collect();
            assert!(
                matches!(mine.first(), Some(Seen::Add { initial: false, .. })),
                "{mine:?}"
            );
            assert!(
                matches!(
                    mine.last(),
                    Some(Seen::Delete {
                        tombstone: false,
                        ..
                    })
                ),
                "{mine:?}"
            );
            let mut last_v = String::new();
            for s in &mine[1..mine.len() - 1] {
                let Seen::Update {
                    v: Some(v),
                    old,
                    new,
                    ..
                } = s
                else {
                    panic!("not an update between add and delete: {mine:?}");
                };
                assert!(new > old && *v >= last_v, "{mine:?}");
                last_v = v.clone();
            }
            if let (Some(Seen::Delete { rv: d, .. }), Some(Seen::Add { rv: a, .. })) =
                (mine.last(), mine.first())
            {
                assert!(d >= a);
            }
        }
        assert!(fold(&events).is_empty());
    }
    assert!(inf.store().is_empty());
    inf.shutdown().await;
}

/// A handler added after sync, while objects are being created and deleted: it first gets the
/// cache as initial adds, then live events; its view ends equal to the server's, with nothing
/// doubled or missing.
async fn handler_added_after_sync_gets_the_replay_nothing_lost_or_doubled<E: Env>(c: Client<E::B>) {
    let ns = format!("late-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    for i in 0..40 {
        put_cm(&c, &ns, &format!("l-{i:03}"), &[]).await;
    }
    let inf = builder::<E>(&c, Resource::CONFIGMAPS, &ns).build().unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(DEADLINE)).await.unwrap();
    let (h, log) = recorder();
    let added = Arc::new(Mutex::new(None));
    let writer = async {
        for i in 40..100 {
            put_cm(&c, &ns, &format!("l-{i:03}"), &[]).await;
            if i % 3 == 0 {
                delete(&c, "configmaps", &ns, &format!("l-{:03}", i - 40)).await;
            }
        }
    };
    let joiner = async {
        sleep::<E>(Duration::from_millis(150)).await;
        *added.lock().unwrap() = Some(inf.add_handler(h).unwrap());
    };
    join(writer, joiner).await;
    let reg = added.lock().unwrap().take().unwrap();
    reg.wait_for_sync(Some(DEADLINE)).await.unwrap();
    let server = rv_map(&server_state(&c, Resource::CONFIGMAPS, &ns).await);
    eventually::<E>("handler view == server", DEADLINE, || {
        fold(&snapshot(&log)) == server
    })
    .await;
    let seen = snapshot(&log);
    let initial = seen
        .iter()
        .filter(|s| matches!(s, Seen::Add { initial: true, .. }))
        .count();
    assert!(initial > 0, "the replay came as initial adds");
    assert!(
        seen.iter()
            .skip_while(|s| matches!(s, Seen::Add { initial: true, .. }))
            .all(|s| !matches!(s, Seen::Add { initial: true, .. })),
        "the replay comes first"
    );
    assert_eq!(rv_map(&store_state(&inf.store())), server);
    inf.shutdown().await;
}

/// Check period 1 s; one handler asks for 1 s, one for 2 s, one for none: resyncs (updates with
/// an unchanged resourceVersion) reach the first every second, the second every two, the third
/// never.
async fn resync_only_reaches_handlers_that_asked_at_their_period<E: Env>(c: Client<E::B>) {
    let ns = format!("resync-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    for i in 0..3 {
        put_cm(&c, &ns, &format!("r-{i}"), &[]).await;
    }
    let inf = builder::<E>(&c, Resource::CONFIGMAPS, &ns)
        .resync(Duration::from_secs(1))
        .build()
        .unwrap();
    let stamps = |log: Log| {
        let t: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let t2 = t.clone();
        let h =
            HandlerFns::new().on_update(move |old: Arc<DynamicObject>, new: Arc<DynamicObject>| {
                if old.resource_version() == new.resource_version() {
                    t2.lock().unwrap().push(Instant::now());
                    log.lock()
                        .unwrap()
                        .push(Seen::of(&Notification::Update { old, new }));
                }
            });
        (h, t)
    };
    let (h1, t1) = stamps(Arc::default());
    let (h2, t2) = stamps(Arc::default());
    let (h0, t0) = stamps(Arc::default());
    inf.add_handler_with_resync(h1, Duration::from_secs(1))
        .unwrap();
    inf.add_handler_with_resync(h2, Duration::from_secs(2))
        .unwrap();
    inf.add_handler_with_resync(h0, Duration::ZERO).unwrap();
    let start = Instant::now();
    inf.start().unwrap();
    inf.wait_for_sync(Some(DEADLINE)).await.unwrap();
    // Four rounds for the 1 s handler.
    eventually::<E>("4 resync rounds at 1 s", Duration::from_secs(20), || {
        t1.lock().unwrap().len() >= 12
    })
    .await;
    // Two rounds for the 2 s handler (a loaded machine may run it a little behind).
    eventually::<E>("2 resync rounds at 2 s", Duration::from_secs(20), || {
        t2.lock().unwrap().len() >= 6
    })
    .await;
    let elapsed = start.elapsed();
    let n2 = t2.lock().unwrap().len();
    let n1 = t1.lock().unwrap().len();
    assert!(
        t0.lock().unwrap().is_empty(),
        "a handler with resync 0 got resyncs"
    );
    let first = t1.lock().unwrap()[0] - start;
    assert!(
        first >= Duration::from_millis(900),
        "first resync after {first:?}"
    );
    assert!(
        n2 <= n1 / 2 + 3,
        "2 s handler: {n2} resyncs vs {n1} for the 1 s one in {elapsed:?}"
    );
    if let Some(f2) = t2.lock().unwrap().first() {
        assert!(
            *f2 - start >= Duration::from_millis(1900),
            "2 s handler resynced early"
        );
    }
    inf.shutdown().await;
}

/// A handler that, on every notification, asks the store's indices about the object: the cache
/// is already up to date when the handler hears of a change. Then direct queries after each
/// change.
async fn index_queries_right_after_changes<E: Env>(c: Client<E::B>) {
    let ns = format!("index-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    let inf = builder::<E>(&c, Resource::CONFIGMAPS, &ns)
        .index(
            "app",
            index_fn(|o: &DynamicObject| o.label("app").into_iter().collect()),
        )
        .build()
        .unwrap();
    let store = inf.store();
    let bad: Arc<Mutex<Vec<String>>> = Arc::default();
    let (s1, s2, b1, b2, b3) = (
        store.clone(),
        store.clone(),
        bad.clone(),
        bad.clone(),
        bad.clone(),
    );
    let s3 = store.clone();
    let check = |s: &informer_runtime::Store<DynamicObject>, o: &DynamicObject| -> bool {
        let app = o.label("app").unwrap_or("");
        s.by_index("app", app)
            .unwrap()
            .iter()
            .any(|x| x.name() == o.name() && x.resource_version() >= o.resource_version())
    };
    let reg = inf
        .add_handler(
            HandlerFns::new()
                .on_add(move |o: Arc<DynamicObject>, _| {
                    if !check(&s1, &o) {
                        b1.lock().unwrap().push(format!("add {}", o.name()));
                    }
                })
                .on_update(move |_, o: Arc<DynamicObject>| {
                    if !check(&s2, &o) {
                        b2.lock().unwrap().push(format!("update {}", o.name()));
                    }
                })
                .on_delete(move |d: ObjectOrTombstone<DynamicObject>| {
                    if s3
                        .get_by_name(d.object().namespace(), d.object().name())
                        .is_some()
                    {
                        b3.lock()
                            .unwrap()
                            .push(format!("delete {}", d.object().name()));
                    }
                }),
        )
        .unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(DEADLINE)).await.unwrap();
    put_cm(&c, &ns, "a", &[("app", "x")]).await;
    put_cm(&c, &ns, "b", &[("app", "y")]).await;
    eventually::<E>("a and b cached", DEADLINE, || store.len() == 2).await;
    let names = |v: Vec<Arc<DynamicObject>>| {
        v.iter()
            .map(|o| o.name().to_string())
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        names(store.by_index("app", "x").unwrap()),
        ["a".to_string()].into()
    );
    assert_eq!(
        store
            .list_index_values("app")
            .unwrap()
            .into_iter()
            .collect::<BTreeSet<_>>(),
        ["x".to_string(), "y".to_string()].into()
    );
    // Move a from x to y: the x bucket disappears.
    put_cm(&c, &ns, "a", &[("app", "y")]).await;
    eventually::<E>("a moved", DEADLINE, || {
        store
            .get(&format!("{ns}/a"))
            .is_some_and(|o| o.label("app") == Some("y"))
    })
    .await;
    assert!(store.by_index("app", "x").unwrap().is_empty());
    assert_eq!(
        store.list_index_values("app").unwrap(),
        vec!["y".to_string()]
    );
    assert_eq!(store.index_keys("app", "y").unwrap().len(), 2);
    delete(&c, "configmaps", &ns, "b").await;
    eventually::<E>("b gone", DEADLINE, || {
        store.get(&format!("{ns}/b")).is_none()
    })
    .await;
    assert_eq!(
        names(store.by_index("app", "y").unwrap()),
        ["a".to_string()].into()
    );
    assert!(matches!(
        store.by_index("nope", "y"),
        Err(IndexError::UnknownIndex { .. })
    ));
    // Adding an index later indexes what is cached.
    inf.add_index(
        "name",
        index_fn(|o: &DynamicObject| informer_runtime::IndexValues::one(o.name())),
    )
    .unwrap();
    assert_eq!(store.by_index("name", "a").unwrap().len(), 1);
    assert!(matches!(
        inf.add_index("app", index_fn(|_: &DynamicObject| Default::default())),
        Err(Error::Index(IndexError::IndexExists { .. }))
    ));
    eventually::<E>("handler done", DEADLINE, || reg.pending() == 0).await;
    sleep::<E>(Duration::from_millis(100)).await;
    assert!(
        bad.lock().unwrap().is_empty(),
        "stale reads: {:?}",
        bad.lock().unwrap()
    );
    inf.shutdown().await;
}

/// The informer is cut off; meanwhile two Secrets are deleted, one created, and etcd compacted.
/// Reconnected, its watch from the old resourceVersion gets 410: it relists and hands the
/// deletions it never saw to the handler as tombstones.
async fn relist_after_compaction_delivers_tombstones<E: Env>(c: Client<E::B>) {
    let ns = format!("compact-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    let secret = |name: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": {"k": "dg=="}})
            .to_string()
    };
    for i in 0..5 {
        let _ = c
            .request(
                http::Method::POST,
                &path("secrets", &ns, None),
                Some(secret(&format!("s-{i}")).into()),
            )
            .await;
    }
    // Cutting it off ends the open watch and holds back new requests until it reconnects.
    let transport = Arc::new(FakeTransport::forwarding(
        c.api::<DynamicObject>(Resource::SECRETS, Some(&ns)),
    ));
    let errors: Arc<Mutex<Vec<Failure>>> = Arc::default();
    let errs = errors.clone();
    let inf = InformerBuilder::<DynamicObject, E::R>::from_transport(
        E::R::default(),
        transport.clone(),
        "secrets",
    )
    .backoff(fast_backoff())
    .on_watch_error(move |f| errs.lock().unwrap().push(f.failure().clone()))
    .build()
    .unwrap();
    let (h, log) = recorder();
    inf.add_handler(h).unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(DEADLINE)).await.unwrap();
    assert_eq!(inf.store().len(), 5);
    eventually::<E>("watching", DEADLINE, || inf.metrics().watches >= 1).await;
    // Past the "very short watch" second, so that ending it is a normal end and the informer
    // watches again from where it was (and meets the compaction) rather than backing off.
    sleep::<E>(Duration::from_millis(1500)).await;
    transport.cut_off(true);
    delete(&c, "secrets", &ns, "s-0").await;
    delete(&c, "secrets", &ns, "s-1").await;
    c.request(
        http::Method::POST,
        &path("secrets", &ns, None),
        Some(secret("s-5").into()),
    )
    .await
    .unwrap();
    shared().cluster.lock().unwrap().compact().expect("compact");
    let relists = inf.metrics().relists;
    transport.cut_off(false);
    let want = server_state(&c, Resource::SECRETS, &ns).await;
    eventually::<E>("store == server after relist", DEADLINE, || {
        store_state(&inf.store()) == want
    })
    .await;
    eventually::<E>("handler saw the deletes", DEADLINE, || {
        fold(&snapshot(&log)) == rv_map(&want)
    })
    .await;
    let seen = snapshot(&log);
    for name in ["s-0", "s-1"] {
        assert!(
            seen.iter()
                .any(|s| matches!(s, Seen::Delete { name: n, tombstone: true, .. } if n == name)),
            "no tombstone for {name}: {seen:?}"
        );
    }
    assert!(inf.metrics().relists > relists, "{:?}", inf.metrics());
    assert!(
        errors
            .lock()
            .unwrap()
            .iter()
            .any(|f| matches!(f, Failure::Expired(_))),
        "no 410 reported: {:?}",
        errors.lock().unwrap()
    );
    inf.shutdown().await;
}

/// kube-apiserver is killed and restarted under a watching informer; afterwards objects change,
/// and the cache and the handler's view converge to the server's state.
async fn converges_after_apiserver_restart<E: Env>(c: Client<E::B>) {
    let ns = format!("restart-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    for i in 0..5 {
        put_cm(&c, &ns, &format!("r-{i}"), &[]).await;
    }
    let inf = builder::<E>(&c, Resource::CONFIGMAPS, &ns).build().unwrap();
    let (h, log) = recorder();
    inf.add_handler(h).unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(DEADLINE)).await.unwrap();
    eventually::<E>("watching", DEADLINE, || inf.metrics().watches >= 1).await;
    {
        let mut tc = shared().cluster.lock().unwrap();
        tc.stop_apiserver().expect("stop apiserver");
        std::thread::sleep(Duration::from_millis(500));
        tc.start_apiserver().expect("start apiserver");
    }
    put_cm(&c, &ns, "r-5", &[]).await;
    put_cm(&c, &ns, "r-1", &[("v", "1")]).await;
    delete(&c, "configmaps", &ns, "r-2").await;
    let want = server_state(&c, Resource::CONFIGMAPS, &ns).await;
    eventually::<E>("store == server", DEADLINE, || {
        store_state(&inf.store()) == want
    })
    .await;
    eventually::<E>("handler == server", DEADLINE, || {
        fold(&snapshot(&log)) == rv_map(&want)
    })
    .await;
    let m = inf.metrics();
    assert!(m.watch_restarts >= 1 && m.watch_errors >= 1, "{m:?}");
    inf.shutdown().await;
}

/// One handler panics on some objects: it goes on with the next ones, the panics are counted,
/// the other handler sees everything (CONFORMANCE 16 against a real server; the scripted
/// `conformance_16_*` test is in `tests/fake.rs`). A third handler is stuck: it holds back
/// nobody (CONFORMANCE 11). Then shutdown: nothing more is delivered, handlers cannot be added,
/// the store stays readable.
///
/// How and why the stuck handler's backlog differs from client-go (`docs/CONFORMANCE.md`,
/// item 11): client-go would buffer every one of the ten updates to `ok-0` for it, without
/// bound; here its backlog is coalesced to one entry per key, so it stays at four entries, and
/// the handler will still hear the latest state of each object when it resumes. Bounded memory
/// under a stalled handler is worth skipping intermediate states, which a controller reading
/// the store does not need.
async fn panicking_handler_does_not_stop_the_others_and_shutdown_stops_delivery<E: Env>(
    c: Client<E::B>,
) {
    let ns = format!("panic-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    let inf = builder::<E>(&c, Resource::CONFIGMAPS, &ns).build().unwrap();
    let survived: Arc<Mutex<Vec<String>>> = Arc::default();
    let s = survived.clone();
    let bomb = inf
        .add_handler(HandlerFns::new().on_add(move |o: Arc<DynamicObject>, _| {
            if o.name().starts_with("boom") {
                panic!("handler panic on {}", o.name());
            }
            s.lock().unwrap().push(o.name().to_string());
        }))
        .unwrap();
    let (h, log) = recorder();
    let calm = inf.add_handler(h).unwrap();
    // A handler stuck in its first notification until released.
    let (release, released) = std::sync::mpsc::channel::<()>();
    let stuck_done: Arc<Mutex<Vec<String>>> = Arc::default();
    let sd = stuck_done.clone();
    let stuck = inf
        .add_handler(HandlerFns::new().on_add(move |o: Arc<DynamicObject>, _| {
            if sd.lock().unwrap().is_empty() {
                let _ = released.recv();
            }
            sd.lock().unwrap().push(o.name().to_string());
        }))
        .unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(DEADLINE)).await.unwrap();
    for name in ["boom-0", "ok-0", "boom-1", "ok-1"] {
        put_cm(&c, &ns, name, &[]).await;
    }
    eventually::<E>("other handler saw all", DEADLINE, || {
        snapshot(&log).len() == 4
    })
    .await;
    // The stuck handler held back nobody; its backlog waits in the informer.
    assert!(stuck_done.lock().unwrap().is_empty());
    assert_eq!(stuck.pending(), 3, "one in flight, three pending");
    eventually::<E>("panicking handler went on", DEADLINE, || {
        survived.lock().unwrap().len() == 2
    })
    .await;
    assert_eq!(bomb.panics(), 2);
    assert_eq!(calm.panics(), 0);
    assert_eq!(inf.metrics().handler_panics, 2);
    assert!(bomb.has_synced() && calm.has_synced());
    // Removal: the removed handler hears nothing more.
    assert!(bomb.remove());
    assert!(!bomb.remove());
    put_cm(&c, &ns, "ok-2", &[]).await;
    eventually::<E>("calm saw ok-2", DEADLINE, || snapshot(&log).len() == 5).await;
    // The stuck handler's backlog stays bounded: one entry per key however many updates.
    assert_eq!(stuck.pending(), 4, "ok-0, boom-1, ok-1, ok-2");
    for v in 0..10 {
        put_cm(&c, &ns, "ok-0", &[("v", &v.to_string())]).await;
    }
    let want = rv_map(&server_state(&c, Resource::CONFIGMAPS, &ns).await);
    eventually::<E>("calm caught up", DEADLINE, || fold(&snapshot(&log)) == want).await;
    assert_eq!(stuck.pending(), 4, "coalesced per key");
    let calm_seen = snapshot(&log).len();
    // Shutdown while the stuck handler is still in its first notification: shutdown waits for
    // it to finish, and drops what it had pending.
    assert!(stuck_done.lock().unwrap().is_empty());
    let store = inf.store();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        release.send(()).unwrap();
    });
    inf.shutdown().await;
    assert_eq!(
        stuck_done.lock().unwrap().len(),
        1,
        "in-flight finished, pending dropped"
    );
    releaser.join().unwrap();
    assert!(inf.is_stopped());
    put_cm(&c, &ns, "ok-3", &[]).await;
    sleep::<E>(Duration::from_millis(500)).await;
    assert_eq!(snapshot(&log).len(), calm_seen, "delivered after shutdown");
    assert_eq!(
        survived.lock().unwrap().len(),
        2,
        "removed handler got more"
    );
    assert_eq!(store.len(), 5);
    assert_eq!(calm.delivered() as usize, calm_seen);
    assert!(matches!(
        inf.add_handler(HandlerFns::new()),
        Err(Error::Stopped { .. })
    ));
}

/// A typed ConfigMap, decoded straight from the API's JSON.
#[derive(Debug, serde::Deserialize)]
struct ConfigMap {
    metadata: informer_core::object::ObjectMeta,
    #[serde(default)]
    data: BTreeMap<String, String>,
}

informer_runtime::impl_object!(ConfigMap);

/// A typed informer over the seeded ConfigMaps, narrowed by a label selector and a field
/// selector, with a transform and a custom index.
async fn typed_objects_with_label_and_field_selectors<E: Env>(c: Client<E::B>) {
    let inf = Informer::<ConfigMap, E::R>::builder_for(&c, Resource::CONFIGMAPS)
        .namespace("seed-1")
        .label_selector("seed=yes")
        .field_selector("metadata.name!=cm-00001")
        .transform(|cm: Arc<ConfigMap>| {
            let mut data = cm.data.clone();
            data.insert("seen".into(), "yes".into());
            Arc::new(ConfigMap {
                metadata: cm.metadata.clone(),
                data,
            })
        })
        .index(
            "i-mod-10",
            index_fn(|cm: &ConfigMap| {
                cm.data
                    .get("i")
                    .and_then(|i| i.parse::<usize>().ok())
                    .map(|i| (i % 10).to_string())
                    .into_iter()
                    .collect()
            }),
        )
        .build()
        .unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(DEADLINE)).await.unwrap();
    let store = inf.store();
    assert_eq!(store.len(), SEED_PER_NAMESPACE - 1, "cm-00001 excluded");
    assert!(store.get("seed-1/cm-00001").is_none());
    let cm = store
        .get("seed-1/cm-00004")
        .expect("cm-00004 (i=4) is in seed-1");
    assert_eq!(cm.data.get("i").map(String::as_str), Some("4"));
    assert_eq!(
        cm.data.get("seen").map(String::as_str),
        Some("yes"),
        "transformed"
    );
    // i = 3k + 1 in seed-1; i % 10 spreads over all ten values, 70 each (one fewer for 1).
    assert_eq!(store.list_index_values("i-mod-10").unwrap().len(), 10);
    assert_eq!(store.by_index("i-mod-10", "4").unwrap().len(), 70);
    assert_eq!(store.by_index("i-mod-10", "1").unwrap().len(), 69);
    inf.shutdown().await;
}

/// A metadata-only informer (client-go's metadatainformer) through the factory: the server
/// sends only metadata (the seeded ConfigMaps' `data` never arrives), labels and selectors work
/// on it, and changes made afterwards (a create, a delete) arrive as metadata too. A full informer of the same
/// resource sits beside it in the same factory (another object type, another informer).
async fn metadata_only_informers_cache_metadata_without_data<E: Env>(c: Client<E::B>) {
    let factory = SharedInformerFactory::<E::R, E::B>::new(c.clone());
    let opts = InformerOptions::new().namespace("seed-2");
    let meta = factory
        .informer_with::<informer_runtime::PartialObjectMetadata>(
            Resource::CONFIGMAPS,
            opts.clone(),
            |b| b.label_index("seed"),
        )
        .unwrap();
    let full = factory
        .informer_with::<DynamicObject>(Resource::CONFIGMAPS, opts, |b| b)
        .unwrap();
    factory.start().unwrap();
    factory.wait_for_cache_sync(Some(DEADLINE)).await.unwrap();
    let store = meta.store();
    assert!(store.len() >= SEED_PER_NAMESPACE, "{}", store.len());
    let one = store.get("seed-2/cm-00002").expect("cm-00002 is in seed-2");
    assert_eq!(
        one.kind.as_deref(),
        Some("PartialObjectMetadata"),
        "the server sent metadata only"
    );
    assert_eq!(one.metadata.labels().get("seed"), Some("yes"));
    let full_one = full.store().get("seed-2/cm-00002").unwrap();
    assert!(
        full_one.fields.get("data").is_some(),
        "the full informer has the data"
    );
    let sel: informer_runtime::Selector = "seed=yes".parse().unwrap();
    assert_eq!(store.select(&sel).len(), full.store().select(&sel).len());
    assert!(store.select(&sel).len() >= SEED_PER_NAMESPACE);
    put_cm(&c, "seed-2", "meta-late", &[("late", "yes")]).await;
    let store2 = store.clone();
    eventually::<E>("the change arrives as metadata", DEADLINE, || {
        store2
            .get("seed-2/meta-late")
            .is_some_and(|o| o.metadata.labels().get("late") == Some("yes"))
    })
    .await;
    // Leave seed-2 as seeded (other scenarios count it), and see the delete arrive too.
    delete(&c, "configmaps", "seed-2", "meta-late").await;
    eventually::<E>("the delete arrives", DEADLINE, || {
        store2.get("seed-2/meta-late").is_none()
    })
    .await;
    factory.shutdown().await;
}

// ---------------------------------------------------------------------------------------------
// Warm restarts (snapshots).

fn snapshot_path(what: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("informer-e2e-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{what}.snap"));
    let _ = std::fs::remove_file(&path);
    path
}

/// name → uid of what the server holds.
async fn server_uids<B: Backend>(
    c: &Client<B>,
    res: Resource,
    ns: &str,
) -> BTreeMap<String, String> {
    let page = c
        .api::<DynamicObject>(res, Some(ns))
        .list_page(&ListRequest::default())
        .await
        .expect("list");
    page.items
        .iter()
        .map(|o| (o.name().to_string(), o.uid().unwrap_or("").to_string()))
        .collect()
}

fn store_uids(store: &informer_runtime::Store<DynamicObject>) -> BTreeMap<String, String> {
    store
        .list()
        .iter()
        .map(|o| (o.name().to_string(), o.uid().unwrap_or("").to_string()))
        .collect()
}

/// An informer with a snapshot file syncs (by listing), shuts down and writes its cache.
/// While it is down, ConfigMaps are added, updated, deleted, and one deleted and created again
/// (a new uid). A new informer given the file resumes from it: synced from the file, its
/// handler's first notifications are the snapshot's objects as initial adds, it never lists,
/// and the changes arrive through its watch: the handler's view, the cache and the uids equal
/// the server's.
async fn warm_restart_resumes_and_sees_changes_made_while_down<E: Env>(c: Client<E::B>) {
    let ns = format!("warm-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    for i in 0..10 {
        put_cm(&c, &ns, &format!("w-{i}"), &[]).await;
    }
    let file = snapshot_path(&format!("warm-{}", E::NAME));
    let first = builder::<E>(&c, Resource::CONFIGMAPS, &ns)
        .snapshot(&file)
        .build()
        .unwrap();
    first.start().unwrap();
    first.wait_for_sync(Some(DEADLINE)).await.unwrap();
    assert_eq!(
        first.snapshot_load(),
        Some(informer_runtime::SnapshotLoad::Missing)
    );
    assert_eq!(first.store().len(), 10);
    first.shutdown().await;
    assert!(file.exists(), "no snapshot written at shutdown");
    let before = first.last_sync_resource_version();

    // Changes while down.
    put_cm(&c, &ns, "w-10", &[]).await;
    put_cm(&c, &ns, "w-11", &[]).await;
    put_cm(&c, &ns, "w-1", &[("v", "2")]).await;
    delete(&c, "configmaps", &ns, "w-2").await;
    delete(&c, "configmaps", &ns, "w-3").await;
    let old_uid = server_uids(&c, Resource::CONFIGMAPS, &ns).await["w-4"].clone();
    delete(&c, "configmaps", &ns, "w-4").await;
    put_cm(&c, &ns, "w-4", &[]).await;

    let second = builder::<E>(&c, Resource::CONFIGMAPS, &ns)
        .snapshot(&file)
        .build()
        .unwrap();
    let (h, log) = recorder();
    second.add_handler(h).unwrap();
    second.start().unwrap();
    second.wait_for_sync(Some(DEADLINE)).await.unwrap();
    match second.snapshot_load() {
        Some(informer_runtime::SnapshotLoad::Resumed {
            resource_version,
            objects,
            ..
        }) => {
            assert_eq!(objects, 10);
            assert_eq!(resource_version, before);
        }
        other => panic!("did not resume: {other:?}"),
    }
    let want = server_state(&c, Resource::CONFIGMAPS, &ns).await;
    let want_uids = server_uids(&c, Resource::CONFIGMAPS, &ns).await;
    assert_ne!(want_uids["w-4"], old_uid);
    eventually::<E>("store == server after resume", DEADLINE, || {
        store_state(&second.store()) == want && store_uids(&second.store()) == want_uids
    })
    .await;
    eventually::<E>("handler view == server after resume", DEADLINE, || {
        fold(&snapshot(&log)) == rv_map(&want)
    })
    .await;
    // Initial adds are the snapshot's objects only (a handler that is behind may hear a later
    // state of one, or nothing of one deleted meanwhile: per-key coalescing); what changed
    // while down arrives from the watch: live adds, and deletes that are not tombstones.
    let seen = snapshot(&log);
    let in_snapshot: BTreeSet<String> = (0..10).map(|i| format!("w-{i}")).collect();
    for s in &seen {
        match s {
            Seen::Add {
                name,
                initial: true,
                ..
            } => {
                assert!(
                    in_snapshot.contains(name),
                    "initial add of {name}: {seen:?}"
                )
            }
            Seen::Add {
                name,
                initial: false,
                ..
            } => {
                assert!(
                    !in_snapshot.contains(name) || name == "w-4",
                    "live add of {name}: {seen:?}"
                )
            }
            Seen::Delete { tombstone, .. } => {
                assert!(!tombstone, "no relist, no tombstone: {seen:?}")
            }
            Seen::Update { .. } => {}
        }
    }
    for name in ["w-10", "w-11"] {
        assert!(
            seen.iter()
                .any(|s| matches!(s, Seen::Add { name: n, initial: false, .. } if n == name)),
            "{name} not added live: {seen:?}"
        );
    }
    let m = second.metrics();
    assert_eq!(m.lists, 0, "a resumed informer does not list: {m:?}");
    assert!(m.watches >= 1, "{m:?}");
    second.shutdown().await;
}

/// A snapshot older than the compaction window: Secrets (no watch cache) change while the
/// informer is down and etcd is compacted. The resumed informer's watch gets 410; it relists
/// at once and the Replace delivers the difference: the deletes it missed as tombstones, the
/// new and changed objects, nothing doubled.
async fn warm_restart_after_compaction_relists_with_tombstones<E: Env>(c: Client<E::B>) {
    let ns = format!("warm-compact-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    let secret = |name: &str, v: &str| {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "labels": {"v": v}}, "data": {"k": "dg=="}})
            .to_string()
    };
    for i in 0..5 {
        let _ = c
            .request(
                http::Method::POST,
                &path("secrets", &ns, None),
                Some(secret(&format!("s-{i}"), "1").into()),
            )
            .await;
    }
    let file = snapshot_path(&format!("warm-compact-{}", E::NAME));
    let first = builder::<E>(&c, Resource::SECRETS, &ns)
        .snapshot(&file)
        .build()
        .unwrap();
    first.start().unwrap();
    first.wait_for_sync(Some(DEADLINE)).await.unwrap();
    let written = first.write_snapshot().await.unwrap();
    assert_eq!(written.objects, 5);
    first.shutdown().await;

    delete(&c, "secrets", &ns, "s-0").await;
    c.request(
        http::Method::PUT,
        &path("secrets", &ns, Some("s-1")),
        Some(secret("s-1", "2").into()),
    )
    .await
    .unwrap();
    c.request(
        http::Method::POST,
        &path("secrets", &ns, None),
        Some(secret("s-5", "1").into()),
    )
    .await
    .unwrap();
    shared().cluster.lock().unwrap().compact().expect("compact");

    let errors: Arc<Mutex<Vec<Failure>>> = Arc::default();
    let errs = errors.clone();
    // Which objects the relist built (the transform sees each object built, and nothing else:
    // no consistency check here, whose server copies it would see too).
    let built: Arc<Mutex<Vec<String>>> = Arc::default();
    let b = built.clone();
    let second = Informer::<DynamicObject, E::R>::builder_for(&c, Resource::SECRETS)
        .namespace(&ns)
        .backoff(fast_backoff())
        .snapshot(&file)
        .transform(move |o| {
            b.lock().unwrap().push(o.name().to_string());
            o
        })
        .on_watch_error(move |f| errs.lock().unwrap().push(f.failure().clone()))
        .build()
        .unwrap();
    let (h, log) = recorder();
    second.add_handler(h).unwrap();
    second.start().unwrap();
    second.wait_for_sync(Some(DEADLINE)).await.unwrap();
    assert!(
        matches!(
            second.snapshot_load(),
            Some(informer_runtime::SnapshotLoad::Resumed { objects: 5, .. })
        ),
        "{:?}",
        second.snapshot_load()
    );
    let want = server_state(&c, Resource::SECRETS, &ns).await;
    eventually::<E>("store == server after 410 + relist", DEADLINE, || {
        store_state(&second.store()) == want
    })
    .await;
    eventually::<E>("handler view == server", DEADLINE, || {
        fold(&snapshot(&log)) == rv_map(&want)
    })
    .await;
    let seen = snapshot(&log);
    assert!(
        seen.iter()
            .any(|s| matches!(s, Seen::Delete { name, tombstone: true, .. } if name == "s-0")),
        "no tombstone for s-0: {seen:?}"
    );
    assert!(
        seen.iter().any(
            |s| matches!(s, Seen::Update { name, v: Some(v), .. } if name == "s-1" && v == "2")
        ),
        "no update of s-1: {seen:?}"
    );
    assert!(
        seen.iter()
            .any(|s| matches!(s, Seen::Add { name, initial: false, .. } if name == "s-5")),
        "no add of s-5: {seen:?}"
    );
    // Unchanged objects are not notified again by the relist (same resourceVersion: a resync
    // nobody asked for).
    let about_s2 = seen.iter().filter(|s| s.name() == "s-2").count();
    assert_eq!(about_s2, 1, "s-2 only as an initial add: {seen:?}");
    assert!(
        errors
            .lock()
            .unwrap()
            .iter()
            .any(|f| matches!(f, Failure::Expired(_))),
        "no 410: {:?}",
        errors.lock().unwrap()
    );
    assert_eq!(second.metrics().lists, 1, "{:?}", second.metrics());
    // The relist took the unchanged objects from the cache: only the changed and the new one
    // were decoded (and so transformed).
    let mut built = built.lock().unwrap().clone();
    built.sort();
    assert_eq!(built, ["s-1", "s-5"]);
    second.shutdown().await;
}

/// A truncated snapshot file and a snapshot of another resource (or other selectors) are
/// refused with their typed error, and the informer lists as if there were none: synced, the
/// cache equals the server's, the handler hears every object once.
async fn warm_restart_refuses_truncated_and_foreign_snapshots<E: Env>(c: Client<E::B>) {
    use informer_core::snapshot::SnapshotError;
    use informer_runtime::SnapshotLoad;
    let ns = "seed-2";
    let want = server_state(&c, Resource::CONFIGMAPS, ns).await;
    let file = snapshot_path(&format!("warm-refused-{}", E::NAME));
    let first = builder::<E>(&c, Resource::CONFIGMAPS, ns)
        .snapshot(&file)
        .build()
        .unwrap();
    first.start().unwrap();
    first.wait_for_sync(Some(DEADLINE)).await.unwrap();
    let w = first.write_snapshot().await.unwrap();
    assert_eq!(w.objects, SEED_PER_NAMESPACE);
    first.shutdown().await;
    let whole = std::fs::read(&file).unwrap();

    // Truncated.
    std::fs::write(&file, &whole[..whole.len() * 2 / 3]).unwrap();
    let cut = builder::<E>(&c, Resource::CONFIGMAPS, ns)
        .snapshot(&file)
        .build()
        .unwrap();
    let (h, log) = recorder();
    cut.add_handler(h).unwrap();
    cut.start().unwrap();
    cut.wait_for_sync(Some(DEADLINE)).await.unwrap();
    assert_eq!(
        cut.snapshot_load(),
        Some(SnapshotLoad::Refused(SnapshotError::Truncated))
    );
    assert_eq!(store_state(&cut.store()), want);
    eventually::<E>("handler got the list", DEADLINE, || {
        fold(&snapshot(&log)) == rv_map(&want)
    })
    .await;
    assert_eq!(cut.metrics().lists, 1);
    cut.shutdown().await;

    // Another resource: the ConfigMaps' snapshot offered to a Secrets informer.
    std::fs::write(&file, &whole).unwrap();
    let other = builder::<E>(&c, Resource::SECRETS, ns)
        .snapshot(&file)
        .build()
        .unwrap();
    other.start().unwrap();
    other.wait_for_sync(Some(DEADLINE)).await.unwrap();
    assert!(
        matches!(
            other.snapshot_load(),
            Some(SnapshotLoad::Refused(SnapshotError::OtherResource { .. }))
        ),
        "{:?}",
        other.snapshot_load()
    );
    assert_eq!(
        store_state(&other.store()),
        server_state(&c, Resource::SECRETS, ns).await
    );
    assert_eq!(other.metrics().lists, 1);
    other.shutdown().await;

    // The same resource with another selector.
    std::fs::write(&file, &whole).unwrap();
    let narrowed = builder::<E>(&c, Resource::CONFIGMAPS, ns)
        .label_selector("seed=yes")
        .snapshot(&file)
        .build()
        .unwrap();
    narrowed.start().unwrap();
    narrowed.wait_for_sync(Some(DEADLINE)).await.unwrap();
    assert_eq!(
        narrowed.snapshot_load(),
        Some(SnapshotLoad::Refused(SnapshotError::OtherSelectors))
    );
    assert_eq!(narrowed.metrics().lists, 1);
    narrowed.shutdown().await;
    let _ = std::fs::remove_file(&file);
}

/// The event recorder against the API server: an event about a ConfigMap is created with its
/// involvedObject and reporter; the same event again bumps that Event's `count` (one object,
/// not three); another reason is another Event; the writes happen off the caller's path.
async fn events_are_written_counted_and_grouped<E: Env>(c: Client<E::B>) {
    use informer_runtime::events::{EventType, Recorder, Reporter, reference_to};
    let ns = format!("events-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    put_cm(&c, &ns, "subject", &[]).await;
    let cm: DynamicObject = c
        .api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns))
        .get("subject")
        .await
        .unwrap();
    let recorder = Recorder::new(
        &E::R::default(),
        c.clone(),
        Reporter {
            controller: "greeter.example.com".into(),
            instance: "replica-1".into(),
        },
    )
    .unwrap();
    let about = reference_to(&Resource::CONFIGMAPS, &cm);
    for _ in 0..3 {
        assert!(recorder.publish(
            about.clone(),
            EventType::Warning,
            "FailedSync",
            "Reconcile",
            "could not sync"
        ));
    }
    assert!(recorder.publish(about, EventType::Normal, "Synced", "Reconcile", "done"));
    let t0 = Instant::now();
    while recorder.written() < 4 {
        assert_eq!(recorder.failed(), 0, "no write fails");
        assert!(
            t0.elapsed() < DEADLINE,
            "events written: {}",
            recorder.written()
        );
        sleep::<E>(Duration::from_millis(20)).await;
    }
    let events = c.api::<DynamicObject>(Resource::EVENTS, Some(&ns));
    let list = events.list_page(&ListRequest::default()).await.unwrap();
    let mut seen: Vec<(String, u64)> = list
        .items
        .iter()
        .map(|e| {
            let v = serde_json::to_value(&**e).unwrap();
            assert_eq!(v["involvedObject"]["uid"], cm.uid().unwrap(), "{v}");
            assert_eq!(v["involvedObject"]["kind"], "ConfigMap");
            assert_eq!(v["reportingComponent"], "greeter.example.com");
            assert_eq!(v["reportingInstance"], "replica-1");
            assert_eq!(v["source"]["component"], "greeter.example.com");
            assert!(v["lastTimestamp"].as_str().unwrap().ends_with('Z'));
            (
                format!(
                    "{} {}",
                    v["type"].as_str().unwrap(),
                    v["reason"].as_str().unwrap()
                ),
                v["count"].as_u64().unwrap(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("Normal Synced".to_string(), 1),
            ("Warning FailedSync".to_string(), 3)
        ]
    );
    assert_eq!((recorder.dropped(), recorder.spam()), (0, 0));
}

// ---------------------------------------------------------------------------------------------
// The Controller (issue 40): fencing, read-your-writes, and a CRD from Rust types.

/// A backend whose Lease requests fail while `cut` is set: a replica partitioned from its
/// election but not from the rest of the API server (the case fencing exists for).
struct LeasePartition<B> {
    inner: Client<B>,
    cut: Arc<std::sync::atomic::AtomicBool>,
}

impl<B: Backend> Backend for LeasePartition<B> {
    fn send(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> informer_http::transport::BoxFuture<
        '_,
        Result<informer_http::backend::HttpResponse, Failure>,
    > {
        if self.cut.load(std::sync::atomic::Ordering::SeqCst)
            && request.uri().path().contains("/leases")
        {
            return Box::pin(async {
                Err(Failure::ConnectionRefused(
                    "partitioned from the lease".into(),
                ))
            });
        }
        self.inner.backend().send(request)
    }
}

fn annotate(writer: &str) -> informer_http::write::Patch<serde_json::Value> {
    informer_http::write::Patch::Merge(json!({"metadata": {"annotations": {"writer": writer}}}))
}

/// Leadership fences work, against the API server: replica A leads and starts a slow
/// reconcile (it would write after 6 s); A is then cut off from the Lease (and only from it),
/// stops leading at its renew deadline and its reconcile is cancelled; a write A's reconcile
/// handed to a task of its own is refused; B acquires once the lease expired and writes.
/// Checked on the server: every write of A has a resourceVersion below the Lease update that
/// made B the holder. Without the fence, A's write lands 6 s after its start, after B took over.
async fn a_replica_that_lost_its_lease_writes_nothing_after_the_new_leader_acquired<E: Env>(
    c: Client<E::B>,
) {
    use informer_runtime::{Action, Controller, LeaderElectionConfig};
    use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
    let ns = format!("fence-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    put_cm(&c, &ns, "subject", &[]).await;
    let election = |who: &str| {
        let mut e = LeaderElectionConfig::new(who);
        e.lease_duration = Duration::from_secs(3);
        e.renew_deadline = Duration::from_secs(2);
        e.retry_period = Duration::from_millis(500);
        e
    };
    // The Lease's history, to find the resourceVersion at which B became the holder.
    let leases = Informer::<DynamicObject, E::R>::builder_for(&c, Resource::LEASES)
        .namespace(ns.clone())
        .build()
        .unwrap();
    let b_acquired: Arc<Mutex<Option<u64>>> = Arc::default();
    let b2 = b_acquired.clone();
    leases
        .add_handler(
            HandlerFns::new().on_update(move |_, new: Arc<DynamicObject>| {
                let v = serde_json::to_value(&*new).unwrap();
                if v["spec"]["holderIdentity"] == "b" {
                    let mut at = b2.lock().unwrap();
                    if at.is_none() {
                        *at = Some(rv(&new));
                    }
                }
            }),
        )
        .unwrap();
    leases.start().unwrap();
    leases.wait_for_sync(Some(DEADLINE)).await.unwrap();

    let cut = Arc::new(AtomicBool::new(false));
    let partitioned = Client::new(
        LeasePartition {
            inner: c.clone(),
            cut: cut.clone(),
        },
        c.config().clone(),
    );
    let a_writes: Arc<Mutex<Vec<Result<u64, String>>>> = Arc::default();
    let a_started = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = |flag: Arc<AtomicBool>| async move {
        while !flag.load(SeqCst) {
            sleep::<E>(Duration::from_millis(20)).await;
        }
    };
    let cms = |client: &Client<_>| {
        Informer::<DynamicObject, E::R>::builder_for(client, Resource::CONFIGMAPS)
            .namespace(ns.clone())
            .build()
            .unwrap()
    };
    let a = Controller::new(&partitioned, cms(&partitioned))
        .leader_election(&ns, "fence", election("a"))
        .shutdown_grace(Duration::from_millis(200))
        .shutdown_on(stopped(stop.clone()));
    let a_stats = a.stats_handle();
    let (w, started) = (a_writes.clone(), a_started.clone());
    let rt = E::R::default();
    let a_done = {
        let (tx, rx) = async_channel::bounded(1);
        let run = a.run(move |o: Arc<DynamicObject>, ctx| {
            let (w, started) = (w.clone(), started.clone());
            async move {
                if o.name() != "subject" {
                    return Ok::<_, String>(Action::Done);
                }
                started.store(true, SeqCst);
                // A write that escapes the reconcile: the fence, not the cancellation, stops it.
                let escaped = ctx.client().clone();
                let ns = o.namespace().unwrap().to_string();
                let ns2 = ns.clone();
                let w2 = w.clone();
                E::R::default()
                    .spawn(Box::pin(async move {
                        sleep::<E>(Duration::from_secs(6)).await;
                        let api = escaped.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns2));
                        let r = api
                            .patch("subject", &annotate("a-escaped"), &Default::default())
                            .await;
                        w2.lock()
                            .unwrap()
                            .push(r.map(|o| rv(&o)).map_err(|e| e.to_string()));
                    }))
                    .unwrap();
                sleep::<E>(Duration::from_secs(6)).await;
                let api = ctx
                    .client()
                    .api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns));
                let r = api
                    .patch("subject", &annotate("a"), &Default::default())
                    .await;
                w.lock()
                    .unwrap()
                    .push(r.map(|o| rv(&o)).map_err(|e| e.to_string()));
                Ok(Action::Done)
            }
        });
        rt.spawn(Box::pin(async move {
            let _ = tx.send(run.await.map_err(|e| e.to_string())).await;
        }))
        .unwrap();
        rx
    };
    eventually::<E>("A leads and reconciles", DEADLINE, || {
        a_started.load(SeqCst)
    })
    .await;
    // B, standing by.
    let b_wrote = Arc::new(AtomicBool::new(false));
    let b_cms = Informer::<DynamicObject, E::R>::builder_for(&c, Resource::CONFIGMAPS)
        .namespace(ns.clone())
        .build()
        .unwrap();
    let b = Controller::new(&c, b_cms)
        .leader_election(&ns, "fence", election("b"))
        .shutdown_on(stopped(stop.clone()));
    let bw = b_wrote.clone();
    let b_done = {
        let (tx, rx) = async_channel::bounded(1);
        let run = b.run(move |o: Arc<DynamicObject>, ctx| {
            let bw = bw.clone();
            async move {
                if o.name() == "subject" {
                    let api = ctx
                        .client()
                        .api::<DynamicObject>(Resource::CONFIGMAPS, o.namespace());
                    api.patch("subject", &annotate("b"), &Default::default())
                        .await
                        .map_err(|e| e.to_string())?;
                    bw.store(true, SeqCst);
                }
                Ok::<_, String>(Action::Done)
            }
        });
        rt.spawn(Box::pin(async move {
            let _ = tx.send(run.await.map_err(|e| e.to_string())).await;
        }))
        .unwrap();
        rx
    };
    cut.store(true, SeqCst);
    eventually::<E>("B takes over and writes", DEADLINE, || b_wrote.load(SeqCst)).await;
    // Past the point where A's writes would have landed.
    sleep::<E>(Duration::from_secs(7)).await;
    let acquired = b_acquired.lock().unwrap().expect("the Lease went to b");
    let writes = a_writes.lock().unwrap().clone();
    for at in writes.iter().flatten() {
        assert!(
            *at < acquired,
            "A wrote at {at}, after B acquired at {acquired}: {writes:?}"
        );
    }
    assert!(
        writes
            .iter()
            .any(|w| matches!(w, Err(e) if e.contains("refused"))),
        "the escaped write was refused: {writes:?}"
    );
    let stats = a_stats.get();
    assert!(
        stats.cancelled >= 1,
        "A's reconcile was cancelled: {stats:?}"
    );
    assert!(stats.fenced_writes >= 1, "{stats:?}");
    stop.store(true, SeqCst);
    a_done.recv().await.unwrap().unwrap();
    b_done.recv().await.unwrap().unwrap();
    leases.shutdown().await;
}

/// The watch of `inner`, each event of a marked object held back 1.5 s (a slow watch: the
/// runtime is not blocked meanwhile).
struct SlowMarks<E: Env> {
    inner: informer_http::Api<DynamicObject, E::B>,
    _e: std::marker::PhantomData<fn() -> E>,
}

impl<E: Env> informer_http::Transport<DynamicObject> for SlowMarks<E> {
    fn list<'a>(
        &'a self,
        request: &'a ListRequest,
    ) -> informer_http::transport::BoxFuture<
        'a,
        Result<informer_core::protocol::ListPage<DynamicObject>, Failure>,
    > {
        informer_http::Transport::list(&self.inner, request)
    }

    fn watch<'a>(
        &'a self,
        request: &'a informer_core::protocol::WatchRequest,
    ) -> informer_http::transport::BoxFuture<
        'a,
        Result<
            informer_http::transport::BoxStream<
                'static,
                informer_core::protocol::WatchEvent<DynamicObject>,
            >,
            Failure,
        >,
    > {
        Box::pin(async move {
            let events = informer_http::Transport::watch(&self.inner, request).await?;
            let slowed = events.then(|ev| async move {
                use informer_core::protocol::WatchEvent as W;
                if let W::Added(o) | W::Modified(o) = &ev {
                    let v = serde_json::to_value(&**o).unwrap();
                    if v["metadata"]["annotations"]["marked"].is_string() {
                        E::R::default().sleep(Duration::from_millis(1500)).await;
                    }
                }
                ev
            });
            Ok(Box::pin(slowed) as informer_http::transport::BoxStream<'static, _>)
        })
    }
}

/// Read-your-writes: a reconcile that marks its object and asks to run again at once finds
/// its mark in the cache the next time, though the watch is slowed (a transport holding each
/// marked event back 1.5 s, blocking nothing): one write. With the wait turned off, the same
/// controller acts on the stale cache and writes again.
async fn a_reconcile_reads_its_own_last_write<E: Env>(c: Client<E::B>) {
    use informer_runtime::{Action, Controller};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    let ns = format!("ryw-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    for (bound, name) in [
        (Duration::from_secs(5), "guarded"),
        (Duration::ZERO, "unguarded"),
    ] {
        put_cm(&c, &ns, name, &[]).await;
        let writes = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let slowed = SlowMarks::<E> {
            inner: c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns)),
            _e: std::marker::PhantomData,
        };
        let inf = informer_runtime::InformerBuilder::<DynamicObject, E::R>::from_transport(
            E::R::default(),
            Arc::new(slowed),
            "slowed configmaps",
        )
        .serving(Resource::CONFIGMAPS)
        .field_selector(format!("metadata.name={name}"))
        .build()
        .unwrap();
        let flag = stop.clone();
        let controller = Controller::new(&c, inf)
            .read_your_writes(bound)
            .shutdown_on(async move {
                while !flag.load(SeqCst) {
                    sleep::<E>(Duration::from_millis(20)).await;
                }
            });
        let stats = controller.stats_handle();
        let w = writes.clone();
        let (tx, rx) = async_channel::bounded(1);
        let run = controller.run(move |o: Arc<DynamicObject>, ctx| {
            let w = w.clone();
            async move {
                let v = serde_json::to_value(&*o).unwrap();
                if v["metadata"]["annotations"]["marked"].is_string() {
                    return Ok::<_, String>(Action::Done);
                }
                let api = ctx
                    .client()
                    .api::<DynamicObject>(Resource::CONFIGMAPS, o.namespace());
                let n = w.fetch_add(1, SeqCst) + 1;
                let patch = informer_http::write::Patch::Merge(
                    json!({"metadata": {"annotations": {"marked": n.to_string()}}}),
                );
                api.patch(o.name(), &patch, &Default::default())
                    .await
                    .map_err(|e| e.to_string())?;
                // Look again at once: the mark must be seen.
                Ok(Action::RequeueAfter(Duration::ZERO))
            }
        });
        E::R::default()
            .spawn(Box::pin(async move {
                let _ = tx.send(run.await.map_err(|e| e.to_string())).await;
            }))
            .unwrap();
        eventually::<E>("marked", DEADLINE, || writes.load(SeqCst) >= 1).await;
        sleep::<E>(Duration::from_secs(4)).await;
        stop.store(true, SeqCst);
        rx.recv().await.unwrap().unwrap();
        let n = writes.load(SeqCst);
        if bound.is_zero() {
            assert!(
                n >= 2,
                "without the wait the stale cache is acted on: {n} writes"
            );
        } else {
            assert_eq!(n, 1, "one write: {:?}", stats.get());
            assert!(stats.get().waited_for_writes >= 1);
            assert_eq!(stats.get().write_waits_timed_out, 0);
        }
    }
}

/// A CRD generated from Rust types (`informer_http::crd`) is accepted by the API server,
/// becomes Established, and serves objects whose spec and status round-trip, status through
/// its subresource.
async fn a_crd_generated_from_rust_types_is_accepted_and_served<E: Env>(c: Client<E::B>) {
    use informer_http::crd::Crd;
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct WidgetSpec {
        /// What to say.
        message: String,
        replicas: u32,
        labels: BTreeMap<String, String>,
        note: Option<String>,
    }
    #[derive(serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "camelCase")]
    struct WidgetStatus {
        phase: Option<String>,
        observed_generation: Option<i64>,
    }
    let kind = format!("Widget{}", E::NAME.to_uppercase());
    let plural = format!("widgets{}", E::NAME);
    let res = Resource::new("example.com", "v1", kind, plural.clone(), true);
    let crd = Crd::new(&res)
        .spec::<WidgetSpec>()
        .status::<WidgetStatus>()
        .to_json()
        .unwrap();
    let crds = c.api::<DynamicObject>(Resource::CUSTOMRESOURCEDEFINITIONS, None);
    let obj: DynamicObject = serde_json::from_value(crd).unwrap();
    match crds.create(&obj, &Default::default()).await {
        Ok(_) => {}
        Err(e) if e.is_conflict() => {}
        Err(e) => panic!("the API server refused the generated CRD: {e}"),
    }
    let name = format!("{plural}.example.com");
    let t0 = Instant::now();
    loop {
        let got = crds.get(&name).await.unwrap();
        let v = serde_json::to_value(&got).unwrap();
        let established = v["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True")
        });
        if established {
            break;
        }
        assert!(t0.elapsed() < DEADLINE, "not established: {v}");
        sleep::<E>(Duration::from_millis(100)).await;
    }
    let ns = format!("crd-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    let widgets = c.api::<DynamicObject>(res.clone(), Some(&ns));
    let w: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": res.kind,
        "metadata": {"name": "w1", "namespace": ns},
        "spec": {"message": "hi", "replicas": 3, "labels": {"a": "b"}},
        "status": {"phase": "ignored on create"}
    }))
    .unwrap();
    // A fresh API group may take a moment to be served.
    let t0 = Instant::now();
    let created = loop {
        match widgets.create(&w, &Default::default()).await {
            Ok(o) => break o,
            Err(e) if e.is_conflict() => break widgets.get("w1").await.unwrap(),
            Err(e) if t0.elapsed() < DEADLINE && e.is_not_found() => {
                sleep::<E>(Duration::from_millis(200)).await
            }
            Err(e) => panic!("{e}"),
        }
    };
    let v = serde_json::to_value(&created).unwrap();
    assert_eq!(v["spec"]["replicas"], 3);
    assert!(
        v.get("status").is_none(),
        "status only through its subresource: {v}"
    );
    let patched = widgets
        .patch_status(
            "w1",
            &informer_http::write::Patch::Merge(
                json!({"status": {"phase": "Ready", "observedGeneration": 1}}),
            ),
            &Default::default(),
        )
        .await
        .unwrap();
    let v = serde_json::to_value(&patched).unwrap();
    assert_eq!(v["status"]["phase"], "Ready");
    // A field the schema does not know is pruned by the server.
    let pruned = widgets
        .patch(
            "w1",
            &informer_http::write::Patch::Merge(json!({"spec": {"unknown": 1}})),
            &Default::default(),
        )
        .await
        .unwrap();
    assert!(
        serde_json::to_value(&pruned).unwrap()["spec"]
            .get("unknown")
            .is_none()
    );
}

// ---------------------------------------------------------------------------------------------
// Finalizers.

const FINALIZER: &str = "informer-rs.io/cleanup";
const OTHER: &str = "other.example.com/keep";

/// One call of `finalizer` whose reconcile answers `outcome`: its result and the events the
/// reconcile was called with.
async fn finalize<B: Backend>(
    api: &informer_http::Api<DynamicObject, B>,
    obj: &DynamicObject,
    outcome: Result<informer_runtime::Action, &str>,
) -> (
    Result<informer_runtime::Action, informer_runtime::FinalizerError<String>>,
    Vec<(&'static str, Arc<DynamicObject>)>,
) {
    use informer_runtime::FinalizerEvent;
    let mut seen = Vec::new();
    let result = informer_runtime::finalizer(api, FINALIZER, Arc::new(obj.clone()), |event| {
        seen.push(match event {
            FinalizerEvent::Apply(o) => ("apply", o),
            FinalizerEvent::Cleanup(o) => ("cleanup", o),
        });
        async move { outcome.map_err(str::to_string) }
    })
    .await;
    (result, seen)
}

fn finalizers_of(o: &DynamicObject) -> Vec<String> {
    o.finalizers()
        .unwrap()
        .iter()
        .map(|f| f.to_string())
        .collect()
}

/// Another controller's JSON patch of the finalizers.
async fn patch_finalizers<B: Backend>(
    api: &informer_http::Api<DynamicObject, B>,
    name: &str,
    ops: serde_json::Value,
) -> DynamicObject {
    use informer_http::write::{Patch, PatchParams};
    api.patch(name, &Patch::Json(&ops), &PatchParams::default())
        .await
        .unwrap_or_else(|e| panic!("patch {name} with {ops}: {e}"))
}

/// `finalizer` against the API server, step by step: it adds the finalizer and applies on the
/// object the server returned (through an all-namespaces Api: the object's namespace is used);
/// an invalid name is a typed error before any write; once the ConfigMap is deleted (it stays,
/// with a deletionTimestamp) a failing cleanup keeps the finalizer, a cleanup asking to come
/// back keeps it too, a successful one removes ours and leaves another controller's; the
/// object goes once the last finalizer does. A concurrent change between the read and the
/// patch (to an empty list, to a non-empty list, and moving ours before the removal) is
/// `FinalizerError::Conflict`, and the other writer's finalizers are all still there.
async fn finalizer_adds_cleans_up_removes_and_never_clobbers<E: Env>(c: Client<E::B>) {
    use informer_runtime::{Action, FinalizerError, FinalizerPatch};
    use serde_json::json;
    let ns = format!("finalizer-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    let api = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns));
    let all_namespaces = c.api::<DynamicObject>(Resource::CONFIGMAPS, None);

    // Added before the first apply; apply sees the object with it.
    put_cm(&c, &ns, "guarded", &[]).await;
    let cm = api.get("guarded").await.unwrap();
    let invalid = informer_runtime::finalizer(&api, "cleanup", Arc::new(cm.clone()), |_| async {
        Ok::<_, String>(Action::Done)
    })
    .await;
    assert!(
        matches!(invalid, Err(FinalizerError::InvalidName(_))),
        "{invalid:?}"
    );
    let (r, seen) = finalize(&all_namespaces, &cm, Ok(Action::Done)).await;
    assert_eq!(r.unwrap(), Action::Done);
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].0, "apply");
    assert_eq!(finalizers_of(&seen[0].1), [FINALIZER]);
    let cm = api.get("guarded").await.unwrap();
    assert_eq!(finalizers_of(&cm), [FINALIZER]);
    // Already there: apply only, no write.
    let (r, seen) = finalize(&api, &cm, Ok(Action::RequeueAfter(Duration::from_secs(5)))).await;
    assert_eq!(r.unwrap(), Action::RequeueAfter(Duration::from_secs(5)));
    assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), ["apply"]);
    assert_eq!(
        api.get("guarded").await.unwrap().resource_version(),
        cm.resource_version()
    );

    // Another controller's finalizer joins; the ConfigMap is deleted and stays.
    patch_finalizers(
        &api,
        "guarded",
        json!([{"op": "add", "path": "/metadata/finalizers/-", "value": OTHER}]),
    )
    .await;
    let pending = api
        .delete("guarded", &Default::default())
        .await
        .unwrap()
        .expect("held by finalizers");
    assert!(pending.deletion_timestamp().unwrap().is_some());
    assert_eq!(finalizers_of(&pending), [FINALIZER, OTHER]);

    // A failing cleanup keeps our finalizer; one not finished yet too.
    let (r, seen) = finalize(&api, &pending, Err("cloud API down")).await;
    assert!(
        matches!(&r, Err(FinalizerError::Cleanup(e)) if e == "cloud API down"),
        "{r:?}"
    );
    assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), ["cleanup"]);
    let (r, _) = finalize(
        &api,
        &pending,
        Ok(Action::RequeueAfter(Duration::from_secs(1))),
    )
    .await;
    assert_eq!(r.unwrap(), Action::RequeueAfter(Duration::from_secs(1)));
    let still = api.get("guarded").await.unwrap();
    assert_eq!(finalizers_of(&still), [FINALIZER, OTHER]);
    // The retry succeeds: ours goes, the other controller's stays, and so does the object.
    let (r, seen) = finalize(&api, &still, Ok(Action::Done)).await;
    assert_eq!(r.unwrap(), Action::Done);
    assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), ["cleanup"]);
    let after = api.get("guarded").await.unwrap();
    assert_eq!(finalizers_of(&after), [OTHER]);
    // Ours gone: nothing to do, the reconcile is not called.
    let (r, seen) = finalize(&api, &after, Ok(Action::Done)).await;
    assert_eq!(r.unwrap(), Action::Done);
    assert!(seen.is_empty());
    // The other controller lets go; the object is gone.
    patch_finalizers(
        &api,
        "guarded",
        json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
    )
    .await;
    assert!(api.get_opt("guarded").await.unwrap().is_none());

    // Races. Adding to an empty list, read before another controller added its own.
    put_cm(&c, &ns, "raced", &[]).await;
    let stale = api.get("raced").await.unwrap();
    patch_finalizers(
        &api,
        "raced",
        json!([{"op": "add", "path": "/metadata/finalizers", "value": [OTHER]}]),
    )
    .await;
    let (r, seen) = finalize(&api, &stale, Ok(Action::Done)).await;
    assert!(
        matches!(
            &r,
            Err(FinalizerError::Conflict {
                patch: FinalizerPatch::Add,
                ..
            })
        ),
        "{r:?}"
    );
    assert!(r.as_ref().unwrap_err().is_conflict());
    assert!(seen.is_empty(), "no apply after a refused add");
    assert_eq!(finalizers_of(&api.get("raced").await.unwrap()), [OTHER]);
    // Adding to a non-empty list that changed.
    let stale = api.get("raced").await.unwrap();
    patch_finalizers(
        &api,
        "raced",
        json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "third.example.com/x"}]),
    )
    .await;
    let (r, _) = finalize(&api, &stale, Ok(Action::Done)).await;
    assert!(r.as_ref().is_err_and(|e| e.is_conflict()), "{r:?}");
    let fresh = api.get("raced").await.unwrap();
    assert_eq!(finalizers_of(&fresh), [OTHER, "third.example.com/x"]);
    let (r, _) = finalize(&api, &fresh, Ok(Action::Done)).await;
    assert_eq!(r.unwrap(), Action::Done);
    assert_eq!(
        finalizers_of(&api.get("raced").await.unwrap()),
        [OTHER, "third.example.com/x", FINALIZER]
    );
    // Removing after ours moved (another finalizer before it went): refused, nothing lost.
    let stale = api
        .delete("raced", &Default::default())
        .await
        .unwrap()
        .expect("held by finalizers");
    patch_finalizers(
        &api,
        "raced",
        json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
    )
    .await;
    let (r, seen) = finalize(&api, &stale, Ok(Action::Done)).await;
    assert!(
        matches!(
            &r,
            Err(FinalizerError::Conflict {
                patch: FinalizerPatch::Remove,
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(seen.iter().map(|s| s.0).collect::<Vec<_>>(), ["cleanup"]);
    let fresh = api.get("raced").await.unwrap();
    assert_eq!(finalizers_of(&fresh), ["third.example.com/x", FINALIZER]);
    // The retry (cleanup again: it must be idempotent) removes ours only.
    let (r, _) = finalize(&api, &fresh, Ok(Action::Done)).await;
    assert_eq!(r.unwrap(), Action::Done);
    assert_eq!(
        finalizers_of(&api.get("raced").await.unwrap()),
        ["third.example.com/x"]
    );
    patch_finalizers(
        &api,
        "raced",
        json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
    )
    .await;
    assert!(api.get_opt("raced").await.unwrap().is_none());

    // Adding to an object that started being deleted after the read (its finalizers
    // unchanged): refused, no apply.
    put_cm(&c, &ns, "doomed", &[]).await;
    patch_finalizers(
        &api,
        "doomed",
        json!([{"op": "add", "path": "/metadata/finalizers", "value": [OTHER]}]),
    )
    .await;
    let stale = api.get("doomed").await.unwrap();
    api.delete("doomed", &Default::default()).await.unwrap();
    let (r, seen) = finalize(&api, &stale, Ok(Action::Done)).await;
    assert!(r.as_ref().is_err_and(|e| e.is_conflict()), "{r:?}");
    assert!(seen.is_empty(), "no apply after a refused add");
    let fresh = api.get("doomed").await.unwrap();
    assert_eq!(finalizers_of(&fresh), [OTHER]);
    // The retry on the current object: ours was never added, nothing to do.
    let (r, seen) = finalize(&api, &fresh, Ok(Action::Done)).await;
    assert_eq!(r.unwrap(), Action::Done);
    assert!(seen.is_empty());
    patch_finalizers(
        &api,
        "doomed",
        json!([{"op": "remove", "path": "/metadata/finalizers/0"}]),
    )
    .await;
    assert!(api.get_opt("doomed").await.unwrap().is_none());
}

/// `finalizer` as a controller runs it: an informer queues keys, `Workers` reconcile from the
/// store. A created ConfigMap gets the finalizer and is applied; once deleted, the first
/// cleanup fails (the finalizer stays, the key is requeued with backoff), the retry succeeds,
/// and the ConfigMap is gone.
async fn finalizer_under_workers_retries_a_failed_cleanup_until_the_object_is_gone<E: Env>(
    c: Client<E::B>,
) {
    use informer_runtime::{Action, FinalizerEvent, Key, WorkQueue, Workers};
    use std::sync::atomic::{AtomicUsize, Ordering};
    let ns = format!("finalizer-workers-{}", E::NAME);
    ensure_namespace(&c, &ns).await;
    let api = c.api::<DynamicObject>(Resource::CONFIGMAPS, Some(&ns));
    let informer = builder::<E>(&c, Resource::CONFIGMAPS, &ns).build().unwrap();
    let queue = WorkQueue::<Key>::new();
    informer.add_handler(queue.key_handler()).unwrap();
    informer.start().unwrap();
    informer.wait_for_sync(Some(DEADLINE)).await.unwrap();

    let applies = Arc::new(AtomicUsize::new(0));
    let cleanups = Arc::new(AtomicUsize::new(0));
    let store = informer.store();
    let workers = {
        let (applies, cleanups, api) = (applies.clone(), cleanups.clone(), api.clone());
        Workers::<Key, E::R>::spawn(E::R::default(), &queue, 2, move |key: Key| {
            let (applies, cleanups, api) = (applies.clone(), cleanups.clone(), api.clone());
            let obj = store.get(key.as_str());
            async move {
                let Some(obj) = obj else {
                    return Ok(Action::Done);
                };
                informer_runtime::finalizer(&api, FINALIZER, obj, |event| async move {
                    match event {
                        FinalizerEvent::Apply(_) => {
                            applies.fetch_add(1, Ordering::SeqCst);
                            Ok(Action::Done)
                        }
                        FinalizerEvent::Cleanup(_) => {
                            if cleanups.fetch_add(1, Ordering::SeqCst) == 0 {
                                Err("first cleanup fails".to_string())
                            } else {
                                Ok(Action::Done)
                            }
                        }
                    }
                })
                .await
            }
        })
        .unwrap()
    };

    put_cm(&c, &ns, "owned", &[]).await;
    let t0 = Instant::now();
    loop {
        let cm = api.get("owned").await.unwrap();
        if finalizers_of(&cm) == [FINALIZER] && applies.load(Ordering::SeqCst) > 0 {
            break;
        }
        assert!(t0.elapsed() < DEADLINE, "finalizer never added: {cm:?}");
        sleep::<E>(Duration::from_millis(20)).await;
    }
    api.delete("owned", &Default::default()).await.unwrap();
    let t0 = Instant::now();
    while api.get_opt("owned").await.unwrap().is_some() {
        assert!(t0.elapsed() < DEADLINE, "the ConfigMap was never released");
        sleep::<E>(Duration::from_millis(20)).await;
    }
    // One failure, then the retry that released it. A third run is allowed: the key may be
    // reconciled again from a store that has not seen the finalizer go yet (plain `Workers`
    // do not wait for their own writes, the `Controller` does), and cleanup is idempotent.
    let n = cleanups.load(Ordering::SeqCst);
    assert!(n >= 2, "one failure, one retry: {n}");
    workers.shutdown().await;
    informer.shutdown().await;
}
