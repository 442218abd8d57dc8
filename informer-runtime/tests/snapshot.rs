//! Snapshot files against a scripted transport (no cluster), on tokio and on smol: typed
//! errors, periodic and on-demand writes (atomic: no temporary file left), and a restart that
//! resumes from the file without listing.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use informer_core::protocol::{ListPage, ListRequest, WatchEvent, WatchRequest};
use informer_core::snapshot::{Snapshot, SnapshotError, peek_identity};
use informer_http::Transport;
use informer_http::transport::{BoxFuture, BoxStream};
use informer_runtime::{
    DynamicObject, Error, Failure, InformerBuilder, Object, Runtime, SnapshotLoad,
};
use serde_json::json;

fn obj(name: &str, rv: u64) -> Arc<DynamicObject> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()},
            "data": {"k": "v"}
        }))
        .unwrap(),
    )
}

/// Lists answer `items` at rv 5 and are counted; the first watch streams what the test sends
/// (its resourceVersion recorded); later watches never answer.
struct Fake {
    items: Vec<Arc<DynamicObject>>,
    lists: AtomicUsize,
    watch_rvs: Mutex<Vec<String>>,
    watch: Mutex<Option<async_channel::Receiver<WatchEvent<DynamicObject>>>>,
}

fn fake(
    items: Vec<Arc<DynamicObject>>,
) -> (Arc<Fake>, async_channel::Sender<WatchEvent<DynamicObject>>) {
    let (tx, rx) = async_channel::unbounded();
    (
        Arc::new(Fake {
            items,
            lists: AtomicUsize::new(0),
            watch_rvs: Mutex::default(),
            watch: Mutex::new(Some(rx)),
        }),
        tx,
    )
}

impl Transport<DynamicObject> for Fake {
    fn list<'a>(
        &'a self,
        _: &'a ListRequest,
    ) -> BoxFuture<'a, Result<ListPage<DynamicObject>, Failure>> {
        Box::pin(async move {
            self.lists.fetch_add(1, Ordering::SeqCst);
            Ok(ListPage {
                items: self.items.clone(),
                resource_version: "5".into(),
                continue_token: None,
                remaining_item_count: None,
            })
        })
    }

    fn watch<'a>(
        &'a self,
        req: &'a WatchRequest,
    ) -> BoxFuture<'a, Result<BoxStream<'static, WatchEvent<DynamicObject>>, Failure>> {
        Box::pin(async move {
            self.watch_rvs
                .lock()
                .unwrap()
                .push(req.resource_version.clone());
            let rx = self.watch.lock().unwrap().take();
            match rx {
                Some(rx) => Ok(Box::pin(rx) as BoxStream<'static, _>),
                None => std::future::pending().await,
            }
        })
    }
}

trait Env {
    type R: Runtime + Default;
    fn block_on<F: Future>(f: F) -> F::Output;
}

struct TokioEnv;
impl Env for TokioEnv {
    type R = informer_tokio::Tokio;
    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }
}

struct SmolEnv;
impl Env for SmolEnv {
    type R = informer_smol::Smol;
    fn block_on<F: Future>(f: F) -> F::Output {
        smol::block_on(f)
    }
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod on_tokio { $(#[test] fn $name() { <super::TokioEnv as super::Env>::block_on(super::$name::<super::TokioEnv>()) })* }
        mod on_smol { $(#[test] fn $name() { <super::SmolEnv as super::Env>::block_on(super::$name::<super::SmolEnv>()) })* }
    };
}

on_both!(periodic_and_on_demand_snapshots_then_a_restart_resumes_without_listing);

async fn eventually<E: Env>(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        E::R::default().sleep(Duration::from_millis(5)).await;
    }
}

/// The objects in the file, by name → resourceVersion, and its resourceVersion; `None` while
/// there is no file.
fn on_disk(path: &std::path::Path) -> Option<(String, Vec<(String, String)>)> {
    let bytes = std::fs::read(path).ok()?;
    let (identity, _) = peek_identity(&bytes).expect("a whole snapshot");
    let s = Snapshot::<DynamicObject>::decode(&bytes, &identity).expect("decodes");
    let mut items: Vec<_> = s
        .items
        .iter()
        .map(|o| {
            (
                o.name().to_string(),
                o.resource_version().unwrap_or("").to_string(),
            )
        })
        .collect();
    items.sort();
    Some((s.resource_version, items))
}

async fn periodic_and_on_demand_snapshots_then_a_restart_resumes_without_listing<E: Env>() {
    let dir = std::env::temp_dir().join(format!(
        "informer-snapshot-test-{}-{}",
        std::process::id(),
        std::any::type_name::<E>().len()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cache.snap");

    // Without a snapshot file: a typed error.
    let (f, _tx0) = fake(vec![]);
    let plain = InformerBuilder::<DynamicObject, E::R>::from_transport(E::R::default(), f, "fake")
        .build()
        .unwrap();
    assert!(matches!(
        plain.write_snapshot().await,
        Err(Error::NoSnapshotFile)
    ));
    assert_eq!(plain.snapshot_load(), None);
    plain.shutdown().await;

    let (f, tx) = fake(vec![obj("a", 3), obj("b", 4), obj("c", 5)]);
    let first =
        InformerBuilder::<DynamicObject, E::R>::from_transport(E::R::default(), f.clone(), "fake")
            .snapshot(&path)
            .snapshot_every(Duration::from_millis(30))
            .build()
            .unwrap();
    // Nothing to write before the sync.
    assert!(matches!(
        first.write_snapshot().await,
        Err(Error::Snapshot(SnapshotError::NotSynced))
    ));
    first.start().unwrap();
    first
        .wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(first.snapshot_load(), Some(SnapshotLoad::Missing));
    // The periodic writer picks up the synced cache, then a change.
    eventually::<E>("periodic snapshot of the list", || {
        on_disk(&path).is_some_and(|(rv, items)| rv == "5" && items.len() == 3)
    })
    .await;
    tx.send(WatchEvent::Added(obj("d", 6))).await.unwrap();
    eventually::<E>("periodic snapshot after a watch event", || {
        on_disk(&path).is_some_and(|(rv, items)| rv == "6" && items.len() == 4)
    })
    .await;
    tx.send(WatchEvent::Deleted(obj("a", 7))).await.unwrap();
    eventually::<E>("store applied the delete", || first.store().len() == 3).await;
    let w = first.write_snapshot().await.unwrap();
    assert_eq!((w.resource_version.as_str(), w.objects), ("7", 3));
    assert_eq!(on_disk(&path).unwrap().0, "7");
    first.shutdown().await;
    assert_eq!(f.lists.load(Ordering::SeqCst), 1);
    // Atomic writes leave nothing but the file.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names, ["cache.snap"]);

    // A restart: synced from the file, watching from its resourceVersion, no list.
    let (f2, tx2) = fake(vec![]);
    let second =
        InformerBuilder::<DynamicObject, E::R>::from_transport(E::R::default(), f2.clone(), "fake")
            .snapshot(&path)
            .build()
            .unwrap();
    second.start().unwrap();
    second
        .wait_for_sync(Some(Duration::from_secs(10)))
        .await
        .unwrap();
    assert!(matches!(
        second.snapshot_load(),
        Some(SnapshotLoad::Resumed { objects: 3, .. })
    ));
    let mut names: Vec<_> = second
        .store()
        .list()
        .iter()
        .map(|o| o.name().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["b", "c", "d"]);
    eventually::<E>("watching", || !f2.watch_rvs.lock().unwrap().is_empty()).await;
    assert_eq!(*f2.watch_rvs.lock().unwrap(), ["7"]);
    tx2.send(WatchEvent::Added(obj("e", 8))).await.unwrap();
    eventually::<E>("event after resume", || second.store().len() == 4).await;
    assert_eq!(f2.lists.load(Ordering::SeqCst), 0, "resumed without a list");
    second.shutdown().await;
    assert_eq!(on_disk(&path).unwrap().0, "8", "written at shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}
