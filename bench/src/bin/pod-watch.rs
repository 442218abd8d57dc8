//! `cargo run --release -p informer-bench --bin pod-watch`: watch throughput on realistic Pods
//! (issue 42, item 4), run by `cargo xtask bench pod-watch [--compare]`.
//!
//! `--pods N` Pods from `testcluster::pods` (as a ReplicaSet makes them and the kubelet updates
//! them, managedFields included, 4–8 KB of JSON each; default 10,000) are listed, then
//! `--events M` (default 1,000,000) `MODIFIED` watch events of their status updates go, as the
//! lines kube-apiserver writes, through what an informer does with each one:
//!
//! - the decode of the line (`informer_http::decode::decode_event`, the transport's own);
//! - the core pipeline (DeltaFIFO → HandleDeltas → the store with its namespace index), as in
//!   `cargo xtask bench core`;
//! - one handler, which reads the new object's name, resourceVersion and `app` label.
//!
//! Event `j` updates Pod `j % N` with status round `1 + (j / N) % R` (`--rounds R`, default 2:
//! the probe times and restart counts move, as the kubelet's updates do) at resourceVersion
//! `N + 1 + j`. The lines are built from templates outside the timed part, in chunks of 20,000
//! (as a transport would hand them over), and freed outside it too.
//!
//! For `DynamicObject` and `CompactObject` (`--object dynamic|compact|both`, default both), it
//! prints events per second (wall), events per CPU-second (one thread: the same), the heap per
//! cached Pod after the list and after every event (a counting global allocator: what the
//! store, its index and the objects hold, the harness's templates not included) against the
//! Pods' JSON bytes, and the machine's floor: the same lines decoded into the same type and
//! stored in a bare `HashMap` of name to `Arc` (the replaced object dropped there): what no
//! informer can do without.
//!
//! `--write-events FILE` writes the list and the templates for client-go's side of the
//! comparison (`bench/peers/client-go/podwatch`): the `N` Pods of the list, one JSON line each,
//! then the `N × R` event lines, round by round, with `@RV@` where the resourceVersion goes.
//! `--report FILE` appends one JSON line per object type with the figures.

#![allow(unsafe_code)] // the counting global allocator

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::{Duration, Instant};

use informer_bench::Usage;
use informer_core::cache::pipeline::Pipeline;
use informer_core::informer::Notification;
use informer_core::object::{CompactObject, DynamicObject, FromJson, Object};
use informer_core::protocol::WatchEvent;
use informer_http::decode::decode_event;
use testcluster::pods::Workload;

struct Counting;

static HEAP: AtomicIsize = AtomicIsize::new(0);

// SAFETY: forwards to the system allocator; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        HEAP.fetch_add(l.size() as isize, Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HEAP.fetch_sub(l.size() as isize, Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        HEAP.fetch_add(new as isize - l.size() as isize, Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn heap() -> isize {
    HEAP.load(Relaxed)
}

const SEED: u64 = 42;
const CHUNK: usize = 20_000;
const PLACEHOLDER: &str = "@RV@";

fn arg(name: &str, default: usize) -> usize {
    informer_bench::arg_value(name)
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

/// The list and the event templates, the same bytes for both object types and for client-go.
struct Workset {
    pods: usize,
    rounds: usize,
    /// The list's Pods (resourceVersion `1 + i`).
    list: Vec<String>,
    /// Event line templates, round-major: (text before the resourceVersion, text after).
    templates: Vec<(String, String)>,
    /// Mean bytes of a listed Pod's JSON.
    json_bytes: f64,
}

impl Workset {
    fn new(pods: usize, rounds: usize) -> Workset {
        let w = Workload::new(SEED, pods);
        let list: Vec<String> = (0..pods)
            .map(|i| w.stored_json(i, 1 + i as u64, true))
            .collect();
        let json_bytes = list.iter().map(String::len).sum::<usize>() as f64 / pods as f64;
        let mut templates = Vec::with_capacity(pods * rounds);
        for round in 1..=rounds as u64 {
            for i in 0..pods {
                let mut pod: serde_json::Value =
                    serde_json::from_str(&w.stored_json(i, 0, true)).expect("a Pod");
                let status: serde_json::Value =
                    serde_json::from_str(&w.status_body(i, round)).expect("a status");
                pod["status"] = status["status"].clone();
                pod["metadata"]["resourceVersion"] = PLACEHOLDER.into();
                // `type` before `object`, as kube-apiserver writes it.
                let line = format!(r#"{{"type":"MODIFIED","object":{pod}}}"#);
                let (before, after) = line.split_once(PLACEHOLDER).expect("the placeholder");
                templates.push((before.to_owned(), after.to_owned()));
            }
        }
        Workset {
            pods,
            rounds,
            list,
            templates,
            json_bytes,
        }
    }

    /// The line of event `j`.
    fn line(&self, j: usize) -> Vec<u8> {
        let (before, after) = &self.templates[j % self.templates.len()];
        let rv = (self.pods + 1 + j).to_string();
        let mut line = Vec::with_capacity(before.len() + rv.len() + after.len());
        line.extend_from_slice(before.as_bytes());
        line.extend_from_slice(rv.as_bytes());
        line.extend_from_slice(after.as_bytes());
        line
    }

    fn write(&self, path: &str) -> std::io::Result<()> {
        let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
        for pod in &self.list {
            writeln!(f, "{pod}")?;
        }
        for (before, after) in &self.templates {
            writeln!(f, "{before}{PLACEHOLDER}{after}")?;
        }
        f.flush()
    }
}

/// What the benchmark needs of an object type: the informer's reads and its `app` label.
trait Pod: Object + FromJson + std::fmt::Debug {
    fn app(&self) -> Option<&str>;
}

impl Pod for DynamicObject {
    fn app(&self) -> Option<&str> {
        informer_core::object::selector::Labels::label(self, "app")
    }
}

impl Pod for CompactObject {
    fn app(&self) -> Option<&str> {
        self.label("app")
    }
}

/// One handler: reads what a controller's handler reads first.
#[derive(Default)]
struct Handler {
    adds: usize,
    updates: usize,
    other: usize,
    bytes: usize,
}

impl Handler {
    fn see<K: Pod>(&mut self, n: &Notification<K>) {
        match n {
            Notification::Add { obj, .. } => {
                self.adds += 1;
                self.bytes += obj.name().len();
            }
            Notification::Update { new, .. } => {
                self.updates += 1;
                self.bytes += new.name().len()
                    + new.resource_version().map_or(0, str::len)
                    + new.app().map_or(0, str::len);
            }
            Notification::Delete(_) => self.other += 1,
        }
    }
}

fn drain<K: Pod + 'static>(p: &mut Pipeline<K>, h: &mut Handler) {
    loop {
        let popped = p.process_one();
        p.deliver(|_, n| h.see(n));
        if !popped {
            break;
        }
    }
}

/// The timed part: decode, the pipeline, the handler. Not inlined, for profilers.
#[inline(never)]
fn feed<K: Pod + 'static>(p: &mut Pipeline<K>, lines: &[Vec<u8>], h: &mut Handler) {
    for line in lines {
        match decode_event::<K>(line) {
            Ok(WatchEvent::Modified(obj)) => p.modified(obj),
            other => panic!("not a MODIFIED event: {other:?}"),
        }
        drain(p, h);
    }
}

/// The floor: the same lines decoded into `K` and stored in a bare map, the old object dropped.
#[inline(never)]
fn floor_events<K: Pod>(map: &mut HashMap<String, Arc<K>>, lines: &[Vec<u8>]) {
    for line in lines {
        match decode_event::<K>(line) {
            Ok(WatchEvent::Modified(obj)) => match map.get_mut(obj.name()) {
                Some(slot) => *slot = obj,
                None => {
                    map.insert(obj.name().to_owned(), obj);
                }
            },
            other => panic!("not a MODIFIED event: {other:?}"),
        }
    }
}

fn cpu(a: &Usage, b: &Usage) -> Duration {
    Duration::from_secs_f64((b.user_s + b.sys_s - a.user_s - a.sys_s).max(0.0))
}

/// Runs every event through `pass` in chunks; wall and CPU time of the timed parts.
fn timed(set: &Workset, events: usize, mut pass: impl FnMut(&[Vec<u8>])) -> (Duration, Duration) {
    let (mut wall, mut cpu_time) = (Duration::ZERO, Duration::ZERO);
    let mut done = 0;
    while done < events {
        let n = CHUNK.min(events - done);
        let lines: Vec<Vec<u8>> = (done..done + n).map(|j| set.line(j)).collect();
        let (u0, t0) = (Usage::now(), Instant::now());
        pass(&lines);
        wall += t0.elapsed();
        cpu_time += cpu(&u0, &Usage::now());
        drop(lines);
        done += n;
    }
    (wall, cpu_time)
}

fn run<K: Pod + 'static>(name: &str, set: &Workset, events: usize, report: Option<&str>) {
    let base = heap();
    let list: Vec<Arc<K>> = set
        .list
        .iter()
        .map(|s| Arc::new(serde_json::from_str(s).expect("a listed Pod")))
        .collect();
    let mut p: Pipeline<K> = Pipeline::new(Duration::ZERO);
    p.add_handler(Duration::ZERO, informer_core::time::Instant::ZERO);
    p.start(informer_core::time::Instant::ZERO);
    let mut h = Handler::default();
    p.populate(list);
    drain(&mut p, &mut h);
    assert!(p.has_synced());
    assert_eq!(h.adds, set.pods);
    let after_list = (heap() - base) as f64 / set.pods as f64;

    let (wall, cpu_time) = timed(set, events, |lines| feed(&mut p, lines, &mut h));
    assert_eq!(h.updates, events, "the handler saw every update");
    assert_eq!(h.other, 0);
    assert_eq!(p.indexer().len(), set.pods);
    let after_events = (heap() - base) as f64 / set.pods as f64;
    // The last event's Pod holds the last resourceVersion.
    let last = (events - 1) % set.pods;
    let want_rv = (set.pods + events).to_string();
    assert!(
        p.indexer()
            .list()
            .any(|o| o.resource_version() == Some(want_rv.as_str())),
        "Pod {last} at resourceVersion {want_rv} in the cache"
    );
    black_box(h.bytes);
    drop(p);

    // The floor, on the same lines.
    let mut map: HashMap<String, Arc<K>> = HashMap::with_capacity(set.pods);
    for s in &set.list {
        let o: Arc<K> = Arc::new(serde_json::from_str(s).expect("a listed Pod"));
        map.insert(o.name().to_owned(), o);
    }
    let (floor_wall, floor_cpu) = timed(set, events, |lines| floor_events(&mut map, lines));
    assert_eq!(map.len(), set.pods);
    drop(map);

    let per_s = |d: Duration| events as f64 / d.as_secs_f64();
    println!(
        "{name:<14} {:>10.0} events/s {:>10.0} events/CPU-s   floor {:>10.0} events/s \
         ({:.0}% of it)   heap/Pod {:>6.0} B after the list, {:>6.0} B after the events \
         ({:.2}x the JSON)",
        per_s(wall),
        per_s(cpu_time),
        per_s(floor_wall),
        100.0 * per_s(wall) / per_s(floor_wall),
        after_list,
        after_events,
        after_events / set.json_bytes
    );
    if let Some(path) = report {
        let line = serde_json::json!({
            "bench": "informer-rs", "workload": "pods", "object": name,
            "pods": set.pods, "events": events, "rounds": set.rounds,
            "wall_s": wall.as_secs_f64(), "cpu_s": cpu_time.as_secs_f64(),
            "floor_s": floor_wall.as_secs_f64(), "floor_cpu_s": floor_cpu.as_secs_f64(),
            "heap_per_pod_list": after_list, "heap_per_pod_events": after_events,
            "json_bytes": set.json_bytes, "peak_rss_kb": Usage::now().hwm_kb,
        });
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        writeln!(f, "{line}").unwrap_or_else(|e| panic!("{path}: {e}"));
    }
}

fn main() {
    let (pods, events, rounds) = (
        arg("--pods", 10_000),
        arg("--events", 1_000_000),
        arg("--rounds", 2).max(1),
    );
    let object = informer_bench::arg_value("--object").unwrap_or_else(|| "both".into());
    let report = informer_bench::arg_value("--report");
    assert!(
        pods > 0 && events > 0,
        "--pods and --events take positive numbers"
    );
    let t = Instant::now();
    let set = Workset::new(pods, rounds);
    if let Some(path) = informer_bench::arg_value("--write-events") {
        set.write(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    }
    println!(
        "pod-watch: {pods} Pods listed ({:.0} bytes of JSON each on average, managedFields \
         included), then {events} MODIFIED events (status rounds 1..={rounds}) decoded, through \
         the pipeline and one handler (workload built in {:.1} s)",
        set.json_bytes,
        t.elapsed().as_secs_f64()
    );
    if matches!(object.as_str(), "dynamic" | "both") {
        run::<DynamicObject>("DynamicObject", &set, events, report.as_deref());
    }
    if matches!(object.as_str(), "compact" | "both") {
        run::<CompactObject>("CompactObject", &set, events, report.as_deref());
    }
}
