//! # informer-smol
//!
//! The Kubernetes informer on smol, with informer-http's smol transport, and no tokio runtime:
//! [`informer_runtime`]'s API with the runtime and transport filled in. `informer-tokio` has
//! the same names; a program moves between them by changing its `use` line.
//!
//! ```no_run
//! use std::time::Duration;
//! use informer_smol::{Config, DynamicObject, HandlerFns, Informer, Resource, client};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = client(Config::infer()?)?;
//! let informer = Informer::<DynamicObject>::builder_for(&client, Resource::CONFIGMAPS)
//!     .namespace("default")
//!     .build()?;
//! informer.add_handler(HandlerFns::new().on_add(|cm: std::sync::Arc<DynamicObject>, _| {
//!     println!("configmap {}", cm.metadata.name())
//! }))?;
//! informer.start()?;
//! informer.wait_for_sync(Some(Duration::from_secs(30))).await?;
//! println!("{} configmaps cached", informer.store().len());
//! informer.shutdown().await;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]

#[cfg(feature = "admin")]
mod admin;
#[cfg(feature = "admin")]
pub use admin::serve_admin;

use std::time::Duration;

informer_runtime::runtime_crate_api! {
    runtime: Smol,
    make_runtime: Smol,
    name: "smol",
    backend: informer_http::SmolBackend,
    backend_doc: "HTTP/2 (the h2 crate) or HTTP/1.1 over smol's TCP and futures-rustls"
}

/// A client for `config` on the smol backend.
pub fn client(config: Config) -> Result<Client, informer_http::ClientError> {
    informer_http::Client::smol(config)
}

/// Runs `future` to completion on the current thread (`smol::block_on`; spawned tasks run on
/// smol's global executor). The same call exists in `informer-tokio`, so examples port by
/// changing imports only. Never fails; the `Result` matches informer-tokio's.
pub fn block_on<F: std::future::Future>(future: F) -> std::io::Result<F::Output> {
    Ok(smol::block_on(future))
}

/// Sleeps for `duration` (smol's timer).
pub async fn sleep(duration: Duration) {
    smol::Timer::after(duration).await;
}

/// The smol [`Runtime`]: tasks go to smol's global executor
/// (`smol::spawn`, whose threads start on first use; `SMOL_THREADS` sets how many), timers to
/// `async-io`'s reactor. Nothing needs to be running beforehand.
#[derive(Clone, Copy, Debug, Default)]
pub struct Smol;

impl informer_runtime::Runtime for Smol {
    fn spawn(
        &self,
        future: informer_runtime::BoxFuture<'static, ()>,
    ) -> Result<(), informer_runtime::SpawnError> {
        smol::spawn(future).detach();
        Ok(())
    }

    fn sleep(&self, duration: Duration) -> informer_runtime::BoxFuture<'static, ()> {
        Box::pin(async move {
            smol::Timer::after(duration).await;
        })
    }
}
