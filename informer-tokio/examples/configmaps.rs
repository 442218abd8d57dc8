//! A ConfigMap informer with indices, on tokio. The example is `examples/configmaps.rs` at the
//! top of the repository, shared with informer-smol's: this file only picks the runtime.
//!
//! `KUBECONFIG=… cargo run -p informer-tokio --example configmaps`.

/// The runtime crate the shared source is written against.
use informer_tokio as runtime;

#[path = "../../examples/configmaps.rs"]
mod configmaps;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    configmaps::main()
}
