//! Kubernetes list/watch protocol for informer-rs.
//!
//! Not built yet: this crate only re-exports [`informer_core`].

pub use informer_core as core;
