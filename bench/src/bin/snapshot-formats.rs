//! The snapshot format on its own, without a cluster: 20,000 ConfigMaps shaped as the
//! kube-apiserver sends them in `cargo xtask bench e2e` (labels, `managedFields`, ~1 KB of
//! data), encoded into a snapshot file, then the `formats` line of the e2e bench (bytes per
//! object and decode time against a JSON array) and where a load's time goes.
//!
//! Last, the same restart in fresh processes (`--resume-once`, run five times): a new process
//! has a heap to fault in, which the restarts inside this one do not.
//!
//! `cargo run --release -p informer-bench --bin snapshot-formats [-- OBJECTS] [--keep PATH]`
//! (`--keep`: the restarts' snapshot file at PATH, left there)
//!
//! `snapshot-formats --resume-once --snapshot PATH [--log] [--smol]`: one restart from the file
//! at PATH in this (fresh) process, on tokio (or smol), its phases printed in seconds since the
//! process started, with `--log` the informer's log too.
//!
//! `snapshot-formats --copy-once --snapshot PATH --objects N`: a floor for such a restart, in
//! this (fresh) process: the file read in 64 KiB pieces and its bytes copied into N objects
//! held in a hash table, nothing decoded, checked or indexed, no runtime and no handler. The
//! bytes are cut evenly, each object in three allocations (an `Arc` and two boxes) as the
//! decoder makes for a `DynamicObject`: the memory any cache that owns its objects writes.

use std::sync::Arc;
use std::time::Instant;

use informer_bench::format_figures;
use informer_core::protocol::{ListPage, ListRequest, WatchEvent, WatchRequest};
use informer_core::snapshot::{Snapshot, SnapshotIdentity, checksum};
use informer_core::{object::DynamicObject, object::RawFields};
use informer_tokio::{Failure, Tokio};

fn configmap(i: usize) -> String {
    let filler: String = (0..1000)
        .map(|k| (b'a' + ((i * 31 + k * 7) % 26) as u8) as char)
        .collect();
    format!(
        r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"cm-{i}","namespace":"bench-{}","uid":"{:08x}-1b2c-4d5e-8f90-{:012x}","resourceVersion":"{}","creationTimestamp":"2026-11-22T23:00:00Z","labels":{{"app":"bench","shard":"{}"}},"managedFields":[{{"manager":"curl","operation":"Update","apiVersion":"v1","time":"2026-11-22T23:00:00Z","fieldsType":"FieldsV1","fieldsV1":{{"f:data":{{".":{{}},"f:payload":{{}}}},"f:metadata":{{"f:labels":{{".":{{}},"f:app":{{}},"f:shard":{{}}}}}}}}}}]}},"data":{{"payload":"{filler}"}}}}"#,
        i % 10,
        i,
        i * 7919,
        1000 + i,
        i % 16
    )
}

fn best<T>(f: impl Fn() -> T) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    if std::env::args().any(|a| a == "--resume-once") {
        return resume_once();
    }
    if std::env::args().any(|a| a == "--copy-once") {
        return copy_once();
    }
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let objects: Vec<Arc<DynamicObject>> = (0..n)
        .map(|i| Arc::new(serde_json::from_str(&configmap(i)).expect("a ConfigMap")))
        .collect();
    let identity = SnapshotIdentity {
        resource: "/v1/configmaps@".into(),
        ..Default::default()
    };
    let snapshot = Snapshot {
        resource_version: "99999".into(),
        items: objects.clone(),
    };
    let path = std::env::temp_dir().join(format!("snapshot-formats-{}.snap", std::process::id()));
    let t = Instant::now();
    let mut bytes = Vec::new();
    snapshot.encode(&identity, &mut bytes).expect("encodes");
    std::fs::write(&path, &bytes).expect("written");
    let write_s = t.elapsed().as_secs_f64();
    format_figures(&objects, &path, write_s);
    // Where a load's time goes (best of 5 each).
    let read_s = best(|| std::fs::read(&path).map(|b| b.len()));
    let sum_s = best(|| checksum(&bytes));
    let texts: Vec<&str> = objects
        .iter()
        .flat_map(|o| [o.metadata.other().as_json(), o.fields.as_json()])
        .collect();
    let scan_s = best(|| texts.iter().all(|t| RawFields::from_json(t).is_ok()));
    let clone_s = best(|| {
        objects
            .iter()
            .map(|o| Arc::new((**o).clone()))
            .collect::<Vec<_>>()
    });
    let seq_s = best(|| Snapshot::<DynamicObject>::decode(&bytes, &identity).is_ok());
    eprintln!(
        "{n} objects, {} bytes: read {read_s:.4} s, checksum {sum_s:.4} s, raw JSON parse \
         (not done at load) {scan_s:.4} s, allocating equal objects {clone_s:.4} s, whole \
         decode on one thread {seq_s:.4} s",
        bytes.len()
    );
    let _ = std::fs::remove_file(&path);
    resume_phases(objects);
}

/// Lists `items` once; its watches never answer.
struct Fake(Vec<Arc<DynamicObject>>);

impl informer_tokio::http::Transport<DynamicObject> for Fake {
    fn list<'a>(
        &'a self,
        _: &'a ListRequest,
    ) -> informer_tokio::http::transport::BoxFuture<'a, Result<ListPage<DynamicObject>, Failure>>
    {
        Box::pin(async move {
            Ok(ListPage {
                items: self.0.clone(),
                resource_version: "99999".into(),
                continue_token: None,
                remaining_item_count: None,
            })
        })
    }

    fn watch<'a>(
        &'a self,
        _: &'a WatchRequest,
    ) -> informer_tokio::http::transport::BoxFuture<
        'a,
        Result<
            informer_tokio::http::transport::BoxStream<'static, WatchEvent<DynamicObject>>,
            Failure,
        >,
    > {
        Box::pin(async move {
            let s: informer_tokio::http::transport::BoxStream<'static, WatchEvent<DynamicObject>> =
                Box::pin(futures_util::stream::pending());
            Ok(s)
        })
    }
}

/// A restart from a snapshot inside one process, on tokio, without a cluster: how long from
/// `start` until the snapshot is loaded (read + decode), the informer has synced (the objects
/// indexed and queued for the handlers), and a handler has had every initial add.
fn resume_phases(objects: Vec<Arc<DynamicObject>>) {
    let n = objects.len();
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    // `--keep PATH`: the restarts' file there, and left there (for a profiler).
    let kept = informer_bench::arg_value("--keep").map(std::path::PathBuf::from);
    let path = kept.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("snapshot-resume-{}.snap", std::process::id()))
    });
    let _ = std::fs::remove_file(&path);
    rt.block_on(async {
        let first = informer_tokio::InformerBuilder::<DynamicObject>::from_transport(
            Tokio::default(),
            Arc::new(Fake(objects)),
            "fake",
        )
        .snapshot(&path)
        .build()
        .expect("built");
        first.start().expect("started");
        first.wait_for_sync(None).await.expect("synced");
        first.shutdown().await;
    });
    for _ in 0..3 {
        let inf = rt.block_on(async {
            informer_tokio::InformerBuilder::<DynamicObject>::from_transport(
                Tokio::default(),
                Arc::new(Fake(Vec::new())),
                "fake",
            )
            .snapshot(&path)
            .build()
            .expect("built")
        });
        let _g = rt.enter();
        let handler = inf
            .add_handler(informer_tokio::HandlerFns::new().on_add(|_: Arc<DynamicObject>, _| {}))
            .expect("a handler");
        let t = Instant::now();
        inf.start().expect("started");
        let wait = |cond: &dyn Fn() -> bool| {
            while !cond() {
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            t.elapsed().as_secs_f64()
        };
        let loaded = wait(&|| inf.snapshot_load().is_some());
        let synced = wait(&|| inf.has_synced());
        let handled = wait(&|| handler.has_synced());
        eprintln!(
            "resume in process: snapshot loaded {loaded:.4} s, informer synced {synced:.4} s, \
             handler had every initial add {handled:.4} s"
        );
        rt.block_on(inf.shutdown());
    }
    drop(rt);
    // The same restart, each in a fresh process.
    let exe = std::env::current_exe().expect("this program's path");
    for _ in 0..5 {
        let out = std::process::Command::new(&exe)
            .arg("--resume-once")
            .arg("--snapshot")
            .arg(&path)
            .output()
            .expect("a child process");
        let text = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            eprintln!("resume in a fresh process failed ({}):\n{text}", out.status);
            continue;
        }
        let phases: Vec<&str> = text
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                l.strip_prefix("phase ").or(l.strip_prefix("memory: "))
            })
            .collect();
        eprintln!("resume in a fresh process: {}", phases.join(", "));
    }
    // The floor: the same file only read and copied into as many objects, in fresh processes.
    for _ in 0..5 {
        let out = std::process::Command::new(&exe)
            .arg("--copy-once")
            .arg("--snapshot")
            .arg(&path)
            .arg("--objects")
            .arg(n.to_string())
            .output()
            .expect("a child process");
        let text = String::from_utf8_lossy(&out.stderr);
        match text
            .lines()
            .find_map(|l| l.trim().strip_prefix("phase copied: "))
        {
            Some(copied) if out.status.success() => eprintln!(
                "the file only read and copied into {n} objects in a fresh process: {copied}"
            ),
            _ => eprintln!(
                "copying in a fresh process failed ({}):\n{text}",
                out.status
            ),
        }
    }
    if kept.is_none() {
        let _ = std::fs::remove_file(&path);
    }
}

/// One restart of a `Fake` informer from `$path` with the runtime crate `$krate` on runtime
/// `$rt`, its handler's sync awaited with `$block_on`: the phases marked on `$run`; the
/// informer is leaked (not shut down: the snapshot at shutdown would be skipped anyway,
/// unchanged, and the file stays as it is for the next process). Evaluates to its
/// `snapshot_load()`. A macro, not a function: the runtime crates have the same API but
/// different types.
macro_rules! restart_once {
    ($krate:ident, $rt:expr, $path:expr, $run:expr, $($block_on:tt)+) => {{
        let inf = $krate::InformerBuilder::<DynamicObject>::from_transport(
            $rt,
            Arc::new(Fake(Vec::new())),
            "fake",
        )
        .snapshot($path)
        .build()
        .expect("built");
        let handler = inf
            .add_handler($krate::HandlerFns::new().on_add(|_: Arc<DynamicObject>, _| {}))
            .expect("a handler");
        inf.start().expect("started");
        $run.mark("started");
        $($block_on)+(handler.wait_for_sync(None)).expect("synced");
        $run.mark("handler synced");
        let load = inf.snapshot_load();
        std::mem::forget(inf);
        load
    }};
}

/// `--resume-once`: one restart from `--snapshot PATH` in this process (see the crate docs),
/// on tokio, or with `--smol` on smol.
fn resume_once() {
    let run = informer_bench::Run::start();
    let path = run.snapshot.clone().expect("--snapshot PATH");
    let load = if std::env::args().any(|a| a == "--smol") {
        restart_once!(
            informer_smol,
            informer_smol::Smol,
            &path,
            run,
            smol::block_on
        )
    } else {
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        let _g = rt.enter();
        let load = restart_once!(informer_tokio, Tokio::default(), &path, run, rt.block_on);
        std::mem::forget(rt);
        load
    };
    let u = informer_bench::Usage::now();
    eprintln!(
        "    memory: RSS {:.1} MB, peak {:.1} MB",
        u.rss_kb as f64 / 1024.0,
        u.hwm_kb as f64 / 1024.0
    );
    assert!(
        matches!(load, Some(informer_tokio::SnapshotLoad::Resumed { .. })),
        "resumed: {load:?}"
    );
}

/// `--copy-once`: the floor described in the crate docs, on this process's main thread.
fn copy_once() {
    use std::io::Read;
    let run = informer_bench::Run::start();
    let path = run.snapshot.clone().expect("--snapshot PATH");
    let n: usize = informer_bench::arg_value("--objects")
        .and_then(|v| v.parse().ok())
        .expect("--objects N");
    let mut file = std::fs::File::open(&path).expect("the snapshot file");
    let len = file.metadata().expect("its size").len() as usize;
    let per = (len / n.max(1)).max(1);
    // Whole objects in each piece, so that none is cut across two reads.
    let mut buf = vec![0u8; per * (64 * 1024 / per).max(1)];
    type Held = (Arc<[u8]>, Box<[u8]>, Box<[u8]>);
    let mut held: std::collections::HashMap<usize, Held> =
        std::collections::HashMap::with_capacity(n);
    loop {
        let got = file.read(&mut buf).expect("read");
        if got == 0 {
            break;
        }
        // A short read ends mid-object rarely; the object is then cut there, which changes
        // nothing measured here.
        for bytes in buf[..got].chunks(per) {
            let (head, rest) = bytes.split_at(bytes.len().min(96));
            let (meta, fields) = rest.split_at(rest.len() / 4);
            held.insert(held.len(), (Arc::from(head), meta.into(), fields.into()));
        }
    }
    run.mark("copied");
    assert!(held.len() >= n, "{} objects from {len} bytes", held.len());
}
