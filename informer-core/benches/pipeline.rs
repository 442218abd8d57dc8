//! Core pipeline benchmark: `cargo xtask bench core`.
//!
//! Workload (issue 2): 100k ConfigMap-sized objects (about 1 KB of data each, 10 namespaces,
//! 3 labels) as an initial replace, then 1M watch events (60% modify, 20% add, 20% delete)
//! through DeltaFIFO → HandleDeltas → Indexer (namespace index + one label index) → 4 counting
//! handlers, following the driver loop (after every input, pop and deliver until idle).
//!
//! Objects are decoded/built outside the timed sections, in chunks, as a transport would hand
//! them over; the timed part is everything the informer does with them, including dropping the
//! replaced objects. Heap is measured with a counting global allocator.
//!
//! `pipeline_mimalloc` runs the same workload on mimalloc, to show how much of the cost is the
//! allocator freeing replaced objects.
//!
//! Instruction counts (steadier than time on a shared machine): build with
//! `cargo bench -p informer-core --bench pipeline --no-run`, then run the printed executable as
//! `INFORMER_BENCH=tiny INFORMER_BENCH_SCALE=10 valgrind --tool=callgrind
//! --toggle-collect='*feed*' <executable> --bench` and divide callgrind's "Collected" by the
//! events (100,000 at scale 10). `INFORMER_BENCH_HANDLERS=N` registers N handlers instead of 4
//! (compare 1, 4 and 16 for the cost of a handler that keeps up). Without `INFORMER_BENCH=tiny`,
//! a third section runs the minimal-object events with 1, 4 and 16 handlers and prints the CPU
//! time per event of each and the cost of each extra handler.
//!
//! `INFORMER_BENCH_FIRST_LIST` picks how the initial list is applied: `populate` (the default,
//! as the informer applies its first list: `Pipeline::populate`, straight to the store and the
//! handlers' shared log), `fifo` (DeltaFIFO, delivering after every pop) or `fifo-drained`
//! (every key popped before anything is delivered, as the informer did through the FIFO). Its
//! instructions: `--toggle-collect='*initial_list*'` instead of `'*feed*'`.
//!
//! After the events, each workload relists: every live object decoded anew (90% unchanged, 10%
//! changed, 1% gone while the watch was down, 1% new), applied and delivered; its instructions:
//! `--toggle-collect='*relist_now*'`.
//!
//! Last, each workload's floor: the same objects and events through nothing but a map of `Key`
//! to `Arc` (one lookup and one insert or remove per event, the old object dropped), what no
//! informer can do without on this machine; its instructions: `--toggle-collect='*floor_events*'`
//! (its timed function is named so that `'*feed*'` does not count it).
//!
//! Then the *bare informer*: the floor plus the workload's namespace and label indices (each a
//! map of value to a set of keys) and its handlers, each called in turn with every event's
//! notification, written out by hand the most direct way. No FIFO, no resourceVersion check, no
//! queue or log for a handler that falls behind, no journal for readers: what a hand-written
//! loop doing only the workload's work costs: a reference, not a bound (a cleverer loop does better).
//! Its instructions: `--toggle-collect='*bare_events*'`.
//!
//! `INFORMER_BENCH_DELIVERY` picks how the counting handlers get their notifications: `deliver`
//! (the default: inline, by reference, `Pipeline::deliver`, as a driver that runs its handlers
//! on its own thread) or `poll` (one owned notification at a time: `poll_notification`, then
//! `handler_done`, as a driver that hands each one to another thread).

// The counting global allocator needs `unsafe impl GlobalAlloc`; the core itself forbids unsafe.
#![allow(unsafe_code)]

include!("common/pipeline_body.rs");

const ALLOCATOR: &str = "system (glibc)";

#[global_allocator]
static GLOBAL: Counting<std::alloc::System> = Counting(std::alloc::System);
