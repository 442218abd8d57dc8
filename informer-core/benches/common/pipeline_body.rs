// Shared body of the `pipeline` (system allocator) and `pipeline_mimalloc` benchmarks, included
// by both; each chooses the global allocator.

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use informer_core::cache::indexer::{IndexFunc, LabelIndex};
use informer_core::object::selector::Labels;
use informer_core::{object::DynamicObject, informer::Notification, object::Object, object::ObjectOrTombstone, cache::pipeline::Pipeline};
use smol_str::SmolStr;

/// Counts heap bytes and allocations on top of an inner allocator.
pub struct Counting<A>(pub A);

static CURRENT: AtomicU64 = AtomicU64::new(0);
static PEAK: AtomicU64 = AtomicU64::new(0);
static ALLOCS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);

// SAFETY: delegates to the inner allocator; only adds counters.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(layout.size() as u64, Relaxed) + layout.size() as u64;
            PEAK.fetch_max(now, Relaxed);
            ALLOCS.fetch_add(1, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { self.0.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size() as u64, Relaxed);
        FREES.fetch_add(1, Relaxed);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            let now = CURRENT.fetch_add(new_size as u64, Relaxed) + new_size as u64;
            CURRENT.fetch_sub(layout.size() as u64, Relaxed);
            PEAK.fetch_max(now, Relaxed);
            // A move: one block allocated, one freed.
            ALLOCS.fetch_add(1, Relaxed);
            FREES.fetch_add(1, Relaxed);
        }
        p
    }
}

fn heap() -> u64 {
    CURRENT.load(Relaxed)
}
fn reset_peak() {
    PEAK.store(heap(), Relaxed);
}
fn peak() -> u64 {
    PEAK.load(Relaxed)
}

/// CPU time of this thread in ns (Linux `schedstat`), far less sensitive than wall time to
/// other processes on the machine; `None` where unavailable.
fn thread_cpu() -> Option<Duration> {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

const FULL_OBJECTS: usize = 100_000;
const FULL_EVENTS: usize = 1_000_000;
const CHUNK: usize = 20_000;

/// `INFORMER_BENCH_SCALE=N` divides the workload by N (for profiling under valgrind). Without
/// `--bench` (that is, under `cargo test --all-targets`, in a debug build) the run is a smoke
/// test at 1/100 scale: every assertion still holds, the figures mean nothing.
fn scale() -> usize {
    let asked = std::env::var("INFORMER_BENCH_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1usize)
        .max(1);
    if std::env::args().any(|a| a == "--bench") {
        asked
    } else {
        asked.max(100)
    }
}
/// `INFORMER_BENCH_HANDLERS=N` registers N counting handlers instead of 4, to see the cost of
/// each extra handler that keeps up (compare instruction counts at 1, 4 and 16).
fn handlers() -> usize {
    std::env::var("INFORMER_BENCH_HANDLERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4usize)
        .max(1)
}

const NAMESPACES: usize = 10;
const APPS: [&str; 8] = [
    "web", "api", "db", "cache", "queue", "auth", "search", "batch",
];

/// A small deterministic generator (SplitMix64).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A ConfigMap of about 1 KB of JSON (3 labels, 4 data entries), decoded as a transport would.
fn config_map(id: usize, rv: u64, rng: &mut Rng) -> Arc<DynamicObject> {
    let mut data = String::new();
    for k in 0..4 {
        let filler: String = (0..200)
            .map(|_| (b'a' + rng.below(26) as u8) as char)
            .collect();
        data.push_str(&format!(
            r#"{}"key-{k}.conf":"{filler}""#,
            if k > 0 { "," } else { "" }
        ));
    }
    let json = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"cm-{id:07}","namespace":"ns-{ns}","uid":"{uid:032x}","resourceVersion":"{rv}","creationTimestamp":"2026-11-22T03:00:00Z","labels":{{"app":"{app}","tier":"{tier}","team":"team-{team}"}}}},"data":{{{data}}}}}"#,
        ns = id % NAMESPACES,
        uid = (id as u128) * 0x9E37_79B9_7F4A_7C15,
        app = APPS[id % APPS.len()],
        tier = ["frontend", "backend", "data"][id % 3],
        team = id % 17,
    );
    Arc::new(serde_json::from_str(&json).expect("valid ConfigMap JSON"))
}

#[derive(Default)]
struct Counts {
    adds: u64,
    updates: u64,
    deletes: u64,
}

/// How handlers get their notifications (`INFORMER_BENCH_DELIVERY`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Delivery {
    /// `deliver` (the default): inline handlers fed by reference (`Pipeline::deliver`), as a
    /// driver that runs its handlers on its own thread.
    Deliver,
    /// `poll`: one owned notification at a time (`poll_notification`, then `handler_done`),
    /// as a driver that hands each notification to another thread.
    Poll,
}

fn delivery() -> Delivery {
    static HOW: std::sync::OnceLock<Delivery> = std::sync::OnceLock::new();
    *HOW.get_or_init(|| match std::env::var("INFORMER_BENCH_DELIVERY").as_deref() {
        Ok("poll") => Delivery::Poll,
        _ => Delivery::Deliver,
    })
}

/// One counting handler's work on a notification.
#[inline(always)]
fn count<K>(c: &mut Counts, n: &Notification<K>) {
    match n {
        Notification::Add { obj, .. } => {
            black_box(obj);
            c.adds += 1
        }
        Notification::Update { new, .. } => {
            black_box(new);
            c.updates += 1
        }
        Notification::Delete(d) => {
            black_box(d);
            c.deletes += 1
        }
    }
}

/// The driver loop after one input: pop and handle until the FIFO is empty, deliver every
/// notification to its counting handler.
fn drain<K: Object + 'static>(p: &mut Pipeline<K>, counts: &mut [Counts]) {
    let how = delivery();
    loop {
        let popped = p.process_one();
        match how {
            Delivery::Deliver => {
                p.deliver(|id, n| count(&mut counts[id.index() as usize], n));
            }
            Delivery::Poll => {
                while let Some((id, n)) = p.poll_notification() {
                    count(&mut counts[id.index() as usize], &n);
                    drop(n);
                    p.handler_done(id);
                }
            }
        }
        if !popped {
            break;
        }
    }
}

/// The workload's objects and events, the same for every run (and for the floor): `objects`
/// listed first, then events 60% modify, 20% add, 20% delete of random live objects.
struct Stream {
    rng: Rng,
    /// Ids of the objects in the cache.
    live: Vec<usize>,
    /// The resourceVersion each id was last written with.
    rv_of: Vec<u64>,
    next_id: usize,
    rv: u64,
    n_mod: usize,
    n_add: usize,
    n_del: usize,
}

impl Stream {
    /// A stream of `events` after a list of `objects`; its bookkeeping allocated at full size.
    fn new(objects: usize, events: usize) -> Self {
        let mut live = Vec::with_capacity(objects + events);
        live.extend(0..objects);
        Stream {
            rng: Rng(0x5EED),
            live,
            rv_of: vec![1; objects + events],
            next_id: objects,
            rv: 2,
            n_mod: 0,
            n_add: 0,
            n_del: 0,
        }
    }

    /// The initial list: every object, ids `0..objects` (the live ones before any event), at
    /// resourceVersion 1.
    fn initial<K>(&mut self, make: fn(usize, u64, &mut Rng) -> Arc<K>) -> Vec<Arc<K>> {
        let rng = &mut self.rng;
        (0..self.live.len()).map(|i| make(i, 1, rng)).collect()
    }

    /// The next event.
    fn next<K>(&mut self, make: fn(usize, u64, &mut Rng) -> Arc<K>) -> Event<K> {
        self.rv += 1;
        let rv = self.rv;
        let roll = self.rng.below(10);
        if roll < 6 && !self.live.is_empty() {
            self.n_mod += 1;
            let id = self.live[self.rng.below(self.live.len())];
            self.rv_of[id] = rv;
            Event::Modified(make(id, rv, &mut self.rng))
        } else if roll < 8 || self.live.is_empty() {
            self.n_add += 1;
            let id = self.next_id;
            self.next_id += 1;
            self.live.push(id);
            self.rv_of[id] = rv;
            Event::Added(make(id, rv, &mut self.rng))
        } else {
            self.n_del += 1;
            let id = self.live.swap_remove(self.rng.below(self.live.len()));
            Event::Deleted(make(id, rv, &mut self.rng))
        }
    }
}

enum Event<K> {
    Added(Arc<K>),
    Modified(Arc<K>),
    Deleted(Arc<K>),
}

/// The smallest object the informer can work with: name, namespace, resourceVersion and one
/// label, in one heap block (its `Arc`; the strings are short enough to be held inline).
/// Running the same events with it isolates the informer's own cost from the cost of creating
/// and freeing 1 KB objects. (Until the seventh session its strings were `String`s, four heap
/// blocks: freeing a replaced object then took ~300 of the ~1,750 instructions per event.)
struct Tiny {
    name: SmolStr,
    namespace: SmolStr,
    rv_text: SmolStr,
    app: &'static str,
}

impl Object for Tiny {
    fn name(&self) -> &str {
        &self.name
    }
    fn namespace(&self) -> Option<&str> {
        Some(&self.namespace)
    }
    fn resource_version(&self) -> Option<&str> {
        Some(&self.rv_text)
    }
    fn uid(&self) -> Option<&str> {
        None
    }
}

impl Labels for Tiny {
    fn label(&self, key: &str) -> Option<&str> {
        (key == "app").then_some(self.app)
    }
}

fn tiny(id: usize, rv: u64, _rng: &mut Rng) -> Arc<Tiny> {
    Arc::new(Tiny {
        name: smol_str::format_smolstr!("cm-{id:07}"),
        namespace: smol_str::format_smolstr!("ns-{}", id % NAMESPACES),
        rv_text: smol_str::format_smolstr!("{rv}"),
        app: APPS[id % APPS.len()],
    })
}

/// The timed part: every event through the driver loop. Not inlined, so profilers can isolate
/// it (`valgrind --tool=callgrind --toggle-collect='*feed*'`).
#[inline(never)]
fn feed<K: Object + 'static>(
    p: &mut Pipeline<K>,
    chunk: &mut Vec<Event<K>>,
    counts: &mut [Counts],
) {
    // Draining keeps the chunk's buffer for the harness to free outside the timing.
    let every = batch();
    for (i, ev) in chunk.drain(..).enumerate() {
        match ev {
            Event::Added(o) => p.added(o),
            Event::Modified(o) => p.modified(o),
            Event::Deleted(o) => p.deleted(o),
        }
        if (i + 1) % every == 0 {
            drain(p, counts);
        }
    }
    drain(p, counts);
}

/// `INFORMER_BENCH_BATCH=N`: the handlers are fed after every N events instead of after each
/// (1, the default: what the runtime's driver does). N > 1 is client-go's batch processing
/// (`InOrderInformersBatchProcess`): a batch of deltas applied to the store, then the handlers.
/// Here it costs more than it saves: a handler fed after each event is idle when the next one
/// comes and takes the processor's straight path; fed after a batch, it has a queue, and every
/// event goes through the per-key coalescing table (figures in docs/BENCHMARKS.md).
fn batch() -> usize {
    std::env::var("INFORMER_BENCH_BATCH")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1)
}

/// How the initial list is applied (`INFORMER_BENCH_FIRST_LIST`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FirstList {
    /// `fifo`: `replace` into the DeltaFIFO, delivering to the handlers after every pop (the
    /// informer's path before it populated its first list).
    Fifo,
    /// `fifo-drained`: `replace`, every key popped before anything is delivered (as the
    /// runtime's driver does: handlers run on their own tasks and fall behind the list).
    FifoDrained,
    /// `populate`: straight to the empty store and the handlers (`Pipeline::populate`, no
    /// DeltaFIFO), then delivery: what the informer does with its first list.
    Populate,
}

/// `INFORMER_BENCH_FIRST_LIST=fifo|fifo-drained|populate`; default `populate`, as the
/// informer.
fn first_list() -> FirstList {
    match std::env::var("INFORMER_BENCH_FIRST_LIST").as_deref() {
        Ok("fifo") => FirstList::Fifo,
        Ok("fifo-drained") => FirstList::FifoDrained,
        _ => FirstList::Populate,
    }
}

/// The initial list and its delivery until idle; a function of its own so that callgrind can
/// count it (`--toggle-collect='*initial_list*'`).
#[inline(never)]
fn initial_list<K: Object + 'static>(
    p: &mut Pipeline<K>,
    list: Vec<Arc<K>>,
    counts: &mut [Counts],
) {
    match first_list() {
        FirstList::Fifo => p.replace(list),
        FirstList::FifoDrained => {
            p.replace(list);
            while p.process_one() {}
        }
        FirstList::Populate => p.populate(list),
    }
    drain(p, counts);
}

/// A relist and its delivery until idle; a function of its own so that callgrind can count it
/// (`--toggle-collect='*relist_now*'`).
#[inline(never)]
fn relist_now<K: Object + 'static>(p: &mut Pipeline<K>, list: Vec<Arc<K>>, counts: &mut [Counts]) {
    p.replace(list);
    drain(p, counts);
}

/// Peak resident set size of this process (`VmHWM`), KiB; 0 where unavailable.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

/// With `INFORMER_BENCH_REPORT=FILE` (set by `cargo xtask bench core --compare`), appends one
/// JSON line with a workload's figures to FILE.
fn write_report(line: &str) {
    use std::io::Write;
    let Ok(path) = std::env::var("INFORMER_BENCH_REPORT") else {
        return;
    };
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = written {
        panic!("writing the report to {path}: {e}");
    }
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// The physical floor of the event work on this machine: the same objects and events (the
/// same [`Stream`]) through nothing but a map of `Key` to `Arc` (hashbrown, foldhash), each
/// event one lookup and one insert or remove, the replaced or removed object dropped there. No
/// index, no handler, no notification: what no informer can do without. Returns ns per event
/// of wall time.
#[inline(never)]
fn floor<K: Object + 'static>(make: fn(usize, u64, &mut Rng) -> Arc<K>) -> f64 {
    let (objects, events) = (FULL_OBJECTS / scale(), FULL_EVENTS / scale());
    let mut stream = Stream::new(objects, events);
    let mut map: hashbrown::HashMap<informer_core::object::Key, Arc<K>> =
        hashbrown::HashMap::with_capacity(objects);
    for o in stream.initial(make) {
        map.insert(o.key_ref().to_key(), o);
    }
    let ns = timed_chunks(&mut stream, make, events, |chunk| floor_events(&mut map, chunk));
    assert_eq!(map.len(), stream.live.len(), "the floor's map holds the live objects");
    ns
}

/// Feeds `events` events of `stream` to `apply` in chunks of [`CHUNK`], each built before its
/// timing starts (as the informer's are); returns ns per event of the wall time `apply` took.
fn timed_chunks<K>(
    stream: &mut Stream,
    make: fn(usize, u64, &mut Rng) -> Arc<K>,
    events: usize,
    mut apply: impl FnMut(&mut Vec<Event<K>>),
) -> f64 {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < events {
        let n = CHUNK.min(events - done);
        let mut chunk: Vec<Event<K>> = (0..n).map(|_| stream.next(make)).collect();
        let t = Instant::now();
        apply(&mut chunk);
        total += t.elapsed();
        done += n;
    }
    total.as_nanos() as f64 / events as f64
}

/// The floor's timed part (`--toggle-collect='*floor_events*'` counts it).
#[inline(never)]
fn floor_events<K: Object>(
    map: &mut hashbrown::HashMap<informer_core::object::Key, Arc<K>>,
    chunk: &mut Vec<Event<K>>,
) {
    for ev in chunk.drain(..) {
        match ev {
            Event::Added(o) | Event::Modified(o) => {
                match map.get_mut(&o.key_ref()) {
                    Some(slot) => drop(std::mem::replace(slot, o)),
                    None => {
                        map.insert(o.key_ref().to_key(), o);
                    }
                }
            }
            Event::Deleted(o) => drop(black_box(map.remove(&o.key_ref()))),
        }
    }
}

/// The issue's workload written out by hand, the *bare informer*: the floor's map plus what
/// the workload asks of an informer, done the most direct way. A namespace index and the
/// workload's index, each a map of value to a set of keys, updated on adds and deletes and on an
/// update that changes the value; each event a notification (`Add`, `Update` with the replaced
/// object, `Delete`) that every handler gets by reference, called in turn; nothing else. No
/// FIFO, no resourceVersion check, no queue or log for a handler that falls behind, no readers'
/// journal. A reference for what the workload's own work costs done the straightforward way,
/// not a bound as the floor is: a cleverer loop (hashing each key once, as informer-rs does)
/// does better. Returns ns per event of wall time; its instructions:
/// `--toggle-collect='*bare_events*'`.
#[inline(never)]
fn bare<K: Object + 'static>(
    make: fn(usize, u64, &mut Rng) -> Arc<K>,
    index: &impl IndexFunc<K>,
    handlers: usize,
) -> f64 {
    let (objects, events) = (FULL_OBJECTS / scale(), FULL_EVENTS / scale());
    let mut stream = Stream::new(objects, events);
    let mut bare = Bare::with_capacity(objects);
    let mut counts: Vec<Counts> = (0..handlers).map(|_| Counts::default()).collect();
    // The initial list, applied here (inlined, so `'*bare_events*'` does not count it).
    let mut initial: Vec<Event<K>> = stream.initial(make).into_iter().map(Event::Added).collect();
    bare_apply(&mut bare, index, &mut initial, &mut counts);
    let ns = timed_chunks(&mut stream, make, events, |chunk| {
        bare_events(&mut bare, index, chunk, &mut counts)
    });
    assert_eq!(bare.objects.len(), stream.live.len(), "the bare informer holds the live objects");
    let in_buckets = |b: &Buckets| b.values().map(|keys| keys.len()).sum::<usize>();
    assert_eq!(in_buckets(&bare.by_namespace), stream.live.len(), "each object in its namespace");
    assert_eq!(in_buckets(&bare.by_value), stream.live.len(), "each object in its value's bucket");
    for (i, c) in counts.iter().enumerate() {
        assert_eq!(c.adds as usize, objects + stream.n_add, "bare handler {i} adds");
        assert_eq!(c.updates as usize, stream.n_mod, "bare handler {i} updates");
        assert_eq!(c.deletes as usize, stream.n_del, "bare handler {i} deletes");
    }
    ns
}

/// An index of the bare informer: value to the keys of the objects with it.
type Buckets = hashbrown::HashMap<SmolStr, hashbrown::HashSet<informer_core::object::Key>>;

/// The bare informer's state (see [`bare`]).
struct Bare<K> {
    objects: hashbrown::HashMap<informer_core::object::Key, Arc<K>>,
    by_namespace: Buckets,
    by_value: Buckets,
}

impl<K: Object> Bare<K> {
    fn with_capacity(objects: usize) -> Self {
        Bare {
            objects: hashbrown::HashMap::with_capacity(objects),
            by_namespace: Buckets::default(),
            by_value: Buckets::default(),
        }
    }
}

/// Puts `key` in the bucket of `value` (none: no bucket).
fn bucket_insert(b: &mut Buckets, value: Option<&str>, key: &informer_core::object::Key) {
    if let Some(v) = value {
        b.entry_ref(v).or_default().insert(key.clone());
    }
}

/// Takes `key` out of the bucket of `value`; an emptied bucket goes.
fn bucket_remove(b: &mut Buckets, value: Option<&str>, key: &informer_core::object::Key) {
    if let Some(v) = value {
        if let Some(keys) = b.get_mut(v) {
            keys.remove(key);
            if keys.is_empty() {
                b.remove(v);
            }
        }
    }
}

/// The value of the workload's (single-valued) index for `o`.
fn value<'a, K>(index: &impl IndexFunc<K>, o: &'a K) -> Option<&'a str> {
    index.single_value(o).expect("the workload's index is single-valued")
}

/// The bare informer's timed part (see [`bare`]).
#[inline(never)]
fn bare_events<K: Object>(
    bare: &mut Bare<K>,
    index: &impl IndexFunc<K>,
    chunk: &mut Vec<Event<K>>,
    counts: &mut [Counts],
) {
    bare_apply(bare, index, chunk, counts);
}

/// Applies `chunk`'s events to the bare informer and has every handler count each one.
#[inline(always)]
fn bare_apply<K: Object>(
    bare: &mut Bare<K>,
    index: &impl IndexFunc<K>,
    chunk: &mut Vec<Event<K>>,
    counts: &mut [Counts],
) {
    for ev in chunk.drain(..) {
        let n = match ev {
            Event::Added(o) | Event::Modified(o) => match bare.objects.get_mut(&o.key_ref()) {
                Some(slot) => {
                    let old = std::mem::replace(slot, o.clone());
                    if !index.same_values(&old, &o) {
                        let key = o.key_ref().to_key();
                        bucket_remove(&mut bare.by_value, value(index, &old), &key);
                        bucket_insert(&mut bare.by_value, value(index, &o), &key);
                    }
                    Notification::Update { old, new: o }
                }
                None => {
                    let key = o.key_ref().to_key();
                    bucket_insert(&mut bare.by_namespace, o.namespace(), &key);
                    bucket_insert(&mut bare.by_value, value(index, &o), &key);
                    bare.objects.insert(key, o.clone());
                    Notification::Add {
                        obj: o,
                        in_initial_list: false,
                    }
                }
            },
            Event::Deleted(o) => {
                let Some((key, old)) = bare.objects.remove_entry(&o.key_ref()) else {
                    continue;
                };
                bucket_remove(&mut bare.by_namespace, old.namespace(), &key);
                bucket_remove(&mut bare.by_value, value(index, &old), &key);
                Notification::Delete(ObjectOrTombstone::Object(old))
            }
        };
        for c in counts.iter_mut() {
            count(c, &n);
        }
    }
}

fn run<K: Object + 'static>(
    workload: &str,
    title: &str,
    make: fn(usize, u64, &mut Rng) -> Arc<K>,
    index: impl IndexFunc<K> + Clone + 'static,
    handlers: usize,
    verbose: bool,
) -> f64 {
    let (objects, events) = (FULL_OBJECTS / scale(), FULL_EVENTS / scale());
    // The harness's own bookkeeping, allocated at full size before `base` so that the heap
    // figures below are the informer's alone (this was ~10 MiB counted as the informer's peak).
    let mut stream = Stream::new(objects, events);
    let mut counts: Vec<Counts> = (0..handlers).map(|_| Counts::default()).collect();
    let base = heap();

    // Decoded size of the objects alone.
    let list: Vec<Arc<K>> = stream.initial(make);
    let list_vec_bytes = (list.capacity() * std::mem::size_of::<Arc<K>>()) as u64;
    let objects_bytes = heap() - base - list_vec_bytes;
    let per_object = objects_bytes as f64 / objects as f64;

    let mut p: Pipeline<K> = Pipeline::new(Duration::ZERO);
    p.add_index("app", index.clone()).unwrap();
    for _ in 0..handlers {
        p.add_handler(Duration::ZERO, informer_core::time::Instant::ZERO);
    }
    p.start(informer_core::time::Instant::ZERO);

    // Initial replace.
    reset_peak();
    let t = Instant::now();
    initial_list(&mut p, list, &mut counts);
    let replace_time = t.elapsed();
    let replace_peak = peak() - base;
    let steady = heap() - base;
    assert!(p.has_synced());
    assert_eq!(p.indexer().len(), objects);

    // Events.
    let mut total = Duration::ZERO;
    let mut total_cpu = Duration::ZERO;
    let mut build = Duration::ZERO;
    let mut event_allocs = 0u64;
    let mut events_peak = 0u64;
    let mut done = 0;
    while done < events {
        let n = CHUNK.min(events - done);
        let t = Instant::now();
        let before_chunk = heap();
        let mut chunk = Vec::with_capacity(n);
        for _ in 0..n {
            chunk.push(stream.next(make));
        }
        build += t.elapsed();
        let chunk_bytes = heap() - before_chunk;

        reset_peak();
        let allocs = ALLOCS.load(Relaxed);
        let t = Instant::now();
        let c0 = thread_cpu();
        feed(&mut p, &mut chunk, &mut counts);
        total += t.elapsed();
        if let (Some(a), Some(b)) = (c0, thread_cpu()) {
            total_cpu += b - a;
        }
        event_allocs += ALLOCS.load(Relaxed) - allocs;
        // The chunk's objects are either in the cache now or freed; the harness's own share at
        // the start of the chunk is `chunk_bytes`.
        events_peak = events_peak.max(peak().saturating_sub(base + chunk_bytes));
        done += n;
    }
    let end = heap() - base;
    let cached = p.indexer().len();

    let Stream {
        mut rng,
        live,
        rv_of,
        mut next_id,
        mut rv,
        n_mod,
        n_add,
        n_del,
    } = stream;
    for (i, c) in counts.iter().enumerate() {
        if batch() > 1 {
            // Coalesced within a batch: what a handler heard still folds to the cache.
            assert_eq!((c.adds - c.deletes) as usize, cached, "handler {i}: its view");
            assert!(c.updates as usize <= n_mod, "handler {i} updates");
            continue;
        }
        assert_eq!(c.adds as usize, objects + n_add, "handler {i} adds");
        assert_eq!(c.updates as usize, n_mod, "handler {i} updates");
        assert_eq!(c.deletes as usize, n_del, "handler {i} deletes");
    }

    let cpu_ns_per_event = total_cpu.as_nanos() as f64 / events as f64;
    if !verbose {
        return cpu_ns_per_event;
    }

    // A relist, as after a broken watch: every live object decoded anew, 90% unchanged (the
    // same resourceVersion: a resync nobody is due for), 10% changed, 1% gone while the watch
    // was down, 1% new. Built outside the timing.
    let mut relist: Vec<Arc<K>> = Vec::with_capacity(live.len() + live.len() / 100 + 1);
    let (mut changed, mut gone, mut new) = (0usize, 0usize, 0usize);
    for &id in &live {
        match rng.below(100) {
            0 => gone += 1,
            1..=10 => {
                rv += 1;
                changed += 1;
                relist.push(make(id, rv, &mut rng));
            }
            _ => relist.push(make(id, rv_of[id], &mut rng)),
        }
        if rng.below(100) == 0 {
            rv += 1;
            new += 1;
            relist.push(make(next_id, rv, &mut rng));
            next_id += 1;
        }
    }
    let relisted = relist.len();
    let before: Vec<(u64, u64, u64)> = counts.iter().map(|c| (c.adds, c.updates, c.deletes)).collect();
    let relist_base = heap();
    reset_peak();
    let t = Instant::now();
    let c0 = thread_cpu();
    relist_now(&mut p, relist, &mut counts);
    let relist_time = t.elapsed();
    let relist_cpu = c0.zip(thread_cpu()).map(|(a, b)| b - a);
    let relist_peak = peak().saturating_sub(relist_base);
    for (c, (a, u, d)) in counts.iter().zip(before) {
        assert_eq!(c.adds - a, new as u64, "relist adds");
        assert_eq!(c.updates - u, changed as u64, "relist updates");
        assert_eq!(c.deletes - d, gone as u64, "relist deletes (tombstones)");
    }
    let relist_line = format!(
        "  relist of {relisted} objects ({changed} changed, {gone} gone, {new} new, the rest unchanged): \
         {:.1} ms ({:.0} ns/object wall, {:.0} ns/object CPU), peak {:.1} MiB above the cache before it",
        relist_time.as_secs_f64() * 1e3,
        relist_time.as_nanos() as f64 / relisted as f64,
        relist_cpu.map_or(0.0, |c| c.as_nanos() as f64 / relisted as f64),
        mib(relist_peak),
    );
    let ev_per_s = events as f64 / total.as_secs_f64();
    println!(
        "{title} (handlers fed by {:?}, after every {} event(s))",
        delivery(),
        batch()
    );
    println!("  objects: {objects}, decoded {per_object:.0} B each on the heap");
    println!(
        "  initial replace: {:.1} ms ({:.0} ns/object), peak heap {:.1} MiB (first list: {:?})",
        replace_time.as_secs_f64() * 1e3,
        replace_time.as_nanos() as f64 / objects as f64,
        mib(replace_peak),
        first_list()
    );
    println!(
        "  steady cache: {:.1} MiB = {:.0} B per cached object = {:.3}x the object's decoded size",
        mib(steady),
        steady as f64 / objects as f64,
        steady as f64 / objects_bytes as f64
    );
    println!(
        "  events: {events} ({n_mod} modify, {n_add} add, {n_del} delete) through {handlers} handlers"
    );
    println!(
        "  throughput: {:.0} events/s, {:.0} ns/event wall (objects built outside the timing: {:.0} ns each)",
        ev_per_s,
        total.as_nanos() as f64 / events as f64,
        build.as_nanos() as f64 / events as f64
    );
    if total_cpu > Duration::ZERO {
        println!(
            "  on-CPU:     {:.0} events/s, {:.0} ns/event of this thread's CPU time",
            events as f64 / total_cpu.as_secs_f64(),
            total_cpu.as_nanos() as f64 / events as f64
        );
    }
    println!(
        "  allocations inside the informer: {:.3} per event ({event_allocs} total; an add allocates its key only beyond the 23 bytes a key holds inline)",
        event_allocs as f64 / events as f64
    );
    println!(
        "  peak heap: {:.1} MiB = {:.3}x the steady cache (initial replace {:.3}x, events {:.3}x)",
        mib(replace_peak.max(events_peak)),
        replace_peak.max(events_peak) as f64 / steady as f64,
        replace_peak as f64 / steady as f64,
        events_peak as f64 / steady as f64,
    );
    println!(
        "  end: {cached} cached, heap {:.1} MiB ({:.0} B per cached object)",
        mib(end),
        end as f64 / cached as f64
    );
    println!("{relist_line}");
    // The process's peak so far: this workload's (the 1 KB workload runs first and is the
    // larger), the harness's prebuilt objects included, as in the client-go harness.
    let rss = peak_rss_kib();
    println!("  peak RSS of the process so far: {:.1} MiB", rss as f64 / 1024.0);
    // The floor runs last, the informer dropped first (its report and peak RSS are above), on
    // objects of its own built outside its timing.
    drop(p);
    let floor_ns = floor(make);
    println!(
        "  floor, the same events on a bare map (one lookup, one insert or remove, the old object dropped): \
         {:.0} events/s, {floor_ns:.0} ns/event wall; the informer took {:.2}x that",
        1e9 / floor_ns,
        (total.as_nanos() as f64 / events as f64) / floor_ns
    );
    let bare_ns = bare(make, &index, handlers);
    println!(
        "  bare informer, the floor plus the workload's two indices and {handlers} handlers written out by hand \
         (no FIFO, no resourceVersion check, no log): {:.0} events/s, {bare_ns:.0} ns/event wall; \
         the informer took {:.2}x that",
        1e9 / bare_ns,
        (total.as_nanos() as f64 / events as f64) / bare_ns
    );
    write_report(&format!(
        "{{\"bench\":\"informer-rs\",\"allocator\":\"{ALLOCATOR}\",\"batch\":{},\"workload\":\"{workload}\",\
         \"objects\":{objects},\"events\":{events},\"wall_s\":{},\"cpu_s\":{},\
         \"replace_s\":{},\"peak_rss_kb\":{rss},\"floor_s\":{},\"bare_s\":{}}}",
        batch(),
        total.as_secs_f64(),
        total_cpu.as_secs_f64(),
        replace_time.as_secs_f64(),
        floor_ns * events as f64 / 1e9,
        bare_ns * events as f64 / 1e9,
    ));
    cpu_ns_per_event
}

fn main() {
    // `cargo bench` passes `--bench`; there are no options.
    let sample = config_map(0, 1, &mut Rng(1));
    // Heap blocks one decoded ConfigMap holds (what dropping it frees), and the allocations
    // its decode makes in all.
    let sample_json = serde_json::to_string(&*sample).unwrap();
    let (allocs, frees) = (ALLOCS.load(Relaxed), FREES.load(Relaxed));
    let decoded: Arc<DynamicObject> = Arc::new(serde_json::from_str(&sample_json).unwrap());
    let decode_allocs = ALLOCS.load(Relaxed) - allocs;
    let blocks = decode_allocs - (FREES.load(Relaxed) - frees);
    drop(decoded);
    if scale() > 1 {
        println!("(scaled down by {}: not a measurement)", scale());
    }
    println!(
        "informer-core pipeline benchmark, one thread, {ALLOCATOR} allocator; ConfigMap JSON is {} B",
        serde_json::to_vec(&*sample).unwrap().len()
    );
    println!(
        "one decoded ConfigMap holds {blocks} heap blocks (its Arc included); decoding it allocates {decode_allocs} times"
    );
    drop(sample);
    // INFORMER_BENCH=tiny runs only the second workload, INFORMER_BENCH=configmaps only the
    // first (for profiling).
    let only = std::env::var("INFORMER_BENCH").ok();
    let only_tiny = only.as_deref() == Some("tiny");
    if !only_tiny {
        run(
            "configmaps",
            "1) ConfigMaps of about 1 KB (the issue's workload)",
            config_map,
            LabelIndex::new("app"),
            handlers(),
            true,
        );
        if only.as_deref() == Some("configmaps") {
            return;
        }
    }
    run(
        "tiny",
        "2) the same events with minimal objects (the informer's own cost)",
        tiny,
        LabelIndex::new("app"),
        handlers(),
        true,
    );
    if only_tiny {
        return;
    }
    // The cost of a handler that keeps up: the minimal-object events again with 1 and 16
    // handlers (and 4 once more, so that the three figures come from back-to-back runs).
    println!("3) handlers that keep up (minimal objects, this thread's CPU time per event)");
    let per: Vec<(usize, f64)> = [1usize, 4, 16]
        .into_iter()
        .map(|n| (n, run("", "", tiny, LabelIndex::new("app"), n, false)))
        .collect();
    for (n, ns) in &per {
        println!("  {n:>2} handlers: {ns:.0} ns/event");
    }
    let (one, sixteen) = (per[0].1, per[2].1);
    println!(
        "  each extra handler: {:.1} ns/event ((16 handlers - 1 handler) / 15)",
        (sixteen - one) / 15.0
    );
}
