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
//! The crate is `#![no_std]` + `alloc`; the `std` feature (on by default) only enables std in
//! its dependencies.
#![no_std]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_auto_cfg))]

extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod fifo;
mod hash;
pub mod indexer;
pub mod informer;
pub mod object;
pub mod pipeline;
pub mod processor;
pub mod protocol;
pub mod raw;
pub mod reflector;
pub mod rng;
pub mod selector;
#[cfg(any(test, feature = "sim"))]
pub mod sim;
pub mod string_map;
pub mod time;

pub use fifo::{Delta, DeltaFifo, DeltaType, Deltas};
pub use indexer::{IndexError, Indexer};
pub use informer::{InformerConfig, SharedIndexInformer};
pub use object::{DynamicObject, Key, KeyRef, Object, ObjectMeta, ObjectOrTombstone, Tombstone};
pub use pipeline::Pipeline;
pub use processor::{HandlerId, Notification, Processor};
pub use raw::RawFields;
pub use reflector::{Reflector, ReflectorConfig};
pub use selector::{Labels, Selector, SelectorError};
pub use string_map::StringMap;
pub use time::Instant;
