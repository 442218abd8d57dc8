//! The sample controller (a ConfigMap copier with a work queue, reconcile workers, typed writes
//! and leader election) on tokio. The controller is `examples/configmap_copier.rs` at the top of
//! the repository, shared with informer-smol's example: this file only picks the runtime.
//!
//! `KUBECONFIG=… cargo run -p informer-tokio --example configmap_copier -- SOURCE_NAMESPACE`.

/// The runtime crate the shared source is written against.
use informer_tokio as runtime;

#[path = "../../examples/configmap_copier.rs"]
pub mod copier;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    copier::main()
}
