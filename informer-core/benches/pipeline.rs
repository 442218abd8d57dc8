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

// The counting global allocator needs `unsafe impl GlobalAlloc`; the core itself forbids unsafe.
#![allow(unsafe_code)]

include!("common/pipeline_body.rs");

const ALLOCATOR: &str = "system (glibc)";

#[global_allocator]
static GLOBAL: Counting<std::alloc::System> = Counting(std::alloc::System);
