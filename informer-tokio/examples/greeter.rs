//! The Greeting operator (a custom resource defined in Rust, reconciled by a `Controller` with
//! owned ConfigMaps, a finalizer, status, events and leader election) on tokio. The operator is
//! `examples/greeter.rs` at the top of the repository, shared with the other runtime crate's
//! example: this file only picks the runtime.
//!
//! `KUBECONFIG=… cargo run -p informer-tokio --example greeter -- NAMESPACE`;
//! `… --example greeter -- crd` prints its CRD.

/// The runtime crate the shared source is written against.
use informer_tokio as runtime;

#[path = "../../examples/greeter.rs"]
pub mod greeter;

#[path = "../../examples/greeter_main.rs"]
pub mod greeter_main;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    greeter_main::main()
}
