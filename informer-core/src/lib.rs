//! # informer-core
//!
//! The sans-IO heart of informer-rs: the pieces of client-go `tools/cache` as pure state
//! machines. No clock, no I/O, no threads; time is passed in as [`Instant`](time::Instant),
//! work comes out as values.
//!
//! The one type to start from is [`SharedIndexInformer`]: list + watch of one resource, an
//! indexed cache, and handlers, behind one step/poll API. The modules group the rest by
//! concept:
//!
//! - [`object`]: what the informer needs from an object ([`Object`](object::Object)), keys,
//!   tombstones, [`DynamicObject`](object::DynamicObject) for any kind, metadata-only objects,
//!   label selectors.
//! - [`protocol`]: what the informer asks of a transport ([`Request`](protocol::Request)) and
//!   what a transport feeds back ([`Input`](protocol::Input), [`Failure`](protocol::Failure)).
//! - [`informer`]: the informer, its [`Reflector`](informer::reflector::Reflector) (list/watch
//!   and recovery) and the [consistency check](informer::consistency).
//! - [`cache`]: the parts the informer is built from, for those who assemble their own: the
//!   [`Indexer`](cache::indexer::Indexer) (store + named indices), the
//!   [`DeltaFifo`](cache::fifo::DeltaFifo), the [`Processor`](cache::processor::Processor)
//!   (handlers, resync, per-handler queues) and the [`Pipeline`](cache::pipeline::Pipeline)
//!   joining them.
//! - [`snapshot`]: the cache as bytes for warm restarts.
//! - `views` (feature `spin`): the readers' views of the cache, which never wait for a step.
//! - [`controller`]: the state machines a controller runs beside its informers: the
//!   [work queue](controller::workqueue), [leader election](controller::leaderelection) and
//!   [sharding](controller::shard) across replicas.
//! - `sim` (feature `sim`): a simulated, faulty API server and a checker, for tests.
//!
//! The crate is `#![no_std]` + `alloc`; the `std` feature (on by default) only enables std in
//! its dependencies. Two small no_std crates earn their place:
//!
//! - `heapless`: the Reflector's output queue is a fixed-size deque of
//!   [`MAX_OUTPUTS_PER_INPUT`](informer::reflector::MAX_OUTPUTS_PER_INPUT) entries, because the
//!   bound is part of the contract: one input produces at most that many outputs, and an input
//!   fed before the previous one's outputs were drained is refused
//!   ([`Undrained`](informer::reflector::Undrained)) rather than piling up requests the caller
//!   never saw. "Drain after every input" is a checked rule, not a comment.
//! - `spin` (feature `spin`): `views::Views` and `views::Publisher` keep two copies of the
//!   cache for readers on other cores or threads (left-right: the changes a step applied,
//!   [`SharedIndexInformer::take_changes`], are replayed on the copy no reader uses, then
//!   readers switch to it), so a reader never waits for a step and never sees half of one.
//!   `views::LockedInformer` and `views::CacheReader` package them for a no_std target; the
//!   runtime crates' `Store` reads them too. The locks are `spin`'s (no OS to park a thread on),
//!   but only ever tried: readers never wait for the writer.
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

mod hash;

pub mod cache;
pub mod controller;
pub mod informer;
pub mod object;
pub mod protocol;
pub mod rng;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod snapshot;
pub mod time;
#[cfg(any(test, feature = "spin"))]
pub mod views;

pub use informer::SharedIndexInformer;
