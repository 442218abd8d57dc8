//! The informer-rs runtime adapter for smol.
//!
//! Not built yet: this crate only re-exports [`informer_core`] so that code written against
//! the core compiles unchanged once the smol driver lands. Nothing here runs a smol task today.

pub use informer_core as core;
