//! # informer-core
//!
//! The sans-IO heart of informer-rs: the pieces of client-go `tools/cache` as pure state
//! machines. No clock, no I/O, no threads; time is passed in as [`Instant`], work comes out as
//! values.
//!
//! - [`object`]: what the informer needs from an object ([`Object`]), keys ([`Key`]), tombstones
//!   ([`Tombstone`]) and [`DynamicObject`] for any kind.
//! - [`Indexer`]: the store plus named indices.
//! - [`DeltaFifo`]: per-key delta lists in arrival order, with the indexer as known objects.
//! - [`Processor`]: handlers, resync bookkeeping and bounded, coalescing per-handler queues.
//!
//! - [`SharedIndexInformer`]: a [`Reflector`] feeding the pipeline behind one step/poll API;
//!   [`protocol::Input`] is the one type for what a transport feeds back.
//! - [`snapshot`]: the cache as bytes for warm restarts ([`Snapshot`]); a resumed informer
//!   watches from the snapshot's resourceVersion instead of listing.
//!
//! The crate is `#![no_std]` + `alloc`; the `std` feature (on by default) only enables std in
//! its dependencies. Two small no_std crates earn their place:
//!
//! - `heapless`: the Reflector's output queue is a fixed-size deque of
//!   [`reflector::MAX_OUTPUTS_PER_INPUT`] entries, because the bound is part of the contract:
//!   one input produces at most that many outputs, and an input fed before the previous one's
//!   outputs were drained is refused ([`reflector::Undrained`]) rather than piling up requests
//!   the caller never saw. "Drain after every input" is a checked rule, not a comment.
//! - `spin` (feature `spin`): `shared::Views` and `shared::Publisher` keep two copies of the
//!   cache for readers on other cores or threads (left-right: the changes a step applied,
//!   [`SharedIndexInformer::take_changes`], are replayed on the copy no reader uses, then
//!   readers switch to it), so a reader never waits for a step and never sees half of one.
//!   `shared::LockedInformer` and `shared::CacheReader` package them for a no_std target; the
//!   runtime crates' `Store` reads them too. The locks are `spin`'s (no OS to park a thread on),
//!   but only ever tried: readers never wait for the writer.
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod consistency;
pub mod fifo;
mod hash;
mod impl_object;
pub mod indexer;
pub mod informer;
mod key;
pub mod leaderelection;
pub mod metadata;
pub mod object;
pub mod pipeline;
pub mod processor;
pub mod protocol;
pub mod raw;
pub mod reflector;
pub mod rng;
pub mod selector;
#[cfg(any(test, feature = "spin"))]
pub mod shared;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod snapshot;
mod straight;
pub mod string_map;
pub mod time;
pub mod workqueue;

pub use fifo::{Delta, DeltaFifo, DeltaType, Deltas};
pub use indexer::{IndexError, Indexer};
pub use informer::{InformerConfig, SharedIndexInformer};
pub use metadata::PartialObjectMetadata;
pub use object::{
    CompactString, DynamicObject, Key, KeyRef, Object, ObjectMeta, ObjectMetaParts,
    ObjectOrTombstone, Tombstone,
};
pub use pipeline::Pipeline;
pub use processor::{HandlerId, Notification, Processor};
pub use raw::{RawFields, RawFieldsRef};
pub use reflector::{Reflector, ReflectorConfig};
pub use selector::{Labels, Selector, SelectorError};
pub use snapshot::{Snapshot, SnapshotCodec, SnapshotError, SnapshotIdentity};
pub use string_map::{StringMap, StringMapRef};
pub use time::Instant;
