//! # informer-tokio
//!
//! The Kubernetes informer on tokio, with the reqwest transport: [`informer_runtime`]'s API
//! with the runtime and transport filled in. `informer-smol` has the same names; a program
//! moves between them by changing its `use` line.
//!
//! ```no_run
//! use std::time::Duration;
//! use informer_tokio::{Config, DynamicObject, HandlerFns, Informer, Resource, client};
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

#[cfg(feature = "kube")]
mod kube_client;

#[cfg(feature = "admin")]
mod admin;
#[cfg(feature = "admin")]
pub use admin::serve_admin;
#[cfg(feature = "kube")]
pub use kube_client::{KubeBackend, kube_client};
#[cfg(feature = "kube")]
mod kube_object;
#[cfg(feature = "kube")]
pub use kube_object::Kube;

use std::time::Duration;

informer_runtime::runtime_crate_api! {
    runtime: Tokio,
    make_runtime: Tokio::default(),
    name: "tokio",
    backend: informer_http::ReqwestBackend,
    backend_doc: "reqwest"
}

/// A client for `config` on the reqwest backend.
pub fn client(config: Config) -> Result<Client, informer_http::ClientError> {
    informer_http::Client::reqwest(config)
}

/// Runs `future` to completion on a new multi-threaded tokio runtime (timers and I/O on): the
/// same call exists in `informer-smol`, so examples port by changing imports only. Inside
/// a program that already runs tokio, just `.await` instead.
pub fn block_on<F: std::future::Future>(future: F) -> std::io::Result<F::Output> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(future))
}

/// Sleeps for `duration` (tokio's timer).
pub async fn sleep(duration: Duration) {
    tokio::time::sleep(duration).await
}

/// The tokio [`Runtime`]. [`Tokio::default`] spawns on whichever
/// runtime is current where the informer spawns (its driver then spawns from inside it);
/// [`Tokio::current`] and [`Tokio::with_handle`] pin a runtime. Building an informer outside
/// any tokio runtime fails with [`Error::Spawn`].
#[derive(Clone, Debug, Default)]
pub struct Tokio {
    handle: Option<tokio::runtime::Handle>,
}

impl Tokio {
    /// Spawns on `handle`.
    pub fn with_handle(handle: tokio::runtime::Handle) -> Self {
        Tokio {
            handle: Some(handle),
        }
    }

    /// Spawns on the runtime current on this thread, if any (else on the one current at spawn
    /// time).
    pub fn current() -> Self {
        Tokio {
            handle: tokio::runtime::Handle::try_current().ok(),
        }
    }
}

impl informer_runtime::Runtime for Tokio {
    fn spawn(
        &self,
        future: informer_runtime::BoxFuture<'static, ()>,
    ) -> Result<(), informer_runtime::SpawnError> {
        let handle = match &self.handle {
            Some(h) => h.clone(),
            None => tokio::runtime::Handle::try_current()
                .map_err(|e| informer_runtime::SpawnError(e.to_string()))?,
        };
        drop(handle.spawn(future));
        Ok(())
    }

    fn sleep(&self, duration: Duration) -> informer_runtime::BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }

    /// Tokio's clock: on a runtime whose clock is paused (`tokio::time::pause`, tests with
    /// tokio's `test-util`), the virtual time its timers run on, so the deadlines the
    /// informer, the work queue and leader election compute agree with the sleeps they wait
    /// on; else (and off the runtime's threads) the std clock.
    fn now(&self) -> std::time::Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// The workspace README's Rust blocks, compiled as doctests so its quickstart stays true.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;

/// The user guide's Rust blocks (`docs/guide/*.md`), compiled as doctests like the README's.
#[cfg(doctest)]
mod guide_doctests {
    #[doc = include_str!("../../docs/guide/informers.md")]
    struct Informers;
    #[doc = include_str!("../../docs/guide/connecting.md")]
    struct Connecting;
    #[doc = include_str!("../../docs/guide/controllers.md")]
    struct Controllers;
    #[doc = include_str!("../../docs/guide/warm-restarts.md")]
    struct WarmRestarts;
    #[doc = include_str!("../../docs/guide/hostile-servers.md")]
    struct HostileServers;
    #[doc = include_str!("../../docs/guide/embedding.md")]
    struct Embedding;
    #[doc = include_str!("../../docs/guide/testing.md")]
    struct Testing;
    #[doc = include_str!("../../docs/guide/production.md")]
    struct Production;
}
