//! Heap per cached realistic Pod: `cargo xtask bench pod-heap` (or
//! `cargo bench -p informer-core --bench pod_heap`; `INFORMER_BENCH_PODS=N`, 10,000 by default).
//!
//! Measures before choosing (issue 42). N Pods from `testcluster::pods` (as a ReplicaSet makes
//! them and the kubelet updates them, 4–8 KB of JSON each) are decoded, with and without
//! `managedFields`, into each candidate representation and kept alive; for each, the same run
//! prints:
//! - heap per Pod (a counting global allocator: every byte the kept objects and the
//!   candidate's shared tables hold, divided by N) and its ratio to the Pod's JSON bytes;
//! - decode CPU per Pod (text to kept object, single thread);
//! - a metadata read per Pod (name, resourceVersion, a label, the controller owner reference);
//! - a raw-field read per Pod (the raw JSON of `status`).
//!
//! Candidates:
//! - `CompactObject`: what was chosen and built from these figures
//!   (`informer_core::object::CompactObject`: `lz4-dict 16K` with owner references shared);
//!   the dictionary of each run's first Pods is learned in the run (the first run's
//!   dictionary, with `managedFields`, serves the second run too: one per kind per process);
//! - `today`: `DynamicObject::from_json_start`: typed metadata in one block, other metadata
//!   and the top-level fields kept as their JSON text;
//! - `shared-subtrees`: today's metadata block without its other members, and the other
//!   members and top-level fields kept as a rope whose pieces are either the object's own
//!   text or an `Arc<str>` of a JSON subtree (≥ 64 bytes) met before in another object
//!   (interned once it has been seen twice; the table of hashes seen counts in the heap);
//! - `lz4-dict`: today's metadata block with `ownerReferences` and `creationTimestamp` kept as
//!   they are, everything else (`managedFields`, `spec`, `status`, …) compressed as one block
//!   with LZ4 against a dictionary learned from the resource's own first objects (the
//!   dictionary counts in the heap once);
//! - `split (no compression)`: what `lz4-dict` does before compressing (the metadata a read
//!   needs apart from the rest), to tell the split's cost from the compression's;
//! - interning strings alone is covered by `shared-subtrees` for the long values (images,
//!   owner references, field sets), and costs a pointer per string for the short ones, more
//!   than most of them take.
#![allow(unsafe_code)] // the counting global allocator

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashSet;
use std::hash::BuildHasher;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::Instant;

use informer_core::object::{CompactObject, DynamicObject, Object, ObjectMeta};
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

// ---------------------------------------------------------------------------------------
// A tiny scanner of compact JSON: the extent of the value that starts `text[at..]`.

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
        i += 1;
    }
    i
}

fn skip_string(b: &[u8], mut i: usize) -> usize {
    i += 1; // the opening quote
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

fn skip_value(b: &[u8], i: usize) -> usize {
    let i = skip_ws(b, i);
    match b.get(i) {
        Some(b'"') => skip_string(b, i),
        Some(b'{') | Some(b'[') => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = skip_string(b, j);
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return j + 1;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            j
        }
        _ => {
            let mut j = i;
            while j < b.len() && !matches!(b[j], b',' | b'}' | b']') {
                j += 1;
            }
            j
        }
    }
}

/// The children of the object or array `text`: (start, end) of each member's value; the
/// text between them (keys, punctuation) is what is left.
fn children(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let obj = b[0] == b'{';
    let mut i = skip_ws(b, 1);
    if matches!(b.get(i), Some(b'}') | Some(b']')) {
        return out;
    }
    while i < b.len() {
        if obj {
            i = skip_string(b, skip_ws(b, i));
            i = skip_ws(b, i) + 1; // ':'
        }
        let start = skip_ws(b, i);
        let end = skip_value(b, start);
        out.push((start, end));
        i = skip_ws(b, end);
        if b.get(i) != Some(&b',') {
            break;
        }
        i += 1;
    }
    out
}

// ---------------------------------------------------------------------------------------
// Candidate: shared subtrees.

enum Piece {
    /// `len` bytes of the object's own text, from where the previous own piece ended.
    Own(u32),
    Shared(Arc<str>),
}

struct Rope {
    own: Box<str>,
    pieces: Box<[Piece]>,
}

impl Rope {
    fn text(&self) -> String {
        let mut out = String::with_capacity(self.len());
        let mut at = 0;
        for p in self.pieces.iter() {
            match p {
                Piece::Own(n) => {
                    out.push_str(&self.own[at..at + *n as usize]);
                    at += *n as usize;
                }
                Piece::Shared(s) => out.push_str(s),
            }
        }
        out
    }

    fn len(&self) -> usize {
        self.own.len()
            + self
                .pieces
                .iter()
                .map(|p| match p {
                    Piece::Shared(s) => s.len(),
                    Piece::Own(_) => 0,
                })
                .sum::<usize>()
    }
}

const MIN_SHARED: usize = 64;

#[derive(Default)]
struct Interner {
    seen: HashSet<u64>,
    shared: HashSet<Arc<str>>,
    hasher: std::collections::hash_map::RandomState,
}

struct RopeBuilder {
    own: String,
    pieces: Vec<Piece>,
    pending: usize,
}

impl RopeBuilder {
    fn own(&mut self, s: &str) {
        self.own.push_str(s);
        self.pending += s.len();
    }
    fn shared(&mut self, s: Arc<str>) {
        if self.pending > 0 {
            self.pieces.push(Piece::Own(self.pending as u32));
            self.pending = 0;
        }
        self.pieces.push(Piece::Shared(s));
    }
    fn finish(mut self) -> Rope {
        if self.pending > 0 {
            self.pieces.push(Piece::Own(self.pending as u32));
        }
        Rope {
            own: self.own.into_boxed_str(),
            pieces: self.pieces.into_boxed_slice(),
        }
    }
}

impl Interner {
    fn rope(&mut self, text: &str) -> Rope {
        let mut b = RopeBuilder {
            own: String::new(),
            pieces: Vec::new(),
            pending: 0,
        };
        self.add(text, &mut b);
        b.finish()
    }

    fn add(&mut self, text: &str, b: &mut RopeBuilder) {
        if text.len() < MIN_SHARED {
            b.own(text);
            return;
        }
        if let Some(s) = self.shared.get(text) {
            b.shared(s.clone());
            return;
        }
        if !self.seen.insert(self.hasher.hash_one(text)) {
            // Met before in another object: shared from now on.
            let s: Arc<str> = text.into();
            self.shared.insert(s.clone());
            b.shared(s);
            return;
        }
        if !matches!(text.as_bytes()[0], b'{' | b'[') {
            b.own(text);
            return;
        }
        let mut at = 0;
        for (start, end) in children(text) {
            b.own(&text[at..start]);
            self.add(&text[start..end], b);
            at = end;
        }
        b.own(&text[at..]);
    }
}

struct SharedPod {
    /// Typed metadata with `ownerReferences` and `creationTimestamp` as today.
    meta: ObjectMeta,
    /// `{"managedFields":…,"spec":…,"status":…}` as a rope.
    rest: Rope,
}

fn shared_pod(interner: &mut Interner, text: &str) -> SharedPod {
    let (meta, rest) = lz4_parts(text);
    SharedPod {
        rest: interner.rope(&rest),
        meta,
    }
}

// ---------------------------------------------------------------------------------------
// Candidate: LZ4 against a dictionary learned from the resource's first objects.

struct Lz4Pod {
    /// Typed metadata with `ownerReferences` and `creationTimestamp` as today.
    meta: ObjectMeta,
    /// `{"managedFields":…,"spec":…,"status":…}` compressed.
    rest: Box<[u8]>,
    rest_len: u32,
    dict: Arc<[u8]>,
}

impl Lz4Pod {
    fn rest(&self) -> String {
        let bytes =
            lz4_flex::block::decompress_with_dict(&self.rest, self.rest_len as usize, &self.dict)
                .expect("what was compressed");
        String::from_utf8(bytes).expect("UTF-8 in, UTF-8 out")
    }
}

/// The text compressed: the other metadata members that no metadata read needs, then the
/// top-level fields, as one JSON object.
fn lz4_parts(text: &str) -> (ObjectMeta, String) {
    let (mut obj, _) = DynamicObject::from_json_start(text).expect("a Pod");
    let mut rest = String::from("{");
    let kept = ["ownerReferences", "creationTimestamp"];
    let mut moved = Vec::new();
    for (k, v) in obj.metadata.other().entries() {
        if !kept.contains(&k.as_str()) {
            moved.push(k.clone());
            if rest.len() > 1 {
                rest.push(',');
            }
            rest.push_str(&serde_json::to_string(&k).unwrap());
            rest.push(':');
            rest.push_str(v.get());
        }
    }
    for k in &moved {
        obj.metadata.remove_other(k);
    }
    let fields = obj.fields.as_json();
    if fields.len() > 2 {
        if rest.len() > 1 {
            rest.push(',');
        }
        rest.push_str(&fields[1..fields.len() - 1]);
    }
    rest.push('}');
    (obj.metadata, rest)
}

fn lz4_pod(dict: &Arc<[u8]>, text: &str) -> Lz4Pod {
    let (meta, rest) = lz4_parts(text);
    let compressed = lz4_flex::block::compress_with_dict(rest.as_bytes(), dict);
    Lz4Pod {
        meta,
        rest: compressed.into_boxed_slice(),
        rest_len: rest.len() as u32,
        dict: dict.clone(),
    }
}

/// A dictionary of `size` bytes: the compressed parts of the first objects, one per
/// ReplicaSet met (different shapes teach more than many copies of one), the latest last
/// (LZ4 prefers near matches).
fn learn_dict(texts: &[String], size: usize) -> Arc<[u8]> {
    let mut dict = Vec::new();
    let mut owners = HashSet::new();
    for t in texts {
        let (meta, rest) = lz4_parts(t);
        let owner = meta
            .labels()
            .get("pod-template-hash")
            .unwrap_or("")
            .to_string();
        if !owners.insert(owner) {
            continue;
        }
        dict.extend_from_slice(rest.as_bytes());
        if dict.len() >= size {
            break;
        }
    }
    let start = dict.len().saturating_sub(size);
    dict[start..].into()
}

// ---------------------------------------------------------------------------------------

struct Row {
    name: String,
    heap_per_pod: f64,
    json_per_pod: f64,
    decode_ns: f64,
    meta_ns: f64,
    raw_ns: f64,
}

fn metadata_read(name: &str, rv: Option<&str>, app: Option<&str>, owner: usize) -> usize {
    name.len() + rv.map_or(0, str::len) + app.map_or(0, str::len) + owner
}

fn measure<T>(
    name: &str,
    texts: &[String],
    mut build: impl FnMut(&str) -> T,
    meta: impl Fn(&T) -> usize,
    raw: impl Fn(&T) -> usize,
) -> Row {
    let n = texts.len();
    let json: usize = texts.iter().map(String::len).sum();
    let before = heap();
    let start = Instant::now();
    let kept: Vec<T> = texts.iter().map(|t| build(t)).collect();
    let decode = start.elapsed();
    let held = heap() - before;
    let start = Instant::now();
    let mut sum = 0usize;
    for _ in 0..10 {
        for k in &kept {
            sum += meta(black_box(k));
        }
    }
    let meta_time = start.elapsed();
    let start = Instant::now();
    for k in &kept {
        sum += raw(black_box(k));
    }
    let raw_time = start.elapsed();
    black_box(sum);
    drop(kept);
    Row {
        name: name.to_string(),
        heap_per_pod: held as f64 / n as f64,
        json_per_pod: json as f64 / n as f64,
        decode_ns: decode.as_nanos() as f64 / n as f64,
        meta_ns: meta_time.as_nanos() as f64 / (10 * n) as f64,
        raw_ns: raw_time.as_nanos() as f64 / n as f64,
    }
}

/// The length of `status` in the text of a JSON object (read as today's raw fields read it).
fn status_len(rest: &str) -> usize {
    let (obj, _) = DynamicObject::from_json_start(&format!("{{\"metadata\":{{}},{}", &rest[1..]))
        .expect("a JSON object");
    obj.fields.get("status").map_or(0, |s| s.get().len())
}

fn meta_read(meta: &ObjectMeta) -> usize {
    let owner = Object::controller_owner(meta)
        .ok()
        .flatten()
        .map_or(0, |r| r.name.len() + r.uid.len());
    metadata_read(
        meta.name(),
        meta.resource_version(),
        meta.labels().get("app"),
        owner,
    )
}

fn run(texts: &[String], label: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    rows.push(measure(
        &format!("today{label}"),
        texts,
        |t| Arc::new(DynamicObject::from_json_start(t).expect("a Pod").0),
        |o| meta_read(&o.metadata),
        |o| o.fields.get("status").map_or(0, |s| s.get().len()),
    ));

    rows.push(measure(
        &format!("CompactObject{label}"),
        texts,
        |t| Arc::new(CompactObject::from_json_start(t).expect("a Pod").0),
        |o| {
            let owner = o
                .controller_owner()
                .ok()
                .flatten()
                .map_or(0, |r| r.name.len() + r.uid.len());
            metadata_read(o.name(), o.resource_version(), o.label("app"), owner)
        },
        |o| o.with_fields(|f| f.get("status").map_or(0, |s| s.get().len())),
    ));
    rows.push(measure(
        &format!("split (no compression){label}"),
        texts,
        |t| {
            let (meta, rest) = lz4_parts(t);
            Arc::new((meta, rest.into_boxed_str()))
        },
        |o| meta_read(&o.0),
        |o| status_len(&o.1),
    ));

    let mut interner = Interner::default();
    rows.push(measure(
        &format!("shared-subtrees{label}"),
        texts,
        |t| Arc::new(shared_pod(&mut interner, t)),
        |o| meta_read(&o.meta),
        |o| status_len(&o.rest.text()),
    ));
    drop(interner);

    for size in [16 * 1024, 60 * 1024] {
        let before = heap();
        let dict = learn_dict(texts, size);
        let dict_heap = heap() - before;
        let mut row = measure(
            &format!("lz4-dict {}K{label}", size / 1024),
            texts,
            |t| Arc::new(lz4_pod(&dict, t)),
            |o| meta_read(&o.meta),
            |o| status_len(&o.rest()),
        );
        row.heap_per_pod += dict_heap as f64 / texts.len() as f64;
        rows.push(row);
    }
    rows
}

fn main() {
    // Without `--bench` (under `cargo test --all-targets`, a debug build) a smoke test of 100
    // Pods: every step runs, the figures mean nothing.
    let default = if std::env::args().any(|a| a == "--bench") {
        10_000
    } else {
        100
    };
    let n: usize = std::env::var("INFORMER_BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    let w = Workload::new(1, n);
    let with: Vec<String> = (0..n)
        .map(|i| w.stored_json(i, 1000 + i as u64, true))
        .collect();
    let without: Vec<String> = (0..n)
        .map(|i| w.stored_json(i, 1000 + i as u64, false))
        .collect();
    println!(
        "{n} realistic Pods (testcluster::pods, seed 1, {} per ReplicaSet); load average {}",
        w.replicas,
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let mut rows = run(&with, "");
    rows.extend(run(&without, ", no managedFields"));
    println!(
        "{:<34} {:>10} {:>10} {:>7} {:>11} {:>11} {:>13}",
        "representation", "JSON/Pod", "heap/Pod", "ratio", "decode ns", "meta ns", "status raw ns"
    );
    for r in rows {
        println!(
            "{:<34} {:>10.0} {:>10.0} {:>6.2}x {:>11.0} {:>11.1} {:>13.0}",
            r.name,
            r.json_per_pod,
            r.heap_per_pod,
            r.heap_per_pod / r.json_per_pod,
            r.decode_ns,
            r.meta_ns,
            r.raw_ns
        );
    }
}
