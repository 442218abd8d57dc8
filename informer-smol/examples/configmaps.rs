//! A ConfigMap informer with indices, on smol. The example is `examples/configmaps.rs` at the
//! top of the repository, shared with informer-tokio's: this file only picks the runtime.
//!
//! `KUBECONFIG=… cargo run -p informer-smol --example smol_configmaps`.

/// The runtime crate the shared source is written against.
use informer_smol as runtime;

#[path = "../../examples/configmaps.rs"]
mod configmaps;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    configmaps::main()
}
