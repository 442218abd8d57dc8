//! The informer-rs runtime adapter for tokio.
//!
//! Not built yet: this crate only re-exports [`informer_core`] so that code written against
//! the core compiles unchanged once the tokio driver lands. Nothing here runs a tokio task today.

pub use informer_core as core;
