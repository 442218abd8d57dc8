//! `cargo xtask bench readers`: how long [`Store`] reads take while the informer works, and
//! what reader threads cost the informer's driver. No cluster: a scripted transport hands the
//! driver 100k decoded ConfigMaps of about 1 KB (a namespace index and a label index with ten
//! objects per value), then a relist of 100k changed objects, then watch events.
//!
//! Printed:
//! 1. the heap the runtime's cache costs per object beyond the objects themselves (the core's
//!    tables and the store's two copies of them), right at the sync and again after one watch
//!    event (when the copy readers were not on at the sync has caught up too);
//! 2. `by_index` latency (p50/p99/max, wall clock, one read = one label-index bucket of ten
//!    objects) of two reader threads during the relist of 100k objects, and during a stream
//!    of 100k watch events;
//! 3. the driver's throughput on 100k watch events per run with no reader, with eight reader
//!    threads calling `by_index` in a loop, and with those eight at nice 19; three rounds (`READERS_ROUNDS=n`: n),
//!    interleaved, medians printed. The machine may have fewer cores than threads (this one
//!    has two, shared with other work), so two figures: events per second of the driver
//!    thread's own CPU time (what readers cost the driver's work: shared cache lines, retried
//!    publishes; time spent descheduled or blocked is not in it), and events per second of
//!    wall time, which with the readers at nice 19 shows whether the driver ever waits for
//!    readers (it keeps a core; what is left is the readers'). On a loaded machine both swing
//!    by tens of percent from run to run: compare figures of one run, and print the load.
//!
//! The driver runs on the main thread (a current-thread tokio runtime), so its CPU time is
//! that thread's (`CLOCK_THREAD_CPUTIME_ID`). There are no handlers: the figure is the
//! driver's.

// A counting allocator and two libc calls (thread CPU clock, thread priority).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use informer_bench::{Script, page};
use informer_tokio::core::protocol::{Status, WatchEvent};
use informer_tokio::{DynamicObject, Failure, InformerBuilder, Store, Tokio};

struct Counting;

static HEAP: AtomicUsize = AtomicUsize::new(0);
/// Whether `HEAP` counts: only while the heap is measured. Counting in one shared atomic from
/// every thread would put a contended cache line into every allocation and free of the driver
/// while eight reader threads allocate (each read formats its value and returns a `Vec`),
/// which is the benchmark's cost, not the informer's.
static COUNTING: AtomicBool = AtomicBool::new(true);

// SAFETY: forwards to the system allocator; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            HEAP.fetch_add(l.size(), Relaxed);
        }
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        if COUNTING.load(Relaxed) {
            HEAP.fetch_sub(l.size(), Relaxed);
        }
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        if COUNTING.load(Relaxed) {
            HEAP.fetch_add(new, Relaxed);
            HEAP.fetch_sub(l.size(), Relaxed);
        }
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const OBJECTS: usize = 100_000;
const NAMESPACES: usize = 100;
/// Values of the indexed label: ten objects each.
const BUCKETS: usize = OBJECTS / 10;
const STREAM: usize = 100_000;
const THROUGHPUT: usize = 200_000;
const LATENCY_READERS: usize = 2;
const BUSY_READERS: usize = 8;

fn config_map(id: usize, rv: u64) -> Arc<DynamicObject> {
    let mut data = String::new();
    for k in 0..4 {
        let filler: String = (0..200)
            .map(|i| (b'a' + ((id * 7 + k * 13 + i) % 26) as u8) as char)
            .collect();
        data.push_str(&format!(
            r#"{}"key-{k}.conf":"{filler}""#,
            if k > 0 { "," } else { "" }
        ));
    }
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{id:07}","namespace":"ns-{ns}","uid":"{uid:032x}","resourceVersion":"{rv}","creationTimestamp":"2026-11-22T03:00:00Z","labels":{{"bucket":"b-{bucket}","tier":"{tier}","team":"team-{team}"}}}},"data":{{{data}}}}}"#,
        ns = id % NAMESPACES,
        uid = (id as u128) * 0x9E37_79B9_7F4A_7C15,
        bucket = id % BUCKETS,
        tier = ["frontend", "backend", "data"][id % 3],
        team = id % 17,
    );
    Arc::new(serde_json::from_str(&json).expect("valid ConfigMap JSON"))
}

fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reader threads calling `by_index` on a label-index bucket in a loop until `stop`; each
/// returns its read latencies in nanoseconds and its read count.
fn readers(
    n: usize,
    store: &Store<DynamicObject>,
    stop: &Arc<AtomicBool>,
    nice: bool,
    record: bool,
) -> Vec<std::thread::JoinHandle<(Vec<u32>, u64)>> {
    (0..n)
        .map(|t| {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                if nice {
                    // SAFETY: plain syscalls on this thread.
                    unsafe {
                        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
                    }
                }
                let index = "label:bucket";
                let mut lat = Vec::with_capacity(if record { 4 << 20 } else { 0 });
                let mut reads = 0u64;
                let mut i = t * 7919;
                while !stop.load(Relaxed) {
                    let value = format!("b-{}", i % BUCKETS);
                    let t0 = Instant::now();
                    let got = store.by_index(index, &value).unwrap();
                    let dt = t0.elapsed();
                    std::hint::black_box(got);
                    if record && lat.len() < lat.capacity() {
                        lat.push(dt.as_nanos().min(u32::MAX as u128) as u32);
                    }
                    reads += 1;
                    i += 1;
                }
                (lat, reads)
            })
        })
        .collect()
}

fn join(handles: Vec<std::thread::JoinHandle<(Vec<u32>, u64)>>) -> (Vec<u32>, u64) {
    let mut all = Vec::new();
    let mut reads = 0;
    for h in handles {
        let (lat, r) = h.join().unwrap();
        all.extend(lat);
        reads += r;
    }
    all.sort_unstable();
    (all, reads)
}

fn percentiles(what: &str, lat: &[u32], reads: u64, secs: f64) {
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize] as f64 / 1000.0;
    println!(
        "  {what}: {reads} reads in {secs:.2} s; by_index p50 {:.1} us, p99 {:.1} us, max {:.1} us",
        at(0.5),
        at(0.99),
        *lat.last().unwrap() as f64 / 1000.0
    );
}

/// One throughput run's figures.
#[derive(Default)]
struct Run {
    per_cpu: f64,
    per_wall: f64,
    reads: f64,
    retries: u64,
}

/// Publishes the driver had to retry because a reader held the copy (informer metrics).
fn retries(inf: &informer_tokio::Informer<DynamicObject>) -> u64 {
    inf.metrics().publish_retries
}

fn main() {
    println!(
        "informer-runtime readers benchmark (tokio, current-thread runtime on the main thread; {} cores; load {})",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load()
    );
    let heap0 = HEAP.load(Relaxed);
    let first: Vec<_> = (0..OBJECTS).map(|i| config_map(i, 1)).collect();
    // The objects alone, not the vector holding them.
    let decoded = (HEAP.load(Relaxed) - heap0 - first.capacity() * size_of::<Arc<DynamicObject>>())
        as f64
        / OBJECTS as f64;
    let second: Vec<_> = (0..OBJECTS).map(|i| config_map(i, 2)).collect();
    let events: Vec<_> = (0..STREAM + THROUGHPUT)
        .map(|i| config_map((i * 7) % OBJECTS, 3 + i as u64))
        .collect();
    let (watch_tx, watch_rx) = async_channel::unbounded();
    let (idle_tx, idle_rx) = async_channel::unbounded();
    let second = page(second, "2");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // One watch event after the sync, so that the heap is measured again once every copy
    // has caught up: the same object again (a new `Arc`; the old one stays in `first`), so
    // the objects' heap does not change.
    let nudge = config_map(0, 1);
    rt.block_on(async move {
        let heap_before = HEAP.load(Relaxed);
        // The first page's vector is allocated from here on, so that whether the informer
        // frees it or keeps it, the heap below counts it as the informer leaves it.
        let script = Script::new([page(first.clone(), "1"), second], [idle_rx, watch_rx]);
        let inf = InformerBuilder::from_transport(Tokio::default(), Arc::new(script), "bench")
            .label_index("bucket")
            .build()
            .unwrap();
        inf.start().unwrap();
        inf.wait_for_sync(None).await.unwrap();
        let store = inf.store();
        let tables = (HEAP.load(Relaxed) - heap_before) as f64 / OBJECTS as f64;
        println!(
            "  cache of {OBJECTS} ConfigMaps ({decoded:.0} B decoded each, {NAMESPACES} namespaces, label index of {BUCKETS} values): \
             {tables:.0} B per object beyond the objects = {:.3}x the decoded size in all",
            (decoded + tables) / decoded
        );
        idle_tx
            .send(WatchEvent::Modified(nudge.clone()))
            .await
            .unwrap();
        while !store
            .get("ns-0/cm-0000000")
            .is_some_and(|o| Arc::ptr_eq(&o, &nudge))
        {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(nudge);
        let steady = (HEAP.load(Relaxed) - heap_before) as f64 / OBJECTS as f64;
        println!(
            "  the same after one watch event (both copies up to date): {steady:.0} B per object = {:.3}x",
            (decoded + steady) / decoded
        );
        drop(first);
        // The heap is measured; from here on only times are.
        COUNTING.store(false, Relaxed);
        let sleep = |ms| tokio::time::sleep(Duration::from_millis(ms));

        // 1. Reads during a relist of 100k changed objects.
        let stop = Arc::new(AtomicBool::new(false));
        let handles = readers(LATENCY_READERS, &store, &stop, false, true);
        sleep(20).await;
        let t0 = Instant::now();
        // The idle watch ends in a 410: the reflector relists.
        idle_tx
            .send(WatchEvent::Error(Failure::Expired(Status {
                code: 410,
                reason: "Expired".into(),
                message: "bench".into(),
                ..Default::default()
            })))
            .await
            .unwrap();
        while store.last_sync_resource_version() != "2" {
            sleep(1).await;
        }
        let relist = t0.elapsed().as_secs_f64();
        stop.store(true, Relaxed);
        let (lat, reads) = join(handles);
        println!(
            "1) {LATENCY_READERS} reader threads during a relist of {OBJECTS} changed objects (the relist took {:.0} ms to reach the store)",
            relist * 1000.0
        );
        percentiles("during the relist", &lat, reads, relist);

        // 2. Reads during a stream of watch events.
        let mut events = events.into_iter();
        let applied = |inf: &informer_tokio::Informer<DynamicObject>| inf.metrics().events_applied;
        let stop = Arc::new(AtomicBool::new(false));
        let handles = readers(LATENCY_READERS, &store, &stop, false, true);
        let base = applied(&inf);
        let t0 = Instant::now();
        for e in events.by_ref().take(STREAM) {
            watch_tx.send(WatchEvent::Modified(e)).await.unwrap();
        }
        while applied(&inf) < base + STREAM as u64 {
            sleep(1).await;
        }
        let secs = t0.elapsed().as_secs_f64();
        stop.store(true, Relaxed);
        let (lat, reads) = join(handles);
        println!("2) {LATENCY_READERS} reader threads during {STREAM} watch events ({:.0} events/s)", STREAM as f64 / secs);
        percentiles("during the events", &lat, reads, secs);

        // 3. Driver throughput without and with eight busy readers.
        // `READERS_ROUNDS=n` for more rounds (e.g. to profile the driver), 3 by default.
        let rounds: usize = std::env::var("READERS_ROUNDS")
            .ok()
            .and_then(|n| n.parse().ok())
            .filter(|n| *n > 0)
            .unwrap_or(3);
        println!(
            "3) driver throughput on {} watch events per run, {rounds} rounds of (no readers, {BUSY_READERS} readers, {BUSY_READERS} readers at nice 19) interleaved (load {})",
            THROUGHPUT / 2,
            load()
        );
        // Two batches, sent alternately: every event really changes its object.
        let batches: [Vec<_>; 2] = [
            events.by_ref().take(THROUGHPUT / 2).collect(),
            events.by_ref().take(THROUGHPUT / 2).collect(),
        ];
        let mut turn = 0;
        let mut run = |readers_n: usize, nice: bool| {
            let stop = Arc::new(AtomicBool::new(false));
            let handles = readers(readers_n, &store, &stop, nice, false);
            let batch = batches[turn % 2].clone();
            turn += 1;
            let (inf, watch_tx, stop) = (inf.clone(), watch_tx.clone(), stop.clone());
            async move {
                let base = applied(&inf);
                let retries0 = retries(&inf);
                let (cpu0, t0) = (thread_cpu(), Instant::now());
                for e in batch {
                    watch_tx.send(WatchEvent::Modified(e)).await.unwrap();
                }
                // Sleeping, not spinning: this thread's CPU time is the driver's.
                while applied(&inf) < base + (THROUGHPUT / 2) as u64 {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                let (cpu, wall) = (thread_cpu() - cpu0, t0.elapsed());
                stop.store(true, Relaxed);
                let (_, reads) = join(handles);
                let n = (THROUGHPUT / 2) as f64;
                Run {
                    per_cpu: n / cpu.as_secs_f64(),
                    per_wall: n / wall.as_secs_f64(),
                    reads: reads as f64 / wall.as_secs_f64(),
                    retries: retries(&inf) - retries0,
                }
            }
        };
        let mut results: [Vec<Run>; 3] = Default::default();
        for _ in 0..rounds {
            results[0].push(run(0, false).await);
            results[1].push(run(BUSY_READERS, false).await);
            results[2].push(run(BUSY_READERS, true).await);
        }
        let labels = [
            "no readers".to_string(),
            format!("{BUSY_READERS} readers"),
            format!("{BUSY_READERS} readers at nice 19"),
        ];
        let mut medians = Vec::new();
        for (label, runs) in labels.iter().zip(&mut results) {
            let median = |f: fn(&Run) -> f64, runs: &[Run]| {
                let mut v: Vec<f64> = runs.iter().map(f).collect();
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let m = Run {
                per_cpu: median(|r| r.per_cpu, runs),
                per_wall: median(|r| r.per_wall, runs),
                reads: median(|r| r.reads, runs),
                retries: runs.iter().map(|r| r.retries).sum(),
            };
            println!(
                "  {label} (median of {rounds}): {:.0} events per driver CPU-second, {:.0} events/s wall; {:.0} reads/s; {} publishes retried in all",
                m.per_cpu, m.per_wall, m.reads, m.retries
            );
            medians.push(m);
        }
        println!(
            "  with {BUSY_READERS} readers: {:.0}% of the driver's CPU-time throughput alone; at nice 19: {:.0}% of its CPU-time and {:.0}% of its wall-clock throughput alone",
            100.0 * medians[1].per_cpu / medians[0].per_cpu,
            100.0 * medians[2].per_cpu / medians[0].per_cpu,
            100.0 * medians[2].per_wall / medians[0].per_wall
        );
        println!("  load at the end: {}", load());
        inf.shutdown().await;
    });
}
