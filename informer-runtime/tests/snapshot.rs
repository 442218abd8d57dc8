//! Snapshot files against a scripted transport (no cluster), on tokio and on smol: typed
//! errors, periodic and on-demand writes (atomic: no temporary file left), and a restart that
//! resumes from the file without listing.

mod support;
use support::Env;
use support::fake_transport::{FakeTransport, WatchSender};

use std::sync::Arc;
use std::time::{Duration, Instant};

use informer_core::protocol::WatchEvent;
use informer_core::snapshot::{Snapshot, SnapshotError, peek_identity};
use informer_runtime::{DynamicObject, Error, InformerBuilder, Object, Runtime, SnapshotLoad};
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

/// Lists answer `items` at rv 5 (the transport counts them); the first watch streams what the
/// test sends (the transport records its resourceVersion); later watches never answer.
fn fake(
    items: Vec<Arc<DynamicObject>>,
) -> (
    Arc<FakeTransport<DynamicObject>>,
    WatchSender<DynamicObject>,
) {
    let (f, tx) = FakeTransport::new().list_always(items, "5").watch_channel();
    (Arc::new(f), tx)
}

on_both_runtimes!(
    periodic_and_on_demand_snapshots_then_a_restart_resumes_without_listing,
    a_crash_mid_write_leaves_the_previous_file_valid,
);

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
    assert_eq!(f.lists(), 1);
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
    eventually::<E>("watching", || !f2.watch_resource_versions().is_empty()).await;
    assert_eq!(f2.watch_resource_versions(), ["7"]);
    tx2.send(WatchEvent::Added(obj("e", 8))).await.unwrap();
    eventually::<E>("event after resume", || second.store().len() == 4).await;
    assert_eq!(f2.lists(), 0, "resumed without a list");
    second.shutdown().await;
    assert_eq!(on_disk(&path).unwrap().0, "8", "written at shutdown");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Set in a child process of `a_crash_mid_write_leaves_the_previous_file_valid`: the snapshot
/// file it writes over and over until it is killed.
const CRASH_CHILD: &str = "INFORMER_SNAPSHOT_CRASH_CHILD";

/// 4000 ConfigMaps of about 2 KB: a file that takes a while to write.
fn big_cache() -> Vec<Arc<DynamicObject>> {
    (0..4000)
        .map(|i| {
            Arc::new(
                serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("big-{i}"), "namespace": "ns", "resourceVersion": "5"},
                    "data": {"payload": "x".repeat(2000)}
                }))
                .unwrap(),
            )
        })
        .collect()
}

/// The child: resumes from the file, then changes its cache and writes the file again and
/// again (each write a new resourceVersion), saying "writing" once the loop runs.
async fn crash_child<E: Env>(path: std::path::PathBuf) {
    let (f, tx) = fake(big_cache());
    let inf = InformerBuilder::<DynamicObject, E::R>::from_transport(E::R::default(), f, "fake")
        .snapshot(&path)
        .build()
        .unwrap();
    inf.start().unwrap();
    inf.wait_for_sync(Some(Duration::from_secs(60)))
        .await
        .unwrap();
    // Names and resourceVersions go on from the file's.
    let mut rv: u64 = inf
        .last_sync_resource_version()
        .parse::<u64>()
        .unwrap()
        .max(100);
    let first = rv + 1;
    loop {
        rv += 1;
        tx.send(WatchEvent::Added(obj(&format!("new-{rv}"), rv)))
            .await
            .unwrap();
        let want = rv.to_string();
        eventually::<E>("event applied", || inf.last_sync_resource_version() == want).await;
        inf.write_snapshot().await.unwrap();
        if rv == first {
            println!("writing");
        }
    }
}

/// A process killed (SIGKILL) while it writes its snapshot over and over, at several moments:
/// the file always holds a whole snapshot (the last one renamed into place), which a new
/// informer resumes from; the temporary file the dead writer left is removed at that load.
async fn a_crash_mid_write_leaves_the_previous_file_valid<E: Env>() {
    use std::io::BufRead;
    if let Some(path) = std::env::var_os(CRASH_CHILD) {
        return crash_child::<E>(path.into()).await;
    }
    let runtime = if std::any::type_name::<E>().contains("Tokio") {
        "on_tokio"
    } else {
        "on_smol"
    };
    let dir = std::env::temp_dir().join(format!(
        "informer-snapshot-crash-{}-{runtime}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("cache.snap");

    // A first file, from a list.
    let (f, _tx) = fake(big_cache());
    let first = InformerBuilder::<DynamicObject, E::R>::from_transport(E::R::default(), f, "fake")
        .snapshot(&path)
        .build()
        .unwrap();
    first.start().unwrap();
    first
        .wait_for_sync(Some(Duration::from_secs(60)))
        .await
        .unwrap();
    first.shutdown().await;
    assert_eq!(on_disk(&path).unwrap().0, "5");

    let mut last_rv = 5u64;
    let mut killed_mid_write = 0;
    for round in 0..4u64 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &format!("{runtime}::a_crash_mid_write_leaves_the_previous_file_valid"),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CRASH_CHILD, &path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        while !line.contains("writing") {
            line.clear();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "the child ended before writing"
            );
        }
        let temporaries = || {
            std::fs::read_dir(&dir)
                .unwrap()
                .filter(|e| {
                    let name = e.as_ref().unwrap().file_name();
                    name.to_string_lossy().contains(".tmp-")
                })
                .count()
        };
        if round % 2 == 0 {
            // Mid-write: as soon as its temporary file is there.
            while temporaries() == 0 {
                std::thread::yield_now();
            }
        } else {
            // Anywhere in its loop.
            std::thread::sleep(Duration::from_millis(20 * round));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        if temporaries() > 0 {
            killed_mid_write += 1;
        }

        let (rv, items) = on_disk(&path).expect("the file is still there");
        let rv: u64 = rv.parse().unwrap();
        assert!(rv >= last_rv, "an older snapshot replaced a newer one");
        last_rv = rv;
        // Every snapshot the child wrote holds the list and one object per event up to rv.
        let added = if rv > 5 { rv - 100 } else { 0 };
        assert_eq!(items.len() as u64, 4000 + added, "round {round}");

        let (f, _tx) = fake(vec![]);
        let next =
            InformerBuilder::<DynamicObject, E::R>::from_transport(E::R::default(), f, "fake")
                .snapshot(&path)
                .build()
                .unwrap();
        next.start().unwrap();
        next.wait_for_sync(Some(Duration::from_secs(60)))
            .await
            .unwrap();
        assert!(
            matches!(next.snapshot_load(), Some(SnapshotLoad::Resumed { objects, .. }) if objects as u64 == 4000 + added),
            "{:?}",
            next.snapshot_load()
        );
        // Its shutdown writes the same snapshot back (and waits for it).
        next.shutdown().await;
        assert_eq!(on_disk(&path).unwrap().0, rv.to_string());
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.contains(".tmp-"))
            .collect();
        assert!(names.is_empty(), "temporary files left: {names:?}");
    }
    // The kills at a temporary file did hit writes (the dead writer's file was there).
    assert!(killed_mid_write >= 1, "no kill landed mid-write");
    let _ = std::fs::remove_dir_all(&dir);
}
