//! The sample controller (a ConfigMap copier with a work queue, reconcile workers, typed writes
//! and leader election) on smol. The controller is `examples/configmap_copier.rs` at the top of
//! the repository, shared with informer-tokio's example: this file only picks the runtime.
//!
//! `KUBECONFIG=… cargo run -p informer-smol --example smol_configmap_copier -- SOURCE_NAMESPACE`.

/// The runtime crate the shared source is written against.
use informer_smol as runtime;

#[path = "../../examples/configmap_copier.rs"]
pub mod copier;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    copier::main()
}
